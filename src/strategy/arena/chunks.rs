//! A contestant's stream as one choice of an arena's streamed answer,
//! rebuilt chunk by chunk from the allow-list of [`shape`](super::shape):
//! every chunk carries the arena's [`Face`] and one choice with `index`,
//! `delta` (`role`, `content`, `tool_calls`) and `finish_reason`.
//!
//! Every choice streams in OpenAI's shape whoever answers: a role chunk
//! first (`{"role": "assistant", "content": ""}`), then text and tool-call
//! deltas, then one chunk with an empty delta and the normalised finish
//! reason. Reasoning, logprobs and any other field are dropped, and so is
//! a chunk left with nothing to say; the upstream's usage chunk is dropped
//! too (the arena sends its own, [`usage_last`]). An error names no
//! upstream: it would say who answered.

use std::sync::Arc;

use futures::StreamExt;
use serde_json::{Map, Value, json};

use super::shape::{Face, arguments, call_id, finish, text_of, usage};
use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::model::ChunkStream;
use crate::stream::chunk_of;
use crate::wire::MAX_TOOL_CALLS;

/// One choice's progress through its stream.
struct Choice {
    face: Arc<Face>,
    index: usize,
    started: bool,
    finished: bool,
    tools: bool,
    /// The upstream's index of each tool call so far (none when it gave
    /// none), in order: a call's position here is its index to the client.
    calls: Vec<Option<u64>>,
}

impl Choice {
    fn chunk(&self, delta: Value, reason: Option<&str>) -> Value {
        let choice = json!([{"index": self.index, "delta": delta, "finish_reason": reason}]);
        self.face
            .object("chat.completion.chunk", vec![("choices", choice)])
    }

    /// The chunks an upstream chunk becomes (none, or up to three).
    fn take(&mut self, v: &Value) -> Vec<Value> {
        let Some(c) = v.get("choices").and_then(|c| c.get(0)) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
        }
        if self.finished {
            return out;
        }
        let delta = c.get("delta").unwrap_or(&Value::Null);
        let mut text = text_of(delta.get("content"));
        text.push_str(&text_of(delta.get("refusal")));
        let calls = self.calls(delta.get("tool_calls"));
        let mut d = Map::new();
        if !text.is_empty() {
            d.insert("content".into(), Value::String(text));
        }
        if !calls.is_empty() {
            self.tools = true;
            d.insert("tool_calls".into(), Value::Array(calls));
        }
        if !d.is_empty() {
            out.push(self.chunk(Value::Object(d), None));
        }
        if let Some(reason) = finish(c.get("finish_reason"), self.tools) {
            self.finished = true;
            out.push(self.chunk(json!({}), Some(reason)));
        }
        out
    }

    /// A delta's tool calls: the first piece of each call gets an id
    /// minted here, `type` and the function's name; later pieces carry
    /// only what they add.
    fn calls(&mut self, v: Option<&Value>) -> Vec<Value> {
        let Some(calls) = v.and_then(Value::as_array) else {
            return Vec::new();
        };
        let mut out = Vec::new();
        for call in calls {
            let at = call.get("index").and_then(Value::as_u64);
            let has_id = call
                .get("id")
                .and_then(Value::as_str)
                .is_some_and(|s| !s.is_empty());
            let known = match at {
                Some(i) => self.calls.iter().position(|k| *k == Some(i)),
                None if has_id => None,
                None => self.calls.len().checked_sub(1),
            };
            let f = call.get("function").unwrap_or(&Value::Null);
            let (name, args) = (text_of(f.get("name")), arguments(f.get("arguments")));
            match known {
                Some(pos) => {
                    let mut fm = Map::new();
                    if !name.is_empty() {
                        fm.insert("name".into(), Value::String(name));
                    }
                    if !args.is_empty() {
                        fm.insert("arguments".into(), Value::String(args));
                    }
                    if !fm.is_empty() {
                        out.push(json!({"index": pos, "function": fm}));
                    }
                }
                None if self.calls.len() < MAX_TOOL_CALLS => {
                    self.calls.push(at);
                    out.push(json!({
                        "index": self.calls.len() - 1,
                        "id": call_id(),
                        "type": "function",
                        "function": {"name": name, "arguments": args},
                    }));
                }
                None => {}
            }
        }
        out
    }

    /// What closes the choice when its upstream ended without saying
    /// why: the role chunk if nothing came, and a finish.
    fn end(&mut self) -> Vec<Value> {
        let mut out = Vec::new();
        if !self.started {
            self.started = true;
            out.push(self.chunk(json!({"role": "assistant", "content": ""}), None));
        }
        if !self.finished {
            self.finished = true;
            let reason = if self.tools { "tool_calls" } else { "stop" };
            out.push(self.chunk(json!({}), Some(reason)));
        }
        out
    }
}

/// `s` as choice `index` of the arena's answer.
pub fn choice(s: ChunkStream, face: Arc<Face>, index: usize) -> ChunkStream {
    let mut c = Choice {
        face: face.clone(),
        index,
        started: false,
        finished: false,
        tools: false,
        calls: Vec::new(),
    };
    ChunkStream::new(async_stream::stream! {
        let mut s = s;
        let mut broke = false;
        while let Some(item) = s.next().await {
            match item {
                Ok(chunk) => {
                    let Ok(v) = serde_json::from_slice::<Value>(&chunk.data) else {
                        continue;
                    };
                    for out in c.take(&v) {
                        yield chunk_of(&out);
                    }
                }
                Err(e) => {
                    tracing::debug!(error = %e, "an arena contestant's stream failed");
                    broke = true;
                    yield Err(ModelError::Invalid {
                        upstream: face.model.as_str().into(),
                        detail: format!("choice {index} broke off"),
                    });
                    break;
                }
            }
        }
        if !broke {
            for out in c.end() {
                yield chunk_of(&out);
            }
        }
    })
}

/// `s`, then one usage chunk with every call of the request.
pub fn usage_last(s: ChunkStream, face: Arc<Face>, ctx: Arc<RequestCtx>) -> ChunkStream {
    let last = futures::stream::once(async move {
        let fields = vec![("choices", json!([])), ("usage", usage(ctx.totals()))];
        chunk_of(&face.object("chat.completion.chunk", fields))
    });
    ChunkStream::new(s.chain(last))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh() -> Choice {
        let face = Arc::new(Face {
            id: "arena-1".into(),
            created: 7,
            model: "ab".into(),
            arena_id: Some("arena-1".into()),
        });
        Choice {
            face,
            index: 1,
            started: false,
            finished: false,
            tools: false,
            calls: Vec::new(),
        }
    }

    fn deltas(out: &[Value]) -> Vec<Value> {
        out.iter()
            .map(|c| {
                let ch = &c["choices"][0];
                json!([ch["delta"], ch["finish_reason"]])
            })
            .collect()
    }

    #[test]
    fn reasoning_is_dropped_and_the_shape_is_openais() {
        let mut c = fresh();
        let first = c.take(&json!({"id": "x", "created": 99, "system_fingerprint": "fp",
            "choices": [{"index": 0, "delta": {"role": "assistant", "reasoning_content": "hm"}, "logprobs": null}]}));
        assert_eq!(
            deltas(&first),
            [json!([{"role": "assistant", "content": ""}, null])]
        );
        assert!(
            c.take(&json!({"choices": [{"delta": {"reasoning_content": "hm"}}]}))
                .is_empty()
        );
        let last = c.take(&json!({"choices": [{"delta": {"content": "hi"}, "finish_reason": "eos", "stop_reason": 2}]}));
        assert_eq!(
            deltas(&last),
            [json!([{"content": "hi"}, null]), json!([{}, "stop"])]
        );
        assert!(
            c.take(&json!({"choices": [{"delta": {"content": "late"}}]}))
                .is_empty()
        );
        assert!(c.end().is_empty());
        for chunk in first.iter().chain(&last) {
            let keys: Vec<&String> = chunk.as_object().unwrap().keys().collect();
            assert_eq!(
                keys,
                ["id", "object", "created", "model", "choices", "arena_id"]
            );
            assert_eq!(chunk["created"], 7);
            assert_eq!(chunk["choices"][0]["index"], 1);
        }
    }

    #[test]
    fn tool_calls_get_new_ids_and_dense_indices() {
        let mut c = fresh();
        let out = c.take(&json!({"choices": [{"delta": {"tool_calls": [
            {"index": 3, "id": "chatcmpl-tool-9", "type": "function", "function": {"name": "f", "arguments": ""}}]}}]}));
        let call = &out[1]["choices"][0]["delta"]["tool_calls"][0];
        assert_eq!(call["index"], 0);
        assert_eq!(call["id"].as_str().unwrap().len(), 9);
        assert_eq!(call["function"], json!({"name": "f", "arguments": ""}));
        let out = c.take(&json!({"choices": [{"delta": {"tool_calls": [
            {"index": 3, "id": "chatcmpl-tool-9", "function": {"arguments": "{}"}}]}, "finish_reason": "stop"}]}));
        assert_eq!(
            deltas(&out),
            [
                json!([{"tool_calls": [{"index": 0, "function": {"arguments": "{}"}}]}, null]),
                json!([{}, "tool_calls"])
            ]
        );
    }

    #[test]
    fn a_stream_that_ends_unsaid_is_closed() {
        let mut c = fresh();
        assert_eq!(
            deltas(&c.end()),
            [
                json!([{"role": "assistant", "content": ""}, null]),
                json!([{}, "stop"])
            ]
        );
    }
}
