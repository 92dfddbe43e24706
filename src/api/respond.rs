//! How answers go out, whole or streamed, in whatever dialect the
//! request's [`Render`] writes: a whole JSON body; a stream of events
//! (relayed by [`relay`](super::relay)); the error response of a request
//! that reached its route; each with the `x-conclave-*` headers
//! ([`super::headers`], no strategy-specific code there). A request's
//! bounded work ([`Work`]) is awaited here.
//!
//! While a model works on its first chunk, keep-alive comments may be sent
//! (`server.sse_keepalive`, or a chain that verifies); the first one commits
//! the status to 200, so a later failure becomes the dialect's stream
//! error event.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use bytes::{Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio::time::Instant;

use super::AppState;
use super::error::{ApiError, ErrorStyle};
use super::guard::RequestGuard;
use super::headers::{Known, answer_headers, answer_map};
use super::relay::ClientStream;
use super::render::Render;
use crate::context::RequestCtx;
use crate::graph::Node;
use crate::model::{ChunkStream, Reply, ReplyBody};
use crate::stream::whole_to_stream;
use crate::telemetry::status_label;

/// A model's answer in the making, bounded by its request (see
/// `super::ingress`).
pub type Work = Pin<Box<dyn Future<Output = Result<Reply, ApiError>> + Send>>;

/// Everything an answer is written with.
pub struct Answer<'a> {
    pub node: &'a Node,
    pub ctx: &'a std::sync::Arc<RequestCtx>,
    pub render: Box<dyn Render>,
    pub guard: RequestGuard,
    /// The shape of an error response.
    pub style: ErrorStyle,
}

/// Answers with a whole JSON body.
pub async fn whole(a: Answer<'_>, work: Work) -> Response {
    let Answer {
        node,
        ctx,
        mut render,
        mut guard,
        style,
    } = a;
    let reply = match work.await {
        Ok(r) => r,
        Err(e) => return failed(e, style, ctx, node, guard),
    };
    let ReplyBody::Whole(completion) = &reply.body else {
        let e = ApiError::Internal("the model answered a whole request with a stream".into());
        return failed(e, style, ctx, node, guard);
    };
    // A whole answer's first token reaches the client with the rest.
    ctx.first_token();
    let body = match render.whole(&completion.body, ctx.totals()) {
        Ok(b) => b,
        Err(e) => return failed(e, style, ctx, node, guard),
    };
    let mut resp = Response::new(Body::from(body));
    *resp.headers_mut() = answer_map();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    answer_headers(resp.headers_mut(), ctx, node, Known::Answer(&reply.meta));
    guard.finish("200");
    resp
}

/// The error response of a request that reached its route.
pub fn failed(
    e: ApiError,
    style: ErrorStyle,
    ctx: &RequestCtx,
    node: &Node,
    mut guard: RequestGuard,
) -> Response {
    guard.finish(status_label(e.status().as_u16()));
    let mut resp = e.respond(style);
    answer_headers(resp.headers_mut(), ctx, node, Known::Failed);
    resp
}

/// The stream of a streamed request's reply: a strategy that worked on a
/// whole answer has it turned into chunks.
fn stream_of(body: ReplyBody) -> Result<ChunkStream, ApiError> {
    match body {
        ReplyBody::Stream(s) => Ok(s),
        ReplyBody::Whole(c) => whole_to_stream(&c).map_err(ApiError::from),
    }
}

fn sse_headers(h: &mut HeaderMap) {
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
}

/// The keep-alive gap of a streamed request to `node`: the shorter of
/// the node's own (a verifying chain) and the server's.
pub fn keepalive_for(app: &AppState, node: &Node) -> Option<Duration> {
    match (node.keepalive, app.sse_keepalive) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Answers a streamed request with the reply `work` produces, sending
/// keep-alive comments every `keepalive` while it has none yet.
pub async fn stream(a: Answer<'_>, keepalive: Option<Duration>, mut work: Work) -> Response {
    let Answer {
        node,
        ctx,
        render,
        guard,
        style,
    } = a;
    let result = match keepalive {
        None => work.as_mut().await,
        Some(gap) => tokio::select! {
            r = work.as_mut() => r,
            () = tokio::time::sleep(gap) => {
                let body = committed(work, gap, ctx.clone(), render, guard);
                let mut resp = Response::new(Body::from_stream(body));
                sse_headers(resp.headers_mut());
                answer_headers(resp.headers_mut(), ctx, node, Known::Committed);
                return resp;
            }
        },
    };
    let reply = match result {
        Ok(r) => r,
        Err(e) => return failed(e, style, ctx, node, guard),
    };
    let mut headers = answer_map();
    sse_headers(&mut headers);
    answer_headers(&mut headers, ctx, node, Known::Answer(&reply.meta));
    let stream = match stream_of(reply.body) {
        Ok(s) => s,
        Err(e) => return failed(e, style, ctx, node, guard),
    };
    let mut resp = Response::new(Body::from_stream(ClientStream::new(stream, render, guard)));
    *resp.headers_mut() = headers;
    resp
}

/// The body of a stream committed (status 200) while the model still
/// works: the dialect's opening, then keep-alive comments until the
/// answer or the error is there.
fn committed(
    mut work: Work,
    gap: Duration,
    ctx: std::sync::Arc<RequestCtx>,
    mut render: Box<dyn Render>,
    mut guard: RequestGuard,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    async_stream::stream! {
        let mut first = BytesMut::new();
        render.open(&mut first);
        render.keepalive(&mut first);
        yield Ok(first.freeze());
        let mut tick = tokio::time::interval_at(Instant::now() + gap, gap);
        let result = loop {
            let r = tokio::select! {
                r = work.as_mut() => Some(r),
                _ = tick.tick() => None,
            };
            match r {
                Some(r) => break r,
                None => {
                    let mut ping = BytesMut::new();
                    render.keepalive(&mut ping);
                    yield Ok(ping.freeze());
                }
            }
        };
        match result.and_then(|r| Ok((r.meta, stream_of(r.body)?))) {
            Ok((meta, s)) => {
                // The headers went out before the answer existed: its
                // meta follows the stream as comments before its end.
                let mut relay = ClientStream::opened(s, render, guard).with_trailer(meta);
                while let Some(b) = relay.next().await {
                    yield b;
                }
            }
            Err(e) => {
                tracing::warn!(request_id = %ctx.id, error = %e, "streamed request failed");
                guard.finish("stream_error");
                let mut out = BytesMut::new();
                render.fail(&e, &mut out);
                yield Ok(out.freeze());
            }
        }
    }
}
