//! An upstream's health: passive outlier detection and ejection, fed by
//! every call's outcome (and by active checks, [`check`]). One [`Health`]
//! per upstream server, kept across reloads by the registry.
//!
//! Serving, each failure adds to a consecutive-failure count (a success
//! resets it); `eject.after` of them in a row, or (with `error_rate`) that
//! fraction of the calls over `window` (at least `min_requests` of them),
//! eject the upstream for `cooldown × 2^(n-1)` (n: ejections in a row),
//! capped at `max_cooldown`. Ejected, every call is refused at once; once
//! the cooldown is over exactly one call goes through as a trial (the
//! others are still refused): its success serves the upstream again, its
//! failure ejects it for the next, longer cooldown. A trial dropped before
//! it ends lets the next call be the trial. n decays back to 0 once the
//! upstream has served `max_cooldown` without an ejection. With `eject =
//! false` it is never ejected. All time is `tokio::time::Instant`.
//!
//! The gauge `conclave_upstream_healthy{upstream}` (1 serving or on
//! trial, 0 ejected) and the counter `conclave_ejections_total{upstream}`
//! are recorded here; the events are the caller's (they belong to the
//! request that caused the change).

pub mod check;
pub mod watch;
mod window;

use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, gauge};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::config::Eject;
use crate::error::{ModelError, TimeoutPhase};
use crate::sink::Metrics;
use crate::telemetry::{EJECTIONS_TOTAL, UPSTREAM_HEALTHY};
use window::Window;

/// How long a call waits to be told to retry while another call is the
/// upstream's trial.
const TRIAL_WAIT: Duration = Duration::from_secs(1);

/// One upstream's health.
pub struct Health {
    name: Arc<str>,
    metrics: Metrics,
    state: Mutex<State>,
}

struct State {
    eject: Option<Eject>,
    mode: Mode,
    /// Failures in a row while serving.
    failures: u32,
    /// Ejections in a row (n).
    ejections: u32,
    /// When it last began serving (created, or recovered).
    serving_since: Instant,
    /// When the current ejection began.
    ejected_at: Instant,
    window: Window,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    Serving,
    Ejected {
        until: Instant,
    },
    /// The cooldown is over and one call is out as the trial.
    Trial,
}

/// What `/readyz` shows of it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    Serving,
    /// Ejected; its cooldown ends after this (zero: the next call is the
    /// trial).
    Ejected(Duration),
    Trial,
}

impl Shown {
    pub fn label(self) -> &'static str {
        match self {
            Shown::Serving => "serving",
            Shown::Ejected(_) => "ejected",
            Shown::Trial => "trial",
        }
    }
}

/// What a call's outcome means for its upstream's health.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The server worked (an answer, or a 4xx about the request).
    Success,
    /// The server failed: the short reason (`ModelError::kind`).
    Failure(&'static str),
    /// Says nothing about the server (conclave's own queue or limit, a
    /// call dropped by its caller).
    Neutral,
}

impl Outcome {
    /// What a call that ended in `e` says about its upstream.
    pub fn of(e: &ModelError) -> Outcome {
        match e {
            ModelError::Connect { .. }
            | ModelError::Invalid { .. }
            | ModelError::StreamCut { .. }
            | ModelError::Reported { .. } => Outcome::Failure(e.kind()),
            ModelError::Timeout { phase, .. } if *phase != TimeoutPhase::Lane => {
                Outcome::Failure(e.kind())
            }
            ModelError::Status { status, .. } if *status >= 500 => Outcome::Failure(e.kind()),
            // A 429 is the server asking for less, not failing: it is
            // retried after its Retry-After, and a balance moves on, but
            // it never turns the provider's limit into 503s for everyone.
            ModelError::Status { status: 429, .. } => Outcome::Neutral,
            ModelError::Status { .. } => Outcome::Success,
            _ => Outcome::Neutral,
        }
    }
}

/// A change of state, for the caller's `upstream_ejected` and
/// `upstream_recovered` events.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Ejected {
        reason: &'static str,
        cooldown: Duration,
        /// Failures that ejected it (in a row, or in the window).
        failures: u32,
    },
    /// Serving again, `after` its ejection began.
    Recovered { after: Duration },
}

/// A call let through: its outcome goes back with [`Ticket::end`]; a
/// ticket dropped without one (the caller dropped the call) releases a
/// trial for the next call.
pub struct Ticket {
    health: Arc<Health>,
    trial: bool,
    ended: bool,
}

impl Ticket {
    /// Whether this call is the upstream's trial.
    pub fn is_trial(&self) -> bool {
        self.trial
    }

    /// Records the call's outcome; returns the change it made, if any.
    pub fn end(mut self, outcome: Outcome) -> Option<Change> {
        self.ended = true;
        self.health.record(outcome, self.trial)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.ended && self.trial {
            self.health.record(Outcome::Neutral, true);
        }
    }
}

impl Health {
    /// A serving upstream `name`, ejected as `eject` says.
    pub fn new(name: Arc<str>, eject: Option<Eject>, metrics: Metrics) -> Arc<Health> {
        let now = Instant::now();
        let h = Health {
            name,
            metrics,
            state: Mutex::new(State {
                window: Window::new(eject.map_or(Duration::from_secs(60), |e| e.window)),
                eject,
                mode: Mode::Serving,
                failures: 0,
                ejections: 0,
                serving_since: now,
                ejected_at: now,
            }),
        };
        h.show(true);
        Arc::new(h)
    }

    /// The settings of a reloaded config (its state goes on; `None`
    /// serves an ejected upstream again).
    pub fn configure(&self, eject: Option<Eject>) {
        let mut s = self.state.lock();
        if s.eject.map(|e| e.window) != eject.map(|e| e.window) {
            s.window = Window::new(eject.map_or(Duration::from_secs(60), |e| e.window));
        }
        s.eject = eject;
        if eject.is_none() && s.mode != Mode::Serving {
            s.mode = Mode::Serving;
            s.failures = 0;
            s.serving_since = Instant::now();
            drop(s);
            self.show(true);
        }
    }

    /// Lets a call through, or says how long until one may go.
    pub fn admit(self: &Arc<Self>) -> Result<Ticket, Duration> {
        let now = Instant::now();
        let mut s = self.state.lock();
        let trial = match s.mode {
            Mode::Serving => false,
            Mode::Trial => return Err(TRIAL_WAIT),
            Mode::Ejected { until } if until > now => return Err(until - now),
            Mode::Ejected { .. } => {
                s.mode = Mode::Trial;
                drop(s);
                // On trial it is serving (one call), as the docs say.
                self.show(true);
                true
            }
        };
        Ok(Ticket {
            health: self.clone(),
            trial,
            ended: false,
        })
    }

    /// Its state now.
    pub fn shown(&self) -> Shown {
        match self.state.lock().mode {
            Mode::Serving => Shown::Serving,
            Mode::Trial => Shown::Trial,
            Mode::Ejected { until } => {
                Shown::Ejected(until.saturating_duration_since(Instant::now()))
            }
        }
    }

    /// How long until a call may go: `None` when one may go now.
    pub fn refused_for(&self) -> Option<Duration> {
        match self.state.lock().mode {
            Mode::Serving => None,
            Mode::Trial => Some(TRIAL_WAIT),
            Mode::Ejected { until } => {
                Some(until.saturating_duration_since(Instant::now())).filter(|d| !d.is_zero())
            }
        }
    }

    /// An active check's result: a failure counts as a failed call; a
    /// pass on an ejected upstream whose cooldown is over is its trial.
    pub fn checked(self: &Arc<Self>, passed: bool) -> Option<Change> {
        let outcome = if passed {
            Outcome::Success
        } else {
            Outcome::Failure("check")
        };
        let now = Instant::now();
        let trial = {
            let mut s = self.state.lock();
            match s.mode {
                Mode::Serving => false,
                Mode::Ejected { until } if until <= now => {
                    s.mode = Mode::Trial;
                    true
                }
                _ => return None,
            }
        };
        self.record(outcome, trial)
    }

    fn record(&self, outcome: Outcome, trial: bool) -> Option<Change> {
        let now = Instant::now();
        let mut s = self.state.lock();
        let eject = s.eject?;
        if trial {
            if s.mode != Mode::Trial {
                return None;
            }
            return match outcome {
                Outcome::Success => {
                    s.mode = Mode::Serving;
                    s.failures = 0;
                    s.serving_since = now;
                    s.window.clear();
                    let after = now - s.ejected_at;
                    drop(s);
                    self.show(true);
                    Some(Change::Recovered { after })
                }
                Outcome::Failure(reason) => Some(self.eject(s, &eject, reason, 1)),
                Outcome::Neutral => {
                    s.mode = Mode::Ejected { until: now };
                    None
                }
            };
        }
        if s.mode != Mode::Serving {
            // A call that went out before the ejection: the trial decides.
            return None;
        }
        match outcome {
            Outcome::Neutral => None,
            Outcome::Success => {
                s.failures = 0;
                s.window.add(now, false);
                None
            }
            Outcome::Failure(reason) => {
                s.failures = s.failures.saturating_add(1);
                let (calls, failed) = s.window.add(now, true);
                if s.failures >= eject.after {
                    let n = s.failures;
                    return Some(self.eject(s, &eject, reason, n));
                }
                let over_rate = eject.error_rate.is_some_and(|rate| {
                    calls >= eject.min_requests && f64::from(failed) >= rate * f64::from(calls)
                });
                over_rate.then(|| self.eject(s, &eject, reason, failed))
            }
        }
    }

    /// Ejects it now for its next cooldown.
    fn eject(
        &self,
        mut s: parking_lot::MutexGuard<'_, State>,
        eject: &Eject,
        reason: &'static str,
        failures: u32,
    ) -> Change {
        let now = Instant::now();
        if s.mode == Mode::Serving && now - s.serving_since >= eject.max_cooldown {
            s.ejections = 0;
        }
        s.ejections = s.ejections.saturating_add(1);
        let cooldown = cooldown(eject, s.ejections);
        if s.mode == Mode::Serving {
            s.ejected_at = now;
        }
        s.mode = Mode::Ejected {
            until: now + cooldown,
        };
        s.failures = 0;
        s.window.clear();
        drop(s);
        self.show(false);
        self.metrics.scope(|| {
            counter!(EJECTIONS_TOTAL, "upstream" => self.name.to_string()).increment(1);
        });
        tracing::warn!(upstream = %self.name, reason, failures, cooldown = ?cooldown, "upstream ejected");
        Change::Ejected {
            reason,
            cooldown,
            failures,
        }
    }

    fn show(&self, healthy: bool) {
        self.metrics.scope(|| {
            gauge!(UPSTREAM_HEALTHY, "upstream" => self.name.to_string()).set(if healthy {
                1.0
            } else {
                0.0
            });
        });
    }
}

/// The `n`th ejection in a row's length: `cooldown × 2^(n-1)`, at most
/// `max_cooldown`.
fn cooldown(e: &Eject, n: u32) -> Duration {
    let doubled = e
        .cooldown
        .checked_mul(1u32.checked_shl(n.saturating_sub(1)).unwrap_or(u32::MAX))
        .unwrap_or(e.max_cooldown);
    doubled.min(e.max_cooldown)
}

#[cfg(test)]
mod tests;
