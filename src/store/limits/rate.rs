//! Per-minute rate limits: GCRA (the generic cell rate algorithm) on
//! tokio's clock, so tests run it under paused time, with what a limited
//! response tells its client: OpenAI's `x-ratelimit-*` figures and an
//! honest `Retry-After`.
//!
//! A limit of `L` a minute lets `L` cells through at once when idle and
//! one more every `60 s / L`. Its whole state is one instant, the
//! *theoretical arrival time* (TAT): a take of `n` moves it `n` cells
//! later and is allowed while it stays within a minute of now. Unlike
//! a token bucket, the TAT may also be moved past that minute: what a
//! request spent beyond what it took (its real usage over its estimate)
//! is [`PerMinute::charge`]d as debt, and nothing more fits until the
//! debt is paid back; what it took but did not use is
//! [`PerMinute::refund`]ed. How much is in use now
//! ([`PerMinute::in_use`], for `GET /v1/keys/usage`) is read from that
//! same instant: nothing else counts.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// The window a per-minute limit is whole again within.
const MINUTE: Duration = Duration::from_secs(60);

/// The most debt a limit carries: a day's worth of waiting.
const MAX_DEBT: Duration = Duration::from_secs(86_400);

/// `limit` cells a minute, all of them available at once when idle.
pub struct PerMinute {
    limit: u32,
    /// Time one cell takes to come back: a minute over `limit`.
    per_cell: Duration,
    /// When the limit is whole again (in the past while it is).
    tat: Mutex<Instant>,
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

/// How much of a limit is in use now, as its state (the TAT) says: the
/// usage view's figures. `remaining` is what [`PerMinute::take`] lets
/// through now (the `x-ratelimit-remaining-*` figure); `used` is
/// `limit - remaining`, plus the cells of debt while the TAT is more than
/// a minute ahead (a key that spent more than it took), so it may exceed
/// `limit`; `reset` is how long until the limit is whole again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct InUse {
    pub used: u64,
    pub remaining: u32,
    pub reset: Duration,
}

/// Why cells were not let through.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Denied {
    /// Not now: a retry after this long succeeds.
    Wait(Duration),
    /// Never: more cells than the limit holds. `whole` is how long until
    /// the limit is whole again (all that waiting could ever give).
    TooMany { whole: Duration },
}

impl PerMinute {
    /// `None` for a limit of 0.
    pub fn new(limit: u32) -> Option<Self> {
        if limit == 0 {
            return None;
        }
        Some(PerMinute {
            limit,
            per_cell: MINUTE / limit,
            tat: Mutex::new(Instant::now()),
        })
    }

    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// How long `n` cells take to come back.
    fn cells(&self, n: u64) -> Duration {
        let nanos = self.per_cell.as_nanos().saturating_mul(u128::from(n));
        Duration::from_nanos(u64::try_from(nanos).unwrap_or(u64::MAX)).min(MAX_DEBT * 2)
    }

    /// Takes `n` cells (at least one) if they are all there now.
    pub fn take(&self, n: u32) -> Result<Standing, Denied> {
        let n = n.max(1);
        let now = Instant::now();
        let mut tat = self.tat.lock();
        let from = (*tat).max(now);
        if n > self.limit {
            return Err(Denied::TooMany { whole: from - now });
        }
        let next = from + self.cells(u64::from(n));
        let over = next.saturating_duration_since(now + MINUTE);
        if !over.is_zero() {
            return Err(Denied::Wait(over));
        }
        *tat = next;
        Ok(self.standing(next, now))
    }

    /// Takes `n` more cells whatever is left: a debt that later takes
    /// wait out (at most a day of it is kept).
    pub fn charge(&self, n: u64) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
        let mut tat = self.tat.lock();
        let next = (*tat).max(now) + self.cells(n);
        *tat = next.min(now + MINUTE + MAX_DEBT);
    }

    /// Gives `n` cells back (never more than makes the limit whole).
    pub fn refund(&self, n: u64) {
        let now = Instant::now();
        let mut tat = self.tat.lock();
        let back = tat.checked_sub(self.cells(n)).unwrap_or(now);
        *tat = back.max(now);
    }

    /// Where the limit stands now, without taking anything.
    pub fn now(&self) -> Standing {
        let now = Instant::now();
        let tat = (*self.tat.lock()).max(now);
        self.standing(tat, now)
    }

    /// How much of the limit is in use now, without taking anything (one
    /// read of the state under its lock: the same number the next
    /// [`PerMinute::take`] decides with).
    pub fn in_use(&self) -> InUse {
        let now = Instant::now();
        let tat = (*self.tat.lock()).max(now);
        let s = self.standing(tat, now);
        let debt = (tat - now).saturating_sub(MINUTE);
        let debt_cells = debt.as_nanos().div_ceil(self.per_cell.as_nanos().max(1));
        InUse {
            used: u64::from(self.limit - s.remaining)
                .saturating_add(u64::try_from(debt_cells).unwrap_or(u64::MAX)),
            remaining: s.remaining,
            reset: s.reset,
        }
    }

    fn standing(&self, tat: Instant, now: Instant) -> Standing {
        let room = (now + MINUTE).saturating_duration_since(tat);
        let cells = room.as_nanos() / self.per_cell.as_nanos().max(1);
        Standing {
            limit: self.limit,
            remaining: u32::try_from(cells).unwrap_or(u32::MAX).min(self.limit),
            reset: tat - now,
        }
    }

    /// Where the limit stands after a denial: all used up, until it has
    /// room for one again.
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
        assert!(matches!(tpm.take(1001), Err(Denied::TooMany { .. })));
        let Err(Denied::Wait(wait)) = tpm.take(700) else {
            panic!("700 more fit in 600");
        };
        assert_eq!(retry_after_secs(wait), 6);
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(tpm.take(700).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn debt_carries_over_until_it_is_paid_back() {
        let tpm = PerMinute::new(1000).unwrap();
        assert!(tpm.take(1000).is_ok());
        // The request used 5,000 more than it took: five more minutes.
        tpm.charge(5000);
        assert_eq!(tpm.now().remaining, 0);
        assert_eq!(tpm.now().reset, Duration::from_secs(360));
        let Err(Denied::Wait(wait)) = tpm.take(10) else {
            panic!("a key in debt got tokens");
        };
        assert_eq!(retry_after_secs(wait), 300 + 1);
        tokio::time::advance(Duration::from_secs(301)).await;
        assert!(tpm.take(10).is_ok(), "paid back: it fits again");
        // Too many for a minute even after waiting: says how long until whole.
        let Err(Denied::TooMany { whole }) = tpm.take(1001) else {
            panic!("1001 of 1000 fit");
        };
        assert!(whole > Duration::from_secs(59), "{whole:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn in_use_is_what_take_sees_and_counts_debt_beyond_the_limit() {
        let rpm = PerMinute::new(60).unwrap();
        let idle = InUse {
            used: 0,
            remaining: 60,
            reset: Duration::ZERO,
        };
        assert_eq!(rpm.in_use(), idle);
        for _ in 0..3 {
            assert!(rpm.take(1).is_ok());
        }
        let u = rpm.in_use();
        assert_eq!((u.used, u.remaining), (3, 57));
        assert_eq!(u.reset, Duration::from_secs(3));
        // Half a cell later, no cell is back; a whole one later, one is.
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!((rpm.in_use().used, rpm.in_use().remaining), (3, 57));
        tokio::time::advance(Duration::from_millis(500)).await;
        assert_eq!((rpm.in_use().used, rpm.in_use().remaining), (2, 58));
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(rpm.in_use(), idle);
        // In debt: a minute's cells and 5000 more owed.
        let tpm = PerMinute::new(1000).unwrap();
        assert!(tpm.take(1000).is_ok());
        tpm.charge(5000);
        let u = tpm.in_use();
        assert_eq!((u.used, u.remaining), (6000, 0));
        assert_eq!(u.reset, Duration::from_secs(360));
        // Remaining is exactly what take admits.
        tokio::time::advance(Duration::from_secs(301)).await;
        let left = tpm.in_use().remaining;
        assert_eq!(tpm.in_use().used, 1000 - u64::from(left));
        assert!(tpm.take(left + 1).is_err());
        assert!(tpm.take(left).is_ok());
        assert_eq!(tpm.in_use().remaining, 0);
    }

    #[tokio::test(start_paused = true)]
    async fn refunds_give_back_what_was_not_used_but_never_more() {
        let tpm = PerMinute::new(1000).unwrap();
        assert!(tpm.take(800).is_ok());
        tpm.refund(300);
        assert_eq!(tpm.now().remaining, 500);
        tpm.refund(10_000);
        assert_eq!(tpm.now().remaining, 1000);
        assert!(tpm.take(1000).is_ok());
        // Debt is bounded: a huge charge waits a day at most.
        tpm.charge(u64::MAX);
        assert!(tpm.now().reset <= Duration::from_secs(86_400 + 60));
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
