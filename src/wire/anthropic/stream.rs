//! Messages event stream → chat completion chunks, one event at a time.
//!
//! - `message_start` → the first chunk (`role: "assistant"`, `content:
//!   ""`); its id, model and input usage are remembered.
//! - `content_block_start`: `text` → nothing; `tool_use` → a tool call's
//!   first chunk (`id`, `name`, `arguments: ""`; its `index` counts tool
//!   blocks); `redacted_thinking` → a `thinking_blocks` entry.
//! - `content_block_delta`: `text_delta` → `content`; `input_json_delta`
//!   → the call's `arguments` (the forced JSON tool's → `content`);
//!   `thinking_delta` → `reasoning_content`; `signature_delta` is kept.
//! - `content_block_stop` of a thinking block → one `thinking_blocks`
//!   entry, the whole block with its signature (what a client sends
//!   back); of a tool call that had no input → `arguments: "{}"`.
//! - `message_delta` → the chunk with `finish_reason`; its usage is kept.
//! - `message_stop` → (with `include_usage`) a chunk with `choices: []`
//!   and the whole usage, and the end ([`ChunkMaker::ended`]).
//! - `ping` and unknown events → nothing; `error` → [`StreamFault`].
//!
//! Bounded: at most [`MAX_BLOCKS`] open blocks, [`MAX_TOOL_CALLS`] tool
//! calls, and [`MAX_RESPONSE`] bytes of one thinking block; text only
//! ever grows by appending.

use std::collections::HashMap;

use serde::Deserialize;
use serde_json::{Value, json};

use super::answer::Counts;
use super::{Translation, finish_reason};
use crate::wire::inspect::object_bytes;
use crate::wire::{MAX_RESPONSE, MAX_TOOL_CALLS, NotAnAnswer};

/// At most this many content blocks open at once.
pub const MAX_BLOCKS: usize = 1024;
/// An `error` event's message is cut to this many bytes.
const MAX_MESSAGE: usize = 1024;

/// Why a Messages stream cannot go on.
#[derive(Debug, thiserror::Error)]
pub enum StreamFault {
    /// An `error` event: Anthropic's error type (e.g. `overloaded_error`)
    /// and its message.
    #[error("the upstream failed mid-stream ({kind}): {message}")]
    Upstream { kind: String, message: String },
    /// An event's data is not what Messages sends.
    #[error("a stream event is not an answer: {0}")]
    Garbage(#[from] NotAnAnswer),
    /// Events out of order or beyond bounds.
    #[error("the stream is malformed: {0}")]
    Malformed(&'static str),
}

#[derive(Deserialize)]
struct Event {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    index: Option<u64>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    delta: Option<Value>,
    #[serde(default)]
    usage: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Debug)]
enum Block {
    Text,
    Tool { index: usize, input: bool },
    Json { input: bool },
    Thinking { text: String, signature: String },
    Other,
}

/// Turns a Messages event stream into chat completion chunks, one event
/// at a time.
#[derive(Debug)]
pub struct ChunkMaker {
    include_usage: bool,
    json_tool: Option<String>,
    created: u64,
    id: String,
    model: String,
    started: bool,
    finished: bool,
    ended: bool,
    counts: Counts,
    blocks: HashMap<u64, Block>,
    tools: usize,
    json_used: bool,
}

fn str_of<'a>(v: Option<&'a Value>, k: &str) -> &'a str {
    v.and_then(|v| v.get(k))
        .and_then(Value::as_str)
        .unwrap_or("")
}

impl ChunkMaker {
    pub fn new(t: &Translation, created: u64) -> Self {
        ChunkMaker {
            include_usage: t.include_usage,
            json_tool: t.json_tool.clone(),
            created,
            id: String::new(),
            model: String::new(),
            started: false,
            finished: false,
            ended: false,
            counts: Counts::default(),
            blocks: HashMap::new(),
            tools: 0,
            json_used: false,
        }
    }

    /// `message_start` was seen: the upstream began answering.
    pub fn started(&self) -> bool {
        self.started
    }

    /// `message_stop` was seen: the stream is whole (the transport writes
    /// `data: [DONE]`). A stream that ends before this was cut.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The usage so far, as chat's `usage` (input from `message_start`,
    /// output from the last `message_delta`).
    pub fn usage(&self) -> Value {
        self.counts.chat()
    }

    /// Feeds one event (its SSE `event:` name, possibly empty, and its
    /// `data:`), returning the chunks it makes (often none). The data's
    /// `type` names the event; the SSE name is used when it has none.
    pub fn event(&mut self, event: &str, data: &[u8]) -> Result<Vec<Value>, StreamFault> {
        if self.ended {
            return Ok(Vec::new());
        }
        let e: Event = serde_json::from_str(object_bytes(data)?).map_err(NotAnAnswer::from)?;
        let kind = e.kind.as_deref().unwrap_or(event);
        match kind {
            "error" => return Err(upstream_error(e.error.as_ref())),
            "ping" => return Ok(Vec::new()),
            "message_start" => return self.start(e.message.as_ref()),
            "content_block_start"
            | "content_block_delta"
            | "content_block_stop"
            | "message_delta"
            | "message_stop"
                if !self.started =>
            {
                return Err(StreamFault::Malformed(
                    "an event came before `message_start`",
                ));
            }
            _ => {}
        }
        let mut out = Vec::new();
        match kind {
            "content_block_start" => self.block_start(&e, &mut out)?,
            "content_block_delta" => self.block_delta(&e, &mut out)?,
            "content_block_stop" => self.block_stop(&e, &mut out)?,
            "message_delta" => {
                if let Some(u) = &e.usage {
                    self.counts.absorb(u);
                }
                if let Some(Value::String(r)) = e.delta.as_ref().and_then(|d| d.get("stop_reason"))
                {
                    self.finish(finish_reason(r), &mut out);
                }
            }
            "message_stop" => {
                self.finish("stop", &mut out);
                if self.include_usage {
                    let mut c = self.chunk(json!([]));
                    if let Some(o) = c.as_object_mut() {
                        o.insert("usage".into(), self.counts.chat());
                    }
                    out.push(c);
                }
                self.ended = true;
            }
            _ => {} // Anthropic may add event types.
        }
        Ok(out)
    }

    fn start(&mut self, message: Option<&Value>) -> Result<Vec<Value>, StreamFault> {
        if self.started {
            return Err(StreamFault::Malformed("a second `message_start`"));
        }
        let Some(m) = message.filter(|m| m.is_object()) else {
            return Err(StreamFault::Malformed("`message_start` without a message"));
        };
        self.started = true;
        self.id = str_of(Some(m), "id").to_owned();
        self.model = str_of(Some(m), "model").to_owned();
        if let Some(u) = m.get("usage") {
            self.counts.absorb(u);
        }
        Ok(vec![
            self.delta(json!({"role": "assistant", "content": ""})),
        ])
    }

    fn block_start(&mut self, e: &Event, out: &mut Vec<Value>) -> Result<(), StreamFault> {
        let index = e
            .index
            .ok_or(StreamFault::Malformed("a block without an index"))?;
        if self.blocks.len() >= MAX_BLOCKS {
            return Err(StreamFault::Malformed("too many content blocks open"));
        }
        let b = e.content_block.as_ref();
        let block = match str_of(b, "type") {
            "text" => {
                self.text(str_of(b, "text"), out);
                Block::Text
            }
            "tool_use" if self.json_tool.as_deref() == Some(str_of(b, "name")) => {
                self.json_used = true;
                Block::Json { input: false }
            }
            "tool_use" => {
                if self.tools >= MAX_TOOL_CALLS {
                    return Err(NotAnAnswer::ToolCallIndex(self.tools as u64).into());
                }
                let tool = self.tools;
                self.tools += 1;
                out.push(self.delta(json!({"tool_calls": [{
                    "index": tool,
                    "id": str_of(b, "id"),
                    "type": "function",
                    "function": {"name": str_of(b, "name"), "arguments": ""},
                }]})));
                Block::Tool {
                    index: tool,
                    input: false,
                }
            }
            "thinking" => {
                let text = str_of(b, "thinking");
                if !text.is_empty() {
                    out.push(self.delta(json!({"reasoning_content": text})));
                }
                Block::Thinking {
                    text: text.to_owned(),
                    signature: str_of(b, "signature").to_owned(),
                }
            }
            "redacted_thinking" => {
                let entry = json!({"type": "redacted_thinking", "data": str_of(b, "data")});
                out.push(self.delta(json!({"thinking_blocks": [entry]})));
                Block::Other
            }
            _ => Block::Other,
        };
        if self.blocks.insert(index, block).is_some() {
            return Err(StreamFault::Malformed("a block started twice"));
        }
        Ok(())
    }

    fn block_delta(&mut self, e: &Event, out: &mut Vec<Value>) -> Result<(), StreamFault> {
        let index = e
            .index
            .ok_or(StreamFault::Malformed("a block without an index"))?;
        let d = e.delta.as_ref();
        let Some(block) = self.blocks.get_mut(&index) else {
            return Err(StreamFault::Malformed(
                "a delta for a block that is not open",
            ));
        };
        let delta = match (str_of(d, "type"), block) {
            ("text_delta", Block::Text) => Some(json!({"content": str_of(d, "text")})),
            ("input_json_delta", Block::Tool { index, input }) => {
                let part = str_of(d, "partial_json");
                *input |= !part.is_empty();
                let call = json!({"index": *index, "function": {"arguments": part}});
                Some(json!({"tool_calls": [call]}))
            }
            ("input_json_delta", Block::Json { input }) => {
                let part = str_of(d, "partial_json");
                *input |= !part.is_empty();
                Some(json!({"content": part}))
            }
            ("thinking_delta", Block::Thinking { text, .. }) => {
                let part = str_of(d, "thinking");
                if text.len().saturating_add(part.len()) > MAX_RESPONSE {
                    return Err(StreamFault::Malformed("a thinking block is too long"));
                }
                text.push_str(part);
                Some(json!({"reasoning_content": part}))
            }
            ("signature_delta", Block::Thinking { signature, .. }) => {
                let part = str_of(d, "signature");
                if signature.len().saturating_add(part.len()) > MAX_RESPONSE {
                    return Err(StreamFault::Malformed("a thinking signature is too long"));
                }
                signature.push_str(part);
                None
            }
            _ => None, // citations, and whatever comes next
        };
        let empty = |d: &Value| {
            ["content", "reasoning_content"]
                .iter()
                .any(|k| d.get(*k) == Some(&json!("")))
                || d.pointer("/tool_calls/0/function/arguments") == Some(&json!(""))
        };
        if let Some(delta) = delta.filter(|d| !empty(d)) {
            out.push(self.delta(delta));
        }
        Ok(())
    }

    fn block_stop(&mut self, e: &Event, out: &mut Vec<Value>) -> Result<(), StreamFault> {
        let index = e
            .index
            .ok_or(StreamFault::Malformed("a block without an index"))?;
        let Some(block) = self.blocks.remove(&index) else {
            return Err(StreamFault::Malformed(
                "a stop for a block that is not open",
            ));
        };
        let delta = match block {
            Block::Thinking { text, signature } => {
                let entry = json!({"type": "thinking", "thinking": text, "signature": signature});
                Some(json!({"thinking_blocks": [entry]}))
            }
            Block::Tool {
                index,
                input: false,
            } => {
                let call = json!({"index": index, "function": {"arguments": "{}"}});
                Some(json!({"tool_calls": [call]}))
            }
            Block::Json { input: false } => Some(json!({"content": "{}"})),
            _ => None,
        };
        if let Some(d) = delta {
            out.push(self.delta(d));
        }
        Ok(())
    }

    fn text(&self, text: &str, out: &mut Vec<Value>) {
        if !text.is_empty() {
            out.push(self.delta(json!({"content": text})));
        }
    }

    /// The chunk with the finish reason, once.
    fn finish(&mut self, reason: &'static str, out: &mut Vec<Value>) {
        if self.finished {
            return;
        }
        self.finished = true;
        let reason = if reason == "tool_calls" && self.tools == 0 && self.json_used {
            "stop"
        } else {
            reason
        };
        out.push(self.chunk(json!([{
            "index": 0,
            "delta": {},
            "finish_reason": reason,
            "logprobs": null,
        }])));
    }

    fn delta(&self, delta: Value) -> Value {
        self.chunk(json!([{
            "index": 0,
            "delta": delta,
            "finish_reason": null,
            "logprobs": null,
        }]))
    }

    fn chunk(&self, choices: Value) -> Value {
        json!({
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": choices,
        })
    }
}

/// An `error` event as a fault: its type when it is a word, its message
/// cut to [`MAX_MESSAGE`] bytes.
fn upstream_error(error: Option<&Value>) -> StreamFault {
    let kind = str_of(error, "type");
    let word = !kind.is_empty()
        && kind.len() <= 64
        && kind.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
    let mut message = str_of(error, "message").to_owned();
    if message.len() > MAX_MESSAGE {
        let mut cut = MAX_MESSAGE;
        while !message.is_char_boundary(cut) {
            cut -= 1;
        }
        message.truncate(cut);
    }
    StreamFault::Upstream {
        kind: if word {
            kind.to_owned()
        } else {
            "error".to_owned()
        },
        message,
    }
}
