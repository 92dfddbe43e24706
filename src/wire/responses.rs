//! The Responses API (`POST /v1/responses`) as an upstream that speaks it
//! natively answers it, read the way [`super::inspect`] reads chat: without
//! re-serialising, only what conclave needs.
//!
//! - A whole body is a `response` object: an answer when it has `output`,
//!   an error when its `error` is set or its `status` is `failed`. Its
//!   `usage` (`input_tokens`, `output_tokens` and their details) is read
//!   by [`Usage`]'s one reader.
//! - A stream is typed events, each a JSON object whose `type` is its SSE
//!   event name. `response.completed` and `response.incomplete` end it and
//!   carry its usage (`response.usage`); `response.failed` and `error` are
//!   errors inside it. The model has begun answering ([`ChunkInfo::real`])
//!   at the first `response.output_item.added` or non-empty `….delta`.
//! - A finish reason is given in chat's words, so attempts read alike
//!   whatever the dialect: `stop`, `tool_calls`, `length`
//!   (`max_output_tokens`), `content_filter`.
//!
//! [`input_len`] measures a request for a usage estimate, by the
//! billing rule. [`Endpoint::RESPONSES`] is the dialect's endpoint value.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::billing::Billable;
use super::endpoint::{Endpoint, Events, Family, Protocol, latest_usage};
use super::finish::Reason;
use super::inspect::{
    ChunkInfo, NotAnAnswer, WholeBody, error_message, is_event_name, object_bytes,
};
use super::output::{AssistantOutput, ToolCall};
use super::{MAX_TOOL_CALLS, Usage, UsageField};

/// What a failed response without an `error` message is called.
const FAILED: &str = "the response failed";

#[derive(Deserialize)]
struct EventProbe<'a> {
    #[serde(
        default,
        rename = "type",
        borrow,
        deserialize_with = "super::borrowed::option"
    )]
    kind: Option<Cow<'a, str>>,
    #[serde(default)]
    delta: Option<Value>,
    #[serde(default)]
    response: Option<ResponseProbe>,
    #[serde(default)]
    item: Option<ItemProbe>,
    /// An `error` event's message (and `error`, as some servers nest it).
    #[serde(default)]
    message: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

/// The `response` object, of a whole body or a stream's last event.
#[derive(Deserialize)]
struct ResponseProbe {
    #[serde(default)]
    status: Option<Reason>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<Value>,
    #[serde(default)]
    incomplete_details: Option<Incomplete>,
    #[serde(default)]
    output: Option<OutputProbe>,
}

#[derive(Deserialize)]
struct Incomplete {
    #[serde(default)]
    reason: Option<Reason>,
}

/// One output item, as much of it as a summary needs.
#[derive(Deserialize)]
struct ItemProbe {
    #[serde(default, rename = "type")]
    kind: Option<Reason>,
    #[serde(default)]
    name: Option<Value>,
    #[serde(default)]
    arguments: Option<Value>,
}

impl ItemProbe {
    fn is(&self, kind: &str) -> bool {
        self.kind.as_ref().and_then(|k| k.0.as_deref()) == Some(kind)
    }
}

/// `output` read in one pass without keeping it: whether it is a list,
/// and whether the model called a function in it.
struct OutputProbe {
    calls: bool,
}

impl<'de> Deserialize<'de> for OutputProbe {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = OutputProbe;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str("a list of output items")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(
                self,
                mut seq: A,
            ) -> Result<OutputProbe, A::Error> {
                let mut calls = false;
                while let Some(item) = seq.next_element::<ItemProbe>()? {
                    calls |= item.is("function_call");
                }
                Ok(OutputProbe { calls })
            }
        }
        d.deserialize_seq(Visit)
    }
}

impl ResponseProbe {
    /// Its error, when it is one: `error` set, or `status` `failed`.
    fn failure(&self) -> Option<String> {
        match self.error.as_ref().filter(|e| !e.is_null()) {
            Some(e) => Some(error_message(e)),
            None => (self.status() == Some("failed")).then(|| FAILED.to_owned()),
        }
    }

    fn status(&self) -> Option<&str> {
        self.status.as_ref().and_then(|s| s.0.as_deref())
    }

    /// Why it ended, in chat's words.
    fn finish_reason(&self) -> Option<String> {
        let calls = self.output.as_ref().is_some_and(|o| o.calls);
        let why = self
            .incomplete_details
            .as_ref()
            .and_then(|i| i.reason.as_ref())
            .and_then(|r| r.0.as_deref());
        let reason = match (self.status()?, why) {
            ("completed", _) if calls => "tool_calls",
            ("completed", _) => "stop",
            ("incomplete", Some("max_output_tokens") | None) => "length",
            ("incomplete", Some(other)) => other,
            _ => return None,
        };
        Some(reason.to_owned())
    }
}

/// Validates a whole Responses body and reads its usage and finish reason.
pub fn inspect_response(body: &[u8]) -> Result<WholeBody, NotAnAnswer> {
    let r: ResponseProbe = serde_json::from_str(object_bytes(body)?)?;
    if let Some(message) = r.failure() {
        return Ok(WholeBody::Error(message));
    }
    if r.output.is_none() {
        return Err(NotAnAnswer::NoOutput);
    }
    let finish_reason = r.finish_reason();
    Ok(WholeBody::Answer {
        usage: r.usage,
        finished: finish_reason.is_some(),
        finish_reason,
        plain_text: None,
    })
}

/// Inspects one Responses stream event (with its answer text when `text`,
/// a summary piece when `summarize`). Its usage is in
/// [`ChunkInfo::usage`]; `choices` is 0 (it has none), and `finished`
/// says it ends the stream (`response.completed`, `response.incomplete`).
pub fn inspect_event(data: &[u8], summarize: bool, text: bool) -> Result<ChunkInfo, NotAnAnswer> {
    let e: EventProbe = serde_json::from_str(object_bytes(data)?)?;
    let Some(kind) = e.kind.as_deref() else {
        return Err(NotAnAnswer::NoType);
    };
    if !is_event_name(kind) {
        return Err(NotAnAnswer::BadType);
    }
    let mut info = ChunkInfo::with_usage(UsageField::Absent);
    let delta = e.delta.as_ref().and_then(Value::as_str);
    match kind {
        "error" => {
            let err = e.error.as_ref().or(e.message.as_ref());
            info.error = Some(err.map_or_else(|| "error event".to_owned(), error_message));
        }
        "response.failed" => {
            let r = e.response.as_ref();
            info.error = Some(r.and_then(ResponseProbe::failure).unwrap_or(FAILED.into()));
        }
        "response.completed" | "response.incomplete" => {
            let r = e.response.as_ref();
            if let Some(u) = r.and_then(|r| r.usage) {
                info.usage = UsageField::Present(u);
            }
            info.finished = true;
            info.finish_reason = r.and_then(ResponseProbe::finish_reason);
        }
        "response.output_item.added" => info.real = true,
        "response.output_item.done" => {
            let call = e.item.as_ref().filter(|i| i.is("function_call"));
            if let Some(item) = call.filter(|_| summarize) {
                let (name, args) = (str_of(&item.name), str_of(&item.arguments));
                info.summary = Some(format!("tool call: {name}({args})"));
            }
        }
        k if k.ends_with(".delta") => {
            let d = delta.unwrap_or_default();
            info.real = !d.is_empty();
            info.text_bytes = d.len();
            info.text = Some(d.to_owned()).filter(|t| text && !t.is_empty());
            let said = matches!(k, "response.output_text.delta" | "response.refusal.delta");
            info.summary = Some(d.to_owned()).filter(|_| summarize && said);
        }
        _ => {}
    }
    Ok(info)
}

fn str_of(v: &Option<Value>) -> &str {
    v.as_ref().and_then(Value::as_str).unwrap_or_default()
}

impl Endpoint {
    /// The Responses API (`POST /v1/responses`), relayed verbatim to an
    /// upstream that speaks it natively (`responses = true`).
    pub const RESPONSES: Endpoint = Endpoint(&Protocol {
        name: "responses",
        title: "the Responses API",
        path: "/responses",
        family: Family::OpenAi,
        events: Events::Typed {
            last: "response.completed",
        },
        whole: inspect_response,
        event: inspect_event,
        output: AssistantOutput::from_response,
        input_len,
        usage: latest_usage,
    });
}

impl AssistantOutput {
    /// What a whole Responses body says: its messages' text (and
    /// refusals), then its function calls.
    pub fn from_response(body: &[u8]) -> Result<Self, NotAnAnswer> {
        let v: Value = serde_json::from_slice(body)?;
        let mut out = AssistantOutput::default();
        let items = v.get("output").and_then(Value::as_array);
        for item in items.into_iter().flatten() {
            let s = |k: &str| item.get(k).and_then(Value::as_str).unwrap_or_default();
            match s("type") {
                "message" => {
                    let parts = item.get("content").and_then(Value::as_array);
                    for p in parts.into_iter().flatten() {
                        let t = p.get("text").or_else(|| p.get("refusal"));
                        out.text
                            .push_str(t.and_then(Value::as_str).unwrap_or_default());
                    }
                }
                "function_call" if out.tool_calls.len() < MAX_TOOL_CALLS => {
                    out.tool_calls.push(ToolCall {
                        name: s("name").to_owned(),
                        arguments: s("arguments").to_owned(),
                    });
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// The bytes a Responses request's input stands for by the billing rule
/// ([`Billable::responses_input`]: every turn, tool and schema; images
/// left out): its tokens × 4, so that [`super::estimate_tokens`] gives
/// them back, for a call's usage when the upstream reports none.
pub fn input_len(body: &Map<String, Value>) -> usize {
    let tokens = Billable::responses_input(body).input.saturating_mul(4);
    usize::try_from(tokens).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests;
