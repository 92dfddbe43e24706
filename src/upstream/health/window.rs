//! Calls and failures over a sliding window, in ten buckets (bounded
//! memory however many calls), for `eject.error_rate`; each bucket also
//! keeps whose calls failed ([`Seen`]), so that one key's failures alone
//! never reach the rate for everyone.

use std::time::Duration;

use tokio::time::Instant;

use super::tenant::{Seen, Tenant};

const BUCKETS: usize = 10;

#[derive(Default, Clone)]
struct Bucket {
    /// Its number since `origin` (`None`: unused).
    n: Option<u64>,
    calls: u32,
    failures: u32,
    failed: Seen,
}

pub struct Window {
    origin: Instant,
    width: Duration,
    buckets: [Bucket; BUCKETS],
}

/// What the window holds after a call.
pub struct Counts {
    pub calls: u32,
    pub failures: u32,
    /// The failures are more than one key's.
    pub several: bool,
}

impl Window {
    pub fn new(window: Duration) -> Self {
        Window {
            origin: Instant::now(),
            width: (window / BUCKETS as u32).max(Duration::from_millis(1)),
            buckets: Default::default(),
        }
    }

    pub fn clear(&mut self) {
        self.buckets = Default::default();
    }

    /// Counts a call that succeeded at `now`.
    pub fn add_success(&mut self, now: Instant) {
        let (slot, _) = self.bucket(now);
        slot.calls = slot.calls.saturating_add(1);
    }

    /// Counts a call of `who` that failed at `now`; returns what the
    /// window holds, this call included.
    pub fn add_failure(&mut self, now: Instant, who: &Tenant) -> Counts {
        let (slot, n) = self.bucket(now);
        slot.calls = slot.calls.saturating_add(1);
        slot.failures = slot.failures.saturating_add(1);
        slot.failed.add(who);
        let live = |b: &&Bucket| b.n.is_some_and(|m| m.saturating_add(BUCKETS as u64) > n);
        let mut failed_by = Seen::default();
        let mut counts = Counts {
            calls: 0,
            failures: 0,
            several: false,
        };
        for b in self.buckets.iter().filter(live) {
            counts.calls = counts.calls.saturating_add(b.calls);
            counts.failures = counts.failures.saturating_add(b.failures);
            failed_by.merge(&b.failed);
        }
        counts.several = failed_by.several();
        counts
    }

    /// The bucket of `now`, emptied if it last held an older one, and its
    /// number.
    fn bucket(&mut self, now: Instant) -> (&mut Bucket, u64) {
        let nanos = |d: Duration| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX);
        let n = (nanos(now.saturating_duration_since(self.origin)) / nanos(self.width).max(1))
            .min(u64::MAX - 1);
        let slot = &mut self.buckets[(n % BUCKETS as u64) as usize];
        if slot.n != Some(n) {
            *slot = Bucket {
                n: Some(n),
                ..Bucket::default()
            };
        }
        (slot, n)
    }
}
