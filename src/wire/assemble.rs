//! Builds a whole chat completion from the chunks of a streamed one.
//!
//! conclave streams a call upstream when its caller wants a whole answer
//! but may drop the call early (a race candidate, a panellist): servers
//! of the llama.cpp family stop generating when a *stream's* client goes
//! away, not a whole answer's. The chunks are put back together here as
//! the body the server would have sent whole: every choice by its
//! `index`, text and other string deltas (`reasoning_content`,
//! `refusal`) concatenated, tool calls merged by their index, `logprobs`
//! lists joined, the last `finish_reason` and `usage`, and every other
//! top-level field (`id`, `model`, `system_fingerprint`, a server's
//! `timings`) as the chunks last gave it.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use super::{MAX_CHOICES, MAX_TOOL_CALLS, NotAnAnswer};

/// One choice being put back together.
#[derive(Default)]
struct Choice {
    message: Map<String, Value>,
    tool_calls: BTreeMap<u64, Map<String, Value>>,
    logprobs: Map<String, Value>,
    finish_reason: Option<Value>,
}

/// Chunks in, one `chat.completion` body out.
#[derive(Default)]
pub struct Assembler {
    top: Map<String, Value>,
    choices: BTreeMap<u64, Choice>,
    usage: Option<Value>,
}

impl Assembler {
    /// Adds one chunk (an SSE `data:` payload, already checked to be a
    /// JSON object by the relay).
    pub fn add(&mut self, data: &[u8]) -> Result<(), NotAnAnswer> {
        let Value::Object(chunk) = serde_json::from_slice(data)? else {
            return Err(NotAnAnswer::NotObject);
        };
        for (k, v) in chunk {
            match k.as_str() {
                "choices" => {
                    for c in v.as_array().into_iter().flatten() {
                        self.choice(c)?;
                    }
                }
                "usage" if !v.is_null() => self.usage = Some(v),
                "usage" | "object" => {}
                _ if v.is_null() && self.top.contains_key(&k) => {}
                _ => {
                    self.top.insert(k, v);
                }
            }
        }
        Ok(())
    }

    fn choice(&mut self, c: &Value) -> Result<(), NotAnAnswer> {
        let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
        if index >= MAX_CHOICES as u64 {
            let n = usize::try_from(index).unwrap_or(usize::MAX);
            return Err(NotAnAnswer::TooManyChoices(n.saturating_add(1)));
        }
        let choice = self.choices.entry(index).or_default();
        if let Some(reason) = c.get("finish_reason").filter(|r| !r.is_null()) {
            choice.finish_reason = Some(reason.clone());
        }
        if let Some(Value::Object(lp)) = c.get("logprobs") {
            join_lists(&mut choice.logprobs, lp);
        }
        let Some(Value::Object(delta)) = c.get("delta") else {
            return Ok(());
        };
        for (k, v) in delta {
            match (k.as_str(), v) {
                ("tool_calls", Value::Array(calls)) => {
                    for call in calls {
                        merge_call(&mut choice.tool_calls, call)?;
                    }
                }
                (_, Value::Null) => {}
                ("role", _) => {
                    choice.message.insert(k.clone(), v.clone());
                }
                (_, Value::String(s)) => append(&mut choice.message, k, s),
                _ => {
                    choice.message.insert(k.clone(), v.clone());
                }
            }
        }
        Ok(())
    }

    /// The whole answer, as the server would have sent it unstreamed.
    pub fn finish(self) -> Value {
        let mut body = Map::new();
        for key in ["id", "object", "created", "model"] {
            let v = match key {
                "object" => Value::from("chat.completion"),
                _ => self.top.get(key).cloned().unwrap_or(Value::Null),
            };
            body.insert(key.into(), v);
        }
        for (k, v) in self.top {
            body.entry(k).or_insert(v);
        }
        let choices: Vec<Value> = self
            .choices
            .into_iter()
            .map(|(index, c)| {
                let mut message = Map::new();
                message.insert("role".into(), Value::from("assistant"));
                let content = c.message.get("content").cloned().unwrap_or(Value::Null);
                message.insert("content".into(), content);
                for (k, v) in c.message {
                    message.entry(k).or_insert(v);
                }
                if !c.tool_calls.is_empty() {
                    let calls = c.tool_calls.into_values().map(Value::Object).collect();
                    message.insert("tool_calls".into(), Value::Array(calls));
                }
                let mut choice = Map::new();
                choice.insert("index".into(), Value::from(index));
                choice.insert("message".into(), Value::Object(message));
                let logprobs = match c.logprobs.is_empty() {
                    true => Value::Null,
                    false => Value::Object(c.logprobs),
                };
                choice.insert("logprobs".into(), logprobs);
                let reason = c.finish_reason.unwrap_or(Value::Null);
                choice.insert("finish_reason".into(), reason);
                Value::Object(choice)
            })
            .collect();
        body.insert("choices".into(), Value::Array(choices));
        if let Some(u) = self.usage {
            body.insert("usage".into(), u);
        }
        Value::Object(body)
    }
}

/// Appends a string delta to what the field holds so far.
fn append(into: &mut Map<String, Value>, key: &str, s: &str) {
    match into.get_mut(key) {
        Some(Value::String(have)) => have.push_str(s),
        _ => {
            into.insert(key.to_owned(), Value::from(s));
        }
    }
}

/// Merges one streamed tool-call fragment into the call with its index
/// (no index: the last call, as some servers send continuations).
fn merge_call(
    calls: &mut BTreeMap<u64, Map<String, Value>>,
    fragment: &Value,
) -> Result<(), NotAnAnswer> {
    let last = calls.keys().next_back().copied().unwrap_or(0);
    let index = fragment
        .get("index")
        .and_then(Value::as_u64)
        .unwrap_or(last);
    if index >= MAX_TOOL_CALLS as u64 {
        return Err(NotAnAnswer::ToolCallIndex(index));
    }
    let call = calls.entry(index).or_default();
    let Some(fragment) = fragment.as_object() else {
        return Ok(());
    };
    for (k, v) in fragment {
        match (k.as_str(), v) {
            ("index", _) | (_, Value::Null) => {}
            ("function", Value::Object(f)) => {
                let Value::Object(into) = call
                    .entry("function")
                    .or_insert_with(|| Value::Object(Map::new()))
                else {
                    continue;
                };
                for (fk, fv) in f {
                    match fv {
                        Value::String(s) => append(into, fk, s),
                        Value::Null => {}
                        other => {
                            into.insert(fk.clone(), other.clone());
                        }
                    }
                }
            }
            _ => {
                call.insert(k.clone(), v.clone());
            }
        }
    }
    Ok(())
}

/// Joins `logprobs` lists (`content`, `refusal`) chunk after chunk.
fn join_lists(into: &mut Map<String, Value>, from: &Map<String, Value>) {
    for (k, v) in from {
        match (into.get_mut(k), v) {
            (Some(Value::Array(have)), Value::Array(more)) => have.extend(more.iter().cloned()),
            (_, Value::Null) => {}
            _ => {
                into.insert(k.clone(), v.clone());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn assemble(chunks: &[Value]) -> Value {
        let mut a = Assembler::default();
        for c in chunks {
            a.add(c.to_string().as_bytes()).unwrap();
        }
        a.finish()
    }

    #[test]
    fn text_tool_calls_and_extras_come_back_whole() {
        let body = assemble(&[
            json!({"id": "c1", "object": "chat.completion.chunk", "created": 7, "model": "m", "system_fingerprint": "fp",
                   "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": null}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "Hel", "reasoning_content": "hm"},
                   "logprobs": {"content": [{"token": "Hel"}]}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"content": "lo"}, "logprobs": {"content": [{"token": "lo"}]}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_1", "type": "function",
                   "function": {"name": "get", "arguments": "{\"a\""}}]}}]}),
            json!({"id": "c1", "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]},
                   "finish_reason": "tool_calls"}], "timings": {"predicted_n": 3}}),
            json!({"id": "c1", "choices": [], "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}}),
        ]);
        assert_eq!(
            body,
            json!({
                "id": "c1", "object": "chat.completion", "created": 7, "model": "m", "system_fingerprint": "fp",
                "timings": {"predicted_n": 3},
                "choices": [{"index": 0, "message": {"role": "assistant", "content": "Hello", "reasoning_content": "hm",
                    "tool_calls": [{"id": "call_1", "type": "function", "function": {"name": "get", "arguments": "{\"a\":1}"}}]},
                    "logprobs": {"content": [{"token": "Hel"}, {"token": "lo"}]}, "finish_reason": "tool_calls"}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 3, "total_tokens": 8}
            })
        );
    }

    #[test]
    fn several_choices_keep_their_index_and_no_text_is_null() {
        let body = assemble(&[
            json!({"id": "x", "choices": [{"index": 1, "delta": {"content": "b"}}, {"index": 0, "delta": {"content": "a"}}]}),
            json!({"id": "x", "choices": [{"index": 1, "delta": {}, "finish_reason": "stop"}, {"index": 0, "delta": {}, "finish_reason": "length"}]}),
            json!({"id": "x", "choices": [{"index": 2, "delta": {"tool_calls": [{"index": 0, "function": {"name": "f"}}]}}]}),
        ]);
        let choices = body["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 3);
        assert_eq!(choices[0]["message"]["content"], "a");
        assert_eq!(choices[0]["finish_reason"], "length");
        assert_eq!(choices[1]["message"]["content"], "b");
        assert_eq!(choices[2]["message"]["content"], Value::Null);
        assert_eq!(
            choices[2]["message"]["tool_calls"][0]["function"]["name"],
            "f"
        );
        assert!(body.get("usage").is_none());
    }

    #[test]
    fn indexes_out_of_bounds_are_refused() {
        let mut a = Assembler::default();
        assert!(
            a.add(br#"{"choices":[{"index":100000,"delta":{}}]}"#)
                .is_err()
        );
        assert!(
            a.add(br#"{"choices":[{"delta":{"tool_calls":[{"index":4000000000}]}}]}"#)
                .is_err()
        );
        assert!(a.add(b"[]").is_err());
    }
}
