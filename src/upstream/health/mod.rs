//! Health: passive outlier detection and ejection, fed by every call's
//! outcome (and by active checks, [`check`]). A [`Health`] is one
//! member's: a model on an upstream (its answers: 5xx, answers that are
//! not answers, broken streams, timeouts) or the whole upstream (model
//! "": its transport, connect and TLS errors, and its active checks);
//! [`UpstreamHealth`] holds an upstream's, kept across reloads by the
//! registry (`upstream`); what a call's result says about a member is
//! its [`Outcome`] (`outcome`). A call goes only when both its model's
//! and its upstream's admit it.
//!
//! Serving, each failure adds to a consecutive-failure count (a success
//! resets it); `eject.after` of them in a row, or (with `error_rate`) that
//! fraction of the calls over `window` (at least `min_requests` of them),
//! eject the member for `cooldown × 2^(n-1)` (n: ejections in a row),
//! capped at `max_cooldown`, but only when the failures are not one
//! key's alone ([`tenant`]): they came from two keys or more, or from
//! everyone (a gateway without keys; a transport failure or a check,
//! which say nothing about whose request met them). One key whose
//! requests a server fails with 500s thus never takes the member from
//! the others; a 500 that is a request-validation error (llama-cpp-python
//! answers one so; `ModelError::Rejected`) is no failure at all.
//! Ejected, every call is refused at once; once the cooldown is over
//! exactly one call goes through as a trial (the others are still
//! refused): its success serves the member again, its failure ejects it
//! for the next, longer cooldown. The trial is never a call of a key
//! whose failures ejected it (a cause): a cause's call after the
//! cooldown goes as that key's own probe (one at a time per key), whose
//! success serves the member again and whose failure only holds that key
//! back (for the next cooldown's length) without ejecting anyone else. A
//! trial or probe dropped before it ends lets the next call try. n
//! decays back to 0 once the member has served `max_cooldown` without an
//! ejection. With `eject = false` it is never ejected. All time is
//! `tokio::time::Instant`.
//!
//! The gauge `conclave_upstream_healthy{upstream, model}` (1 serving or on
//! trial, 0 ejected; model "" = the whole upstream) and the counter
//! `conclave_ejections_total{upstream, model}` are recorded here; the
//! events are the caller's (they belong to the request that caused the
//! change).

pub mod check;
mod outcome;
pub mod tenant;
mod upstream;
pub mod watch;
mod window;

use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, gauge};
use parking_lot::Mutex;
use tokio::time::Instant;

use crate::config::Eject;
use crate::sink::Metrics;
use crate::telemetry::{EJECTIONS_TOTAL, UPSTREAM_HEALTHY};
pub use outcome::{Change, Outcome, Shown};
use tenant::Seen;
pub use tenant::Tenant;
pub use upstream::UpstreamHealth;
use window::Window;

/// How long a call waits to be told to retry while another call is the
/// member's trial (or its key's probe is out).
const TRIAL_WAIT: Duration = Duration::from_secs(1);

/// One member's health.
pub struct Health {
    upstream: Arc<str>,
    /// "" for the whole upstream.
    model: Arc<str>,
    metrics: Metrics,
    state: Mutex<State>,
}

struct State {
    eject: Option<Eject>,
    mode: Mode,
    /// Failures in a row while serving.
    failures: u32,
    /// Whose they are.
    run: Seen,
    /// Ejections in a row (n).
    ejections: u32,
    /// When it last began serving (created, or recovered).
    serving_since: Instant,
    /// When the current ejection began.
    ejected_at: Instant,
    window: Window,
    /// The keys whose failures ejected it: none of them is the trial.
    causes: Vec<Cause>,
}

/// A key whose failures ejected the member.
struct Cause {
    key: Arc<str>,
    /// Its probe is out.
    out: bool,
    /// Its next probe may go from then.
    next: Instant,
    /// Its probes that failed during this ejection.
    failed: u32,
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

/// What a let-through call is to its member.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// A call while it serves.
    Call,
    /// The one call after the cooldown that decides for everyone.
    Trial,
    /// A call of a cause key after the cooldown: decides for its key.
    Probe,
}

/// A call let through: its outcome goes back with [`Ticket::end`]; a
/// ticket dropped without one (the caller dropped the call) releases a
/// trial (or probe) for the next call.
pub struct Ticket {
    health: Arc<Health>,
    role: Role,
    who: Tenant,
    ended: bool,
}

impl Ticket {
    /// Whether this call decides whether the member serves again (its
    /// trial, or a key's probe).
    pub fn is_trial(&self) -> bool {
        self.role != Role::Call
    }

    /// The member it is a call to.
    pub fn health(&self) -> Arc<Health> {
        self.health.clone()
    }

    /// Records the call's outcome; returns the change it made, if any.
    pub fn end(mut self, outcome: Outcome) -> Option<Change> {
        self.ended = true;
        self.health.record(outcome, self.role, &self.who)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        if !self.ended && self.role != Role::Call {
            self.health.record(Outcome::Neutral, self.role, &self.who);
        }
    }
}

impl Health {
    /// A serving member (`model` "": the whole upstream), ejected as
    /// `eject` says.
    pub fn new(
        upstream: Arc<str>,
        model: Arc<str>,
        eject: Option<Eject>,
        metrics: Metrics,
    ) -> Arc<Health> {
        let now = Instant::now();
        let h = Health {
            upstream,
            model,
            metrics,
            state: Mutex::new(State {
                window: Window::new(eject.map_or(Duration::from_secs(60), |e| e.window)),
                eject,
                mode: Mode::Serving,
                failures: 0,
                run: Seen::default(),
                ejections: 0,
                serving_since: now,
                ejected_at: now,
                causes: Vec::new(),
            }),
        };
        h.show(true);
        Arc::new(h)
    }

    /// Its upstream's name.
    pub fn upstream(&self) -> &str {
        &self.upstream
    }

    /// Its model's config name ("": the whole upstream).
    pub fn model(&self) -> &str {
        &self.model
    }

    /// The settings of a reloaded config (its state goes on; `None`
    /// serves an ejected member again).
    pub fn configure(&self, eject: Option<Eject>) {
        let mut s = self.state.lock();
        if s.eject.map(|e| e.window) != eject.map(|e| e.window) {
            s.window = Window::new(eject.map_or(Duration::from_secs(60), |e| e.window));
        }
        s.eject = eject;
        if eject.is_none() && s.mode != Mode::Serving {
            s.mode = Mode::Serving;
            s.failures = 0;
            s.run.clear();
            s.causes.clear();
            s.serving_since = Instant::now();
            drop(s);
            self.show(true);
        }
    }

    /// Lets a call of `who` through, or says how long until one may go.
    pub fn admit(self: &Arc<Self>, who: &Tenant) -> Result<Ticket, Duration> {
        let mut s = self.state.lock();
        let role = match s.mode {
            Mode::Serving => Role::Call,
            mode => {
                let now = Instant::now();
                if let Mode::Ejected { until } = mode
                    && until > now
                {
                    return Err(until - now);
                }
                let cause = who
                    .key()
                    .and_then(|k| s.causes.iter_mut().find(|c| c.key == *k));
                match cause {
                    Some(c) if c.out => return Err(TRIAL_WAIT),
                    Some(c) if c.next > now => return Err(c.next - now),
                    Some(c) => {
                        c.out = true;
                        Role::Probe
                    }
                    None if mode == Mode::Trial => return Err(TRIAL_WAIT),
                    None => {
                        s.mode = Mode::Trial;
                        drop(s);
                        // On trial it is serving (one call), as the docs say.
                        self.show(true);
                        Role::Trial
                    }
                }
            }
        };
        Ok(Ticket {
            health: self.clone(),
            role,
            who: who.clone(),
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

    /// An active check's result: a failure counts as a failed call of
    /// everyone's; a pass on an ejected member whose cooldown is over is
    /// its trial.
    pub fn checked(self: &Arc<Self>, passed: bool) -> Option<Change> {
        let outcome = if passed {
            Outcome::Success
        } else {
            Outcome::Failure("check")
        };
        let now = Instant::now();
        let role = {
            let mut s = self.state.lock();
            match s.mode {
                Mode::Serving => Role::Call,
                Mode::Ejected { until } if until <= now => {
                    s.mode = Mode::Trial;
                    Role::Trial
                }
                _ => return None,
            }
        };
        self.record(outcome, role, &Tenant::All)
    }

    fn record(&self, outcome: Outcome, role: Role, who: &Tenant) -> Option<Change> {
        let now = Instant::now();
        let mut s = self.state.lock();
        let eject = s.eject?;
        match role {
            Role::Probe => return self.probed(s, &eject, outcome, who),
            Role::Trial if s.mode != Mode::Trial => return None,
            Role::Trial => {
                return match outcome {
                    Outcome::Success => Some(self.recover(s)),
                    Outcome::Failure(reason) => {
                        // The trial's key is a cause now: it is not the
                        // next trial.
                        let mut run = Seen::default();
                        run.add(who);
                        Some(self.eject(s, &eject, reason, 1, &run))
                    }
                    Outcome::Neutral => {
                        s.mode = Mode::Ejected { until: now };
                        None
                    }
                };
            }
            Role::Call => {}
        }
        if s.mode != Mode::Serving {
            // A call that went out before the ejection: the trial decides.
            return None;
        }
        match outcome {
            Outcome::Neutral => None,
            Outcome::Success => {
                s.failures = 0;
                s.run.clear();
                s.window.add_success(now);
                None
            }
            Outcome::Failure(reason) => {
                s.failures = s.failures.saturating_add(1);
                s.run.add(who);
                let counts = s.window.add_failure(now, who);
                if s.failures >= eject.after && s.run.several() {
                    let (n, run) = (s.failures, s.run.clone());
                    return Some(self.eject(s, &eject, reason, n, &run));
                }
                let over_rate = eject.error_rate.is_some_and(|rate| {
                    counts.calls >= eject.min_requests
                        && f64::from(counts.failures) >= rate * f64::from(counts.calls)
                });
                if over_rate && counts.several {
                    let run = s.run.clone();
                    return Some(self.eject(s, &eject, reason, counts.failures, &run));
                }
                None
            }
        }
    }

    /// A cause key's probe ended: its success serves the member again,
    /// its failure holds back that key alone.
    fn probed(
        &self,
        mut s: parking_lot::MutexGuard<'_, State>,
        eject: &Eject,
        outcome: Outcome,
        who: &Tenant,
    ) -> Option<Change> {
        let ejections = s.ejections;
        let serving = s.mode == Mode::Serving;
        let Some(c) = who
            .key()
            .and_then(|k| s.causes.iter_mut().find(|c| c.key == *k))
        else {
            // Served again meanwhile.
            return None;
        };
        c.out = false;
        match outcome {
            Outcome::Success if !serving => Some(self.recover(s)),
            Outcome::Failure(reason) => {
                c.failed = c.failed.saturating_add(1);
                let wait = cooldown(eject, ejections.saturating_add(c.failed));
                c.next = Instant::now() + wait;
                tracing::debug!(upstream = %self.upstream, model = %self.model, reason, wait = ?wait, "a probe of a key whose failures ejected it failed: that key waits");
                None
            }
            _ => None,
        }
    }

    /// Serves it again (a trial or probe succeeded).
    fn recover(&self, mut s: parking_lot::MutexGuard<'_, State>) -> Change {
        let now = Instant::now();
        s.mode = Mode::Serving;
        s.failures = 0;
        s.run.clear();
        s.causes.clear();
        s.serving_since = now;
        s.window.clear();
        let after = now - s.ejected_at;
        drop(s);
        self.show(true);
        Change::Recovered { after }
    }

    /// Ejects it now for its next cooldown; the keys in `by` (with those
    /// of an ejection it is still in) are its causes.
    fn eject(
        &self,
        mut s: parking_lot::MutexGuard<'_, State>,
        eject: &Eject,
        reason: &'static str,
        failures: u32,
        by: &Seen,
    ) -> Change {
        let now = Instant::now();
        if s.mode == Mode::Serving && now - s.serving_since >= eject.max_cooldown {
            s.ejections = 0;
        }
        s.ejections = s.ejections.saturating_add(1);
        let cooldown = cooldown(eject, s.ejections);
        let until = now + cooldown;
        if s.mode == Mode::Serving {
            s.ejected_at = now;
            s.causes.clear();
        }
        s.mode = Mode::Ejected { until };
        for k in by.keys() {
            if !s.causes.iter().any(|c| c.key == *k) {
                s.causes.push(Cause {
                    key: k.clone(),
                    out: false,
                    next: until,
                    failed: 0,
                });
            }
        }
        for c in &mut s.causes {
            c.next = c.next.max(until);
        }
        s.failures = 0;
        s.run.clear();
        s.window.clear();
        drop(s);
        self.show(false);
        self.metrics.scope(|| {
            counter!(EJECTIONS_TOTAL, "upstream" => self.upstream.to_string(), "model" => self.model.to_string())
                .increment(1);
        });
        tracing::warn!(upstream = %self.upstream, model = %self.model, reason, failures, cooldown = ?cooldown, "upstream ejected");
        Change::Ejected {
            reason,
            cooldown,
            failures,
        }
    }

    fn show(&self, healthy: bool) {
        self.metrics.scope(|| {
            gauge!(UPSTREAM_HEALTHY, "upstream" => self.upstream.to_string(), "model" => self.model.to_string())
                .set(if healthy { 1.0 } else { 0.0 });
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
