//! The one way a string goes into `report.html`: every character that
//! means something in HTML (text or a quoted attribute) is escaped, so
//! what a model wrote, a task's text or a route's name stays text. And
//! the bound on how much of one string the page shows.

/// `s` as HTML text or a double- or single-quoted attribute value: `&`,
/// `<`, `>`, `"`, `'` become entities (and NUL, which browsers drop,
/// becomes U+FFFD).
pub fn escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + s.len() / 8);
    for c in s.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            '\0' => out.push('\u{fffd}'),
            c => out.push(c),
        }
    }
    out
}

/// The first `max` characters of `s`, and how many were left out.
pub fn cut(s: &str, max: usize) -> (&str, usize) {
    let head = crate::text::first_chars(s, max);
    (
        head,
        s.get(head.len()..).map_or(0, |rest| rest.chars().count()),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_special_character_is_an_entity() {
        assert_eq!(
            escape(r#"<a href="x" title='y'>&</a>"#),
            "&lt;a href=&quot;x&quot; title=&#39;y&#39;&gt;&amp;&lt;/a&gt;"
        );
        assert_eq!(escape("plain text, ünïcode ✓"), "plain text, ünïcode ✓");
        assert_eq!(escape("a\0b"), "a\u{fffd}b");
        // Already-escaped text is escaped again: it shows as written.
        assert_eq!(escape("&lt;"), "&amp;lt;");
    }

    #[test]
    fn cut_counts_characters_not_bytes() {
        assert_eq!(cut("héllo", 2), ("hé", 3));
        assert_eq!(cut("héllo", 5), ("héllo", 0));
        assert_eq!(cut("héllo", 9), ("héllo", 0));
        assert_eq!(cut("", 0), ("", 0));
    }
}
