//! `POST /v1/chat/completions`: authenticate, parse the body once, resolve
//! the model name to a graph node, run it under the request's deadline, and
//! answer whole or as SSE with conclave's response headers.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use metrics::{counter, gauge};
use tokio::time::timeout_at;

use super::auth::Caller;
use super::error::ApiError;
use super::{AppState, Gateway, body, options, sse};
use crate::context::{Options, RequestCtx};
use crate::error::ModelError;
use crate::graph::Node;
use crate::model::{Call, Meta, Reply, ReplyBody};
use crate::telemetry::{INFLIGHT_REQUESTS, REQUESTS_TOTAL, record_request, status_label};
use crate::wire::ChatRequest;

pub const ROUTE: HeaderName = HeaderName::from_static("x-conclave-route");
pub const STRATEGY: HeaderName = HeaderName::from_static("x-conclave-strategy");
pub const SERVED_BY: HeaderName = HeaderName::from_static("x-conclave-served-by");
pub const ATTEMPTS: HeaderName = HeaderName::from_static("x-conclave-attempts");
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

pub async fn chat_completions(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = request_id(&headers);
    let resp = handle(&gw, &headers, body, &id).await;
    finish_response(resp, &id)
}

/// The response of a handler that may have failed before its route was
/// known (counted under `route="unknown"`), with the request id.
pub fn finish_response(resp: Result<Response, ApiError>, id: &str) -> Response {
    let mut resp = match resp {
        Ok(r) => r,
        Err(e) => {
            counter!(REQUESTS_TOTAL, "route" => "unknown", "strategy" => "none", "status" => status_label(e.status().as_u16()))
                .increment(1);
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

/// Reads the body as a `ChatRequest`, with OpenAI-style messages that say
/// which field is wrong.
pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let syntax = |inner: serde_json::Error| ApiError::BadRequest {
        message: format!("We could not parse the JSON body of your request ({inner})."),
        param: None,
        code: Some("invalid_json"),
    };
    let mut de = serde_json::Deserializer::from_slice(body);
    let req = serde_path_to_error::deserialize::<_, ChatRequest>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return syntax(inner);
        }
        let msg = inner.to_string();
        let param = match path.as_str() {
            "." => msg
                .strip_prefix("missing field `")
                .and_then(|r| r.split('`').next())
                .map(str::to_owned),
            p => Some(p.to_owned()),
        };
        ApiError::BadRequest {
            message: format!("Invalid request body: {msg}"),
            param,
            code: Some("invalid_request_body"),
        }
    })?;
    de.end().map_err(syntax)?;
    if req.model.is_empty() {
        return Err(ApiError::BadRequest {
            message: "`model` must not be empty.".into(),
            param: Some("model".into()),
            code: Some("invalid_request_body"),
        });
    }
    if req.messages.is_empty() {
        return Err(ApiError::BadRequest {
            message: "`messages` must contain at least one message.".into(),
            param: Some("messages".into()),
            code: Some("invalid_request_body"),
        });
    }
    Ok(req)
}

async fn handle(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    body: Body,
    id: &str,
) -> Result<Response, ApiError> {
    let (app, caller, body) = admit(gw, headers, body).await?;
    let req = parse(&body)?;
    drop(body);
    let (route, node) = resolve(&app, &caller, &req.model)?;
    let opts = options::read(headers)?;
    let (ctx, guard) = open(gw, &app, id, route, node, caller, opts);
    let call = Call::new(ctx.clone());
    let include_usage = req.wants_stream_usage();
    let stream = req.is_stream();
    let model = node.model.clone();
    let req = Arc::new(req);
    let work: Work = Box::pin(bounded(
        ctx.clone(),
        async move { model.chat(call, req).await },
    ));
    let keepalive = sse::keepalive_for(&app, node);
    Ok(in_kind(stream, keepalive, node, &ctx, work, include_usage, guard).await)
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

/// The node a client's `model` names, if the caller may use it.
pub fn resolve<'a>(
    app: &'a AppState,
    caller: &Caller,
    model: &str,
) -> Result<(&'a Arc<str>, &'a Node), ApiError> {
    let (route, node) = app.graph.get(model).ok_or_else(|| ApiError::NotFound {
        model: model.to_owned(),
    })?;
    if !caller.may_use(route) {
        return Err(ApiError::Forbidden {
            model: model.to_owned(),
        });
    }
    Ok((route, node))
}

/// Opens a request on `route`: its context (deadline, key, shutdown,
/// access log) and the guard that records it when it ends.
pub fn open(
    gw: &Gateway,
    app: &AppState,
    id: &str,
    route: &Arc<str>,
    node: &Node,
    caller: Caller,
    options: Options,
) -> (Arc<RequestCtx>, RequestGuard) {
    let ctx = Arc::new(
        RequestCtx::new(
            id.to_owned(),
            route.clone(),
            node.strategy,
            caller.name,
            app.request_timeout,
            app.telemetry.clone(),
            gw.hard.clone(),
        )
        .with_access_log(app.access_log)
        .with_options(options),
    );
    let guard = RequestGuard::new(ctx.clone());
    (ctx, guard)
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

/// Answers with a whole JSON body.
pub async fn whole(node: &Node, ctx: &RequestCtx, work: Work, mut guard: RequestGuard) -> Response {
    let reply = match work.await {
        Ok(r) => r,
        Err(e) => return failed(e, ctx, node, guard),
    };
    let ReplyBody::Whole(completion) = &reply.body else {
        let e = ApiError::Internal("the model answered a whole request with a stream".into());
        return failed(e, ctx, node, guard);
    };
    let mut resp = Response::new(Body::from(completion.body.clone()));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    answer_headers(resp.headers_mut(), ctx, node, Known::Answer(&reply));
    guard.finish("200");
    resp
}

/// The error response of a request that reached its route.
pub fn failed(e: ApiError, ctx: &RequestCtx, node: &Node, mut guard: RequestGuard) -> Response {
    guard.finish(status_label(e.status().as_u16()));
    let mut resp = e.into_response();
    answer_headers(resp.headers_mut(), ctx, node, Known::Failed);
    resp
}

/// What is known about the answer when the response headers go out.
pub enum Known<'a> {
    /// Keep-alives were sent before any answer existed.
    Committed,
    Answer(&'a Reply),
    Failed,
}

/// The `x-conclave-*` response headers.
pub fn answer_headers(h: &mut HeaderMap, ctx: &RequestCtx, node: &Node, known: Known<'_>) {
    if let Ok(v) = HeaderValue::from_str(&ctx.route) {
        h.insert(ROUTE, v);
    }
    h.insert(STRATEGY, HeaderValue::from_static(node.strategy));
    match known {
        Known::Committed => {}
        Known::Failed => {
            h.insert(ATTEMPTS, HeaderValue::from(ctx.attempts()));
        }
        Known::Answer(reply) => {
            for (name, value) in meta_headers(&reply.meta, ctx) {
                h.insert(name, value);
            }
        }
    }
}

/// The headers an answer's meta becomes, with the attempt count so far.
pub fn meta_headers(meta: &Meta, ctx: &RequestCtx) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::with_capacity(meta.headers.len() + 2);
    if let Some(v) = meta
        .served_by
        .as_deref()
        .and_then(|s| HeaderValue::from_str(s).ok())
    {
        out.push((SERVED_BY, v));
    }
    out.push((ATTEMPTS, HeaderValue::from(ctx.attempts())));
    out.extend(meta.headers.iter().cloned());
    out
}

/// Tracks one request in flight and records it when it ends. Dropped
/// without a status, the client went away first (`499`).
pub struct RequestGuard {
    ctx: Arc<RequestCtx>,
    status: Option<&'static str>,
}

impl RequestGuard {
    pub fn new(ctx: Arc<RequestCtx>) -> Self {
        gauge!(INFLIGHT_REQUESTS, "route" => ctx.route.clone()).increment(1.0);
        RequestGuard { ctx, status: None }
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
        gauge!(INFLIGHT_REQUESTS, "route" => self.ctx.route.clone()).decrement(1.0);
        record_request(&self.ctx, self.status.unwrap_or("499"));
    }
}
