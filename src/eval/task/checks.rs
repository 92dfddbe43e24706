//! A task's `check` object, read into a [`Check`]: its kind, the fields
//! that kind takes (no others), each of the right type, regexes and JSON
//! Schemas compiled. Errors are the reason alone; the caller adds the line.

use std::sync::Arc;

use serde_json::{Map, Value};

use super::{Check, KINDS};

/// The largest compiled regex, in bytes (the regex crate's own bound).
const REGEX_SIZE: usize = 1 << 20;

/// The fields each kind takes, besides `kind`.
fn fields(kind: &str) -> &'static [&'static str] {
    match kind {
        "exact" | "normalized" | "choice" | "contains" => &["expected"],
        "regex" => &["pattern"],
        "number" => &["expected", "tolerance"],
        "json_schema" => &["schema", "expected"],
        "judge" => &["route", "rubric"],
        _ => &[],
    }
}

pub(super) fn parse(mut c: Map<String, Value>) -> Result<Check, String> {
    let kind = match c.remove("kind") {
        Some(Value::String(kind)) => kind,
        Some(_) => return Err("check \"kind\" must be a string".into()),
        None => return Err("check has no \"kind\"".into()),
    };
    if !KINDS.contains(&kind.as_str()) {
        return Err(format!(
            "unknown check kind {kind:?} (expected one of {})",
            KINDS.join(", ")
        ));
    }
    let allowed = fields(&kind);
    if let Some(key) = c.keys().find(|k| !allowed.contains(&k.as_str())) {
        let mut all = vec!["kind"];
        all.extend_from_slice(allowed);
        return Err(format!(
            "check {kind:?} has an unknown field {key:?} (expected {})",
            all.join(", ")
        ));
    }
    let needs = |what: &str| format!("check {kind:?} needs {what}");
    match kind.as_str() {
        "exact" | "normalized" => {
            let Some(Value::String(expected)) = c.remove("expected") else {
                return Err(needs("a string \"expected\""));
            };
            Ok(if kind == "exact" {
                Check::Exact { expected }
            } else {
                Check::Normalized { expected }
            })
        }
        "regex" => {
            let Some(Value::String(pattern)) = c.remove("pattern") else {
                return Err(needs("a string \"pattern\""));
            };
            let compiled = regex::RegexBuilder::new(&pattern)
                .size_limit(REGEX_SIZE)
                .build()
                .map_err(|e| format!("bad regex {pattern:?}: {}", one_line(&e.to_string())))?;
            Ok(Check::Regex { pattern: compiled })
        }
        "number" => {
            let expected = match c.remove("expected") {
                Some(Value::Number(x)) => x.as_f64(),
                _ => None,
            }
            .filter(|x| x.is_finite())
            .ok_or_else(|| needs("a numeric \"expected\""))?;
            let tolerance = match c.remove("tolerance") {
                None => 1e-6,
                Some(Value::Number(t)) => t
                    .as_f64()
                    .filter(|t| t.is_finite() && *t >= 0.0)
                    .ok_or("check \"number\": \"tolerance\" must be a number >= 0")?,
                Some(_) => return Err("check \"number\": \"tolerance\" must be a number".into()),
            };
            Ok(Check::Number {
                expected,
                tolerance,
            })
        }
        "choice" => {
            let letter = match c.remove("expected") {
                Some(Value::String(s)) => {
                    let mut chars = s.trim().chars();
                    match (chars.next(), chars.next()) {
                        (Some(l), None) if l.is_ascii_alphabetic() => Some(l),
                        _ => None,
                    }
                }
                _ => None,
            };
            let expected = letter
                .ok_or_else(|| needs("\"expected\" to be a single letter A-Z"))?
                .to_ascii_uppercase();
            Ok(Check::Choice { expected })
        }
        "contains" => {
            let expected = match c.remove("expected") {
                Some(Value::String(s)) => vec![s],
                Some(Value::Array(list)) => list
                    .into_iter()
                    .map(|v| match v {
                        Value::String(s) => Some(s),
                        _ => None,
                    })
                    .collect::<Option<Vec<_>>>()
                    .unwrap_or_default(),
                _ => Vec::new(),
            };
            if expected.is_empty() || expected.iter().any(|s| s.is_empty()) {
                return Err(needs(
                    "\"expected\" as a string or a list of strings (none empty)",
                ));
            }
            Ok(Check::Contains { expected })
        }
        "json_schema" => {
            let schema = c
                .remove("schema")
                .ok_or_else(|| needs("a \"schema\" (a JSON Schema)"))?;
            let validator = jsonschema::validator_for(&schema)
                .map_err(|e| format!("bad schema: {}", one_line(&e.to_string())))?;
            let expected = match c.remove("expected") {
                None | Some(Value::Null) => None,
                Some(Value::Object(fields)) => Some(fields),
                Some(_) => {
                    return Err(
                        "check \"json_schema\": \"expected\" must be an object of field -> value"
                            .into(),
                    );
                }
            };
            Ok(Check::JsonSchema {
                schema,
                expected,
                validator: Arc::new(validator),
            })
        }
        _ => {
            let route = match c.remove("route") {
                Some(Value::String(r)) if !r.trim().is_empty() => r,
                _ => return Err(needs("a string \"route\" (the model that grades)")),
            };
            let rubric = match c.remove("rubric") {
                Some(Value::String(r)) if !r.trim().is_empty() => r,
                _ => return Err(needs("a string \"rubric\"")),
            };
            Ok(Check::Judge { route, rubric })
        }
    }
}

/// A multi-line message (the regex crate's, with its caret) on one line.
fn one_line(text: &str) -> String {
    text.split_whitespace().collect::<Vec<_>>().join(" ")
}
