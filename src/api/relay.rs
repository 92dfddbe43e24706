//! The body of a streamed answer: each upstream chunk is handed to the
//! request's [`Render`] the moment it arrives and written out, then the
//! render's ending; an error after the first byte (the upstream's, or a
//! chunk the render cannot write) becomes the render's error event and
//! ends the stream, as does the end of shutdown's grace period. Meta the response headers could not carry (the stream was
//! committed by keep-alives, or a header was learned after they went out,
//! such as `x-conclave-midstream-failover`) goes out as SSE comments
//! before the end.

use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::{BufMut, Bytes, BytesMut};
use futures::{Stream, StreamExt};
use tokio_util::sync::WaitForCancellationFutureOwned;

use super::error::ApiError;
use super::guard::RequestGuard;
use super::headers::{late_headers, meta_headers};
use super::render::Render;
use crate::model::{ChunkStream, Meta};

/// Most bytes of events gathered into one write.
const MAX_BATCH: usize = 64 * 1024;
/// Scheduler turns a batch waits for more events before it is written
/// (hyper's client hands a body over one chunk per turn of its own
/// connection task; measured, the next chunk is there after two).
const YIELDS: u8 = 2;
/// Writes after which a stream whose yields gathered nothing tries
/// yielding again (its events may have started to come in bursts).
const PROBE_EVERY: u8 = 16;

/// The SSE body sent to the client.
///
/// Events are framed into one buffer and written together when several
/// are ready at once: when the upstream has nothing more at this instant,
/// the task yields to the runtime (so the upstream connection can hand
/// over what it already read) before the batch goes out. A burst is
/// written in one go. A stream whose events arrive apart in time is
/// written event by event: [`YIELDS`] scheduler turns later while yielding
/// gathers events, at once after a write whose yields gathered nothing
/// (trying again every [`PROBE_EVERY`] writes), so a slow stream does not
/// pay two polls an event for batches that never come.
pub struct ClientStream {
    inner: ChunkStream,
    render: Box<dyn Render>,
    /// Fires when shutdown's grace period is over: the stream ends with
    /// an error event.
    shutdown: Pin<Box<WaitForCancellationFutureOwned>>,
    guard: RequestGuard,
    /// Meta the response headers could not carry, sent as SSE comments.
    trailer: Option<Meta>,
    /// Framed events not yet handed to the connection.
    batch: BytesMut,
    /// Times the task yielded with a batch waiting and nothing came.
    yields: u8,
    /// Turns to yield before writing (`YIELDS`, or 0 while yielding
    /// gathers nothing), and writes since it went to 0.
    patience: u8,
    since_probe: u8,
    /// An event came after the task yielded, in this batch.
    gathered: bool,
    done: bool,
}

impl ClientStream {
    /// A stream whose first write starts with the render's opening.
    pub fn new(inner: ChunkStream, mut render: Box<dyn Render>, guard: RequestGuard) -> Self {
        let mut batch = BytesMut::new();
        render.open(&mut batch);
        Self::opened(inner, render, guard).with_batch(batch)
    }

    /// A stream whose opening already went out.
    pub fn opened(inner: ChunkStream, render: Box<dyn Render>, guard: RequestGuard) -> Self {
        ClientStream {
            inner,
            render,
            shutdown: Box::pin(guard.ctx().shutdown.clone().cancelled_owned()),
            guard,
            trailer: None,
            batch: BytesMut::new(),
            yields: 0,
            patience: YIELDS,
            since_probe: 0,
            gathered: false,
            done: false,
        }
    }

    fn with_batch(mut self, batch: BytesMut) -> Self {
        self.batch = batch;
        self
    }

    pub fn with_trailer(mut self, meta: Meta) -> Self {
        self.trailer = Some(meta);
        self
    }

    /// What follows the upstream's last chunk: the trailer (or, when the
    /// headers went out with the answer's meta, the headers learned since),
    /// then the render's ending.
    fn end(&mut self) {
        let trailer = match self.trailer.take() {
            Some(meta) => meta_headers(&meta, self.guard.ctx()),
            None => late_headers(self.guard.ctx()),
        };
        if !trailer.is_empty() {
            for (name, value) in trailer {
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
        let totals = self.guard.ctx().totals();
        self.render.end(totals, &mut self.batch);
        self.guard.finish("200");
    }

    /// Ends the stream with an error event after what is batched.
    fn fail(&mut self, e: &ApiError) {
        self.guard.finish("stream_error");
        self.render.fail(e, &mut self.batch);
    }

    fn flush(&mut self) -> Poll<Option<Result<Bytes, Infallible>>> {
        if self.patience == 0 {
            self.since_probe += 1;
            if self.since_probe >= PROBE_EVERY {
                (self.patience, self.since_probe) = (YIELDS, 0);
            }
        } else if self.yields > 0 && !self.gathered {
            self.patience = 0;
        }
        self.yields = 0;
        self.gathered = false;
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
            this.fail(&ApiError::ShuttingDown);
            return this.flush();
        }
        loop {
            match this.inner.poll_next_unpin(cx) {
                Poll::Ready(Some(Ok(chunk))) => {
                    this.gathered |= this.yields > 0;
                    this.yields = 0;
                    if chunk.real {
                        this.guard.ctx().first_token();
                    }
                    if let Err(e) = this.render.chunk(chunk, &mut this.batch) {
                        tracing::warn!(error = %e, "a stream chunk could not be written");
                        this.done = true;
                        this.fail(&e);
                        return this.flush();
                    }
                    if this.batch.len() >= MAX_BATCH {
                        return this.flush();
                    }
                }
                Poll::Ready(Some(Err(e))) => {
                    tracing::warn!(error = %e, "stream failed after it started");
                    this.done = true;
                    this.fail(&ApiError::from(e));
                    return this.flush();
                }
                Poll::Ready(None) => {
                    this.done = true;
                    this.end();
                    return this.flush();
                }
                Poll::Pending if this.batch.is_empty() => return Poll::Pending,
                Poll::Pending if this.yields < this.patience => {
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
    use std::sync::Arc;
    use std::time::Duration;

    use tokio::time::Instant;

    use super::*;
    use crate::api::chat::ChatRender;
    use crate::model::Chunk;
    use crate::wire::UsageField;

    fn chunk(text: &str) -> Chunk {
        let data = format!(r#"{{"choices":[{{"delta":{{"content":"{text}"}}}}],"usage":null}}"#);
        Chunk {
            data: Bytes::from(data),
            usage: UsageField::Null,
            usage_at: None,
            choices: 1,
            real: true,
            loading: false,
        }
    }

    fn client(inner: ChunkStream) -> ClientStream {
        let ctx = crate::context::test_ctx();
        let telemetry = crate::telemetry::Telemetry::for_tests();
        let render = Box::new(ChatRender::new(false));
        ClientStream::new(inner, render, RequestGuard::new(Arc::new(ctx), telemetry))
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
    async fn a_slow_stream_stops_yielding_for_batches_that_never_come() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        let polls = Arc::new(AtomicUsize::new(0));
        let counted = polls.clone();
        let events = async_stream::stream! {
            for t in ["a", "b", "c", "d", "e"] {
                tokio::time::sleep(Duration::from_secs(1)).await;
                yield Ok(chunk(t));
            }
        };
        let mut events = Box::pin(events);
        let s = futures::stream::poll_fn(move |cx| {
            counted.fetch_add(1, Ordering::Relaxed);
            events.as_mut().poll_next(cx)
        });
        let got = writes(client(ChunkStream::new(s))).await;
        assert_eq!(got.len(), 5, "{got:?}");
        // The first event waits two turns for company; the others go out
        // at once: a poll that brings the event, one that finds nothing
        // (and the sleeps' wake-ups).
        let n = polls.load(Ordering::Relaxed);
        assert!(n <= 20, "{n} polls");
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
