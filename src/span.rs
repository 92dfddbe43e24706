//! A request's place in its trace: [`TraceCtx`] (its trace and span ids),
//! [`SpanRecord`] (one finished span), [`Phase`] (a strategy phase as a
//! span of its own), and [`SpanExport`], the trait that telemetry's tracer
//! implements. A leaf: the request context and strategies use it without
//! knowing where spans go (see `telemetry::trace`).

use std::borrow::Cow;
use std::sync::Arc;
use std::time::SystemTime;

use opentelemetry::KeyValue;
use opentelemetry::trace::{
    SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId, TraceState,
};
use opentelemetry_sdk::propagation::TraceContextPropagator;
use opentelemetry_sdk::trace::{SpanData, SpanEvents, SpanLinks};

/// Where finished spans go.
pub trait SpanExport: Send + Sync {
    fn new_span_id(&self) -> SpanId;
    /// Queues one finished span (the exporter sets its scope).
    fn export(&self, span: SpanData);
}

/// A count as an OTLP integer (saturating).
pub fn int(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

/// A request's place in its trace.
#[derive(Clone)]
pub struct TraceCtx {
    tracer: Arc<dyn SpanExport>,
    trace_id: TraceId,
    state: TraceState,
    /// The request span's id.
    pub id: SpanId,
    /// The client's span, when it sent a `traceparent`.
    remote: Option<SpanId>,
    start: SystemTime,
}

/// One finished span, as conclave describes it.
pub struct SpanRecord {
    pub id: SpanId,
    /// `None`: the request span.
    pub parent: Option<SpanId>,
    pub name: Cow<'static, str>,
    pub kind: SpanKind,
    pub start: SystemTime,
    pub end: SystemTime,
    pub attributes: Vec<KeyValue>,
    pub error: Option<String>,
}

impl TraceCtx {
    /// A request's trace, its span id new; `remote` is the client's span.
    pub fn new(
        tracer: Arc<dyn SpanExport>,
        trace_id: TraceId,
        state: TraceState,
        remote: Option<SpanId>,
        start: SystemTime,
    ) -> Self {
        TraceCtx {
            id: tracer.new_span_id(),
            tracer,
            trace_id,
            state,
            remote,
            start,
        }
    }

    pub fn new_id(&self) -> SpanId {
        self.tracer.new_span_id()
    }

    pub fn started(&self) -> SystemTime {
        self.start
    }

    /// The `traceparent` header value for a call made under span `id`.
    pub fn traceparent(&self, id: SpanId) -> String {
        format!("00-{}-{}-01", self.trace_id, id)
    }

    /// Queues one finished span for export.
    pub fn export(&self, s: SpanRecord) {
        let (parent, remote) = match (s.parent, self.remote) {
            (Some(p), _) => (p, false),
            (None, Some(r)) => (r, true),
            (None, None) => (SpanId::INVALID, false),
        };
        let status = match s.error {
            Some(description) => Status::Error {
                description: description.into(),
            },
            None => Status::Unset,
        };
        self.tracer.export(SpanData {
            span_context: SpanContext::new(
                self.trace_id,
                s.id,
                TraceFlags::SAMPLED,
                false,
                self.state.clone(),
            ),
            parent_span_id: parent,
            parent_span_is_remote: remote,
            span_kind: s.kind,
            name: s.name,
            start_time: s.start,
            end_time: s.end.max(s.start),
            attributes: s.attributes,
            dropped_attributes_count: 0,
            events: SpanEvents::default(),
            links: SpanLinks::default(),
            status,
            instrumentation_scope: Default::default(),
        });
    }
}

const TRACEPARENT: axum::http::HeaderName = axum::http::HeaderName::from_static("traceparent");

/// Whether `name` is a W3C trace context header ([`remote_parent`]
/// reads only these).
pub fn is_trace_header(name: &axum::http::HeaderName) -> bool {
    *name == TRACEPARENT || name.as_str() == "tracestate"
}

/// The client's `traceparent` (and `tracestate`), when valid.
pub fn remote_parent(headers: &axum::http::HeaderMap) -> Option<SpanContext> {
    if !headers.contains_key(TRACEPARENT) {
        return None;
    }
    let cx = opentelemetry::propagation::TextMapPropagator::extract(
        &TraceContextPropagator::new(),
        &opentelemetry_http::HeaderExtractor(headers),
    );
    let sc = cx.span().span_context().clone();
    sc.is_valid().then_some(sc)
}

/// A strategy phase (a judge's panel, a race's scoring) as a span of its
/// own: calls made under it carry its id, so their attempts are its
/// children. Written when dropped.
pub struct Phase {
    trace: TraceCtx,
    id: SpanId,
    parent: SpanId,
    name: &'static str,
    start: SystemTime,
    /// Its end is `start` plus the time since, as attempts' ends are.
    began: tokio::time::Instant,
}

impl Phase {
    /// A phase begun `at`, under `parent` (another phase), else under the
    /// request.
    pub fn start(
        trace: &TraceCtx,
        parent: Option<SpanId>,
        name: &'static str,
        at: SystemTime,
    ) -> Self {
        Phase {
            trace: trace.clone(),
            id: trace.new_id(),
            parent: parent.unwrap_or(trace.id),
            name,
            start: at,
            began: tokio::time::Instant::now(),
        }
    }

    pub fn id(&self) -> SpanId {
        self.id
    }
}

impl Drop for Phase {
    fn drop(&mut self) {
        self.trace.export(SpanRecord {
            id: self.id,
            parent: Some(self.parent),
            name: Cow::Borrowed(self.name),
            kind: SpanKind::Internal,
            start: self.start,
            end: self.start + self.began.elapsed(),
            attributes: Vec::new(),
            error: None,
        });
    }
}
