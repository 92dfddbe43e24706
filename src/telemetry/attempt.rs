//! Telemetry as an [`AttemptSink`]: every finished attempt becomes its
//! metrics, its `attempt` line in the event log, and (when the request is
//! traced) its span, with a child span for the time it waited for its lane.

use std::borrow::Cow;
use std::sync::Arc;
use std::time::Duration;

use opentelemetry::trace::SpanKind;
use opentelemetry::{Array, KeyValue, StringValue, Value};
use serde::Serialize;

use super::handles::AttemptRef;
use super::{Event, EventBody, Telemetry, ms};
use crate::sink::{AttemptRecord, AttemptSink};
use crate::span::{SpanRecord, int};

/// The `attempt` event of the JSONL log.
#[derive(Serialize, Clone)]
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
    /// Of `input_tokens`, read from the provider's prompt cache.
    #[serde(skip_serializing_if = "Option::is_none")]
    cached_tokens: Option<u64>,
    /// Of `output_tokens`, spent reasoning.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_tokens: Option<u64>,
    usage_estimated: bool,
    cost_usd: Option<f64>,
    output_summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    queued_ms: Option<f64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    tokens_per_second: Option<f64>,
    /// On a retry: why the call before it failed.
    #[serde(skip_serializing_if = "Option::is_none")]
    retry: Option<&'static str>,
}

impl AttemptEvent {
    /// Its texts of any length (what the model, its verifier or its
    /// upstream wrote, cut or not): feedback, error, output summary.
    pub fn texts_mut(&mut self) -> [Option<&mut String>; 3] {
        [
            self.feedback.as_mut(),
            self.error.as_mut(),
            Some(&mut self.output_summary),
        ]
    }

    /// Its texts of any length, and its names (model, upstream).
    pub fn texts(&self) -> [&str; 5] {
        [
            self.feedback.as_deref().unwrap_or(""),
            self.error.as_deref().unwrap_or(""),
            &self.output_summary,
            &self.model,
            &self.upstream,
        ]
    }

    /// Its price, when it has one.
    pub fn cost_usd(&self) -> Option<f64> {
        self.cost_usd
    }

    /// An attempt with every field there and each number at its longest,
    /// its texts `text` (tests of the ring's bounds).
    #[cfg(test)]
    pub fn longest(n: u32, text: &str) -> Self {
        let long = -1.234_567_890_123_456_7e-300;
        AttemptEvent {
            attempt: n,
            model: text.into(),
            upstream: text.into(),
            role: "synthesizer",
            duration_ms: long,
            ttft_ms: Some(long),
            warm_start: Some(false),
            verdict: "not_an_answer",
            feedback: Some(text.into()),
            error: Some(text.into()),
            input_tokens: Some(u64::MAX),
            output_tokens: Some(u64::MAX),
            cached_tokens: Some(u64::MAX),
            reasoning_tokens: Some(u64::MAX),
            usage_estimated: false,
            cost_usd: Some(long),
            output_summary: text.into(),
            queued_ms: Some(long),
            tokens_per_second: Some(long),
            retry: Some("midstream"),
        }
    }
}

/// The shortest lane wait that gets a `conclave.queue` span.
const QUEUED: Duration = Duration::from_millis(1);

impl AttemptSink for Telemetry {
    fn record(&self, r: &AttemptRecord) {
        self.account(r);
        if self.events_enabled() {
            self.emit_event(event(r));
        }
    }
}

/// The `attempt` line of `r` for the event log (and the ring of recent
/// requests, which keeps the same line).
pub(super) fn event(r: &AttemptRecord) -> Event {
    let who = &r.who;
    Event::of(
        who.request_id.clone(),
        who.route.clone(),
        "attempt",
        EventBody::Attempt(line(r)),
        r.started_at,
    )
}

/// The `attempt` line's own fields (after `ts`, `request_id`, `route`
/// and `event`).
pub(super) fn line(r: &AttemptRecord) -> Box<AttemptEvent> {
    let m = &r.model;
    Box::new(AttemptEvent {
        attempt: r.index,
        model: m.name.clone(),
        upstream: m.upstream.clone(),
        role: r.role.as_str(),
        duration_ms: ms(r.duration),
        ttft_ms: r.ttft.map(ms),
        warm_start: r.warm.as_bool(),
        verdict: r.verdict.as_str(),
        feedback: r.feedback.clone(),
        error: r.error.as_ref().map(|e| e.1.clone()),
        input_tokens: r.usage.map(|u| u.prompt_tokens),
        output_tokens: r.usage.map(|u| u.completion_tokens),
        cached_tokens: r.usage.map(|u| u.cached_tokens).filter(|n| *n > 0),
        reasoning_tokens: r.usage.map(|u| u.reasoning_tokens).filter(|n| *n > 0),
        usage_estimated: r.usage.is_some_and(|u| u.estimated),
        cost_usd: r.cost_usd,
        output_summary: r.summary.clone(),
        queued_ms: r.queued.map(ms),
        tokens_per_second: r.tokens_per_second.map(|t| (t * 10.0).round() / 10.0),
        retry: r.retry,
    })
}

impl Telemetry {
    /// Everything an attempt counts for but its line: its metrics, its
    /// cost (`conclave_cost_usd_total`) and its span.
    pub(super) fn account(&self, r: &AttemptRecord) {
        self.attempt_metrics(r);
        if let (Some(_), Some(usd)) = (r.usage, r.cost_usd) {
            self.add_cost(&r.model.name, &r.who.key, usd);
        }
        span(r);
    }

    /// The attempt's metrics, on its handles.
    fn attempt_metrics(&self, r: &AttemptRecord) {
        let (who, m) = (&r.who, &r.model);
        let h = self.handles.attempt(AttemptRef {
            route: &who.route,
            strategy: who.strategy,
            model: &m.name,
            upstream: &m.upstream,
            role: r.role.as_str(),
        });
        if let Some(tps) = r.tokens_per_second {
            h.tps().record(tps);
        }
        h.attempts(r.verdict.as_str(), r.warm.as_str()).increment(1);
        h.duration.record(r.duration.as_secs_f64());
        if let Some(ttft) = r.ttft {
            h.ttft().record(ttft.as_secs_f64());
        }
        let priced = r.usage.zip(r.cost_usd);
        if let Some((u, _)) = priced {
            let (input, output) = h.tokens();
            input.increment(u.prompt_tokens);
            output.increment(u.completion_tokens);
        }
        h.today.add(self.today(), |t| {
            t.attempts += 1;
            if let Some((u, usd)) = priced {
                t.input_tokens += u.prompt_tokens;
                t.output_tokens += u.completion_tokens;
                // As `conclave_cost_usd_total` adds it.
                if usd > 0.0 {
                    t.cost_usd += usd;
                }
            }
        });
        if let Some((kind, _)) = &r.error {
            h.errors(kind).increment(1);
        }
    }
}

/// When the request is traced: the attempt's span (a client call, named by the GenAI conventions'
/// `{operation} {model}`), and its lane wait as a child span.
fn span(r: &AttemptRecord) {
    let (Some(trace), Some(ids)) = (&r.trace, r.span) else {
        return;
    };
    let m = &r.model;
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.request.model", m.upstream_model.clone()),
        KeyValue::new("conclave.model", m.name.to_string()),
        KeyValue::new("conclave.upstream", m.upstream.to_string()),
        KeyValue::new("conclave.route", r.who.route.to_string()),
        KeyValue::new("conclave.strategy", r.who.strategy),
        KeyValue::new("conclave.role", r.role.as_str()),
        KeyValue::new("conclave.verdict", r.verdict.as_str()),
        KeyValue::new("conclave.warm", r.warm.as_str()),
        KeyValue::new("conclave.attempt", i64::from(r.index)),
    ];
    if let Some(u) = r.usage {
        a.push(KeyValue::new(
            "gen_ai.usage.input_tokens",
            int(u.prompt_tokens),
        ));
        a.push(KeyValue::new(
            "gen_ai.usage.output_tokens",
            int(u.completion_tokens),
        ));
        a.push(KeyValue::new("conclave.usage_estimated", u.estimated));
    }
    if let Some(reason) = &r.finish_reason {
        let reasons = Array::String(vec![StringValue::from(reason.clone())]);
        a.push(KeyValue::new(
            "gen_ai.response.finish_reasons",
            Value::Array(reasons),
        ));
    }
    if let Some(ttft) = r.ttft {
        a.push(KeyValue::new("conclave.ttft_ms", ms(ttft)));
    }
    if let Some(usd) = r.cost_usd {
        a.push(KeyValue::new("conclave.cost_usd", usd));
    }
    if let Some(tps) = r.tokens_per_second {
        a.push(KeyValue::new("conclave.tokens_per_second", tps));
    }
    if let Some(reason) = r.retry {
        a.push(KeyValue::new("conclave.retry", reason));
    }
    if let Some((kind, _)) = &r.error {
        a.push(KeyValue::new("error.type", *kind));
    }
    let start = r.started_at;
    let sent = start + r.waited;
    // Every call passes its lane's gate; a wait shorter than this is the
    // gate's own bookkeeping, not a queue.
    if r.waited >= QUEUED {
        trace.export(SpanRecord {
            id: trace.new_id(),
            parent: Some(ids.id),
            name: Cow::Borrowed("conclave.queue"),
            kind: SpanKind::Internal,
            start,
            end: sent,
            attributes: vec![
                KeyValue::new("conclave.upstream", m.upstream.to_string()),
                KeyValue::new("conclave.model", m.name.to_string()),
            ],
            error: None,
        });
    }
    trace.export(SpanRecord {
        id: ids.id,
        parent: Some(ids.parent),
        name: Cow::Owned(format!("chat {}", m.upstream_model)),
        kind: SpanKind::Client,
        start,
        end: sent + r.duration,
        attributes: a,
        error: r.error.as_ref().map(|(_, text)| text.clone()),
    });
}
