//! [`Ticket`]: an admitted request's reservation, settled attempt by
//! attempt. It is one of the request's attempt sinks, so every upstream
//! call (nested, parallel, cancelled, or finishing after the client has
//! gone) is charged once, with its real usage or the estimate made when
//! an upstream reported none. Each charge releases as much of the
//! reservation; what is left is released when the request's context
//! goes, and the `tpm` limit charges what the estimate missed as debt
//! (or refunds what it overestimated). Settlements go to the key's
//! limiter, which never blocks (on the shared state they run on a task).
//! A ticket knows its key only as an [`Account`] (a key's governor is
//! one), so the two do not import each other.

use std::sync::Arc;

use parking_lot::Mutex;

use crate::model::Spend;
use crate::sink::{AttemptRecord, AttemptSink};
use crate::store::limits::Settlement;

/// What a ticket settles against: a key's limits.
pub trait Account: Send + Sync {
    /// Counts `s` with the key's limiter (never blocking); `show`: then
    /// update the key's remaining-budget gauge with what it has spent.
    fn settle(self: Arc<Self>, s: Settlement, show: bool);
    /// The UTC day (days since the epoch) on the key's clock.
    fn today(&self) -> i64;
    /// Whether the key has a `tpm` limit (which the request's end
    /// corrects by what was really spent).
    fn counts_tpm(&self) -> bool;
}

pub struct Ticket {
    key: Arc<dyn Account>,
    /// The reservation's id, where the limiter names one.
    hold: Option<u64>,
    /// Tokens `tpm` took for the request, for its correction.
    taken: u64,
    state: Mutex<State>,
}

struct State {
    /// What is still reserved against the daily budget.
    held: Spend,
    /// Tokens charged so far.
    spent: u64,
}

impl Ticket {
    pub(super) fn new(key: Arc<dyn Account>, hold: Option<u64>, held: Spend, taken: u64) -> Self {
        Ticket {
            key,
            hold,
            taken,
            state: Mutex::new(State { held, spent: 0 }),
        }
    }
}

impl AttemptSink for Ticket {
    fn record(&self, a: &AttemptRecord) {
        let Some(usage) = a.usage else {
            return;
        };
        let spent = Spend {
            tokens: usage.prompt_tokens.saturating_add(usage.completion_tokens),
            cost_usd: a.cost_usd.unwrap_or_default(),
        };
        let release = {
            let mut s = self.state.lock();
            s.spent = s.spent.saturating_add(spent.tokens);
            let release = Spend {
                tokens: s.held.tokens.min(spent.tokens),
                cost_usd: s.held.cost_usd.min(spent.cost_usd),
            };
            s.held = Spend {
                tokens: s.held.tokens - release.tokens,
                cost_usd: s.held.cost_usd - release.cost_usd,
            };
            release
        };
        let settlement = Settlement {
            hold: self.hold,
            release,
            spent,
            day: self.key.today(),
            ..Settlement::default()
        };
        self.key.clone().settle(settlement, true);
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let s = self.state.get_mut();
        let tpm = if self.key.counts_tpm() {
            let (spent, taken) = (
                s.spent.min(i64::MAX as u64),
                self.taken.min(i64::MAX as u64),
            );
            spent.cast_signed() - taken.cast_signed()
        } else {
            0
        };
        let settlement = Settlement {
            hold: self.hold,
            release: s.held,
            last: true,
            day: self.key.today(),
            tpm,
            ..Settlement::default()
        };
        self.key.clone().settle(settlement, false);
    }
}
