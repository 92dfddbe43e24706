//! The life of one model request, shared by every handler that runs a
//! model: admit it (state, caller, body), resolve its model, open its
//! context and guard, bound its work by the deadline and shutdown, answer
//! in kind, and record it when it ends.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use metrics::{counter, gauge};
use serde_json::Value;
use tokio::time::timeout_at;

use super::auth::Caller;
use super::error::ApiError;
use super::reply::{REQUEST_ID, whole};
use super::{AppState, Gateway, body, sse};
use crate::context::{Options, RequestCtx};
use crate::error::ModelError;
use crate::governor::{RateHeaders, record_rejection};
use crate::graph::Node;
use crate::model::{CallSize, Reply};
use crate::telemetry::{INFLIGHT_REQUESTS, REQUESTS_TOTAL, Telemetry, status_label};
use crate::wire::billing::Billable;

/// The response of a handler that may have failed before its route was
/// known (counted under `route="unknown"`), with the request id.
pub fn finish_response(gw: &Gateway, resp: Result<Response, ApiError>, id: &str) -> Response {
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
            e.into_response()
        }
    };
    if let Ok(v) = HeaderValue::from_str(id) {
        resp.headers_mut().insert(REQUEST_ID, v);
    }
    resp
}

/// The client's `x-request-id` when it is a sane token, else a new UUID.
pub fn request_id(headers: &HeaderMap) -> String {
    headers
        .get(REQUEST_ID)
        .and_then(|v| v.to_str().ok())
        .filter(|v| !v.is_empty() && v.len() <= 128 && v.bytes().all(|b| b.is_ascii_graphic()))
        .map(str::to_owned)
        .unwrap_or_else(|| uuid::Uuid::new_v4().hyphenated().to_string())
}

/// The first steps of every model request: the current state, the
/// caller behind the credentials, and the body within its limits.
pub async fn admit(
    gw: &Gateway,
    headers: &HeaderMap,
    body: Body,
) -> Result<(Arc<AppState>, Caller, Bytes), ApiError> {
    let app = gw.state();
    let caller = app.keys.authenticate(headers)?;
    let body = body::read(
        body,
        headers,
        app.max_body_bytes,
        app.body_read_timeout,
        &gw.stop,
    )
    .await?;
    Ok((app, caller, body))
}

/// The node a client's `model` names, if the caller may use it. A model
/// the caller may not use is not found, exactly as an unknown one.
pub fn resolve<'a>(
    app: &'a AppState,
    caller: &Caller,
    model: &str,
) -> Result<(&'a Arc<str>, &'a Node), ApiError> {
    app.graph
        .get(model)
        .filter(|(route, _)| caller.may_use(route))
        .ok_or_else(|| ApiError::NotFound {
            model: model.to_owned(),
        })
}

/// What a request asks of a node, for its key's limits: the size of
/// one call, and whether the client capped its output.
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    pub size: CallSize,
    pub capped: bool,
}

impl Asked {
    /// A request billable for `bill`, its output at the gateway's
    /// assumption (times its answers) when the client set no cap.
    pub fn new(app: &AppState, bill: Billable, answers: u64) -> Self {
        let assumed = u64::from(app.estimate_output_tokens).saturating_mul(answers);
        Asked {
            size: CallSize {
                input: bill.input,
                images: bill.images,
                output: bill.output.unwrap_or(assumed),
            },
            capped: bill.output.is_some(),
        }
    }
}

/// An opened request: its context, the guard that records it when it
/// ends, and the key's `x-ratelimit-*` figures for its response.
pub struct Opened {
    pub ctx: Arc<RequestCtx>,
    pub guard: RequestGuard,
    pub limits: RateHeaders,
}

/// Opens a request on `route` if the caller's key lets it in (its rate
/// limits and budget, for what `node` may spend on `asked`): its context
/// (deadline, key, shutdown, access log, budget ticket) and guard. A
/// request turned away is recorded as a 429 and its rejection logged.
pub fn open(
    gw: &Gateway,
    app: &AppState,
    id: &str,
    (route, node): (&Arc<str>, &Node),
    caller: Caller,
    options: Options,
    asked: Asked,
) -> Result<Opened, ApiError> {
    let admitted = caller
        .gov
        .as_ref()
        .map(|g| g.admit(node.model.estimate(asked.size), asked.capped))
        .transpose();
    let mut ctx = RequestCtx::new(
        id.to_owned(),
        route.clone(),
        node.strategy,
        caller.name,
        app.request_timeout,
        app.telemetry.reporters(),
        gw.hard.clone(),
    )
    .with_access_log(app.access_log)
    .with_trace(
        app.telemetry
            .tracer
            .as_ref()
            .and_then(|t| t.start(options.trace_parent.as_ref(), app.clock.now())),
    )
    .with_options(options);
    let mut limits = RateHeaders::default();
    let rejected = match admitted {
        Ok(Some(a)) => {
            limits = a.headers;
            if let Some(t) = a.ticket {
                ctx = ctx.with_sink(t);
            }
            None
        }
        Ok(None) => None,
        Err(r) => Some(r),
    };
    let ctx = Arc::new(ctx);
    let mut guard = RequestGuard::new(ctx.clone(), app.telemetry.clone());
    if let Some(r) = rejected {
        let retry = r.retry_after.map_or(Value::Null, Value::from);
        record_rejection(&ctx, r.scope, r.limit, r.asked, &[("retry_after_s", retry)]);
        guard.finish("429");
        return Err(ApiError::Governed(r));
    }
    Ok(Opened { ctx, guard, limits })
}

/// Adds a limited key's `x-ratelimit-*` headers to its response.
pub fn with_limits(mut resp: Response, limits: &RateHeaders) -> Response {
    for (name, value) in limits.pairs() {
        if let Ok(v) = HeaderValue::from_str(&value) {
            resp.headers_mut().insert(name, v);
        }
    }
    resp
}

/// Answers in kind: SSE for a streamed request, a whole body otherwise.
pub async fn in_kind(
    stream: bool,
    keepalive: Option<Duration>,
    node: &Node,
    ctx: &Arc<RequestCtx>,
    work: Work,
    include_usage: bool,
    guard: RequestGuard,
) -> Response {
    if stream {
        sse::respond(keepalive, node, ctx, work, include_usage, guard).await
    } else {
        whole(node, ctx, work, guard).await
    }
}

/// A model's answer in the making, bounded by its request (see [`bounded`]).
pub type Work = Pin<Box<dyn Future<Output = Result<Reply, ApiError>> + Send>>;

/// Runs a model's work under the request's deadline, until shutdown's
/// grace period ends it.
pub async fn bounded(
    ctx: Arc<RequestCtx>,
    work: impl Future<Output = Result<Reply, ModelError>>,
) -> Result<Reply, ApiError> {
    tokio::select! {
        r = timeout_at(ctx.deadline, work) => match r {
            Err(_) => Err(ApiError::Timeout {
                after: ctx.deadline - ctx.started,
            }),
            Ok(r) => r.map_err(ApiError::from),
        },
        () = ctx.shutdown.cancelled() => Err(ApiError::ShuttingDown),
    }
}

/// Tracks one request in flight and records it when it ends. Dropped
/// without a status, the client went away first (`499`).
pub struct RequestGuard {
    ctx: Arc<RequestCtx>,
    telemetry: Arc<Telemetry>,
    status: Option<&'static str>,
}

impl RequestGuard {
    pub fn new(ctx: Arc<RequestCtx>, telemetry: Arc<Telemetry>) -> Self {
        let route = ctx.route.clone();
        ctx.metrics
            .scope(|| gauge!(INFLIGHT_REQUESTS, "route" => route).increment(1.0));
        RequestGuard {
            ctx,
            telemetry,
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
        let route = self.ctx.route.clone();
        self.ctx
            .metrics
            .scope(|| gauge!(INFLIGHT_REQUESTS, "route" => route).decrement(1.0));
        let end = self.ctx.end(self.status.unwrap_or("499"));
        self.telemetry.record_request(&end);
    }
}
