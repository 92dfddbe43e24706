//! Streamed answers as Server-Sent Events. Each upstream chunk goes out as
//! one `data:` event the moment it arrives (usage stripped when the client
//! did not ask for it), then `data: [DONE]`. An error after the first byte
//! becomes one `data: {"error": …}` event and ends the stream.
//!
//! While a model works on its first chunk, keep-alive comments may be sent
//! (`server.sse_keepalive`, or a chain that verifies); the first one commits
//! the status to 200, so a later failure becomes the SSE error event.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::Response;
use bytes::{BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tokio::time::Instant;
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::AppState;
use super::error::ApiError;
use super::reply::{Known, answer_headers, failed, meta_headers};
use super::request::{RequestGuard, Work};
use crate::context::{RequestCtx, Totals};
use crate::graph::Node;
use crate::model::{ChunkStream, Meta, ReplyBody};
use crate::stream::whole_to_stream;
use crate::wire::{UsageField, strip_null_usage, strip_usage};

const KEEPALIVE: &[u8] = b": keep-alive\n\n";
const DONE: &[u8] = b"data: [DONE]\n\n";

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

pub fn keepalive_for(app: &AppState, node: &Node) -> Option<Duration> {
    match (node.keepalive, app.sse_keepalive) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// Answers a streamed request with the reply `work` produces, sending
/// keep-alive comments every `keepalive` while it has none yet.
pub async fn respond(
    keepalive: Option<Duration>,
    node: &Node,
    ctx: &Arc<RequestCtx>,
    mut work: Work,
    include_usage: bool,
    guard: RequestGuard,
) -> Response {
    let result = match keepalive {
        None => work.as_mut().await,
        Some(gap) => tokio::select! {
            r = work.as_mut() => r,
            () = tokio::time::sleep(gap) => {
                let mut resp = Response::new(Body::from_stream(committed(work, gap, ctx.clone(), include_usage, guard)));
                sse_headers(resp.headers_mut());
                answer_headers(resp.headers_mut(), ctx, node, Known::Committed);
                return resp;
            }
        },
    };
    let reply = match result {
        Ok(r) => r,
        Err(e) => return failed(e, ctx, node, guard),
    };
    let mut headers = HeaderMap::new();
    answer_headers(&mut headers, ctx, node, Known::Answer(&reply));
    let stream = match stream_of(reply.body) {
        Ok(s) => s,
        Err(e) => return failed(e, ctx, node, guard),
    };
    let mut resp = Response::new(Body::from_stream(ClientStream::new(
        stream,
        include_usage,
        guard,
    )));
    sse_headers(resp.headers_mut());
    resp.headers_mut().extend(headers);
    resp
}

/// The body of a stream committed (status 200) while the model still
/// works: keep-alive comments until the answer or the error is there.
fn committed(
    mut work: Work,
    gap: Duration,
    ctx: Arc<RequestCtx>,
    include_usage: bool,
    mut guard: RequestGuard,
) -> impl Stream<Item = Result<Bytes, Infallible>> {
    async_stream::stream! {
        yield Ok(Bytes::from_static(KEEPALIVE));
        let mut tick = tokio::time::interval_at(Instant::now() + gap, gap);
        let result = loop {
            let r = tokio::select! {
                r = work.as_mut() => Some(r),
                _ = tick.tick() => None,
            };
            match r {
                Some(r) => break r,
                None => yield Ok(Bytes::from_static(KEEPALIVE)),
            }
        };
        match result.and_then(|r| Ok((r.meta, stream_of(r.body)?))) {
            Ok((meta, s)) => {
                // The headers went out before the answer existed: its
                // meta follows the stream as a comment before [DONE].
                let mut relay = ClientStream::new(s, include_usage, guard).with_trailer(meta);
                while let Some(b) = relay.next().await {
                    yield b;
                }
            }
            Err(e) => {
                tracing::warn!(request_id = %ctx.id, error = %e, "streamed request failed");
                guard.finish("stream_error");
                yield Ok(e.sse_event());
            }
        }
    }
}

/// The SSE body sent to the client.
struct ClientStream {
    inner: ChunkStream,
    include_usage: bool,
    /// Fires when shutdown's grace period is over: the stream ends with
    /// an error event.
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    guard: RequestGuard,
    /// A chunk with usage went out (or there is nothing to send).
    usage_sent: bool,
    /// The last chunk relayed to an `include_usage` client: the model of
    /// an estimated usage chunk copies its `id`, `created` and `model`.
    last: Option<Bytes>,
    /// The upstream ended; `[DONE]` follows the estimated usage chunk
    /// and the trailer.
    ending: bool,
    /// Meta the response headers could not carry, sent as SSE comments.
    trailer: Option<Meta>,
    done: bool,
}

/// The usage chunk for an `include_usage` client whose upstream reported
/// none: the request's totals, marked `"estimated": true`.
fn estimated_usage(last: Option<&Bytes>, totals: Totals) -> Bytes {
    let like: Value = last
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or(Value::Null);
    let chunk = json!({
        "id": like.get("id").cloned().unwrap_or(Value::Null),
        "object": "chat.completion.chunk",
        "created": like.get("created").cloned().unwrap_or(Value::Null),
        "model": like.get("model").cloned().unwrap_or(Value::Null),
        "choices": [],
        "usage": {
            "prompt_tokens": totals.input_tokens,
            "completion_tokens": totals.output_tokens,
            "total_tokens": totals.input_tokens + totals.output_tokens,
            "estimated": true,
        },
    });
    frame(chunk.to_string().as_bytes())
}

impl ClientStream {
    fn with_trailer(mut self, meta: Meta) -> Self {
        self.trailer = Some(meta);
        self
    }

    /// What comes after the upstream's last chunk, one piece per poll: an
    /// estimated usage chunk, the trailer, then `[DONE]`.
    fn tail(&mut self) -> Bytes {
        if !self.usage_sent {
            self.usage_sent = true;
            return estimated_usage(self.last.as_ref(), self.guard.ctx().totals());
        }
        if let Some(meta) = self.trailer.take() {
            let mut out = BytesMut::new();
            for (name, value) in meta_headers(&meta, self.guard.ctx()) {
                out.put_slice(b": ");
                out.put_slice(name.as_str().as_bytes());
                out.put_slice(b": ");
                out.put_slice(value.as_bytes());
                out.put_slice(b"\n");
            }
            out.put_slice(b"\n");
            return out.freeze();
        }
        self.done = true;
        self.guard.finish("200");
        Bytes::from_static(DONE)
    }

    fn new(inner: ChunkStream, include_usage: bool, guard: RequestGuard) -> Self {
        ClientStream {
            inner,
            include_usage,
            shutdown: Box::pin(guard.ctx().shutdown.clone().cancelled_owned()),
            guard,
            usage_sent: !include_usage,
            last: None,
            ending: false,
            trailer: None,
            done: false,
        }
    }
}

fn frame(data: &[u8]) -> Bytes {
    let mut b = BytesMut::with_capacity(data.len() + 8);
    b.put_slice(b"data: ");
    b.put_slice(data);
    b.put_slice(b"\n\n");
    b.freeze()
}

impl Stream for ClientStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        if this.ending {
            return Poll::Ready(Some(Ok(this.tail())));
        }
        if this.shutdown.as_mut().poll(cx).is_ready() {
            this.done = true;
            this.guard.finish("stream_error");
            return Poll::Ready(Some(Ok(ApiError::ShuttingDown.sse_event())));
        }
        loop {
            match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    if this.include_usage {
                        if matches!(chunk.usage, UsageField::Present(_)) {
                            this.usage_sent = true;
                        }
                        let out = frame(&chunk.data);
                        this.last = Some(chunk.data);
                        return Poll::Ready(Some(Ok(out)));
                    }
                    // conclave asked for usage, the client did not: hide it.
                    let data = match chunk.usage {
                        UsageField::Absent => chunk.data,
                        UsageField::Null => strip_null_usage(&chunk.data),
                        UsageField::Present(_) if chunk.choices == 0 => continue,
                        UsageField::Present(_) => strip_usage(&chunk.data).unwrap_or(chunk.data),
                    };
                    return Poll::Ready(Some(Ok(frame(&data))));
                }
                Poll::Ready(Some(Err(e))) => {
                    this.done = true;
                    this.guard.finish("stream_error");
                    tracing::warn!(error = %e, "stream failed after it started");
                    return Poll::Ready(Some(Ok(ApiError::from(e).sse_event())));
                }
                Poll::Ready(None) => {
                    this.ending = true;
                    return Poll::Ready(Some(Ok(this.tail())));
                }
                Poll::Pending => return Poll::Pending,
            }
        }
    }
}
