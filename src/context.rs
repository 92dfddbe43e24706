//! `RequestCtx`: what one client request carries through every strategy and
//! upstream call: its id, route, key, deadline, options, the sinks it
//! reports to (events, attempts, the instance's metrics recorder) and the
//! instance's clock, and the bookkeeping needed to count attempts and
//! measure conclave's own overhead. It knows its sinks only by their
//! traits (`crate::sink`), never telemetry itself. It carries its route's
//! retry budget (as a `RetryGate`), which every retry made for it asks
//! first (`RequestCtx::retry`, in `crate::retry`).

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use bytes::Bytes;
use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::clock::{Clock, ago};
pub use crate::sink::Totals;
use crate::sink::{AttemptSink, EventSink, Metrics, Reporters, RequestEnd, RetryGate, Who};
use crate::span::TraceCtx;
use crate::wire::{ChatRequest, ClientBody};

/// What the client asked of conclave itself, from the `x-conclave-*`
/// headers (read once, in `api::options`).
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `x-conclave-pin`: run the route's outermost strategy on this one
    /// member only (a tier, candidate, contestant, panellist or base).
    pub pin: Option<Arc<str>>,
    /// `x-conclave-session`: scopes session caps.
    pub session: Option<Arc<str>>,
    /// `x-conclave-confirm: yes`: approves a costly race.
    pub confirm: bool,
    /// The client's W3C `traceparent` (and `tracestate`), when valid.
    pub trace_parent: Option<opentelemetry::trace::SpanContext>,
    /// The client's `anthropic-beta`, passed on to an Anthropic upstream
    /// that gets the request verbatim.
    pub anthropic_beta: Option<Arc<str>>,
    /// What the client asked of the response cache (`Cache-Control`,
    /// `x-conclave-cache`).
    pub cache: CacheDirective,
}

/// The client's say over the response cache.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CacheDirective {
    /// `Cache-Control: no-cache` or `x-conclave-cache: bypass`: no
    /// lookup, the answer is still stored.
    pub no_lookup: bool,
    /// `Cache-Control: no-store`: the answer is kept out of the cache
    /// (and none is looked up).
    pub no_store: bool,
}

pub struct RequestCtx {
    pub id: Arc<str>,
    /// The `x-request-id` sent upstream: `id` when it is a UUID (some
    /// servers, llama-cpp-python among them, reject anything else), else
    /// a new one.
    pub upstream_id: Arc<str>,
    /// The model name the client asked for: a route or a concrete model,
    /// always a name from the config (a bounded label).
    pub route: Arc<str>,
    /// The strategy of that route (`passthrough` for a concrete model).
    pub strategy: &'static str,
    /// The API key's name, or `anonymous` when the gateway has no keys.
    pub key: Arc<str>,
    pub started: Instant,
    /// `server.request_timeout` after `started`; upstream calls end by then.
    pub deadline: Instant,
    /// Where the request's events go.
    events: Arc<dyn EventSink>,
    /// The gateway instance's metrics recorder.
    pub metrics: Metrics,
    /// The gateway instance's wall clock.
    pub clock: Clock,
    /// Where finished attempts go: telemetry, then whatever else the
    /// request was opened with (a key's budget ticket).
    sinks: Vec<Arc<dyn AttemptSink>>,
    /// Cancelled when shutdown's grace period is over: the request ends.
    pub shutdown: CancellationToken,
    attempts: AtomicU32,
    /// Tokens and cost over every attempt so far (nested, parallel and
    /// cancelled ones included), readable while the request runs.
    totals: Mutex<Totals>,
    /// Log one access line when the request ends (`server.access_log`).
    pub access_log: bool,
    /// The `x-conclave-*` options the client sent.
    pub options: Options,
    /// Intervals spent waiting on upstreams (end `None` while in flight).
    /// A plain mutex: a handful of pushes per request, never held across
    /// an await, so contention is nil.
    waits: Mutex<Vec<(Instant, Option<Instant>)>>,
    /// When the client got its first token, after `started` (set once).
    first_token: OnceLock<Duration>,
    /// The request's trace, when traces are exported and it is sampled.
    pub trace: Option<TraceCtx>,
    /// Its route's retry budget, shared by the route's requests (`None`,
    /// outside a gateway: retries only as each upstream's `retries` say).
    pub retry_budget: Option<Arc<dyn RetryGate>>,
    /// Response headers learned while the answer was being made (a
    /// mid-stream failover's `x-conclave-midstream-failover`), each with
    /// its values in order: a whole answer carries them, a stream, whose
    /// headers went out before, ends with them as SSE comments.
    late_headers: Mutex<Vec<(&'static str, Vec<&'static str>)>>,
    /// The answer came from the response cache (its `request` line says
    /// `cached: true`).
    cached: AtomicBool,
    /// The client's chat body and the request read from it, when a call
    /// may send it as it came ([`ClientBody`]).
    client_body: OnceLock<ClientBody>,
}

/// `u` as lowercase hyphenated text, written without `fmt`'s machinery
/// (an id is made for every request), shared by what records it.
pub fn uuid_arc(u: uuid::Uuid) -> Arc<str> {
    Arc::from(
        &*u.hyphenated()
            .encode_lower(&mut uuid::Uuid::encode_buffer()),
    )
}

/// Whether `id` is a UUID as [`uuid_arc`] writes it (lowercase,
/// hyphenated): an id conclave made itself is sent upstream as it is.
fn is_uuid_text(id: &str) -> bool {
    id.len() == 36
        && id.bytes().enumerate().all(|(i, b)| match i {
            8 | 13 | 18 | 23 => b == b'-',
            _ => b.is_ascii_digit() || (b'a'..=b'f').contains(&b),
        })
}

/// Most values one late header collects.
const MAX_LATE_VALUES: usize = 8;

impl RequestCtx {
    pub fn new(
        id: Arc<str>,
        route: Arc<str>,
        strategy: &'static str,
        key: Arc<str>,
        timeout: Duration,
        reporters: Reporters,
        shutdown: CancellationToken,
    ) -> Self {
        let started = Instant::now();
        let upstream_id = if is_uuid_text(&id) {
            id.clone()
        } else {
            match uuid::Uuid::try_parse(&id) {
                Ok(u) => uuid_arc(u),
                Err(_) => uuid_arc(uuid::Uuid::new_v4()),
            }
        };
        RequestCtx {
            id,
            upstream_id,
            route,
            strategy,
            key,
            started,
            deadline: started + timeout,
            sinks: vec![reporters.attempts],
            events: reporters.events,
            metrics: reporters.metrics,
            clock: reporters.clock,
            shutdown,
            attempts: AtomicU32::new(0),
            totals: Mutex::new(Totals::default()),
            access_log: false,
            options: Options::default(),
            waits: Mutex::new(Vec::new()),
            first_token: OnceLock::new(),
            trace: None,
            retry_budget: None,
            late_headers: Mutex::new(Vec::new()),
            cached: AtomicBool::new(false),
            client_body: OnceLock::new(),
        }
    }

    /// Counts this request in its route's retry `budget` (once, when it
    /// is admitted), which its retries then take from.
    pub fn with_retry_budget(mut self, budget: Arc<dyn RetryGate>) -> Self {
        self.count_in(budget);
        self
    }

    /// [`Self::with_retry_budget`] in place.
    pub fn count_in(&mut self, budget: Arc<dyn RetryGate>) {
        budget.request();
        self.retry_budget = Some(budget);
    }

    /// Which request this is, as records name it.
    pub fn who(&self) -> Who {
        Who {
            request_id: self.id.clone(),
            route: self.route.clone(),
            strategy: self.strategy,
            key: self.key.clone(),
        }
    }

    /// Whether events are kept (else callers skip building them).
    pub fn events_enabled(&self) -> bool {
        self.events.events_enabled()
    }

    /// Queues one event of this request, stamped now.
    pub fn emit(&self, event: &'static str, fields: Map<String, Value>) {
        let at = self.clock.now();
        self.events.emit(&self.id, &self.route, event, fields, at);
    }

    /// The request, finished now with `status` (the HTTP status,
    /// `stream_error`, or `499`), as telemetry records it.
    pub fn end(&self, status: &'static str) -> RequestEnd {
        let now = Instant::now();
        let wall = now - self.started;
        RequestEnd {
            who: self.who(),
            status,
            started_at: ago(&self.clock, wall),
            wall,
            overhead: wall.saturating_sub(self.upstream_wait(now)),
            ttft: self.ttft(),
            totals: self.totals(),
            attempts: self.attempts(),
            access_log: self.access_log,
            trace: self.trace.clone(),
            events: self.events.clone(),
            cached: self.cached(),
        }
    }

    /// The answer came from the response cache.
    pub fn set_cached(&self) {
        self.cached.store(true, Ordering::Relaxed);
    }

    pub fn cached(&self) -> bool {
        self.cached.load(Ordering::Relaxed)
    }

    /// Keeps the client's chat body for the calls that send its request
    /// as it came (the first one kept stays).
    pub fn keep_client_body(&self, body: ClientBody) {
        let _ = self.client_body.set(body);
    }

    /// The body that sends `req` to an upstream calling its model
    /// `upstream_model`: the client's own bytes when they say exactly
    /// that ([`ClientBody::for_call`]), else `req` written anew.
    pub fn upstream_body(
        &self,
        req: &Arc<ChatRequest>,
        upstream_model: &str,
    ) -> Result<Bytes, serde_json::Error> {
        let kept = self.client_body.get();
        match kept.and_then(|k| k.for_call(req, upstream_model)) {
            Some(bytes) => Ok(bytes),
            None => req.to_upstream_body(upstream_model),
        }
    }

    pub fn with_trace(mut self, trace: Option<TraceCtx>) -> Self {
        self.trace = trace;
        self
    }

    /// The client has its first token now (a no-op after the first call).
    pub fn first_token(&self) {
        if self.first_token.get().is_none() {
            let _ = self.first_token.set(self.started.elapsed());
        }
    }

    /// Time from the request's start to the client's first token.
    pub fn ttft(&self) -> Option<Duration> {
        self.first_token.get().copied()
    }

    pub fn with_access_log(mut self, on: bool) -> Self {
        self.access_log = on;
        self
    }

    /// Adds a sink for this request's finished attempts.
    pub fn with_sink(mut self, sink: Arc<dyn AttemptSink>) -> Self {
        self.add_sink(sink);
        self
    }

    /// [`Self::with_sink`] in place.
    pub fn add_sink(&mut self, sink: Arc<dyn AttemptSink>) {
        self.sinks.push(sink);
    }

    pub fn sinks(&self) -> &[Arc<dyn AttemptSink>] {
        &self.sinks
    }

    pub fn with_options(mut self, options: Options) -> Self {
        self.options = options;
        self
    }

    /// Adds an attempt's usage (or a correction of it) to the totals.
    pub fn add_usage(&self, input: i64, output: i64, cost: f64, estimated: bool) {
        let mut t = self.totals.lock();
        t.input_tokens = t.input_tokens.saturating_add_signed(input);
        t.output_tokens = t.output_tokens.saturating_add_signed(output);
        t.cost_usd += cost;
        t.estimated |= estimated;
    }

    /// Tokens and cost of every attempt so far.
    pub fn totals(&self) -> Totals {
        *self.totals.lock()
    }

    /// Adds `value` to the late response header `name` (see
    /// `late_headers`; at most [`MAX_LATE_VALUES`] values, comma-joined).
    pub fn add_late_header(&self, name: &'static str, value: &'static str) {
        let mut h = self.late_headers.lock();
        match h.iter_mut().find(|(n, _)| *n == name) {
            Some((_, values)) if values.len() < MAX_LATE_VALUES => values.push(value),
            Some(_) => {}
            None => h.push((name, vec![value])),
        }
    }

    /// The late response headers so far, their values comma-joined.
    pub fn late_headers(&self) -> Vec<(&'static str, String)> {
        self.late_headers
            .lock()
            .iter()
            .map(|(n, v)| (*n, v.join(", ")))
            .collect()
    }

    /// Numbers a new attempt (1-based) and opens its wait interval.
    pub fn begin_attempt(&self, at: Instant) -> (u32, usize) {
        let n = self.attempts.fetch_add(1, Ordering::Relaxed) + 1;
        let mut waits = self.waits.lock();
        waits.push((at, None));
        (n, waits.len() - 1)
    }

    pub fn end_wait(&self, slot: usize, at: Instant) {
        if let Some(w) = self.waits.lock().get_mut(slot) {
            w.1.get_or_insert(at);
        }
    }

    /// How many upstream attempts this request has made so far.
    pub fn attempts(&self) -> u32 {
        self.attempts.load(Ordering::Relaxed)
    }

    /// The time spent waiting on at least one upstream, up to `now`
    /// (the union of the attempts' intervals, so parallel calls count once).
    pub fn upstream_wait(&self, now: Instant) -> Duration {
        let waits = self.waits.lock();
        let span = |&(s, e): &(Instant, Option<Instant>)| (s, e.unwrap_or(now).min(now));
        // One call (most requests): its own span, nothing to merge.
        if let [one] = waits.as_slice() {
            let (s, e) = span(one);
            return e - s;
        }
        let mut spans: Vec<(Instant, Instant)> = waits.iter().map(span).collect();
        drop(waits);
        spans.sort_by_key(|s| s.0);
        let mut total = Duration::ZERO;
        let mut cur: Option<(Instant, Instant)> = None;
        for (s, e) in spans {
            match cur {
                Some((cs, ce)) if s <= ce => cur = Some((cs, ce.max(e))),
                Some((cs, ce)) => {
                    total += ce - cs;
                    cur = Some((s, e));
                }
                None => cur = Some((s, e)),
            }
        }
        if let Some((cs, ce)) = cur {
            total += ce - cs;
        }
        total
    }
}

/// A request context for unit tests: a minute to run, no event log.
#[cfg(test)]
pub(crate) fn test_ctx() -> RequestCtx {
    RequestCtx::new(
        "r".into(),
        "route".into(),
        "chain",
        "k".into(),
        Duration::from_secs(60),
        Reporters::none(),
        CancellationToken::new(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn union_of_waits_counts_overlap_once() {
        let ctx = test_ctx();
        let t0 = Instant::now();
        let (_, a) = ctx.begin_attempt(t0);
        let (_, b) = ctx.begin_attempt(t0 + Duration::from_millis(5));
        ctx.end_wait(a, t0 + Duration::from_millis(10));
        ctx.end_wait(b, t0 + Duration::from_millis(12));
        let (n, c) = ctx.begin_attempt(t0 + Duration::from_millis(20));
        ctx.end_wait(c, t0 + Duration::from_millis(25));
        assert_eq!(n, 3);
        assert_eq!(
            ctx.upstream_wait(t0 + Duration::from_millis(30)),
            Duration::from_millis(17)
        );
    }

    #[test]
    fn only_a_canonical_uuid_is_sent_upstream_as_it_came() {
        for _ in 0..64 {
            assert!(is_uuid_text(&uuid_arc(uuid::Uuid::new_v4())));
        }
        let u = "67e55044-10b1-426f-9247-bb680e5fe0c8";
        assert!(is_uuid_text(u));
        for not in [
            "67E55044-10B1-426F-9247-BB680E5FE0C8",
            "67e5504410b1426f9247bb680e5fe0c8",
            "{67e55044-10b1-426f-9247-bb680e5fe0c8}",
            "67e55044-10b1-426f-9247-bb680e5fe0cg",
            "67e55044-10b1-426f-9247_bb680e5fe0c8",
            "req-1",
        ] {
            assert!(!is_uuid_text(not), "{not}");
        }
        // Another spelling of a UUID goes upstream in the canonical one.
        let ctx = RequestCtx::new(
            u.to_uppercase().into(),
            "r".into(),
            "passthrough",
            "k".into(),
            Duration::from_secs(1),
            Reporters::none(),
            CancellationToken::new(),
        );
        assert_eq!(&*ctx.upstream_id, u);
    }
}
