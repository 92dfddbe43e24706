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
use crate::model::{Chunk, ChunkStream, Meta, ReplyBody};
use crate::stream::whole_to_stream;
use crate::wire::{UsageField, null_usage_span, strip_usage};

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

/// Most bytes of events gathered into one write.
const MAX_BATCH: usize = 64 * 1024;
/// Scheduler turns a batch waits for more events before it is written
/// (hyper's client hands a body over one chunk per turn of its own
/// connection task; measured, the next chunk is there after two).
const YIELDS: u8 = 2;

/// The SSE body sent to the client.
///
/// Events are framed into one buffer and written together when several
/// are ready at once: when the upstream has nothing more at this instant,
/// the task yields to the runtime (so the upstream connection can hand
/// over what it already read) before the batch goes out. A stream whose
/// events arrive apart in time is written event by event, [`YIELDS`]
/// scheduler turns later; a burst is written in one go.
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
    /// Meta the response headers could not carry, sent as SSE comments.
    trailer: Option<Meta>,
    /// Framed events not yet handed to the connection.
    batch: BytesMut,
    /// Times the task yielded with a batch waiting and nothing came.
    yields: u8,
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
    Bytes::from(chunk.to_string())
}

/// Appends one `data:` event made of `parts` (the payload, possibly in
/// pieces around an edit).
fn frame_into(out: &mut BytesMut, parts: &[&[u8]]) {
    out.reserve(parts.iter().map(|p| p.len()).sum::<usize>() + 8);
    out.put_slice(b"data: ");
    for part in parts {
        out.put_slice(part);
    }
    out.put_slice(b"\n\n");
}

impl ClientStream {
    fn new(inner: ChunkStream, include_usage: bool, guard: RequestGuard) -> Self {
        ClientStream {
            inner,
            include_usage,
            shutdown: Box::pin(guard.ctx().shutdown.clone().cancelled_owned()),
            guard,
            usage_sent: !include_usage,
            last: None,
            trailer: None,
            batch: BytesMut::new(),
            yields: 0,
            done: false,
        }
    }

    fn with_trailer(mut self, meta: Meta) -> Self {
        self.trailer = Some(meta);
        self
    }

    /// Frames one upstream chunk: as the upstream's own bytes, with usage
    /// left out when conclave asked for it and the client did not.
    fn push(&mut self, chunk: Chunk) {
        if chunk.real {
            self.guard.ctx().first_token();
        }
        let data = chunk.data;
        if self.include_usage {
            if matches!(chunk.usage, UsageField::Present(_)) {
                self.usage_sent = true;
            }
            frame_into(&mut self.batch, &[&data]);
            self.last = Some(data);
            return;
        }
        match chunk.usage {
            UsageField::Absent => frame_into(&mut self.batch, &[&data]),
            UsageField::Present(_) if chunk.choices == 0 => {}
            usage => match null_usage_span(&data).filter(|_| usage == UsageField::Null) {
                Some(cut) => {
                    frame_into(&mut self.batch, &[&data[..cut.start], &data[cut.end..]]);
                }
                None => {
                    let edited = strip_usage(&data).unwrap_or(data);
                    frame_into(&mut self.batch, &[&edited]);
                }
            },
        }
    }

    /// What follows the upstream's last chunk: an estimated usage chunk
    /// (when the client asked for usage and none came), the trailer, then
    /// `[DONE]`.
    fn end(&mut self) {
        if !self.usage_sent {
            let usage = estimated_usage(self.last.as_ref(), self.guard.ctx().totals());
            frame_into(&mut self.batch, &[&usage]);
        }
        if let Some(meta) = self.trailer.take() {
            for (name, value) in meta_headers(&meta, self.guard.ctx()) {
                for part in [
                    b": ",
                    name.as_str().as_bytes(),
                    b": ",
                    value.as_bytes(),
                    b"\n",
                ] {
                    self.batch.put_slice(part);
                }
            }
            self.batch.put_slice(b"\n");
        }
        self.batch.put_slice(DONE);
        self.guard.finish("200");
    }

    /// Ends the stream with an error event after what is batched.
    fn fail(&mut self, event: Bytes) {
        self.guard.finish("stream_error");
        self.batch.put_slice(&event);
    }

    fn flush(&mut self) -> Poll<Option<Result<Bytes, Infallible>>> {
        self.yields = 0;
        Poll::Ready(Some(Ok(self.batch.split().freeze())))
    }
}

impl Stream for ClientStream {
    type Item = Result<Bytes, Infallible>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = &mut *self;
        if this.done {
            return Poll::Ready(None);
        }
        // (Not re-checked on the polls that follow the stream's own yields.)
        if this.yields == 0 && this.shutdown.as_mut().poll(cx).is_ready() {
            this.done = true;
            this.fail(ApiError::ShuttingDown.sse_event());
            return this.flush();
        }
        loop {
            match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    this.yields = 0;
                    this.push(chunk);
                    if this.batch.len() >= MAX_BATCH {
                        return this.flush();
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    tracing::warn!(error = %e, "stream failed after it started");
                    this.done = true;
                    this.fail(ApiError::from(e).sse_event());
                    return this.flush();
                }
                Poll::Ready(None) => {
                    this.done = true;
                    this.end();
                    return this.flush();
                }
                Poll::Pending if this.batch.is_empty() => return Poll::Pending,
                Poll::Pending if this.yields < YIELDS => {
                    // Let the upstream connection run before writing: it
                    // may hold the next events already.
                    this.yields += 1;
                    cx.waker().wake_by_ref();
                    return Poll::Pending;
                }
                Poll::Pending => return this.flush(),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn chunk(text: &str) -> Chunk {
        let data = format!(r#"{{"choices":[{{"delta":{{"content":"{text}"}}}}],"usage":null}}"#);
        Chunk {
            data: Bytes::from(data),
            usage: UsageField::Null,
            choices: 1,
            real: true,
            loading: false,
        }
    }

    fn client(inner: ChunkStream) -> ClientStream {
        let ctx = crate::context::test_ctx();
        let telemetry = crate::telemetry::Telemetry::for_tests();
        ClientStream::new(inner, false, RequestGuard::new(Arc::new(ctx), telemetry))
    }

    async fn writes(mut s: ClientStream) -> Vec<String> {
        let mut out = Vec::new();
        while let Some(Ok(b)) = s.next().await {
            out.push(String::from_utf8_lossy(&b).into_owned());
        }
        out
    }

    #[tokio::test]
    async fn events_ready_together_go_out_in_one_write() {
        let got = writes(client(ChunkStream::replay(vec![chunk("a"), chunk("b")]))).await;
        let a = r#"data: {"choices":[{"delta":{"content":"a"}}]}"#;
        let b = r#"data: {"choices":[{"delta":{"content":"b"}}]}"#;
        assert_eq!(got, vec![format!("{a}\n\n{b}\n\ndata: [DONE]\n\n")]);
    }

    #[tokio::test]
    async fn events_handed_over_one_per_turn_are_still_batched() {
        // Like hyper's client body: a task that can hand over one chunk,
        // then waits for the reader to take it.
        let (mut tx, rx) = futures::channel::mpsc::channel(0);
        tokio::spawn(async move {
            for t in ["a", "b", "c"] {
                let _ = futures::SinkExt::send(&mut tx, Ok(chunk(t))).await;
            }
        });
        let s = rx;
        let got = writes(client(ChunkStream::new(s))).await;
        assert_eq!(got.len(), 1, "{got:?}");
        assert_eq!(got[0].matches("data: ").count(), 4);
    }

    #[tokio::test(start_paused = true)]
    async fn events_apart_in_time_go_out_as_they_come() {
        let t0 = Instant::now();
        let s = async_stream::stream! {
            yield Ok(chunk("a"));
            tokio::time::sleep(Duration::from_secs(1)).await;
            yield Ok(chunk("b"));
        };
        let mut s = client(ChunkStream::new(s));
        let first = s.next().await;
        assert_eq!(Instant::now(), t0, "the first event waited for the second");
        assert!(matches!(first, Some(Ok(b)) if b.starts_with(b"data: ")));
        assert_eq!(writes(s).await.len(), 1);
    }
}
