//! The metric contract the dashboards read: every name, its help text and
//! its histogram buckets, and the Prometheus recorder each gateway
//! instance gets (no global recorder: tests run several gateways in one
//! process). A strategy's own metrics are declared in its folder (a
//! [`MetricSpec`] in its strategy-table entry) and handed to
//! [`recorder`], which describes them alike.

use std::sync::Arc;

use metrics::{Unit, counter, describe_counter, describe_gauge, describe_histogram};
use metrics_exporter_prometheus::{BuildError, Matcher, PrometheusBuilder, PrometheusHandle};

use crate::sink::Metrics;

pub const REQUESTS_TOTAL: &str = "conclave_requests_total";
pub const REQUEST_DURATION: &str = "conclave_request_duration_seconds";
pub const OVERHEAD: &str = "conclave_overhead_seconds";
pub const REQUEST_TTFT: &str = "conclave_request_ttft_seconds";
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
pub const EVENTS_DROPPED: &str = "conclave_events_dropped_total";
pub const GOVERNOR_REJECTIONS: &str = "conclave_governor_rejections_total";
pub const BUDGET_REMAINING: &str = "conclave_budget_remaining_tokens";
pub const STATE_ERRORS: &str = "conclave_state_errors_total";
pub const GOVERNOR_UNCHECKED: &str = "conclave_governor_unchecked_total";
pub const RETRIES_TOTAL: &str = "conclave_retries_total";
pub const RETRY_BUDGET_EXHAUSTED: &str = "conclave_retry_budget_exhausted_total";
pub const UPSTREAM_HEALTHY: &str = "conclave_upstream_healthy";
pub const EJECTIONS_TOTAL: &str = "conclave_ejections_total";

pub const COST_HELP: &str = "Spend in US dollars by model and key";

/// Request and attempt wall times: 10 ms to 10 minutes.
const DURATION_BUCKETS: &[f64] = &[
    0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0, 60.0, 120.0, 300.0, 600.0,
];
/// Times to first token: finer where a stream feels instant or sluggish.
const TTFT_BUCKETS: &[f64] = &[
    0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0,
    20.0, 30.0, 60.0,
];
/// What conclave itself adds: 10 µs to 100 ms.
const OVERHEAD_BUCKETS: &[f64] = &[
    0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
    0.1,
];
/// A lane wait: nothing, a swap (seconds), or a long queue (minutes).
const WAIT_BUCKETS: &[f64] = &[
    0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0,
    600.0,
];
const TPS_BUCKETS: &[f64] = &[
    1.0, 2.0, 5.0, 10.0, 20.0, 30.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0, 500.0, 1000.0,
];

/// A metric declared outside this contract (a strategy's own, by its
/// folder): its name, help text and kind.
#[derive(Debug, Clone, Copy)]
pub struct MetricSpec {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: MetricKind,
}

/// What a [`MetricSpec`] records.
#[derive(Debug, Clone, Copy)]
pub enum MetricKind {
    Counter,
    Gauge,
    /// A histogram with these buckets.
    Histogram(&'static [f64]),
}

/// A new Prometheus recorder for one gateway instance (its metrics and
/// those of `declared` described, the label-less counter at 0), and the
/// handle that renders it.
pub fn recorder(declared: &[MetricSpec]) -> Result<(Metrics, PrometheusHandle), BuildError> {
    let recorder = builder(declared)?.build_recorder();
    let handle = recorder.handle();
    let metrics = Metrics::new(Arc::new(recorder));
    metrics.scope(|| {
        describe();
        for m in declared {
            match m.kind {
                MetricKind::Counter => describe_counter!(m.name, m.help),
                MetricKind::Gauge => describe_gauge!(m.name, m.help),
                MetricKind::Histogram(_) => describe_histogram!(m.name, m.help),
            }
        }
        counter!(EVENTS_DROPPED).absolute(0);
    });
    Ok((metrics, handle))
}

fn builder(declared: &[MetricSpec]) -> Result<PrometheusBuilder, BuildError> {
    let mut buckets: Vec<(&str, &[f64])> = vec![
        (REQUEST_DURATION, DURATION_BUCKETS),
        (ATTEMPT_DURATION, DURATION_BUCKETS),
        (REQUEST_TTFT, TTFT_BUCKETS),
        (ATTEMPT_TTFT, TTFT_BUCKETS),
        (OVERHEAD, OVERHEAD_BUCKETS),
        (LANE_WAIT, WAIT_BUCKETS),
        (GENERATION_TPS, TPS_BUCKETS),
    ];
    buckets.extend(declared.iter().filter_map(|m| match m.kind {
        MetricKind::Histogram(values) => Some((m.name, values)),
        MetricKind::Counter | MetricKind::Gauge => None,
    }));
    let mut b = PrometheusBuilder::new();
    for (name, values) in buckets {
        b = b.set_buckets_for_metric(Matcher::Full(name.into()), values)?;
    }
    // Any `_seconds` histogram added later without buckets of its own
    // (a full name is matched before a suffix).
    b.set_buckets_for_metric(Matcher::Suffix("_seconds".into()), DURATION_BUCKETS)
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
    describe_histogram!(
        REQUEST_TTFT,
        Unit::Seconds,
        "Time to the first token the client saw (the whole answer for a non-streamed request)"
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
    describe_counter!(COST_USD_TOTAL, COST_HELP);
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
    describe_counter!(
        EVENTS_DROPPED,
        "Event-log lines dropped because the log's buffer was full"
    );
    describe_counter!(
        GOVERNOR_REJECTIONS,
        "Requests turned away by a key's or an upstream's limit, by key and scope"
    );
    describe_counter!(
        STATE_ERRORS,
        "Calls to the shared state (Redis) that failed or timed out, by operation"
    );
    describe_counter!(
        GOVERNOR_UNCHECKED,
        "Requests a key's governor let in unchecked (fail_open) while the shared state did not answer"
    );
    describe_counter!(
        RETRIES_TOTAL,
        "Calls sent again after a failure, by route and reason"
    );
    describe_counter!(
        RETRY_BUDGET_EXHAUSTED,
        "Retries not made because the route's retry budget was spent, by route"
    );
    describe_gauge!(
        UPSTREAM_HEALTHY,
        "Whether a model on an upstream (model \"\": the whole upstream) is serving (1) or ejected after failures (0)"
    );
    describe_counter!(
        EJECTIONS_TOTAL,
        "Times a model on an upstream (model \"\": the whole upstream) was ejected after failures"
    );
    describe_gauge!(
        BUDGET_REMAINING,
        "Tokens a key may still spend today (its daily_tokens minus today's spend)"
    );
}
