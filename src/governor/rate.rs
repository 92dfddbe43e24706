//! Per-minute rate limits: GCRA from the `governor` crate, on tokio's
//! clock (so tests run them under paused time), with what a limited
//! response tells its client: OpenAI's `x-ratelimit-*` figures and an
//! honest `Retry-After`.

use std::num::NonZeroU32;
use std::ops::Add;
use std::time::Duration;

use governor::clock::{Clock, Reference};
use governor::middleware::{StateInformationMiddleware, StateSnapshot};
use governor::nanos::Nanos;
use governor::state::{InMemoryState, NotKeyed};
use governor::{Quota, RateLimiter};
use tokio::time::Instant;

/// A moment on tokio's clock, as `governor` measures time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Tick(Instant);

impl Add<Nanos> for Tick {
    type Output = Tick;

    fn add(self, d: Nanos) -> Tick {
        Tick(self.0 + Duration::from(d))
    }
}

impl Reference for Tick {
    fn duration_since(&self, earlier: Self) -> Nanos {
        self.0.saturating_duration_since(earlier.0).into()
    }

    fn saturating_sub(&self, d: Nanos) -> Self {
        self.0.checked_sub(d.into()).map_or(*self, Tick)
    }
}

/// tokio's clock: real time in production, paused time in tests.
#[derive(Debug, Clone, Copy, Default)]
pub struct TokioClock;

impl Clock for TokioClock {
    type Instant = Tick;

    fn now(&self) -> Tick {
        Tick(Instant::now())
    }
}

type Gcra = RateLimiter<NotKeyed, InMemoryState, TokioClock, StateInformationMiddleware>;

/// `limit` cells a minute, all of them available at once when idle.
pub struct PerMinute {
    limit: u32,
    gcra: Gcra,
}

/// Where a limit stands after a request: OpenAI's `x-ratelimit-limit-*`,
/// `-remaining-*` and `-reset-*` figures.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Standing {
    pub limit: u32,
    pub remaining: u32,
    /// Until the limit is whole again.
    pub reset: Duration,
}

/// Why cells were not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// Not now: a retry after this long succeeds.
    Wait(Duration),
    /// Never: more cells than the limit holds.
    TooMany,
}

impl PerMinute {
    /// `None` for a limit of 0.
    pub fn new(limit: u32) -> Option<Self> {
        let n = NonZeroU32::new(limit)?;
        Some(PerMinute {
            limit,
            gcra: RateLimiter::direct_with_clock(Quota::per_minute(n), TokioClock)
                .with_middleware::<StateInformationMiddleware>(),
        })
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Takes `n` cells (at least one) if they are all there now.
    pub fn take(&self, n: u32) -> Result<Standing, Denied> {
        let n = NonZeroU32::new(n.max(1)).unwrap_or(NonZeroU32::MIN);
        match self.gcra.check_n(n) {
            Ok(Ok(snapshot)) => Ok(self.standing(&snapshot)),
            Ok(Err(not_until)) => Err(Denied::Wait(not_until.wait_time_from(TokioClock.now()))),
            Err(_) => Err(Denied::TooMany),
        }
    }

    fn standing(&self, s: &StateSnapshot) -> Standing {
        let remaining = s.remaining_burst_capacity().min(self.limit);
        let per_cell = s.quota().replenish_interval();
        Standing {
            limit: self.limit,
            remaining,
            reset: per_cell * (self.limit - remaining),
        }
    }

    /// Where the limit stands without taking anything: a denial is all
    /// used up, until it has room for one again.
    pub fn exhausted(&self, wait: Duration) -> Standing {
        Standing {
            limit: self.limit,
            remaining: 0,
            reset: wait,
        }
    }
}

/// Whole seconds a client waits before a retry succeeds (at least 1).
pub fn retry_after_secs(wait: Duration) -> u64 {
    let s = wait.as_secs();
    if wait.subsec_nanos() > 0 || s == 0 {
        s + 1
    } else {
        s
    }
}

/// A duration as OpenAI writes its reset headers: `20ms`, `1s`, `6m0s`,
/// `1h2m3.5s`.
pub fn openai_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms < 1000 {
        return format!("{ms}ms");
    }
    let (h, rest) = (ms / 3_600_000, ms % 3_600_000);
    let (m, rest) = (rest / 60_000, rest % 60_000);
    let secs = if rest % 1000 == 0 {
        format!("{}s", rest / 1000)
    } else {
        let s = format!("{:.3}", rest as f64 / 1000.0);
        format!("{}s", s.trim_end_matches('0'))
    };
    match (h, m) {
        (0, 0) => secs,
        (0, m) => format!("{m}m{secs}"),
        (h, m) => format!("{h}h{m}m{secs}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_minute_of_requests_then_an_honest_wait() {
        let rpm = PerMinute::new(60).unwrap();
        for i in 0..60 {
            let s = rpm.take(1);
            assert!(
                matches!(s, Ok(Standing { remaining, .. }) if remaining == 59 - i),
                "{i}: {s:?}"
            );
        }
        let Err(Denied::Wait(wait)) = rpm.take(1) else {
            panic!("the 61st request went through");
        };
        assert_eq!(retry_after_secs(wait), 1);
        tokio::time::advance(Duration::from_secs(retry_after_secs(wait))).await;
        assert!(rpm.take(1).is_ok(), "a retry after Retry-After succeeds");
        assert!(rpm.take(1).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn tokens_are_taken_in_batches_and_a_batch_too_big_never_fits() {
        let tpm = PerMinute::new(1000).unwrap();
        let s = tpm.take(400).ok();
        assert_eq!(s.map(|s| s.remaining), Some(600));
        assert_eq!(s.map(|s| s.reset), Some(Duration::from_secs(24)));
        assert_eq!(tpm.take(1001), Err(Denied::TooMany));
        let Err(Denied::Wait(wait)) = tpm.take(700) else {
            panic!("700 more fit in 600");
        };
        assert_eq!(retry_after_secs(wait), 6);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(tpm.take(700).is_ok());
    }

    #[test]
    fn durations_read_like_openais() {
        let f = |ms| openai_duration(Duration::from_millis(ms));
        assert_eq!(f(20), "20ms");
        assert_eq!(f(1000), "1s");
        assert_eq!(f(6500), "6.5s");
        assert_eq!(f(360_000), "6m0s");
        assert_eq!(f(3_723_500), "1h2m3.5s");
        assert_eq!(retry_after_secs(Duration::from_millis(1)), 1);
        assert_eq!(retry_after_secs(Duration::from_secs(2)), 2);
    }
}
