//! A key's limits in this process: `rpm` and `tpm` as GCRA on tokio's
//! clock ([`PerMinute`]), the daily budget as a [`Budget`] under one lock.
//! A later check that fails gives back what an earlier one took.
//!
//! [`LocalKeys`] keeps every key name's [`Budget`] across reloads; with a
//! `server.state_path` it loads the UTC day's spend from the store at
//! start and writes it back off the request path, every [`FLUSH_EVERY`]
//! and once more at shutdown.

use std::sync::{Arc, Weak};
use std::time::Duration;

use async_trait::async_trait;
use dashmap::DashMap;
use parking_lot::Mutex;

use super::budget::{self, Budget, Daily};
use super::rate::{Denied, PerMinute};
use super::{Ask, Granted, KeyLimit, KeyLimiter, Keys, OnSpent, Refusal, Settlement, Spend, Usage};
use crate::clock::Clock;
use crate::config::KeyLimits;
use crate::store::{SpendRow, Store, StoreError};

/// How often spend is written to the store: a `kill -9` loses at most
/// this much of it.
pub const FLUSH_EVERY: Duration = Duration::from_secs(1);

/// Every key's limits in this process.
pub struct LocalKeys {
    /// Where spend is kept across restarts (`server.state_path`), if
    /// anywhere.
    store: Option<Arc<Store>>,
    /// Every key name's spend, kept across reloads.
    budgets: DashMap<String, Arc<Budget>>,
    /// One flush at a time, from taking the figures to saving them, so an
    /// older total never overwrites a newer one.
    flushing: Mutex<()>,
}

impl LocalKeys {
    /// Keys whose spend lives in `store` (today's, by `clock`, is loaded
    /// now), or in memory only.
    pub fn open(store: Option<Arc<Store>>, clock: Clock) -> Result<Arc<LocalKeys>, StoreError> {
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
        Ok(Arc::new(LocalKeys {
            store,
            budgets,
            flushing: Mutex::new(()),
        }))
    }

    /// Key `name`'s budget.
    fn budget(&self, name: &str, today: i64) -> Arc<Budget> {
        self.budgets
            .entry(name.to_owned())
            .or_insert_with(|| Arc::new(Budget::new(name, today, Spend::default())))
            .clone()
    }

    /// How many key names have a budget.
    pub fn names(&self) -> usize {
        self.budgets.len()
    }

    /// Flushes every [`FLUSH_EVERY`] until the keys are dropped (nothing
    /// to do without a store). Call it on a tokio runtime.
    pub fn start_flushing(self: &Arc<Self>) {
        if self.store.is_none() {
            return;
        }
        let weak: Weak<LocalKeys> = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(FLUSH_EVERY);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            loop {
                tick.tick().await;
                let Some(k) = weak.upgrade() else { return };
                if tokio::task::spawn_blocking(move || k.flush_blocking())
                    .await
                    .is_err()
                {
                    tracing::error!("the spend flush task failed");
                }
            }
        });
    }
}

#[async_trait]
impl Keys for LocalKeys {
    fn key(&self, name: &str, limits: &KeyLimits, today: i64) -> KeyLimit {
        let budget = self.budget(name, today);
        let spent = budget.standing(today).spent;
        KeyLimit {
            limiter: Arc::new(LocalLimits::new(limits, budget)),
            policy: None,
            spent: Some(spent),
        }
    }

    fn flush_blocking(&self) {
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

    async fn finish(&self, _within: Duration) {}
}

pub struct LocalLimits {
    rpm: Option<PerMinute>,
    tpm: Option<PerMinute>,
    budget: Arc<Budget>,
}

impl LocalLimits {
    pub fn new(limits: &KeyLimits, budget: Arc<Budget>) -> Self {
        LocalLimits {
            rpm: limits.rpm.and_then(PerMinute::new),
            tpm: limits.tpm.and_then(PerMinute::new),
            budget,
        }
    }

    /// The admission, synchronously.
    pub fn admit_now(&self, ask: Ask) -> Result<Granted, Refusal> {
        let mut granted = Granted::default();
        if let Some(tpm) = self.tpm.as_ref().filter(|t| ask.tpm > t.limit()) {
            return Err(Refusal::TpmNever(tpm.now().reset));
        }
        if let Some(rpm) = &self.rpm {
            match rpm.take(1) {
                Ok(s) => granted.requests = Some(s),
                Err(d) => return Err(Refusal::Rpm(wait_of(d))),
            }
        }
        let undo_rpm = || {
            if let Some(rpm) = &self.rpm {
                rpm.refund(1);
            }
        };
        let budgeted = ask.daily != Daily::default();
        if budgeted && let Err(over) = self.budget.reserve(ask.daily, ask.estimate, ask.day) {
            undo_rpm();
            return Err(Refusal::Budget(over));
        }
        if let Some(tpm) = &self.tpm {
            match tpm.take(ask.tpm) {
                Ok(s) => granted.tokens = Some(s),
                Err(d) => {
                    undo_rpm();
                    if budgeted {
                        self.budget.settle(ask.estimate, Spend::default(), ask.day);
                    }
                    return Err(match d {
                        Denied::TooMany { whole } => Refusal::TpmNever(whole),
                        Denied::Wait(w) => Refusal::Tpm(w),
                    });
                }
            }
        }
        granted.spent = self.budget.standing(ask.day).spent;
        Ok(granted)
    }
}

#[async_trait]
impl KeyLimiter for LocalLimits {
    async fn admit(&self, ask: Ask) -> Result<Result<Granted, Refusal>, StoreError> {
        Ok(self.admit_now(ask))
    }

    fn settle(&self, s: Settlement, done: OnSpent) {
        let now_spent = self.budget.settle(s.release, s.spent, s.day);
        if let Some(tpm) = &self.tpm {
            if s.tpm > 0 {
                tpm.charge(s.tpm.unsigned_abs());
            } else if s.tpm < 0 {
                tpm.refund(s.tpm.unsigned_abs());
            }
        }
        done(now_spent);
    }

    async fn usage(&self, day: i64) -> Result<Usage, StoreError> {
        Ok(Usage {
            budget: self.budget.standing(day),
            requests: self.rpm.as_ref().map(PerMinute::in_use),
            tokens: self.tpm.as_ref().map(PerMinute::in_use),
        })
    }
}

fn wait_of(d: Denied) -> std::time::Duration {
    match d {
        Denied::Wait(w) | Denied::TooMany { whole: w } => w,
    }
}
