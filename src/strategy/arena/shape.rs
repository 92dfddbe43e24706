//! What an arena answer carries, built from scratch by allow-list rather
//! than by patching a contestant's body: nothing in it may differ by model
//! except what the model said.
//!
//! - [`Face`]: the arena's own `id`, `created` (when the request reached
//!   the arena, one time for the whole answer), `model` (the route) and
//!   `arena_id`, the only top-level fields besides `choices` and `usage`.
//! - [`whole`]: a whole answer from the contestants' bodies: each choice
//!   keeps `index`, `message` (`role`, `content`, `tool_calls`) and a
//!   normalised `finish_reason`, nothing else.
//! - [`text_of`], [`finish`], [`call_id`]: the normalisers a streamed
//!   answer shares (`chunks`): text parts only (a refusal is what the
//!   model said, so it is text), the four OpenAI finish reasons, and
//!   tool-call ids minted by conclave in one format.
//! - [`usage`]: the three token counts of every call of the request
//!   (both contestants together): no details, which differ by provider.

use rand::Rng;
use serde_json::{Map, Value, json};

use crate::context::Totals;

/// The top-level identity every part of an arena answer shares.
#[derive(Debug, Clone)]
pub struct Face {
    pub id: String,
    pub created: u64,
    pub model: String,
    /// The arena to vote on (none when it could not be recorded, or when
    /// one contestant failed).
    pub arena_id: Option<String>,
}

impl Face {
    /// `{id, object, created, model, …fields, arena_id}`.
    pub fn object(&self, object: &str, fields: Vec<(&str, Value)>) -> Value {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("object".into(), json!(object));
        m.insert("created".into(), json!(self.created));
        m.insert("model".into(), json!(self.model));
        for (k, v) in fields {
            m.insert(k.into(), v);
        }
        if let Some(a) = &self.arena_id {
            m.insert("arena_id".into(), json!(a));
        }
        Value::Object(m)
    }
}

/// The request's token counts, both contestants together (so the same
/// whichever is A), without any provider's details.
pub fn usage(t: Totals) -> Value {
    json!({
        "prompt_tokens": t.input_tokens,
        "completion_tokens": t.output_tokens,
        "total_tokens": t.input_tokens.saturating_add(t.output_tokens),
    })
}

/// A whole answer: each contestant's body as the choice of its position.
pub fn whole(face: &Face, bodies: &[Value], t: Totals) -> Value {
    let choices: Vec<Value> = bodies
        .iter()
        .enumerate()
        .map(|(i, b)| choice(b.pointer("/choices/0").unwrap_or(&Value::Null), i))
        .collect();
    face.object(
        "chat.completion",
        vec![("choices", Value::Array(choices)), ("usage", usage(t))],
    )
}

/// One whole choice, from a contestant's choice 0.
fn choice(c: &Value, index: usize) -> Value {
    let msg = c.get("message").unwrap_or(&Value::Null);
    let mut text = text_of(msg.get("content"));
    if text.is_empty() {
        text = text_of(msg.get("refusal"));
    }
    let calls: Vec<Value> = msg
        .get("tool_calls")
        .and_then(Value::as_array)
        .map(|calls| {
            calls
                .iter()
                .filter_map(|c| c.get("function"))
                .take(crate::wire::MAX_TOOL_CALLS)
                .map(|f| {
                    json!({
                        "id": call_id(),
                        "type": "function",
                        "function": {"name": text_of(f.get("name")), "arguments": arguments(f.get("arguments"))},
                    })
                })
                .collect()
        })
        .unwrap_or_default();
    let mut m = Map::new();
    m.insert("role".into(), json!("assistant"));
    let content = if text.is_empty() && !calls.is_empty() {
        Value::Null
    } else {
        Value::String(text)
    };
    m.insert("content".into(), content);
    let tools = !calls.is_empty();
    if tools {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    json!({
        "index": index,
        "message": m,
        "finish_reason": finish(c.get("finish_reason"), tools).unwrap_or(if tools { "tool_calls" } else { "stop" }),
    })
}

/// What a model said in `content` (or `refusal`): a string, or the text
/// of its text parts; reasoning parts and anything else are left out.
pub fn text_of(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter(|p| p.get("type").is_none_or(|t| t == "text"))
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect(),
        _ => String::new(),
    }
}

/// A tool call's arguments as a string (some upstreams send an object).
pub fn arguments(v: Option<&Value>) -> String {
    match v {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => String::new(),
        Some(other) => other.to_string(),
    }
}

/// An upstream's `finish_reason` as one of OpenAI's four (`None` while
/// the answer goes on: null, empty or not a string). A choice with tool
/// calls that says it stopped finished with `tool_calls`, as OpenAI says.
pub fn finish(v: Option<&Value>, tools: bool) -> Option<&'static str> {
    let said = v.and_then(Value::as_str).filter(|s| !s.is_empty())?;
    let lower = said.to_ascii_lowercase();
    let word = lower.strip_prefix("finish_reason_").unwrap_or(&lower);
    let reason = match word {
        "length"
        | "max_tokens"
        | "max_output_tokens"
        | "max_completion_tokens"
        | "model_length"
        | "model_context_window_exceeded" => "length",
        "content_filter" | "safety" | "recitation" | "blocklist" | "prohibited_content"
        | "spii" | "image_safety" | "refusal" => "content_filter",
        "tool_calls" | "tool_call" | "tool_use" | "function_call" => "tool_calls",
        _ => "stop",
    };
    Some(if tools && reason == "stop" {
        "tool_calls"
    } else {
        reason
    })
}

/// A tool call's id, minted here: nine letters and digits, a format every
/// common upstream accepts back (Mistral's is the strictest), whichever
/// model made the call.
pub fn call_id() -> String {
    rand::rng()
        .sample_iter(rand::distr::Alphanumeric)
        .take(9)
        .map(char::from)
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finish_reasons_become_openais_four() {
        let f = |s: &str, tools| finish(Some(&json!(s)), tools);
        for (said, want) in [
            ("stop", "stop"),
            ("eos", "stop"),
            ("end_turn", "stop"),
            ("STOP", "stop"),
            ("abort", "stop"),
            ("length", "length"),
            ("MAX_TOKENS", "length"),
            ("FINISH_REASON_MAX_TOKENS", "length"),
            ("SAFETY", "content_filter"),
            ("content_filter", "content_filter"),
            ("tool_use", "tool_calls"),
            ("function_call", "tool_calls"),
        ] {
            assert_eq!(f(said, false), Some(want), "{said}");
        }
        assert_eq!(f("stop", true), Some("tool_calls"));
        assert_eq!(f("length", true), Some("length"));
        assert_eq!(finish(Some(&Value::Null), false), None);
        assert_eq!(finish(Some(&json!("")), false), None);
        assert_eq!(finish(Some(&json!(3)), false), None);
    }

    #[test]
    fn a_whole_choice_keeps_only_what_the_model_said() {
        let body = json!({"choices": [{"index": 3, "logprobs": {"content": []}, "stop_reason": 7,
            "finish_reason": "eos", "provider": "x",
            "message": {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm"}, {"type": "text", "text": "hi"}],
                "reasoning_content": "hm", "annotations": [], "refusal": null,
                "tool_calls": [{"id": "chatcmpl-tool-1", "type": "function", "index": 0,
                    "function": {"name": "f", "arguments": {"a": 1}}}]}}]});
        let face = Face {
            id: "arena-1".into(),
            created: 5,
            model: "ab".into(),
            arena_id: None,
        };
        let out = whole(&face, &[body], Totals::default());
        let c = &out["choices"][0];
        assert_eq!(c.as_object().unwrap().len(), 3);
        assert_eq!(c["index"], 0);
        assert_eq!(c["finish_reason"], "tool_calls");
        let m = c["message"].as_object().unwrap();
        assert_eq!(
            m.keys().collect::<Vec<_>>(),
            ["role", "content", "tool_calls"]
        );
        assert_eq!(m["content"], "hi");
        let call = &m["tool_calls"][0];
        assert_eq!(call["function"]["arguments"], "{\"a\":1}");
        let id = call["id"].as_str().unwrap();
        assert!(id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()));
        assert_eq!(
            out.as_object().unwrap().keys().collect::<Vec<_>>(),
            ["id", "object", "created", "model", "choices", "usage"]
        );
    }

    #[test]
    fn a_refusal_is_the_text() {
        let body = json!({"choices": [{"message": {"content": null, "refusal": "no"}, "finish_reason": "stop"}]});
        let face = Face {
            id: "x".into(),
            created: 1,
            model: "m".into(),
            arena_id: Some("arena-1".into()),
        };
        let out = whole(&face, &[body], Totals::default());
        assert_eq!(out["choices"][0]["message"]["content"], "no");
        assert_eq!(out["arena_id"], "arena-1");
    }
}
