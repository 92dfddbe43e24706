//! Turns an upstream's raw response into a [`Completion`] or a committed
//! [`ChunkStream`], enforcing the attempt's deadlines and bounds and keeping
//! its [`Attempt`] up to date (first token, usage, end, failure).
//!
//! Nothing an upstream sends is trusted: a body or an event past its size
//! bound, a 200 that is not an answer (`{}`, `[]`, invalid UTF-8), and a
//! stream that stalls between events are failures of the attempt. Every
//! byte the upstream wrote is redacted before anything reads it: error
//! text before it becomes part of an error ([`Exchange`]), a whole body
//! once, each stream event as it arrives (with a carry-over between
//! events). Stream events are relayed one by one as they arrive, each as
//! its own bytes; only a `Retry-After` that is a number or a date is kept.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::time::{Instant, Sleep, sleep_until, timeout_at};

use super::delivery::EMPTY_STREAM;
use super::lane::Permit;
use super::sse::SseParser;
use super::{BodyStream, RawResponse};
use crate::attempt::Attempt;
use crate::error::{ModelError, TimeoutPhase, WITHHELD};
use crate::labels::Warm;
use crate::model::{Chunk, ChunkStream, Completion};
use crate::redact::{Carry, Redactor};
use crate::wire::{
    AssistantOutput, Endpoint, MAX_RESPONSE, Usage, UsageField, WholeBody, error_message,
    inspect_chunk, inspect_chunk_text, inspect_completion,
};

/// Largest single SSE line or event accepted from an upstream.
pub const MAX_EVENT: usize = 4 * 1024 * 1024;
/// Largest error body read to find the upstream's message.
const MAX_ERROR_BODY: usize = 64 * 1024;
/// The longest upstream message quoted in an error.
const MAX_MESSAGE_CHARS: usize = 1000;

/// One upstream call: where it goes, by when each phase must end, and the
/// secrets nothing it says may repeat. Every error built from upstream
/// text is built here.
pub struct Exchange {
    pub upstream: Arc<str>,
    pub started: Instant,
    /// The first stream event must arrive by then.
    pub first: Instant,
    /// The whole answer must be in by then.
    pub total: Instant,
    /// Longest gap between two stream events.
    pub idle: Duration,
    /// The request's estimated input tokens, for a usage estimate.
    pub input_tokens: u64,
    pub redactor: Arc<Redactor>,
}

impl Exchange {
    pub fn timeout(&self, phase: TimeoutPhase) -> ModelError {
        let after = match phase {
            TimeoutPhase::FirstToken => self.first.saturating_duration_since(self.started),
            TimeoutPhase::Total => self.total.saturating_duration_since(self.started),
            TimeoutPhase::Idle => self.idle,
            TimeoutPhase::Lane => Duration::ZERO,
        };
        ModelError::Timeout {
            upstream: self.upstream.clone(),
            phase,
            after: round_ms(after),
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

    /// Upstream text, bounded and without secrets.
    fn clean(&self, text: &str) -> String {
        let text = self.redactor.redact(text);
        match text.char_indices().nth(MAX_MESSAGE_CHARS) {
            Some((at, _)) => format!("{}…", &text[..at]),
            None => text.into_owned(),
        }
    }

    pub fn invalid(&self, detail: &str) -> ModelError {
        ModelError::Invalid {
            upstream: self.upstream.clone(),
            detail: self.clean(detail),
        }
    }

    pub fn cut(&self, detail: &str) -> ModelError {
        ModelError::StreamCut {
            upstream: self.upstream.clone(),
            detail: self.clean(detail),
        }
    }

    fn reported(&self, message: &str, streamed: bool) -> ModelError {
        ModelError::Reported {
            upstream: self.upstream.clone(),
            message: self.clean(message),
            streamed,
        }
    }
}

/// A duration to whole milliseconds, as errors quote it.
pub(super) fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX))
}

enum ReadError {
    Cut(String),
    TooLarge,
    Late,
}

/// Reads a body up to `limit` bytes, checking `by` as data arrives (an
/// upstream that never pauses still meets its deadline).
async fn read_body(mut body: BodyStream, limit: usize, by: Instant) -> Result<Bytes, ReadError> {
    let mut buf = BytesMut::new();
    while let Some(part) = timeout_at(by, body.next())
        .await
        .map_err(|_| ReadError::Late)?
    {
        let part = part.map_err(|e| ReadError::Cut(e.to_string()))?;
        if buf.len() + part.len() > limit {
            return Err(ReadError::TooLarge);
        }
        buf.extend_from_slice(&part);
        if Instant::now() >= by {
            return Err(ReadError::Late);
        }
    }
    Ok(buf.freeze())
}

/// The error for a non-2xx answer, with the upstream's own message.
pub async fn status_error(resp: RawResponse, x: &Exchange) -> ModelError {
    let body = read_body(resp.body, MAX_ERROR_BODY, x.total)
        .await
        .unwrap_or_default();
    let parsed: Option<Value> = serde_json::from_slice(&body).ok();
    let err = parsed.as_ref().and_then(|v| v.get("error").or(Some(v)));
    let message = match err {
        _ if matches!(resp.status, 401 | 403) => WITHHELD.to_owned(),
        Some(e @ Value::Object(o)) if o.contains_key("message") => x.clean(&error_message(e)),
        Some(Value::String(s)) => x.clean(s),
        _ => {
            let text = String::from_utf8_lossy(&body);
            let snippet: String = text.trim().chars().take(300).collect();
            if snippet.is_empty() {
                "(empty body)".into()
            } else {
                x.clean(&snippet)
            }
        }
    };
    let code = err.and_then(|e| e.get("code")).and_then(|c| match c {
        Value::String(s) => Some(x.clean(s)),
        Value::Number(n) => Some(n.to_string()),
        _ => None,
    });
    ModelError::Status {
        upstream: x.upstream.clone(),
        status: resp.status,
        message,
        code,
        retry_after: resp.retry_after.filter(|r| is_retry_after(r)),
    }
}

/// A `Retry-After` value: seconds or an HTTP date, nothing else.
fn is_retry_after(v: &str) -> bool {
    let v = v.trim();
    (!v.is_empty() && v.len() <= 10 && v.bytes().all(|b| b.is_ascii_digit()))
        || httpdate::parse_http_date(v).is_ok()
}

/// Reads a whole (non-streamed) answer.
pub async fn whole(
    resp: RawResponse,
    x: &Exchange,
    endpoint: Endpoint,
    attempt: &Attempt,
) -> Result<Completion, ModelError> {
    let body = match read_body(resp.body, MAX_RESPONSE, x.total).await {
        Err(ReadError::Late) => return Err(x.timeout(TimeoutPhase::Total)),
        Err(ReadError::Cut(detail)) => return Err(x.cut(&detail)),
        Err(ReadError::TooLarge) => {
            return Err(x.invalid(&format!(
                "the response body is larger than {MAX_RESPONSE} bytes"
            )));
        }
        Ok(b) => x.redactor.redact_bytes(b),
    };
    let usage = match inspect_completion(&body, endpoint) {
        Ok(WholeBody::Answer {
            usage,
            finish_reason,
        }) => {
            if let Some(r) = finish_reason {
                attempt.set_finish_reason(&r);
            }
            usage
        }
        Ok(WholeBody::Error(message)) => return Err(x.reported(&message, false)),
        Err(e) => return Err(x.invalid(&format!("the body is not an answer: {e}"))),
    };
    if let Some(u) = usage {
        attempt.set_usage(u);
    }
    if usage.is_none() || attempt.wants_summary() {
        let out = AssistantOutput::from_completion(&body).unwrap_or_default();
        if usage.is_none() {
            let output = out.text.len()
                + out
                    .tool_calls
                    .iter()
                    .map(|t| t.arguments.len())
                    .sum::<usize>();
            attempt.set_usage(Usage::estimate(x.input_tokens, output));
        }
        attempt.add_summary(&out.render());
    }
    attempt.finish();
    Ok(Completion { body, usage })
}

/// Starts relaying a streamed answer and waits for its first chunk, so
/// the stream comes back committed (or the call fails before any output).
pub async fn stream(
    resp: RawResponse,
    x: Exchange,
    attempt: &Attempt,
    permit: Permit,
) -> Result<ChunkStream, ModelError> {
    let first_by = x.first;
    let first_phase = x.first_phase();
    let mut relay = Relay {
        body: resp.body,
        parser: SseParser::new(MAX_EVENT),
        body_ended: false,
        timer: Box::pin(sleep_until(x.total)),
        last_event: None,
        arrived: x.started,
        x,
        carry: Carry::default(),
        attempt: attempt.clone(),
        open: true,
        permit: Some(permit),
        relayed: false,
        answering: false,
        output_bytes: 0,
        finished_choice: false,
    };
    let first = match timeout_at(first_by, relay.next()).await {
        Err(_) => return Err(relay.fail_now(first_phase)),
        Ok(None) => return Err(relay.x.invalid("the stream ended before its first event")),
        Ok(Some(Err(e))) => return Err(e),
        Ok(Some(Ok(c))) => c,
    };
    Ok(ChunkStream::new(
        futures::stream::once(async { Ok(first) }).chain(relay),
    ))
}

/// Relays SSE events as chunks until `[DONE]`, an error or a deadline.
struct Relay {
    body: BodyStream,
    parser: SseParser,
    body_ended: bool,
    /// Fires at the total deadline, or at the idle deadline after the
    /// last event, whichever is first (re-armed lazily, not per event).
    timer: Pin<Box<Sleep>>,
    last_event: Option<Instant>,
    /// When the bytes being parsed arrived (the time of their events).
    arrived: Instant,
    x: Exchange,
    /// What redaction remembers of the events before.
    carry: Carry,
    attempt: Attempt,
    open: bool,
    /// The lane's permit, held until the answer is read.
    permit: Option<Permit>,
    /// At least one chunk of the answer went out: `[DONE]` before any is
    /// not an answer.
    relayed: bool,
    /// The answer has begun: a chunk other than llama-swap's loading
    /// banner arrived (the first token, for the attempt's time to first
    /// token and the first-token deadline).
    answering: bool,
    /// Answer text seen so far, for a usage estimate.
    output_bytes: usize,
    /// A chunk with a `finish_reason` went by: an end without `[DONE]`
    /// after it is a clean end, not a cut.
    finished_choice: bool,
}

type Next = Poll<Option<Result<Chunk, ModelError>>>;

impl Relay {
    fn fail(&mut self, e: ModelError) -> Next {
        self.open = false;
        self.permit = None;
        if self.relayed {
            self.attempt.charge_unreported(self.output_bytes);
        }
        self.attempt.fail(&e);
        Poll::Ready(Some(Err(e)))
    }

    /// Fails the relay with a timeout from outside (the first-token wait).
    fn fail_now(&mut self, phase: TimeoutPhase) -> ModelError {
        let e = self.x.timeout(phase);
        self.open = false;
        self.permit = None;
        self.attempt.fail(&e);
        e
    }

    fn done(&mut self) -> Next {
        if !self.relayed {
            return self.fail(self.x.invalid("the stream ended before its first event"));
        }
        self.open = false;
        self.permit = None;
        if !self.attempt.has_usage() {
            // The upstream ignored `include_usage`: estimate, and say so.
            let estimate = Usage::estimate(self.x.input_tokens, self.output_bytes);
            self.attempt.set_usage(estimate);
        }
        self.attempt.finish();
        Poll::Ready(None)
    }

    fn chunk(&mut self, data: Bytes) -> Result<Chunk, ModelError> {
        let (summarize, redactor) = (self.attempt.wants_summary(), &self.x.redactor);
        let info = match redactor.is_active() {
            true => inspect_chunk_text(&data, summarize),
            false => inspect_chunk(&data, summarize),
        };
        let info = info.map_err(|e| {
            self.x
                .invalid(&format!("a stream event is not a chunk: {e}"))
        })?;
        if let Some(message) = info.error {
            return Err(self.x.reported(&message, true));
        }
        // Read as the upstream sent it (the summary is redacted when
        // recorded), relayed without secrets.
        let data = redactor.event(&mut self.carry, data, info.text.as_deref());
        if let UsageField::Present(u) = info.usage {
            self.attempt.set_usage(u);
        }
        let loading = info.loading && !self.answering;
        if loading {
            // llama-swap is loading the model: the call was cold, and
            // its first token is still to come.
            self.attempt.set_warm(Warm::No);
        } else {
            if !self.answering {
                self.answering = true;
                self.attempt.first_token();
            }
            self.relayed = true;
        }
        self.finished_choice |= info.finished;
        if let Some(r) = &info.finish_reason {
            self.attempt.set_finish_reason(&self.x.redactor.redact(r));
        }
        self.output_bytes += info.text_bytes;
        if let Some(summary) = &info.summary {
            self.attempt.add_summary(summary);
        }
        Ok(Chunk {
            data,
            usage: info.usage,
            choices: info.choices,
            real: info.real,
            loading,
        })
    }

    /// Which deadline, if any, has passed at `now`.
    fn overdue(&self, now: Instant) -> Option<TimeoutPhase> {
        if now >= self.x.total {
            return Some(TimeoutPhase::Total);
        }
        if !self.answering && now >= self.x.first {
            return Some(TimeoutPhase::FirstToken);
        }
        let last = self.last_event?;
        (now.saturating_duration_since(last) >= self.x.idle).then_some(TimeoutPhase::Idle)
    }

    /// The earliest deadline still ahead: the total one, the idle one once
    /// events flow, the first-token one while only a loading banner came.
    fn next_deadline(&self) -> Instant {
        let by = match self.last_event {
            Some(last) => self.x.total.min(last + self.x.idle),
            None => self.x.total,
        };
        if self.answering {
            by
        } else {
            by.min(self.x.first)
        }
    }
}

impl Stream for Relay {
    type Item = Result<Chunk, ModelError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Next {
        let this = &mut *self;
        if !this.open {
            return Poll::Ready(None);
        }
        loop {
            match this.parser.next_event() {
                Err(e) => return this.fail(this.x.invalid(&e.to_string())),
                Ok(Some(data)) => {
                    if this.last_event.replace(this.arrived).is_none() {
                        // From the first event on, the idle deadline applies.
                        let at = this.next_deadline();
                        this.timer.as_mut().reset(at);
                    }
                    if data.is_empty() {
                        continue;
                    }
                    if &data[..] == b"[DONE]" {
                        return this.done();
                    }
                    return match this.chunk(data) {
                        Ok(c) => Poll::Ready(Some(Ok(c))),
                        Err(e) => this.fail(e),
                    };
                }
                Ok(None) => {}
            }
            if this.body_ended {
                if this.finished_choice {
                    return this.done();
                }
                if this.last_event.is_none() {
                    // Not even `[DONE]`: what llama-cpp-python sends when
                    // it fails after the response began.
                    return this.fail(this.x.cut(EMPTY_STREAM));
                }
                return this.fail(this.x.cut("the stream ended without [DONE]"));
            }
            match this.body.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(bytes))) => {
                    this.parser.push(bytes);
                    this.arrived = Instant::now();
                    // Checked as data arrives too: an upstream that never
                    // pauses must still meet its deadline.
                    if this.arrived >= this.x.total {
                        return this.fail(this.x.timeout(TimeoutPhase::Total));
                    }
                }
                Poll::Ready(Some(Err(e))) => return this.fail(this.x.cut(&e.to_string())),
                Poll::Ready(None) => this.body_ended = true,
                Poll::Pending => {
                    while this.timer.as_mut().poll(cx).is_ready() {
                        if let Some(phase) = this.overdue(Instant::now()) {
                            return this.fail(this.x.timeout(phase));
                        }
                        let at = this.next_deadline();
                        this.timer.as_mut().reset(at);
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
            self.attempt.charge_unreported(self.output_bytes);
            self.attempt.cancel();
        }
    }
}
