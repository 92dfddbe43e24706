//! The seam of a mid-stream failover: where the text the client already
//! has ends and a continuation begins. A model asked to continue often
//! repeats some of what it was given, or starts the answer over; [`Seam`]
//! holds back the start of a continuation until it can tell where the new
//! text begins, and drops what came before it.
//!
//! The continuation's first [`WINDOW_WORDS`] words are compared with the
//! partial text, word by word (a word is what whitespace separates; two
//! words are the same when they agree once lowercased and stripped of the
//! punctuation around them), and the first of these rules that applies
//! decides ([`Join`]):
//!
//! 1. **Tail**: the partial's last 5 to 8 words (as many as it has, the
//!    longest run found first) occur anywhere in the window: the
//!    continuation is cut after them, and what follows is kept. The last
//!    word may be the start of the continuation's word when the cut split
//!    it (`…storied hist` + `…storied history that` keeps `ory that`).
//! 2. **Restart**: the continuation starts the answer over (its first
//!    words, at least 3 or all the partial has, repeat the partial's
//!    first words, though the rest may be paraphrased). Only what follows
//!    the repeated answer is kept: the continuation is cut after the
//!    partial's last words (the longest run of up to 4 of them found, the
//!    occurrence nearest the partial's length in words), or, when none of
//!    them is found, after as many words as the partial has.
//! 3. **Overlap**: the longest prefix of the continuation that the partial
//!    *ends with*, beginning in the partial at a word boundary (the
//!    partial's start, after whitespace or punctuation, or on such a
//!    character). `"…the quick bro"` + `"brown fox"` → `"wn fox"`;
//!    `"…a banana"` + `"ana split"` keeps `"ana split"` (`ana` starts
//!    inside a word). A continuation that starts with whitespace after a
//!    partial that does not treats the partial's last word as whole, so
//!    its overlap must end at a word boundary too (`"a k"` + `" ka"` is
//!    kept whole).
//! 4. Otherwise nothing is dropped.
//!
//! Whitespace the kept text starts with is dropped when the partial
//! already ends with whitespace. Text is held back until the window is
//! full, a rule 1 match of the longest possible tail is found, the
//! continuation ends, or [`MAX_HELD`] bytes are held; a partial too short
//! for rule 1 holds text only while it may still be a repeat.

/// How far back into the partial text an overlap is looked for (bytes).
pub const MAX_OVERLAP: usize = 2048;
/// Words at the start of a continuation compared with the partial text.
pub const WINDOW_WORDS: usize = 40;
/// Most bytes of a continuation held back while the seam is undecided.
pub const MAX_HELD: usize = 8 * 1024;
/// The longest and shortest tail (words) looked for anywhere in the window.
const TAIL_MAX: usize = 8;
const TAIL_MIN: usize = 5;
/// Words of the partial's start a restart repeats (or all it has).
const RESTART_MIN: usize = 3;
/// The longest run of the partial's last words that places its end in a
/// restart.
const ANCHOR_MAX: usize = 4;

/// How a continuation was joined to the text before it (the
/// `midstream_failover` event's `seam`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Join {
    /// Nothing repeated: the continuation is kept whole.
    None,
    /// The continuation began by repeating the partial's last characters.
    Overlap,
    /// The partial's last words were found in the continuation's start.
    Tail,
    /// The continuation started the answer over.
    Restart,
}

impl Join {
    pub fn as_str(self) -> &'static str {
        match self {
            Join::None => "none",
            Join::Overlap => "overlap",
            Join::Tail => "tail",
            Join::Restart => "restart",
        }
    }
}

/// Whether `c` separates words (whitespace or punctuation).
fn separates(c: char) -> bool {
    c.is_whitespace() || c.is_ascii_punctuation() || (!c.is_alphanumeric() && c != '_')
}

/// Whether the suffix of `partial` from byte `at` begins at a word
/// boundary.
fn boundary(partial: &str, at: usize) -> bool {
    let before = partial[..at].chars().next_back();
    let first = partial[at..].chars().next();
    match (before, first) {
        (None, _) => true,
        (Some(b), Some(f)) => separates(b) || separates(f),
        (Some(_), None) => false,
    }
}

/// Whether `cont` has a word boundary at byte `at` (or ends there).
fn ends_word(cont: &str, at: usize) -> bool {
    cont[at..].chars().next().is_none_or(separates)
}

/// Bytes to drop from the start of `cont`, a continuation of `partial`:
/// the longest prefix of `cont` that `partial` ends with, starting at a
/// word boundary of `partial` (rule 3 of the module docs); leading
/// whitespace of `cont` counts too when `partial` already ends with
/// whitespace.
pub fn overlap(partial: &str, cont: &str) -> usize {
    // A continuation that starts with whitespace after a partial that
    // does not took the partial's last word as whole: only whole words
    // of it can be a repeat (`"a k"` + `" ka"` is new text, not `" k"`
    // repeated).
    let cut_word_ok =
        !cont.starts_with(char::is_whitespace) || partial.ends_with(char::is_whitespace);
    let floor = partial.len().saturating_sub(MAX_OVERLAP);
    let longest = (floor..partial.len())
        .filter(|&at| partial.is_char_boundary(at))
        .map(|at| &partial[at..])
        .find(|tail| {
            cont.starts_with(tail)
                && boundary(partial, partial.len() - tail.len())
                && (cut_word_ok || ends_word(cont, tail.len()))
        })
        .map_or(0, str::len);
    if longest > 0 {
        return longest;
    }
    if partial.ends_with(char::is_whitespace) {
        return cont.len() - cont.trim_start().len();
    }
    0
}

/// Whether more continuation text could still make a longer overlap:
/// `held` occurs in the partial's tail, so it may yet be repeated text.
fn may_grow(partial: &str, held: &str) -> bool {
    let mut floor = partial.len().saturating_sub(MAX_OVERLAP);
    while !partial.is_char_boundary(floor) {
        floor += 1;
    }
    let tail = &partial[floor..];
    held.len() < tail.len() && (held.trim().is_empty() || tail.contains(held))
}

/// A word's comparison key: lowercased, without the punctuation around it.
fn key(raw: &str) -> String {
    raw.trim_matches(|c: char| !c.is_alphanumeric())
        .to_lowercase()
}

/// A word of the partial text.
#[derive(Debug, Clone)]
struct PWord {
    key: String,
    raw: String,
}

/// A word of the continuation, with its bytes in it.
#[derive(Debug)]
struct CWord<'a> {
    key: String,
    raw: &'a str,
    start: usize,
    /// Followed by whitespace: no more text can change it.
    complete: bool,
}

/// The words of `s` (those with a key), at most `max`.
fn cont_words(s: &str, max: usize) -> Vec<CWord<'_>> {
    let mut out = Vec::new();
    let mut start = None;
    for (i, c) in s.char_indices().chain(std::iter::once((s.len(), ' '))) {
        match (c.is_whitespace(), start) {
            (false, None) => start = Some(i),
            (true, Some(b)) => {
                start = None;
                let raw = &s[b..i];
                let k = key(raw);
                if !k.is_empty() {
                    out.push(CWord {
                        key: k,
                        raw,
                        start: b,
                        complete: i < s.len(),
                    });
                    if out.len() == max {
                        break;
                    }
                }
            }
            _ => {}
        }
    }
    out
}

fn partial_words<'a>(it: impl Iterator<Item = &'a str>, max: usize) -> Vec<PWord> {
    it.filter_map(|raw| {
        let k = key(raw);
        (!k.is_empty()).then(|| PWord {
            key: k,
            raw: raw.to_owned(),
        })
    })
    .take(max)
    .collect()
}

/// Bytes of `w` that begin with `p`, compared case-insensitively.
fn prefix_len(w: &str, p: &str) -> Option<usize> {
    let mut wc = w.char_indices();
    for pc in p.chars() {
        let (_, c) = wc.next()?;
        if !c.to_lowercase().eq(pc.to_lowercase()) {
            return None;
        }
    }
    Some(wc.next().map_or(w.len(), |(i, _)| i))
}

/// Where, in the continuation, a match of the partial's word `p` (its
/// last, when `last`) with `w` ends; `None` when they differ. The last
/// word may be the start of `w` (text after it kept) when that is
/// punctuation, or when `mid_word` (the partial may end inside a word).
fn word_match(p: &PWord, w: &CWord<'_>, last: bool, mid_word: bool) -> Option<usize> {
    let whole = w.start + w.raw.len();
    if !last {
        return (p.key == w.key).then_some(whole);
    }
    if let Some(n) = prefix_len(w.raw, &p.raw) {
        let rest_is_word = w.raw[n..].starts_with(char::is_alphanumeric);
        if !rest_is_word || mid_word {
            return Some(w.start + n);
        }
    }
    (p.key == w.key).then_some(whole)
}

/// Every place `pat` (the partial's last words) occurs in `ws`: the index
/// of its first word and where its match ends in the continuation.
fn occurrences(pat: &[PWord], ws: &[CWord<'_>], mid_word: bool) -> Vec<(usize, usize)> {
    let Some(n) = pat.len().checked_sub(1) else {
        return Vec::new();
    };
    // A lone word is matched whole: a prefix of one word alone is too
    // weak a sign.
    let mid_word = mid_word && n > 0;
    (0..ws.len().saturating_sub(n))
        .filter_map(|i| {
            let mut end = 0;
            for (j, p) in pat.iter().enumerate() {
                end = word_match(p, &ws[i + j], j == n, mid_word)?;
            }
            Some((i, end))
        })
        .collect()
}

/// One continuation's seam: text is held back until the seam is known,
/// then passed on trimmed.
#[derive(Debug)]
pub struct Seam {
    /// What the client has so far.
    partial: String,
    /// The partial's first words (for a restart).
    head: Vec<PWord>,
    /// The partial's last words (for a tail), in order.
    tail: Vec<PWord>,
    /// Words in the partial.
    count: usize,
    /// The partial may end inside a word.
    mid_word: bool,
    /// Continuation text held back while the seam is undecided.
    held: String,
    /// Characters trimmed at the seam and how, once decided.
    decided: Option<(usize, Join)>,
}

impl Seam {
    pub fn new(partial: String) -> Self {
        let head = partial_words(partial.split_whitespace(), RESTART_MIN);
        let mut tail = partial_words(partial.split_whitespace().rev(), TAIL_MAX);
        tail.reverse();
        let count = partial
            .split_whitespace()
            .filter(|w| !key(w).is_empty())
            .count();
        let mid_word = partial.chars().next_back().is_some_and(|c| !separates(c));
        Seam {
            partial,
            head,
            tail,
            count,
            mid_word,
            held: String::new(),
            decided: None,
        }
    }

    /// Takes continuation text; returns what may go to the client now
    /// (empty while the seam is undecided).
    pub fn push(&mut self, text: &str) -> String {
        if self.decided.is_some() {
            return text.to_owned();
        }
        self.held.push_str(text);
        if self.holds() {
            return String::new();
        }
        self.decide()
    }

    /// The continuation ends (or carries something other than text):
    /// whatever is held goes out, trimmed.
    pub fn flush(&mut self) -> String {
        if self.decided.is_some() {
            return String::new();
        }
        self.decide()
    }

    /// Whether the partial may end inside a word: it does not end with a
    /// separator, and the continuation does not start with whitespace
    /// (which takes the partial's last word as whole).
    fn mid_word(&self) -> bool {
        self.mid_word && !self.held.starts_with(char::is_whitespace)
    }

    /// Whether more text could still change the seam.
    fn holds(&self) -> bool {
        if self.held.len() >= MAX_HELD {
            return false;
        }
        let ws = cont_words(&self.held, WINDOW_WORDS + 1);
        let full = ws.iter().filter(|w| w.complete).count() >= WINDOW_WORDS;
        if self.count >= TAIL_MIN {
            let longest = self.tail.len();
            return !full && self.tail_cut(&ws, longest..=longest).is_none();
        }
        // Too short for a tail: held only while it may be a repeat of
        // the partial's end, or of its start.
        let restart_may = ws
            .iter()
            .zip(&self.head)
            .all(|(w, p)| p.key.starts_with(&w.key));
        !full && (may_grow(&self.partial, &self.held) || restart_may)
    }

    /// Where a run of the partial's last `k` words (`k` in `ks`, longest
    /// first) first ends in the window.
    fn tail_cut(&self, ws: &[CWord<'_>], ks: std::ops::RangeInclusive<usize>) -> Option<usize> {
        if self.count < TAIL_MIN {
            return None;
        }
        let ws = &ws[..ws.len().min(WINDOW_WORDS)];
        ks.filter(|&k| k <= self.tail.len()).rev().find_map(|k| {
            let pat = &self.tail[self.tail.len() - k..];
            occurrences(pat, ws, self.mid_word()).first().map(|o| o.1)
        })
    }

    /// Where a continuation that starts the answer over is cut (rule 2);
    /// `None` when it does not.
    fn restart_cut(&self, ws: &[CWord<'_>]) -> Option<usize> {
        let ws = &ws[..ws.len().min(WINDOW_WORDS)];
        let need = RESTART_MIN.min(self.count);
        if need == 0 || ws.len() < need {
            return None;
        }
        let mut end = 0;
        for (i, (p, w)) in self.head.iter().zip(ws).take(need).enumerate() {
            let last = i + 1 == self.count;
            end = word_match(p, w, last, last && self.mid_word())?;
        }
        if need == self.count {
            // The whole partial is repeated at the start.
            return Some(end);
        }
        let distance = |i: usize, k: usize| (i + k).abs_diff(self.count);
        for k in (1..=ANCHOR_MAX.min(self.tail.len())).rev() {
            let pat = &self.tail[self.tail.len() - k..];
            let best = occurrences(pat, ws, self.mid_word())
                .into_iter()
                .min_by_key(|&(i, _)| distance(i, k));
            if let Some((_, cut)) = best {
                return Some(cut);
            }
        }
        // Nothing of the partial's end is found: as many words as it has.
        let w = &ws[self.count.min(ws.len()) - 1];
        Some(w.start + w.raw.len())
    }

    /// Bytes of the held text to drop, and how it was joined.
    fn cut(&self) -> (usize, Join) {
        let ws = cont_words(&self.held, WINDOW_WORDS);
        let (cut, join) = if let Some(c) = self.tail_cut(&ws, TAIL_MIN..=TAIL_MAX) {
            (c, Join::Tail)
        } else if let Some(c) = self.restart_cut(&ws) {
            (c, Join::Restart)
        } else {
            match overlap(&self.partial, &self.held) {
                0 => (0, Join::None),
                n => {
                    // Whitespace alone dropped after whitespace is no
                    // repeat worth naming.
                    let join = if self.held[..n].trim().is_empty() {
                        Join::None
                    } else {
                        Join::Overlap
                    };
                    (n, join)
                }
            }
        };
        let mut cut = cut;
        if join != Join::Overlap && self.partial.ends_with(char::is_whitespace) {
            let rest = &self.held[cut..];
            cut += rest.len() - rest.trim_start().len();
        }
        (cut, join)
    }

    fn decide(&mut self) -> String {
        let (cut, join) = self.cut();
        self.decided = Some((self.held[..cut].chars().count(), join));
        let out = self.held.split_off(cut);
        self.held.clear();
        out
    }

    /// Characters trimmed at the seam, once decided.
    pub fn trimmed(&self) -> Option<usize> {
        self.decided.map(|d| d.0)
    }

    /// How the continuation was joined, once decided.
    pub fn join(&self) -> Option<Join> {
        self.decided.map(|d| d.1)
    }
}

#[cfg(test)]
mod tests;
