//! The trail a strategy leaves when it gives up: one [`AttemptSummary`]
//! per member called or skipped (an exhausted route's `attempts`), and
//! why a request did not fit a context window ([`TooLong`]).

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::ModelError;

/// A request's input estimate (`needed`, in tokens) against a context
/// window it does not fit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLong {
    pub window: u64,
    pub needed: u64,
}

impl TooLong {
    /// `context window 512 < ~2100 tokens`: why a member was skipped.
    pub fn reason(self) -> String {
        format!("context window {} < ~{} tokens", self.window, self.needed)
    }
}

pub(super) fn too_long_message(fit: &TooLong, attempts: &[AttemptSummary]) -> String {
    let mut m = format!(
        "This model's maximum context length is {} tokens; the request needs about {} tokens.",
        fit.window, fit.needed
    );
    if !attempts.is_empty() {
        m.push_str(" It is too long for every member: ");
        let each: Vec<String> = attempts
            .iter()
            .map(|a| {
                let why = a.feedback.as_deref().or(a.error.as_deref());
                format!("{} ({})", a.model, why.unwrap_or(""))
            })
            .collect();
        m.push_str(&each.join(", "));
        m.push('.');
    }
    m
}

/// One line of a strategy's attempt trail, shown in an exhausted-chain
/// error. Built only through [`AttemptSummary::failed`] and
/// [`AttemptSummary::rejected`], so every trail renders errors one way.
#[derive(Debug, Clone, Serialize)]
pub struct AttemptSummary {
    pub model: String,
    /// `error`, `escalate`, or `skipped` (not called: the request does
    /// not fit its context window; `feedback` says so).
    pub verdict: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub feedback: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Why it was skipped, when it was.
    #[serde(skip)]
    pub skipped: Option<TooLong>,
    /// It was called, and its server said the request is too long.
    #[serde(skip)]
    pub too_long: bool,
    /// Skipped as ejected: when it may serve again.
    #[serde(skip)]
    pub ejected: Option<Duration>,
    /// Its server rejected the request as invalid (a validation 500).
    #[serde(skip)]
    pub invalid: Option<Invalid>,
}

/// What a [`ModelError::Rejected`] said, kept in an attempt trail.
#[derive(Debug, Clone)]
pub struct Invalid {
    pub upstream: Arc<str>,
    pub status: u16,
    pub field: Option<String>,
    pub problem: &'static str,
}

impl AttemptSummary {
    /// A call to `model` that failed with `e`; one the request did not
    /// fit is `skipped`, with the reason as its feedback.
    pub fn failed(model: &str, e: &ModelError) -> Self {
        if let ModelError::TooLong { fit, .. } = e {
            return AttemptSummary {
                model: model.to_owned(),
                verdict: "skipped",
                feedback: Some(fit.reason()),
                error: None,
                skipped: Some(*fit),
                too_long: false,
                ejected: None,
                invalid: None,
            };
        }
        if let Some(wait) = e.ejected_for() {
            return AttemptSummary {
                model: model.to_owned(),
                verdict: "skipped",
                feedback: e.skipped(),
                error: None,
                skipped: None,
                too_long: false,
                ejected: Some(wait),
                invalid: None,
            };
        }
        AttemptSummary {
            model: model.to_owned(),
            verdict: "error",
            feedback: None,
            error: Some(e.public_message()),
            skipped: None,
            too_long: e.refused_as_too_long(),
            ejected: None,
            invalid: match e {
                ModelError::Rejected {
                    upstream,
                    status,
                    field,
                    problem,
                    ..
                } => Some(Invalid {
                    upstream: upstream.clone(),
                    status: *status,
                    field: field.clone(),
                    problem,
                }),
                _ => None,
            },
        }
    }

    /// An answer from `model` that a strategy turned down.
    pub fn rejected(model: &str, verdict: &'static str, feedback: &str) -> Self {
        AttemptSummary {
            model: model.to_owned(),
            verdict,
            feedback: Some(feedback.to_owned()),
            error: None,
            skipped: None,
            too_long: false,
            ejected: None,
            invalid: None,
        }
    }
}
