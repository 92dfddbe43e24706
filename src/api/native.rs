//! [`Native`]: the [`Render`] of an answer an upstream wrote in the
//! client's own dialect (a Responses or Messages body forwarded verbatim):
//! the body as it is, each stream event under its own name (its JSON's
//! `type`), and an error after the stream began as the dialect's `error`
//! event.
//!
//! An event is written only under a `type` that is an event name
//! ([`is_event_name`]: `[a-z_.]`, at most 64 characters; the upstream relay
//! refuses any other before it gets here), and its data (already redacted)
//! on one line: an event with any other `type` ends the stream with the
//! error event, so nothing an upstream puts in a `type` can forge an
//! event or spell a secret after `event: `.

use std::sync::Arc;

use bytes::{BufMut, Bytes, BytesMut};
use serde_json::{Map, Value, json};

use super::error::{ApiError, ErrorStyle};
use super::ingress::Job;
use super::render::Render;
use crate::boxed::boxed;
use crate::graph::Node;
use crate::model::Chunk;
use crate::sink::Totals;
use crate::upstream::ConcreteModel;
use crate::wire::billing::Billable;
use crate::wire::{Endpoint, is_event_name};

/// The job of a body (`raw`) forwarded verbatim to `concrete` on
/// `endpoint`, billable for `bill`, its answer relayed by [`Native`] in
/// `style`.
pub fn job<'a>(
    (route, node): (&'a Arc<str>, &'a Node),
    concrete: Arc<ConcreteModel>,
    (endpoint, style): (Endpoint, ErrorStyle),
    raw: Map<String, Value>,
    bill: Billable,
) -> Job<'a> {
    Job {
        route,
        node,
        bill,
        answers: 1,
        request: None,
        client_body: None,
        stream: raw.get("stream").and_then(Value::as_bool) == Some(true),
        run: Box::new(move |call| {
            boxed(move || async move { concrete.forward(call, endpoint, raw).await })
        }),
        render: Box::new(Native::new(style)),
        headers: Vec::new(),
        on_open: None,
    }
}

pub struct Native {
    /// Whose error event a failure is: the Responses API's (OpenAI's
    /// style) or Anthropic's.
    style: ErrorStyle,
    /// The last event's `sequence_number` (Responses), for an error
    /// event after it.
    seq: Option<u64>,
}

impl Native {
    pub fn new(style: ErrorStyle) -> Self {
        Native { style, seq: None }
    }
}

#[derive(serde::Deserialize)]
struct EventHead<'a> {
    #[serde(
        borrow,
        rename = "type",
        default,
        deserialize_with = "crate::wire::borrowed::option"
    )]
    kind: Option<std::borrow::Cow<'a, str>>,
    sequence_number: Option<u64>,
}

impl Render for Native {
    fn whole(&mut self, body: &Bytes, _: Totals) -> Result<Bytes, ApiError> {
        Ok(body.clone())
    }

    fn keepalive(&mut self, out: &mut BytesMut) {
        match self.style {
            ErrorStyle::Anthropic => out.put_slice(b"event: ping\ndata: {\"type\":\"ping\"}\n\n"),
            ErrorStyle::OpenAi => out.put_slice(super::sse::KEEPALIVE),
        }
    }

    fn chunk(&mut self, chunk: Chunk, out: &mut BytesMut) -> Result<(), ApiError> {
        let head: Option<EventHead> = serde_json::from_slice(&chunk.data).ok();
        let Some(kind) = head
            .as_ref()
            .and_then(|h| h.kind.as_deref())
            .filter(|k| is_event_name(k))
        else {
            return Err(ApiError::Internal(
                "an upstream stream event has no valid `type`; the stream ends here".into(),
            ));
        };
        if let Some(n) = head.as_ref().and_then(|h| h.sequence_number) {
            self.seq = Some(n);
        }
        out.reserve(chunk.data.len() + kind.len() + 16);
        out.put_slice(b"event: ");
        out.put_slice(kind.as_bytes());
        out.put_slice(b"\ndata: ");
        super::sse::put_data_line(out, &chunk.data);
        out.put_slice(b"\n\n");
        Ok(())
    }

    fn end(&mut self, _: Totals, _: &mut BytesMut) {}

    fn fail(&mut self, error: &ApiError, out: &mut BytesMut) {
        let event = match self.style {
            ErrorStyle::Anthropic => json!({"type": "error", "error": error.anthropic_object()}),
            ErrorStyle::OpenAi => {
                let e = error.object();
                json!({
                    "type": "error",
                    "code": e.get("code"),
                    "message": e.get("message"),
                    "param": e.get("param"),
                    "sequence_number": self.seq.map_or(0, |n| n + 1),
                })
            }
        };
        out.put_slice(format!("event: error\ndata: {event}\n\n").as_bytes());
    }
}
