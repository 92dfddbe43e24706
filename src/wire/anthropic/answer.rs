//! Whole Messages answer → chat completion.
//!
//! Text blocks join into `content` (null when none); `tool_use` blocks
//! become `tool_calls` (`arguments` the input serialised), except the
//! forced JSON tool's, whose input is the `content` (and the finish
//! `stop`); `thinking` blocks join into `reasoning_content`, and every
//! thinking block (signed, or redacted) is kept in `thinking_blocks` so it
//! can be sent back. Other blocks (server tools' and their results) are
//! dropped.

use serde::Deserialize;
use serde_json::{Map, Value, json};

use super::{Translation, finish_reason, usage};
use crate::wire::inspect::object_bytes;
use crate::wire::{MAX_TOOL_CALLS, NotAnAnswer};

#[derive(Deserialize)]
struct Message {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    id: Option<String>,
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    stop_reason: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
}

/// The four counts of a Messages `usage` (missing, or not a count: 0).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub(super) struct Counts {
    pub input: u64,
    pub output: u64,
    pub cache_read: u64,
    pub cache_creation: u64,
}

impl Counts {
    /// Takes the counts `u` carries, keeping the others.
    pub(super) fn absorb(&mut self, u: &Value) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64);
        for (k, slot) in [
            ("input_tokens", &mut self.input),
            ("output_tokens", &mut self.output),
            ("cache_read_input_tokens", &mut self.cache_read),
            ("cache_creation_input_tokens", &mut self.cache_creation),
        ] {
            if let Some(v) = n(k) {
                *slot = v;
            }
        }
    }

    /// As chat's `usage`.
    pub(super) fn chat(&self) -> Value {
        usage(
            self.input,
            self.output,
            self.cache_read,
            self.cache_creation,
        )
    }
}

/// Translates a whole Messages answer (a `message` object) into a
/// `chat.completion` body. A body that is not a `message` with a `content`
/// array is not an answer.
pub fn to_completion(message: &[u8], t: &Translation, created: u64) -> Result<Value, NotAnAnswer> {
    let m: Message = serde_json::from_str(object_bytes(message)?)?;
    if m.kind.as_deref() != Some("message") {
        return Err(NotAnAnswer::NotAMessage);
    }
    let Some(Value::Array(blocks)) = m.content else {
        return Err(NotAnAnswer::NoContent);
    };
    let mut text = String::new();
    let mut json_text = None;
    let mut reasoning = String::new();
    let mut thinking_blocks = Vec::new();
    let mut tool_calls = Vec::new();
    for b in &blocks {
        let s = |k: &str| b.get(k).and_then(Value::as_str).unwrap_or("");
        match s("type") {
            "text" => text.push_str(s("text")),
            "tool_use" => {
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                let arguments = input.to_string();
                if t.json_tool.as_deref() == Some(s("name")) {
                    json_text = Some(arguments);
                    continue;
                }
                if tool_calls.len() >= MAX_TOOL_CALLS {
                    return Err(NotAnAnswer::ToolCallIndex(tool_calls.len() as u64));
                }
                tool_calls.push(json!({
                    "id": s("id"),
                    "type": "function",
                    "function": {"name": s("name"), "arguments": arguments},
                }));
            }
            "thinking" => {
                reasoning.push_str(s("thinking"));
                thinking_blocks.push(json!({
                    "type": "thinking",
                    "thinking": s("thinking"),
                    "signature": s("signature"),
                }));
            }
            "redacted_thinking" => {
                thinking_blocks.push(json!({"type": "redacted_thinking", "data": s("data")}));
            }
            _ => {}
        }
    }

    let mut msg = Map::new();
    msg.insert("role".into(), "assistant".into());
    let content = match json_text {
        Some(j) => j.into(),
        None if text.is_empty() => Value::Null,
        None => text.into(),
    };
    let answered_json = !content.is_null() && t.json_tool.is_some();
    msg.insert("content".into(), content);
    let mut finish = match m.stop_reason.as_ref().and_then(Value::as_str) {
        Some(r) => finish_reason(r),
        None => "stop",
    };
    if finish == "tool_calls" && tool_calls.is_empty() && answered_json {
        finish = "stop";
    }
    if !tool_calls.is_empty() {
        msg.insert("tool_calls".into(), tool_calls.into());
    }
    if !reasoning.is_empty() {
        msg.insert("reasoning_content".into(), reasoning.into());
    }
    if !thinking_blocks.is_empty() {
        msg.insert("thinking_blocks".into(), thinking_blocks.into());
    }

    let mut counts = Counts::default();
    if let Some(u) = &m.usage {
        counts.absorb(u);
    }
    Ok(json!({
        "id": m.id.unwrap_or_default(),
        "object": "chat.completion",
        "created": created,
        "model": m.model.unwrap_or_default(),
        "choices": [{
            "index": 0,
            "message": msg,
            "finish_reason": finish,
            "logprobs": null,
        }],
        "usage": counts.chat(),
    }))
}
