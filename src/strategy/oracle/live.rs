//! Reading one base turn far enough to know whether it is for the client:
//! a turn that starts with text streams live (with any later oracle call
//! taken out of it); one that starts with a tool call is read whole, to be
//! run or rendered again, never replayed raw.

use std::collections::HashSet;
use std::sync::Arc;

use bytes::Bytes;
use futures::StreamExt;
use parking_lot::Mutex;
use serde_json::{Value, json};

use super::consult::TOOL;
use super::turn::Turn;
use super::{Oracle, Seen};
use crate::error::ModelError;
use crate::labels::Role;
use crate::model::{Call, Chunk, ChunkStream, Reply, ReplyBody};
use crate::stream;
use crate::wire::{ChatRequest, MAX_RESPONSE};

impl Oracle {
    /// The base's answer to `req`, read far enough to know what it is.
    pub(super) async fn read_turn(
        &self,
        call: &Call,
        req: Arc<ChatRequest>,
    ) -> Result<Seen, ModelError> {
        let reply = self
            .base
            .model
            .chat(call.with_role(Role::Base), req)
            .await?;
        let Reply {
            body,
            meta,
            attempt,
        } = reply;
        let mut s = match body {
            ReplyBody::Whole(c) => {
                let turn = Turn::from_completion(&c.body).unwrap_or_default();
                let reply = Reply {
                    body: ReplyBody::Whole(c),
                    meta,
                    attempt,
                };
                return Ok(if turn.calls.iter().any(|t| t.name == TOOL) {
                    Seen::Calls(reply, turn)
                } else {
                    Seen::Final(reply)
                });
            }
            ReplyBody::Stream(s) => s,
        };
        let mut seen: Vec<Chunk> = Vec::new();
        let mut calls = false;
        while let Some(c) = s.next().await {
            let c = c?;
            let real = c.real;
            calls = real && is_tool_call(&c.data);
            seen.push(c);
            if real {
                break;
            }
        }
        if !calls {
            let live = futures::stream::iter(seen.into_iter().map(Ok)).chain(s);
            let body = ReplyBody::Stream(without_oracle(ChunkStream::new(live)));
            return Ok(Seen::Final(Reply {
                body,
                meta,
                attempt,
            }));
        }
        let mut turn = Turn::default();
        let mut bytes = 0;
        for c in &seen {
            bytes += c.data.len();
            turn.absorb(&c.data);
        }
        while let Some(c) = s.next().await {
            let c = c?;
            bytes += c.data.len();
            if bytes > MAX_RESPONSE {
                return Err(ModelError::Invalid {
                    upstream: self.base.name.clone(),
                    detail: format!("the streamed turn is larger than {MAX_RESPONSE} bytes"),
                });
            }
            turn.absorb(&c.data);
        }
        let body = ReplyBody::Stream(ChunkStream::replay(Vec::new()));
        Ok(Seen::Calls(
            Reply {
                body,
                meta,
                attempt,
            },
            turn,
        ))
    }
}

/// Whether a stream chunk's delta carries a tool call.
fn is_tool_call(data: &Bytes) -> bool {
    serde_json::from_slice::<Value>(data)
        .ok()
        .and_then(|v| v.pointer("/choices/0/delta/tool_calls").cloned())
        .is_some_and(|t| t.as_array().is_some_and(|a| !a.is_empty()))
}

/// A live stream with any `oracle_consult` call taken out of it (a turn
/// that began with text and called the oracle later): the call is not
/// run, and the client never sees it.
fn without_oracle(s: ChunkStream) -> ChunkStream {
    // Indices of the oracle's calls; whether a client call went through.
    let state = Arc::new(Mutex::new((HashSet::<u64>::new(), false)));
    stream::rewrite(s, move |obj| {
        let mut st = state.lock();
        let Some(choice) = obj.get_mut("choices").and_then(|c| c.get_mut(0)) else {
            return false;
        };
        let mut edited = false;
        if let Some(Value::Array(calls)) = choice.pointer_mut("/delta/tool_calls") {
            let before = calls.len();
            calls.retain(|c| {
                let i = c.get("index").and_then(Value::as_u64).unwrap_or(0);
                if c.pointer("/function/name").and_then(Value::as_str) == Some(TOOL) {
                    st.0.insert(i);
                }
                let keep = !st.0.contains(&i);
                st.1 |= keep;
                keep
            });
            edited = calls.len() != before;
            if calls.is_empty()
                && let Some(Value::Object(d)) = choice.get_mut("delta")
            {
                d.remove("tool_calls");
            }
        }
        if !st.1 && !st.0.is_empty() && choice.get("finish_reason") == Some(&json!("tool_calls")) {
            choice["finish_reason"] = json!("stop");
            edited = true;
        }
        edited
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_late_oracle_call_is_taken_out_of_a_live_stream() {
        let chunk = |v: Value| stream::chunk_of(&v).unwrap();
        let s = ChunkStream::replay(vec![
            chunk(json!({"choices": [{"index": 0, "delta": {"content": "Let me check."}}]})),
            chunk(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "c", "function": {"name": "oracle_consult", "arguments": ""}}]}}]}),
            ),
            chunk(
                json!({"choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"question\": \"secret\"}"}}]}}]}),
            ),
            chunk(json!({"choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]})),
        ]);
        let out: Vec<String> = without_oracle(s)
            .map(|c| String::from_utf8_lossy(&c.unwrap().data).into_owned())
            .collect()
            .await;
        let all = out.join("\n");
        assert!(all.contains("Let me check."));
        assert!(
            !all.contains("oracle_consult") && !all.contains("secret"),
            "{all}"
        );
        assert!(all.contains("\"finish_reason\":\"stop\""), "{all}");
    }
}
