//! The `server.max_connections` slots and the live connections that hold
//! them. A connection holds one slot for its life, which also covers its
//! first request in flight; each further request in flight on it (HTTP/2
//! streams) takes one more slot from the same pool, so connections plus
//! extra requests never pass the cap. A new connection that finds no free
//! slot makes the longest-idle connection close (only an idle one: no
//! request in flight, no head being read) and takes its slot.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{sleep, timeout};

use super::state::ConnState;

/// How often a connection waiting for a slot looks for an idle one to
/// close (connections become idle without telling the registry).
const LOOK_AGAIN: Duration = Duration::from_millis(100);

pub(super) struct Slots {
    pool: Arc<Semaphore>,
    live: Mutex<HashMap<u64, Arc<ConnState>>>,
    next_id: AtomicU64,
    /// Only connections idle at least this long are closed to make room:
    /// a client that has just connected or just been answered is probably
    /// about to send.
    min_idle: Duration,
}

impl Slots {
    pub(super) fn new(max_connections: usize, min_idle: Duration) -> Arc<Self> {
        Arc::new(Slots {
            pool: Arc::new(Semaphore::new(max_connections)),
            live: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(0),
            min_idle,
        })
    }

    /// A slot for a connection just accepted: a free one, else the one the
    /// longest-idle connection gives back when asked to close. Waits while
    /// every connection is busy (`None` only if the pool were closed).
    pub(super) async fn admit(&self) -> Option<OwnedSemaphorePermit> {
        if let Ok(p) = self.pool.clone().try_acquire_owned() {
            return Some(p);
        }
        // One wait, kept across looks, so the place in line is kept too.
        let wait = self.pool.clone().acquire_owned();
        tokio::pin!(wait);
        loop {
            self.evict_longest_idle();
            tokio::select! {
                p = &mut wait => return p.ok(),
                () = sleep(LOOK_AGAIN) => {}
            }
        }
    }

    /// Asks the longest-idle connection to close, unless one asked
    /// already is still closing.
    fn evict_longest_idle(&self) {
        let live = self.live.lock();
        if live.values().any(|c| c.closing()) {
            return;
        }
        let oldest = live
            .values()
            .filter_map(|c| c.idle_for().map(|d| (d, c)))
            .filter(|(d, _)| *d >= self.min_idle)
            .max_by_key(|(d, _)| *d);
        if let Some((idle, c)) = oldest {
            tracing::debug!(
                idle_ms = idle.as_millis(),
                "every connection slot is taken: closing the longest-idle connection"
            );
            c.ask_to_close();
        }
    }

    /// A slot for a request on the connection whose own slot is `own`,
    /// if one is free now: its own, else one of the pool's.
    pub(super) fn free_now(&self, own: &Arc<Semaphore>) -> Option<OwnedSemaphorePermit> {
        own.clone()
            .try_acquire_owned()
            .or_else(|_| self.pool.clone().try_acquire_owned())
            .ok()
    }

    /// Lists a connection as live (a candidate for eviction) until the
    /// returned guard drops.
    pub(super) fn register(self: &Arc<Self>, state: Arc<ConnState>) -> Registered {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.live.lock().insert(id, state);
        Registered {
            slots: self.clone(),
            id,
        }
    }

    /// A slot for one more request on a connection: the connection's own
    /// (free when nothing else is in flight on it), else one from the
    /// pool; `None` when neither frees up within `wait`.
    pub(super) async fn for_request(
        &self,
        own: &Arc<Semaphore>,
        wait: Duration,
    ) -> Option<OwnedSemaphorePermit> {
        if let Some(p) = self.free_now(own) {
            return Some(p);
        }
        let either = async {
            tokio::select! {
                biased;
                p = own.clone().acquire_owned() => p,
                p = self.pool.clone().acquire_owned() => p,
            }
        };
        timeout(wait, either).await.ok()?.ok()
    }
}

/// A live connection's entry in the registry.
pub(super) struct Registered {
    slots: Arc<Slots>,
    id: u64,
}

impl Drop for Registered {
    fn drop(&mut self) {
        self.slots.live.lock().remove(&self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::state::Busy;
    use tokio::time::{Instant, advance};

    #[tokio::test(start_paused = true)]
    async fn the_first_request_rides_on_the_connection_and_the_rest_take_slots() {
        let slots = Slots::new(3, Duration::from_secs(1));
        let _conn = slots.admit().await.unwrap();
        let own = Arc::new(Semaphore::new(1));
        let wait = Duration::from_secs(2);
        let first = slots.for_request(&own, wait).await.unwrap();
        let second = slots.for_request(&own, wait).await.unwrap();
        let third = slots.for_request(&own, wait).await.unwrap();
        assert_eq!(slots.pool.available_permits(), 0);
        // No room: refused after the wait.
        let t0 = Instant::now();
        assert!(slots.for_request(&own, wait).await.is_none());
        assert_eq!(t0.elapsed(), wait);
        // The connection's own slot coming back serves a waiter.
        let waiter = tokio::spawn({
            let (slots, own) = (slots.clone(), own.clone());
            async move { slots.for_request(&own, wait).await }
        });
        advance(Duration::from_millis(500)).await;
        drop(first);
        let fourth = waiter.await.unwrap();
        assert!(fourth.is_some());
        assert_eq!(Instant::now() - t0, wait + Duration::from_millis(500));
        drop((second, third, fourth));
        assert_eq!(slots.pool.available_permits(), 2);
        assert_eq!(own.available_permits(), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_newcomer_at_the_cap_closes_the_longest_idle_connection() {
        let slots = Slots::new(3, Duration::from_secs(1));
        let mut held = Vec::new();
        for _ in 0..3 {
            let state = Arc::new(ConnState::new());
            let reg = slots.register(state.clone());
            held.push((slots.admit().await.unwrap(), state, reg));
            advance(Duration::from_millis(500)).await;
        }
        // The oldest is busy: the second-oldest is the longest idle.
        let _busy = Busy::begin(held[0].1.clone(), None);
        advance(Duration::from_millis(600)).await;
        let newcomer = tokio::spawn({
            let slots = slots.clone();
            async move { slots.admit().await }
        });
        tokio::task::yield_now().await;
        advance(Duration::from_millis(10)).await;
        assert!(!held[0].1.closing());
        assert!(held[1].1.take_eviction());
        assert!(!held[2].1.closing(), "only one is asked at a time");
        // Its watchdog closes it: the slot goes to the newcomer.
        drop(held.remove(1));
        assert!(newcomer.await.unwrap().is_some());
        assert!(!held[1].1.closing());
    }

    #[tokio::test(start_paused = true)]
    async fn connections_idle_for_less_than_the_minimum_are_left_alone() {
        let slots = Slots::new(1, Duration::from_secs(1));
        let state = Arc::new(ConnState::new());
        let _reg = slots.register(state.clone());
        let _slot = slots.admit().await.unwrap();
        let newcomer = tokio::spawn({
            let slots = slots.clone();
            async move { slots.admit().await }
        });
        sleep(Duration::from_millis(950)).await;
        assert!(!state.closing());
        sleep(Duration::from_millis(100)).await;
        assert!(state.closing());
        newcomer.abort();
    }
}
