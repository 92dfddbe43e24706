//! [`Attempt`]: the record of one upstream call. The concrete-model
//! decorator opens one per call and fills in what it sees (first token,
//! usage, failure); strategies set the verdict. When its last handle drops
//! the attempt is complete, and its [`AttemptRecord`] goes to the request's
//! [`AttemptSink`](crate::sink::AttemptSink)s exactly once (telemetry, and
//! a key's budget ticket), so a strategy's verdict and a stream's final
//! usage are both in it and no strategy does bookkeeping of its own.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use opentelemetry::trace::SpanId;
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::labels::{Role, Verdict, Warm};
use crate::retry::RetryReason;
use crate::sink::{AttemptRecord, AttemptSpan, ModelInfo};
use crate::wire::Usage;

/// Output summaries in the event log stop at this many characters.
pub const SUMMARY_CHARS: usize = 200;

// A whole answer's plain text is kept long enough to make its summary.
const _: () = assert!(SUMMARY_CHARS < crate::wire::TEXT_KEPT);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Pending,
    Done,
    Failed,
    Cancelled,
}

struct State {
    ended: Option<Instant>,
    ttft: Option<Duration>,
    warm: Warm,
    usage: Option<Usage>,
    outcome: Outcome,
    error: Option<(&'static str, String)>,
    verdict: Option<Verdict>,
    feedback: Option<String>,
    summary: String,
    /// Time spent waiting for the upstream's lane (not part of the
    /// attempt's duration), and whether that lane is local.
    queued: Duration,
    local: bool,
    /// Why this call is a retry of the one before it (`None`: a first
    /// try).
    retry: Option<RetryReason>,
    /// Estimated input tokens, once the request was sent: a call cut
    /// short without usage is charged an estimate from them.
    sent: Option<u64>,
    /// The first choice's `finish_reason`, when the answer gave one.
    finish_reason: Option<String>,
}

struct Cell {
    ctx: Arc<RequestCtx>,
    model: Arc<ModelInfo>,
    role: Role,
    index: u32,
    wait_slot: usize,
    started: Instant,
    /// Wall-clock start, for the event's `ts`.
    started_at: SystemTime,
    /// The attempt's span and its parent's, when the request is traced.
    span: Option<AttemptSpan>,
    /// Touched a few times per call, never across an await.
    state: Mutex<State>,
    /// Reported to the request's sinks when it ends (`false`: an answer
    /// from the response cache, which made no upstream call).
    recorded: bool,
}

/// A shared handle on one attempt; cloning is cheap.
#[derive(Clone)]
pub struct Attempt(Arc<Cell>);

impl Attempt {
    /// Opens an attempt; `parent` is the span of the strategy phase the
    /// call was made in (`None`: the request's own span).
    pub fn start(
        ctx: &Arc<RequestCtx>,
        model: &Arc<ModelInfo>,
        role: Role,
        parent: Option<SpanId>,
    ) -> Self {
        let started = Instant::now();
        let (index, wait_slot) = ctx.begin_attempt(started);
        Self::cell(ctx, model, role, parent, (index, wait_slot), started, true)
    }

    /// A handle that stands for no upstream call (an answer from the
    /// response cache): it is not counted, waits on nothing, and is
    /// never reported, so nothing is billed for it.
    pub fn unrecorded(ctx: &Arc<RequestCtx>, model: &Arc<ModelInfo>, role: Role) -> Self {
        let now = Instant::now();
        Self::cell(ctx, model, role, None, (0, usize::MAX), now, false)
    }

    fn cell(
        ctx: &Arc<RequestCtx>,
        model: &Arc<ModelInfo>,
        role: Role,
        parent: Option<SpanId>,
        (index, wait_slot): (u32, usize),
        started: Instant,
        recorded: bool,
    ) -> Self {
        let span = ctx.trace.as_ref().map(|t| AttemptSpan {
            id: t.new_id(),
            parent: parent.unwrap_or(t.id),
        });
        Attempt(Arc::new(Cell {
            ctx: ctx.clone(),
            model: model.clone(),
            role,
            index,
            wait_slot,
            started,
            started_at: ctx.clock.now(),
            span,
            state: Mutex::new(State {
                ended: None,
                ttft: None,
                warm: Warm::Unknown,
                usage: None,
                outcome: Outcome::Pending,
                error: None,
                verdict: None,
                feedback: None,
                summary: String::new(),
                queued: Duration::ZERO,
                local: false,
                retry: None,
                sent: None,
                finish_reason: None,
            }),
            recorded,
        }))
    }

    /// The W3C `traceparent` for the upstream call, when traced.
    pub fn traceparent(&self) -> Option<String> {
        let span = self.0.span.as_ref()?;
        self.0.ctx.trace.as_ref().map(|t| t.traceparent(span.id))
    }

    /// The answer's first choice ended for `reason` (`stop`, `length`, …).
    pub fn set_finish_reason(&self, reason: &str) {
        let mut s = self.0.state.lock();
        if s.finish_reason.is_none() {
            s.finish_reason = Some(reason.chars().take(64).collect());
        }
    }

    pub fn set_warm(&self, warm: Warm) {
        self.0.state.lock().warm = warm;
    }

    /// Time since the attempt started.
    pub fn elapsed(&self) -> Duration {
        self.0.started.elapsed()
    }

    /// The call waited `queued` for its lane before it was sent.
    pub fn set_queued(&self, queued: Duration, local: bool) {
        let mut s = self.0.state.lock();
        s.queued = queued;
        s.local = local;
    }

    /// The request (estimated at `input_tokens`) went to the upstream.
    pub fn sent(&self, input_tokens: u64) {
        self.0.state.lock().sent = Some(input_tokens);
    }

    /// The call ends without the upstream's usage (cancelled, or its
    /// stream broke off) after `output_bytes` of answer: it is charged an
    /// estimate, since the upstream did the work.
    pub fn charge_unreported(&self, output_bytes: usize) {
        let sent = {
            let s = self.0.state.lock();
            if s.usage.is_some() { None } else { s.sent }
        };
        if let Some(input) = sent {
            self.set_usage(Usage::estimate(input, output_bytes));
        }
    }

    /// Marks this call as a retry (after a failed try, for `reason`).
    pub fn set_retry(&self, reason: RetryReason) {
        self.0.state.lock().retry = Some(reason);
    }

    /// The first stream event arrived.
    pub fn first_token(&self) {
        let mut s = self.0.state.lock();
        if s.ttft.is_none() {
            s.ttft = Some(self.0.started.elapsed().saturating_sub(s.queued));
        }
    }

    /// Records the call's usage (the last report wins) and adds it to
    /// the request's totals.
    pub fn set_usage(&self, usage: Usage) {
        let old = self.0.state.lock().usage.replace(usage).unwrap_or_default();
        let m = &self.0.model;
        let delta = |new: u64, old: u64| {
            i64::try_from(new).unwrap_or(i64::MAX) - i64::try_from(old).unwrap_or(i64::MAX)
        };
        self.0.ctx.add_usage(
            delta(usage.prompt_tokens, old.prompt_tokens),
            delta(usage.completion_tokens, old.completion_tokens),
            m.cost(&usage) - m.cost(&old),
            usage.estimated,
        );
    }

    /// The output cap of this call's model (its `max_tokens`).
    pub fn model_max_tokens(&self) -> u64 {
        self.0.model.max_tokens
    }

    /// Whether the upstream (or an estimate) gave this call's usage.
    /// What the call cost so far, by its model's prices (`None` before
    /// its usage is known).
    pub fn cost_usd(&self) -> Option<f64> {
        let s = self.0.state.lock();
        s.usage.map(|u| self.0.model.cost(&u))
    }

    pub fn has_usage(&self) -> bool {
        self.0.state.lock().usage.is_some()
    }

    /// The call's usage so far, as reported or estimated.
    pub fn usage(&self) -> Option<Usage> {
        self.0.state.lock().usage
    }

    /// Whether the summary still wants text (only when events are logged).
    pub fn wants_summary(&self) -> bool {
        self.0.ctx.events_enabled() && self.0.state.lock().summary.len() < SUMMARY_CHARS
    }

    /// Adds `text` to the summary, which stops at [`SUMMARY_CHARS`] bytes
    /// (with the char that crosses it).
    pub fn add_summary(&self, text: &str) {
        let mut s = self.0.state.lock();
        let Some(room) = SUMMARY_CHARS
            .checked_sub(s.summary.len())
            .filter(|r| *r > 0)
        else {
            return;
        };
        let end = crate::text::ceil_char(text, room);
        s.summary.push_str(text.get(..end).unwrap_or_default());
    }

    /// The upstream answered completely.
    pub fn finish(&self) {
        self.end(Outcome::Done, None);
    }

    /// The call failed; the error is counted against its upstream.
    pub fn fail(&self, err: &ModelError) {
        self.end(Outcome::Failed, Some(err));
    }

    /// The caller stopped listening before the upstream finished.
    pub fn cancel(&self) {
        self.end(Outcome::Cancelled, None);
    }

    /// Sets the outcome once: whatever ends the attempt first is what is
    /// recorded, and later calls change nothing.
    fn end(&self, outcome: Outcome, err: Option<&ModelError>) {
        let now = Instant::now();
        let mut s = self.0.state.lock();
        if s.outcome == Outcome::Pending {
            s.outcome = outcome;
            s.ended = Some(now);
            s.error = err.map(|e| (e.kind(), e.to_string()));
            self.0.ctx.end_wait(self.0.wait_slot, now);
        }
    }

    /// A strategy's judgement of this attempt (accept, escalate, …). The
    /// first one stands: the strategy that made the call judges it before
    /// its answer goes up, and a strategy nesting it (a chain as a tier, a
    /// chain on a judge's panel) records its own decision elsewhere
    /// instead of overwriting that verdict.
    pub fn set_verdict(&self, verdict: Verdict, feedback: Option<String>) {
        let mut s = self.0.state.lock();
        if s.verdict.is_some() {
            return;
        }
        s.verdict = Some(verdict);
        if feedback.is_some() {
            s.feedback = feedback;
        }
    }
}

impl Drop for Cell {
    fn drop(&mut self) {
        if !self.recorded {
            return;
        }
        let s = self.state.get_mut();
        if s.outcome == Outcome::Pending {
            s.outcome = Outcome::Cancelled;
            let now = Instant::now();
            s.ended = Some(now);
            self.ctx.end_wait(self.wait_slot, now);
        }
        if let (Outcome::Cancelled, None, Some(input)) = (s.outcome, s.usage, s.sent) {
            // Cancelled while the upstream worked on it: charge its input.
            let u = Usage::estimate(input, 0);
            let i = i64::try_from(u.prompt_tokens).unwrap_or(i64::MAX);
            self.ctx.add_usage(i, 0, self.model.cost(&u), true);
            s.usage = Some(u);
        }
        let verdict = match (s.outcome, s.verdict) {
            (Outcome::Failed, _) => Verdict::Error,
            (_, Some(v)) => v,
            (Outcome::Done, None) => Verdict::Ok,
            _ => Verdict::Cancelled,
        };
        let duration =
            (s.ended.unwrap_or_else(Instant::now) - self.started).saturating_sub(s.queued);
        let generation = duration.saturating_sub(s.ttft.unwrap_or_default());
        let tokens_per_second = s
            .usage
            .filter(|u| s.local && u.completion_tokens > 0 && !generation.is_zero())
            .map(|u| u.completion_tokens as f64 / generation.as_secs_f64());
        let record = AttemptRecord {
            who: self.ctx.who(),
            trace: self.ctx.trace.clone(),
            model: self.model.clone(),
            role: self.role,
            index: self.index,
            started_at: self.started_at,
            duration,
            ttft: s.ttft,
            warm: s.warm,
            verdict,
            feedback: s.feedback.take(),
            error: s.error.take(),
            usage: s.usage,
            cost_usd: s.usage.map(|u| self.model.cost(&u)),
            summary: self
                .model
                .redactor
                .clean_owned(std::mem::take(&mut s.summary)),
            queued: s.local.then_some(s.queued),
            tokens_per_second,
            retry: s.retry.map(RetryReason::label),
            finish_reason: s.finish_reason.take(),
            waited: s.queued,
            span: self.span,
        };
        for sink in self.ctx.sinks() {
            sink.record(&record);
        }
    }
}
