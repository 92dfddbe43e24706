//! What every request that runs a model is counted by: its id, the guard
//! that tracks it in flight and records it when it ends, and the response
//! of a request that failed before it reached a route.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::Response;
use metrics::counter;

use super::Gateway;
use super::error::{ApiError, ErrorStyle};
use crate::context::{RequestCtx, uuid_arc};
use crate::telemetry::{REQUESTS_TOTAL, RouteHandles, Telemetry, status_label};

pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");
const ANTHROPIC_REQUEST_ID: HeaderName = HeaderName::from_static("request-id");

/// The response of a handler that may have failed before its route was
/// known (counted under `route="unknown"`), with the request id.
/// `style`: the shape of its error.
pub fn finish_response(
    gw: &Gateway,
    resp: Result<Response, ApiError>,
    id: &str,
    style: ErrorStyle,
) -> Response {
    let mut resp = match resp {
        Ok(r) => r,
        Err(e) => {
            // A key's 429 was recorded under its route when it was opened.
            if !matches!(e, ApiError::Governed(_)) {
                let status = status_label(e.status().as_u16());
                gw.state().telemetry.metrics.scope(|| {
                    counter!(REQUESTS_TOTAL, "route" => "unknown", "strategy" => "none", "status" => status)
                        .increment(1);
                });
            }
            e.respond(style)
        }
    };
    if let Ok(v) = HeaderValue::from_str(id) {
        // Anthropic's clients read theirs from `request-id`.
        if style == ErrorStyle::Anthropic {
            resp.headers_mut().insert(ANTHROPIC_REQUEST_ID, v.clone());
        }
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    resp
}

/// The client's `x-request-id` when it is a sane token, else a new UUID.
pub fn request_id(headers: &HeaderMap) -> Arc<str> {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map_or_else(|| uuid_arc(uuid::Uuid::new_v4()), Arc::from)
}

/// Tracks one request in flight and records it when it ends. Dropped
/// without a status, the client went away first (`499`).
pub struct RequestGuard {
    ctx: Arc<RequestCtx>,
    telemetry: Arc<Telemetry>,
    /// The route's metric handles.
    metrics: Arc<RouteHandles>,
    status: Option<&'static str>,
}

impl RequestGuard {
    pub fn new(ctx: Arc<RequestCtx>, telemetry: Arc<Telemetry>) -> Self {
        let metrics = telemetry.route_handles(&ctx.route, ctx.strategy);
        metrics.inflight.increment(1.0);
        RequestGuard {
            ctx,
            telemetry,
            metrics,
            status: None,
        }
    }

    pub fn ctx(&self) -> &Arc<RequestCtx> {
        &self.ctx
    }

    pub fn finish(&mut self, status: &'static str) {
        self.status.get_or_insert(status);
    }
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        self.metrics.inflight.decrement(1.0);
        let end = self.ctx.end(self.status.unwrap_or("499"));
        self.telemetry.record_request(&end, &self.metrics);
    }
}
