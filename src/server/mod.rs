//! The HTTP server: accepts connections, serves each with hyper, and
//! keeps clients from holding resources.
//!
//! - `server.max_connections` slots bound connections and requests in
//!   flight together (`slots`): a connection holds one slot, which also
//!   covers its first request; each further request in flight on it (an
//!   HTTP/2 stream) takes one more, or is answered 503 `server_busy`
//!   (`Retry-After: 1`) when none frees up within `header_read_timeout`.
//!   An HTTP/2 connection has at most `server.http2_max_streams` streams.
//! - A connection that arrives when every slot is taken is accepted (one
//!   descriptor over the cap for each listener, see `workers`) and the
//!   longest-idle connection (no
//!   request in flight, no head being read, idle for at least a second) is
//!   closed to make room; while none is idle the newcomer waits, and the
//!   connections behind it wait in the kernel's backlog without a
//!   descriptor.
//! - A request head must arrive within `server.header_read_timeout` of its
//!   first byte and fit in `server.max_header_bytes` (else 431), and a
//!   connection with no request in flight is closed after
//!   `server.idle_timeout` (a per-connection watchdog, `conn`, the one
//!   timer a connection keeps). The body's deadline
//!   is the handler's (`api`), the answer's the request's.
//! - A request ends by its time limit ([`Serving::request_limit`]) even
//!   when the client does not read: an HTTP/2 stream is reset (`exec`), an
//!   HTTP/1 request's connection closed (the watchdog).
//! - Shutdown (`stop`): the listener closes, idle and half-read connections
//!   close at once, busy ones finish their request and close. Whatever is
//!   still running after `server.shutdown_grace` is told to end (`hard`:
//!   a 503, or an SSE error event) and is dropped soon after.
//! - A request's futures are polled only when their own wakers fire
//!   (`quiet`), not each time hyper runs the connection's task.

mod conn;
mod exec;
mod io;
mod quiet;
mod slots;
mod state;
mod workers;

pub use workers::{Listeners, serve_on_workers};

use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tokio::time::{sleep, timeout};
use tokio_util::sync::CancellationToken;

use crate::api::Routes;
use slots::Slots;

/// How long requests told to end at the grace deadline get to say so.
const HARD_STOP: Duration = Duration::from_secs(2);

/// Added to a request's time limit so that the handler's own 504 or SSE
/// error event comes first whenever the client reads.
const DEADLINE_GRACE: Duration = Duration::from_secs(2);

/// A connection idle for less than this (or `idle_timeout`, if shorter)
/// is not closed to make room: its client is probably about to send.
const MIN_IDLE_TO_EVICT: Duration = Duration::from_secs(1);

/// The server's limits, from `[server]` (config data, defined there).
pub use crate::config::Limits;

/// How long a request may take once its head is in, by the config in
/// force when it starts (`body_read_timeout + request_timeout`, which a
/// reload may change).
pub type Budget = Arc<dyn Fn() -> Duration + Send + Sync>;

/// What every connection of the server shares.
struct Serving {
    routes: Routes,
    limits: Limits,
    slots: Arc<Slots>,
    budget: Budget,
    stop: CancellationToken,
}

impl Serving {
    /// The most a request may take from its head to its last byte sent:
    /// the wait for a slot, the budget, and a grace for the handler's own
    /// timeout answer. Never less than `header_read_timeout`, which the
    /// watchdog's looks (`state::ConnState::next_check`) rely on.
    fn request_limit(&self) -> Duration {
        self.limits.header_read_timeout + (self.budget)() + DEADLINE_GRACE
    }
}

/// A server for one set of routes: what its connections share (slots, limits,
/// the stop signals), ready to serve any number of listeners, each on the
/// runtime that calls [`Server::serve`] (see `workers`).
pub struct Server {
    serving: Arc<Serving>,
    hard: CancellationToken,
}

impl Server {
    /// A server for `routes`; `stop` starts the drain, and `hard` is
    /// cancelled when the grace period runs out.
    pub fn new(
        routes: Routes,
        limits: Limits,
        budget: Budget,
        stop: CancellationToken,
        hard: CancellationToken,
    ) -> Arc<Self> {
        let min_idle = limits.idle_timeout.min(MIN_IDLE_TO_EVICT);
        Arc::new(Server {
            serving: Arc::new(Serving {
                routes,
                limits,
                slots: Slots::new(limits.max_connections, min_idle),
                budget,
                stop,
            }),
            hard,
        })
    }

    /// Serves `listener` until the stop signal, then drains the
    /// connections it accepted (see the module docs).
    pub async fn serve(&self, listener: TcpListener) {
        let serving = &self.serving;
        let (limits, stop, slots) = (serving.limits, &serving.stop, &serving.slots);
        let mut conns = JoinSet::new();
        loop {
            tokio::select! {
                biased;
                () = stop.cancelled() => break,
                Some(_) = conns.join_next(), if !conns.is_empty() => {}
                accepted = listener.accept() => match accepted {
                    Ok((tcp, _)) => {
                        let slot = tokio::select! {
                            biased;
                            () = stop.cancelled() => break,
                            slot = slots.admit() => slot,
                        };
                        let Some(slot) = slot else { break };
                        conns.spawn(conn::connection(tcp, serving.clone(), slot));
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
        drop(listener);
        let drain = async { while conns.join_next().await.is_some() {} };
        if timeout(limits.shutdown_grace, drain).await.is_err() {
            tracing::warn!(
                connections = conns.len(),
                "shutdown grace period over; ending the requests still running"
            );
            self.hard.cancel();
            let drain = async { while conns.join_next().await.is_some() {} };
            if timeout(HARD_STOP, drain).await.is_err() {
                conns.abort_all();
            }
        }
    }
}
