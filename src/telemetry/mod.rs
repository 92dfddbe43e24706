//! Telemetry: the metric names (the contract the dashboards read), the
//! Prometheus recorder, the JSONL event log, and the sink that turns every
//! finished attempt ([`crate::attempt::AttemptRecord`]) into its metrics
//! and its event line.
//!
//! Label values only ever come from the config (route, model and upstream
//! names) or from small fixed sets (role, verdict, warm, status), so a model
//! name a client makes up never becomes a time series.

mod attempt;
mod events;

use std::path::Path;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use dashmap::DashMap;
use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram, histogram};
use metrics_exporter_prometheus::{Matcher, PrometheusBuilder, PrometheusHandle};
use tokio::time::Instant;

pub use events::{Event, EventBody, EventLog};

use crate::context::RequestCtx;

pub const REQUESTS_TOTAL: &str = "conclave_requests_total";
pub const REQUEST_DURATION: &str = "conclave_request_duration_seconds";
pub const OVERHEAD: &str = "conclave_overhead_seconds";
pub const ATTEMPTS_TOTAL: &str = "conclave_attempts_total";
pub const ATTEMPT_DURATION: &str = "conclave_attempt_duration_seconds";
pub const ATTEMPT_TTFT: &str = "conclave_attempt_ttft_seconds";
pub const TOKENS_TOTAL: &str = "conclave_tokens_total";
pub const COST_USD_TOTAL: &str = "conclave_cost_usd_total";
pub const UPSTREAM_ERRORS_TOTAL: &str = "conclave_upstream_errors_total";
pub const INFLIGHT_REQUESTS: &str = "conclave_inflight_requests";
pub const LLAMA_SWAP_WARM: &str = "conclave_llama_swap_warm";
pub const LANE_QUEUE_DEPTH: &str = "conclave_lane_queue_depth";
pub const LANE_WAIT: &str = "conclave_lane_wait_seconds";
pub const LANE_SWAPS: &str = "conclave_llama_swap_swaps_total";
pub const GENERATION_TPS: &str = "conclave_generation_tokens_per_second";
pub const RACE_SCORE: &str = "conclave_race_score";
pub const RACE_DOWNGRADES: &str = "conclave_race_downgrades_total";
pub const GOVERNOR_REJECTIONS: &str = "conclave_governor_rejections_total";
pub const BUDGET_REMAINING: &str = "conclave_budget_remaining_tokens";
pub const ARENA_VOTES: &str = "conclave_arena_votes_total";

const LATENCY_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
];
const TPS_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0,
];
const SCORE_BUCKETS: &[f64] = &[0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.999];
const OVERHEAD_BUCKETS: &[f64] = &[
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1,
];

/// The process-wide Prometheus recorder. `metrics` has one global recorder,
/// so every gateway in a process (tests start several) shares it.
static PROMETHEUS: OnceLock<Option<PrometheusHandle>> = OnceLock::new();

fn prometheus() -> Option<&'static PrometheusHandle> {
    PROMETHEUS
        .get_or_init(|| {
            let builder = PrometheusBuilder::new()
                .set_buckets_for_metric(Matcher::Full(OVERHEAD.into()), OVERHEAD_BUCKETS)
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Suffix("_seconds".into()), LATENCY_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(GENERATION_TPS.into()), TPS_BUCKETS)
                })
                .and_then(|b| {
                    b.set_buckets_for_metric(Matcher::Full(RACE_SCORE.into()), SCORE_BUCKETS)
                });
            let handle = match builder.and_then(|b| b.install_recorder()) {
                Ok(h) => h,
                Err(e) => {
                    tracing::warn!("metrics disabled: {e}");
                    return None;
                }
            };
            describe();
            let upkeep = handle.clone();
            // Detached on purpose: upkeep lives as long as the process.
            std::thread::spawn(move || {
                loop {
                    std::thread::sleep(Duration::from_secs(5));
                    upkeep.run_upkeep();
                }
            });
            Some(handle)
        })
        .as_ref()
}

fn describe() {
    describe_counter!(
        REQUESTS_TOTAL,
        "Client requests by route, strategy and final status"
    );
    describe_histogram!(REQUEST_DURATION, Unit::Seconds, "Client request wall time");
    describe_histogram!(
        OVERHEAD,
        Unit::Seconds,
        "Request wall time minus the union of its upstream waits"
    );
    describe_counter!(
        ATTEMPTS_TOTAL,
        "Upstream calls by model, role, verdict and warm state"
    );
    describe_histogram!(ATTEMPT_DURATION, Unit::Seconds, "Upstream call duration");
    describe_histogram!(
        ATTEMPT_TTFT,
        Unit::Seconds,
        "Upstream time to first stream event"
    );
    describe_counter!(TOKENS_TOTAL, "Tokens by model and kind (input, output)");
    describe_counter!(COST_USD_TOTAL, "Spend in US dollars by model and key");
    describe_counter!(
        UPSTREAM_ERRORS_TOTAL,
        "Failed upstream calls by upstream and kind"
    );
    describe_gauge!(INFLIGHT_REQUESTS, "Client requests in flight by route");
    describe_gauge!(
        LLAMA_SWAP_WARM,
        "1 when llama-swap reports the model loaded"
    );
    describe_gauge!(LANE_QUEUE_DEPTH, "Calls waiting in a local lane");
    describe_histogram!(LANE_WAIT, Unit::Seconds, "Time a call waited for its lane");
    describe_histogram!(
        GENERATION_TPS,
        "Output tokens per second of local-lane attempts"
    );
    describe_counter!(LANE_SWAPS, "Times a local lane changed the model it serves");
    describe_histogram!(RACE_SCORE, "Rubric totals of race candidates, by model");
    describe_counter!(
        RACE_DOWNGRADES,
        "Races run as their first candidate alone, by reason"
    );
    describe_counter!(
        GOVERNOR_REJECTIONS,
        "Requests turned away by a key's or an upstream's limit, by key and scope"
    );
    describe_counter!(
        ARENA_VOTES,
        "Arena votes by route and model: outcome win, loss or tie"
    );
    describe_gauge!(
        BUDGET_REMAINING,
        "Tokens a key may still spend today (its daily_tokens minus today's spend)"
    );
}

/// Shared by every request, and kept across config reloads: the event log
/// and the cost totals.
pub struct Telemetry {
    /// Swapped when a reload names another file (or none).
    events: ArcSwapOption<EventLog>,
    /// `metrics` counters are integers; dollars are not, so spend is summed
    /// here and rendered as a counter next to the recorder's output.
    cost: DashMap<(Arc<str>, Arc<str>), f64>,
}

impl Telemetry {
    pub fn new(event_log: Option<&Path>) -> std::io::Result<Arc<Self>> {
        prometheus();
        let events = event_log.map(EventLog::open).transpose()?;
        Ok(Arc::new(Telemetry {
            events: ArcSwapOption::from_pointee(events),
            cost: DashMap::new(),
        }))
    }

    /// Telemetry with no event log (unit tests).
    pub fn for_tests() -> Arc<Self> {
        Arc::new(Telemetry {
            events: ArcSwapOption::empty(),
            cost: DashMap::new(),
        })
    }

    pub fn events_enabled(&self) -> bool {
        self.events.load().is_some()
    }

    /// Queues one event for the log; never blocks the request.
    pub fn emit(&self, ctx: &RequestCtx, event: &'static str, body: EventBody, at: SystemTime) {
        if let Some(log) = self.events.load().as_ref() {
            log.send(Event::new(ctx, event, body, at));
        }
    }

    /// Writes an event that belongs to no model request (a vote).
    pub fn emit_event(&self, event: Event) {
        if let Some(log) = self.events.load().as_ref() {
            log.send(event);
        }
    }

    /// Points the event log at `path` (SIGHUP): the same path is reopened
    /// (log rotation), another one replaces the old log, which is flushed.
    pub fn set_event_log(&self, path: Option<&Path>) -> std::io::Result<()> {
        let current = self.events.load_full();
        match (&current, path) {
            (Some(log), Some(p)) if log.path == p => {
                log.reopen();
                return Ok(());
            }
            (None, None) => return Ok(()),
            _ => {}
        }
        let next = path.map(EventLog::open).transpose()?;
        self.events.store(next.map(Arc::new));
        if let Some(old) = current {
            // Joining the writer blocks: not on a runtime thread.
            std::thread::spawn(move || old.close());
        }
        Ok(())
    }

    pub fn add_cost(&self, model: &Arc<str>, key: &Arc<str>, usd: f64) {
        if usd > 0.0 {
            *self.cost.entry((model.clone(), key.clone())).or_insert(0.0) += usd;
        }
    }

    /// The Prometheus text exposition of every metric.
    pub fn render(&self) -> String {
        let mut out = prometheus().map(|h| h.render()).unwrap_or_default();
        if !self.cost.is_empty() {
            out.push_str(&format!(
                "# HELP {COST_USD_TOTAL} Spend in US dollars by model and key\n# TYPE {COST_USD_TOTAL} counter\n"
            ));
            for e in self.cost.iter() {
                let (model, key) = e.key();
                out.push_str(&format!(
                    "{COST_USD_TOTAL}{{model=\"{}\",key=\"{}\"}} {}\n",
                    escape_label(model),
                    escape_label(key),
                    e.value()
                ));
            }
        }
        out
    }

    /// Flushes and closes the event log.
    pub fn shutdown(&self) {
        if let Some(log) = self.events.swap(None) {
            log.close();
        }
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// Records the end of one client request: count, duration and overhead.
/// `status` is the HTTP status, `stream_error` when a started stream ended
/// in an error event, or `499` when the client went away first.
pub fn record_request(ctx: &RequestCtx, status: &'static str) {
    let now = Instant::now();
    let wall = now - ctx.started;
    let overhead = wall.saturating_sub(ctx.upstream_wait(now));
    let route = ctx.route.clone();
    counter!(REQUESTS_TOTAL, "route" => route.clone(), "strategy" => ctx.strategy, "status" => status)
        .increment(1);
    histogram!(REQUEST_DURATION, "route" => route.clone(), "strategy" => ctx.strategy)
        .record(wall.as_secs_f64());
    histogram!(OVERHEAD, "route" => route, "strategy" => ctx.strategy)
        .record(overhead.as_secs_f64());
    if ctx.access_log {
        let t = ctx.totals();
        tracing::info!(
            target: "conclave::access",
            request_id = %ctx.id,
            key = %ctx.key,
            route = %ctx.route,
            strategy = ctx.strategy,
            status,
            attempts = ctx.attempts(),
            duration_ms = (wall.as_secs_f64() * 1e4).round() / 10.0,
            input_tokens = t.input_tokens,
            output_tokens = t.output_tokens,
            tokens_estimated = t.estimated,
            "request"
        );
    }
}

/// Maps an HTTP status to a `'static` label value.
pub fn status_label(code: u16) -> &'static str {
    match code {
        200 => "200",
        400 => "400",
        401 => "401",
        403 => "403",
        404 => "404",
        408 => "408",
        413 => "413",
        422 => "422",
        429 => "429",
        499 => "499",
        500 => "500",
        502 => "502",
        503 => "503",
        504 => "504",
        c if c < 300 => "2xx",
        c if c < 500 => "4xx",
        _ => "5xx",
    }
}
