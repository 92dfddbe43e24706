//! Output items and the `response` object, built the same way for a whole
//! answer and at the end of a stream. [`whole`] reads a chat completion:
//! choice 0's reasoning text, its text and refusal, its tool calls, in
//! that order, as output items, then the text of any other choice (an
//! arena's second answer) as a message each; an answer with neither text nor
//! calls gets one empty message, so a client always finds one. A
//! `finish_reason` of `length` or `content_filter` makes the response
//! `incomplete`, and the last item of that answer too; each other choice's
//! message is `incomplete` by its own `finish_reason`.

use serde_json::{Map, Value, json};

use super::{Head, derived_id};
use crate::api::error::ApiError;
use crate::sink::Totals;
use crate::wire::content_text;

/// One content part of a message item.
#[derive(Debug, Clone)]
pub(super) struct Part {
    pub refusal: bool,
    pub text: String,
    pub logprobs: Vec<Value>,
}

impl Part {
    pub fn new(refusal: bool) -> Self {
        Part {
            refusal,
            text: String::new(),
            logprobs: Vec::new(),
        }
    }

    pub fn json(&self) -> Value {
        match self.refusal {
            true => json!({"type": "refusal", "refusal": self.text}),
            false => json!({
                "type": "output_text",
                "text": self.text,
                "annotations": [],
                "logprobs": self.logprobs,
            }),
        }
    }

    /// The part as it is announced, before its text.
    pub fn empty_json(&self) -> Value {
        Part::new(self.refusal).json()
    }
}

#[derive(Debug, Clone)]
pub(super) enum Kind {
    Reasoning {
        text: String,
    },
    Message {
        parts: Vec<Part>,
    },
    Call {
        call_id: String,
        name: String,
        arguments: String,
    },
}

/// One output item.
#[derive(Debug, Clone)]
pub(super) struct Item {
    pub id: String,
    pub kind: Kind,
    /// How the answer this item ends came to an end (`Completed` for an
    /// item another one followed): its `status`.
    pub ending: Ending,
}

impl Item {
    /// The item at `index` of response `resp`'s output.
    pub fn reasoning(resp: &str, index: usize) -> Self {
        Item {
            id: derived_id("rs_", resp, index),
            kind: Kind::Reasoning {
                text: String::new(),
            },
            ending: Ending::Completed,
        }
    }

    pub fn message(resp: &str, index: usize) -> Self {
        Item {
            id: derived_id("msg_", resp, index),
            kind: Kind::Message { parts: Vec::new() },
            ending: Ending::Completed,
        }
    }

    /// A function call; one the model gave no id gets `call_…`.
    pub fn call(resp: &str, index: usize, call_id: Option<&str>, name: &str) -> Self {
        let call_id = match call_id {
            Some(id) if !id.is_empty() => id.to_owned(),
            _ => derived_id("call_", resp, index),
        };
        Item {
            id: derived_id("fc_", resp, index),
            kind: Kind::Call {
                call_id,
                name: name.to_owned(),
                arguments: String::new(),
            },
            ending: Ending::Completed,
        }
    }

    /// A message or a call: what a client acts on.
    pub fn is_answer(&self) -> bool {
        !matches!(self.kind, Kind::Reasoning { .. })
    }

    /// The item whole, with `status` where the item type has one.
    pub fn json(&self, status: &str) -> Value {
        match &self.kind {
            Kind::Reasoning { text } => json!({
                "id": self.id, "type": "reasoning", "summary": [],
                "content": [{"type": "reasoning_text", "text": text}],
            }),
            Kind::Message { parts } => json!({
                "id": self.id, "type": "message", "status": status, "role": "assistant",
                "content": parts.iter().map(Part::json).collect::<Vec<_>>(),
            }),
            Kind::Call {
                call_id,
                name,
                arguments,
            } => json!({
                "id": self.id, "type": "function_call", "status": status,
                "arguments": arguments, "call_id": call_id, "name": name,
            }),
        }
    }

    /// The item as `response.output_item.added` announces it.
    pub fn added_json(&self) -> Value {
        match &self.kind {
            Kind::Reasoning { .. } => {
                json!({"id": self.id, "type": "reasoning", "summary": [], "content": []})
            }
            Kind::Message { .. } => json!({
                "id": self.id, "type": "message", "status": "in_progress",
                "role": "assistant", "content": [],
            }),
            Kind::Call { call_id, name, .. } => json!({
                "id": self.id, "type": "function_call", "status": "in_progress",
                "arguments": "", "call_id": call_id, "name": name,
            }),
        }
    }
}

/// How an answer ended, from its chat `finish_reason`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Ending {
    Completed,
    /// `incomplete`, for this reason (`max_output_tokens`, `content_filter`).
    Incomplete(&'static str),
}

impl Ending {
    pub fn of(finish_reason: Option<&str>) -> Self {
        match finish_reason {
            Some("length") => Ending::Incomplete("max_output_tokens"),
            Some("content_filter") => Ending::Incomplete("content_filter"),
            _ => Ending::Completed,
        }
    }

    /// The status of the response, and of the item the answer ended in.
    pub fn status(self) -> &'static str {
        match self {
            Ending::Completed => "completed",
            Ending::Incomplete(_) => "incomplete",
        }
    }
}

/// The response's `usage`: the answer's own, else the request's totals.
pub(super) fn usage(chat: Option<&Value>, totals: Totals) -> Value {
    let n = |v: Option<&Value>, path: &str| {
        v.and_then(|u| u.pointer(path))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let (input, output, cached, reasoning) = match chat {
        Some(u) => (
            n(Some(u), "/prompt_tokens"),
            n(Some(u), "/completion_tokens"),
            n(Some(u), "/prompt_tokens_details/cached_tokens"),
            n(Some(u), "/completion_tokens_details/reasoning_tokens"),
        ),
        None => (totals.input_tokens, totals.output_tokens, 0, 0),
    };
    let total = chat
        .and_then(|u| u.get("total_tokens"))
        .and_then(Value::as_u64)
        .unwrap_or(input.saturating_add(output));
    json!({
        "input_tokens": input,
        "input_tokens_details": {"cached_tokens": cached},
        "output_tokens": output,
        "output_tokens_details": {"reasoning_tokens": reasoning},
        "total_tokens": total,
    })
}

/// The `response` object's fields, in OpenAI's order; those not named
/// in [`Body`] come from the request's echo.
const ORDER: &[&str] = &[
    "id",
    "object",
    "created_at",
    "status",
    "background",
    "error",
    "incomplete_details",
    "instructions",
    "max_output_tokens",
    "max_tool_calls",
    "model",
    "output",
    "parallel_tool_calls",
    "previous_response_id",
    "prompt_cache_key",
    "prompt_cache_retention",
    "reasoning",
    "safety_identifier",
    "service_tier",
    "store",
    "temperature",
    "text",
    "tool_choice",
    "tools",
    "top_logprobs",
    "top_p",
    "truncation",
    "usage",
    "user",
    "metadata",
    "output_text",
];

/// What a `response` object says beyond the request's echo.
pub(super) struct Body<'a> {
    pub status: &'a str,
    pub model: &'a str,
    pub items: &'a [Item],
    pub ending: Ending,
    pub usage: Value,
    pub error: Value,
}

/// The `response` object.
pub(super) fn response(head: &Head, b: Body<'_>) -> Value {
    let output: Vec<Value> = b
        .items
        .iter()
        .map(|item| item.json(item.ending.status()))
        .collect();
    let output_text: String = b
        .items
        .iter()
        .filter_map(|i| match &i.kind {
            Kind::Message { parts } => Some(parts),
            _ => None,
        })
        .flatten()
        .filter(|p| !p.refusal)
        .map(|p| p.text.as_str())
        .collect();
    let incomplete = match b.ending {
        Ending::Incomplete(reason) if b.status == "incomplete" => json!({"reason": reason}),
        _ => Value::Null,
    };
    let mut out = Map::new();
    for &key in ORDER {
        let v = match key {
            "id" => Value::from(head.id.as_str()),
            "object" => Value::from("response"),
            "created_at" => Value::from(head.created_at),
            "status" => Value::from(b.status),
            "background" => Value::from(false),
            "error" => b.error.clone(),
            "incomplete_details" => incomplete.clone(),
            "model" => Value::from(b.model),
            "output" => Value::Array(output.clone()),
            "usage" => b.usage.clone(),
            "output_text" => Value::from(output_text.as_str()),
            _ => head.echo.get(key),
        };
        out.insert(key.into(), v);
    }
    Value::Object(out)
}

/// A non-empty string field.
pub(super) fn text_of<'a>(v: &'a Value, key: &str) -> Option<&'a str> {
    v.get(key).and_then(Value::as_str).filter(|s| !s.is_empty())
}

/// The reasoning text of a chat message or delta.
pub(super) fn reasoning_of(v: &Value) -> Option<&str> {
    text_of(v, "reasoning_content").or_else(|| text_of(v, "reasoning"))
}

/// The `response` object of a whole chat completion.
pub(super) fn whole(head: &Head, completion: &[u8], totals: Totals) -> Result<Value, ApiError> {
    let not_chat = || ApiError::Internal("the model's answer is not a chat completion".into());
    let body: Value = serde_json::from_slice(completion).map_err(|_| not_chat())?;
    let choices = body
        .get("choices")
        .and_then(Value::as_array)
        .ok_or_else(not_chat)?;
    let choice = choices
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0)
        .or(choices.first());
    let empty = Value::Null;
    let message = choice.and_then(|c| c.get("message")).unwrap_or(&empty);
    let mut items = Vec::new();
    if let Some(text) = reasoning_of(message) {
        let mut item = Item::reasoning(&head.id, items.len());
        item.kind = Kind::Reasoning { text: text.into() };
        items.push(item);
    }
    let mut parts = Vec::new();
    let text = content_text(message.get("content"));
    if !text.is_empty() {
        let mut part = Part::new(false);
        part.text = text;
        if let Some(Value::Array(lp)) = choice.and_then(|c| c.pointer("/logprobs/content")) {
            part.logprobs = lp.clone();
        }
        parts.push(part);
    }
    if let Some(refusal) = text_of(message, "refusal") {
        let mut part = Part::new(true);
        part.text = refusal.into();
        parts.push(part);
    }
    if !parts.is_empty() {
        let mut item = Item::message(&head.id, items.len());
        item.kind = Kind::Message { parts };
        items.push(item);
    }
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for call in calls.into_iter().flatten() {
        let f = call.get("function").unwrap_or(&empty);
        let name = f.get("name").and_then(Value::as_str).unwrap_or_default();
        let id = call.get("id").and_then(Value::as_str);
        let mut item = Item::call(&head.id, items.len(), id, name);
        if let Kind::Call { arguments, .. } = &mut item.kind {
            *arguments = match f.get("arguments") {
                Some(Value::String(s)) => s.clone(),
                None | Some(Value::Null) => String::new(),
                Some(other) => other.to_string(),
            };
        }
        items.push(item);
    }
    let reason = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str);
    let ending = Ending::of(reason);
    // The answer's last item is the one its ending is of.
    let first = items.len();
    if let Some(last) = items.last_mut() {
        last.ending = ending;
    }
    for (text, finish) in crate::api::render::other_choices(choices) {
        let mut item = Item::message(&head.id, items.len());
        let mut part = Part::new(false);
        part.text = text;
        item.kind = Kind::Message { parts: vec![part] };
        item.ending = Ending::of(finish);
        items.push(item);
    }
    if !items.iter().any(Item::is_answer) {
        let mut item = Item::message(&head.id, items.len());
        item.kind = Kind::Message {
            parts: vec![Part::new(false)],
        };
        // An answer with no items of its own ends in this one.
        if first == 0 {
            item.ending = ending;
        }
        items.push(item);
    }
    let model = text_of(&body, "model").unwrap_or(&head.model);
    Ok(with_arena(
        body.get("arena_id"),
        response(
            head,
            Body {
                status: ending.status(),
                model,
                items: &items,
                ending,
                usage: usage(body.get("usage").filter(|u| u.is_object()), totals),
                error: Value::Null,
            },
        ),
    ))
}

/// The response with the arena's id, when the answer is an arena's (its
/// two blind answers are the two messages; vote on `arena_id`).
pub(super) fn with_arena(arena_id: Option<&Value>, mut response: Value) -> Value {
    if let (Some(id @ Value::String(_)), Value::Object(m)) = (arena_id, &mut response) {
        m.insert("arena_id".into(), id.clone());
    }
    response
}
