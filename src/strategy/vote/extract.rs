//! How a vote reads each sample's final answer (`extract`), and the normal
//! form answers are compared in. An extractor that finds nothing in a
//! sample gives `None`; the vote then counts the sample's whole text,
//! normalised ([`normalize`]), so every answered sample votes.
//!
//! - `text` (the default): the whole text, normalised.
//! - `number`: the last number (`1,234.50` → `1234.5`, `-0` → `0`).
//! - `json:PATH`: the value at `PATH` (a JSON pointer `/a/0`, or dotted
//!   `a.0`; empty: the whole value) of the last JSON object or array in
//!   the text that has it; strings normalised, numbers as `number` does,
//!   anything else as compact JSON with sorted keys.
//! - `after:MARKER`: the rest of the line after the marker's last
//!   occurrence (ASCII letters in any case; the next non-empty line when
//!   the marker ends its line), normalised.
//! - `regex:PATTERN`: the first match's first capture group (else the
//!   whole match), normalised; the pattern is bounded and compiled once,
//!   at load (Rust's `regex`: linear time, no backtracking).

use serde_json::{Map, Value};

/// Longest `regex:` pattern, in bytes.
const MAX_PATTERN: usize = 1024;
/// Most memory a compiled `regex:` pattern may take.
const REGEX_SIZE: usize = 1 << 20;
/// Most places in one answer where a JSON value is tried.
const MAX_JSON_TRIES: usize = 64;

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
            Extract::Number => last_number(text),
            Extract::Json(path) => json_at(text, path),
            Extract::After(marker) => after(text, marker),
            Extract::Regex(re) => re.captures(text).and_then(|c| {
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

/// The last number in `text`, in its canonical form.
fn last_number(text: &str) -> Option<String> {
    let b = text.as_bytes();
    let digit = |i: usize| b.get(i).is_some_and(u8::is_ascii_digit);
    let mut last = None;
    let mut i = 0;
    while i < b.len() {
        if !digit(i) {
            i += 1;
            continue;
        }
        let start = i;
        while digit(i) {
            i += 1;
        }
        let mut int: String = text[start..i].to_owned();
        // Thousands separators: groups of exactly three digits after a
        // first group of at most three (`1,2,3` is three numbers).
        if i - start <= 3 {
            while b.get(i) == Some(&b',') && (1..=3).all(|k| digit(i + k)) && !digit(i + 4) {
                int.push_str(&text[i + 1..i + 4]);
                i += 4;
            }
        }
        let mut frac = "";
        if b.get(i) == Some(&b'.') && digit(i + 1) {
            let from = i + 1;
            i += 1;
            while digit(i) {
                i += 1;
            }
            frac = &text[from..i];
        }
        // A minus sign right before it, not a hyphen inside a word (`3-5`).
        let negative = start > 0
            && b[start - 1] == b'-'
            && (start < 2 || !b[start - 2].is_ascii_alphanumeric());
        last = Some(canonical_number(negative, &int, frac));
    }
    last
}

/// `-007.500` → `-7.5`; `0.0` → `0`.
fn canonical_number(negative: bool, int: &str, frac: &str) -> String {
    let int = int.trim_start_matches('0');
    let int = if int.is_empty() { "0" } else { int };
    let frac = frac.trim_end_matches('0');
    let mut out = String::new();
    if negative && (int != "0" || !frac.is_empty()) {
        out.push('-');
    }
    out.push_str(int);
    if !frac.is_empty() {
        out.push('.');
        out.push_str(frac);
    }
    out
}

/// The value at `path` of the last JSON object or array in `text` that has
/// it, as an answer.
fn json_at(text: &str, path: &str) -> Option<String> {
    let mut found = None;
    let mut from = 0;
    for _ in 0..MAX_JSON_TRIES {
        let Some(at) = text[from..].find(['{', '[']).map(|i| from + i) else {
            break;
        };
        let mut values = serde_json::Deserializer::from_str(&text[at..]).into_iter::<Value>();
        match values.next() {
            Some(Ok(v)) => {
                if let Some(x) = v.pointer(path) {
                    found = Some(json_answer(x));
                }
                from = at + values.byte_offset().max(1);
            }
            _ => from = at + 1,
        }
        if from >= text.len() {
            break;
        }
    }
    found
}

fn json_answer(v: &Value) -> String {
    match v {
        Value::String(s) => normalize(s),
        Value::Number(n) => {
            let s = n.to_string();
            if s.contains(['e', 'E']) {
                s
            } else {
                last_number(&s).unwrap_or(s)
            }
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
