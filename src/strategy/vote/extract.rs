//! How a vote reads each sample's final answer (`extract`), and the normal
//! form answers are compared in. An extractor that finds nothing in a
//! sample gives `None`; the vote then counts the sample's whole text,
//! normalised ([`normalize`]), so every answered sample votes.
//!
//! - `text` (the default): the whole text, normalised.
//! - `number`: the last number ([`crate::wire::numbers`] reads it: `.5`,
//!   `3.5e2`, `−7`), in one canonical form so equal values vote together
//!   (`42`, `42.0` and `4.2e1` → `42`; `1,234.50` → `1234.5`; `-0` → `0`).
//! - `json:PATH`: the value at `PATH` (a JSON pointer `/a/0`, or dotted
//!   `a.0`; empty: the whole value) of the last JSON object or array in
//!   the text that has it; strings normalised, numbers as `number` does,
//!   anything else as compact JSON with sorted keys.
//! - `after:MARKER`: the rest of the line after the marker's last
//!   occurrence (ASCII letters in any case; the next non-empty line when
//!   the marker ends its line), normalised.
//! - `regex:PATTERN`: the last match's first capture group (else the
//!   whole match), normalised; the pattern is bounded and compiled once,
//!   at load (Rust's `regex`: linear time, no backtracking).
//!
//! Every extractor but `text` reads only the text's last [`MAX_TAIL`]
//! bytes (cut on a character boundary): a final answer is at the end, and
//! so the work per sample stays bounded however long the text. `json:`
//! looks for values backwards from the end, parsing at most
//! [`MAX_JSON_TRIES`] of them. `text` (and the whole-text fallback) is one
//! linear pass over the whole text, which the answer's size limit bounds.

use serde_json::{Map, Value};

use crate::wire::numbers::{self, Written};

/// Longest `regex:` pattern, in bytes.
const MAX_PATTERN: usize = 1024;
/// Most memory a compiled `regex:` pattern may take.
const REGEX_SIZE: usize = 1 << 20;
/// Most places in one answer where a JSON value is tried.
const MAX_JSON_TRIES: usize = 64;
/// How many bytes at the end of a text the extractors read.
const MAX_TAIL: usize = 64 * 1024;
/// A number written with more zeros than this between its digits and its
/// point (`1e40`, `1e-40`) is put as `d.ddde±N`, not spelt out.
const MAX_ZEROS: i64 = 32;

/// Characters stripped from both ends of an answer: emphasis and quotes.
const WRAPPERS: &[char] = &['*', '_', '`', '"'];
/// Characters stripped from the end too: sentence punctuation.
const TRAILING: &[char] = &['.', ',', ';', ':', '!', '?'];

/// A route's `extract`.
#[derive(Debug, Clone)]
pub enum Extract {
    Text,
    Number,
    /// A JSON pointer (dotted paths are turned into one at load).
    Json(String),
    After(String),
    Regex(regex::Regex),
}

impl Extract {
    /// Reads an `extract` value; the error says what is accepted.
    pub fn parse(spec: &str) -> Result<Extract, String> {
        if let Some(path) = spec.strip_prefix("json:") {
            return Ok(Extract::Json(pointer(path)));
        }
        if let Some(marker) = spec.strip_prefix("after:") {
            if marker.trim().is_empty() {
                return Err("`after:` needs a marker, as in \"after:answer:\"".into());
            }
            return Ok(Extract::After(marker.to_owned()));
        }
        if let Some(pattern) = spec.strip_prefix("regex:") {
            return compile(pattern).map(Extract::Regex);
        }
        match spec {
            "text" => Ok(Extract::Text),
            "number" => Ok(Extract::Number),
            other => Err(format!(
                "unknown extractor \"{other}\" (expected \"text\", \"number\", \"json:PATH\", \
                 \"after:MARKER\" or \"regex:PATTERN\")"
            )),
        }
    }

    /// The final answer in `text`, in its normal form; `None` when the
    /// extractor finds none (for `text`: when the text is empty).
    pub fn answer(&self, text: &str) -> Option<String> {
        let found = match self {
            Extract::Text => Some(normalize(text)),
            Extract::Number => number(tail(text)),
            Extract::Json(path) => json_at(tail(text), path),
            Extract::After(marker) => after(tail(text), marker),
            Extract::Regex(re) => re.captures_iter(tail(text)).last().and_then(|c| {
                let m = c.get(1).or_else(|| c.get(0))?;
                Some(normalize(m.as_str()))
            }),
        };
        found.filter(|a| !a.is_empty())
    }
}

fn compile(pattern: &str) -> Result<regex::Regex, String> {
    if pattern.is_empty() {
        return Err("`regex:` needs a pattern, as in \"regex:(?i)final: (.*)\"".into());
    }
    if pattern.len() > MAX_PATTERN {
        return Err(format!(
            "the pattern is {} bytes, more than {MAX_PATTERN}",
            pattern.len()
        ));
    }
    regex::RegexBuilder::new(pattern)
        .size_limit(REGEX_SIZE)
        .dfa_size_limit(REGEX_SIZE)
        .build()
        .map_err(|e| format!("the pattern does not compile: {e}"))
}

/// `a.b.0` as the pointer `/a/b/0`; a pointer (or nothing) as it is.
fn pointer(path: &str) -> String {
    if path.is_empty() || path.starts_with('/') {
        return path.to_owned();
    }
    path.split('.')
        .map(|seg| format!("/{}", seg.replace('~', "~0").replace('/', "~1")))
        .collect()
}

/// Trimmed, whitespace runs as one space, lower case, without the
/// emphasis or quotes around it and the punctuation after it.
pub fn normalize(text: &str) -> String {
    let words: Vec<&str> = text.split_whitespace().collect();
    let joined = words.join(" ").to_lowercase();
    let mut s = joined.as_str();
    loop {
        let before = s.len();
        s = s
            .trim_start_matches(WRAPPERS)
            .trim_end_matches(WRAPPERS)
            .trim_end_matches(TRAILING)
            .trim();
        if s.len() == before {
            break;
        }
    }
    s.to_owned()
}

/// The last [`MAX_TAIL`] bytes of `text`, cut on a character boundary.
fn tail(text: &str) -> &str {
    let Some(at) = text.len().checked_sub(MAX_TAIL) else {
        return text;
    };
    &text[crate::text::ceil_char(text, at)..]
}

/// The last number in `text`, in its canonical form.
fn number(text: &str) -> Option<String> {
    numbers::last_number(text).map(|n| canonical(&n))
}

/// One form per value: `-007.500` → `-7.5`, `4.2e1` → `42`, `0.0` and
/// `-0` → `0`; past [`MAX_ZEROS`] zeros, `1.5e40`.
fn canonical(n: &Written) -> String {
    let (mantissa, exp) = match n.digits.split_once(['e', 'E']) {
        Some((m, e)) => {
            let big = if e.starts_with('-') {
                -(1 << 40)
            } else {
                1 << 40
            };
            (
                m,
                e.parse::<i64>().unwrap_or(big).clamp(-(1 << 40), 1 << 40),
            )
        }
        None => (n.digits.as_str(), 0),
    };
    let (int, frac) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all = format!("{int}{frac}");
    // The value is 0.ALL × 10^point.
    let mut point = i64::try_from(int.len()).unwrap_or(0) + exp;
    let lead = all.len() - all.trim_start_matches('0').len();
    point -= i64::try_from(lead).unwrap_or(0);
    let digits = all.trim_start_matches('0').trim_end_matches('0');
    if digits.is_empty() {
        return "0".into();
    }
    let len = i64::try_from(digits.len()).unwrap_or(i64::MAX);
    let mut out = String::from(if n.negative { "-" } else { "" });
    if point > len + MAX_ZEROS || point < -MAX_ZEROS {
        let (first, rest) = digits.split_at(1);
        out.push_str(first);
        if !rest.is_empty() {
            out.push('.');
            out.push_str(rest);
        }
        out.push_str(&format!("e{}", point - 1));
    } else if point <= 0 {
        out.push_str("0.");
        out.extend((0..-point).map(|_| '0'));
        out.push_str(digits);
    } else if point >= len {
        out.push_str(digits);
        out.extend((0..point - len).map(|_| '0'));
    } else {
        let (i, f) = digits.split_at(usize::try_from(point).unwrap_or(0));
        out.push_str(i);
        out.push('.');
        out.push_str(f);
    }
    out
}

/// The value at `path` of the last JSON object or array in `text` that
/// has it, as an answer. Starts are tried backwards from the end; a value
/// that encloses the one found replaces it when it has the path too (so
/// `json:` gives the whole last value, not its last part), and the first
/// complete value before the one found ends the search.
fn json_at(text: &str, path: &str) -> Option<String> {
    let mut found: Option<(usize, usize, String)> = None;
    let mut before = text.len();
    for _ in 0..MAX_JSON_TRIES {
        let Some(at) = text[..before].rfind(['{', '[']) else {
            break;
        };
        before = at;
        let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        let Some(Ok(v)) = values.next() else {
            continue;
        };
        let end = at + values.byte_offset();
        match &found {
            // A whole value before the one found: that one is the last.
            Some((start, _, _)) if end <= *start => break,
            // Inside the one found, or across its edge.
            Some((_, found_end, _)) if end < *found_end => continue,
            _ => {}
        }
        if let Some(x) = v.pointer(path) {
            found = Some((at, end, json_answer(x)));
        }
    }
    found.map(|(_, _, answer)| answer)
}

fn json_answer(v: &Value) -> String {
    match v {
        Value::String(s) => normalize(s),
        Value::Number(n) => {
            let s = n.to_string();
            number(&s).unwrap_or(s)
        }
        other => sorted(other).to_string(),
    }
}

/// `v` with every object's keys in order, so key order does not split a vote.
fn sorted(v: &Value) -> Value {
    match v {
        Value::Object(o) => {
            let mut keys: Vec<&String> = o.keys().collect();
            keys.sort();
            let m: Map<String, Value> = keys
                .into_iter()
                .map(|k| (k.clone(), sorted(&o[k])))
                .collect();
            Value::Object(m)
        }
        Value::Array(a) => Value::Array(a.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The rest of the line after the last `marker` (ASCII case ignored), or
/// the next non-empty line when the marker ends its line.
fn after(text: &str, marker: &str) -> Option<String> {
    let m = marker.as_bytes();
    let b = text.as_bytes();
    let at = (0..=b.len().checked_sub(m.len())?)
        .rev()
        .find(|&i| text.is_char_boundary(i) && b[i..i + m.len()].eq_ignore_ascii_case(m))?;
    let rest = text.get(at + m.len()..)?;
    rest.lines().map(normalize).find(|l| !l.is_empty())
}

#[cfg(test)]
mod tests;
