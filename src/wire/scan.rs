//! A strict JSON scanner for the quick reads of upstream payloads
//! (`quick`, `chunk`): it walks a document once, as serde_json reads it,
//! borrows every string as it is spelt and allocates nothing, and can say
//! where a member sits ([`Fields::cut`]) so it can be left out by copying.
//!
//! It never takes what serde_json would refuse. Each method answers
//! `None` where serde_json would fail, and also wherever the scanner does
//! not follow serde_json's rules exactly (nesting deeper than
//! [`MAX_DEPTH`], an escaped string serde_json would refuse as text), so
//! that a caller falls back to serde_json, whose answer is the one that
//! counts.
//!
//! What it checks is what serde_json checks of a value it ignores:
//! string escapes (a `\u` takes four hex digits, whatever they spell), no
//! control characters in strings, the number grammar of RFC 8259, the
//! literals, and nothing but whitespace after the document.

use std::borrow::Cow;

/// How deep the scanner follows arrays and objects (serde_json refuses
/// documents nested past 128).
const MAX_DEPTH: u32 = 100;

/// A position in a document.
pub struct Scan<'a> {
    text: &'a str,
    i: usize,
    depth: u32,
}

/// A string as it is spelt, quotes included.
#[derive(Clone, Copy)]
pub struct Spelt<'a> {
    quoted: &'a str,
    escaped: bool,
}

impl<'a> Spelt<'a> {
    /// Its text: borrowed when it has no escapes; with escapes, undone
    /// by serde_json itself (`None` where serde_json refuses it as text:
    /// a lone surrogate).
    #[inline]
    pub fn text(&self) -> Option<Cow<'a, str>> {
        if self.escaped {
            return self.unescaped().map(Cow::Owned);
        }
        self.quoted
            .get(1..self.quoted.len().saturating_sub(1))
            .map(Cow::Borrowed)
    }

    #[cold]
    fn unescaped(&self) -> Option<String> {
        serde_json::from_str(self.quoted).ok()
    }

    /// Whether it is valid as text (what serde_json checks of a string
    /// it reads rather than ignores).
    pub fn is_text(&self) -> bool {
        !self.escaped || self.text().is_some()
    }
}

/// The bytes that end a string's plain run: a quote, a backslash, a
/// control character.
const fn stops() -> [bool; 256] {
    let mut t = [false; 256];
    let mut c = 0;
    while c < 0x20 {
        t[c] = true;
        c += 1;
    }
    t[b'"' as usize] = true;
    t[b'\\' as usize] = true;
    t
}
const STOPS: [bool; 256] = stops();

/// Whether JSON spells `c` as it is in a string (it is no stop:
/// [`STOPS`]).
#[inline]
pub fn is_plain(c: u8) -> bool {
    !STOPS[usize::from(c)]
}

/// The bytes of the word `w` (eight bytes, read little-endian) that JSON
/// does not spell as they are in a string (a control character, `"`,
/// `\\`), each marked by its high bit. The lowest marked byte is the
/// first such byte; a borrow may mark bytes above it too.
#[inline]
pub fn escape_marks(w: u64) -> u64 {
    const ONES: u64 = u64::MAX / 255;
    const HIGH: u64 = ONES << 7;
    let control = w.wrapping_sub(ONES * 0x20) & !w;
    let quote = w ^ (ONES * u64::from(b'"'));
    let quote = quote.wrapping_sub(ONES) & !quote;
    let backslash = w ^ (ONES * u64::from(b'\\'));
    let backslash = backslash.wrapping_sub(ONES) & !backslash;
    (control | quote | backslash) & HIGH
}

/// Where the run of plain string bytes from `b[i]` ends: at a stop
/// ([`STOPS`]), or at the end of `b`. Eight bytes at a time while eight
/// are left (serde_json's own way), then one at a time.
#[inline]
fn plain_run(b: &[u8], mut i: usize) -> usize {
    while let Some(word) = b.get(i..i + 8).and_then(|w| <[u8; 8]>::try_from(w).ok()) {
        let stops = escape_marks(u64::from_le_bytes(word));
        if stops != 0 {
            return i + (stops.trailing_zeros() / 8) as usize;
        }
        i += 8;
    }
    while b.get(i).copied().is_some_and(is_plain) {
        i += 1;
    }
    i
}

/// Reads the escape at `b[i]` (its backslash): where it ends.
fn escape(b: &[u8], i: usize) -> Option<usize> {
    match b.get(i + 1)? {
        b'"' | b'\\' | b'/' | b'b' | b'f' | b'n' | b'r' | b't' => Some(i + 2),
        b'u' => {
            let hex = b.get(i + 2..i + 6)?;
            hex.iter().all(u8::is_ascii_hexdigit).then_some(i + 6)
        }
        _ => None,
    }
}

impl<'a> Scan<'a> {
    pub fn new(text: &'a str) -> Self {
        Scan {
            text,
            i: 0,
            depth: 0,
        }
    }

    fn bytes(&self) -> &'a [u8] {
        self.text.as_bytes()
    }

    /// The next byte after whitespace, not taken.
    #[inline]
    pub fn peek(&mut self) -> Option<u8> {
        let b = self.bytes();
        while let Some(&c) = b.get(self.i) {
            if !matches!(c, b' ' | b'\n' | b'\r' | b'\t') {
                return Some(c);
            }
            self.i += 1;
        }
        None
    }

    /// Takes `c`, the next byte after whitespace.
    #[inline]
    fn eat(&mut self, c: u8) -> Option<()> {
        (self.peek()? == c).then(|| self.i += 1)
    }

    /// Takes `null` when it comes next: whether it did.
    #[inline]
    pub fn null(&mut self) -> Option<bool> {
        if self.peek()? != b'n' {
            return Some(false);
        }
        self.literal(b"null")?;
        Some(true)
    }

    fn literal(&mut self, word: &[u8]) -> Option<()> {
        let end = self.i + word.len();
        (self.bytes().get(self.i..end)? == word).then(|| self.i = end)
    }

    fn deeper(&mut self) -> Option<()> {
        self.depth += 1;
        (self.depth <= MAX_DEPTH).then_some(())
    }

    /// Takes `{`: the object's members follow, read with
    /// [`Self::member`].
    #[inline]
    pub fn open_object(&mut self) -> Option<()> {
        self.eat(b'{')?;
        self.deeper()
    }

    /// Takes `[`: the array's elements follow, read with
    /// [`Self::element`].
    #[inline]
    pub fn open_array(&mut self) -> Option<()> {
        self.eat(b'[')?;
        self.deeper()
    }

    /// The next member's key (its `:` taken), or `None` at the object's
    /// end (its `}` taken). `first`: no member has been read yet.
    #[inline]
    pub fn member(&mut self, first: &mut bool) -> Option<Option<Spelt<'a>>> {
        if self.close(b'}', first)? {
            return Some(None);
        }
        let key = self.string()?;
        self.eat(b':')?;
        Some(Some(key))
    }

    /// Whether another element follows (its `,` taken), or the array
    /// ended (its `]` taken). `first`: no element has been read yet.
    #[inline]
    pub fn element(&mut self, first: &mut bool) -> Option<bool> {
        Some(!self.close(b']', first)?)
    }

    /// Takes the closing `end` (true), or the comma before the next
    /// item (none before the first).
    #[inline]
    fn close(&mut self, end: u8, first: &mut bool) -> Option<bool> {
        let c = self.peek()?;
        if c == end {
            self.i += 1;
            self.depth = self.depth.saturating_sub(1);
            return Some(true);
        }
        if !std::mem::replace(first, false) {
            self.eat(b',')?;
        }
        Some(false)
    }

    /// A string, as it is spelt.
    #[inline]
    pub fn string(&mut self) -> Option<Spelt<'a>> {
        self.eat(b'"')?;
        let (b, start) = (self.bytes(), self.i - 1);
        let mut i = self.i;
        let mut escaped = false;
        loop {
            i = plain_run(b, i);
            match b.get(i)? {
                b'"' => break,
                b'\\' => {
                    escaped = true;
                    i = escape(b, i)?;
                }
                _ => return None,
            }
        }
        self.i = i + 1;
        let quoted = self.text.get(start..self.i)?;
        Some(Spelt { quoted, escaped })
    }

    /// A number spelt as a plain count that fits a `u64`; `None` for
    /// anything else (a sign, a fraction, an exponent, a leading zero).
    pub fn count(&mut self) -> Option<u64> {
        self.peek()?;
        let b = self.bytes();
        let start = self.i;
        while b.get(self.i).is_some_and(u8::is_ascii_digit) {
            self.i += 1;
        }
        let digits = self.text.get(start..self.i)?;
        let plain = !digits.is_empty() && (digits == "0" || !digits.starts_with('0'));
        let fraction = matches!(b.get(self.i), Some(b'.' | b'e' | b'E'));
        if !plain || fraction {
            return None;
        }
        digits.parse().ok()
    }

    /// Skips one value, checking it as serde_json checks a value it
    /// ignores.
    pub fn skip(&mut self) -> Option<()> {
        match self.peek()? {
            b'"' => self.string().map(drop),
            b'{' => {
                self.open_object()?;
                let mut first = true;
                while self.member(&mut first)?.is_some() {
                    self.skip()?;
                }
                Some(())
            }
            b'[' => {
                self.open_array()?;
                let mut first = true;
                while self.element(&mut first)? {
                    self.skip()?;
                }
                Some(())
            }
            b't' => self.literal(b"true"),
            b'f' => self.literal(b"false"),
            b'n' => self.literal(b"null"),
            _ => self.number(),
        }
    }

    /// A number, by RFC 8259's grammar.
    fn number(&mut self) -> Option<()> {
        let b = self.bytes();
        let digits = |i: &mut usize| {
            let start = *i;
            while b.get(*i).is_some_and(u8::is_ascii_digit) {
                *i += 1;
            }
            (*i > start).then_some(())
        };
        if b.get(self.i) == Some(&b'-') {
            self.i += 1;
        }
        match b.get(self.i)? {
            b'0' => self.i += 1,
            b'1'..=b'9' => digits(&mut self.i)?,
            _ => return None,
        }
        if b.get(self.i) == Some(&b'.') {
            self.i += 1;
            digits(&mut self.i)?;
        }
        if matches!(b.get(self.i), Some(b'e' | b'E')) {
            self.i += 1;
            if matches!(b.get(self.i), Some(b'+' | b'-')) {
                self.i += 1;
            }
            digits(&mut self.i)?;
        }
        Some(())
    }

    /// The document is over: nothing but whitespace is left.
    pub fn end(&mut self) -> Option<()> {
        self.peek().is_none().then_some(())
    }
}

/// The members of an object read as serde reads a struct with the fields
/// `names`: each member's field in turn, its value next. A key that is no
/// field has its value skipped; a field named twice is refused, as
/// serde's derived structs refuse it.
pub struct Fields<const N: usize> {
    names: &'static [&'static str; N],
    seen: [bool; N],
    first: bool,
    /// Where the object's members begin (just after its `{`).
    opened: usize,
    /// Where the member [`Self::next`] last returned begins: just after
    /// the value (or the `{`) before it.
    start: usize,
}

impl<const N: usize> Fields<N> {
    /// Takes the object's `{`.
    #[inline]
    pub fn open(s: &mut Scan<'_>, names: &'static [&'static str; N]) -> Option<Self> {
        s.open_object()?;
        Some(Fields {
            names,
            seen: [false; N],
            first: true,
            opened: s.i,
            start: s.i,
        })
    }

    /// The next member's field (its index in `names`), or `None` at the
    /// object's end.
    #[inline]
    pub fn next(&mut self, s: &mut Scan<'_>) -> Option<Option<usize>> {
        loop {
            let start = s.i;
            let Some(key) = s.member(&mut self.first)? else {
                return Some(None);
            };
            let key = key.text()?;
            match self.names.iter().position(|f| *f == key) {
                Some(n) if std::mem::replace(&mut self.seen[n], true) => return None,
                Some(n) => {
                    self.start = start;
                    return Some(Some(n));
                }
                None => s.skip()?,
            }
        }
    }

    /// The bytes of the member [`Self::next`] last returned, its value
    /// just read, with the comma that goes with it (the one before it,
    /// or for the first member the one after it, if any): what is left
    /// out to leave the object without it, as valid JSON.
    pub fn cut(&self, s: &mut Scan<'_>) -> Option<std::ops::Range<usize>> {
        let end = s.i;
        if self.start != self.opened {
            return Some(self.start..end);
        }
        Some(match s.peek()? {
            b',' => self.start..s.i + 1,
            _ => self.start..end,
        })
    }
}
