//! What a balance knows of each member between requests: its calls in
//! flight (held by a [`Slot`] until the answer, or its stream, ends) and an
//! EWMA of its time to first token (streams) or to the whole answer. The
//! graph keeps each (route, member)'s state across reloads
//! ([`crate::graph::kept`]), so `max_concurrency` holds for calls still
//! running on the old config and latency estimates go on.

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Weight of a new sample in the EWMA.
const ALPHA: f64 = 0.3;

/// A sample older than this no longer counts: the member is tried again
/// as one without a sample, so a member that was slow once gets a new
/// chance to show it recovered.
pub const STALE: Duration = Duration::from_secs(30);

/// One member's state.
#[derive(Default)]
pub struct MemberState {
    in_flight: AtomicU32,
    /// EWMA in seconds, and when its last sample came.
    ewma: Mutex<Option<(f64, Instant)>>,
}

impl MemberState {
    /// Calls in flight now.
    pub fn in_flight(&self) -> u32 {
        self.in_flight.load(Ordering::Acquire)
    }

    /// Takes a slot unless `max` calls are already in flight.
    pub fn try_acquire(self: &Arc<Self>, max: Option<u32>) -> Option<Slot> {
        let limit = max.unwrap_or(u32::MAX);
        self.in_flight
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < limit).then_some(n + 1)
            })
            .ok()?;
        Some(Slot(self.clone()))
    }

    /// Adds a latency sample.
    pub fn record(&self, took: Duration) {
        let now = Instant::now();
        let s = took.as_secs_f64();
        let mut e = self.ewma.lock();
        *e = Some(match *e {
            Some((old, at)) if now.saturating_duration_since(at) < STALE => {
                (old + ALPHA * (s - old), now)
            }
            _ => (s, now),
        });
    }

    /// The current estimate in seconds; `None` without a fresh sample.
    pub fn latency(&self) -> Option<f64> {
        let e = self.ewma.lock();
        e.filter(|(_, at)| Instant::now().saturating_duration_since(*at) < STALE)
            .map(|(v, _)| v)
    }
}

/// One call in flight on a member; dropping it ends the call's count.
pub struct Slot(Arc<MemberState>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    #[test]
    fn slots_hold_the_cap_and_free_on_drop() {
        let s = Arc::new(MemberState::default());
        let a = s.try_acquire(Some(2)).unwrap();
        let _b = s.try_acquire(Some(2)).unwrap();
        assert!(s.try_acquire(Some(2)).is_none());
        drop(a);
        assert_eq!(s.in_flight(), 1);
        assert!(s.try_acquire(Some(2)).is_some());
    }

    #[tokio::test(start_paused = true)]
    async fn the_estimate_moves_towards_samples_and_goes_stale() {
        let s = MemberState::default();
        assert_eq!(s.latency(), None);
        s.record(Duration::from_secs(1));
        s.record(Duration::from_secs(2));
        assert!((s.latency().unwrap() - 1.3).abs() < 1e-9);
        tokio::time::advance(STALE).await;
        assert_eq!(s.latency(), None);
    }
}
