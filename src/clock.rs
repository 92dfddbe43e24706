//! Wall-clock time as the wire, the event log and the store write it: one
//! [`Clock`] per gateway instance, handed to everything that reads the
//! date (day roll-overs, arena expiry, timestamps). A leaf: every layer may
//! use it.
//!
//! Deadlines, windows and waits use tokio's `Instant`, never this. The
//! binary's clock is the system's; a test's follows tokio's clock from a
//! start it chooses, so paused time moves the date too (a day roll-over
//! or an expiry is a `tokio::time::advance` away).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::time::Instant;

#[derive(Debug, Clone, Copy)]
pub struct Clock {
    /// `None`: the system's clock. Else the wall time at a tokio instant.
    origin: Option<(SystemTime, Instant)>,
}

impl Default for Clock {
    fn default() -> Self {
        Clock::system()
    }
}

impl Clock {
    /// The system's wall clock.
    pub fn system() -> Self {
        Clock { origin: None }
    }

    /// A clock that reads `at` now and then moves with tokio's clock
    /// (paused or not). Must be made on a runtime.
    pub fn starting_at(at: SystemTime) -> Self {
        Clock {
            origin: Some((at, Instant::now())),
        }
    }

    /// The wall time now.
    pub fn now(&self) -> SystemTime {
        match self.origin {
            None => SystemTime::now(),
            Some((at, since)) => at + since.elapsed(),
        }
    }

    /// Seconds since the Unix epoch (0 for a clock set before it).
    pub fn unix_secs(&self) -> u64 {
        self.now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs())
    }

    /// [`Clock::unix_secs`] as SQLite stores it.
    pub fn unix_secs_i64(&self) -> i64 {
        i64::try_from(self.unix_secs()).unwrap_or(i64::MAX)
    }
}

/// The wall time `d` ago on `clock` (the start of something that took `d`).
pub fn ago(clock: &Clock, d: Duration) -> SystemTime {
    let now = clock.now();
    now.checked_sub(d).unwrap_or(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_test_clock_moves_with_paused_time() {
        let start = UNIX_EPOCH + Duration::from_secs(86_399);
        let c = Clock::starting_at(start);
        assert_eq!(c.unix_secs(), 86_399);
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(c.unix_secs(), 86_401);
        assert_eq!(
            ago(&c, Duration::from_secs(1)),
            start + Duration::from_secs(1)
        );
    }
}
