//! One API key's governor: its per-minute limits (`rpm`, `tpm`) and its
//! daily budget, checked together when a request is admitted, by its
//! [`KeyLimiter`] (in this process, or on the shared state). A request is
//! let in whole or not at all. When the shared state does not answer, the
//! key's policy (`on_state_error`) refuses it ([`Refused::StateDown`], a
//! 503) or lets it in unchecked, its spend counted later.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use metrics::{Counter, Gauge, counter, gauge};

use super::ticket::{Account, Ticket};
use super::{Rejection, Scope};
use crate::clock::Clock;
use crate::config::{KeyLimits, OnError};
use crate::model::Spend;
use crate::store::limits::budget::{self, Daily, Over};
use crate::store::limits::rate::{Standing, openai_duration, retry_after_secs};
use crate::store::limits::{Ask, KeyLimiter, OnSpent, Refusal, Settlement};
use crate::telemetry::{BUDGET_REMAINING, GOVERNOR_UNCHECKED};

pub struct KeyGov {
    pub name: Arc<str>,
    pub limits: KeyLimits,
    /// Where the key's limits live: this process, or the shared state.
    pub(super) limiter: Arc<dyn KeyLimiter>,
    /// What to do when the shared state cannot answer (`None`: the
    /// limits are in this process and always answer).
    policy: Option<OnError>,
    /// `conclave_budget_remaining_tokens` for this key, looked up once.
    remaining: Option<Gauge>,
    /// `conclave_governor_unchecked_total` for this key (under
    /// `fail_open`), looked up once.
    unchecked: Option<Counter>,
    /// The instance's wall clock: what "today" is.
    pub(super) clock: Clock,
}

/// Why a request was not let in.
#[derive(Debug)]
pub enum Refused {
    /// A limit turned it away: a 429.
    Limited(Box<Rejection>),
    /// The shared state did not answer and the key fails closed: a 503.
    StateDown { key: Arc<str> },
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
    pub(super) fn new(
        name: &str,
        limits: KeyLimits,
        limiter: Arc<dyn KeyLimiter>,
        policy: Option<OnError>,
        clock: Clock,
    ) -> Self {
        KeyGov {
            name: name.into(),
            limits,
            limiter,
            policy,
            remaining: None,
            unchecked: None,
            clock,
        }
    }

    /// The key with its remaining-budget gauge (when it has a daily token
    /// budget), registered on the current recorder (and set to today's
    /// figure when this process holds it).
    pub(super) fn with_gauge(mut self, spent: Option<Spend>) -> Self {
        let name = self.name.clone();
        self.remaining = self
            .limits
            .daily_tokens
            .map(|_| gauge!(BUDGET_REMAINING, "key" => name.clone()));
        self.unchecked = (self.policy == Some(OnError::FailOpen))
            .then(|| counter!(GOVERNOR_UNCHECKED, "key" => name));
        if let Some(spent) = spent {
            self.show_remaining(spent);
        }
        self
    }

    fn rpm(&self) -> Option<u32> {
        self.limits.rpm.filter(|&r| r > 0)
    }

    pub(super) fn tpm(&self) -> Option<u32> {
        self.limits.tpm.filter(|&t| t > 0)
    }

    /// Lets a request that may spend `estimate` in, or says why not.
    /// `capped`: the client set the output cap (else the estimate used
    /// the gateway's default, and is trimmed to what `tpm` can hold).
    /// A key without limits asks nothing of the state.
    pub async fn admit(
        self: &Arc<Self>,
        estimate: Spend,
        capped: bool,
    ) -> Result<Admission, Refused> {
        let budgeted = self.daily() != Daily::default();
        let tpm = self.tpm();
        if self.rpm().is_none() && tpm.is_none() && !budgeted {
            return Ok(Admission {
                headers: RateHeaders::default(),
                ticket: None,
            });
        }
        let now = self.clock.now();
        let today = budget::utc_day(now);
        // What can never fit is refused before any limit is spent on it
        // (more than `tpm` holds is the limiter's to say, first).
        let too_big = capped && tpm.is_some_and(|t| estimate.tokens > u64::from(t));
        if !too_big && let Some(over) = self.daily().never_fits(estimate) {
            let r = self.budget_rejection(over, now, RateHeaders::default());
            return Err(Refused::Limited(r));
        }
        let mut n = u32::try_from(estimate.tokens).unwrap_or(u32::MAX);
        if let Some(t) = tpm.filter(|_| !capped) {
            n = n.min(t);
        }
        let held = if budgeted { estimate } else { Spend::default() };
        let ask = Ask {
            estimate: held,
            daily: self.daily(),
            tpm: tpm.map_or(0, |_| n),
            day: today,
        };
        let granted = match self.limiter.admit(ask).await {
            Ok(Ok(g)) => g,
            Ok(Err(refusal)) => return Err(Refused::Limited(self.refused(refusal, n, now))),
            Err(e) if self.policy == Some(OnError::FailOpen) => {
                tracing::debug!(key = %self.name, "admitted unchecked (fail_open): {e}");
                if let Some(c) = &self.unchecked {
                    c.increment(1);
                }
                let ticket = Arc::new(Ticket::new(self.clone(), None, Spend::default(), 0));
                return Ok(Admission {
                    headers: RateHeaders::default(),
                    ticket: Some(ticket),
                });
            }
            Err(e) => {
                tracing::debug!(key = %self.name, "refused (fail_closed): {e}");
                return Err(Refused::StateDown {
                    key: self.name.clone(),
                });
            }
        };
        self.show_remaining(granted.spent);
        let taken = tpm.map_or(0, |_| u64::from(n.max(1)));
        let ticket = (budgeted || tpm.is_some())
            .then(|| Arc::new(Ticket::new(self.clone(), granted.hold, held, taken)));
        Ok(Admission {
            headers: RateHeaders {
                requests: granted.requests,
                tokens: granted.tokens,
            },
            ticket,
        })
    }

    /// The rejection of a refusal; `n`: the tokens `tpm` was asked for.
    fn refused(&self, refusal: Refusal, n: u32, now: SystemTime) -> Box<Rejection> {
        let mut headers = RateHeaders::default();
        let spent = |limit: u32, reset: Duration| Standing {
            limit,
            remaining: 0,
            reset,
        };
        let (rpm, tpm) = (self.rpm().unwrap_or(0), self.tpm().unwrap_or(0));
        match refusal {
            Refusal::Rpm(wait) => {
                headers.requests = Some(spent(rpm, wait));
                self.rate_rejection(Scope::Rpm, rpm, 1, wait, headers)
            }
            Refusal::Tpm(wait) => {
                headers.tokens = Some(spent(tpm, wait));
                self.rate_rejection(Scope::Tpm, tpm, u64::from(n), wait, headers)
            }
            Refusal::TpmNever(whole) => {
                headers.tokens = Some(spent(tpm, whole));
                self.too_big(u64::from(n), tpm, whole, headers)
            }
            Refusal::Budget(over) => self.budget_rejection(over, now, headers),
        }
    }

    pub(super) fn daily(&self) -> Daily {
        Daily {
            tokens: self.limits.daily_tokens,
            cost_usd: self.limits.daily_cost_usd,
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

impl Account for KeyGov {
    fn settle(self: Arc<Self>, s: Settlement, show: bool) {
        let done: OnSpent = if show {
            let key = self.clone();
            Box::new(move |spent| key.show_remaining(spent))
        } else {
            Box::new(|_| ())
        };
        self.limiter.settle(s, done);
    }

    fn today(&self) -> i64 {
        budget::utc_day(self.clock.now())
    }

    fn counts_tpm(&self) -> bool {
        self.tpm().is_some()
    }
}
