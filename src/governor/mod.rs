//! Governors: what a key may spend and how fast. Per key, `rpm` and `tpm`
//! (GCRA, [`rate`](crate::store::limits::rate)) and a daily token and
//! cost budget ([`budget`](crate::store::limits::budget)),
//! checked together when a request is admitted ([`key`]) and settled
//! attempt by attempt ([`ticket`]), through a key's
//! [`KeyLimiter`](crate::store::limits::KeyLimiter): in this process, or
//! with `[state]` on a shared Redis that every replica uses.
//! [`Governor`] outlives config reloads: in this process it keeps each
//! key's spend (by key name) and rate state (while its limits stay the
//! same), loads the UTC day's spend from the store at start and writes it
//! back off the request path, every [`FLUSH_EVERY`] and once more at
//! shutdown; on Redis, all of that lives in Redis.
//!
//! Upstream limits (`rpm` on an upstream) use the same
//! [`PerMinute`](crate::store::limits::rate::PerMinute) from `upstream`; every rejection, of either kind, is recorded by
//! [`record_rejection`].

pub mod key;
mod ticket;

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use dashmap::DashMap;
use metrics::counter;
use parking_lot::Mutex;
use serde_json::{Map, Value};

use crate::clock::Clock;
use crate::config::KeyLimits;
use crate::context::RequestCtx;
use crate::model::Spend;
use crate::sink::Metrics;
use crate::store::limits::budget::{self, Budget, Daily};
use crate::store::limits::local::LocalLimits;
use crate::store::limits::redis::Shared;
use crate::store::redis::Redis;
use crate::store::{SpendRow, Store, StoreError};
use crate::telemetry::GOVERNOR_REJECTIONS;
pub use key::{Admission, KeyGov, RateHeaders, Refused};
pub use ticket::Ticket;

/// How often spend is written to the store: a `kill -9` loses at most
/// this much of it.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Which limit turned a request away (a bounded label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Rpm,
    Tpm,
    DailyTokens,
    DailyCost,
    Upstream,
}

impl Scope {
    pub fn label(self) -> &'static str {
        match self {
            Scope::Rpm => "rpm",
            Scope::Tpm => "tpm",
            Scope::DailyTokens => "daily_tokens",
            Scope::DailyCost => "daily_cost",
            Scope::Upstream => "upstream",
        }
    }
}

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

/// Counts a rejection and writes its `governor_rejection` event.
pub fn record_rejection(
    ctx: &RequestCtx,
    scope: Scope,
    limit: f64,
    asked: f64,
    extra: &[(&str, Value)],
) {
    ctx.metrics.scope(|| {
        counter!(GOVERNOR_REJECTIONS, "key" => ctx.key.clone(), "scope" => scope.label())
            .increment(1);
    });
    if !ctx.events_enabled() {
        return;
    }
    let mut f = Map::new();
    f.insert("key".into(), Value::from(&*ctx.key));
    f.insert("scope".into(), Value::from(scope.label()));
    f.insert("limit".into(), Value::from(limit));
    f.insert("asked".into(), Value::from(asked));
    for (k, v) in extra {
        f.insert((*k).into(), v.clone());
    }
    ctx.emit("governor_rejection", f);
}

pub struct Governor {
    store: Option<Arc<Store>>,
    /// Every key name's spend, kept across reloads.
    budgets: DashMap<String, Arc<Budget>>,
    /// The keys of the newest config, reused by a reload that keeps their
    /// limits (so a reload does not refill their rate limits).
    keys: Mutex<HashMap<String, Arc<KeyGov>>>,
    /// One flush at a time, from taking the figures to saving them, so an
    /// older total never overwrites a newer one.
    flushing: Mutex<()>,
    /// The instance's wall clock: what "today" is.
    clock: Clock,
    /// The instance's recorder (keys' remaining-budget gauges).
    metrics: Metrics,
    /// The shared state, when limits live there (and the default policy
    /// of keys when it does not answer).
    shared: Option<(Arc<Shared>, crate::config::OnError)>,
}

impl Governor {
    /// A governor whose spend lives in `store` (today's is loaded now),
    /// in memory only, or (with `redis`) in the shared state, where a
    /// request's reservation lasts `hold_ttl` unless settled.
    pub fn open(
        store: Option<Arc<Store>>,
        clock: Clock,
        metrics: Metrics,
        redis: Option<(Arc<Redis>, Duration)>,
    ) -> Result<Arc<Governor>, StoreError> {
        let shared = redis.map(|(r, hold_ttl)| (Shared::new(r.clone(), hold_ttl), r.on_error));
        let store = store.filter(|_| shared.is_none());
        let budgets = DashMap::new();
        if let Some(s) = &store {
            let today = budget::utc_day(clock.now());
            for row in s.spend_on(&budget::day_name(today))? {
                let spent = Spend {
                    tokens: row.tokens,
                    cost_usd: row.cost_usd,
                };
                budgets.insert(
                    row.key.clone(),
                    Arc::new(Budget::new(&row.key, today, spent)),
                );
            }
        }
        Ok(Arc::new(Governor {
            store,
            budgets,
            keys: Mutex::new(HashMap::new()),
            flushing: Mutex::new(()),
            clock,
            metrics,
            shared,
        }))
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
                    let key = self.metrics.scope(|| match &self.shared {
                        Some((shared, on_error)) => {
                            let policy = limits.on_state_error.unwrap_or(*on_error);
                            let limiter = Arc::new(shared.key(name, limits));
                            KeyGov::new(name, *limits, limiter, Some(policy), self.clock)
                                .with_gauge(None)
                        }
                        None => {
                            let budget = self.budget(name, today);
                            let spent = budget.standing(today).spent;
                            let limiter = Arc::new(LocalLimits::new(limits, budget));
                            KeyGov::new(name, *limits, limiter, None, self.clock)
                                .with_gauge(Some(spent))
                        }
                    });
                    Arc::new(key)
                });
                (name.clone(), gov)
            })
            .collect();
        *current = next.clone();
        next
    }

    /// Key `name`'s budget in this process.
    fn budget(&self, name: &str, today: i64) -> Arc<Budget> {
        self.budgets
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Budget::new(name, today, Spend::default())))
            .clone()
    }

    /// Writes the spend not yet in the store; blocking (run it off the
    /// runtime's threads).
    pub fn flush_blocking(&self) {
        let Some(store) = &self.store else {
            return;
        };
        let _one = self.flushing.lock();
        let pending: Vec<(Arc<Budget>, Vec<SpendRow>)> = self
            .budgets
            .iter()
            .map(|b| (b.value().clone(), b.take_unflushed()))
            .filter(|(_, rows)| !rows.is_empty())
            .collect();
        if pending.is_empty() {
            return;
        }
        let rows: Vec<SpendRow> = pending.iter().flat_map(|(_, r)| r.clone()).collect();
        if let Err(e) = store.save_spend(&rows) {
            tracing::error!("cannot save spend to the state store (will retry): {e}");
            for (b, rows) in &pending {
                b.unflushed_again(rows);
            }
        }
    }

    /// At shutdown: settlements still on their way to the shared state
    /// get `within` to land, and spend owed to it (kept while it was down)
    /// one more try, so a replica that stops loses as little as it can.
    pub async fn finish_shared(&self, within: Duration) {
        if let Some((shared, _)) = &self.shared {
            let _ = tokio::time::timeout(within, async {
                // Settlements spawned a moment ago are in flight now.
                tokio::time::sleep(Duration::from_millis(50)).await;
                shared.pay_owed().await;
            })
            .await;
        }
    }

    /// Flushes every [`FLUSH_EVERY`] until the governor is dropped.
    pub fn start_flushing(self: &Arc<Self>) {
        if self.store.is_none() {
            return;
        }
        let weak: Weak<Governor> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(g) = weak.upgrade() else { return };
                if tokio::task::spawn_blocking(move || g.flush_blocking())
                    .await
                    .is_err()
                {
                    tracing::error!("the spend flush task failed");
                }
            }
        });
    }
}

/// A key's limits and where its budget stands today, for
/// `GET /v1/keys/usage` (from the shared state, when it holds them).
pub async fn usage_of(key: &KeyGov) -> Result<Value, StoreError> {
    let now = key.clock.now();
    let s = key.limiter.standing(budget::utc_day(now)).await?;
    let l = key.limits;
    let Daily { tokens, cost_usd } = key.daily();
    // Dollars to a billionth: sums of prices carry float noise.
    let usd = |x: f64| (x * 1e9).round() / 1e9;
    Ok(serde_json::json!({
        "limits": {
            "rpm": l.rpm,
            "tpm": l.tpm,
            "daily_tokens": tokens,
            "daily_cost_usd": cost_usd,
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

    #[test]
    fn a_reload_keeps_rate_state_while_limits_stay_and_spend_always() {
        let g = Governor::open(None, Clock::system(), Metrics::noop(), None).unwrap();
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
        assert_eq!(g.budgets.len(), 1, "one budget for the name");
    }
}
