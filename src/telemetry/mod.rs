//! Telemetry: the metric contract and the Prometheus recorder (`prom`),
//! the JSONL event log (`events`), OpenTelemetry traces ([`trace`]), the
//! sink that turns every finished attempt ([`crate::attempt::AttemptRecord`])
//! into its metrics, event line and span (`attempt`), and the record of
//! each finished request (`request`).
//!
//! Label values only ever come from the config (route, model and upstream
//! names) or from small fixed sets (role, verdict, warm, status), so a model
//! name a client makes up never becomes a time series.

mod attempt;
mod events;
mod prom;
mod request;
pub mod trace;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use arc_swap::ArcSwapOption;
use dashmap::DashMap;

pub use events::{Event, EventBody, EventLog};
pub use prom::*;
pub use request::record_request;
use trace::Tracer;

use crate::context::RequestCtx;

/// The longest shutdown waits for the event log's writer to flush.
const CLOSE_WITHIN: Duration = Duration::from_secs(10);

/// Shared by every request, and kept across config reloads: the event
/// log, the cost totals and the trace exporter.
pub struct Telemetry {
    /// Swapped when a reload names another file (or none).
    events: ArcSwapOption<EventLog>,
    /// `metrics` counters are integers; dollars are not, so spend is summed
    /// here and rendered as a counter next to the recorder's output.
    cost: DashMap<(Arc<str>, Arc<str>), f64>,
    /// `None` unless `[telemetry] otlp_endpoint` is set; fixed for the
    /// life of the process.
    pub tracer: Option<Arc<Tracer>>,
}

impl Telemetry {
    /// The event log at `event_log` (queueing up to `buffer` events),
    /// and traces to `tracer`.
    pub fn new(
        event_log: Option<&Path>,
        buffer: usize,
        tracer: Option<Arc<Tracer>>,
    ) -> std::io::Result<Arc<Self>> {
        prometheus();
        let events = event_log.map(|p| EventLog::open(p, buffer)).transpose()?;
        Ok(Arc::new(Telemetry {
            events: ArcSwapOption::from_pointee(events),
            cost: DashMap::new(),
            tracer,
        }))
    }

    /// Telemetry with no event log (unit tests).
    pub fn for_tests() -> Arc<Self> {
        Arc::new(Telemetry {
            events: ArcSwapOption::empty(),
            cost: DashMap::new(),
            tracer: None,
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
        let next = path.map(|p| EventLog::open(p, buffer)).transpose()?;
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
