//! The direct client's connections to one upstream: HTTP/1.1 connections
//! made with hyper's connection API, each driven by a task of its own, and
//! the idle ones kept for the next request (newest first, at most
//! [`MAX_IDLE`], none idle longer than [`IDLE_FOR`]).
//!
//! A connection goes back to the pool when its response body ends or is
//! dropped, once hyper has it ready for another request: at once when the
//! answer was read to the end, else after hyper has drained the rest of
//! the answer (a stream whose reader stopped at `[DONE]`) or closed the
//! connection (a client that left mid-stream: what is still coming cannot
//! be skipped). hyper's pooled client does the same with a key hashed per
//! request and a task spawned per response; this is a `Vec` behind a lock,
//! and a task only for a connection that is not ready yet.

use std::pin::Pin;
use std::sync::{Arc, Weak};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::client::conn::http1::{self, SendRequest};
use hyper_util::rt::TokioIo;
use parking_lot::Mutex;
use pin_project_lite::pin_project;
use tokio::net::TcpStream;
use tokio::time::Instant;

/// The most idle connections kept.
pub const MAX_IDLE: usize = 1024;
/// How long an idle connection is kept.
pub const IDLE_FOR: Duration = Duration::from_secs(90);

pub type Sender = SendRequest<Full<Bytes>>;

/// The idle connections of one upstream.
#[derive(Default)]
pub struct Pool {
    idle: Mutex<Vec<(Sender, Instant)>>,
}

impl Pool {
    /// The newest idle connection that is still open, if any.
    pub fn take(&self) -> Option<Sender> {
        let mut idle = self.idle.lock();
        while let Some((tx, since)) = idle.pop() {
            if !tx.is_closed() && since.elapsed() < IDLE_FOR {
                return Some(tx);
            }
        }
        None
    }

    /// Keeps a connection whose last answer was read to the end.
    fn put(&self, tx: Sender) {
        if tx.is_closed() {
            return;
        }
        let mut idle = self.idle.lock();
        // The oldest are at the front: drop those past their time.
        let stale = idle
            .iter()
            .take_while(|(_, since)| since.elapsed() >= IDLE_FOR)
            .count();
        idle.drain(..stale);
        if idle.len() < MAX_IDLE {
            idle.push((tx, Instant::now()));
        }
    }
}

/// Opens a connection to `addr` within `within`, with `TCP_NODELAY`, and
/// starts the task that drives it.
pub async fn connect(addr: &str, within: Duration) -> std::io::Result<Sender> {
    let tcp = match tokio::time::timeout(within, TcpStream::connect(addr)).await {
        Ok(r) => r?,
        Err(_) => return Err(std::io::ErrorKind::TimedOut.into()),
    };
    tcp.set_nodelay(true)?;
    let (tx, conn) = http1::handshake(TokioIo::new(tcp))
        .await
        .map_err(std::io::Error::other)?;
    tokio::spawn(async move {
        if let Err(e) = conn.await {
            tracing::debug!("upstream connection ended: {e}");
        }
    });
    Ok(tx)
}

/// Puts `tx` back in `pool` once it is ready for another request.
fn give_back(mut tx: Sender, pool: Weak<Pool>) {
    if tx.is_ready() {
        if let Some(pool) = pool.upgrade() {
            pool.put(tx);
        }
        return;
    }
    let Ok(rt) = tokio::runtime::Handle::try_current() else {
        return;
    };
    if tx.is_closed() {
        return;
    }
    rt.spawn(async move {
        if tx.ready().await.is_ok()
            && let Some(pool) = pool.upgrade()
        {
            pool.put(tx);
        }
    });
}

pin_project! {
    /// A response body that gives its connection back to the pool when it
    /// ends or is dropped.
    pub struct Returning {
        #[pin]
        body: Incoming,
        conn: Option<(Sender, Weak<Pool>)>,
    }

    impl PinnedDrop for Returning {
        fn drop(this: Pin<&mut Self>) {
            if let Some((tx, pool)) = this.project().conn.take() {
                give_back(tx, pool);
            }
        }
    }
}

impl Returning {
    pub fn new(body: Incoming, tx: Sender, pool: &Arc<Pool>) -> Self {
        Returning {
            body,
            conn: Some((tx, Arc::downgrade(pool))),
        }
    }
}

impl Body for Returning {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let this = self.project();
        let res = this.body.poll_frame(cx);
        match &res {
            Poll::Ready(None) => {
                if let Some((tx, pool)) = this.conn.take() {
                    give_back(tx, pool);
                }
            }
            Poll::Ready(Some(Err(_))) => *this.conn = None,
            _ => {}
        }
        res
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
