//! The HTTP server loop: accepts connections, serves each with hyper, and
//! keeps clients from holding resources.
//!
//! - At most `server.max_connections` connections are open; beyond that the
//!   loop stops accepting, so new connections wait in the kernel's backlog
//!   and use no file descriptor.
//! - A request head must arrive within `server.header_read_timeout` of its
//!   first byte, and a connection with no request in flight is closed after
//!   `server.idle_timeout` (a per-connection watchdog; hyper's own header
//!   timer is set to their sum as a backstop). The body's deadline is the
//!   handler's (`api`), the answer's the request's.
//! - Shutdown (`stop`): the listener closes, idle and half-read connections
//!   close at once, busy ones finish their request and close. Whatever is
//!   still running after `server.shutdown_grace` is told to end (`hard`:
//!   a 503, or an SSE error event) and is dropped soon after.

use std::convert::Infallible;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::Request;
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use pin_project_lite::pin_project;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tokio_util::sync::CancellationToken;
use tower::ServiceExt;

/// How long requests told to end at the grace deadline get to say so.
const HARD_STOP: Duration = Duration::from_secs(2);

/// The server's limits, from `[server]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub shutdown_grace: Duration,
}

/// Serves `router` on `listener` until `stop` is cancelled, then drains
/// (see the module docs); cancels `hard` when the grace period runs out.
pub async fn run(
    listener: TcpListener,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
    hard: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(limits.max_connections));
    let mut conns = JoinSet::new();
    loop {
        tokio::select! {
            biased;
            () = stop.cancelled() => break,
            Some(_) = conns.join_next(), if !conns.is_empty() => {}
            permit = slots.clone().acquire_owned() => {
                let Ok(permit) = permit else { break };
                tokio::select! {
                    biased;
                    () = stop.cancelled() => break,
                    accepted = listener.accept() => match accepted {
                        Ok((tcp, _)) => {
                            conns.spawn(connection(tcp, router.clone(), limits, stop.clone(), permit));
                        }
                        Err(e) => {
                            // Out of file descriptors, or a connection reset
                            // before it was accepted: wait, never exit.
                            tracing::warn!("accept failed: {e}");
                            sleep(Duration::from_millis(50)).await;
                        }
                    },
                }
            }
        }
    }
    drop(listener);
    let drain = async { while conns.join_next().await.is_some() {} };
    if timeout(limits.shutdown_grace, drain).await.is_err() {
        tracing::warn!(
            connections = conns.len(),
            "shutdown grace period over; ending the requests still running"
        );
        hard.cancel();
        let drain = async { while conns.join_next().await.is_some() {} };
        if timeout(HARD_STOP, drain).await.is_err() {
            conns.abort_all();
        }
    }
}

/// One connection: hyper serves it while the watchdog enforces the
/// header and idle limits and shutdown.
async fn connection(
    tcp: TcpStream,
    router: Router,
    limits: Limits,
    stop: CancellationToken,
    _slot: OwnedSemaphorePermit,
) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("TCP_NODELAY not set: {e}");
    }
    let state = Arc::new(ConnState::new());
    let io = TokioIo::new(Watched {
        inner: tcp,
        state: state.clone(),
    });
    let svc_state = state.clone();
    let service = hyper::service::service_fn(move |req: Request<Incoming>| {
        let busy = Busy::begin(svc_state.clone());
        let router = router.clone();
        async move {
            let resp = match router.oneshot(req.map(Body::new)).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            Ok::<_, Infallible>(resp.map(|inner| Tracked { inner, _busy: busy }))
        }
    });
    let mut builder = auto::Builder::new(TokioExecutor::new());
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout + limits.idle_timeout);
    builder.http2().timer(TokioTimer::new());
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        let check = state.next_check(&limits);
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            () = sleep_until(check) => {
                if state.expired(&limits) {
                    // Nothing is in flight: dropping the connection closes it.
                    return;
                }
            }
            () = state.changed.notified() => {}
            () = stop.cancelled(), if !stopping => {
                stopping = true;
                if state.busy.load(Ordering::Acquire) == 0 {
                    return;
                }
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// What the watchdog knows about one connection. Times are milliseconds
/// since the connection was accepted.
struct ConnState {
    born: Instant,
    /// Requests in flight (responses not yet fully sent).
    busy: AtomicUsize,
    /// When the connection last became idle (accepted, or a response ended).
    idle_since: AtomicU64,
    /// When the first byte of the next request arrived, or `NONE`.
    head_started: AtomicU64,
    /// Wakes the watchdog when a deadline moves.
    changed: Notify,
}

const NONE: u64 = u64::MAX;

impl ConnState {
    fn new() -> Self {
        ConnState {
            born: Instant::now(),
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_started: AtomicU64::new(NONE),
            changed: Notify::new(),
        }
    }

    fn now_ms(&self) -> u64 {
        self.born
            .elapsed()
            .as_millis()
            .try_into()
            .unwrap_or(NONE - 1)
    }

    fn at(&self, ms: u64) -> Instant {
        self.born + Duration::from_millis(ms)
    }

    /// Bytes arrived: while idle, they start the next request's head.
    fn on_read(&self) {
        if self.busy.load(Ordering::Acquire) == 0
            && self.head_started.load(Ordering::Acquire) == NONE
        {
            self.head_started.store(self.now_ms(), Ordering::Release);
            self.changed.notify_one();
        }
    }

    /// When the current limit runs out (far away while a request runs:
    /// the request has deadlines of its own).
    fn deadline(&self, limits: &Limits) -> Option<Instant> {
        if self.busy.load(Ordering::Acquire) > 0 {
            return None;
        }
        Some(match self.head_started.load(Ordering::Acquire) {
            NONE => self.at(self.idle_since.load(Ordering::Acquire)) + limits.idle_timeout,
            started => self.at(started) + limits.header_read_timeout,
        })
    }

    fn next_check(&self, limits: &Limits) -> Instant {
        self.deadline(limits)
            .unwrap_or_else(|| Instant::now() + limits.idle_timeout)
    }

    fn expired(&self, limits: &Limits) -> bool {
        self.deadline(limits).is_some_and(|d| Instant::now() >= d)
    }
}

/// One request in flight on a connection, until its response body ends.
struct Busy(Arc<ConnState>);

impl Busy {
    fn begin(state: Arc<ConnState>) -> Self {
        state.busy.fetch_add(1, Ordering::AcqRel);
        state.head_started.store(NONE, Ordering::Release);
        Busy(state)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let s = &self.0;
        s.idle_since.store(s.now_ms(), Ordering::Release);
        s.busy.fetch_sub(1, Ordering::AcqRel);
        s.changed.notify_one();
    }
}

pin_project! {
    /// A response body that keeps its request counted as in flight.
    struct Tracked {
        #[pin]
        inner: Body,
        _busy: Busy,
    }
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        self.project().inner.poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

pin_project! {
    /// The client socket, reporting reads to the watchdog.
    struct Watched {
        #[pin]
        inner: TcpStream,
        state: Arc<ConnState>,
    }
}

impl AsyncRead for Watched {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.project();
        let before = buf.filled().len();
        let res = this.inner.poll_read(cx, buf);
        if matches!(res, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            this.state.on_read();
        }
        res
    }
}

impl AsyncWrite for Watched {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.project().inner.poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.project().inner.poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits {
        max_connections: 4,
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(1),
    };

    #[tokio::test(start_paused = true)]
    async fn idle_then_head_then_busy_deadlines() {
        let s = Arc::new(ConnState::new());
        let t0 = Instant::now();
        assert_eq!(s.deadline(&LIMITS), Some(t0 + LIMITS.idle_timeout));
        tokio::time::advance(Duration::from_secs(2)).await;
        s.on_read();
        assert_eq!(
            s.deadline(&LIMITS),
            Some(t0 + Duration::from_secs(2) + LIMITS.header_read_timeout)
        );
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(s.expired(&LIMITS));
        let busy = Busy::begin(s.clone());
        assert_eq!(s.deadline(&LIMITS), None);
        s.on_read();
        assert!(!s.expired(&LIMITS));
        tokio::time::advance(Duration::from_secs(100)).await;
        drop(busy);
        assert_eq!(
            s.deadline(&LIMITS),
            Some(Instant::now() + LIMITS.idle_timeout)
        );
    }
}
