//! What a call's outcome says about a member's health ([`Outcome`]:
//! its model's, or its upstream's transport), the change of state
//! recording it may make ([`Change`], which the caller reports), and a
//! member's state as `/readyz` shows it ([`Shown`]).

use std::time::Duration;

use crate::error::{ModelError, TimeoutPhase};

/// What a call's outcome means for a member's health.
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
    /// What a call that ended in `e` says about its model, on its
    /// upstream: an answer's failure (5xx, not an answer, a broken
    /// stream, a timeout) is the model's; a failure to reach the server
    /// (connect, TLS, a connect timeout) is the upstream's alone, and
    /// says nothing about the model.
    pub fn of(e: &ModelError) -> Outcome {
        match e {
            ModelError::Invalid { .. }
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
            // A request the server found invalid (a 4xx, or a 500 that
            // is a validation error): the server works; the request was bad.
            ModelError::Status { .. } | ModelError::Rejected { .. } => Outcome::Success,
            _ => Outcome::Neutral,
        }
    }

    /// What a call that ended in `e` says about its upstream's transport:
    /// a connect error (refused, DNS, TLS, a connect timeout) fails it;
    /// any HTTP answer, or an answer that was not one, shows it works;
    /// the rest (timeouts, cuts) says nothing of it.
    pub fn of_transport(e: &ModelError) -> Outcome {
        match e {
            ModelError::Connect { .. } => Outcome::Failure(e.kind()),
            ModelError::Status { .. }
            | ModelError::Rejected { .. }
            | ModelError::Invalid { .. }
            | ModelError::Reported { .. } => Outcome::Success,
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
