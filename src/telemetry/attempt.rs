//! Telemetry as an [`AttemptSink`]: every finished attempt becomes its
//! metrics and its `attempt` line in the event log.

use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, histogram};
use serde::Serialize;

use super::{
    ATTEMPT_DURATION, ATTEMPT_TTFT, ATTEMPTS_TOTAL, EventBody, GENERATION_TPS, TOKENS_TOTAL,
    Telemetry, UPSTREAM_ERRORS_TOTAL,
};
use crate::attempt::{AttemptRecord, AttemptSink};

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
    #[serde(skip_serializing_if = "Option::is_none")]
    queued_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_per_second: Option<f64>,
    /// Times the call was sent again after the upstream's 429.
    #[serde(skip_serializing_if = "is_zero")]
    retries: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn ms(d: Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
}

impl AttemptSink for Telemetry {
    fn record(&self, r: &AttemptRecord) {
        let ctx = &r.ctx;
        let m = &r.model;
        let role = r.role.as_str();
        if let Some(tps) = r.tokens_per_second {
            histogram!(GENERATION_TPS, "upstream" => m.upstream.clone(), "model" => m.name.clone())
                .record(tps);
        }
        counter!(ATTEMPTS_TOTAL,
            "route" => ctx.route.clone(), "strategy" => ctx.strategy, "model" => m.name.clone(),
            "upstream" => m.upstream.clone(), "role" => role,
            "verdict" => r.verdict.as_str(), "warm" => r.warm.as_str())
        .increment(1);
        histogram!(ATTEMPT_DURATION,
            "route" => ctx.route.clone(), "strategy" => ctx.strategy,
            "model" => m.name.clone(), "role" => role)
        .record(r.duration.as_secs_f64());
        if let Some(ttft) = r.ttft {
            histogram!(ATTEMPT_TTFT, "route" => ctx.route.clone(), "model" => m.name.clone())
                .record(ttft.as_secs_f64());
        }
        if let (Some(u), Some(usd)) = (r.usage, r.cost_usd) {
            counter!(TOKENS_TOTAL, "model" => m.name.clone(), "kind" => "input")
                .increment(u.prompt_tokens);
            counter!(TOKENS_TOTAL, "model" => m.name.clone(), "kind" => "output")
                .increment(u.completion_tokens);
            self.add_cost(&m.name, &ctx.key, usd);
        }
        if let Some((kind, _)) = &r.error {
            counter!(UPSTREAM_ERRORS_TOTAL, "upstream" => m.upstream.clone(), "kind" => *kind)
                .increment(1);
        }
        if self.events_enabled() {
            let ev = AttemptEvent {
                attempt: r.index,
                model: m.name.clone(),
                upstream: m.upstream.clone(),
                role,
                duration_ms: ms(r.duration),
                ttft_ms: r.ttft.map(ms),
                warm_start: r.warm.as_bool(),
                verdict: r.verdict.as_str(),
                feedback: r.feedback.clone(),
                error: r.error.as_ref().map(|e| e.1.clone()),
                input_tokens: r.usage.map(|u| u.prompt_tokens),
                output_tokens: r.usage.map(|u| u.completion_tokens),
                usage_estimated: r.usage.is_some_and(|u| u.estimated),
                cost_usd: r.cost_usd,
                output_summary: r.summary.clone(),
                queued_ms: r.queued.map(ms),
                tokens_per_second: r.tokens_per_second.map(|t| (t * 10.0).round() / 10.0),
                retries: r.retries,
            };
            self.emit(
                ctx,
                "attempt",
                EventBody::Attempt(Box::new(ev)),
                r.started_at,
            );
        }
    }
}
