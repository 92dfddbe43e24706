//! One API key's governor: its per-minute limits (`rpm`, `tpm`) and its
//! daily budget, checked together when a request is admitted. A request
//! is let in whole or not at all: a later check that fails gives back
//! what an earlier one reserved.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use metrics::{Gauge, gauge};

use super::budget::{self, Budget, Daily, Over};
use super::rate::{Denied, PerMinute, Standing, openai_duration, retry_after_secs};
use super::ticket::Ticket;
use super::{Rejection, Scope};
use crate::clock::Clock;
use crate::config::KeyLimits;
use crate::model::Spend;
use crate::telemetry::BUDGET_REMAINING;

pub struct KeyGov {
    pub name: Arc<str>,
    pub limits: KeyLimits,
    rpm: Option<PerMinute>,
    tpm: Option<PerMinute>,
    pub(super) budget: Arc<Budget>,
    /// `conclave_budget_remaining_tokens` for this key, looked up once.
    remaining: Option<Gauge>,
    /// The instance's wall clock: what "today" is.
    pub(super) clock: Clock,
}

/// What an admitted request carries: the figures for its response's
/// `x-ratelimit-*` headers, and the ticket that settles its spend.
pub struct Admission {
    pub headers: RateHeaders,
    pub ticket: Option<Arc<Ticket>>,
}

/// Where a limited key's per-minute limits stand.
#[derive(Debug, Clone, Copy, Default)]
pub struct RateHeaders {
    pub requests: Option<Standing>,
    pub tokens: Option<Standing>,
}

impl RateHeaders {
    /// OpenAI's `x-ratelimit-*` headers (none for an unlimited key).
    pub fn pairs(&self) -> Vec<(&'static str, String)> {
        let mut out = Vec::new();
        let mut add = |s: &Option<Standing>, names: [&'static str; 3]| {
            if let Some(s) = s {
                out.push((names[0], s.limit.to_string()));
                out.push((names[1], s.remaining.to_string()));
                out.push((names[2], openai_duration(s.reset)));
            }
        };
        add(
            &self.requests,
            [
                "x-ratelimit-limit-requests",
                "x-ratelimit-remaining-requests",
                "x-ratelimit-reset-requests",
            ],
        );
        add(
            &self.tokens,
            [
                "x-ratelimit-limit-tokens",
                "x-ratelimit-remaining-tokens",
                "x-ratelimit-reset-tokens",
            ],
        );
        out
    }
}

impl KeyGov {
    pub(super) fn new(name: &str, limits: KeyLimits, budget: Arc<Budget>, clock: Clock) -> Self {
        KeyGov {
            name: name.into(),
            limits,
            rpm: limits.rpm.and_then(PerMinute::new),
            tpm: limits.tpm.and_then(PerMinute::new),
            budget,
            remaining: None,
            clock,
        }
    }

    /// The key with its remaining-budget gauge (when it has a daily token
    /// budget), registered on the current recorder and set to today's.
    pub(super) fn with_gauge(mut self) -> Self {
        let name = self.name.clone();
        self.remaining = self
            .limits
            .daily_tokens
            .map(|_| gauge!(BUDGET_REMAINING, "key" => name));
        let today = budget::utc_day(self.clock.now());
        self.show_remaining(self.budget.standing(today).spent);
        self
    }

    /// Lets a request that may spend `estimate` in, or says why not.
    /// `capped`: the client set the output cap (else the estimate used
    /// the gateway's default, and is trimmed to what `tpm` can hold).
    pub fn admit(
        self: &Arc<Self>,
        estimate: Spend,
        capped: bool,
    ) -> Result<Admission, Box<Rejection>> {
        let mut headers = RateHeaders::default();
        let now = self.clock.now();
        let today = budget::utc_day(now);
        let budgeted = self.daily() != Daily::default();
        // What can never fit is refused before any limit is spent on it.
        if let Some(tpm) = self
            .tpm
            .as_ref()
            .filter(|t| capped && estimate.tokens > u64::from(t.limit()))
        {
            let s = tpm.now();
            headers.tokens = Some(s);
            return Err(self.too_big(estimate.tokens, tpm.limit(), s.reset, headers));
        }
        if let Some(over) = self.daily().never_fits(estimate) {
            return Err(self.budget_rejection(over, now, headers));
        }
        if let Some(rpm) = &self.rpm {
            match rpm.take(1) {
                Ok(s) => headers.requests = Some(s),
                Err(d) => {
                    let wait = wait_of(d);
                    headers.requests = Some(rpm.exhausted(wait));
                    return Err(self.rate_rejection(Scope::Rpm, rpm.limit(), 1, wait, headers));
                }
            }
        }
        // A later limit that says no gives back what the earlier took.
        let undo_rpm = || {
            if let Some(rpm) = &self.rpm {
                rpm.refund(1);
            }
        };
        if budgeted && let Err(over) = self.budget.reserve(self.daily(), estimate, today) {
            undo_rpm();
            return Err(self.budget_rejection(over, now, headers));
        }
        // The tokens `tpm` took for this request; its real usage later
        // charges what it spent beyond them as debt, or refunds the rest.
        let mut taken = 0;
        if let Some(tpm) = &self.tpm {
            let mut n = u32::try_from(estimate.tokens).unwrap_or(u32::MAX);
            if !capped {
                n = n.min(tpm.limit());
            }
            match tpm.take(n) {
                Ok(s) => {
                    headers.tokens = Some(s);
                    taken = u64::from(n.max(1));
                }
                Err(d) => {
                    undo_rpm();
                    if budgeted {
                        self.budget.settle(estimate, Spend::default(), today);
                    }
                    if let Denied::TooMany { whole } = d {
                        headers.tokens = Some(tpm.exhausted(whole));
                        return Err(self.too_big(u64::from(n), tpm.limit(), whole, headers));
                    }
                    let wait = wait_of(d);
                    headers.tokens = Some(tpm.exhausted(wait));
                    return Err(self.rate_rejection(
                        Scope::Tpm,
                        tpm.limit(),
                        u64::from(n),
                        wait,
                        headers,
                    ));
                }
            }
        }
        let ticket = (budgeted || self.tpm.is_some()).then(|| {
            Arc::new(Ticket::new(
                self.clone(),
                if budgeted { estimate } else { Spend::default() },
                taken,
            ))
        });
        Ok(Admission { headers, ticket })
    }

    pub(super) fn daily(&self) -> Daily {
        Daily {
            tokens: self.limits.daily_tokens,
            cost_usd: self.limits.daily_cost_usd,
        }
    }

    /// A request spent `spent` tokens where `tpm` took `taken` for it:
    /// the limit charges the difference as debt, or refunds it.
    pub(super) fn correct_tpm(&self, taken: u64, spent: u64) {
        if let Some(tpm) = &self.tpm {
            if spent > taken {
                tpm.charge(spent - taken);
            } else {
                tpm.refund(taken - spent);
            }
        }
    }

    /// Updates `conclave_budget_remaining_tokens` for a daily token
    /// limit, from what is `spent` today.
    pub(super) fn show_remaining(&self, spent: Spend) {
        if let (Some(limit), Some(g)) = (self.limits.daily_tokens, &self.remaining) {
            g.set(limit.saturating_sub(spent.tokens) as f64);
        }
    }

    /// More tokens than a minute's `tpm` holds: no retry helps. It still
    /// says when the limit is whole again (`whole`), and tells clients
    /// not to retry as it is.
    fn too_big(
        &self,
        asked: u64,
        limit: u32,
        whole: Duration,
        headers: RateHeaders,
    ) -> Box<Rejection> {
        let mut r = self.rate_rejection(Scope::Tpm, limit, asked, whole, headers);
        r.never = true;
        r.message = format!(
            "This request may use up to {asked} tokens, more than key `{}`'s limit of {limit} \
             tokens per minute; it can never fit. Lower `max_tokens` (or `n`) or shorten the \
             request.",
            self.name
        );
        r
    }

    fn rate_rejection(
        &self,
        scope: Scope,
        limit: u32,
        asked: u64,
        wait: Duration,
        headers: RateHeaders,
    ) -> Box<Rejection> {
        let unit = if scope == Scope::Rpm {
            "requests"
        } else {
            "tokens"
        };
        let secs = retry_after_secs(wait);
        Box::new(Rejection {
            key: self.name.clone(),
            scope,
            message: format!(
                "Rate limit reached for key `{}` on {unit} per minute: limit {limit}, requested \
                 {asked}. Please try again in {secs}s.",
                self.name
            ),
            limit: f64::from(limit),
            asked: asked as f64,
            retry_after: Some(secs),
            never: false,
            headers,
        })
    }

    fn budget_rejection(
        &self,
        over: Over,
        now: SystemTime,
        headers: RateHeaders,
    ) -> Box<Rejection> {
        let secs = budget::until_day_ends(now).as_secs().max(1);
        // Requests in flight hold what this one needs: it fits once they
        // settle (they usually spend less than they reserved).
        let busy = match over {
            Over::Tokens {
                left, held, asked, ..
            } => asked <= left.saturating_add(held),
            Over::Cost {
                left, held, asked, ..
            } => asked <= left + held,
        };
        let (scope, limit, asked, message) = match over {
            Over::Tokens {
                limit, left, asked, ..
            } => (
                Scope::DailyTokens,
                limit as f64,
                asked as f64,
                format!(
                    "Key `{}` has {left} of its {limit} daily tokens left; this request may use up \
                     to {asked}. The budget renews at 00:00 UTC, in {secs}s.",
                    self.name
                ),
            ),
            Over::Cost {
                limit, left, asked, ..
            } => (
                Scope::DailyCost,
                limit,
                asked,
                format!(
                    "Key `{}` has ${left:.4} of its ${limit:.2} daily budget left; this request \
                     may cost up to ${asked:.4}. The budget renews at 00:00 UTC, in {secs}s.",
                    self.name
                ),
            ),
        };
        // More than a whole day's budget never fits: no retry helps.
        let never = asked > limit;
        let (message, retry_after) = if never {
            (
                format!(
                    "{message} It is more than the whole daily budget: lower `max_tokens` (or `n`)."
                ),
                Some(secs),
            )
        } else if busy {
            (
                format!(
                    "{message} Requests of this key still in flight hold the rest; retry when \
                     they finish."
                ),
                Some(1),
            )
        } else {
            (message, Some(secs))
        };
        Box::new(Rejection {
            key: self.name.clone(),
            scope,
            message,
            limit,
            asked,
            retry_after,
            never,
            headers,
        })
    }
}

fn wait_of(d: Denied) -> Duration {
    match d {
        Denied::Wait(w) | Denied::TooMany { whole: w } => w,
    }
}
