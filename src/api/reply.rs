//! How answers go out: a whole JSON body, an error response of a request
//! that reached its route, and the `x-conclave-*` headers, written from
//! whatever the reply's meta holds (no strategy-specific code here).

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};
use axum::response::{IntoResponse, Response};

use super::error::ApiError;
use super::request::{RequestGuard, Work};
use crate::context::RequestCtx;
use crate::graph::Node;
use crate::model::{Meta, Reply, ReplyBody};
use crate::telemetry::status_label;

pub const ROUTE: HeaderName = HeaderName::from_static("x-conclave-route");
pub const STRATEGY: HeaderName = HeaderName::from_static("x-conclave-strategy");
pub const SERVED_BY: HeaderName = HeaderName::from_static("x-conclave-served-by");
pub const ATTEMPTS: HeaderName = HeaderName::from_static("x-conclave-attempts");
pub const REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

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
    // A whole answer's first token reaches the client with the rest.
    ctx.first_token();
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
