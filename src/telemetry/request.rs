//! The end of one client request: its metrics, its `request` event (sent
//! to the request's own event sink, which closes its record in the ring of
//! recent requests when that is on), its span, and the access log line.

use std::borrow::Cow;

use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use serde::Serialize;

use super::{Event, EventBody, RouteHandles, Telemetry, ms};
use crate::sink::RequestEnd;
use crate::span::{SpanRecord, int};
use std::sync::Arc;

impl Telemetry {
    /// The handles a request on `route` records its metrics with.
    pub fn route_handles(&self, route: &Arc<str>, strategy: &'static str) -> Arc<RouteHandles> {
        self.handles.route(route, strategy)
    }

    /// Records the end of one client request: count, duration, overhead
    /// and time to first token (on its route's handles `h`), today's
    /// tally; its `request` line (to its own event sink), span and access
    /// line.
    pub fn record_request(&self, end: &RequestEnd, h: &RouteHandles) {
        let (who, status) = (&end.who, end.status);
        h.requests(status).increment(1);
        h.duration.record(end.wall.as_secs_f64());
        h.overhead.record(end.overhead.as_secs_f64());
        if let Some(t) = end.ttft {
            h.ttft().record(t.as_secs_f64());
        }
        self.tally_request(h, status, &end.totals);
        end.events.request(end);
        span(end);
        let totals = end.totals;
        if end.access_log {
            tracing::info!(
                target: "conclave::access",
                request_id = %who.request_id,
                key = %who.key,
                route = %who.route,
                strategy = who.strategy,
                status,
                attempts = end.attempts,
                duration_ms = (end.wall.as_secs_f64() * 1e4).round() / 10.0,
                ttft_ms = end.ttft.map(ms),
                input_tokens = totals.input_tokens,
                output_tokens = totals.output_tokens,
                tokens_estimated = totals.estimated,
                "request"
            );
        }
    }
}

/// The request's own span, when it is traced (the root of its trace, or a child of the
/// client's span), with the GenAI conventions' names where they fit.
fn span(end: &RequestEnd) {
    let Some(trace) = &end.trace else { return };
    let (who, status, t) = (&end.who, end.status, end.totals);
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.request.model", who.route.to_string()),
        KeyValue::new("gen_ai.usage.input_tokens", int(t.input_tokens)),
        KeyValue::new("gen_ai.usage.output_tokens", int(t.output_tokens)),
        KeyValue::new("conclave.route", who.route.to_string()),
        KeyValue::new("conclave.strategy", who.strategy),
        KeyValue::new("conclave.request_id", who.request_id.clone()),
        KeyValue::new("conclave.key", who.key.to_string()),
        KeyValue::new("conclave.status", status),
        KeyValue::new("conclave.attempts", i64::from(end.attempts)),
        KeyValue::new("conclave.overhead_ms", ms(end.overhead)),
        KeyValue::new("conclave.cost_usd", t.cost_usd),
    ];
    if let Ok(code) = status.parse::<i64>() {
        a.push(KeyValue::new("http.response.status_code", code));
    }
    if let Some(t) = end.ttft {
        a.push(KeyValue::new("conclave.ttft_ms", ms(t)));
    }
    let failed = status == "stream_error" || status.starts_with('5');
    let start = trace.started();
    trace.export(SpanRecord {
        id: trace.id,
        parent: None,
        name: Cow::Owned(format!("chat {}", who.route)),
        kind: SpanKind::Server,
        start,
        end: start + end.wall,
        attributes: a,
        error: failed.then(|| format!("status {status}")),
    });
}

/// The `request` line's own fields, in the log's order.
#[derive(Serialize, Clone)]
pub struct RequestLine {
    status: &'static str,
    strategy: &'static str,
    key: Arc<str>,
    attempts: u32,
    pub(super) duration_ms: f64,
    ttft_ms: Option<f64>,
    overhead_ms: f64,
    input_tokens: u64,
    output_tokens: u64,
    tokens: u64,
    tokens_estimated: bool,
    pub(super) cost_usd: f64,
    /// Answered from the response cache (absent otherwise).
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    cached: bool,
}

/// The `request` line that closes `end`'s request.
pub(super) fn event(end: &RequestEnd) -> Event {
    let who = &end.who;
    Event::of(
        who.request_id.clone(),
        who.route.clone(),
        "request",
        EventBody::Request(line(end)),
        end.started_at,
    )
}

/// The `request` line's own fields.
pub(super) fn line(end: &RequestEnd) -> RequestLine {
    let (who, t) = (&end.who, end.totals);
    RequestLine {
        status: end.status,
        strategy: who.strategy,
        key: who.key.clone(),
        attempts: end.attempts,
        duration_ms: ms(end.wall),
        ttft_ms: end.ttft.map(ms),
        overhead_ms: ms(end.overhead),
        input_tokens: t.input_tokens,
        output_tokens: t.output_tokens,
        tokens: t.input_tokens + t.output_tokens,
        tokens_estimated: t.estimated,
        cost_usd: t.cost_usd,
        cached: end.cached,
    }
}
