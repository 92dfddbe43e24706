//! When a failed upstream call is sent again, and after how long: the
//! upstream's `retries` (at most `max` retries after the first try), a
//! failure that has a [`RetryReason`], a wait of exponential backoff with
//! full jitter (drawn uniformly from zero to `min(max_backoff, backoff ×
//! 2^k)` before the k-th retry, counting from zero), or exactly the
//! `Retry-After` of a 429 or 503 that sent one (none when it asks for
//! more than `max_retry_after`), and never a wait that would end at or
//! past the call's deadline. The route's retry budget is asked last, by
//! [`ConcreteModel`](super::ConcreteModel), only for a retry this allows.

use std::time::{Duration, SystemTime};

use rand::Rng;

use super::limit::retry_after;
use crate::config::Retries;
use crate::error::ModelError;
use crate::retry::RetryReason;

/// The retry after `e`, when there is one: why, and how long to wait
/// first. `done`: retries made so far; `left`: time until the call's
/// deadline (its first token's, for a stream); `now`: the wall clock, for
/// a `Retry-After` given as a date.
pub fn next(
    cfg: &Retries,
    e: &ModelError,
    done: u32,
    left: Duration,
    now: SystemTime,
) -> Option<(RetryReason, Duration)> {
    if done >= cfg.max {
        return None;
    }
    let reason = e.retry_reason()?;
    let asked = match e {
        ModelError::Status {
            status: 429 | 503,
            retry_after: Some(v),
            ..
        } => retry_after(v, now),
        _ => None,
    };
    let wait = match asked {
        Some(w) if w > cfg.max_retry_after => return None,
        Some(w) => w,
        None => jitter(ceiling(cfg, done)),
    };
    (wait < left).then_some((reason, wait))
}

/// The k-th retry's backoff ceiling: `backoff × 2^k`, at most
/// `max_backoff`.
pub fn ceiling(cfg: &Retries, k: u32) -> Duration {
    let factor = 1u32.checked_shl(k.min(31)).unwrap_or(u32::MAX);
    cfg.backoff
        .checked_mul(factor)
        .unwrap_or(cfg.max_backoff)
        .min(cfg.max_backoff)
}

/// A wait drawn uniformly from zero to `ceiling` (full jitter).
fn jitter(ceiling: Duration) -> Duration {
    if ceiling.is_zero() {
        return Duration::ZERO;
    }
    let nanos = u64::try_from(ceiling.as_nanos()).unwrap_or(u64::MAX);
    Duration::from_nanos(rand::rng().random_range(0..=nanos))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn status(status: u16, retry_after: Option<&str>) -> ModelError {
        ModelError::Status {
            upstream: "u".into(),
            status,
            message: "m".into(),
            code: None,
            retry_after: retry_after.map(str::to_owned),
        }
    }

    const FAR: Duration = Duration::from_secs(3600);

    #[test]
    fn the_ceiling_doubles_up_to_max_backoff() {
        let cfg = Retries::default();
        let ms = |k| ceiling(&cfg, k).as_millis();
        assert_eq!(
            [ms(0), ms(1), ms(2), ms(4), ms(5), ms(40)],
            [200, 400, 800, 3200, 5000, 5000]
        );
    }

    #[test]
    fn waits_are_drawn_from_zero_to_the_ceiling() {
        let cfg = Retries {
            max: 100,
            ..Retries::default()
        };
        let e = status(500, None);
        let mut below_half = 0;
        for k in 0..6 {
            for _ in 0..200 {
                let (r, w) = next(&cfg, &e, k, FAR, SystemTime::now()).unwrap();
                assert_eq!(r, RetryReason::ServerError);
                assert!(w <= ceiling(&cfg, k), "{w:?} over {:?}", ceiling(&cfg, k));
                if w < ceiling(&cfg, k) / 2 {
                    below_half += 1;
                }
            }
        }
        // Full jitter: about half of 1,200 draws lie below half the ceiling.
        assert!((450..750).contains(&below_half), "{below_half}");
    }

    #[test]
    fn retry_after_is_waited_exactly_up_to_its_cap() {
        let cfg = Retries::default();
        let now = SystemTime::now();
        let w = |e: &ModelError| next(&cfg, e, 0, FAR, now).map(|x| x.1);
        assert_eq!(w(&status(429, Some("2"))), Some(Duration::from_secs(2)));
        assert_eq!(w(&status(503, Some("7"))), Some(Duration::from_secs(7)));
        assert_eq!(w(&status(429, Some("61"))), None, "past max_retry_after");
        // A 500's Retry-After is not a rate limit's: backoff.
        assert!(w(&status(500, Some("30"))).unwrap() <= Duration::from_millis(200));
    }

    #[test]
    fn no_retry_past_max_the_deadline_or_for_a_client_error() {
        let cfg = Retries::default();
        let now = SystemTime::now();
        assert!(
            next(&cfg, &status(500, None), 1, FAR, now).is_none(),
            "max = 1"
        );
        assert!(next(&cfg, &status(400, None), 0, FAR, now).is_none());
        let e = status(429, Some("5"));
        assert!(next(&cfg, &e, 0, Duration::from_secs(5), now).is_none());
        assert!(next(&cfg, &e, 0, Duration::from_millis(5001), now).is_some());
        // A 500 that is a request-validation error is the client's.
        let rejected = ModelError::Rejected {
            upstream: "u".into(),
            status: 500,
            field: None,
            problem: "invalid",
            message: "m".into(),
        };
        assert!(next(&cfg, &rejected, 0, FAR, now).is_none());
        let off = Retries { max: 0, ..cfg };
        assert!(next(&off, &status(500, None), 0, FAR, now).is_none());
    }
}
