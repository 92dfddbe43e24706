//! [`Matcher`]: finds the runs of secret in a text. One Aho-Corasick pass
//! (ASCII case-insensitive) over the text's [`View`] finds a window of a
//! [`Source`]; the run is then grown both ways for as long as the text
//! keeps following that source (and, for a base64 run, over the partial
//! groups at its ends), and the search goes on after it.

use std::ops::Range;

use aho_corasick::{AhoCorasick, Input, MatchKind};

use super::patterns::{Patterns, Place, Source, is_base64, is_word};
use super::view::View;

/// Characters of a base64 group that may mix the secret's bits with its
/// neighbours'.
const PARTIAL_GROUP: usize = 3;

pub struct Matcher {
    ac: AhoCorasick,
    sources: Vec<Source>,
    places: Vec<Vec<Place>>,
}

impl Matcher {
    /// `None` when there is nothing to look for.
    pub fn new(p: Patterns) -> Result<Option<Matcher>, aho_corasick::BuildError> {
        if p.patterns.is_empty() {
            return Ok(None);
        }
        let ac = AhoCorasick::builder()
            .ascii_case_insensitive(true)
            .match_kind(MatchKind::LeftmostLongest)
            .build(&p.patterns)?;
        Ok(Some(Matcher {
            ac,
            sources: p.sources,
            places: p.places,
        }))
    }

    /// The byte ranges of `raw` that hold a run of secret: in order,
    /// disjoint, widened to whole UTF-8 characters.
    pub fn runs(&self, raw: &[u8]) -> Vec<Range<usize>> {
        let view = View::new(raw);
        let hay: &[u8] = &view.text;
        let mut out: Vec<Range<usize>> = Vec::new();
        let mut at = 0;
        let mut floor = 0;
        while at < hay.len() {
            let Some(m) = self.ac.find(Input::new(hay).span(at..hay.len())) else {
                break;
            };
            let best = self.places[m.pattern()]
                .iter()
                .filter_map(|p| self.grow(hay, m.range(), *p, floor))
                .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end));
            let Some(run) = best else {
                at = m.start() + 1;
                continue;
            };
            let raw_run = widen(raw, view.to_raw(run.clone()));
            match out.last_mut() {
                Some(last) if last.end >= raw_run.start => last.end = last.end.max(raw_run.end),
                _ => out.push(raw_run),
            }
            floor = run.end;
            at = run.end;
        }
        out
    }

    /// The whole run around a window match at `m`, read as a piece of the
    /// source at `place`; it does not reach back before `floor`.
    fn grow(
        &self,
        hay: &[u8],
        m: Range<usize>,
        place: Place,
        floor: usize,
    ) -> Option<Range<usize>> {
        let src = self.sources.get(place.source as usize)?;
        let (mut start, mut end) = (m.start, m.end);
        if src.whole {
            let free_before = start == 0 || !is_word(hay[start - 1]);
            let free_after = hay.get(end).is_none_or(|b| !is_word(*b));
            return (free_before && free_after).then_some(start..end);
        }
        let src = &src.bytes;
        let mut k = place.offset as usize + (end - start);
        while k < src.len() && end < hay.len() && hay[end].eq_ignore_ascii_case(&src[k]) {
            end += 1;
            k += 1;
        }
        let mut k = place.offset as usize;
        while k > 0 && start > floor && hay[start - 1].eq_ignore_ascii_case(&src[k - 1]) {
            start -= 1;
            k -= 1;
        }
        if self.sources[place.source as usize].base64 {
            for _ in 0..PARTIAL_GROUP {
                if start > floor && is_base64(hay[start - 1]) {
                    start -= 1;
                }
            }
            for _ in 0..PARTIAL_GROUP {
                if hay.get(end).is_some_and(|b| is_base64(*b)) {
                    end += 1;
                }
            }
            // Padding.
            for _ in 0..2 {
                if hay.get(end) == Some(&b'=') {
                    end += 1;
                }
            }
        }
        Some(start..end)
    }
}

/// `r` widened to the UTF-8 characters it cuts into.
fn widen(raw: &[u8], mut r: Range<usize>) -> Range<usize> {
    let cont = |b: u8| b & 0xC0 == 0x80;
    while r.start > 0 && raw.get(r.start).is_some_and(|b| cont(*b)) {
        r.start -= 1;
    }
    while raw.get(r.end).is_some_and(|b| cont(*b)) {
        r.end += 1;
    }
    r
}

/// `raw` with each run replaced by `with`.
pub fn replace(raw: &[u8], runs: &[Range<usize>], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(raw.len());
    let mut at = 0;
    for r in runs {
        out.extend_from_slice(&raw[at..r.start]);
        out.extend_from_slice(with);
        at = r.end;
    }
    out.extend_from_slice(&raw[at..]);
    out
}
