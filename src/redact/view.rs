//! [`View`]: a text as a secret in it reads, and the way back from a
//! position in the view to the text. Line breaks are taken out, so a
//! secret wrapped over several lines reads as one run; escapes are read
//! as the characters they stand for, so an escaped secret reads as it is.
//!
//! A line break is `\n` or `\r\n`, or the JSON escapes of `\n` or `\r`
//! (`\` then `n` or `r`, as they appear inside a raw JSON body), together
//! with the spaces, tabs and further breaks that follow it. An escape is
//! JSON's `\uXXXX` or `\/`, or URL encoding's `%XX`, of a printable ASCII
//! character (keys are ASCII). A text without either is viewed as it is,
//! without a copy.

use std::borrow::Cow;
use std::ops::Range;

pub struct View<'a> {
    pub text: Cow<'a, [u8]>,
    /// (view offset, bytes removed before it so far), one per place bytes
    /// were removed, in order. An escape's extra bytes count as removed
    /// after the character it stands for.
    gaps: Vec<(usize, usize)>,
    /// (view offset, extra bytes) of each character read from an escape,
    /// in order.
    escapes: Vec<(usize, usize)>,
}

/// What is at a place of the text.
enum Special {
    /// A line break of this many bytes.
    Break(usize),
    /// An escape of this many bytes, for this character.
    Escape(usize, u8),
}

impl<'a> View<'a> {
    pub fn new(raw: &'a [u8]) -> View<'a> {
        let Some(first) = next_special(raw, 0) else {
            return View {
                text: Cow::Borrowed(raw),
                gaps: Vec::new(),
                escapes: Vec::new(),
            };
        };
        let mut text = Vec::with_capacity(raw.len());
        let mut gaps = Vec::new();
        let mut escapes = Vec::new();
        let mut removed = 0;
        let mut at = 0;
        let mut next = Some(first);
        while let Some((start, special)) = next {
            text.extend_from_slice(&raw[at..start]);
            match special {
                Special::Break(len) => {
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
                }
                Special::Escape(len, c) => {
                    escapes.push((text.len(), len - 1));
                    text.push(c);
                    removed += len - 1;
                    gaps.push((text.len(), removed));
                    at = start + len;
                }
            }
            next = next_special(raw, at);
        }
        text.extend_from_slice(&raw[at..]);
        View {
            text: Cow::Owned(text),
            gaps,
            escapes,
        }
    }

    /// Bytes removed before view offset `v` (before the byte there).
    fn removed_before(&self, v: usize) -> usize {
        let i = self.gaps.partition_point(|(g, _)| *g <= v);
        i.checked_sub(1).map_or(0, |i| self.gaps[i].1)
    }

    /// The bytes of the text the byte at view offset `v` was read from.
    fn width(&self, v: usize) -> usize {
        match self.escapes.binary_search_by_key(&v, |e| e.0) {
            Ok(i) => 1 + self.escapes[i].1,
            Err(_) => 1,
        }
    }

    /// The bytes of the text that a non-empty view range covers (line
    /// breaks inside it included, those around it not; escapes whole).
    pub fn to_raw(&self, r: Range<usize>) -> Range<usize> {
        if self.gaps.is_empty() {
            return r;
        }
        let start = r.start + self.removed_before(r.start);
        let last = r.end.saturating_sub(1).max(r.start);
        start..last + self.removed_before(last) + self.width(last)
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

/// The value of hex digits.
fn hex(digits: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(digits).ok()?;
    u32::from_str_radix(s, 16).ok()
}

/// A printable ASCII character (what a key is made of).
fn printable(c: u32) -> Option<u8> {
    u8::try_from(c).ok().filter(|b| (0x20..0x7f).contains(b))
}

/// The escape at `at` (starting with `\` or `%`), if one starts there.
fn escape_at(raw: &[u8], at: usize) -> Option<(usize, u8)> {
    match (raw.get(at)?, raw.get(at + 1)?) {
        (b'\\', b'/') => Some((2, b'/')),
        (b'\\', b'u') => {
            let digits = raw.get(at + 2..at + 6)?;
            Some((6, printable(hex(digits)?)?))
        }
        (b'%', _) => {
            let digits = raw.get(at + 1..at + 3)?;
            Some((3, printable(hex(digits)?)?))
        }
        _ => None,
    }
}

/// The first line break or escape at or after `from`, found in one pass
/// (a lone `\r` is not looked for: `\r\n` is found at its `\n`).
fn next_special(raw: &[u8], mut from: usize) -> Option<(usize, Special)> {
    loop {
        let at = from + memchr::memchr3(b'\n', b'\\', b'%', raw.get(from..)?)?;
        if raw[at] == b'\n' {
            return Some(match at > from && raw[at - 1] == b'\r' {
                true => (at - 1, Special::Break(2)),
                false => (at, Special::Break(1)),
            });
        }
        if let Some(n) = break_at(raw, at) {
            return Some((at, Special::Break(n)));
        }
        if let Some((n, c)) = escape_at(raw, at) {
            return Some((at, Special::Escape(n, c)));
        }
        // A backslash escapes the next byte (`\\` is one backslash).
        from = at + if raw[at] == b'\\' { 2 } else { 1 };
    }
}
