//! The end of one client request: its metrics, its `request` event, its
//! span, and the access log line.

use std::borrow::Cow;
use std::time::{Duration, SystemTime};

use metrics::{counter, histogram};
use opentelemetry::KeyValue;
use opentelemetry::trace::SpanKind;
use serde_json::{Map, Value, json};
use tokio::time::Instant;

use super::trace::{SpanRecord, int};
use super::{EventBody, OVERHEAD, REQUEST_DURATION, REQUEST_TTFT, REQUESTS_TOTAL, ms};
use crate::context::{RequestCtx, Totals};

/// Records the end of one client request: count, duration, overhead and
/// time to first token; its `request` event and span. `status` is the
/// HTTP status, `stream_error` when a started stream ended in an error
/// event, or `499` when the client went away first.
pub fn record_request(ctx: &RequestCtx, status: &'static str) {
    let now = Instant::now();
    let wall = now - ctx.started;
    let overhead = wall.saturating_sub(ctx.upstream_wait(now));
    let ttft = ctx.ttft();
    let route = ctx.route.clone();
    counter!(REQUESTS_TOTAL, "route" => route.clone(), "strategy" => ctx.strategy, "status" => status)
        .increment(1);
    histogram!(REQUEST_DURATION, "route" => route.clone(), "strategy" => ctx.strategy)
        .record(wall.as_secs_f64());
    histogram!(OVERHEAD, "route" => route.clone(), "strategy" => ctx.strategy)
        .record(overhead.as_secs_f64());
    if let Some(t) = ttft {
        histogram!(REQUEST_TTFT, "route" => route, "strategy" => ctx.strategy)
            .record(t.as_secs_f64());
    }
    let totals = ctx.totals();
    if ctx.telemetry.events_enabled() {
        let f = fields(json!({
            "status": status,
            "strategy": ctx.strategy,
            "key": &*ctx.key,
            "attempts": ctx.attempts(),
            "duration_ms": ms(wall),
            "ttft_ms": ttft.map(ms),
            "overhead_ms": ms(overhead),
            "input_tokens": totals.input_tokens,
            "output_tokens": totals.output_tokens,
            "tokens": totals.input_tokens + totals.output_tokens,
            "tokens_estimated": totals.estimated,
            "cost_usd": totals.cost_usd,
        }));
        let now = SystemTime::now();
        let at = now.checked_sub(wall).unwrap_or(now);
        ctx.telemetry.emit(ctx, "request", EventBody::Fields(f), at);
    }
    span(ctx, status, wall, overhead, ttft, totals);
    if ctx.access_log {
        tracing::info!(
            target: "conclave::access",
            request_id = %ctx.id,
            key = %ctx.key,
            route = %ctx.route,
            strategy = ctx.strategy,
            status,
            attempts = ctx.attempts(),
            duration_ms = (wall.as_secs_f64() * 1e4).round() / 10.0,
            ttft_ms = ttft.map(ms),
            input_tokens = totals.input_tokens,
            output_tokens = totals.output_tokens,
            tokens_estimated = totals.estimated,
            "request"
        );
    }
}

/// The request's own span, when it is traced (the root of its trace, or a child of the
/// client's span), with the GenAI conventions' names where they fit.
fn span(
    ctx: &RequestCtx,
    status: &'static str,
    wall: Duration,
    overhead: Duration,
    ttft: Option<Duration>,
    t: Totals,
) {
    let Some(trace) = &ctx.trace else { return };
    let mut a = vec![
        KeyValue::new("gen_ai.operation.name", "chat"),
        KeyValue::new("gen_ai.request.model", ctx.route.to_string()),
        KeyValue::new("gen_ai.usage.input_tokens", int(t.input_tokens)),
        KeyValue::new("gen_ai.usage.output_tokens", int(t.output_tokens)),
        KeyValue::new("conclave.route", ctx.route.to_string()),
        KeyValue::new("conclave.strategy", ctx.strategy),
        KeyValue::new("conclave.request_id", ctx.id.clone()),
        KeyValue::new("conclave.key", ctx.key.to_string()),
        KeyValue::new("conclave.status", status),
        KeyValue::new("conclave.attempts", i64::from(ctx.attempts())),
        KeyValue::new("conclave.overhead_ms", ms(overhead)),
        KeyValue::new("conclave.cost_usd", t.cost_usd),
    ];
    if let Ok(code) = status.parse::<i64>() {
        a.push(KeyValue::new("http.response.status_code", code));
    }
    if let Some(t) = ttft {
        a.push(KeyValue::new("conclave.ttft_ms", ms(t)));
    }
    let failed = status == "stream_error" || status.starts_with('5');
    let start = trace.started();
    trace.export(SpanRecord {
        id: trace.id,
        parent: None,
        name: Cow::Owned(format!("chat {}", ctx.route)),
        kind: SpanKind::Server,
        start,
        end: start + wall,
        attributes: a,
        error: failed.then(|| format!("status {status}")),
    });
}

/// The fields of an event built with `json!({…})`.
fn fields(v: Value) -> Map<String, Value> {
    match v {
        Value::Object(m) => m,
        _ => Map::new(),
    }
}
