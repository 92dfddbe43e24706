//! The seam of a mid-stream failover: where the text the client already
//! has ends and a continuation begins. A model asked to continue often
//! repeats the last words it was given (whole, or from the start of a word
//! the cut split); [`overlap`] finds that repeat so it is not shown twice,
//! and [`Seam`] holds back the start of a continuation until it can tell.
//!
//! The rule, chosen so it never eats text the model meant as new: the
//! overlap is the longest prefix of the continuation that the partial text
//! *ends with*, and it must begin in the partial at a word boundary (the
//! partial's start, after whitespace or punctuation, or on such a
//! character). `"…the quick bro"` + `"brown fox"` → `"wn fox"`;
//! `"…the quick bro"` + `"quick brown fox"` → `"wn fox"`;
//! `"…a banana"` + `"ana split"` keeps `"ana split"` (`ana` starts inside
//! a word). A continuation that starts with whitespace after a partial
//! that does not treats the partial's last word as whole, so its overlap
//! must end at a word boundary too (`"a k"` + `" ka"` is kept whole).
//! Whitespace the continuation starts with is dropped when the partial
//! already ends with whitespace.

/// How far back into the partial text an overlap is looked for (bytes).
pub const MAX_OVERLAP: usize = 2048;

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
/// word boundary of `partial` (see the module docs); leading whitespace of
/// `cont` counts too when `partial` already ends with whitespace.
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
    let floor = partial.len().saturating_sub(MAX_OVERLAP);
    let mut floor = floor;
    while !partial.is_char_boundary(floor) {
        floor += 1;
    }
    let tail = &partial[floor..];
    held.len() < tail.len() && (held.trim().is_empty() || tail.contains(held))
}

/// One continuation's seam: text is held back until the overlap is known,
/// then passed on trimmed.
#[derive(Debug)]
pub struct Seam {
    /// What the client has so far.
    partial: String,
    /// Continuation text held back while it may still be a repeat.
    held: String,
    /// Characters trimmed at the seam, once decided.
    trimmed: Option<usize>,
}

impl Seam {
    pub fn new(partial: String) -> Self {
        Seam {
            partial,
            held: String::new(),
            trimmed: None,
        }
    }

    /// Takes continuation text; returns what may go to the client now
    /// (empty while the overlap is undecided).
    pub fn push(&mut self, text: &str) -> String {
        if self.trimmed.is_some() {
            return text.to_owned();
        }
        self.held.push_str(text);
        if may_grow(&self.partial, &self.held) {
            return String::new();
        }
        self.decide()
    }

    /// The continuation ends (or carries something other than text):
    /// whatever is held goes out, trimmed.
    pub fn flush(&mut self) -> String {
        if self.trimmed.is_some() {
            return String::new();
        }
        self.decide()
    }

    fn decide(&mut self) -> String {
        let cut = overlap(&self.partial, &self.held);
        self.trimmed = Some(self.held[..cut].chars().count());
        let out = self.held.split_off(cut);
        self.held.clear();
        out
    }

    /// Characters trimmed at the seam, once decided.
    pub fn trimmed(&self) -> Option<usize> {
        self.trimmed
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn overlaps_are_trimmed_at_word_boundaries() {
        let cases = [
            ("the quick bro", "brown fox", "wn fox"),
            ("the quick bro", "quick brown fox", "wn fox"),
            ("the quick bro", "the quick brown fox", "wn fox"),
            ("the quick ", "quick brown", "brown"),
            ("the quick ", " brown", "brown"),
            ("the quick", " brown fox", " brown fox"),
            ("the quick", "quick brown", " brown"),
            ("Hello, world.", " world. Next", " Next"),
            ("Hello, world.", "Next one", "Next one"),
            ("a banana", "ana split", "ana split"),
            ("it costs 1", "12 dollars", "2 dollars"),
            ("", "anything", "anything"),
            ("x", "", ""),
            ("naïve café", "café au lait", " au lait"),
        ];
        for (partial, cont, want) in cases {
            let cut = overlap(partial, cont);
            assert_eq!(&cont[cut..], want, "{partial:?} + {cont:?}");
        }
    }

    #[test]
    fn the_seam_holds_text_until_it_can_tell() {
        let mut s = Seam::new("one two thr".into());
        assert_eq!(s.push("two"), "");
        assert_eq!(s.push(" thr"), "");
        assert_eq!(s.push("ee four"), "ee four");
        assert_eq!(s.trimmed(), Some(7));
        assert_eq!(s.push(" five"), " five");
        let mut s = Seam::new("one two".into());
        assert_eq!(s.push(" three"), " three");
        assert_eq!(s.trimmed(), Some(0));
        let mut s = Seam::new("one two".into());
        assert_eq!(s.push("two"), "");
        assert_eq!(s.flush(), "");
        assert_eq!(s.trimmed(), Some(3));
    }

    fn words() -> impl Strategy<Value = Vec<String>> {
        prop::collection::vec("[a-z]{1,8}[,.]?", 2..40)
    }

    proptest! {
        /// A model that repeats 0..3 whole words before the cut (and the
        /// rest of a word the cut split) splices back to the full text.
        #[test]
        fn a_repeating_continuation_splices_exactly(
            ws in words(),
            cut in 1usize..400,
            repeat in 0usize..3,
        ) {
            let full = ws.join(" ");
            let cut = cut.min(full.len() - 1).max(1);
            let partial = &full[..cut];
            // Back to the start of the word the cut is in, then `repeat`
            // words more.
            let mut start = partial.rfind(' ').map_or(0, |i| i + 1);
            for _ in 0..repeat {
                start = full[..start.saturating_sub(1)].rfind(' ').map_or(0, |i| i + 1);
            }
            let cont = &full[start..];
            let mut seam = Seam::new(partial.to_owned());
            let mut out = String::new();
            for piece in cont.split_inclusive(' ') {
                out.push_str(&seam.push(piece));
            }
            out.push_str(&seam.flush());
            prop_assert_eq!(format!("{partial}{out}"), full);
        }

        /// A continuation that picks up exactly where the partial stops
        /// (at a word's end; words not repeated) loses nothing. (A cut
        /// inside a word whose start is also a word, "a" + "ab", cannot be
        /// told from a repeat: the repeat wins, as models repeat.)
        #[test]
        fn a_clean_continuation_is_kept_whole(ws in words(), cut in 1usize..40) {
            let mut seen = std::collections::HashSet::new();
            prop_assume!(ws.iter().all(|w| seen.insert(w.trim_end_matches([',', '.']).to_owned())));
            let cut = cut.min(ws.len() - 1);
            let partial = ws[..cut].join(" ");
            let full = ws.join(" ");
            let cont = &full[partial.len()..];
            let mut seam = Seam::new(partial.to_owned());
            let mut out = seam.push(cont);
            out.push_str(&seam.flush());
            prop_assert_eq!(format!("{partial}{out}"), full);
        }
    }
}
