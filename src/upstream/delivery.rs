//! How a chat call travels to its server: streamed or whole on the wire,
//! whatever its caller asked for.
//!
//! - A whole call its caller may drop ([`Call::cancellable`]: a race or
//!   hedge candidate, a panellist, a verifier) is streamed from the server
//!   and put back together whole ([`collect`]): llama.cpp-family servers
//!   stop generating when a *stream's* client goes away, not a whole
//!   answer's.
//! - A server that refuses a stream is asked again whole, and the answer
//!   replayed as a stream when the caller wanted one ([`refusal`]): a 200
//!   stream without a single event (llama-cpp-python's answer to tools on
//!   a stream, "Automatic streaming tool choice is not supported" in its
//!   log, and to a prompt longer than its context), or an error status
//!   that says it will not stream these tools. A model whose server
//!   refused tools on a stream, and answered them whole, is remembered
//!   ([`StreamsTools`]); its later calls with tools go out whole, and a
//!   cancellable one dropped while the server works is counted in the
//!   call's [`Unstopped`] tally ([`Armed`]).
//! - A chat server that ignores `stream` and answers whole
//!   (`content-type: application/json`) is read as the whole answer it
//!   is, by `decode::unstreamed`: one call, replayed as a stream when
//!   the caller wanted one, and no cut counted against its health.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt;
use serde_json::{Value, json};

use crate::error::ModelError;
use crate::model::{Call, ChunkStream, Completion, Reply, ReplyBody, Unstopped};
use crate::stream::whole_to_stream;
use crate::wire::assemble::Assembler;
use crate::wire::{ChatRequest, MAX_RESPONSE, Usage, UsageField};

/// What a 200 stream that ended without a single event is called.
pub const EMPTY_STREAM: &str = "the stream ended before any event";

/// How one call goes on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Wire {
    /// Streamed, and relayed as a stream.
    Stream,
    /// Streamed, and put back together whole for the caller.
    Assemble,
    /// Whole.
    Whole,
}

impl Wire {
    /// How `req` goes out for `call`, given whether the model's server is
    /// known to refuse tools on a stream.
    pub fn plan(req: &ChatRequest, call: &Call, refuses_tools: bool) -> Wire {
        if refuses_tools && carries_tools(req) {
            Wire::Whole
        } else if req.is_stream() {
            Wire::Stream
        } else if call.cancellable.is_some() {
            Wire::Assemble
        } else {
            Wire::Whole
        }
    }

    pub fn streamed(self) -> bool {
        self != Wire::Whole
    }

    /// The request as it goes on the wire this way: the caller's own when
    /// nothing changes, else a copy with `stream` set accordingly.
    pub fn request(self, req: &Arc<ChatRequest>) -> Arc<ChatRequest> {
        if self.streamed() == req.is_stream() {
            return req.clone();
        }
        let mut r = ChatRequest::clone(req);
        r.stream = self.streamed().then_some(true);
        r.stream_options = None;
        Arc::new(r)
    }
}

/// Whether `req` offers tools the model may choose to call (`tool_choice`
/// other than `"none"`).
pub fn carries_tools(req: &ChatRequest) -> bool {
    let offered = ["tools", "functions"].iter().any(|k| {
        req.extra
            .get(*k)
            .and_then(Value::as_array)
            .is_some_and(|a| !a.is_empty())
    });
    offered && req.extra.get("tool_choice").and_then(Value::as_str) != Some("none")
}

/// Why a server refused a streamed call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// It does not take (these) tools on a stream.
    Tools,
    /// A 200 stream without a single answer event.
    Empty,
}

/// Whether `e`, the failure of a streamed call, is a server refusing the
/// stream rather than the request: asked whole, it may well answer.
pub fn refusal(e: &ModelError, tools: bool) -> Option<Refusal> {
    let says_stream = |m: &str| m.to_ascii_lowercase().contains("stream");
    match e {
        ModelError::Status {
            status, message, ..
        } if tools
            && (400..600).contains(status)
            && !matches!(status, 401 | 403 | 404 | 408 | 409 | 429)
            && says_stream(message) =>
        {
            Some(Refusal::Tools)
        }
        ModelError::Reported {
            message,
            streamed: true,
            ..
        } if tools && says_stream(message) => Some(Refusal::Tools),
        ModelError::StreamCut { detail, .. } if detail == EMPTY_STREAM => Some(Refusal::Empty),
        _ => None,
    }
}

/// Whether `e` is a connection that went away before the answer came:
/// worth one more try on a new connection.
pub fn connection_lost(e: &ModelError) -> bool {
    matches!(e, ModelError::Connect { .. } | ModelError::StreamCut { .. })
}

/// Whether a model's server takes tools on a stream: assumed until it
/// refuses once.
#[derive(Debug, Default)]
pub struct StreamsTools {
    refused: AtomicBool,
}

impl StreamsTools {
    pub fn refused(&self) -> bool {
        self.refused.load(Ordering::Relaxed)
    }

    /// Remembers a refusal; `true` the first time.
    pub fn learn_refused(&self) -> bool {
        !self.refused.swap(true, Ordering::Relaxed)
    }
}

/// A whole call in flight that its caller may drop: if it is dropped
/// before [`Armed::disarm`], the server goes on generating for nobody, and
/// the call's tally says so.
pub struct Armed(Option<Arc<Unstopped>>);

impl Armed {
    pub fn new(tally: Option<Arc<Unstopped>>) -> Self {
        Armed(tally)
    }

    /// The server is done with the call (answered or failed).
    pub fn disarm(mut self) {
        self.0 = None;
    }
}

impl Drop for Armed {
    fn drop(&mut self) {
        if let Some(t) = &self.0 {
            t.add();
        }
    }
}

/// Reads a stream to its end and puts it back together as the whole
/// answer the server would have sent.
pub async fn collect(mut s: ChunkStream, upstream: &Arc<str>) -> Result<Completion, ModelError> {
    let invalid = |detail: String| ModelError::Invalid {
        upstream: upstream.clone(),
        detail,
    };
    let mut whole = Assembler::default();
    let (mut bytes, mut usage) = (0, None);
    while let Some(chunk) = s.next().await {
        let chunk = chunk?;
        bytes += chunk.data.len();
        if bytes > MAX_RESPONSE {
            return Err(invalid(format!(
                "the streamed answer is larger than {MAX_RESPONSE} bytes"
            )));
        }
        if let UsageField::Present(u) = chunk.usage {
            usage = Some(u);
        }
        if !chunk.loading {
            whole
                .add(&chunk.data)
                .map_err(|e| invalid(format!("a stream event is not a chunk: {e}")))?;
        }
    }
    let body = serde_json::to_vec(&whole.finish())?;
    Ok(Completion {
        body: body.into(),
        usage,
    })
}

/// A put-together answer whose stream carried no `usage` (llama-cpp-python
/// never sends it on a stream) gets the call's estimate, as the whole
/// answer would have carried the server's figures.
pub fn with_usage(c: Completion, usage: Option<Usage>) -> Result<Completion, ModelError> {
    let (None, Some(u)) = (c.usage, usage) else {
        return Ok(c);
    };
    let mut body: Value = serde_json::from_slice(&c.body)?;
    if let Value::Object(o) = &mut body {
        o.insert(
            "usage".into(),
            json!({
                "prompt_tokens": u.prompt_tokens,
                "completion_tokens": u.completion_tokens,
                "total_tokens": u.prompt_tokens.saturating_add(u.completion_tokens),
            }),
        );
    }
    Ok(Completion {
        body: serde_json::to_vec(&body)?.into(),
        usage: Some(u),
    })
}

/// A whole reply replayed as a stream, for a caller that asked for one.
pub fn as_stream(reply: Reply) -> Result<Reply, ModelError> {
    match reply.body {
        ReplyBody::Whole(c) => Ok(Reply {
            body: ReplyBody::Stream(whole_to_stream(&c)?),
            ..reply
        }),
        ReplyBody::Stream(_) => Ok(reply),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap()
    }

    fn status(status: u16, message: &str) -> ModelError {
        ModelError::Status {
            upstream: "u".into(),
            status,
            message: message.into(),
            code: None,
            retry_after: None,
        }
    }

    #[test]
    fn tools_count_unless_choice_is_none() {
        let m = json!([{"role": "user", "content": "hi"}]);
        assert!(!carries_tools(&req(json!({"model": "m", "messages": m}))));
        assert!(carries_tools(&req(
            json!({"model": "m", "messages": m, "tools": [{"type": "function"}]})
        )));
        assert!(!carries_tools(&req(
            json!({"model": "m", "messages": m, "tools": [{}], "tool_choice": "none"})
        )));
        assert!(!carries_tools(&req(
            json!({"model": "m", "messages": m, "tools": []})
        )));
    }

    #[test]
    fn refusals_are_told_from_failures() {
        let refused = status(500, "Automatic streaming tool choice is not supported");
        assert_eq!(refusal(&refused, true), Some(Refusal::Tools));
        assert_eq!(refusal(&refused, false), None);
        assert_eq!(refusal(&status(500, "out of memory"), true), None);
        assert_eq!(refusal(&status(429, "stream limit"), true), None);
        let empty = ModelError::StreamCut {
            upstream: "u".into(),
            detail: EMPTY_STREAM.into(),
        };
        assert_eq!(refusal(&empty, false), Some(Refusal::Empty));
        let cut = ModelError::StreamCut {
            upstream: "u".into(),
            detail: "the stream ended without [DONE]".into(),
        };
        assert_eq!(refusal(&cut, true), None);
    }

    #[test]
    fn tally_counts_only_a_call_dropped_in_flight() {
        let t = Arc::new(Unstopped::default());
        Armed::new(Some(t.clone())).disarm();
        assert_eq!(t.count(), 0);
        drop(Armed::new(Some(t.clone())));
        assert_eq!(t.count(), 1);
    }
}
