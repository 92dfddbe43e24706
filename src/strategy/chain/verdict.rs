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
    let text = head(text, MAX_READ);
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

fn head(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((at, _)) => &text[..at],
        None => text,
    }
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
mod tests {
    use super::*;

    #[test]
    fn the_example_with_small_edits_is_a_copy_unless_the_conversation_is_its_subject() {
        let example = "The reply gives the tower's year of opening, 1889, but the question \
                       asked for its height: it is 330 metres.";
        let conversation = ["[user] What is the capital of France?\nCandidate: Lyon."];
        // Copies seen from a small verifier: the example with a word or
        // a number changed, or its end swapped for the real subject.
        for copy in [
            "The reply gives the tower's year of opening, 1889, but the question asked for its height: 307 metres.",
            "The reply gives the tower's year of opening, 1889, but the question asked for the capital.",
            "the reply gives the year of opening 1889 but it is 330 metres",
            "Reply gives tower's opening year 1889; height is 330 metres.",
            "The reply gives the tower's year of opening, 1889, but the question asked when it was built: in 1887.",
        ] {
            assert!(copies_example(copy, example, &conversation), "{copy}");
        }
        // Too changed to count as repeating the prompt: only this check
        // catches it.
        assert!(!echoes(
            "The reply gives the tower's year of opening, 1889, but the question asked when it was built: in 1887.",
            &[example]
        ));
        // The verifier's own words, even in the example's manner.
        for own in [
            "The reply gives Lyon, but the capital of France is Paris.",
            "The reply gives the year, but the question asked for the capital.",
            "Wrong city: the capital is Paris.",
            "",
        ] {
            assert!(!copies_example(own, example, &conversation), "{own}");
        }
        // On a question about the tower itself, the words are the
        // conversation's, and the feedback is the verifier's own.
        let tower = [
            "[user] Give the Eiffel tower's year of opening and its height in metres.\nCandidate: Its year of opening is 1889.",
        ];
        assert!(!copies_example(
            "The reply gives the year of opening, 1889, but not the height: it is 330 metres.",
            example,
            &tower
        ));
    }

    fn read(text: &str) -> Option<(bool, Option<String>)> {
        parse(text).map(|r| (r.accept, r.feedback))
    }

    #[test]
    fn verdicts_are_read_leniently() {
        assert_eq!(
            read(r#"{"accept": true, "feedback": ""}"#),
            Some((true, None))
        );
        assert_eq!(
            read("Sure! ```json\n{\"accept\": false, \"feedback\": \"too short\"}\n```"),
            Some((false, Some("too short".into())))
        );
        assert_eq!(read(r#"{"accept": "no"}"#), Some((false, None)));
        assert_eq!(read(r#"{"Accept": true}"#), Some((true, None)));
        assert_eq!(
            read(r#"{"APPROVED": "Yes", "Reason": "fine"}"#),
            Some((true, Some("fine".into())))
        );
        assert_eq!(read(r#"{"verdict": "reject"}"#), Some((false, None)));
        assert_eq!(read(r#"{"accepted": 0}"#), Some((false, None)));
        assert_eq!(read("looks good to me"), None);
        assert_eq!(read(r#"{"verdict": "fine"}"#), None);
        assert_eq!(read(r#"{"score": 9}"#), None);
        assert_eq!(read("{not json}"), None);
    }

    #[test]
    fn every_key_small_models_use() {
        for (text, want) in [
            (r#"{"acceptance": false, "feedback": "x y"}"#, false),
            (r#"{"acceptance": true}"#, true),
            (r#"{"is_correct": true}"#, true),
            (r#"{"isCorrect": "false"}"#, false),
            (r#"{"correct": "Incorrect."}"#, false),
            (r#"{"valid": 1}"#, true),
            (r#"{"passed": "PASS"}"#, true),
            (r#"{"pass": false}"#, false),
            (r#"{"ok": true}"#, true),
            (r#"{"decision": "Accept."}"#, true),
            (r#"{"result": "fail"}"#, false),
            (r#"{"status": "approved"}"#, true),
            (r#"{"Is-Acceptable": "no"}"#, false),
            (r#"{"verdict": {"accept": false}}"#, false),
        ] {
            assert_eq!(read(text).map(|r| r.0), Some(want), "{text}");
        }
        // The first key of the list wins over later ones.
        assert_eq!(
            read(r#"{"status": "ok", "accept": false}"#).map(|r| r.0),
            Some(false)
        );
        // Feedback as a list, and prose with braces before the object.
        assert_eq!(
            read(r#"Checking {the reply}: {"accept": false, "issues": ["no date", " too long "]}"#),
            Some((false, Some("no date; too long".into())))
        );
    }

    #[test]
    fn a_verdict_that_leads_a_cut_answer_counts() {
        let cut = parse(r#"{"accept": false, "feedback": "The answer forgets the dat"#).unwrap();
        assert_eq!(
            cut,
            Read {
                accept: false,
                feedback: Some("The answer forgets the…".into()),
                truncated: true,
            }
        );
        assert_eq!(
            read(r#"```json\n{"accept": false, "feedback": "The ans"#),
            Some((false, Some("The…".into())))
        );
        assert_eq!(
            read(r#"{"accept": false, "feedback": "Wrong"#),
            Some((false, None))
        );
        assert_eq!(
            read(r#"{"accept": true, "feedback": "Good, though the"#),
            Some((true, Some("Good, though…".into())))
        );
        assert_eq!(read(r#"{"accept": false, "feedb"#), Some((false, None)));
        assert_eq!(read(r#"{"accept": false, "#), Some((false, None)));
        assert_eq!(
            read(r#"{"accept": false, "feedback": "say \"hi\" then \"#),
            Some((false, Some("say \"hi\"…".into())))
        );
        // The verdict itself was cut: no verdict.
        assert_eq!(read(r#"{"accept": fal"#), None);
        assert_eq!(read(r#"{"feedback": "fine", "acc"#), None);
        assert_eq!(read(r#"{"accept"#), None);
    }

    #[test]
    fn feedback_that_repeats_the_prompt_is_an_echo() {
        let prompt = [
            "You are a strict reviewer. Decide whether the candidate correctly and completely \
             answers the last request.",
            "Example: {\"accept\": false, \"feedback\": \"The reply names Lyon, but the capital \
             of France is Paris.\"}",
        ];
        for copy in [
            "Decide whether the candidate correctly and completely answers the last request",
            "the reply names lyon but the capital of france is paris",
            "You are a strict reviewer. Decide whether the candidate correctly answers the last request.",
            "...",
            "",
        ] {
            assert!(echoes(copy, &prompt), "{copy}");
        }
        for own in [
            "The reply gives the year, not the height.",
            "Too short: add the date of the treaty.",
            "wrong",
            "The candidate does not answer the last request about trains.",
        ] {
            assert!(!echoes(own, &prompt), "{own}");
        }
    }
}
