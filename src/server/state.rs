//! What the watchdog and the slot registry know about one connection:
//! requests in flight, since when it is idle or reading a head, the
//! deadline of an HTTP/1 request in flight, and whether it was asked to
//! close to make room. [`Busy`] marks one request in flight.
//!
//! Requests starting and ending do not wake the watchdog: it looks again
//! at least every `min(idle_timeout, header_read_timeout)` and at the
//! current deadline ([`ConnState::next_check`]), so no deadline can pass
//! unseen. Re-arming a nearer timer on every request would wake the
//! runtime's driver (an `eventfd` write) twice a request.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore};
use tokio::time::Instant;

use super::Limits;

/// Times are milliseconds since the connection was accepted.
pub(super) struct ConnState {
    born: Instant,
    /// Requests in flight (responses not yet fully sent).
    busy: AtomicUsize,
    /// When the connection last became idle (accepted, or a response ended).
    idle_since: AtomicU64,
    /// When the first byte of the next request arrived, or `NONE`.
    head_started: AtomicU64,
    /// When the HTTP/1 request in flight must be done by, or `NONE`.
    h1_deadline: AtomicU64,
    /// Asked to close if it is still idle (another connection needs its slot).
    evict: AtomicBool,
    /// Wakes the watchdog when an eviction is asked.
    pub(super) changed: Notify,
    /// The connection's own slot, lent to one request at a time: the first
    /// request in flight needs no slot of its own.
    pub(super) own: Arc<Semaphore>,
}

const NONE: u64 = u64::MAX;

impl ConnState {
    pub(super) fn new() -> Self {
        ConnState {
            born: Instant::now(),
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            head_started: AtomicU64::new(NONE),
            h1_deadline: AtomicU64::new(NONE),
            evict: AtomicBool::new(false),
            changed: Notify::new(),
            own: Arc::new(Semaphore::new(1)),
        }
    }

    fn now_ms(&self) -> u64 {
        ms(self.born.elapsed())
    }

    fn at(&self, ms: u64) -> Instant {
        self.born + Duration::from_millis(ms)
    }

    pub(super) fn busy(&self) -> usize {
        self.busy.load(Ordering::Acquire)
    }

    /// Bytes arrived: while idle, they start the next request's head.
    pub(super) fn on_read(&self) {
        if self.busy() == 0 && self.head_started.load(Ordering::Acquire) == NONE {
            self.head_started.store(self.now_ms(), Ordering::Release);
        }
    }

    /// When the current limit runs out: the idle or header limit, or an
    /// HTTP/1 request's deadline (none for HTTP/2 streams, which the
    /// executor ends one by one).
    pub(super) fn deadline(&self, limits: &Limits) -> Option<Instant> {
        if self.busy() > 0 {
            return match self.h1_deadline.load(Ordering::Acquire) {
                NONE => None,
                d => Some(self.at(d)),
            };
        }
        Some(match self.head_started.load(Ordering::Acquire) {
            NONE => self.at(self.idle_since.load(Ordering::Acquire)) + limits.idle_timeout,
            started => self.at(started) + limits.header_read_timeout,
        })
    }

    /// When the watchdog looks next: the current deadline, or sooner, so
    /// that whatever a request starting or ending does to the deadline,
    /// the look comes no later than the new one.
    pub(super) fn next_check(&self, limits: &Limits) -> Instant {
        let soon = Instant::now() + limits.idle_timeout.min(limits.header_read_timeout);
        self.deadline(limits).map_or(soon, |d| d.min(soon))
    }

    pub(super) fn expired(&self, limits: &Limits) -> bool {
        self.deadline(limits).is_some_and(|d| Instant::now() >= d)
    }

    /// How long the connection has been idle: no request in flight and no
    /// head being read; `None` when it is not idle.
    pub(super) fn idle_for(&self) -> Option<Duration> {
        if self.busy() > 0 || self.head_started.load(Ordering::Acquire) != NONE {
            return None;
        }
        let since = self.idle_since.load(Ordering::Acquire);
        Some(Duration::from_millis(self.now_ms().saturating_sub(since)))
    }

    /// Asks the connection to close if it is still idle when its watchdog
    /// looks.
    pub(super) fn ask_to_close(&self) {
        self.evict.store(true, Ordering::Release);
        self.changed.notify_one();
    }

    /// Whether a close was asked and is still pending.
    pub(super) fn closing(&self) -> bool {
        self.evict.load(Ordering::Acquire)
    }

    /// For the watchdog: close now? True when a close was asked and the
    /// connection is still idle; a request that arrived meanwhile cancels
    /// the ask.
    pub(super) fn take_eviction(&self) -> bool {
        if !self.closing() {
            return false;
        }
        if self.idle_for().is_some() {
            return true;
        }
        self.evict.store(false, Ordering::Release);
        false
    }
}

fn ms(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(NONE - 1)
}

/// One request in flight on a connection, until its response body ends.
pub(super) struct Busy(Arc<ConnState>);

impl Busy {
    /// `h1_limit`: an HTTP/1 request's time limit, which the watchdog
    /// enforces by closing the connection.
    pub(super) fn begin(state: Arc<ConnState>, h1_limit: Option<Duration>) -> Self {
        state.busy.fetch_add(1, Ordering::AcqRel);
        state.head_started.store(NONE, Ordering::Release);
        if let Some(limit) = h1_limit {
            let at = state.now_ms().saturating_add(ms(limit)).min(NONE - 1);
            state.h1_deadline.store(at, Ordering::Release);
        }
        Busy(state)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        let s = &self.0;
        s.idle_since.store(s.now_ms(), Ordering::Release);
        s.h1_deadline.store(NONE, Ordering::Release);
        s.busy.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    pub(crate) const LIMITS: Limits = Limits {
        max_connections: 4,
        header_read_timeout: Duration::from_secs(5),
        idle_timeout: Duration::from_secs(30),
        shutdown_grace: Duration::from_secs(1),
        http2_max_streams: 16,
        max_header_bytes: 32 * 1024,
        workers: 1,
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
        let busy = Busy::begin(s.clone(), None);
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

    #[tokio::test(start_paused = true)]
    async fn an_http1_request_has_a_deadline_while_it_runs() {
        let s = Arc::new(ConnState::new());
        let busy = Busy::begin(s.clone(), Some(Duration::from_secs(7)));
        let end = Instant::now() + Duration::from_secs(7);
        assert_eq!(s.deadline(&LIMITS), Some(end));
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(!s.expired(&LIMITS));
        tokio::time::advance(Duration::from_secs(1)).await;
        assert!(s.expired(&LIMITS));
        drop(busy);
        assert_eq!(
            s.deadline(&LIMITS),
            Some(Instant::now() + LIMITS.idle_timeout)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn only_an_idle_connection_is_evicted() {
        let s = Arc::new(ConnState::new());
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(s.idle_for(), Some(Duration::from_secs(3)));
        s.ask_to_close();
        assert!(s.take_eviction());

        // A request arrives before the watchdog looks: the ask is dropped.
        let s = Arc::new(ConnState::new());
        s.ask_to_close();
        s.on_read();
        assert_eq!(s.idle_for(), None);
        assert!(!s.take_eviction());
        assert!(!s.closing());
        let busy = Busy::begin(s.clone(), None);
        assert_eq!(s.idle_for(), None);
        tokio::time::advance(Duration::from_secs(2)).await;
        drop(busy);
        tokio::time::advance(Duration::from_secs(1)).await;
        assert_eq!(s.idle_for(), Some(Duration::from_secs(1)));
    }
}
