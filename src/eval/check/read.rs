//! Reading what an answer says, the way models write it: its last number
//! ("-1,234.5", "3.5e2", "42%"), the letter it chooses ("(B)", "Answer: B",
//! "**B**", and two letters as a final answer), its JSON (the whole answer,
//! a fenced ```json block, or the first {...} object).

use serde_json::Value;

use crate::wire::numbers;

/// How many `{` are tried for the first JSON object.
const MAX_STARTS: usize = 32;

/// The answer's last number ([`numbers::last_number`]); `None` when it
/// has none.
pub(super) fn last_number(text: &str) -> Option<f64> {
    numbers::last_number(text)?.value()
}

/// The letter an answer chooses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Choice {
    Letter(char),
    /// Two or more different letters given as the answer ("B or C").
    Several(Vec<char>),
    None,
}

/// Words that introduce the chosen letter, last one first.
const MARKERS: &[&str] = &["answer", "option", "choice"];
/// Words between a marker and its letter ("the answer is option B").
const FILLER: &[&str] = &[
    "is",
    "would",
    "should",
    "be",
    "option",
    "choice",
    "letter",
    "final",
    "correct",
    "the",
    "clearly",
    "probably",
    "likely",
    "definitely",
];

/// Reads the chosen letter: after the last "answer"/"option"/"choice"
/// that is followed by one, else at the start of the answer or of its
/// last line, else the one letter written as "(B)" or "**B**".
pub(super) fn choice(text: &str) -> Choice {
    let lower = text.to_ascii_lowercase();
    let mut marks: Vec<usize> = MARKERS
        .iter()
        .flat_map(|m| lower.match_indices(m).map(|(at, _)| at + m.len()))
        .collect();
    marks.sort_unstable();
    for &at in marks.iter().rev() {
        let rest = skip_filler(&text[at..]);
        if let Some(found) = letters(rest, false) {
            return found;
        }
    }
    let mut lines = text.lines().map(str::trim).filter(|l| !l.is_empty());
    for line in [text.trim(), lines.next_back().unwrap_or("")] {
        if let Some(found) = letters(line, true) {
            return found;
        }
    }
    decorated(text)
}

/// `text` past separators and filler words (": ", "is", "would be", "-").
fn skip_filler(mut text: &str) -> &str {
    loop {
        let t = text.trim_start_matches(|c: char| c.is_whitespace() || ":=-–—".contains(c));
        let word_end = t
            .find(|c: char| !c.is_ascii_alphabetic())
            .unwrap_or(t.len());
        let word = &t[..word_end];
        if word.len() > 1 && FILLER.iter().any(|f| f.eq_ignore_ascii_case(word)) {
            text = &t[word_end..];
        } else {
            return t;
        }
    }
}

/// The letter(s) `text` opens with: "B", "(B)", "**B**", "B, C", "B or C".
/// `at_start`: the text is the whole answer (or a line), where "A dog" is
/// prose, so a letter must be followed by punctuation or the end.
fn letters(text: &str, at_start: bool) -> Option<Choice> {
    let (first, mut rest) = letter(text, at_start)?;
    let mut found = vec![first];
    while let Some(next) = after_separator(rest) {
        match letter(next, false) {
            Some((l, r)) => {
                found.push(l);
                rest = r;
            }
            None => break,
        }
    }
    found.sort_unstable();
    found.dedup();
    Some(match found.as_slice() {
        [one] => Choice::Letter(*one),
        _ => Choice::Several(found),
    })
}

/// One letter, opened by `(`, `[` or `*` and standing alone, uppercased,
/// and what follows it (its closing marks skipped).
fn letter(text: &str, at_start: bool) -> Option<(char, &str)> {
    let t = text.trim_start_matches(|c: char| "([*_`".contains(c));
    let mut chars = t.chars();
    let l = chars.next().filter(char::is_ascii_alphabetic)?;
    let rest = chars.as_str();
    let next = rest.chars().next();
    if next.is_some_and(|c| c.is_alphanumeric() || c == '\'') {
        return None;
    }
    let closing = |c: char| ")]*_`".contains(c);
    let punct = next.is_none_or(|c| closing(c) || ".:,/".contains(c));
    let sep_after = after_separator(rest).is_some();
    // Lowercase only alone or closed ("b", "b)"): "a" is also a word.
    let ok = if l.is_ascii_uppercase() {
        !at_start || punct || sep_after || next == Some('\n')
    } else {
        next.is_none_or(closing) || (next == Some('.') && rest[1..].trim().is_empty())
    };
    ok.then(|| (l.to_ascii_uppercase(), rest.trim_start_matches(closing)))
}

/// What follows a list separator ("," "/" "&" "|" "or" "and") at the start
/// of `text`, if there is one.
fn after_separator(text: &str) -> Option<&str> {
    let t = text.trim_start();
    if let Some(rest) = t.strip_prefix([',', '/', '&', '|']) {
        return Some(rest.trim_start());
    }
    for word in ["or ", "and "] {
        if t.len() >= word.len() && t[..word.len()].eq_ignore_ascii_case(word) {
            return Some(t[word.len()..].trim_start());
        }
    }
    None
}

/// The letters written as "(B)" or "**B**" anywhere: one letter, or
/// several, or none.
fn decorated(text: &str) -> Choice {
    let mut found: Vec<char> = Vec::new();
    for (open, close) in [("(", ")"), ("**", "**")] {
        for (at, _) in text.match_indices(open) {
            let rest = &text[at + open.len()..];
            let mut chars = rest.chars();
            if let Some(l) = chars.next().filter(char::is_ascii_uppercase)
                && chars.as_str().starts_with(close)
            {
                found.push(l);
            }
        }
    }
    found.sort_unstable();
    found.dedup();
    match found.as_slice() {
        [] => Choice::None,
        [one] => Choice::Letter(*one),
        _ => Choice::Several(found),
    }
}

/// The answer's JSON: all of it, else its first ```json block, else its
/// first `{...}` object.
pub(super) fn json(text: &str) -> Option<Value> {
    if let Ok(v) = serde_json::from_str::<Value>(text.trim()) {
        return Some(v);
    }
    if let Some(block) = fenced(text)
        && let Ok(v) = serde_json::from_str::<Value>(block.trim())
    {
        return Some(v);
    }
    for (at, _) in text.match_indices('{').take(MAX_STARTS) {
        let mut stream = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        if let Some(Ok(v @ Value::Object(_))) = stream.next() {
            return Some(v);
        }
    }
    None
}

/// The body of the first ```json fence (closed, or running to the end).
fn fenced(text: &str) -> Option<&str> {
    let lower = text.to_ascii_lowercase();
    let open = lower.find("```json")?;
    let body = &text[open + "```json".len()..];
    let body = body.split_once('\n').map_or("", |(_, b)| b);
    Some(body.split_once("```").map_or(body, |(b, _)| b))
}
