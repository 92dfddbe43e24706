//! OpenTelemetry traces over OTLP/HTTP (`[telemetry] otlp_endpoint`).
//!
//! Spans are built from what conclave records anyway, not kept open while
//! a request runs: a request gets its trace and span ids when it opens
//! ([`TraceCtx`]), strategy phases ([`crate::span::Phase`]) get theirs
//! when they start, and each span is written whole, with its real start
//! and end times, when its request, phase or attempt is over. Children name their parent by id,
//! so a request's span may be written after its attempts'. The SDK's batch
//! processor (its own thread, a bounded queue that drops when full) and
//! the OTLP exporter send them; the exporter's HTTP calls run on the
//! gateway's runtime with conclave's own client. [`Tracer`] is the
//! [`SpanExport`] that [`crate::span`]'s records go to.
//!
//! With no `otlp_endpoint` there is no [`Tracer`], no request carries a
//! [`TraceCtx`], and nothing here runs.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use axum::http;
use bytes::Bytes;
use opentelemetry::trace::{SpanContext, SpanId, TraceState};
use opentelemetry::{InstrumentationScope, KeyValue};
use opentelemetry_http::{HttpClient, HttpError};
use opentelemetry_otlp::{WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::{
    BatchSpanProcessor, IdGenerator, RandomIdGenerator, SpanData, SpanProcessor,
};

use crate::config::TelemetryConfig;
use crate::span::{SpanExport, TraceCtx};

/// The most of an OTLP receiver's response that is read.
const MAX_RESPONSE: usize = 64 * 1024;
/// Spans waiting for export; beyond this the processor drops them.
const QUEUE: usize = 8192;

#[derive(Debug, thiserror::Error)]
#[error("cannot set up OTLP trace export: {0}")]
pub struct TraceSetupError(String);

/// Where spans go: the batch processor in front of the OTLP exporter.
pub struct Tracer {
    processor: BatchSpanProcessor,
    scope: InstrumentationScope,
    ids: RandomIdGenerator,
    /// Share of new traces recorded (an incoming `traceparent`'s sampled
    /// flag decides for the traces it continues).
    ratio: f64,
    export_timeout: Duration,
}

impl Tracer {
    /// The exporter for `cfg`, sending through `rt` (the gateway's runtime).
    pub fn new(
        cfg: &TelemetryConfig,
        endpoint: &str,
        rt: tokio::runtime::Handle,
    ) -> Result<Arc<Self>, TraceSetupError> {
        let http = reqwest::Client::builder()
            .timeout(cfg.otlp_timeout)
            .build()
            .map_err(|e| TraceSetupError(e.to_string()))?;
        let exporter = opentelemetry_otlp::SpanExporter::builder()
            .with_http()
            .with_http_client(OnRuntime { http, rt })
            .with_endpoint(traces_url(endpoint))
            .with_timeout(cfg.otlp_timeout)
            .build()
            .map_err(|e| TraceSetupError(e.to_string()))?;
        let mut processor = BatchSpanProcessor::builder(exporter)
            .with_batch_config(
                opentelemetry_sdk::trace::BatchConfigBuilder::default()
                    .with_max_queue_size(QUEUE)
                    .with_scheduled_delay(Duration::from_secs(1))
                    .build(),
            )
            .build();
        processor.set_resource(
            &Resource::builder_empty()
                .with_attribute(KeyValue::new("service.name", cfg.service_name.clone()))
                .with_attribute(KeyValue::new("service.version", env!("CARGO_PKG_VERSION")))
                .build(),
        );
        Ok(Arc::new(Tracer {
            processor,
            scope: InstrumentationScope::builder("conclave")
                .with_version(env!("CARGO_PKG_VERSION"))
                .build(),
            ids: RandomIdGenerator::default(),
            ratio: cfg.sample_ratio,
            export_timeout: cfg.otlp_timeout,
        }))
    }

    /// A new request's trace, begun `at`: continuing `parent` (a client's
    /// `traceparent`) or a new one; `None` when it is not sampled.
    pub fn start(
        self: &Arc<Self>,
        parent: Option<&SpanContext>,
        at: SystemTime,
    ) -> Option<TraceCtx> {
        let (trace_id, remote, state) = match parent {
            Some(p) if !p.is_sampled() => return None,
            Some(p) => (p.trace_id(), Some(p.span_id()), p.trace_state().clone()),
            None if self.ratio < 1.0 && rand::random::<f64>() >= self.ratio => return None,
            None => (self.ids.new_trace_id(), None, TraceState::default()),
        };
        Some(TraceCtx::new(self.clone(), trace_id, state, remote, at))
    }

    /// Sends what is queued (shutdown), for at most one export's time
    /// and a few seconds more.
    pub fn shutdown(&self) {
        let within = self.export_timeout + Duration::from_secs(5);
        if let Err(e) = self.processor.shutdown_with_timeout(within) {
            tracing::warn!("trace export shutdown: {e}");
        }
    }
}

impl SpanExport for Tracer {
    fn new_span_id(&self) -> SpanId {
        self.ids.new_span_id()
    }

    fn export(&self, mut span: SpanData) {
        span.instrumentation_scope = self.scope.clone();
        self.processor.on_end(span);
    }
}

/// `{endpoint}/v1/traces` for a base URL (as `OTEL_EXPORTER_OTLP_ENDPOINT`
/// is read); a URL that names a path is taken as it is.
fn traces_url(endpoint: &str) -> String {
    match reqwest::Url::parse(endpoint) {
        Ok(u) if u.path() == "/" || u.path().is_empty() => {
            format!("{}/v1/traces", endpoint.trim_end_matches('/'))
        }
        _ => endpoint.to_owned(),
    }
}

/// The exporter's HTTP client: conclave's reqwest, run on the gateway's
/// runtime (the batch processor calls it from a thread of its own), with
/// the response read up to [`MAX_RESPONSE`].
#[derive(Debug)]
struct OnRuntime {
    http: reqwest::Client,
    rt: tokio::runtime::Handle,
}

#[async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(
        &self,
        request: http::Request<Bytes>,
    ) -> Result<http::Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let task = self.rt.spawn(async move {
            let (parts, body) = request.into_parts();
            let mut resp = http
                .request(parts.method, parts.uri.to_string())
                .headers(parts.headers)
                .body(body)
                .send()
                .await?;
            let mut out = http::Response::builder().status(resp.status());
            if let Some(h) = out.headers_mut() {
                *h = std::mem::take(resp.headers_mut());
            }
            let mut body = Vec::new();
            while let Some(chunk) = resp.chunk().await? {
                let room = MAX_RESPONSE.saturating_sub(body.len());
                body.extend_from_slice(&chunk[..chunk.len().min(room)]);
                if room <= chunk.len() {
                    break;
                }
            }
            Ok::<_, HttpError>(out.body(Bytes::from(body))?)
        });
        task.await?
    }
}

#[cfg(test)]
mod tests {
    use super::traces_url;

    #[test]
    fn a_base_url_gets_the_traces_path_and_a_full_one_is_kept() {
        assert_eq!(traces_url("http://c:4318"), "http://c:4318/v1/traces");
        assert_eq!(traces_url("http://c:4318/"), "http://c:4318/v1/traces");
        assert_eq!(
            traces_url("https://c/otlp/v1/traces"),
            "https://c/otlp/v1/traces"
        );
    }
}
