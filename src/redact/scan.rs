//! [`Matcher`]: finds the runs of secret in a text. [`Grams`] points at
//! the places of the text's [`View`] where a piece of a [`Source`] is; from
//! each, the run is grown both ways for as long as the text keeps
//! following that source (ASCII case-insensitively; for a base64 run, also
//! over the partial groups at its ends), kept if it counts
//! ([`Source::min_len`], [`Source::min_end`]), and the search goes on
//! after it.

use std::ops::Range;

use super::grams::{Grams, Place};
use super::patterns::{Patterns, Source, is_base64};
use super::view::View;

/// Characters of a base64 group that may mix the secret's bits with its
/// neighbours'.
const PARTIAL_GROUP: usize = 3;

pub struct Matcher {
    grams: Grams,
    sources: Vec<Source>,
    /// The longest source: how much text a run may span.
    longest: usize,
}

impl Matcher {
    /// `None` when there is nothing to look for.
    pub fn new(p: Patterns) -> Option<Matcher> {
        if p.sources.is_empty() {
            return None;
        }
        Some(Matcher {
            grams: Grams::new(&p.sources),
            longest: p.sources.iter().map(|s| s.bytes.len()).max().unwrap_or(0),
            sources: p.sources,
        })
    }

    /// The length of the longest source (a secret's longest form).
    pub fn longest(&self) -> usize {
        self.longest
    }

    /// The byte ranges of `raw` that hold a run of secret: in order,
    /// disjoint, widened to whole UTF-8 characters.
    pub fn runs(&self, raw: &[u8]) -> Vec<Range<usize>> {
        let view = View::new(raw);
        let hay: &[u8] = &view.text;
        let mut runs: Vec<Range<usize>> = Vec::new();
        // The end of the last run: a run grows no further back.
        let mut floor = 0;
        for (at, places) in self.grams.hits(hay) {
            if at < floor {
                continue;
            }
            let best = places
                .iter()
                .filter_map(|p| self.grow(hay, at, *p, floor))
                .reduce(|a, b| a.start.min(b.start)..a.end.max(b.end));
            if let Some(run) = best {
                floor = run.end;
                runs.push(run);
            }
        }
        let mut out: Vec<Range<usize>> = Vec::with_capacity(runs.len());
        for r in runs {
            let r = widen(raw, view.to_raw(r));
            match out.last_mut() {
                Some(last) if last.end >= r.start => last.end = last.end.max(r.end),
                _ => out.push(r),
            }
        }
        out
    }

    /// The run around the 4 bytes at `at`, read as a piece of the source
    /// at `place`, if it counts; it does not reach back before `floor`.
    fn grow(&self, hay: &[u8], at: usize, place: Place, floor: usize) -> Option<Range<usize>> {
        let src = self.sources.get(place.source as usize)?;
        let bytes = &src.bytes;
        let (mut start, mut end) = (at, at);
        let (mut k0, mut k1) = (place.offset as usize, place.offset as usize);
        while k1 < bytes.len() && end < hay.len() && hay[end].eq_ignore_ascii_case(&bytes[k1]) {
            end += 1;
            k1 += 1;
        }
        while k0 > 0 && start > floor && hay[start - 1].eq_ignore_ascii_case(&bytes[k0 - 1]) {
            start -= 1;
            k0 -= 1;
        }
        if k1 - k0 < src.min_len || k1 < src.min_end {
            return None;
        }
        if src.base64 {
            for _ in 0..PARTIAL_GROUP {
                if start > floor && is_base64(hay[start - 1]) {
                    start -= 1;
                }
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
