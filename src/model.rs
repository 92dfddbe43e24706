//! The one trait everything that answers a chat request implements
//! ([`ChatModel`]: concrete upstream models and strategies alike), and the
//! shapes it answers with: a whole completion or a stream of chunks.
//!
//! A [`Reply`] carrying a stream is *committed*: its first chunk has already
//! arrived upstream, so a strategy or the HTTP layer can decide on a status
//! code (and a fallback chain can still move on) before the client sees a byte.

use std::ops::Range;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use axum::http::{HeaderName, HeaderValue};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use opentelemetry::trace::SpanId;
use tokio::time::Instant;

use crate::attempt::Attempt;
use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::labels::{Role, Warm};
use crate::span::Phase;
use crate::wire::{AssistantOutput, ChatRequest, MAX_RESPONSE, NotAnAnswer, Usage, UsageField};

/// Anything that answers a chat request: a concrete model or a strategy.
#[async_trait]
pub trait ChatModel: Send + Sync {
    /// Answers `req` whole or streamed, as `req.stream` asks. Errors before
    /// the first stream chunk come back as `Err`; later ones inside the stream.
    /// The request is shared: a strategy copies it only to change it.
    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError>;

    /// The most a request of `size` may spend through this model, over
    /// every upstream call it can make (for budgets and token limits):
    /// a strategy adds up its members', a concrete model prices one call.
    fn estimate(&self, size: CallSize) -> Spend {
        Spend {
            tokens: size.tokens(IMAGE_TOKENS),
            cost_usd: 0.0,
        }
    }

    /// [`Self::estimate`] for this request: a model whose calls depend
    /// on the request's own fields (an arena's `contestants`) reads them;
    /// any other says what `estimate` says. Admission reserves this.
    fn estimate_request(&self, _req: &ChatRequest, size: CallSize) -> Spend {
        self.estimate(size)
    }

    /// Whether a call now would be served: a concrete model that is
    /// ejected, or whose whole upstream is, is not (see
    /// `upstream::health`); a strategy is
    /// while any member it needs is. Strategies skip a member that is not.
    fn availability(&self) -> Availability {
        Availability::Serving
    }

    /// Whether the model continues a conversation that ends with a
    /// partial assistant message (a prefill) natively: Anthropic's
    /// Messages API and the mock do. A mid-stream failover asks a model
    /// that does not with an instruction instead
    /// (`strategy::failover`).
    fn continues_prefill(&self) -> bool {
        false
    }

    /// Whether the model is loaded on its server right now (llama-swap
    /// warm state); `Unknown` where nobody can tell.
    async fn warm(&self) -> Warm {
        Warm::Unknown
    }
}

/// Whether a model would take a call now ([`ChatModel::availability`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Availability {
    Serving,
    /// Ejected after failures: no call until `retry_after` has passed
    /// (then one trial call decides).
    Ejected {
        retry_after: Duration,
    },
}

/// Bounds the config checks too (defined there, as data).
pub use crate::config::{IMAGE_TOKENS, MAX_CONTEXT_WINDOW};

/// One call's size, as estimated before it is made: input tokens, the
/// images among the input (each model prices them), and the most output
/// it may produce (every answer it may write).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CallSize {
    pub input: u64,
    pub images: u64,
    pub output: u64,
}

impl CallSize {
    /// Input with each image at `image_tokens`, plus output.
    pub fn tokens(self, image_tokens: u64) -> u64 {
        self.input_tokens(image_tokens).saturating_add(self.output)
    }

    /// Input with each image at `image_tokens`.
    pub fn input_tokens(self, image_tokens: u64) -> u64 {
        self.input
            .saturating_add(self.images.saturating_mul(image_tokens))
    }

    /// A call that reads this one's input and answer, and writes up to
    /// `output` (a verifier, a judge, a synthesis).
    pub fn reading(self, output: u32) -> CallSize {
        CallSize {
            input: self.input.saturating_add(self.output),
            images: self.images,
            output: u64::from(output),
        }
    }
}

/// Tokens and dollars, spent or estimated (defined beside the limits
/// that count them).
pub use crate::store::limits::Spend;

/// One call into a model: the request's context plus what this call is for.
#[derive(Clone)]
pub struct Call {
    pub ctx: Arc<RequestCtx>,
    pub role: Role,
    /// Longest wait for the first stream event before the call fails
    /// (a fallback chain's `ttft_timeout`); `None` means only the upstream's
    /// own timeout applies.
    pub ttft_timeout: Option<Duration>,
    /// `x-conclave-pin`, until the first strategy on the way down takes it
    /// (`graph::Pinned`).
    pub pin: Option<Arc<str>>,
    /// A route's `stream_idle_timeout`, overriding the upstream's.
    pub idle_timeout: Option<Duration>,
    /// A call conclave makes on its own behalf (a verifier) ends by then,
    /// before the request's own deadline.
    pub deadline: Option<Instant>,
    /// The trace span of the strategy phase this call is made in; its
    /// attempts are that span's children (`None`: the request's span).
    pub span: Option<SpanId>,
    /// Set when the caller may drop the call before it ends (a race or
    /// hedge candidate, a panellist, a verifier past its timeout): a whole
    /// answer is then streamed from the upstream, so that dropping the
    /// call stops the server's generation. A call that must still go out
    /// whole (its server refuses tools on a stream) and is dropped while
    /// the server works on it is counted here.
    pub cancellable: Option<Arc<Unstopped>>,
    /// The caller tries another member after a failure (a fallback tier
    /// that is not the last, a balance member): the concrete model then
    /// makes one try and leaves the retry to the caller.
    pub retry_elsewhere: bool,
    /// The call must reach its model even when the same request was just
    /// answered: one of several samples of one request (a vote), or a
    /// blind contestant. The response cache passes it through.
    pub fresh: bool,
}

/// Most upstream calls a cancellable call's tally keeps track of.
const MAX_WATCHED: usize = 64;

/// What became of a cancellable call's upstream calls: those dropped
/// while their server went on generating for nobody (a whole answer in
/// flight), and the attempts it made, to tell what they had generated
/// when it was dropped. A tally made under another one (a verifier
/// inside a race candidate) reports to it too.
#[derive(Default)]
pub struct Unstopped {
    unstopped: AtomicU32,
    attempts: parking_lot::Mutex<Vec<Attempt>>,
    parent: Option<Arc<Unstopped>>,
}

impl std::fmt::Debug for Unstopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unstopped")
            .field("unstopped", &self.count())
            .finish_non_exhaustive()
    }
}

impl Unstopped {
    /// Calls dropped while their server went on generating.
    pub fn count(&self) -> u32 {
        self.unstopped.load(Ordering::Acquire)
    }

    pub fn add(&self) {
        self.unstopped.fetch_add(1, Ordering::AcqRel);
        if let Some(p) = &self.parent {
            p.add();
        }
    }

    /// An upstream call made under this tally.
    pub fn watch(&self, attempt: &Attempt) {
        {
            let mut a = self.attempts.lock();
            if a.len() < MAX_WATCHED {
                a.push(attempt.clone());
            }
        }
        if let Some(p) = &self.parent {
            p.watch(attempt);
        }
    }

    /// The latest upstream call made under this tally (the one in flight
    /// when it was dropped), if any.
    pub fn latest(&self) -> Option<Attempt> {
        self.attempts.lock().last().cloned()
    }
}

impl Call {
    /// The first call of a request, carrying its pin (if any) down to the
    /// first chain.
    pub fn new(ctx: Arc<RequestCtx>) -> Self {
        let pin = ctx.options.pin.clone();
        Call {
            ctx,
            role: Role::Direct,
            ttft_timeout: None,
            pin,
            idle_timeout: None,
            deadline: None,
            span: None,
            cancellable: None,
            retry_elsewhere: false,
            fresh: false,
        }
    }

    /// This call, marked as one the caller may drop before it ends; the
    /// tally counts the upstream calls that kept generating when it was
    /// (and so does the tally of a cancellable call this one is made in).
    pub fn cancellable(&self) -> (Call, Arc<Unstopped>) {
        let tally = Arc::new(Unstopped {
            parent: self.cancellable.clone(),
            ..Unstopped::default()
        });
        let call = Call {
            cancellable: Some(tally.clone()),
            ..self.clone()
        };
        (call, tally)
    }

    /// Opens a strategy phase's span (a judge's panel, a race's scoring)
    /// when the request is traced: calls made with the returned `Call` are
    /// its children, and the span ends when the phase is dropped.
    pub fn phase(&self, name: &'static str) -> (Option<Phase>, Call) {
        match &self.ctx.trace {
            None => (None, self.clone()),
            Some(t) => {
                let phase = Phase::start(t, self.span, name, self.ctx.clock.now());
                let call = Call {
                    span: Some(phase.id()),
                    ..self.clone()
                };
                (Some(phase), call)
            }
        }
    }

    pub fn without_pin(mut self) -> Self {
        self.pin = None;
        self
    }

    pub fn with_role(&self, role: Role) -> Self {
        Call {
            role,
            ..self.clone()
        }
    }

    pub fn with_ttft_timeout(mut self, ttft: Option<Duration>) -> Self {
        self.ttft_timeout = ttft.or(self.ttft_timeout);
        self
    }

    /// Limits this call (and what it calls) to `limit` from now.
    pub fn with_timeout(mut self, limit: Duration) -> Self {
        let at = Instant::now() + limit;
        self.deadline = Some(self.deadline.map_or(at, |d| d.min(at)));
        self
    }

    /// When the call must end: its own deadline, or the request's when
    /// that is earlier.
    pub fn by(&self) -> Instant {
        self.deadline
            .unwrap_or(self.ctx.deadline)
            .min(self.ctx.deadline)
    }

    /// Marks whether the caller retries a failure on another member.
    pub fn with_retry_elsewhere(mut self, elsewhere: bool) -> Self {
        self.retry_elsewhere = elsewhere;
        self
    }

    /// A call the response cache must not answer nor merge with others
    /// (see [`Call::fresh`]).
    pub fn fresh(mut self) -> Self {
        self.fresh = true;
        self
    }

    /// The innermost route that sets `stream_idle_timeout` wins.
    pub fn with_idle_timeout(mut self, idle: Option<Duration>) -> Self {
        self.idle_timeout = idle.or(self.idle_timeout);
        self
    }
}

/// One SSE `data:` payload from an upstream, kept as its own bytes.
#[derive(Debug, Clone)]
pub struct Chunk {
    pub data: Bytes,
    pub usage: UsageField,
    /// Where its `usage` member sits in `data`, with the comma that goes
    /// with it, when that is known (`ChunkInfo::usage_at`, for `data` as
    /// read): a render leaves usage out by copying around it.
    pub usage_at: Option<Range<usize>>,
    /// How many `choices` it carries (0: a usage-only chunk).
    pub choices: usize,
    /// It carries content or a tool call (see `ChunkInfo::real`).
    pub real: bool,
    /// llama-swap's loading banner, before the answer began (see
    /// `ChunkInfo::loading`).
    pub loading: bool,
}

/// A stream of chunks; ends after the upstream's `[DONE]`.
pub struct ChunkStream {
    inner: Pin<Box<dyn Stream<Item = Result<Chunk, ModelError>> + Send>>,
}

impl ChunkStream {
    pub fn new(s: impl Stream<Item = Result<Chunk, ModelError>> + Send + 'static) -> Self {
        ChunkStream { inner: Box::pin(s) }
    }

    /// A stream that plays back chunks received earlier.
    pub fn replay(chunks: Vec<Chunk>) -> Self {
        ChunkStream::new(futures::stream::iter(chunks.into_iter().map(Ok)))
    }
}

impl Stream for ChunkStream {
    type Item = Result<Chunk, ModelError>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.inner.as_mut().poll_next(cx)
    }
}

/// A whole (non-streamed) completion: the upstream's body, untouched.
#[derive(Debug, Clone)]
pub struct Completion {
    pub body: Bytes,
    pub usage: Option<Usage>,
}

pub enum ReplyBody {
    Whole(Completion),
    Stream(ChunkStream),
}

/// What a model says about its answer beyond the body; the HTTP layer
/// writes it as response headers (or, on a stream that keep-alives
/// committed early, as a final SSE comment), so no strategy needs code in
/// `api/`.
#[derive(Debug, Clone, Default)]
pub struct Meta {
    /// The concrete model (config name) that wrote the answer; none when
    /// no single model did (an arena answer has two).
    pub served_by: Option<Arc<str>>,
    /// Response headers a strategy adds (`x-conclave-exhausted`, …).
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl Meta {
    pub fn served_by(name: Arc<str>) -> Self {
        Meta {
            served_by: Some(name),
            headers: Vec::new(),
        }
    }

    pub fn add_header(&mut self, name: &'static str, value: &str) {
        if let Ok(v) = HeaderValue::from_str(value) {
            self.headers.push((HeaderName::from_static(name), v));
        }
    }

    /// The name used in errors about this answer.
    fn who(&self) -> Arc<str> {
        self.served_by
            .clone()
            .unwrap_or_else(|| "the strategy".into())
    }
}

/// A model's answer, what it says about it, and the attempt behind it.
pub struct Reply {
    pub body: ReplyBody,
    pub meta: Meta,
    /// The attempt that produced the answer; strategies set its verdict.
    pub attempt: Attempt,
}

impl Reply {
    /// Reads the whole answer. A stream is drained into a buffer that
    /// replays it verbatim, so a strategy can judge an answer before it
    /// streams it to the client.
    pub async fn buffer(self) -> Result<(Reply, AssistantOutput), ModelError> {
        match self.body {
            ReplyBody::Whole(c) => {
                let out = AssistantOutput::from_completion(&c.body)
                    .map_err(|e| unreadable(&self.meta.who(), &e))?;
                let reply = Reply {
                    body: ReplyBody::Whole(c),
                    ..self
                };
                Ok((reply, out))
            }
            ReplyBody::Stream(mut s) => {
                let mut out = AssistantOutput::default();
                let mut chunks = Vec::new();
                let mut bytes = 0;
                while let Some(chunk) = s.next().await {
                    let chunk = chunk?;
                    bytes += chunk.data.len();
                    if bytes > MAX_RESPONSE {
                        return Err(ModelError::Invalid {
                            upstream: self.meta.who(),
                            detail: format!(
                                "the streamed answer is larger than {MAX_RESPONSE} bytes"
                            ),
                        });
                    }
                    out.absorb_chunk(&chunk.data)
                        .map_err(|e| unreadable(&self.meta.who(), &e))?;
                    chunks.push(chunk);
                }
                let reply = Reply {
                    body: ReplyBody::Stream(ChunkStream::replay(chunks)),
                    ..self
                };
                Ok((reply, out))
            }
        }
    }
}

/// An answer a strategy could not read as one.
fn unreadable(who: &Arc<str>, e: &NotAnAnswer) -> ModelError {
    ModelError::Invalid {
        upstream: who.clone(),
        detail: e.to_string(),
    }
}

#[cfg(test)]
mod tally_tests {
    use super::*;

    /// A call left generating inside a cancellable call made in another
    /// (a verifier inside a race candidate) counts for both: the outer
    /// one may not claim its server stopped.
    #[test]
    fn a_nested_cancellable_call_reports_to_the_outer_tally() {
        let call = Call::new(Arc::new(crate::context::test_ctx()));
        let (candidate, outer) = call.cancellable();
        let (verifier, inner) = candidate.cancellable();
        assert!(verifier.cancellable.is_some());
        inner.add();
        assert_eq!((inner.count(), outer.count()), (1, 1));
        // A sibling's tally is its own.
        let (_, other) = call.cancellable();
        assert_eq!(other.count(), 0);
    }
}
