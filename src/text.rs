//! Cutting text to a number of characters: the one way an upstream's
//! error, a record in the ring and an eval report's quote shorten what
//! they show, ending a cut text with `…`.

use std::borrow::Cow;

/// `s` when it has at most `max` characters, else its first `max` and a
/// `…`.
pub fn ellipsize(s: &str, max: usize) -> Cow<'_, str> {
    match s.char_indices().nth(max) {
        Some((at, _)) => Cow::Owned(format!("{}…", s.get(..at).unwrap_or_default())),
        None => Cow::Borrowed(s),
    }
}

/// Cuts `s` in place as [`ellipsize`] does; whether it was longer.
pub fn ellipsize_in_place(s: &mut String, max: usize) -> bool {
    match s.char_indices().nth(max) {
        Some((at, _)) => {
            s.truncate(at);
            s.push('…');
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cuts_at_characters_not_bytes() {
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
