//! Anthropic's Messages API as an Anthropic upstream answers a request
//! forwarded verbatim (`POST /v1/messages`), read the way
//! [`super::inspect`] reads chat: only what conclave needs.
//!
//! - A whole body is a `message` object (an answer: it has `content`) or
//!   an `{"type": "error", "error": …}` object.
//! - A stream is typed events, each a JSON object whose `type` is its SSE
//!   event name. `message_start` carries the input usage,
//!   `message_delta` the output usage (and, in later API versions, the
//!   input again) and the `stop_reason`; `message_stop` ends it; `error`
//!   is an error inside it. The model has begun answering
//!   ([`ChunkInfo::real`]) at the first `content_block_start` or non-empty
//!   `content_block_delta`; `ping` is neither.
//! - Usage is given in chat's terms: `prompt_tokens` counts cached and
//!   cache-written input too, as OpenAI's does; a finish reason in chat's
//!   words (`stop`, `length`, `tool_calls`, `content_filter`).
//!
//! [`input_len`] measures a Messages request for a usage estimate, by
//! the billing rule. [`Endpoint::MESSAGES`] and [`Endpoint::COUNT_TOKENS`]
//! are the dialect's endpoint values.

use std::borrow::Cow;

use serde::Deserialize;
use serde_json::{Map, Value};

use super::billing::Billable;
use super::endpoint::{Endpoint, Events, Family, Protocol};
use super::inspect::{
    ChunkInfo, NotAnAnswer, WholeBody, error_message, is_event_name, object_bytes,
};
use super::output::{AssistantOutput, ToolCall};
use super::{MAX_TOOL_CALLS, Usage, UsageField};

/// Anthropic's `usage`.
#[derive(Deserialize, Default, Clone, Copy)]
struct Counts {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
}

impl Counts {
    /// In chat's terms; `None` when it says nothing.
    fn usage(self) -> Option<Usage> {
        if self.input_tokens.is_none() && self.output_tokens.is_none() {
            return None;
        }
        let read = self.cache_read_input_tokens.unwrap_or(0);
        let written = self.cache_creation_input_tokens.unwrap_or(0);
        Some(Usage {
            prompt_tokens: self
                .input_tokens
                .unwrap_or(0)
                .saturating_add(read)
                .saturating_add(written),
            completion_tokens: self.output_tokens.unwrap_or(0),
            cached_tokens: read,
            cache_write_tokens: written,
            ..Usage::default()
        })
    }
}

#[derive(Deserialize)]
struct MessageProbe {
    #[serde(default, rename = "type")]
    kind: Option<String>,
    #[serde(default)]
    content: Option<Vec<Value>>,
    #[serde(default)]
    usage: Option<Counts>,
    #[serde(default)]
    stop_reason: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

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
    message: Option<MessageProbe>,
    #[serde(default)]
    delta: Option<Value>,
    #[serde(default)]
    usage: Option<Counts>,
    #[serde(default)]
    content_block: Option<Value>,
    #[serde(default)]
    error: Option<Value>,
}

/// A `stop_reason` in chat's words.
fn finish_reason(stop: Option<&Value>) -> Option<String> {
    let reason = match stop?.as_str()? {
        "end_turn" | "stop_sequence" | "pause_turn" => "stop",
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        other => other,
    };
    Some(reason.to_owned())
}

/// Validates a whole Messages body and reads its usage and stop reason.
pub fn inspect_message(body: &[u8]) -> Result<WholeBody, NotAnAnswer> {
    let m: MessageProbe = serde_json::from_str(object_bytes(body)?)?;
    if m.kind.as_deref() == Some("error") || m.error.is_some() {
        let err = m.error.as_ref();
        return Ok(WholeBody::Error(
            err.map_or_else(|| "error".to_owned(), error_message),
        ));
    }
    if m.kind.as_deref() != Some("message") {
        return Err(NotAnAnswer::NoType);
    }
    if m.content.is_none() {
        return Err(NotAnAnswer::NoOutput);
    }
    let stop = m.stop_reason.as_ref().filter(|s| !s.is_null());
    Ok(WholeBody::Answer {
        usage: m.usage.and_then(Counts::usage),
        finish_reason: finish_reason(stop),
        finished: stop.is_some(),
        plain_text: None,
    })
}

/// Inspects one Messages stream event (with its answer text when `text`,
/// a summary piece when `summarize`). `choices` is 0 (it has none);
/// `finished` says it ends the stream (`message_stop`). The usage of
/// `message_delta` may lack the input: the caller keeps what
/// `message_start` said ([`Usage::update`]).
pub fn inspect_event(data: &[u8], summarize: bool, text: bool) -> Result<ChunkInfo, NotAnAnswer> {
    let e: EventProbe = serde_json::from_str(object_bytes(data)?)?;
    let Some(kind) = e.kind.as_deref() else {
        return Err(NotAnAnswer::NoType);
    };
    if !is_event_name(kind) {
        return Err(NotAnAnswer::BadType);
    }
    let mut info = ChunkInfo::with_usage(UsageField::Absent);
    let present = |c: Option<Counts>| {
        c.and_then(Counts::usage)
            .map_or(UsageField::Absent, UsageField::Present)
    };
    match kind {
        "error" => {
            let err = e.error.as_ref();
            info.error = Some(err.map_or_else(|| "error event".to_owned(), error_message));
        }
        "message_start" => info.usage = present(e.message.and_then(|m| m.usage)),
        "message_delta" => {
            info.usage = present(e.usage);
            info.finish_reason = finish_reason(e.delta.as_ref().and_then(|d| d.get("stop_reason")));
        }
        "message_stop" => info.finished = true,
        "content_block_start" => {
            info.real = true;
            let block = e.content_block.as_ref();
            if summarize
                && block.and_then(|b| b.get("type")).and_then(Value::as_str) == Some("tool_use")
            {
                let name = block
                    .and_then(|b| b.get("name"))
                    .and_then(Value::as_str)
                    .unwrap_or_default();
                info.summary = Some(format!("tool call: {name}"));
            }
        }
        "content_block_delta" => {
            let d = e.delta.as_ref();
            let piece = ["text", "partial_json", "thinking"]
                .iter()
                .find_map(|k| d.and_then(|d| d.get(*k)).and_then(Value::as_str))
                .unwrap_or_default();
            info.real = !piece.is_empty();
            info.text_bytes = piece.len();
            info.text = Some(piece.to_owned()).filter(|t| text && !t.is_empty());
            let said = d.and_then(|d| d.get("type")).and_then(Value::as_str) == Some("text_delta");
            info.summary = Some(piece.to_owned()).filter(|_| summarize && said);
        }
        _ => {}
    }
    Ok(info)
}

impl Endpoint {
    /// Anthropic's `POST /v1/messages`, relayed verbatim to an upstream
    /// of `kind = "anthropic"` (or a mock with `api = "anthropic"`).
    pub const MESSAGES: Endpoint = Endpoint(&MESSAGES);

    /// Anthropic's `POST /v1/messages/count_tokens`: never streamed, its
    /// answer (`input_tokens`) read by the caller.
    pub const COUNT_TOKENS: Endpoint = Endpoint(&Protocol {
        name: "count_tokens",
        path: "/messages/count_tokens",
        events: Events::Done,
        ..MESSAGES
    });
}

const MESSAGES: Protocol = Protocol {
    name: "messages",
    title: "the Messages API",
    path: "/messages",
    family: Family::Anthropic,
    events: Events::Typed {
        last: "message_stop",
    },
    whole: inspect_message,
    event: inspect_event,
    output: AssistantOutput::from_message,
    input_len,
    usage: merged_usage,
};

/// A stream's usage with an event's: `message_delta` may lack the input
/// that `message_start` gave.
fn merged_usage(before: Option<Usage>, later: Usage) -> Usage {
    before.map_or(later, |b| b.update(later))
}

impl Usage {
    /// This usage with what `later` says: a count it gives replaces
    /// this one's (a stream's `message_delta` after its `message_start`).
    pub fn update(self, later: Usage) -> Usage {
        let pick = |a: u64, b: u64| if b > 0 { b } else { a };
        Usage {
            prompt_tokens: pick(self.prompt_tokens, later.prompt_tokens),
            completion_tokens: pick(self.completion_tokens, later.completion_tokens),
            cached_tokens: pick(self.cached_tokens, later.cached_tokens),
            reasoning_tokens: pick(self.reasoning_tokens, later.reasoning_tokens),
            cache_write_tokens: pick(self.cache_write_tokens, later.cache_write_tokens),
            estimated: later.estimated,
        }
    }
}

impl AssistantOutput {
    /// What a whole Messages body says: its text blocks, then its
    /// `tool_use` blocks.
    pub fn from_message(body: &[u8]) -> Result<Self, NotAnAnswer> {
        let v: Value = serde_json::from_slice(body)?;
        let mut out = AssistantOutput {
            finish_reason: finish_reason(v.get("stop_reason")),
            ..AssistantOutput::default()
        };
        let blocks = v.get("content").and_then(Value::as_array);
        for b in blocks.into_iter().flatten() {
            match b.get("type").and_then(Value::as_str) {
                Some("text") => out
                    .text
                    .push_str(b.get("text").and_then(Value::as_str).unwrap_or_default()),
                Some("tool_use") if out.tool_calls.len() < MAX_TOOL_CALLS => {
                    out.tool_calls.push(ToolCall {
                        name: b
                            .get("name")
                            .and_then(Value::as_str)
                            .unwrap_or_default()
                            .to_owned(),
                        arguments: b.get("input").map(Value::to_string).unwrap_or_default(),
                    });
                }
                _ => {}
            }
        }
        Ok(out)
    }
}

/// The bytes a Messages request's input stands for by the billing rule
/// ([`Billable::messages_input`]: `system`, every turn and block, the
/// tools; images left out): its tokens × 4, so that
/// [`super::estimate_tokens`] gives them back, for a call's usage when
/// the upstream reports none.
pub fn input_len(body: &Map<String, Value>) -> usize {
    let tokens = Billable::messages_input(body).input.saturating_mul(4);
    usize::try_from(tokens).unwrap_or(usize::MAX)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    /// Anthropic's documented stream of a short answer, event by event.
    const STREAM: &[&str] = &[
        r#"{"type":"message_start","message":{"id":"msg_1","type":"message","role":"assistant","content":[],"model":"claude-sonnet-4-5","stop_reason":null,"stop_sequence":null,"usage":{"input_tokens":25,"cache_read_input_tokens":10,"cache_creation_input_tokens":5,"output_tokens":1}}}"#,
        r#"{"type":"content_block_start","index":0,"content_block":{"type":"text","text":""}}"#,
        r#"{"type":"ping"}"#,
        r#"{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"Hello"}}"#,
        r#"{"type":"content_block_stop","index":0}"#,
        r#"{"type":"message_delta","delta":{"stop_reason":"end_turn","stop_sequence":null},"usage":{"output_tokens":15}}"#,
        r#"{"type":"message_stop"}"#,
    ];

    #[test]
    fn a_stream_is_read_event_by_event() {
        let infos: Vec<ChunkInfo> = STREAM
            .iter()
            .map(|e| inspect_event(e.as_bytes(), true, true).unwrap())
            .collect();
        let UsageField::Present(start) = infos[0].usage else {
            panic!("no usage at message_start");
        };
        assert_eq!((start.prompt_tokens, start.cached_tokens), (40, 10));
        assert!(!infos[0].real && infos[1].real && !infos[2].real);
        assert_eq!(infos[3].text.as_deref(), Some("Hello"));
        assert_eq!(infos[3].summary.as_deref(), Some("Hello"));
        let UsageField::Present(delta) = infos[5].usage else {
            panic!("no usage at message_delta");
        };
        let total = start.update(delta);
        assert_eq!((total.prompt_tokens, total.completion_tokens), (40, 15));
        assert_eq!(infos[5].finish_reason.as_deref(), Some("stop"));
        assert!(infos[6].finished);
        let err = br#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        assert_eq!(
            inspect_event(err, false, false).unwrap().error.as_deref(),
            Some("Overloaded")
        );
        assert!(inspect_event(b"[]", false, false).is_err());
        assert!(inspect_event(b"{}", false, false).is_err());
    }

    #[test]
    fn a_whole_message_is_an_answer_and_an_error_body_is_not() {
        let body = br#"{"id":"msg_1","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"Hi"},{"type":"tool_use","id":"t","name":"get","input":{"a":1}}],"stop_reason":"tool_use","usage":{"input_tokens":3,"output_tokens":4}}"#;
        match inspect_message(body).unwrap() {
            WholeBody::Answer {
                usage,
                finish_reason,
                finished,
                ..
            } => {
                assert!(finished);
                assert_eq!(usage.unwrap().completion_tokens, 4);
                assert_eq!(finish_reason.as_deref(), Some("tool_calls"));
            }
            WholeBody::Error(e) => panic!("{e}"),
        }
        let out = AssistantOutput::from_message(body).unwrap();
        assert_eq!(out.text, "Hi");
        assert_eq!(out.tool_calls[0].arguments, r#"{"a":1}"#);
        let err = br#"{"type":"error","error":{"type":"api_error","message":"boom"}}"#;
        assert!(matches!(inspect_message(err).unwrap(), WholeBody::Error(m) if m == "boom"));
        assert!(inspect_message(b"{}").is_err());
        assert!(inspect_message(br#"{"type":"message"}"#).is_err());
    }
}
