//! Cutting text to a number of characters: the one way an answer's kept
//! text, a verdict's reading, an upstream's error, a record in the ring
//! and an eval report shorten what they hold or show ([`first_chars`]),
//! ending a text cut for show with `…` ([`ellipsize`]); and cutting it at
//! a number of bytes without splitting a character ([`ceil_char`]).

use std::borrow::Cow;

/// The first `max` characters of `s` (all of it when it is shorter).
pub fn first_chars(s: &str, max: usize) -> &str {
    if s.len() <= max {
        // No more characters than bytes: nothing to count.
        return s;
    }
    match s.char_indices().nth(max) {
        Some((at, _)) => s.get(..at).unwrap_or(s),
        None => s,
    }
}

/// `s` when it has at most `max` characters, else its first `max` and a
/// `…`.
pub fn ellipsize(s: &str, max: usize) -> Cow<'_, str> {
    let head = first_chars(s, max);
    if head.len() == s.len() {
        Cow::Borrowed(s)
    } else {
        Cow::Owned(format!("{head}…"))
    }
}

/// Cuts `s` in place as [`ellipsize`] does; whether it was longer.
pub fn ellipsize_in_place(s: &mut String, max: usize) -> bool {
    let kept = first_chars(s, max).len();
    if kept == s.len() {
        return false;
    }
    s.truncate(kept);
    s.push('…');
    true
}

/// The first char boundary of `s` at or past byte `n` (its length when
/// `n` is past it): a cut there keeps the character that crosses `n`.
pub fn ceil_char(s: &str, n: usize) -> usize {
    (n.min(s.len())..s.len())
        .find(|&i| s.is_char_boundary(i))
        .unwrap_or(s.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_byte_cut_keeps_the_char_that_crosses_it() {
        let up_to = |s: &'static str, n| &s[..ceil_char(s, n)];
        assert_eq!(up_to("hello", 9), "hello");
        assert_eq!(up_to("hello", 2), "he");
        // `é` takes bytes 1 and 2: a cut at 2 keeps it.
        assert_eq!(up_to("héllo", 2), "hé");
        assert_eq!(up_to("h😀!", 2), "h😀");
        assert_eq!(up_to("", 3), "");
        assert_eq!(&"h😀!"[ceil_char("h😀!", 0)..], "h😀!");
    }

    #[test]
    fn cuts_at_characters_not_bytes() {
        assert_eq!(first_chars("héllo", 2), "hé");
        assert_eq!(first_chars("héllo", 9), "héllo");
        // Five characters in six bytes: all of them, and one fewer.
        assert_eq!(first_chars("héllo", 5), "héllo");
        assert_eq!(first_chars("héllo", 4), "héll");
        assert_eq!(first_chars("hello", 5), "hello");
        assert_eq!(first_chars("", 0), "");
        assert_eq!(ellipsize("héllo", 5), "héllo");
        assert_eq!(ellipsize("héllo", 2), "hé…");
        assert_eq!(ellipsize("", 0), "");
        assert_eq!(ellipsize("ab", 0), "…");
        let mut s = String::from("日本語テキスト");
        assert!(ellipsize_in_place(&mut s, 3));
        assert_eq!(s, "日本語…");
        assert!(!ellipsize_in_place(&mut s, 4));
    }
}
