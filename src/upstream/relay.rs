//! A streamed answer relayed event by event as it arrives, each as its
//! own bytes: the first event is awaited before the stream is handed on
//! (committed), deadlines (first token, idle, total) are kept while it
//! flows, and its [`Attempt`] learns the first token, usage, finish reason
//! and end. Each event is redacted as it passes (with a carry-over between
//! events) and bounded by [`MAX_EVENT`].
//!
//! Chat streams end at `[DONE]` after a `finish_reason` (or, once a choice
//! finished, when the body ends, breaks or goes idle: the answer is
//! whole); `[DONE]` with no `finish_reason` before it, or before any
//! event, is a cut ([`ModelError::StreamCut`], retried before the answer
//! began), never a whole answer, on every dialect. Their first
//! token is their first event other than llama-swap's loading banner. The
//! stream is handed on (committed) at its first real event, a loading
//! banner or a finish: the events before (a role-only delta) are held, so
//! a stream cut before its answer began fails the call.
//! Responses streams
//! ([`Endpoint::RESPONSES`](crate::wire::Endpoint::RESPONSES)) are typed
//! events read by `wire::responses`: their first token is the first real one (an output
//! item or a delta, not `response.created`), they end at
//! `response.completed` / `response.incomplete` (no `[DONE]` needed, and a
//! `[DONE]` before them is a cut: what
//! is already buffered after it is relayed, nothing is waited for), and a
//! `response.failed` or `error` event fails the attempt. Messages streams
//! ([`Endpoint::MESSAGES`](crate::wire::Endpoint::MESSAGES), an Anthropic upstream answering verbatim) are
//! read alike by `wire::messages`: first token at the first content
//! block, end at `message_stop` (a `[DONE]` before it is a cut), the usage of `message_start` completed
//! by `message_delta`'s, an `error` event a failure. Such events are
//! handed on with `usage` [`UsageField::Absent`] (they have no top-level
//! `usage` for a relay to edit) and `choices` 0. Which of these a stream
//! is, and how its events and usage read, is its endpoint's to say
//! ([`crate::wire::Endpoint`]); nothing here names a dialect.

use std::borrow::Cow;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use futures::{Stream, StreamExt};
use tokio::time::{Instant, Sleep, sleep_until, timeout_at};

use super::BodyStream;
use super::RawResponse;
use super::delivery::EMPTY_STREAM;
use super::exchange::{Exchange, MAX_EVENT};
use super::lane::Permit;
use super::sse::SseParser;
use crate::attempt::Attempt;
use crate::error::{ModelError, TimeoutPhase};
use crate::labels::Warm;
use crate::model::{Chunk, ChunkStream};
use crate::redact::Carry;
use crate::wire::{Usage, UsageField};

/// Why a stream that ended before any of its answer is a cut.
const NOTHING_CAME: &str = "the stream ended before its first event";

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
        Ok(None) => return Err(relay.x.cut(NOTHING_CAME)),
        Ok(Some(Err(e))) => return Err(e),
        Ok(Some(Ok(c))) => c,
    };
    // What says nothing yet (a role-only delta, `response.created`) is
    // held until the answer begins: a stream cut before that is a failed
    // call (retried), not a committed one. The relay keeps its deadlines.
    let mut held = vec![first];
    while held.len() < MAX_HELD
        && !relay.finished_choice
        && !held.iter().any(|c| c.real || c.loading)
    {
        match relay.next().await {
            Some(Ok(c)) => held.push(c),
            Some(Err(e)) => return Err(e),
            None => break,
        }
    }
    Ok(ChunkStream::new(
        futures::stream::iter(held.into_iter().map(Ok)).chain(relay),
    ))
}

/// The most events held before a stream's answer begins.
const MAX_HELD: usize = 16;

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
    /// A chunk with a `finish_reason` (or a Responses stream's last event)
    /// went by: an end without `[DONE]` after it is a clean end, not a cut.
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

    /// Why a stream that ended early is cut: before its typed last
    /// event, or `untyped` for a `[DONE]` stream.
    fn missing_end(&self, untyped: &'static str) -> Cow<'static, str> {
        match self.x.endpoint.last_event() {
            Some(last) => format!("the stream ended before {last}").into(),
            None => untyped.into(),
        }
    }

    fn done(&mut self) -> Next {
        if !self.relayed {
            return self.fail(self.x.cut(NOTHING_CAME));
        }
        if !self.finished_choice {
            // `[DONE]` with no `finish_reason` before it (llama-cpp-python
            // interrupted by another request): cut short, not an answer.
            let missing = self.missing_end("the stream ended without a finish_reason");
            return self.fail(self.x.cut(&missing));
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
        let endpoint = self.x.endpoint;
        let responses = endpoint.typed_events();
        let info = endpoint.inspect_event(&data, summarize, redactor.is_active());
        let info = info.map_err(|e| {
            self.x
                .invalid(&format!("a stream event is not a chunk: {e}"))
        })?;
        if let Some(message) = info.error {
            return Err(self.x.reported(&message, true));
        }
        // Read as the upstream sent it (the summary is redacted when
        // recorded), relayed without secrets. Where usage sits holds for
        // the bytes as read: the redactor hands them back when it found
        // nothing.
        let read = (data.as_ptr(), data.len());
        let data = redactor.event(&mut self.carry, data, info.text.as_deref());
        let same = (data.as_ptr(), data.len()) == read;
        if let UsageField::Present(u) = info.usage {
            // Anthropic's `message_delta` may lack the input that
            // `message_start` gave.
            self.attempt
                .set_usage(endpoint.merge_usage(self.attempt.usage(), u));
        }
        let loading = info.loading && !self.answering;
        if loading {
            // llama-swap is loading the model: the call was cold, and
            // its first token is still to come.
            self.attempt.set_warm(Warm::No);
        } else {
            // A Responses stream announces itself (`response.created`)
            // before the model says anything.
            if !self.answering && (info.real || !responses) {
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
            usage: if responses {
                UsageField::Absent
            } else {
                info.usage
            },
            usage_at: info.usage_at.filter(|_| same && !responses),
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
                let missing = this.missing_end("the stream ended without [DONE]");
                return this.fail(this.x.cut(&missing));
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
                // A cut after the answer finished loses nothing of it.
                Poll::Ready(Some(Err(_))) if this.finished_choice => return this.done(),
                Poll::Ready(Some(Err(e))) => return this.fail(this.x.cut(&e.to_string())),
                Poll::Ready(None) => this.body_ended = true,
                Poll::Pending if this.finished_choice && this.x.endpoint.typed_events() => {
                    // Its last event came: nothing more is waited for.
                    return this.done();
                }
                Poll::Pending => {
                    while this.timer.as_mut().poll(cx).is_ready() {
                        if let Some(phase) = this.overdue(Instant::now()) {
                            // Stalled after its finish: the answer is whole.
                            if this.finished_choice && phase == TimeoutPhase::Idle {
                                return this.done();
                            }
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
