//! Calls and failures over a sliding window, in ten buckets (bounded
//! memory however many calls), for `eject.error_rate`.

use std::time::Duration;

use tokio::time::Instant;

const BUCKETS: usize = 10;

pub struct Window {
    origin: Instant,
    width: Duration,
    /// (bucket number since `origin`, calls, failures).
    buckets: [(u64, u32, u32); BUCKETS],
}

impl Window {
    pub fn new(window: Duration) -> Self {
        Window {
            origin: Instant::now(),
            width: (window / BUCKETS as u32).max(Duration::from_millis(1)),
            buckets: [(u64::MAX, 0, 0); BUCKETS],
        }
    }

    pub fn clear(&mut self) {
        self.buckets = [(u64::MAX, 0, 0); BUCKETS];
    }

    /// Counts a call at `now`; returns the calls and failures over the
    /// window, this one included.
    pub fn add(&mut self, now: Instant, failed: bool) -> (u32, u32) {
        let n = (now.saturating_duration_since(self.origin).as_nanos() / self.width.as_nanos())
            .try_into()
            .unwrap_or(u64::MAX - 1);
        let slot = &mut self.buckets[(n % BUCKETS as u64) as usize];
        if slot.0 != n {
            *slot = (n, 0, 0);
        }
        slot.1 = slot.1.saturating_add(1);
        slot.2 = slot.2.saturating_add(u32::from(failed));
        let live = |b: &&(u64, u32, u32)| b.0 != u64::MAX && b.0.saturating_add(BUCKETS as u64) > n;
        self.buckets
            .iter()
            .filter(live)
            .fold((0, 0), |(c, f), b| (c + b.1, f + b.2))
    }
}
