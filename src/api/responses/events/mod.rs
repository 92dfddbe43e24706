//! [`Responses`]: the Responses dialect's [`Render`]. A whole answer is
//! the `response` object (`output::whole`); a stream is the Responses
//! event stream, each event `event: <type>\ndata: <json>\n\n` whose JSON
//! carries `type` and a `sequence_number` counting from 0:
//!
//! - opening, with the first chunk (or the end, or a failure):
//!   `response.created`, `response.in_progress` (the response,
//!   `in_progress`, no output yet), whose `model` is the first chunk's own
//!   (the answering model's name, as every later event's: see
//!   docs/http.md), else the one asked for. Until then a committed
//!   stream's keep-alives are SSE comments;
//! - `chunk`: chat deltas of choice 0 as output items, one open at a
//!   time: reasoning text (`reasoning_content` or `reasoning`) as a
//!   `reasoning` item (`response.reasoning_text.delta`), text and refusals
//!   as a `message` item's parts (`response.output_text.delta`,
//!   `response.refusal.delta`), each tool call (by its chat `index`) as a
//!   `function_call` item (`response.function_call_arguments.delta`).
//!   An item opens with `response.output_item.added` (a message part
//!   with `response.content_part.added`) and closes, when the next one
//!   opens or the answer ends, with its `.done` events carrying the whole
//!   text or arguments and `response.output_item.done`. Usage chunks and
//!   the `finish_reason` are kept for the end; chunks that are not JSON,
//!   carry no choice 0, or are llama-swap's loading banner are skipped.
//!   The text of other choices (an arena's second answer) is kept and
//!   written at the end as a message each, after choice 0's items.
//!   A tool-call fragment for a call already closed is dropped (servers
//!   stream one call after the other), as is anything past
//!   [`MAX_ITEMS`] items.
//! - `end`: closes the open item and writes `response.completed` (or
//!   `response.incomplete`) with the whole response, as `whole` builds it
//!   from the same answer put together;
//! - `fail`: an `error` event, then `response.failed` with the items that
//!   were complete.
//!
//! `on_done` gets the final response object (whole, completed, incomplete
//! or failed) once; not when the stream is dropped before its end.

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Map, Value, json};

mod deltas;

use super::Head;
use super::output::{self, Body, Ending, Item, Kind, Part};
use crate::api::error::ApiError;
use crate::api::render::{Render, model_of};
use crate::model::Chunk;
use crate::sink::Totals;

/// The most output items one streamed response opens.
pub const MAX_ITEMS: usize = 1024;

/// What gets the final response object (the caller stores it).
pub type OnDone = Box<dyn FnOnce(&Value) + Send>;

/// Writes one response in the Responses dialect.
pub struct Responses {
    head: Head,
    on_done: Option<OnDone>,
    seq: u64,
    opened: bool,
    finished: bool,
    items: Vec<Item>,
    /// The last of `items` is still being written.
    open: bool,
    /// Chat tool-call index → the place of its item in `items`.
    calls: Vec<(u64, usize)>,
    last_call: Option<u64>,
    model: Option<String>,
    usage: Option<Value>,
    finish_reason: Option<String>,
    /// The text of each choice past the first (an arena's second answer),
    /// written as a message of its own at the end.
    others: Vec<Other>,
    arena_id: Option<Value>,
}

/// A choice past the first, as its deltas came.
struct Other {
    index: u64,
    text: String,
    finish_reason: Option<String>,
}

impl Responses {
    /// `on_done` gets the final response object, once.
    pub fn new(head: Head, on_done: OnDone) -> Self {
        Responses {
            head,
            on_done: Some(on_done),
            seq: 0,
            opened: false,
            finished: false,
            items: Vec::new(),
            open: false,
            calls: Vec::new(),
            last_call: None,
            model: None,
            usage: None,
            finish_reason: None,
            others: Vec::new(),
            arena_id: None,
        }
    }

    fn emit(&mut self, out: &mut BytesMut, kind: &str, fields: Value) {
        let mut event = Map::new();
        event.insert("type".into(), Value::from(kind));
        event.insert("sequence_number".into(), Value::from(self.seq));
        if let Value::Object(f) = fields {
            event.extend(f);
        }
        self.seq += 1;
        out.put_slice(b"event: ");
        out.put_slice(kind.as_bytes());
        out.put_slice(b"\ndata: ");
        out.put_slice(Value::Object(event).to_string().as_bytes());
        out.put_slice(b"\n\n");
    }

    fn ensure_open(&mut self, out: &mut BytesMut) {
        if self.opened {
            return;
        }
        self.opened = true;
        let response = output::response(
            &self.head,
            Body {
                status: "in_progress",
                model: self.model(),
                items: &[],
                ending: Ending::Completed,
                usage: Value::Null,
                error: Value::Null,
            },
        );
        self.emit(out, "response.created", json!({"response": response}));
        self.emit(out, "response.in_progress", json!({"response": response}));
    }

    fn finish(&mut self, response: &Value) {
        self.finished = true;
        if let Some(f) = self.on_done.take() {
            f(response);
        }
    }

    /// The open item, if it is of the kind `is` accepts.
    fn current(&self, is: fn(&Kind) -> bool) -> bool {
        self.open && self.items.last().is_some_and(|i| is(&i.kind))
    }

    /// Announces a new item (closing the open one first); false when the
    /// response has all the items it may.
    fn start(&mut self, out: &mut BytesMut, item: Item) -> bool {
        self.close(out);
        if self.items.len() >= MAX_ITEMS {
            return false;
        }
        let index = self.items.len();
        let fields = json!({"output_index": index, "item": item.added_json()});
        let reasoning = matches!(item.kind, Kind::Reasoning { .. });
        let id = item.id.clone();
        self.items.push(item);
        self.open = true;
        self.emit(out, "response.output_item.added", fields);
        if reasoning {
            let part = json!({"type": "reasoning_text", "text": ""});
            let f = json!({"item_id": id, "output_index": index, "content_index": 0, "part": part});
            self.emit(out, "response.content_part.added", f);
        }
        true
    }

    /// Closes the open item with its `.done` events, its status by its
    /// `ending`.
    fn close(&mut self, out: &mut BytesMut) {
        if !self.open {
            return;
        }
        self.open = false;
        let index = self.items.len().saturating_sub(1);
        let Some(item) = self.items.last().cloned() else {
            return;
        };
        let at = |extra: Value| {
            let mut f = json!({"item_id": item.id, "output_index": index});
            if let (Value::Object(f), Value::Object(e)) = (&mut f, extra) {
                f.extend(e);
            }
            f
        };
        match &item.kind {
            Kind::Reasoning { text } => {
                self.emit(
                    out,
                    "response.reasoning_text.done",
                    at(json!({"content_index": 0, "text": text})),
                );
                let part = json!({"type": "reasoning_text", "text": text});
                self.emit(
                    out,
                    "response.content_part.done",
                    at(json!({"content_index": 0, "part": part})),
                );
            }
            Kind::Message { parts } => {
                if let Some(last) = parts.len().checked_sub(1) {
                    self.close_part(out, &item.id, index, last, &parts[last]);
                }
            }
            Kind::Call {
                name, arguments, ..
            } => {
                let f = at(json!({"arguments": arguments, "name": name}));
                self.emit(out, "response.function_call_arguments.done", f);
            }
        }
        let f = json!({"output_index": index, "item": item.json(item.ending.status())});
        self.emit(out, "response.output_item.done", f);
    }

    fn close_part(&mut self, out: &mut BytesMut, id: &str, index: usize, j: usize, part: &Part) {
        let mut f = json!({"item_id": id, "output_index": index, "content_index": j});
        let done = match part.refusal {
            true => json!({"refusal": part.text}),
            false => json!({"text": part.text, "logprobs": part.logprobs}),
        };
        let mut done_fields = f.clone();
        if let (Value::Object(d), Value::Object(e)) = (&mut done_fields, done) {
            d.extend(e);
        }
        let kind = match part.refusal {
            true => "response.refusal.done",
            false => "response.output_text.done",
        };
        self.emit(out, kind, done_fields);
        if let Value::Object(m) = &mut f {
            m.insert("part".into(), part.json());
        }
        self.emit(out, "response.content_part.done", f);
    }

    /// The answer's model: the first chunk's, else the one asked for.
    fn model(&self) -> &str {
        self.model.as_deref().unwrap_or(&self.head.model)
    }
}

impl Render for Responses {
    fn whole(&mut self, completion: &Bytes, totals: Totals) -> Result<Bytes, ApiError> {
        let response = output::whole(&self.head, completion, totals)?;
        self.finish(&response);
        serde_json::to_vec(&response)
            .map(Bytes::from)
            .map_err(|e| ApiError::Internal(e.to_string()))
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
        let ending = Ending::of(self.finish_reason.as_deref());
        // The first answer ends in its last item, still open.
        let first = self.items.len();
        if let (true, Some(last)) = (self.open, self.items.last_mut()) {
            last.ending = ending;
        }
        let mut others = std::mem::take(&mut self.others);
        others.sort_by_key(|o| o.index);
        for o in others {
            let mut item = Item::message(&self.head.id, self.items.len());
            item.ending = Ending::of(o.finish_reason.as_deref());
            if self.start(out, item) {
                self.text(out, &o.text, false, &[]);
            }
        }
        if !self.items.iter().any(Item::is_answer) {
            let mut item = Item::message(&self.head.id, self.items.len());
            if first == 0 {
                item.ending = ending;
            }
            if self.start(out, item) {
                self.add_part(out, Part::new(false));
            }
        }
        self.close(out);
        let response = output::response(
            &self.head,
            Body {
                status: ending.status(),
                model: self.model(),
                items: &self.items,
                ending,
                usage: output::usage(self.usage.as_ref(), totals),
                error: Value::Null,
            },
        );
        let response = output::with_arena(self.arena_id.as_ref(), response);
        let kind = match ending {
            Ending::Completed => "response.completed",
            Ending::Incomplete(_) => "response.incomplete",
        };
        self.emit(out, kind, json!({"response": response}));
        self.finish(&response);
    }

    fn fail(&mut self, error: &ApiError, out: &mut BytesMut) {
        self.ensure_open(out);
        if self.finished {
            return;
        }
        let obj = error.object();
        let code = obj
            .get("code")
            .and_then(Value::as_str)
            .or_else(|| obj.get("type").and_then(Value::as_str))
            .unwrap_or("server_error")
            .to_owned();
        let message = obj.get("message").cloned().unwrap_or(Value::Null);
        let param = obj.get("param").cloned().unwrap_or(Value::Null);
        let f = json!({"code": code, "message": message, "param": param});
        self.emit(out, "error", f);
        let complete = match self.open {
            true => self.items.len().saturating_sub(1),
            false => self.items.len(),
        };
        let usage = match &self.usage {
            Some(u) => output::usage(Some(u), Totals::default()),
            None => Value::Null,
        };
        let response = output::response(
            &self.head,
            Body {
                status: "failed",
                model: self.model(),
                items: &self.items[..complete],
                ending: Ending::Completed,
                usage,
                error: json!({"code": code, "message": message}),
            },
        );
        self.emit(out, "response.failed", json!({"response": response}));
        self.finish(&response);
    }
}
