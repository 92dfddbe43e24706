//! Turns an upstream's raw response into a [`Completion`] or a committed
//! [`ChunkStream`], enforcing the attempt's deadlines and keeping its
//! [`Attempt`] up to date (first token, usage, end, failure).
//!
//! Stream events are relayed one by one as they arrive; each payload is
//! inspected once (usage, errors, validity) and passed on as its own bytes.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use eventsource_stream::{EventStream, Eventsource};
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::time::{Instant, Sleep, sleep_until, timeout_at};

use super::{BodyStream, RawResponse};
use crate::error::{ModelError, TimeoutPhase};
use crate::model::{Chunk, ChunkStream, Completion};
use crate::openai::{
    AssistantOutput, UsageField, error_message, inspect_chunk, inspect_completion,
};
use crate::telemetry::Attempt;

/// Largest whole response body accepted from an upstream.
const MAX_RESPONSE: usize = 64 * 1024 * 1024;
/// Largest error body read to find the upstream's message.
const MAX_ERROR_BODY: usize = 64 * 1024;

/// Where and by when one upstream call must finish.
pub struct Deadlines {
    pub upstream: Arc<str>,
    pub started: Instant,
    /// The first stream event must arrive by then.
    pub first: Instant,
    /// The whole answer must be in by then.
    pub total: Instant,
}

impl Deadlines {
    pub fn timeout(&self, phase: TimeoutPhase) -> ModelError {
        let at = match phase {
            TimeoutPhase::FirstToken => self.first,
            TimeoutPhase::Total => self.total,
        };
        ModelError::Timeout {
            upstream: self.upstream.clone(),
            phase,
            after: round_ms(at.saturating_duration_since(self.started)),
        }
    }

    /// The phase a timeout that fired at `first` belongs to.
    pub fn first_phase(&self) -> TimeoutPhase {
        if self.first < self.total {
            TimeoutPhase::FirstToken
        } else {
            TimeoutPhase::Total
        }
    }
}

fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX))
}

enum ReadError {
    Cut(String),
    TooLarge,
}

async fn read_body(mut body: BodyStream, limit: usize) -> Result<Bytes, ReadError> {
    let mut buf = BytesMut::new();
    while let Some(part) = body.next().await {
        let part = part.map_err(|e| ReadError::Cut(e.to_string()))?;
        if buf.len() + part.len() > limit {
            return Err(ReadError::TooLarge);
        }
        buf.extend_from_slice(&part);
    }
    Ok(buf.freeze())
}

/// The error for a non-2xx answer, with the upstream's own message.
pub async fn status_error(resp: RawResponse, d: &Deadlines) -> ModelError {
    let body = match timeout_at(d.total, read_body(resp.body, MAX_ERROR_BODY)).await {
        Ok(Ok(b)) => b,
        _ => Bytes::new(),
    };
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let err = parsed.as_ref().and_then(|v| v.get("error").or(Some(v)));
    let message = match err {
        Some(e @ Value::Object(o)) if o.contains_key("message") => error_message(e),
        Some(Value::String(s)) => s.clone(),
        _ => {
            let text = String::from_utf8_lossy(&body);
            let snippet: String = text.trim().chars().take(300).collect();
            if snippet.is_empty() {
                "(empty body)".into()
            } else {
                snippet
            }
        }
    };
    let code = err.and_then(|e| e.get("code")).and_then(|c| match c {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    ModelError::Status {
        upstream: d.upstream.clone(),
        status: resp.status,
        message,
        code,
        retry_after: resp.retry_after,
    }
}

/// Reads a whole (non-streamed) answer.
pub async fn whole(
    resp: RawResponse,
    d: &Deadlines,
    attempt: &Attempt,
) -> Result<Completion, ModelError> {
    let body = match timeout_at(d.total, read_body(resp.body, MAX_RESPONSE)).await {
        Err(_) => return Err(d.timeout(TimeoutPhase::Total)),
        Ok(Err(ReadError::Cut(detail))) => {
            return Err(ModelError::StreamCut {
                upstream: d.upstream.clone(),
                detail,
            });
        }
        Ok(Err(ReadError::TooLarge)) => {
            return Err(ModelError::Invalid {
                upstream: d.upstream.clone(),
                detail: format!("response body larger than {MAX_RESPONSE} bytes"),
            });
        }
        Ok(Ok(b)) => b,
    };
    let invalid = |detail: String| ModelError::Invalid {
        upstream: d.upstream.clone(),
        detail,
    };
    let usage = inspect_completion(&body)
        .map_err(|e| invalid(format!("the body is not a chat completion ({e})")))?;
    if let Some(u) = usage {
        attempt.set_usage(u);
    }
    if attempt.wants_summary()
        && let Ok(out) = AssistantOutput::from_completion(&body)
    {
        attempt.add_summary(&out.render());
    }
    attempt.finish();
    Ok(Completion { body, usage })
}

/// Starts relaying a streamed answer and waits for its first chunk, so
/// the stream comes back committed (or the call fails before any output).
pub async fn stream(
    resp: RawResponse,
    d: &Deadlines,
    attempt: &Attempt,
) -> Result<ChunkStream, ModelError> {
    let mut relay = Relay {
        events: resp.body.eventsource(),
        deadline: Box::pin(sleep_until(d.total)),
        total_after: round_ms(d.total.saturating_duration_since(d.started)),
        upstream: d.upstream.clone(),
        attempt: attempt.clone(),
        open: true,
        finished_choice: false,
    };
    let first = match timeout_at(d.first, relay.next()).await {
        Err(_) => {
            let e = d.timeout(d.first_phase());
            attempt.fail(&e);
            return Err(e);
        }
        Ok(None) => {
            return Err(ModelError::Invalid {
                upstream: d.upstream.clone(),
                detail: "the stream ended before its first event".into(),
            });
        }
        Ok(Some(Err(e))) => return Err(e),
        Ok(Some(Ok(c))) => c,
    };
    attempt.first_token();
    Ok(ChunkStream::new(
        futures::stream::once(async { Ok(first) }).chain(relay),
    ))
}

/// Relays SSE events as chunks until `[DONE]`, an error or the deadline.
struct Relay {
    events: EventStream<BodyStream>,
    deadline: Pin<Box<Sleep>>,
    /// How long after the call's start the total deadline falls.
    total_after: Duration,
    upstream: Arc<str>,
    attempt: Attempt,
    open: bool,
    /// A chunk with a `finish_reason` went by: an end without `[DONE]`
    /// after it is a clean end, not a cut.
    finished_choice: bool,
}

impl Relay {
    fn fail(&mut self, e: ModelError) -> Poll<Option<Result<Chunk, ModelError>>> {
        self.open = false;
        self.attempt.fail(&e);
        Poll::Ready(Some(Err(e)))
    }

    fn done(&mut self) -> Poll<Option<Result<Chunk, ModelError>>> {
        self.open = false;
        self.attempt.finish();
        Poll::Ready(None)
    }

    fn chunk(&mut self, data: String) -> Result<Chunk, ModelError> {
        let info = inspect_chunk(data.as_bytes()).map_err(|e| ModelError::Invalid {
            upstream: self.upstream.clone(),
            detail: format!("a stream event is not JSON ({e})"),
        })?;
        if let Some(message) = info.error {
            return Err(ModelError::StreamError {
                upstream: self.upstream.clone(),
                message,
            });
        }
        if let UsageField::Present(u) = info.usage {
            self.attempt.set_usage(u);
        }
        self.finished_choice |= info.finished;
        if self.attempt.wants_summary() {
            let mut out = AssistantOutput::default();
            out.absorb_chunk(data.as_bytes());
            self.attempt.add_summary(&out.render());
        }
        Ok(Chunk {
            data: Bytes::from(data),
            usage: info.usage,
            choices: info.choices,
        })
    }
}

impl Stream for Relay {
    type Item = Result<Chunk, ModelError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if !this.open {
            return Poll::Ready(None);
        }
        loop {
            match this.events.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(ev))) => {
                    if ev.data.is_empty() {
                        continue;
                    }
                    if ev.data == "[DONE]" {
                        return this.done();
                    }
                    return match this.chunk(ev.data) {
                        Ok(c) => Poll::Ready(Some(Ok(c))),
                        Err(e) => this.fail(e),
                    };
                }
                Poll::Ready(Some(Err(e))) => {
                    let upstream = this.upstream.clone();
                    return this.fail(ModelError::StreamCut {
                        upstream,
                        detail: e.to_string(),
                    });
                }
                Poll::Ready(None) if this.finished_choice => return this.done(),
                Poll::Ready(None) => {
                    let upstream = this.upstream.clone();
                    return this.fail(ModelError::StreamCut {
                        upstream,
                        detail: "the stream ended without [DONE]".into(),
                    });
                }
                Poll::Pending => {
                    if this.deadline.as_mut().poll(cx).is_ready() {
                        let e = ModelError::Timeout {
                            upstream: this.upstream.clone(),
                            phase: TimeoutPhase::Total,
                            after: this.total_after,
                        };
                        return this.fail(e);
                    }
                    return Poll::Pending;
                }
            }
        }
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        if self.open {
            self.attempt.cancel();
        }
    }
}
