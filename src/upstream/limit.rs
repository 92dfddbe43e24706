//! An upstream's limits besides its lane: its `rpm` makes calls wait for
//! their turn (never past their deadline) instead of failing; and how
//! long its `Retry-After` asks to wait ([`retry_after`]: a 429 or 503 is
//! retried after it, see [`super::retry`]).
//!
//! With `[state]` the turns are booked in the shared state (the
//! [`Turns`] the state backend hands out), so all replicas together send
//! the upstream its `rpm` (a provider's limit is its account's, not one
//! replica's); when the shared state does not answer, each replica paces
//! its own calls as without it.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use tokio::time::{Instant, sleep};

use crate::store::limits::Turns;
use crate::store::limits::rate::{Denied, PerMinute};

/// The longest `Retry-After` taken as it is (any deadline ends sooner).
const MAX_RETRY: Duration = Duration::from_secs(24 * 3600);

/// Calls per minute conclave sends an upstream.
pub struct Pace {
    local: PerMinute,
    /// The turns booked in the shared state, once shared.
    shared: OnceLock<Arc<dyn Turns>>,
}

/// The call's turn would come after its deadline.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NoTurn {
    pub limit: u32,
    /// Until the upstream has room again.
    pub wait: Duration,
}

impl Pace {
    pub fn new(rpm: Option<u32>) -> Option<Pace> {
        rpm.and_then(PerMinute::new).map(|local| Pace {
            local,
            shared: OnceLock::new(),
        })
    }

    /// Books the turns in `turns` (the shared state's) from now on.
    pub fn share(&self, turns: Arc<dyn Turns>) {
        let _ = self.shared.set(turns);
    }

    /// Waits for this call's turn; how long it waited. Fails at once when
    /// the turn would come after `by`.
    pub async fn turn(&self, by: Instant) -> Result<Duration, NoTurn> {
        let start = Instant::now();
        if let Some(s) = self.shared.get() {
            let most = by.saturating_duration_since(start);
            match s.book(self.local.limit(), most).await {
                Ok(Ok(wait)) => {
                    sleep(wait.min(most)).await;
                    return Ok(start.elapsed());
                }
                Ok(Err(wait)) => {
                    return Err(NoTurn {
                        limit: self.local.limit(),
                        wait,
                    });
                }
                // The shared state does not answer (counted and logged
                // there): this replica paces its own calls.
                Err(_) => {}
            }
        }
        loop {
            match self.local.take(1) {
                Ok(_) => return Ok(start.elapsed()),
                Err(Denied::Wait(wait)) if wait <= by.saturating_duration_since(Instant::now()) => {
                    sleep(wait).await
                }
                Err(Denied::Wait(wait)) => {
                    return Err(NoTurn {
                        limit: self.local.limit(),
                        wait,
                    });
                }
                // One call never exceeds a limit of at least one.
                Err(Denied::TooMany { .. }) => {
                    return Err(NoTurn {
                        limit: self.local.limit(),
                        wait: Duration::from_secs(60),
                    });
                }
            }
        }
    }
}

/// How long a `Retry-After` (seconds, or an HTTP date) asks to wait;
/// `None` when it says nothing readable.
pub fn retry_after(v: &str, now: SystemTime) -> Option<Duration> {
    let v = v.trim();
    if let Ok(secs) = v.parse::<f64>() {
        return (secs.is_finite() && secs >= 0.0).then(|| {
            Duration::try_from_secs_f64(secs)
                .unwrap_or(MAX_RETRY)
                .min(MAX_RETRY)
        });
    }
    httpdate::parse_http_date(v).ok().map(|at| {
        at.duration_since(now)
            .unwrap_or(Duration::ZERO)
            .min(MAX_RETRY)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_in_seconds_or_as_a_date() {
        let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(retry_after("2", now), Some(Duration::from_secs(2)));
        assert_eq!(retry_after(" 0.5 ", now), Some(Duration::from_millis(500)));
        assert_eq!(retry_after("soon", now), None);
        assert_eq!(retry_after("-3", now), None);
        assert_eq!(retry_after("1e300", now), Some(MAX_RETRY));
        let date = httpdate::fmt_http_date(now + Duration::from_secs(7));
        assert_eq!(retry_after(&date, now), Some(Duration::from_secs(7)));
    }

    #[tokio::test(start_paused = true)]
    async fn calls_wait_their_turn_unless_it_comes_too_late() {
        let pace = Pace::new(Some(2)).unwrap();
        let far = Instant::now() + Duration::from_secs(120);
        assert_eq!(pace.turn(far).await, Ok(Duration::ZERO));
        assert_eq!(pace.turn(far).await, Ok(Duration::ZERO));
        // The third waits for a slot: 30 s at 2 a minute.
        assert_eq!(pace.turn(far).await, Ok(Duration::from_secs(30)));
        let soon = Instant::now() + Duration::from_secs(10);
        let err = pace.turn(soon).await.unwrap_err();
        assert_eq!(err.limit, 2);
        assert_eq!(err.wait, Duration::from_secs(30));
    }
}
