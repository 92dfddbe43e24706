//! The direct client's connections to one upstream: HTTP/1.1 connections
//! made with hyper's connection API, each driven by a task of its own, and
//! the idle ones kept for the next request (newest first, at most
//! [`MAX_IDLE`] in each thread's list, none idle longer than
//! [`IDLE_FOR`]).
//!
//! A connection goes back to the pool when its response body ends or is
//! dropped, once hyper has it ready for another request: at once when the
//! answer was read to the end, else after hyper has drained the rest of
//! the answer (a stream whose reader stopped at `[DONE]`) or closed the
//! connection (a client that left mid-stream: what is still coming cannot
//! be skipped). hyper's pooled client does the same with a key hashed per
//! request and a task spawned per response; this is a `Vec` behind a lock,
//! and a task only for a connection that is not ready yet.
//!
//! A serving worker's thread (`server::workers`) keeps its connections
//! apart from the others' ([`keep_apart`]): each connection's task runs on
//! the runtime that opened it, so a request reusing it there is served
//! without waking another thread.

use std::cell::Cell;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
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

/// The most idle connections kept in one thread's list (the main
/// runtime's, or a worker's).
pub const MAX_IDLE: usize = 1024;
/// How long an idle connection is kept.
pub const IDLE_FOR: Duration = Duration::from_secs(90);

pub type Sender = SendRequest<Full<Bytes>>;

/// Idle lists per upstream: the first is every thread's but the workers';
/// the workers share out the others (more workers than that share them).
const SHARDS: usize = 33;

thread_local! {
    /// This thread's idle list.
    static SHARD: Cell<usize> = const { Cell::new(0) };
}

static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

/// Gives this thread idle lists of its own, apart from other threads':
/// for a thread that runs a current-thread runtime of its own.
pub fn keep_apart() {
    let n = NEXT_SHARD.fetch_add(1, Ordering::Relaxed);
    SHARD.set(1 + n % (SHARDS - 1));
}

/// The idle connections of one upstream, one list per thread (see
/// [`keep_apart`]).
pub struct Pool {
    shards: [Mutex<Vec<(Sender, Instant)>>; SHARDS],
}

impl Default for Pool {
    fn default() -> Self {
        Pool {
            shards: std::array::from_fn(|_| Mutex::default()),
        }
    }
}

impl Pool {
    /// The idle list this thread takes from and opens connections for.
    pub fn shard() -> usize {
        SHARD.get()
    }

    /// The newest idle connection of this thread's that is still open.
    pub fn take(&self) -> Option<Sender> {
        let mut idle = self.shards[Self::shard()].lock();
        while let Some((tx, since)) = idle.pop() {
            if !tx.is_closed() && since.elapsed() < IDLE_FOR {
                return Some(tx);
            }
        }
        None
    }

    /// Keeps a connection whose last answer was read to the end, in the
    /// list of the thread that opened it.
    fn put(&self, tx: Sender, shard: usize) {
        if tx.is_closed() {
            return;
        }
        let Some(idle) = self.shards.get(shard) else {
            return;
        };
        let now = Instant::now();
        let mut idle = idle.lock();
        // The oldest are at the front: drop those past their time.
        let stale = idle
            .iter()
            .take_while(|(_, since)| now.saturating_duration_since(*since) >= IDLE_FOR)
            .count();
        idle.drain(..stale);
        if idle.len() < MAX_IDLE {
            idle.push((tx, now));
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
fn give_back(mut tx: Sender, pool: Weak<Pool>, shard: usize) {
    if tx.is_ready() {
        if let Some(pool) = pool.upgrade() {
            pool.put(tx, shard);
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
            pool.put(tx, shard);
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
        shard: usize,
    }

    impl PinnedDrop for Returning {
        fn drop(this: Pin<&mut Self>) {
            let this = this.project();
            if let Some((tx, pool)) = this.conn.take() {
                give_back(tx, pool, *this.shard);
            }
        }
    }
}

impl Returning {
    /// `body`, whose connection goes back to `shard` of `pool`.
    pub fn new(body: Incoming, tx: Sender, pool: &Arc<Pool>, shard: usize) -> Self {
        Returning {
            body,
            conn: Some((tx, Arc::downgrade(pool))),
            shard,
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
                    give_back(tx, pool, *this.shard);
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
