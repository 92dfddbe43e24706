//! A key's limits in this process: `rpm` and `tpm` as GCRA on tokio's
//! clock ([`PerMinute`]), the daily budget as a [`Budget`] under one lock
//! (its spend written to the SQLite store by the governor's flusher).
//! A later check that fails gives back what an earlier one took.

use std::sync::Arc;

use async_trait::async_trait;

use super::budget::{self, Budget, Daily};
use super::rate::{Denied, PerMinute};
use super::{Ask, Granted, KeyLimiter, OnSpent, Refusal, Settlement};
use crate::config::KeyLimits;
use crate::model::Spend;
use crate::store::StoreError;

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

    async fn standing(&self, day: i64) -> Result<budget::Standing, StoreError> {
        Ok(self.budget.standing(day))
    }
}

fn wait_of(d: Denied) -> std::time::Duration {
    match d {
        Denied::Wait(w) | Denied::TooMany { whole: w } => w,
    }
}
