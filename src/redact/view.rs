//! [`View`]: a text with its line breaks taken out, so a secret wrapped
//! over several lines reads as one run, and the way back from a position
//! in the view to the text.
//!
//! A line break is `\n` or `\r`, or their JSON escapes (`\` then `n` or
//! `r`, as they appear inside a raw JSON body), together with the spaces
//! and tabs that indent the next line. A text without one is viewed as
//! it is, without a copy.

use std::borrow::Cow;
use std::ops::Range;

pub struct View<'a> {
    pub text: Cow<'a, [u8]>,
    /// (view offset, bytes removed before it so far), one per place bytes
    /// were removed, in order.
    gaps: Vec<(usize, usize)>,
}

impl<'a> View<'a> {
    pub fn new(raw: &'a [u8]) -> View<'a> {
        let Some(first) = next_break(raw, 0) else {
            return View {
                text: Cow::Borrowed(raw),
                gaps: Vec::new(),
            };
        };
        let mut text = Vec::with_capacity(raw.len());
        let mut gaps = Vec::new();
        let mut removed = 0;
        let mut at = 0;
        let mut next = Some(first);
        while let Some((start, len)) = next {
            text.extend_from_slice(&raw[at..start]);
            let mut end = start + len;
            loop {
                while matches!(raw.get(end), Some(b' ' | b'\t')) {
                    end += 1;
                }
                match break_at(raw, end) {
                    Some(n) => end += n,
                    None => break,
                }
            }
            removed += end - start;
            gaps.push((text.len(), removed));
            at = end;
            next = next_break(raw, at);
        }
        text.extend_from_slice(&raw[at..]);
        View {
            text: Cow::Owned(text),
            gaps,
        }
    }

    /// Bytes removed before view offset `v` (before the byte there).
    fn removed_before(&self, v: usize) -> usize {
        let i = self.gaps.partition_point(|(g, _)| *g <= v);
        i.checked_sub(1).map_or(0, |i| self.gaps[i].1)
    }

    /// The bytes of the text that a non-empty view range covers (line
    /// breaks inside it included, those around it not).
    pub fn to_raw(&self, r: Range<usize>) -> Range<usize> {
        if self.gaps.is_empty() {
            return r;
        }
        let start = r.start + self.removed_before(r.start);
        let last = r.end.saturating_sub(1).max(r.start);
        start..last + self.removed_before(last) + 1
    }
}

/// The length of the line break at `at`, if one starts there.
fn break_at(raw: &[u8], at: usize) -> Option<usize> {
    match raw.get(at)? {
        b'\n' | b'\r' => Some(1),
        b'\\' if matches!(raw.get(at + 1), Some(b'n' | b'r')) => Some(2),
        _ => None,
    }
}

/// The first line break at or after `from`: where, and its length.
fn next_break(raw: &[u8], mut from: usize) -> Option<(usize, usize)> {
    while let Some(i) = memchr::memchr3(b'\n', b'\r', b'\\', raw.get(from..)?) {
        let at = from + i;
        if let Some(n) = break_at(raw, at) {
            return Some((at, n));
        }
        // A backslash escapes the next byte (`\\` is one backslash).
        from = at + if raw[at] == b'\\' { 2 } else { 1 };
    }
    None
}
