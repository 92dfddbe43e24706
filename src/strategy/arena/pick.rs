//! A vote's `pick`, read forgivingly: case-insensitive, trimmed, with the
//! words people actually type.

/// What a vote says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    A,
    B,
    Tie,
    /// Closes the arena without a vote.
    Skip,
}

/// Every accepted word, by what it means (for the 400 that lists them).
pub const WORDS: &[(Pick, &[&str])] = &[
    (Pick::A, &["A", "pick A", "left"]),
    (Pick::B, &["B", "pick B", "right"]),
    (Pick::Tie, &["tie", "equal", "both", "neither", "t"]),
    (Pick::Skip, &["skip", "cancel", "abort", "never mind"]),
];

impl Pick {
    /// The pick a word means, if any.
    pub fn read(text: &str) -> Option<Pick> {
        let said = text.split_whitespace().collect::<Vec<_>>().join(" ");
        WORDS
            .iter()
            .find(|(_, words)| words.iter().any(|w| w.eq_ignore_ascii_case(&said)))
            .map(|(p, _)| *p)
    }

    /// As stored: `a`, `b`, `tie`, `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pick::A => "a",
            Pick::B => "b",
            Pick::Tie => "tie",
            Pick::Skip => "skip",
        }
    }

    /// The accepted words, quoted, for an error message.
    pub fn accepted() -> String {
        WORDS
            .iter()
            .flat_map(|(_, w)| w.iter())
            .map(|w| format!("\"{w}\""))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_word_in_any_case_and_spacing() {
        for (pick, words) in WORDS {
            for w in *words {
                assert_eq!(Pick::read(w), Some(*pick), "{w}");
                assert_eq!(
                    Pick::read(&format!("  {}  ", w.to_uppercase())),
                    Some(*pick)
                );
            }
        }
        assert_eq!(Pick::read("Pick   a"), Some(Pick::A));
        assert_eq!(Pick::read("NEVER  MIND"), Some(Pick::Skip));
        for no in ["", "c", "pick", "a b", "left!", "tied"] {
            assert_eq!(Pick::read(no), None, "{no}");
        }
    }
}
