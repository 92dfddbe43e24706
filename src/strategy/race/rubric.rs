//! The race's rubric: weighted signals, each scored in [0, 1], combined
//! into a total in [0, 1]. The measurable signals (`format`, `finish`,
//! `length`, `latency`) are computed here from the request and the
//! candidate's answer; `judge` and `webhook` come from scorers
//! ([`super::scorers`]) and are passed in. A candidate that is not viable
//! (it failed, or said nothing) totals 0. Ties break on fewer output
//! tokens, then on the candidate's name, so the same measurements always
//! give the same winner.

use std::cmp::Ordering;
use std::collections::BTreeMap;
use std::time::Duration;

use serde_json::Value;

use crate::wire::{AssistantOutput, ChatRequest};

/// The signals a rubric may weigh.
pub const SIGNALS: &[&str] = &["judge", "format", "finish", "length", "latency", "webhook"];

/// Normalised weights (they sum to one), by signal name.
#[derive(Debug, Clone, PartialEq)]
pub struct Rubric(pub BTreeMap<&'static str, f64>);

impl Rubric {
    /// Validates a rubric table: known signals, no negative weight, not all
    /// zero. Errors name the offending key.
    pub fn new(table: &BTreeMap<String, f64>) -> Result<Rubric, Vec<(String, String)>> {
        let mut errs = Vec::new();
        let mut out = BTreeMap::new();
        for (k, w) in table {
            match SIGNALS.iter().find(|s| **s == k) {
                None => errs.push((
                    k.clone(),
                    format!("unknown signal (expected one of {})", SIGNALS.join(", ")),
                )),
                Some(_) if !w.is_finite() || *w < 0.0 => {
                    errs.push((k.clone(), "a weight must be a number ≥ 0".into()))
                }
                Some(s) => {
                    out.insert(*s, *w);
                }
            }
        }
        let sum: f64 = out.values().sum();
        if errs.is_empty() && sum <= 0.0 {
            errs.push((String::new(), "every weight is 0".into()));
        }
        if !errs.is_empty() {
            return Err(errs);
        }
        for w in out.values_mut() {
            *w /= sum;
        }
        Ok(Rubric(out))
    }

    pub fn uses(&self, signal: &str) -> bool {
        self.0.get(signal).is_some_and(|w| *w > 0.0)
    }

    /// The weighted total of `scores` (a missing signal scores 0).
    pub fn total(&self, scores: &BTreeMap<&'static str, f64>) -> f64 {
        self.0
            .iter()
            .map(|(s, w)| w * scores.get(s).copied().unwrap_or(0.0).clamp(0.0, 1.0))
            .sum::<f64>()
            .clamp(0.0, 1.0)
    }
}

/// The caps of the `length` and `latency` signals.
#[derive(Debug, Clone, Copy)]
pub struct Caps {
    pub length_tokens: u64,
    pub latency: Duration,
}

/// The measurable signals of one viable answer.
pub fn measure(
    req: &ChatRequest,
    out: &AssistantOutput,
    output_tokens: u64,
    took: Duration,
    caps: Caps,
) -> BTreeMap<&'static str, f64> {
    let mut m = BTreeMap::new();
    m.insert("format", format(req, out));
    m.insert("finish", finish(out.finish_reason.as_deref()));
    m.insert(
        "length",
        linear(output_tokens as f64, caps.length_tokens as f64),
    );
    m.insert(
        "latency",
        linear(took.as_secs_f64(), caps.latency.as_secs_f64()),
    );
    m
}

/// 1 at zero, 0 at `cap` and beyond.
fn linear(x: f64, cap: f64) -> f64 {
    if cap <= 0.0 {
        return 0.0;
    }
    (1.0 - x / cap).clamp(0.0, 1.0)
}

fn finish(reason: Option<&str>) -> f64 {
    match reason {
        Some("stop" | "tool_calls") => 1.0,
        _ => 0.0,
    }
}

/// Whether the answer has the shape the request asked for: JSON content
/// (valid against a `json_schema`), tool calls that name offered tools
/// with arguments valid against their parameters. Otherwise 1.
pub fn format(req: &ChatRequest, out: &AssistantOutput) -> f64 {
    if !out.tool_calls.is_empty() {
        let tools = req.extra.get("tools").and_then(Value::as_array);
        let ok = out.tool_calls.iter().all(|call| {
            let Some(spec) = tools.into_iter().flatten().find(|t| {
                t.pointer("/function/name").and_then(Value::as_str) == Some(call.name.as_str())
            }) else {
                return false;
            };
            let Ok(args) = serde_json::from_str::<Value>(&call.arguments) else {
                return false;
            };
            match spec.pointer("/function/parameters") {
                Some(schema) => valid(schema, &args),
                None => true,
            }
        });
        return if ok { 1.0 } else { 0.0 };
    }
    let rf = req.extra.get("response_format");
    let kind = rf.and_then(|r| r.get("type")).and_then(Value::as_str);
    match kind {
        Some("json_object") => match serde_json::from_str::<Value>(&out.text) {
            Ok(Value::Object(_)) => 1.0,
            _ => 0.0,
        },
        Some("json_schema") => {
            let Ok(content) = serde_json::from_str::<Value>(&out.text) else {
                return 0.0;
            };
            match rf.and_then(|r| r.pointer("/json_schema/schema")) {
                Some(schema) if !valid(schema, &content) => 0.0,
                _ => 1.0,
            }
        }
        _ => 1.0,
    }
}

/// `value` against a JSON Schema; a schema that does not compile accepts
/// (it is the client's schema, not the candidate's fault).
fn valid(schema: &Value, value: &Value) -> bool {
    match jsonschema::validator_for(schema) {
        Ok(v) => v.is_valid(value),
        Err(_) => true,
    }
}

/// One candidate's standing: its total, then its tie-breakers.
#[derive(Debug, Clone)]
pub struct Standing<'a> {
    pub name: &'a str,
    pub total: f64,
    pub output_tokens: u64,
}

/// Best first: higher total, then fewer output tokens, then the name.
pub fn rank(a: &Standing, b: &Standing) -> Ordering {
    b.total
        .total_cmp(&a.total)
        .then(a.output_tokens.cmp(&b.output_tokens))
        .then(a.name.cmp(b.name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ToolCall;
    use serde_json::json;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap_or_else(|e| unreachable!("{e}"))
    }

    fn said(text: &str) -> AssistantOutput {
        AssistantOutput {
            text: text.into(),
            finish_reason: Some("stop".into()),
            ..Default::default()
        }
    }

    #[test]
    fn weights_are_normalised_and_checked() {
        let t = |pairs: &[(&str, f64)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), *v))
                .collect::<BTreeMap<_, _>>()
        };
        let r = Rubric::new(&t(&[("judge", 2.0), ("finish", 2.0)]))
            .unwrap_or_else(|e| unreachable!("{e:?}"));
        assert_eq!(r.0["judge"], 0.5);
        assert!(r.uses("finish") && !r.uses("length"));
        assert!(Rubric::new(&t(&[("speed", 1.0)])).is_err());
        assert!(Rubric::new(&t(&[("judge", -1.0), ("finish", 2.0)])).is_err());
        assert!(Rubric::new(&t(&[("judge", 0.0)])).is_err());
        let scores = BTreeMap::from([("judge", 0.8), ("finish", 1.0)]);
        assert!((r.total(&scores) - 0.9).abs() < 1e-9);
    }

    #[test]
    fn format_checks_json_schemas_and_tool_arguments() {
        let schema =
            json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
        let r = req(
            json!({"model": "m", "messages": [], "response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": schema}}}),
        );
        assert_eq!(format(&r, &said(r#"{"n": 3}"#)), 1.0);
        assert_eq!(format(&r, &said(r#"{"n": "three"}"#)), 0.0);
        assert_eq!(format(&r, &said("three")), 0.0);
        let r =
            req(json!({"model": "m", "messages": [], "response_format": {"type": "json_object"}}));
        assert_eq!(format(&r, &said("[1]")), 0.0);
        assert_eq!(format(&r, &said("{}")), 1.0);
        let r = req(
            json!({"model": "m", "messages": [], "tools": [{"type": "function", "function": {"name": "calc", "parameters": schema}}]}),
        );
        let call = |name: &str, args: &str| AssistantOutput {
            tool_calls: vec![ToolCall {
                name: name.into(),
                arguments: args.into(),
            }],
            ..Default::default()
        };
        assert_eq!(format(&r, &call("calc", r#"{"n": 1}"#)), 1.0);
        assert_eq!(format(&r, &call("calc", r#"{"n": "x"}"#)), 0.0);
        assert_eq!(format(&r, &call("calc", "not json")), 0.0);
        assert_eq!(format(&r, &call("other", "{}")), 0.0);
        assert_eq!(format(&r, &said("plain text")), 1.0);
    }

    #[test]
    fn finish_length_latency_and_ties() {
        let caps = Caps {
            length_tokens: 2000,
            latency: Duration::from_secs(60),
        };
        let r = req(json!({"model": "m", "messages": []}));
        let mut cut = said("x");
        cut.finish_reason = Some("length".into());
        let m = measure(&r, &cut, 500, Duration::from_secs(15), caps);
        assert_eq!(m["finish"], 0.0);
        assert_eq!(m["length"], 0.75);
        assert_eq!(m["latency"], 0.75);
        assert_eq!(
            measure(&r, &said("x"), 5000, Duration::from_secs(90), caps)["length"],
            0.0
        );
        let mut s = [
            Standing {
                name: "b",
                total: 0.5,
                output_tokens: 10,
            },
            Standing {
                name: "a",
                total: 0.5,
                output_tokens: 10,
            },
            Standing {
                name: "c",
                total: 0.5,
                output_tokens: 5,
            },
            Standing {
                name: "d",
                total: 0.9,
                output_tokens: 50,
            },
        ];
        s.sort_by(rank);
        let names: Vec<&str> = s.iter().map(|s| s.name).collect();
        assert_eq!(names, ["d", "c", "a", "b"]);
    }
}
