//! Reading a verifier's verdict out of what a (small) model wrote: the JSON
//! object inside code fences or prose, its keys in any case and spelling
//! (`accept`, `acceptance`, `is_correct`, `passed`, …), the words small
//! models use for yes and no, and a verdict that leads an answer cut off
//! at `verifier_max_tokens` before the object closed. Also whether a
//! feedback only repeats conclave's own prompt (a template copied back)
//! or copies the prompt's example feedback with small edits (its
//! specifics, absent from the conversation, carried over), which is then
//! no feedback at all.

use serde_json::{Map, Value};

/// Keys read as the verdict, compared without case or punctuation
/// (`is_correct`, `isCorrect` and `Is-Correct` are one key), in this order
/// of precedence when an object has several.
pub const VERDICT_KEYS: &[&str] = &[
    "accept",
    "accepted",
    "acceptance",
    "acceptable",
    "isacceptable",
    "approve",
    "approved",
    "approval",
    "verdict",
    "decision",
    "iscorrect",
    "correct",
    "valid",
    "isvalid",
    "pass",
    "passed",
    "passes",
    "ok",
    "result",
    "status",
];

/// Values read as "accept" (strings in any case, punctuation trimmed),
/// besides `true` and 1.
pub const YES: &[&str] = &[
    "true",
    "yes",
    "y",
    "accept",
    "accepted",
    "acceptable",
    "approve",
    "approved",
    "pass",
    "passed",
    "ok",
    "okay",
    "correct",
    "valid",
    "good",
];

/// Values read as "reject", besides `false` and 0.
pub const NO: &[&str] = &[
    "false",
    "no",
    "n",
    "reject",
    "rejected",
    "escalate",
    "fail",
    "failed",
    "deny",
    "denied",
    "incorrect",
    "invalid",
    "unacceptable",
    "bad",
];

/// Keys read as the feedback, compared like [`VERDICT_KEYS`]; a list of
/// strings is joined with "; ".
pub const FEEDBACK_KEYS: &[&str] = &[
    "feedback",
    "reason",
    "reasons",
    "comment",
    "comments",
    "explanation",
    "critique",
    "issues",
    "problems",
    "rationale",
    "suggestion",
    "suggestions",
];

/// The longest reply read for a verdict; the verifier's `max_tokens`
/// keeps real ones far shorter.
const MAX_READ: usize = 64 * 1024;
/// How many `{` a reply may have before its verdict.
const MAX_STARTS: usize = 16;

/// A verdict as read: accept or not, the feedback, and whether the object
/// was cut off (its feedback may then end mid-sentence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Read {
    pub accept: bool,
    pub feedback: Option<String>,
    pub truncated: bool,
}

/// Reads a verdict out of a model's reply. A reply cut before its object
/// closed still counts when its verdict came first: the feedback is what
/// was written of it, without its last (partial) word, ending in "…".
/// `None` when there is no verdict.
pub fn parse(text: &str) -> Option<Read> {
    let text = crate::text::first_chars(text, MAX_READ);
    let starts = text.match_indices('{').map(|(i, _)| i).take(MAX_STARTS);
    for at in starts.clone() {
        let mut whole = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        if let Some(Ok(Value::Object(obj))) = whole.next()
            && let Some(read) = from_object(&obj, false)
        {
            return Some(read);
        }
    }
    starts
        .filter_map(|at| close(&text[at..]))
        .find_map(|obj| from_object(&obj, true))
}

/// A key as compared: lower case, letters and digits only.
fn norm_key(k: &str) -> String {
    k.chars()
        .filter(char::is_ascii_alphanumeric)
        .map(|c| c.to_ascii_lowercase())
        .collect()
}

fn field<'a>(obj: &'a Map<String, Value>, keys: &[&str]) -> Option<&'a Value> {
    keys.iter()
        .find_map(|k| obj.iter().find(|(name, _)| norm_key(name) == *k))
        .map(|(_, v)| v)
}

fn from_object(obj: &Map<String, Value>, truncated: bool) -> Option<Read> {
    let accept = match field(obj, VERDICT_KEYS)? {
        Value::Bool(b) => *b,
        Value::Number(n) if n.as_f64() == Some(1.0) => true,
        Value::Number(n) if n.as_f64() == Some(0.0) => false,
        Value::String(s) => {
            let s = s
                .trim_matches(|c: char| !c.is_ascii_alphanumeric())
                .to_ascii_lowercase();
            if YES.contains(&s.as_str()) {
                true
            } else if NO.contains(&s.as_str()) {
                false
            } else {
                return None;
            }
        }
        // `{"verdict": {"accept": false, …}}`: the verdict one level down.
        Value::Object(inner) => return from_object(inner, truncated),
        _ => return None,
    };
    let feedback = match field(obj, FEEDBACK_KEYS) {
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Array(items)) => Some(
            items
                .iter()
                .filter_map(Value::as_str)
                .map(str::trim)
                .filter(|s| !s.is_empty())
                .collect::<Vec<_>>()
                .join("; "),
        ),
        _ => None,
    };
    let feedback = feedback
        .map(|f| if truncated { cut_word(&f) } else { f })
        .map(|f| f.trim().to_owned())
        .filter(|f| f.chars().any(char::is_alphanumeric));
    Some(Read {
        accept,
        feedback,
        truncated,
    })
}

/// Text cut mid-word: without its last word, marked with "…".
fn cut_word(s: &str) -> String {
    let s = s.trim_end();
    match s.rfind(char::is_whitespace) {
        Some(at) => format!("{}…", s[..at].trim_end()),
        None => String::new(),
    }
}

/// Closes a JSON object cut off before its end, at the last point where a
/// whole member ended (or inside the string it was writing): `{"accept":
/// false, "feedback": "the ans` becomes `{"accept": false, "feedback":
/// "the ans"}`, `{"accept": false, "feed` becomes `{"accept": false}`.
/// `None` for a complete or unreadable object.
fn close(text: &str) -> Option<Map<String, Value>> {
    let mut stack: Vec<char> = Vec::new();
    let mut in_string = false;
    let mut escaped = false;
    // (byte offset, the closers needed there) where a value ended.
    let mut cuts: Vec<(usize, String)> = Vec::new();
    for (i, c) in text.char_indices() {
        if in_string {
            if escaped {
                escaped = false;
            } else if c == '\\' {
                escaped = true;
            } else if c == '"' {
                in_string = false;
            }
            continue;
        }
        match c {
            '"' => in_string = true,
            '{' => stack.push('}'),
            '[' => stack.push(']'),
            '}' | ']' => {
                stack.pop();
                if stack.is_empty() {
                    return None;
                }
            }
            ',' => cuts.push((i, stack.iter().rev().collect())),
            _ => {}
        }
    }
    if stack.is_empty() {
        return None;
    }
    // Inside a string: end it there (dropping a dangling escape).
    if in_string {
        let mut body = text.to_owned();
        if escaped {
            body.pop();
        }
        body.push('"');
        body.extend(stack.iter().rev());
        if let Ok(Value::Object(o)) = serde_json::from_str(&body) {
            return Some(o);
        }
    }
    cuts.iter().rev().find_map(|(at, closers)| {
        match serde_json::from_str(&format!("{}{closers}", &text[..*at])) {
            Ok(Value::Object(o)) => Some(o),
            _ => None,
        }
    })
}

/// Words of a text as compared for copies: lower case, letters and
/// digits, everything else a separator.
fn words(s: &str) -> Vec<String> {
    s.split(|c: char| !c.is_alphanumeric())
        .filter(|w| !w.is_empty())
        .map(str::to_lowercase)
        .collect()
}

/// Share of a feedback's word triples found in the prompt above which it
/// counts as a copy.
const COPIED: f64 = 0.7;

/// Whether `feedback` only repeats text of `prompt` (the instructions a
/// verifier was given): its words are a run of the prompt's, or most of
/// its word triples are the prompt's. Such feedback says nothing about the
/// answer, and a next tier would take it for its task.
pub fn echoes(feedback: &str, prompt: &[&str]) -> bool {
    let fb = words(feedback);
    if fb.is_empty() {
        return true;
    }
    let texts: Vec<Vec<String>> = prompt.iter().map(|p| words(p)).collect();
    let joined = |w: &[String]| format!(" {} ", w.join(" "));
    let needle = joined(&fb);
    if texts.iter().any(|t| joined(t).contains(&needle)) {
        return true;
    }
    if fb.len() < 3 {
        return false;
    }
    let triples: std::collections::HashSet<&[String]> =
        texts.iter().flat_map(|t| t.windows(3)).collect();
    let total = fb.len() - 2;
    let found = fb.windows(3).filter(|w| triples.contains(w)).count();
    found as f64 >= COPIED * total as f64
}

/// Share of a feedback's words found in an example above which, with
/// [`SPECIFICS`] of its specifics, the feedback is the example edited.
const FROM_EXAMPLE: f64 = 0.5;
/// How many of an example's specifics (words absent from the
/// conversation) a feedback must carry to be that example edited.
const SPECIFICS: usize = 2;
/// Words too common in feedback to mark it as the example's.
const COMMON: &[&str] = &[
    "about", "answer", "asked", "asks", "because", "gives", "instead", "question", "reply",
    "should", "their", "there", "which", "would", "wrong",
];

/// Whether `feedback` is `example` (the prompt's example feedback) with
/// small edits rather than the verifier's own words: most of its words
/// are the example's, and it carries at least [`SPECIFICS`] of the
/// example's specifics (numbers, and words of five letters or more)
/// that none of `context` (the conversation and the candidate) has. A
/// feedback about the example's very subject (a question about the
/// tower) finds those words in the conversation, and is kept.
pub fn copies_example(feedback: &str, example: &str, context: &[&str]) -> bool {
    let fb = words(feedback);
    if fb.is_empty() {
        return false;
    }
    let ex: std::collections::HashSet<String> = words(example).into_iter().collect();
    let shared = fb.iter().filter(|w| ex.contains(*w)).count();
    if (shared as f64) < FROM_EXAMPLE * fb.len() as f64 {
        return false;
    }
    let seen: std::collections::HashSet<String> = context.iter().flat_map(|c| words(c)).collect();
    let specific = |w: &String| {
        (w.chars().any(|c| c.is_ascii_digit()) || w.chars().count() >= 5)
            && !COMMON.contains(&w.as_str())
            && !seen.contains(w)
    };
    let carried: std::collections::HashSet<&String> = fb
        .iter()
        .filter(|w| ex.contains(*w) && specific(w))
        .collect();
    carried.len() >= SPECIFICS
}

#[cfg(test)]
mod tests;
