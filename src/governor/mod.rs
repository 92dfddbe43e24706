//! Governors: what a key may spend and how fast. Per key, `rpm` and `tpm`
//! (GCRA, [`rate`](crate::store::limits::rate)) and a daily token and
//! cost budget ([`budget`]),
//! checked together when a request is admitted ([`key`]) and settled
//! attempt by attempt ([`ticket`]), through a key's
//! [`KeyLimiter`](crate::store::limits::KeyLimiter), which the state
//! backend's [`Keys`] hands out: in this process, or with `[state]` on
//! the shared state every replica uses.
//! [`Governor`] outlives config reloads: it keeps each key's governor
//! (its rate state) while its limits stay the same; the keys' spend, and
//! writing it back, are the backend's (see
//! [`LocalKeys`](crate::store::limits::local::LocalKeys)).
//!
//! Upstream limits (`rpm` on an upstream) use the same
//! [`PerMinute`](crate::store::limits::rate::PerMinute) from `upstream`;
//! every rejection, of either kind, is recorded by [`record_rejection`]
//! (kept in the store's limits, below both).

pub mod key;
mod ticket;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde_json::Value;

use crate::clock::Clock;
use crate::config::KeyLimits;
use crate::sink::Metrics;
use crate::store::StoreError;
use crate::store::limits::Keys;
use crate::store::limits::budget::{self, Daily};
pub use crate::store::limits::local::FLUSH_EVERY;
use crate::store::limits::rate::InUse;
pub use crate::store::limits::rejection::{Scope, record_rejection};
pub use key::{Admission, KeyGov, RateHeaders, Refused};
pub use ticket::Ticket;

/// A request a key's limits turned away: a 429.
#[derive(Debug, Clone)]
pub struct Rejection {
    pub key: Arc<str>,
    pub scope: Scope,
    pub message: String,
    pub limit: f64,
    pub asked: f64,
    /// Whole seconds after which a retry succeeds, or (`never`) after
    /// which the limit is whole again.
    pub retry_after: Option<u64>,
    /// No retry of the same request can succeed: clients are told not to
    /// retry (`x-should-retry: false`).
    pub never: bool,
    pub headers: RateHeaders,
}

pub struct Governor {
    /// Every key's limits, from the state backend.
    limits: Arc<dyn Keys>,
    /// The keys of the newest config, reused by a reload that keeps their
    /// limits (so a reload does not refill their rate limits).
    keys: Mutex<HashMap<String, Arc<KeyGov>>>,
    /// The instance's wall clock: what "today" is.
    clock: Clock,
    /// The instance's recorder (keys' remaining-budget gauges).
    metrics: Metrics,
}

impl Governor {
    /// A governor of keys whose limits are `limits` (the state
    /// backend's).
    pub fn open(limits: Arc<dyn Keys>, clock: Clock, metrics: Metrics) -> Arc<Governor> {
        Arc::new(Governor {
            limits,
            keys: Mutex::new(HashMap::new()),
            clock,
            metrics,
        })
    }

    /// The governors of a config's keys, by name: the running one when its
    /// limits are unchanged, else a new one on the same budget.
    pub fn keys(&self, keys: &[(String, KeyLimits)]) -> HashMap<String, Arc<KeyGov>> {
        let today = budget::utc_day(self.clock.now());
        let mut current = self.keys.lock();
        let next: HashMap<String, Arc<KeyGov>> = keys
            .iter()
            .map(|(name, limits)| {
                let kept = current.get(name).filter(|k| k.limits == *limits).cloned();
                let gov = kept.unwrap_or_else(|| {
                    let key = self.metrics.scope(|| {
                        let l = self.limits.key(name, limits, today);
                        KeyGov::new(name, *limits, l.limiter, l.policy, self.clock)
                            .with_gauge(l.spent)
                    });
                    Arc::new(key)
                });
                (name.clone(), gov)
            })
            .collect();
        *current = next.clone();
        next
    }

    /// Writes the spend not yet in the store; blocking (run it off the
    /// runtime's threads).
    pub fn flush_blocking(&self) {
        self.limits.flush_blocking();
    }

    /// At shutdown: settlements still on their way to the shared state
    /// get `within` to land, and spend owed to it (kept while it was down)
    /// one more try, so a replica that stops loses as little as it can.
    pub async fn finish_shared(&self, within: Duration) {
        self.limits.finish(within).await;
    }
}

/// A key's limits, where its budget stands today and how much of its
/// `rpm` and `tpm` is in use now, for `GET /v1/keys/usage` (from the
/// shared state, when it holds them). The `now` figures are the
/// limiter's own state, read without taking anything: `remaining` is what
/// the next admission lets through; a limit the key does not have is
/// `null` (nothing counts it).
pub async fn usage_of(key: &KeyGov) -> Result<Value, StoreError> {
    let now = key.clock.now();
    let u = key.limiter.usage(budget::utc_day(now)).await?;
    let s = u.budget;
    let l = key.limits;
    let Daily { tokens, cost_usd } = key.daily();
    let usd = crate::sink::shown_usd;
    let in_use = |r: Option<InUse>| {
        r.map(|r| {
            serde_json::json!({
                "used": r.used,
                "remaining": r.remaining,
                "resets_in_ms": u64::try_from(r.reset.as_millis()).unwrap_or(u64::MAX),
            })
        })
    };
    Ok(serde_json::json!({
        "limits": {
            "rpm": l.rpm,
            "tpm": l.tpm,
            "daily_tokens": tokens,
            "daily_cost_usd": cost_usd,
        },
        "now": {
            "rpm": in_use(u.requests),
            "tpm": in_use(u.tokens),
        },
        "today": {
            "day": budget::day_name(s.day),
            "tokens": s.spent.tokens,
            "cost_usd": usd(s.spent.cost_usd),
            "reserved_tokens": s.reserved.tokens,
            "reserved_cost_usd": usd(s.reserved.cost_usd),
        },
        "remaining": {
            "tokens": tokens.map(|t| t.saturating_sub(s.spent.tokens.saturating_add(s.reserved.tokens))),
            "cost_usd": cost_usd.map(|c| usd((c - s.spent.cost_usd - s.reserved.cost_usd).max(0.0))),
        },
        "resets_in_seconds": budget::until_day_ends(now).as_secs(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::limits::local::LocalKeys;

    #[test]
    fn a_reload_keeps_rate_state_while_limits_stay_and_spend_always() {
        let local = LocalKeys::open(None, Clock::system()).unwrap();
        let g = Governor::open(local.clone(), Clock::system(), Metrics::noop());
        let limits = KeyLimits {
            rpm: Some(10),
            daily_tokens: Some(1000),
            ..KeyLimits::default()
        };
        let first = g.keys(&[("a".into(), limits)]);
        let again = g.keys(&[("a".into(), limits)]);
        assert!(Arc::ptr_eq(&first["a"], &again["a"]));
        let tighter = KeyLimits {
            rpm: Some(5),
            ..limits
        };
        let changed = g.keys(&[("a".into(), tighter)]);
        assert!(!Arc::ptr_eq(&first["a"], &changed["a"]));
        assert!(Arc::ptr_eq(&first["a"].limiter, &again["a"].limiter));
        assert_eq!(local.names(), 1, "one budget for the name");
    }
}
