//! [`Attempt`]: the record of one upstream call. The concrete-model
//! decorator opens one per call and fills in what it sees (first token,
//! usage, failure); strategies set the verdict. The attempt is written to
//! metrics and the event log exactly once, when its last handle drops, so
//! a strategy's verdict and a stream's final usage are both in it.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use metrics::{counter, gauge, histogram};
use parking_lot::Mutex;
use serde::Serialize;
use tokio::time::Instant;

use super::{
    ATTEMPT_DURATION, ATTEMPT_TTFT, ATTEMPTS_TOTAL, LLAMA_SWAP_WARM, TOKENS_TOTAL,
    UPSTREAM_ERRORS_TOTAL,
};
use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::labels::{Role, Verdict, Warm};
use crate::redact::Redactor;
use crate::wire::Usage;

/// Output summaries in the event log stop at this many characters.
pub const SUMMARY_CHARS: usize = 200;

/// What the config says about a concrete model.
#[derive(Debug)]
pub struct ModelInfo {
    /// The config name (`[models.NAME]`).
    pub name: Arc<str>,
    pub upstream: Arc<str>,
    /// The name sent upstream.
    pub upstream_model: String,
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
    /// The config's secrets, kept out of everything this model's upstream
    /// says (errors are redacted where they are made, summaries here).
    pub redactor: Arc<Redactor>,
}

impl ModelInfo {
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.prompt_tokens as f64 * self.input_per_mtok
            + usage.completion_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

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
    /// Touched a few times per call, never across an await.
    state: Mutex<State>,
}

/// A shared handle on one attempt; cloning is cheap.
#[derive(Clone)]
pub struct Attempt(Arc<Cell>);

impl Attempt {
    pub fn start(ctx: &Arc<RequestCtx>, model: &Arc<ModelInfo>, role: Role) -> Self {
        let started = Instant::now();
        let (index, wait_slot) = ctx.begin_attempt(started);
        Attempt(Arc::new(Cell {
            ctx: ctx.clone(),
            model: model.clone(),
            role,
            index,
            wait_slot,
            started,
            started_at: SystemTime::now(),
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
            }),
        }))
    }

    pub fn set_warm(&self, warm: Warm) {
        self.0.state.lock().warm = warm;
        if warm != Warm::Unknown {
            gauge!(LLAMA_SWAP_WARM, "upstream" => self.0.model.upstream.clone(), "model" => self.0.model.name.clone())
                .set(if warm == Warm::Yes { 1.0 } else { 0.0 });
        }
    }

    /// The first stream event arrived.
    pub fn first_token(&self) {
        let mut s = self.0.state.lock();
        if s.ttft.is_none() {
            s.ttft = Some(self.0.started.elapsed());
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

    /// Whether the upstream (or an estimate) gave this call's usage.
    pub fn has_usage(&self) -> bool {
        self.0.state.lock().usage.is_some()
    }

    /// Whether the summary still wants text (only when events are logged).
    pub fn wants_summary(&self) -> bool {
        self.0.ctx.telemetry.events_enabled() && self.0.state.lock().summary.len() < SUMMARY_CHARS
    }

    pub fn add_summary(&self, text: &str) {
        let mut s = self.0.state.lock();
        for c in text.chars() {
            if s.summary.len() >= SUMMARY_CHARS {
                break;
            }
            s.summary.push(c);
        }
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

    /// A strategy's judgement of this attempt (accept, escalate, …).
    pub fn set_verdict(&self, verdict: Verdict, feedback: Option<String>) {
        let mut s = self.0.state.lock();
        s.verdict = Some(verdict);
        if feedback.is_some() {
            s.feedback = feedback;
        }
    }
}

/// The `attempt` event of the JSONL log.
#[derive(Serialize)]
pub struct AttemptEvent {
    attempt: u32,
    model: Arc<str>,
    upstream: Arc<str>,
    role: &'static str,
    duration_ms: f64,
    ttft_ms: Option<f64>,
    warm_start: Option<bool>,
    verdict: &'static str,
    feedback: Option<String>,
    error: Option<String>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    usage_estimated: bool,
    cost_usd: Option<f64>,
    output_summary: String,
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl Drop for Cell {
    fn drop(&mut self) {
        let s = self.state.get_mut();
        if s.outcome == Outcome::Pending {
            s.outcome = Outcome::Cancelled;
            let now = Instant::now();
            s.ended = Some(now);
            self.ctx.end_wait(self.wait_slot, now);
        }
        let verdict = match (s.outcome, s.verdict) {
            (Outcome::Failed, _) => Verdict::Error,
            (_, Some(v)) => v,
            (Outcome::Done, None) => Verdict::Ok,
            _ => Verdict::Cancelled,
        };
        let duration = s.ended.unwrap_or_else(Instant::now) - self.started;
        let ctx = &self.ctx;
        let m = &self.model;
        counter!(ATTEMPTS_TOTAL,
            "route" => ctx.route.clone(), "strategy" => ctx.strategy, "model" => m.name.clone(),
            "upstream" => m.upstream.clone(), "role" => self.role.as_str(),
            "verdict" => verdict.as_str(), "warm" => s.warm.as_str())
        .increment(1);
        histogram!(ATTEMPT_DURATION,
            "route" => ctx.route.clone(), "strategy" => ctx.strategy,
            "model" => m.name.clone(), "role" => self.role.as_str())
        .record(duration.as_secs_f64());
        if let Some(ttft) = s.ttft {
            histogram!(ATTEMPT_TTFT, "route" => ctx.route.clone(), "model" => m.name.clone())
                .record(ttft.as_secs_f64());
        }
        let mut cost = None;
        if let Some(u) = s.usage {
            counter!(TOKENS_TOTAL, "model" => m.name.clone(), "kind" => "input")
                .increment(u.prompt_tokens);
            counter!(TOKENS_TOTAL, "model" => m.name.clone(), "kind" => "output")
                .increment(u.completion_tokens);
            let usd = m.cost(&u);
            ctx.telemetry.add_cost(&m.name, &ctx.key, usd);
            cost = Some(usd);
        }
        if let Some((kind, _)) = &s.error {
            counter!(UPSTREAM_ERRORS_TOTAL, "upstream" => m.upstream.clone(), "kind" => *kind)
                .increment(1);
        }
        if ctx.telemetry.events_enabled() {
            let ev = AttemptEvent {
                attempt: self.index,
                model: m.name.clone(),
                upstream: m.upstream.clone(),
                role: self.role.as_str(),
                duration_ms: ms(duration),
                ttft_ms: s.ttft.map(ms),
                warm_start: s.warm.as_bool(),
                verdict: verdict.as_str(),
                feedback: s.feedback.take(),
                error: s.error.take().map(|e| e.1),
                input_tokens: s.usage.map(|u| u.prompt_tokens),
                output_tokens: s.usage.map(|u| u.completion_tokens),
                usage_estimated: s.usage.is_some_and(|u| u.estimated),
                cost_usd: cost,
                output_summary: m.redactor.clean(&s.summary),
            };
            ctx.telemetry.emit(
                ctx,
                "attempt",
                super::EventBody::Attempt(Box::new(ev)),
                self.started_at,
            );
        }
    }
}
