//! Telemetry: the metric contract and the Prometheus recorder (`prom`),
//! the JSONL event log (`events`), OpenTelemetry traces ([`trace`]), the
//! sink that turns every finished attempt ([`crate::sink::AttemptRecord`])
//! into its metrics, event line and span (`attempt`), the record of
//! each finished request (`request`), today's tallies per route and
//! model behind `GET /v1/usage` (`usage`, counted beside the metrics), and
//! the bounded ring of recent request records behind `GET /v1/requests`
//! ([`recent`]), fed by the same lines as the event log.
//!
//! Label values only ever come from the config (route, model and upstream
//! names) or from small fixed sets (role, verdict, warm, status), so a model
//! name a client makes up never becomes a time series.

mod attempt;
mod events;
mod handles;
mod prom;
pub mod recent;
mod request;
pub mod trace;
mod usage;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use dashmap::DashMap;
use metrics_exporter_prometheus::PrometheusHandle;
use serde_json::{Map, Value};

pub use events::{Event, EventBody, EventLog};
use handles::Handles;
pub use handles::RouteHandles;
pub use prom::*;
use recent::{Recent, Tap};
use trace::Tracer;

use crate::clock::Clock;
use crate::sink::{AttemptSink, EventSink, Metrics, Reporters, RequestEnd, Totals};

/// How often the recorder's histograms are drained when nobody scrapes.
const UPKEEP_EVERY: Duration = Duration::from_secs(5);
/// The longest shutdown waits for the event log's writer to flush.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

/// One gateway instance's telemetry, shared by every request and kept
/// across config reloads: its own metrics recorder, the event log, the
/// cost totals and the trace exporter.
pub struct Telemetry {
    /// This instance's metrics recorder, and its exposition.
    pub metrics: Metrics,
    /// The recorder's handles for the request path, by their labels.
    handles: Handles,
    /// The instance's clock, handed to each request with the sinks.
    clock: Clock,
    prometheus: Option<PrometheusHandle>,
    /// Swapped when a reload names another file (or none).
    events: ArcSwapOption<EventLog>,
    /// `metrics` counters are integers; dollars are not, so spend is summed
    /// here and rendered as a counter next to the recorder's output. Its
    /// keys are names from the config, so a fast hash is safe.
    cost: DashMap<(Arc<str>, Arc<str>), f64, hashbrown::DefaultHashBuilder>,
    /// `None` unless `[telemetry] otlp_endpoint` is set; fixed for the
    /// life of the process.
    pub tracer: Option<Arc<Tracer>>,
    /// The last `console.recent_requests` finished requests, and those
    /// in flight.
    recent: Recent,
    /// When this instance started (today's tallies count from then at
    /// the earliest).
    born: SystemTime,
}

impl Telemetry {
    /// A new recorder (with the metrics `declared` besides the contract's;
    /// its histograms drained every few seconds by a task on the current
    /// runtime, if any), the event log at `event_log` (queueing up to
    /// `buffer` events), traces to `tracer`, requests stamped by `clock`,
    /// the last `recent_requests` of them kept in the ring.
    pub fn new(
        event_log: Option<&Path>,
        buffer: usize,
        tracer: Option<Arc<Tracer>>,
        clock: Clock,
        declared: &[MetricSpec],
        recent_requests: usize,
    ) -> std::io::Result<Arc<Self>> {
        let (metrics, prometheus) = match recorder(declared) {
            Ok((m, h)) => (m, Some(h)),
            Err(e) => {
                tracing::warn!("metrics disabled: {e}");
                (Metrics::noop(), None)
            }
        };
        let events = event_log
            .map(|p| EventLog::open(p, buffer, metrics.clone()))
            .transpose()?;
        let t = Arc::new(Telemetry {
            handles: Handles::new(metrics.clone()),
            metrics,
            clock,
            prometheus,
            events: ArcSwapOption::from_pointee(events),
            cost: DashMap::default(),
            tracer,
            recent: Recent::new(recent_requests),
            born: clock.now(),
        });
        t.keep_up();
        Ok(t)
    }

    /// Telemetry with no event log (unit tests).
    pub fn for_tests() -> Arc<Self> {
        Arc::new(Telemetry {
            handles: Handles::new(Metrics::noop()),
            metrics: Metrics::noop(),
            clock: Clock::system(),
            prometheus: None,
            events: ArcSwapOption::empty(),
            cost: DashMap::default(),
            tracer: None,
            recent: Recent::new(0),
            born: SystemTime::now(),
        })
    }

    /// What request `id` on `route` (its `strategy`, by key `key`)
    /// reports to: this telemetry, its recorder and clock; while the ring
    /// of recent requests is on, through a [`Tap`] that keeps the
    /// request's record, readable while it runs.
    pub fn reporters(
        self: &Arc<Self>,
        id: &Arc<str>,
        route: &Arc<str>,
        strategy: &'static str,
        key: &Arc<str>,
    ) -> Reporters {
        let (events, attempts): (Arc<dyn EventSink>, Arc<dyn AttemptSink>) =
            if self.recent.enabled() {
                let started = self.clock.now();
                let tap = Arc::new(Tap::new(self.clone(), id, route, strategy, key, started));
                (tap.clone(), tap)
            } else {
                (self.clone(), self.clone())
            };
        Reporters {
            events,
            attempts,
            metrics: self.metrics.clone(),
            clock: self.clock,
        }
    }

    /// Today's UTC day on this instance's clock.
    fn today(&self) -> u64 {
        usage::day_of(self.clock.now())
    }

    /// Counts a finished request in its route's tally of today.
    fn tally_request(&self, h: &RouteHandles, status: &str, totals: &Totals) {
        h.today.add(self.today(), |t| {
            t.requests += 1;
            if !status.starts_with('2') {
                t.errors += 1;
            }
            t.input_tokens += totals.input_tokens;
            t.output_tokens += totals.output_tokens;
            t.cost_usd += totals.cost_usd;
        });
    }

    /// `GET /v1/usage`: today's requests per route and attempts per model
    /// on this instance (the increments of its counters since the UTC
    /// day began, or since it started).
    pub fn usage(&self) -> Value {
        let day = self.today();
        self.handles.usage(day).render(day, self.born)
    }

    /// The ring of recent request records.
    pub fn recent(&self) -> &Recent {
        &self.recent
    }

    /// Drains the recorder's histograms every few seconds while this
    /// telemetry lives (a task on the current runtime, when there is one).
    fn keep_up(self: &Arc<Self>) {
        let (Some(handle), Ok(rt)) = (
            self.prometheus.clone(),
            tokio::runtime::Handle::try_current(),
        ) else {
            return;
        };
        let alive = Arc::downgrade(self);
        rt.spawn(async move {
            let mut tick = tokio::time::interval(UPKEEP_EVERY);
            // After a long pause (or a test's `advance`), one upkeep.
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                if alive.strong_count() == 0 {
                    return;
                }
                handle.run_upkeep();
            }
        });
    }

    pub fn events_enabled(&self) -> bool {
        self.events.load().is_some()
    }

    /// Writes an event built whole (an attempt's, or a vote's, which
    /// belongs to no model request).
    pub fn emit_event(&self, event: Event) {
        if let Some(log) = self.events.load().as_ref() {
            log.send(event);
        }
    }

    /// Writes an event the ring keeps too.
    fn emit_shared(&self, event: &Arc<Event>) {
        if let Some(log) = self.events.load().as_ref() {
            log.send_shared(event.clone());
        }
    }

    /// Points the event log at `path` (SIGHUP): the same path is reopened
    /// (log rotation), another one replaces the old log, which is flushed.
    /// `buffer` applies to a log opened anew.
    pub fn set_event_log(&self, path: Option<&Path>, buffer: usize) -> std::io::Result<()> {
        let current = self.events.load_full();
        match (&current, path) {
            (Some(log), Some(p)) if log.path == p => {
                log.reopen();
                return Ok(());
            }
            (None, None) => return Ok(()),
            _ => {}
        }
        let next = path
            .map(|p| EventLog::open(p, buffer, self.metrics.clone()))
            .transpose()?;
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
        let mut out = self
            .prometheus
            .as_ref()
            .map(|h| h.render())
            .unwrap_or_default();
        if !self.cost.is_empty() {
            out.push_str(&format!(
                "# HELP {COST_USD_TOTAL} {COST_HELP}\n# TYPE {COST_USD_TOTAL} counter\n"
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

    /// Sends the spans queued, then flushes and closes the event log
    /// (waiting at most [`CLOSE_WITHIN`] for a stuck writer).
    pub fn shutdown(&self) {
        if let Some(t) = &self.tracer {
            t.shutdown();
        }
        if let Some(log) = self.events.swap(None)
            && !log.close_within(CLOSE_WITHIN)
        {
            tracing::warn!(
                "the event log's writer did not finish within {CLOSE_WITHIN:?}; events still queued are lost"
            );
        }
    }
}

impl EventSink for Telemetry {
    fn events_enabled(&self) -> bool {
        Telemetry::events_enabled(self)
    }

    /// Queues one event for the log; never blocks the request.
    fn emit(
        &self,
        request_id: &str,
        route: &Arc<str>,
        event: &'static str,
        fields: Map<String, Value>,
        at: SystemTime,
    ) {
        if let Some(log) = self.events.load().as_ref() {
            let body = EventBody::Fields(fields);
            log.send(Event::of(request_id.into(), route.clone(), event, body, at));
        }
    }

    fn request(&self, end: &RequestEnd) {
        if self.events_enabled() {
            self.emit_event(request::event(end));
        }
    }
}

fn escape_label(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A duration in milliseconds, to the microsecond (events and spans).
fn ms(d: std::time::Duration) -> f64 {
    (d.as_secs_f64() * 1e6).round() / 1e3
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
