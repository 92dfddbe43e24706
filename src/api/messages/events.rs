//! [`Messages`]: the Messages dialect's [`Render`]. A whole answer is
//! the `message` object (`render::whole`); a stream is Anthropic's event
//! stream, each event `event: <type>\ndata: <json>\n\n`:
//!
//! - opening, with the first chunk (or the end, a failure, or the first
//!   keep-alive): `message_start` (no content yet; `usage.input_tokens`
//!   is conclave's estimate, the real count comes in `message_delta`),
//!   whose `model` is the first chunk's own (the answering model's name,
//!   as a whole answer's: see docs/http.md), else the one asked for;
//! - `keepalive`: `ping`, while a strategy works before its answer (the
//!   first one after `message_start`, which then names the model asked
//!   for: no model has answered yet);
//! - `chunk`: chat deltas of choice 0 as content blocks, one open at a
//!   time, each opened by `content_block_start` and closed by
//!   `content_block_stop` when the next opens or the answer ends:
//!   reasoning text as a `thinking` block (`thinking_delta`, and a
//!   `signature_delta` for a signed `thinking_blocks` delta), text as a
//!   `text` block (`text_delta`), each tool call (by its chat `index`) as
//!   a `tool_use` block (`input_json_delta`). Usage and `finish_reason`
//!   are kept for the end; the text of other choices (an arena's second
//!   answer) is written at the end as a text block of its own. A
//!   fragment of a call already closed is dropped, as is anything past
//!   [`MAX_BLOCKS`] blocks;
//! - `end`: `message_delta` (`stop_reason`, the whole `usage`, and an
//!   arena's `arena_id`) and `message_stop`;
//! - `fail`: an `error` event in Anthropic's shape.

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Value, json};

use super::render::{self, Head, reasoning_of};
use crate::api::error::ApiError;
use crate::api::render::MAX_OTHER_CHOICES;
use crate::api::render::{Render, model_of};
use crate::model::Chunk;
use crate::sink::Totals;

/// The most content blocks one streamed message opens.
pub const MAX_BLOCKS: usize = 1024;

/// The block being written.
#[derive(Debug, Clone, Copy, PartialEq)]
enum Open {
    Thinking,
    Text,
    /// A tool call, by its chat `index`.
    Tool(u64),
}

/// Writes one answer in the Messages dialect.
pub struct Messages {
    head: Head,
    /// The first chunk's model.
    model: Option<String>,
    opened: bool,
    finished: bool,
    /// Blocks started so far.
    blocks: usize,
    open: Option<Open>,
    /// Chat tool-call indexes already given a block.
    calls: Vec<u64>,
    usage: Option<Value>,
    finish_reason: Option<String>,
    others: Vec<(u64, String)>,
    arena_id: Option<Value>,
}

impl Messages {
    pub fn new(head: Head) -> Self {
        Messages {
            head,
            model: None,
            opened: false,
            finished: false,
            blocks: 0,
            open: None,
            calls: Vec::new(),
            usage: None,
            finish_reason: None,
            others: Vec::new(),
            arena_id: None,
        }
    }

    fn emit(out: &mut BytesMut, kind: &str, event: &Value) {
        out.put_slice(b"event: ");
        out.put_slice(kind.as_bytes());
        out.put_slice(b"\ndata: ");
        out.put_slice(event.to_string().as_bytes());
        out.put_slice(b"\n\n");
    }

    fn ensure_open(&mut self, out: &mut BytesMut) {
        if self.opened {
            return;
        }
        self.opened = true;
        let message = json!({
            "id": self.head.id,
            "type": "message",
            "role": "assistant",
            "model": self.model.as_deref().unwrap_or(&self.head.model),
            "content": [],
            "stop_reason": null,
            "stop_sequence": null,
            "usage": {"input_tokens": self.head.input_estimate, "output_tokens": 0},
        });
        Self::emit(
            out,
            "message_start",
            &json!({"type": "message_start", "message": message}),
        );
    }

    /// Opens a block (closing the open one); false past [`MAX_BLOCKS`].
    fn start(&mut self, out: &mut BytesMut, kind: Open, block: Value) -> bool {
        self.close(out);
        if self.blocks >= MAX_BLOCKS {
            return false;
        }
        let index = self.blocks;
        self.blocks += 1;
        self.open = Some(kind);
        let event = json!({"type": "content_block_start", "index": index, "content_block": block});
        Self::emit(out, "content_block_start", &event);
        true
    }

    fn close(&mut self, out: &mut BytesMut) {
        if self.open.take().is_some() {
            let index = self.blocks.saturating_sub(1);
            let event = json!({"type": "content_block_stop", "index": index});
            Self::emit(out, "content_block_stop", &event);
        }
    }

    /// A delta into the open block of kind `kind` (opened with `block`
    /// when another is open).
    fn delta(&mut self, out: &mut BytesMut, kind: Open, block: Value, delta: Value) {
        if self.open != Some(kind) && !self.start(out, kind, block) {
            return;
        }
        let index = self.blocks.saturating_sub(1);
        let event = json!({"type": "content_block_delta", "index": index, "delta": delta});
        Self::emit(out, "content_block_delta", &event);
    }

    fn text(&mut self, out: &mut BytesMut, text: &str) {
        let block = json!({"type": "text", "text": ""});
        self.delta(
            out,
            Open::Text,
            block,
            json!({"type": "text_delta", "text": text}),
        );
    }

    fn absorb(&mut self, data: &[u8], out: &mut BytesMut) {
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            return;
        };
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            self.usage = Some(u.clone());
        }
        if let Some(id) = v.get("arena_id").filter(|id| id.is_string()) {
            self.arena_id = Some(id.clone());
        }
        let choices = v.get("choices").and_then(Value::as_array);
        for c in choices.into_iter().flatten() {
            let index = c.get("index").and_then(Value::as_u64).unwrap_or(0);
            let delta = c.get("delta").unwrap_or(&Value::Null);
            if index == 0 {
                if let Some(f) = c.get("finish_reason").and_then(Value::as_str) {
                    self.finish_reason = Some(f.to_owned());
                }
                self.choice_delta(delta, out);
            } else if index <= MAX_OTHER_CHOICES
                && let Some(t) = delta.get("content").and_then(Value::as_str)
            {
                match self.others.iter_mut().find(|o| o.0 == index) {
                    Some(o) => o.1.push_str(t),
                    None => self.others.push((index, t.to_owned())),
                }
            }
        }
    }

    fn choice_delta(&mut self, delta: &Value, out: &mut BytesMut) {
        let thinking = json!({"type": "thinking", "thinking": "", "signature": ""});
        if let Some(t) = reasoning_of(delta).filter(|t| !t.is_empty()) {
            let d = json!({"type": "thinking_delta", "thinking": t});
            self.delta(out, Open::Thinking, thinking.clone(), d);
        }
        let signed = delta.get("thinking_blocks").and_then(Value::as_array);
        for b in signed.into_iter().flatten() {
            if let Some(sig) = b
                .get("signature")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
            {
                let d = json!({"type": "signature_delta", "signature": sig});
                self.delta(out, Open::Thinking, thinking.clone(), d);
            }
        }
        if let Some(t) = delta
            .get("content")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
        {
            self.text(out, t);
        }
        let calls = delta.get("tool_calls").and_then(Value::as_array);
        for call in calls.into_iter().flatten() {
            self.tool_delta(call, out);
        }
    }

    fn tool_delta(&mut self, call: &Value, out: &mut BytesMut) {
        let index = call.get("index").and_then(Value::as_u64).unwrap_or(0);
        let f = call.get("function").unwrap_or(&Value::Null);
        if self.open != Some(Open::Tool(index)) {
            if self.calls.contains(&index) {
                return;
            }
            let id = call.get("id").and_then(Value::as_str).map_or_else(
                || render::tool_id(&self.head.id, self.calls.len()),
                str::to_owned,
            );
            let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
            let block = json!({"type": "tool_use", "id": id, "name": name, "input": {}});
            if !self.start(out, Open::Tool(index), block) {
                return;
            }
            self.calls.push(index);
        }
        if let Some(a) = f
            .get("arguments")
            .and_then(Value::as_str)
            .filter(|a| !a.is_empty())
        {
            let d = json!({"type": "input_json_delta", "partial_json": a});
            self.delta(out, Open::Tool(index), Value::Null, d);
        }
    }
}

impl Render for Messages {
    fn whole(&mut self, completion: &Bytes, totals: Totals) -> Result<Bytes, ApiError> {
        let message = render::whole(&self.head, completion, totals)?;
        serde_json::to_vec(&message)
            .map(Bytes::from)
            .map_err(|e| ApiError::Internal(e.to_string()))
    }

    /// A `ping`; the first one, before any chunk (keep-alives committed
    /// the stream while no model has answered yet), opens the stream with
    /// `message_start` naming the model asked for: Anthropic's SDKs read
    /// nothing before `message_start`.
    fn keepalive(&mut self, out: &mut BytesMut) {
        self.ensure_open(out);
        Self::emit(out, "ping", &json!({"type": "ping"}));
    }

    fn chunk(&mut self, chunk: Chunk, out: &mut BytesMut) -> Result<(), ApiError> {
        if !self.opened && self.model.is_none() {
            self.model = model_of(&chunk.data);
        }
        self.ensure_open(out);
        if !self.finished && !chunk.loading {
            self.absorb(&chunk.data, out);
        }
        Ok(())
    }

    fn end(&mut self, totals: Totals, out: &mut BytesMut) {
        self.ensure_open(out);
        if self.finished {
            return;
        }
        self.finished = true;
        let mut others = std::mem::take(&mut self.others);
        others.sort_by_key(|o| o.0);
        for (_, text) in others {
            self.close(out);
            self.text(out, &text);
        }
        self.close(out);
        let mut event = json!({
            "type": "message_delta",
            "delta": {
                "stop_reason": render::stop_reason(self.finish_reason.as_deref()),
                "stop_sequence": null,
            },
            "usage": render::usage(self.usage.as_ref(), totals),
        });
        if let (Some(id), Value::Object(m)) = (self.arena_id.take(), &mut event) {
            m.insert("arena_id".into(), id);
        }
        Self::emit(out, "message_delta", &event);
        Self::emit(out, "message_stop", &json!({"type": "message_stop"}));
    }

    fn fail(&mut self, error: &ApiError, out: &mut BytesMut) {
        self.ensure_open(out);
        if self.finished {
            return;
        }
        self.finished = true;
        let event = json!({"type": "error", "error": error.anthropic_object()});
        Self::emit(out, "error", &event);
    }
}
