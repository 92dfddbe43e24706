//! Retries: why a failed call may be sent again ([`RetryReason`], read
//! off a [`ModelError`]), and a route's retry budget ([`RetryBudget`]):
//! every retry made for the route's requests (an upstream's own, a
//! balance's on another member, a mid-stream continuation) takes from
//! it, so a failing upstream cannot multiply the load sent to it. The
//! budgets of a running gateway ([`RetryBudgets`]) outlive reloads, as
//! the governor's keys do. Every retry site asks one function,
//! [`RequestCtx::retry`], which takes from the request's route budget and
//! counts the retry (`conclave_retries_total{route, reason}`) or its
//! refusal (`conclave_retry_budget_exhausted_total{route}`).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use crate::config::RetryBudget as BudgetConfig;
use crate::context::RequestCtx;
use crate::error::{ModelError, TimeoutPhase};
use crate::telemetry::{RETRIES_TOTAL, RETRY_BUDGET_EXHAUSTED};

/// Why a call was sent again: a bounded label.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryReason {
    /// No connection, or it broke before an answer began.
    Connect,
    /// No first token (or whole answer) before its deadline.
    Timeout,
    /// The server answered 5xx.
    ServerError,
    /// The server answered 429.
    RateLimited,
    /// A stream broke after text reached the client, and another member
    /// continued it (`midstream_failover`).
    Midstream,
}

impl RetryReason {
    pub fn label(self) -> &'static str {
        match self {
            RetryReason::Connect => "connect",
            RetryReason::Timeout => "timeout",
            RetryReason::ServerError => "5xx",
            RetryReason::RateLimited => "429",
            RetryReason::Midstream => "midstream",
        }
    }
}

impl ModelError {
    /// Why this failure may be retried (before the first token reached
    /// anyone); `None` when sending it again would not help (a 4xx, an
    /// invalid answer, a wait for conclave's own limits).
    pub fn retry_reason(&self) -> Option<RetryReason> {
        match self {
            ModelError::Connect { .. } => Some(RetryReason::Connect),
            ModelError::StreamCut { .. } => Some(RetryReason::Connect),
            ModelError::Timeout { phase, .. } if *phase != TimeoutPhase::Lane => {
                Some(RetryReason::Timeout)
            }
            ModelError::Status { status: 429, .. } => Some(RetryReason::RateLimited),
            ModelError::Status { status, .. } if *status >= 500 => Some(RetryReason::ServerError),
            _ => None,
        }
    }
}

impl RequestCtx {
    /// May this request make one more retry (for `reason`)? Takes it from
    /// the route's retry budget: `true` (counted in
    /// `conclave_retries_total{route, reason}`) when the budget allows it,
    /// `false` (counted in `conclave_retry_budget_exhausted_total{route}`)
    /// when it is spent, and the caller gives up with the error it has.
    /// Every retry site calls this once, right before it retries.
    pub fn retry(&self, reason: RetryReason) -> bool {
        let granted = self.retry_budget.as_ref().is_none_or(|b| b.try_retry());
        self.metrics.scope(|| {
            if granted {
                metrics::counter!(RETRIES_TOTAL, "route" => self.route.clone(), "reason" => reason.label())
                    .increment(1);
            } else {
                metrics::counter!(RETRY_BUDGET_EXHAUSTED, "route" => self.route.clone())
                    .increment(1);
            }
        });
        if !granted {
            tracing::debug!(request_id = %self.id, route = %self.route, reason = reason.label(), "retry budget spent: not retried");
        }
        granted
    }
}

/// Buckets a window is counted in.
const SLOTS: u32 = 10;

/// One route's retry budget: requests and retries counted over a sliding
/// window (in [`SLOTS`] buckets).
pub struct RetryBudget {
    config: Mutex<BudgetConfig>,
    counts: Mutex<Counts>,
}

struct Counts {
    /// The bucket `slots[0]` counts from.
    start: Instant,
    /// (requests, retries) per bucket, oldest first.
    slots: [(u64, u64); SLOTS as usize],
}

impl RetryBudget {
    pub fn new(config: BudgetConfig) -> RetryBudget {
        RetryBudget {
            config: Mutex::new(config),
            counts: Mutex::new(Counts {
                start: Instant::now(),
                slots: [(0, 0); SLOTS as usize],
            }),
        }
    }

    fn slot_len(config: &BudgetConfig) -> Duration {
        (config.window / SLOTS).max(Duration::from_millis(1))
    }

    /// Moves the window up to now, dropping the buckets that left it.
    fn advance(counts: &mut Counts, slot: Duration) {
        let now = Instant::now();
        let passed = now.saturating_duration_since(counts.start).as_nanos() / slot.as_nanos();
        if passed < u128::from(SLOTS) {
            // The last bucket is the current one.
            let last = SLOTS as usize - 1;
            let shift = (passed as usize).saturating_sub(last);
            if shift > 0 {
                counts.slots.rotate_left(shift);
                for s in &mut counts.slots[SLOTS as usize - shift..] {
                    *s = (0, 0);
                }
                counts.start += slot * shift as u32;
            }
            return;
        }
        counts.slots = [(0, 0); SLOTS as usize];
        counts.start = now - slot * (SLOTS - 1);
    }

    /// Counts one request of the route.
    pub fn request(&self) {
        let slot = Self::slot_len(&self.config.lock());
        let mut c = self.counts.lock();
        Self::advance(&mut c, slot);
        c.slots[SLOTS as usize - 1].0 += 1;
    }

    /// Takes one retry from the budget: `false` (and nothing taken) when
    /// the window's retries already reach `max(min, ratio × requests)`.
    pub fn try_retry(&self) -> bool {
        let config = *self.config.lock();
        let mut c = self.counts.lock();
        Self::advance(&mut c, Self::slot_len(&config));
        let (requests, retries) = c
            .slots
            .iter()
            .fold((0u64, 0u64), |(a, b), (r, t)| (a + r, b + t));
        let allowed = (config.ratio * requests as f64).floor() as u64;
        if retries >= allowed.max(u64::from(config.min)) {
            return false;
        }
        c.slots[SLOTS as usize - 1].1 += 1;
        true
    }

    fn reconfigure(&self, config: BudgetConfig) {
        *self.config.lock() = config;
    }
}

impl crate::sink::RetryGate for RetryBudget {
    fn request(&self) {
        RetryBudget::request(self);
    }

    fn try_retry(&self) -> bool {
        RetryBudget::try_retry(self)
    }
}

/// The retry budgets of a running gateway, by route name (a concrete
/// model named directly is a route of its own), kept across reloads.
#[derive(Default)]
pub struct RetryBudgets {
    routes: Mutex<HashMap<String, Arc<RetryBudget>>>,
}

impl RetryBudgets {
    /// The budget of `route`, as `config` sets it now (created, or the
    /// running one with its counts and the new settings).
    pub fn get(&self, route: &str, config: BudgetConfig) -> Arc<RetryBudget> {
        let mut routes = self.routes.lock();
        match routes.get(route) {
            Some(b) => {
                b.reconfigure(config);
                b.clone()
            }
            None => {
                let b = Arc::new(RetryBudget::new(config));
                routes.insert(route.to_owned(), b.clone());
                b
            }
        }
    }

    /// Forgets the budgets of routes no longer configured.
    pub fn keep_only<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let keep: std::collections::HashSet<&str> = names.into_iter().collect();
        self.routes.lock().retain(|n, _| keep.contains(n.as_str()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn budget(ratio: f64, min: u32) -> RetryBudget {
        RetryBudget::new(BudgetConfig {
            ratio,
            min,
            window: Duration::from_secs(10),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_request_may_retry_up_to_the_floor() {
        let b = budget(0.2, 3);
        b.request();
        assert!(b.try_retry() && b.try_retry() && b.try_retry());
        assert!(!b.try_retry(), "the floor is 3 per window");
    }

    #[tokio::test(start_paused = true)]
    async fn retries_are_a_fraction_of_the_window_s_requests() {
        let b = budget(0.2, 3);
        for _ in 0..100 {
            b.request();
        }
        let granted = (0..100).filter(|_| b.try_retry()).count();
        assert_eq!(granted, 20);
        // The window slides: ten seconds on, it is all gone.
        tokio::time::advance(Duration::from_secs(11)).await;
        b.request();
        assert_eq!((0..10).filter(|_| b.try_retry()).count(), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn old_buckets_leave_the_window_one_by_one() {
        let b = budget(0.5, 0);
        for _ in 0..10 {
            b.request();
        }
        tokio::time::advance(Duration::from_secs(5)).await;
        for _ in 0..10 {
            b.request();
        }
        assert_eq!((0..20).filter(|_| b.try_retry()).count(), 10);
        // The first ten requests leave; their share goes with them, and
        // the retries taken stay counted until they leave too.
        tokio::time::advance(Duration::from_secs(6)).await;
        assert!(!b.try_retry());
    }
}
