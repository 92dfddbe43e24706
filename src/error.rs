//! `ModelError`: everything that can go wrong while a model (an upstream or a
//! strategy) answers a request. It says *which* upstream failed and how,
//! never with a secret in it; `api::error` turns it into HTTP in one place.
//!
//! Two texts: `Display` keeps the (redacted, bounded) detail an upstream
//! sent, for the event log and the gateway's log; [`ModelError::public_message`]
//! is what a client reads, in an error body, a stream's error event or an
//! exhausted route's `attempts`: an upstream's own words only where they
//! are about the client's request (4xx, without a traceback), and a short,
//! stable text for an upstream's own failure (5xx, an error body or event
//! in place of an answer, an invalid answer), whose detail (a Python
//! traceback with file paths, a validation dump) is the operator's.

use std::sync::Arc;
use std::time::Duration;

use trail::too_long_message;
pub use trail::{AttemptSummary, Invalid, TooLong};

mod trail;

/// Which deadline an upstream call missed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimeoutPhase {
    /// No first stream event before the route's `ttft_timeout`.
    FirstToken,
    /// The upstream's `timeout` (or the request's deadline) ran out.
    Total,
    /// A stream sent nothing for `stream_idle_timeout` after an event.
    Idle,
    /// The deadline passed while the call waited for its local lane.
    Lane,
}

impl TimeoutPhase {
    fn describe(self, after: Duration) -> String {
        let after = humantime::format_duration(after);
        match self {
            TimeoutPhase::FirstToken => format!("timed out waiting for its first token ({after})"),
            TimeoutPhase::Total => format!("timed out after {after}"),
            TimeoutPhase::Idle => {
                format!("timed out: its stream stalled, no event for {after} after the last one")
            }
            TimeoutPhase::Lane => format!("timed out waiting for the local lane ({after})"),
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ModelError {
    #[error("upstream `{upstream}` is unreachable: {reason}")]
    Connect {
        upstream: Arc<str>,
        reason: String,
        #[source]
        source: Option<Box<dyn std::error::Error + Send + Sync>>,
    },

    #[error("upstream `{upstream}` {}", .phase.describe(*.after))]
    Timeout {
        upstream: Arc<str>,
        phase: TimeoutPhase,
        after: Duration,
    },

    #[error("upstream `{upstream}` answered HTTP {status}: {message}")]
    Status {
        upstream: Arc<str>,
        status: u16,
        message: String,
        /// The upstream's own error `code`, e.g. `context_length_exceeded`.
        code: Option<String>,
        retry_after: Option<String>,
    },

    /// A 500 that is a request-validation error (llama-cpp-python's
    /// pydantic dump, llama.cpp's JSON type error; see
    /// `upstream::validation`): the client's 400, naming the field. Not
    /// retried, not passed to a next tier, and never a failure of the
    /// upstream's health. `message` (redacted, bounded) is the operator's.
    #[error(
        "upstream `{upstream}` rejected the request as invalid (HTTP {status}{}{}): {message}",
        if .field.is_some() { ", " } else { "" },
        .field.as_deref().map(|f| format!("{f}: {}", .problem)).unwrap_or_default()
    )]
    Rejected {
        upstream: Arc<str>,
        status: u16,
        /// `messages[1].content`: field names and indexes only.
        field: Option<String>,
        /// `missing`, `wrong type`, …: a fixed text.
        problem: &'static str,
        message: String,
    },

    /// The upstream's `rpm` has no room for the call before its deadline.
    #[error(
        "upstream `{upstream}` is at its limit of {limit} requests per minute, and its next free \
         slot is after this request's deadline"
    )]
    Throttled {
        upstream: Arc<str>,
        limit: u32,
        retry_after: u64,
    },

    #[error("upstream `{upstream}` sent an invalid response: {detail}")]
    Invalid { upstream: Arc<str>, detail: String },

    #[error("upstream `{upstream}` stream broke off: {detail}")]
    StreamCut { upstream: Arc<str>, detail: String },

    /// An `{"error": …}` object where an answer should be: a stream event,
    /// or a whole body sent with a success status.
    #[error("upstream `{upstream}` reported an error{}: {message}", if *.streamed { " in its stream" } else { "" })]
    Reported {
        upstream: Arc<str>,
        message: String,
        streamed: bool,
    },

    /// A stream broke where mid-stream failover cannot continue it
    /// (inside a tool call): it ends with this error event.
    #[error("upstream `{upstream}` stream broke off and could not be continued: {detail}")]
    FailoverUnavailable { upstream: Arc<str>, detail: String },

    #[error("the request could not be sent upstream: {0}")]
    Encode(#[from] serde_json::Error),

    /// A request header or field that only a strategy can judge, e.g. a pin.
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<&'static str>,
    },

    /// The request does not fit the model's known context window, so it
    /// was not sent (or, on a strategy route, it fitted no member's).
    #[error("{}", too_long_message(.fit, .attempts))]
    TooLong {
        /// The concrete model, or the strategy route.
        model: Arc<str>,
        /// The window it did not fit (on a route: the largest member's).
        fit: TooLong,
        /// On a strategy route: every member it skipped.
        attempts: Vec<AttemptSummary>,
    },

    /// The upstream is ejected after failures (see `upstream::health`):
    /// the call was refused at once, nothing was sent.
    #[error(
        "upstream `{upstream}` is ejected after repeated failures; retry after {}s",
        secs(*.retry_after)
    )]
    Ejected {
        upstream: Arc<str>,
        retry_after: Duration,
    },

    /// Every member of a strategy route was skipped as ejected.
    #[error("no healthy upstream for `{route}`: every member is ejected after repeated failures")]
    NoHealthy {
        route: Arc<str>,
        /// The soonest member's.
        retry_after: Duration,
        attempts: Vec<AttemptSummary>,
    },

    /// Every member of a strategy route failed or was turned down.
    #[error("all {} {} of {} `{route}` failed", .attempts.len(), .members, .strategy)]
    Exhausted {
        /// `chain`, `race`: the error's code is `{strategy}_exhausted`.
        strategy: &'static str,
        /// What the route calls its members (`tiers`, `candidates`).
        members: &'static str,
        route: Arc<str>,
        attempts: Vec<AttemptSummary>,
    },

    /// A strategy's own refusal (a balance whose members are all busy, a
    /// vote on an unknown arena): its HTTP status, error `code` (also the
    /// `kind` label of its metric), what the client reads, the request
    /// field it is about, and the `Retry-After` in seconds. One variant for
    /// every strategy, so none adds its own here or in the HTTP mapping.
    #[error("{message}")]
    Strategy {
        status: u16,
        code: &'static str,
        message: String,
        param: Option<&'static str>,
        retry_after: Option<u64>,
    },
}

/// Whole seconds, rounded up, at least 1 (a `Retry-After`).
pub fn secs(d: Duration) -> u64 {
    d.as_secs()
        .saturating_add(u64::from(d.subsec_nanos() > 0))
        .max(1)
}

/// What an upstream's 401/403 message is replaced with: it may quote part
/// of the key (`Incorrect API key provided: sk-abc*****xyz`), so it is
/// never stored, logged or passed on.
pub const WITHHELD: &str = "(message withheld: it may quote the gateway's credentials)";

impl ModelError {
    /// A strategy's refusal with `status`, `code` and `message` (see
    /// [`ModelError::Strategy`]); no param, no `Retry-After`.
    pub fn strategy(status: u16, code: &'static str, message: impl Into<String>) -> Self {
        ModelError::Strategy {
            status,
            code,
            message: message.into(),
            param: None,
            retry_after: None,
        }
    }

    /// What a client is told (see the module's docs); `Display` keeps the
    /// detail for the logs.
    pub fn public_message(&self) -> String {
        match self {
            ModelError::Status {
                upstream, status, ..
            } if *status >= 500 || matches!(status, 401 | 403) => {
                if *status >= 500 {
                    format!("upstream `{upstream}` failed (HTTP {status})")
                } else {
                    // Its message may quote part of the gateway's key.
                    format!(
                        "upstream `{upstream}` rejected the gateway's credentials (HTTP {status})"
                    )
                }
            }
            ModelError::Status {
                upstream,
                status: 429,
                message,
                ..
            } => format!(
                "upstream `{upstream}` is rate limiting (HTTP 429): {}",
                without_traceback(message)
            ),
            ModelError::Status {
                upstream,
                status,
                message,
                ..
            } => format!(
                "upstream `{upstream}` rejected the request (HTTP {status}): {}",
                without_traceback(message)
            ),
            ModelError::Rejected {
                upstream,
                field,
                problem,
                ..
            } => match field {
                Some(f) => format!(
                    "invalid request: `{f}` is {}; upstream `{upstream}` rejected it",
                    problem_phrase(problem)
                ),
                None if *problem == "invalid" => {
                    format!("invalid request: upstream `{upstream}` rejected it as invalid")
                }
                None => format!(
                    "invalid request: upstream `{upstream}` rejected it as invalid ({problem})"
                ),
            },
            ModelError::Reported {
                upstream, streamed, ..
            } => format!(
                "upstream `{upstream}` reported an error{}",
                if *streamed { " in its stream" } else { "" }
            ),
            ModelError::Invalid { upstream, .. } => {
                format!("upstream `{upstream}` sent an invalid response")
            }
            _ => self.to_string(),
        }
    }

    /// Every member of `strategy` route `route` failed or was turned
    /// down: `Exhausted`, or `Rejected` when each member's server found
    /// the request invalid (the client's 400), or `TooLong` when the request is too long for
    /// each (skipped for its known window, or called and refused by its
    /// server as too long; at least one skipped), or `NoHealthy` when each
    /// was skipped as ejected.
    pub fn exhausted(
        strategy: &'static str,
        members: &'static str,
        route: Arc<str>,
        attempts: Vec<AttemptSummary>,
    ) -> Self {
        let soonest = attempts
            .iter()
            .map(|a| a.ejected)
            .try_fold(None, |soonest: Option<Duration>, e| {
                e.map(|e| Some(soonest.map_or(e, |s| s.min(e))))
            });
        if let Some(Some(retry_after)) = soonest {
            return ModelError::NoHealthy {
                route,
                retry_after,
                attempts,
            };
        }
        // Every member's server found the request invalid: the client's
        // 400, as the first said it.
        let invalid = attempts
            .iter()
            .map(|a| a.invalid.as_ref())
            .collect::<Option<Vec<&Invalid>>>()
            .and_then(|all| all.first().map(|i| (*i).clone()));
        if let Some(i) = invalid {
            return ModelError::Rejected {
                upstream: i.upstream,
                status: i.status,
                field: i.field,
                problem: i.problem,
                message: format!("every member of `{route}` rejected the request as invalid"),
            };
        }
        let all_too_long = attempts.iter().all(|a| a.skipped.is_some() || a.too_long);
        let largest = attempts
            .iter()
            .filter_map(|a| a.skipped)
            .max_by_key(|f| f.window)
            .filter(|_| all_too_long);
        match largest {
            Some(fit) => ModelError::TooLong {
                model: route,
                fit,
                attempts,
            },
            None => ModelError::Exhausted {
                strategy,
                members,
                route,
                attempts,
            },
        }
    }

    /// Why the model was skipped, when the request did not fit it or
    /// its upstream (every member, on a route) is ejected.
    pub fn skipped(&self) -> Option<String> {
        match self {
            ModelError::TooLong { fit, .. } => Some(fit.reason()),
            _ => self
                .ejected_for()
                .map(|d| format!("ejected after repeated failures (retry after {}s)", secs(d))),
        }
    }

    /// How long until the model serves again, when it was refused as
    /// ejected (its upstream, or every member of its route).
    pub fn ejected_for(&self) -> Option<Duration> {
        match self {
            ModelError::Ejected { retry_after, .. } | ModelError::NoHealthy { retry_after, .. } => {
                Some(*retry_after)
            }
            _ => None,
        }
    }

    /// A short, bounded name for the `kind` label of
    /// `conclave_upstream_errors_total`.
    pub fn kind(&self) -> &'static str {
        match self {
            ModelError::Connect { .. } => "connect",
            ModelError::Timeout { .. } => "timeout",
            ModelError::Throttled { .. } => "throttled",
            ModelError::Status { status: 429, .. } => "rate_limited",
            ModelError::Status { status, .. } if *status >= 500 => "status_5xx",
            ModelError::Status { .. } => "status_4xx",
            ModelError::Rejected { .. } => "validation_error",
            ModelError::Invalid { .. } => "invalid_response",
            ModelError::StreamCut { .. } => "stream_cut",
            ModelError::FailoverUnavailable { .. } => "stream_cut",
            ModelError::Reported { streamed: true, .. } => "stream_error",
            ModelError::Reported { .. } => "error_body",
            ModelError::Encode(_) => "encode",
            ModelError::BadRequest { .. } => "bad_request",
            ModelError::TooLong { .. } => "context_length",
            ModelError::Exhausted { .. } => "exhausted",
            ModelError::Ejected { .. } => "ejected",
            ModelError::NoHealthy { .. } => "no_healthy_upstream",
            ModelError::Strategy { code, .. } => code,
        }
    }

    /// Whether a fallback chain should try its next tier: provider trouble
    /// (unreachable, timeout, 5xx, 429, auth, broken answers) and
    /// context-length errors, but not a request every provider would reject.
    pub fn is_failover(&self) -> bool {
        match self {
            ModelError::Status {
                status: 400 | 413 | 422,
                ..
            } => self.refused_as_too_long(),
            ModelError::BadRequest { .. } | ModelError::Rejected { .. } | ModelError::Encode(_) => {
                false
            }
            // A strategy's 4xx is about the request, but a 429 (busy) is not.
            ModelError::Strategy { status, .. } => *status == 429 || *status >= 500,
            _ => true,
        }
    }

    /// The upstream refused the request as longer than its context window.
    pub fn refused_as_too_long(&self) -> bool {
        matches!(
            self,
            ModelError::Status { status: 400 | 413 | 422, message, code, .. }
                if is_context_length(code.as_deref(), message)
        )
    }
}

/// `wrong type` as the end of "`messages[1].content` is …".
fn problem_phrase(problem: &str) -> &str {
    match problem {
        "wrong type" => "of the wrong type",
        "not allowed" => "not an allowed field",
        "invalid JSON" => "not valid JSON",
        p => p,
    }
}

/// An upstream's message without the Python traceback some servers append
/// (`  File "/…/app.py", line 376, in …`): file paths are the operator's.
fn without_traceback(message: &str) -> &str {
    let cut = ["Traceback (most recent call last)", "File \""]
        .iter()
        .filter_map(|m| message.find(m))
        .min()
        .unwrap_or(message.len());
    message[..cut].trim_end()
}

/// Upstreams word context-window overflows differently; these cover OpenAI,
/// Anthropic, vLLM, llama.cpp and Ollama.
fn is_context_length(code: Option<&str>, message: &str) -> bool {
    if code == Some("context_length_exceeded") {
        return true;
    }
    let m = message.to_ascii_lowercase();
    [
        "context length",
        "context_length",
        "maximum context",
        "context window",
        "too many tokens",
        "prompt is too long",
        "exceeds the available context",
    ]
    .iter()
    .any(|p| m.contains(p))
}

#[cfg(test)]
mod tests;
