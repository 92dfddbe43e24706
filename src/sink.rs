//! What a request reports, and the traits of what takes it: the record of
//! a finished attempt ([`AttemptRecord`], with its model's [`ModelInfo`])
//! and of a finished request ([`RequestEnd`]); [`AttemptSink`] and
//! [`EventSink`], which telemetry implements (budgets take attempts too);
//! and [`Metrics`], the recorder of one gateway instance ([`Strays`] is
//! the global one, which catches a metric recorded outside any instance);
//! and how a sum of dollars is said ([`shown_usd`]).
//!
//! A leaf below the request context: the context, attempts and strategies
//! report through these, and telemetry implements them without knowing
//! the context, so imports flow one way.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use metrics::{Key, KeyName, SharedString, Unit};
use opentelemetry::trace::SpanId;
use serde_json::{Map, Value};

use crate::clock::Clock;
use crate::labels::{Role, Verdict, Warm};
use crate::redact::Redactor;
use crate::span::TraceCtx;
use crate::wire::Usage;

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
    /// Input tokens read from the prompt cache.
    pub cached_input_per_mtok: f64,
    /// Input tokens written to the prompt cache.
    pub cache_write_per_mtok: f64,
    /// Input tokens one image is estimated at.
    pub image_tokens: u64,
    /// The context window the config gives (it wins over the server's).
    pub context_window: Option<u64>,
    /// The model's `max_tokens` (what a request that sets no cap is
    /// taken to be answered with at most).
    pub max_tokens: u64,
    /// The config's secrets, kept out of everything this model's upstream
    /// says (errors are redacted where they are made, summaries here).
    pub redactor: Arc<Redactor>,
}

impl ModelInfo {
    /// What `usage` costs: cached and cache-write input tokens at their
    /// own prices, the rest of the input at the input price.
    pub fn cost(&self, usage: &Usage) -> f64 {
        let cached = usage.cached_tokens.min(usage.prompt_tokens);
        let written = usage.cache_write_tokens.min(usage.prompt_tokens - cached);
        let fresh = usage.prompt_tokens - cached - written;
        (fresh as f64 * self.input_per_mtok
            + cached as f64 * self.cached_input_per_mtok
            + written as f64 * self.cache_write_per_mtok
            + usage.completion_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// Which request a record belongs to: the fields telemetry labels it with.
#[derive(Debug, Clone)]
pub struct Who {
    pub request_id: Arc<str>,
    /// The model name the client asked for (a name from the config).
    pub route: Arc<str>,
    /// The route's strategy (a bounded label).
    pub strategy: &'static str,
    /// The API key's name.
    pub key: Arc<str>,
}

/// A request's running usage over all its attempts.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Totals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: f64,
    /// At least one attempt's usage was estimated.
    pub estimated: bool,
}

/// An attempt's span id, and the id of the span it belongs under.
#[derive(Debug, Clone, Copy)]
pub struct AttemptSpan {
    pub id: SpanId,
    pub parent: SpanId,
}

/// A finished attempt, as the sinks see it.
pub struct AttemptRecord {
    pub who: Who,
    /// The request's trace, when it is traced.
    pub trace: Option<TraceCtx>,
    pub model: Arc<ModelInfo>,
    pub role: Role,
    /// 1-based number of the call within its request.
    pub index: u32,
    /// Wall-clock start, for the event's `ts`.
    pub started_at: SystemTime,
    pub duration: Duration,
    pub ttft: Option<Duration>,
    pub warm: Warm,
    pub verdict: Verdict,
    pub feedback: Option<String>,
    /// The error's kind (a bounded label) and text (secrets removed).
    pub error: Option<(&'static str, String)>,
    pub usage: Option<Usage>,
    /// From the model's price, when there is usage.
    pub cost_usd: Option<f64>,
    /// The first characters of the answer, secrets removed.
    pub summary: String,
    /// On a local lane: the time the call waited for it.
    pub queued: Option<Duration>,
    /// On a local lane: output tokens per second of generation (from the
    /// first token to the last; the whole call for a whole answer).
    pub tokens_per_second: Option<f64>,
    /// On a retry: why (`connect`, `timeout`, `5xx`, `429`,
    /// `midstream`); `None` on a first try.
    pub retry: Option<&'static str>,
    /// The first choice's `finish_reason`, when the answer gave one.
    pub finish_reason: Option<String>,
    /// The time the call waited for its lane (any lane), before `duration`.
    pub waited: Duration,
    /// Its span, when the request is traced.
    pub span: Option<AttemptSpan>,
}

/// A finished client request, as telemetry records it.
pub struct RequestEnd {
    pub who: Who,
    /// The HTTP status, `stream_error`, or `499` (the client left first).
    pub status: &'static str,
    /// Wall-clock start, for the event's `ts`.
    pub started_at: SystemTime,
    pub wall: Duration,
    /// `wall` minus the union of the upstream waits.
    pub overhead: Duration,
    pub ttft: Option<Duration>,
    pub totals: Totals,
    pub attempts: u32,
    /// Log one access line (`server.access_log`).
    pub access_log: bool,
    pub trace: Option<TraceCtx>,
    /// Where its `request` line goes: the request's own event sink.
    pub events: Arc<dyn EventSink>,
    /// Answered from the response cache.
    pub cached: bool,
}

/// Something that takes every finished attempt of a request.
pub trait AttemptSink: Send + Sync {
    fn record(&self, attempt: &AttemptRecord);
}

/// Where a request's events go (the JSONL event log).
pub trait EventSink: Send + Sync {
    /// Whether events are kept at all (else callers skip building them).
    fn events_enabled(&self) -> bool;
    /// Queues one event of request `request_id` on `route`, stamped `at`.
    fn emit(
        &self,
        request_id: &str,
        route: &Arc<str>,
        event: &'static str,
        fields: Map<String, Value>,
        at: SystemTime,
    );

    /// The request `end` is over: queues its `request` line, when events
    /// are kept (a sink that gathers a request's lines completes its
    /// record here). A sink that keeps no events does nothing.
    fn request(&self, end: &RequestEnd) {
        let _ = end;
    }
}

/// What a request reports to: its events, its attempts, its metrics.
#[derive(Clone)]
pub struct Reporters {
    pub events: Arc<dyn EventSink>,
    pub attempts: Arc<dyn AttemptSink>,
    pub metrics: Metrics,
    /// The instance's clock, which stamps what the request reports.
    pub clock: Clock,
}

impl Reporters {
    /// Reporters that keep nothing (tests of strategies and attempts).
    pub fn none() -> Self {
        Reporters {
            events: Arc::new(Nothing),
            attempts: Arc::new(Nothing),
            metrics: Metrics::noop(),
            clock: Clock::system(),
        }
    }
}

/// A sink that keeps nothing.
struct Nothing;

impl EventSink for Nothing {
    fn events_enabled(&self) -> bool {
        false
    }

    fn emit(&self, _: &str, _: &Arc<str>, _: &'static str, _: Map<String, Value>, _: SystemTime) {}
}

impl AttemptSink for Nothing {
    fn record(&self, _: &AttemptRecord) {}
}

/// A route's retry budget as a request sees it (`crate::retry`'s
/// `RetryBudget`): each admitted request counts once, each retry asks.
pub trait RetryGate: Send + Sync {
    /// Counts one request of the route.
    fn request(&self);
    /// Takes one retry: `false` (and nothing taken) when it is spent.
    fn try_retry(&self) -> bool;
}

/// One gateway instance's metrics recorder. `metrics`' macros record to
/// whatever recorder is current; [`Metrics::scope`] makes this one
/// current for a closure, so two gateways in one process (tests) never
/// share a series.
#[derive(Clone)]
pub struct Metrics(Arc<dyn metrics::Recorder + Send + Sync>);

impl Metrics {
    pub fn new(recorder: Arc<dyn metrics::Recorder + Send + Sync>) -> Self {
        Metrics(recorder)
    }

    /// A recorder that keeps nothing (unit tests).
    pub fn noop() -> Self {
        Metrics(Arc::new(metrics::NoopRecorder))
    }

    /// Runs `f` with this instance's recorder current.
    pub fn scope<T>(&self, f: impl FnOnce() -> T) -> T {
        metrics::with_local_recorder(&*self.0, f)
    }
}

/// Metrics recorded outside every instance's [`Metrics::scope`] so far.
static STRAYS: AtomicU64 = AtomicU64::new(0);

/// The process's global recorder, for the binary and the tests: every
/// metric belongs to a gateway instance, so one recorded outside any
/// instance's scope is a bug. It is counted ([`strays`]) and logged once,
/// rather than lost without a trace.
pub struct Strays;

impl Strays {
    /// Makes [`Strays`] the global recorder (a no-op if one is set).
    pub fn install() {
        let _ = metrics::set_global_recorder(Strays);
    }

    fn stray(&self, name: &str) {
        if STRAYS.fetch_add(1, Ordering::Relaxed) == 0 {
            tracing::warn!("metric `{name}` recorded outside a gateway instance: it is lost");
        }
    }
}

/// How many metrics were recorded outside an instance since the start.
pub fn strays() -> u64 {
    STRAYS.load(Ordering::Relaxed)
}

impl metrics::Recorder for Strays {
    fn describe_counter(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.stray(key.as_str());
    }

    fn describe_gauge(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.stray(key.as_str());
    }

    fn describe_histogram(&self, key: KeyName, _: Option<Unit>, _: SharedString) {
        self.stray(key.as_str());
    }

    fn register_counter(&self, key: &Key, _: &metrics::Metadata<'_>) -> metrics::Counter {
        self.stray(key.name());
        metrics::Counter::noop()
    }

    fn register_gauge(&self, key: &Key, _: &metrics::Metadata<'_>) -> metrics::Gauge {
        self.stray(key.name());
        metrics::Gauge::noop()
    }

    fn register_histogram(&self, key: &Key, _: &metrics::Metadata<'_>) -> metrics::Histogram {
        self.stray(key.name());
        metrics::Histogram::noop()
    }
}

/// Dollars as the usage views say them (`/v1/keys/usage`, `/v1/usage`):
/// to a billionth, since sums of prices carry float noise.
pub fn shown_usd(x: f64) -> f64 {
    (x * 1e9).round() / 1e9
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cache_reads_and_writes_are_charged_at_their_prices() {
        let info = ModelInfo {
            name: "m".into(),
            upstream: "u".into(),
            upstream_model: "m".into(),
            input_per_mtok: 3.0,
            output_per_mtok: 15.0,
            cached_input_per_mtok: 0.3,
            cache_write_per_mtok: 3.75,
            image_tokens: 0,
            context_window: None,
            max_tokens: 4096,
            redactor: Arc::new(Redactor::default()),
        };
        let usage = Usage {
            prompt_tokens: 1_000_000,
            completion_tokens: 100_000,
            cached_tokens: 600_000,
            cache_write_tokens: 300_000,
            ..Usage::default()
        };
        // 100k fresh at 3, 600k read at 0.3, 300k written at 3.75, 100k out at 15.
        let want = 0.3 + 0.18 + 1.125 + 1.5;
        assert!(
            (info.cost(&usage) - want).abs() < 1e-9,
            "{}",
            info.cost(&usage)
        );
        // Counts past the prompt (a server's slip) never charge more than it.
        let odd = Usage {
            prompt_tokens: 10,
            cached_tokens: 50,
            cache_write_tokens: 50,
            ..Usage::default()
        };
        assert!((info.cost(&odd) - 10.0 * 0.3 / 1e6).abs() < 1e-12);
    }
}
