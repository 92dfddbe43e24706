//! A vote's `pick`, read forgivingly (case-insensitive, trimmed, with the
//! words people actually type), or its `ranking` (every letter of the
//! arena once, best first), as the outcome the store keeps
//! ([`crate::store::arena`]).

use serde_json::Value;

use crate::store::arena::{MAX_CONTESTANTS, letter};

/// What a `pick` says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// The contestant at this position (A is 0) beats every other.
    Letter(usize),
    /// All tie.
    Tie,
    /// All were bad (a tie in ratings, kept as its own outcome).
    Bad,
    /// Closes the arena without a vote.
    Skip,
}

/// Every accepted word, by what it means (for the 400 that lists them).
pub const WORDS: &[(Pick, &[&str])] = &[
    (Pick::Letter(0), &["A", "pick A", "left"]),
    (Pick::Letter(1), &["B", "pick B", "right"]),
    (Pick::Letter(2), &["C", "pick C"]),
    (Pick::Letter(3), &["D", "pick D"]),
    (Pick::Letter(4), &["E", "pick E"]),
    (Pick::Letter(5), &["F", "pick F"]),
    (Pick::Tie, &["tie", "equal", "both", "neither", "t"]),
    (Pick::Bad, &["bad", "all bad", "both bad"]),
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

    /// As stored: `a` … `f`, `tie`, `bad`, `skip`.
    pub fn as_str(self) -> &'static str {
        match self {
            Pick::Letter(i) => ["a", "b", "c", "d", "e", "f"]
                .get(i)
                .copied()
                .unwrap_or("a"),
            Pick::Tie => "tie",
            Pick::Bad => "bad",
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

/// The upper-case letter of position `i`, as clients name it.
pub fn shown(i: usize) -> String {
    letter(i).to_ascii_uppercase().to_string()
}

/// A `ranking`: a list of 2 to 6 letters, each once, that are exactly the
/// first letters of the alphabet (so, for an arena of its length, every
/// letter of it), best first; the positions, or why not.
pub fn ranking(v: &Value) -> Result<Vec<usize>, String> {
    let hint = "Send \"ranking\" as a list of the arena's letters, each once, best first \
                (e.g. [\"B\", \"A\", \"C\"])";
    let list = v.as_array().ok_or_else(|| format!("{hint}."))?;
    if list.len() < 2 || list.len() > MAX_CONTESTANTS {
        return Err(format!("{hint}: 2 to {MAX_CONTESTANTS} letters."));
    }
    let mut out = Vec::with_capacity(list.len());
    for item in list {
        let said = item.as_str().map(str::trim).unwrap_or_default();
        let mut chars = said.chars();
        let at = match (chars.next(), chars.next()) {
            (Some(c), None) if c.is_ascii_alphabetic() => {
                usize::from(c.to_ascii_lowercase() as u8 - b'a')
            }
            _ => {
                let shown: String = item.to_string().chars().take(40).collect();
                return Err(format!("{hint}: {shown} is not a letter."));
            }
        };
        if at >= list.len() {
            return Err(format!(
                "{hint}: a ranking of {} names {}, so it names letters A to {}.",
                list.len(),
                list.len(),
                shown(list.len() - 1)
            ));
        }
        if out.contains(&at) {
            return Err(format!("{hint}: {} is named twice.", shown(at)));
        }
        out.push(at);
    }
    Ok(out)
}

/// A ranking as stored: `rank:` and its letters, best first.
pub fn rank_outcome(ranking: &[usize]) -> String {
    let mut s = String::from("rank:");
    s.extend(ranking.iter().map(|&i| letter(i)));
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

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
        assert_eq!(Pick::read("Pick   a"), Some(Pick::Letter(0)));
        assert_eq!(Pick::read("c"), Some(Pick::Letter(2)));
        assert_eq!(Pick::Letter(5).as_str(), "f");
        assert_eq!(Pick::read("Both  BAD"), Some(Pick::Bad));
        assert_eq!(Pick::read("NEVER  MIND"), Some(Pick::Skip));
        for no in ["", "g", "pick", "a b", "left!", "tied", "bad bad"] {
            assert_eq!(Pick::read(no), None, "{no}");
        }
    }

    #[test]
    fn a_ranking_is_every_first_letter_once() {
        assert_eq!(ranking(&json!(["B", " a ", "c"])), Ok(vec![1, 0, 2]));
        assert_eq!(rank_outcome(&[1, 0, 2]), "rank:bac");
        for (bad, why) in [
            (json!("BAC"), "list"),
            (json!(["A"]), "2 to 6"),
            (json!(["A", "B", "C", "D", "E", "F", "G"]), "2 to 6"),
            (json!(["A", "A"]), "twice"),
            (json!(["A", "C"]), "letters A to B"),
            (json!(["A", 1]), "not a letter"),
            (json!(["A", "BB"]), "not a letter"),
        ] {
            let e = ranking(&bad).unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }
}
