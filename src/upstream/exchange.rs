//! One upstream call's [`Exchange`]: where it goes, what was asked, by
//! when each phase must end, and every error built from what the upstream
//! said (bounded and redacted). Shared by the whole-body reader
//! (`super::decode`), the stream relay (`super::relay`) and the
//! translators, with the bound on one stream event ([`MAX_EVENT`]).

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::error::{ModelError, TimeoutPhase};
use crate::redact::Redactor;
use crate::wire::Endpoint;

/// Largest single SSE line or event accepted from an upstream.
pub const MAX_EVENT: usize = 4 * 1024 * 1024;
/// The longest upstream message quoted in an error.
const MAX_MESSAGE_CHARS: usize = 1000;

/// One upstream call: where it goes, by when each phase must end, and the
/// secrets nothing it says may repeat. Every error built from upstream
/// text is built here.
pub struct Exchange {
    pub upstream: Arc<str>,
    /// What was asked: how the answer is read.
    pub endpoint: Endpoint,
    pub started: Instant,
    /// The first stream event must arrive by then.
    pub first: Instant,
    /// The whole answer must be in by then.
    pub total: Instant,
    /// Longest gap between two stream events.
    pub idle: Duration,
    /// The request's estimated input tokens, for a usage estimate.
    pub input_tokens: u64,
    pub redactor: Arc<Redactor>,
}

impl Exchange {
    pub fn timeout(&self, phase: TimeoutPhase) -> ModelError {
        let after = match phase {
            TimeoutPhase::FirstToken => self.first.saturating_duration_since(self.started),
            TimeoutPhase::Total => self.total.saturating_duration_since(self.started),
            TimeoutPhase::Idle => self.idle,
            TimeoutPhase::Lane => Duration::ZERO,
        };
        ModelError::Timeout {
            upstream: self.upstream.clone(),
            phase,
            after: round_ms(after),
        }
    }

    /// The phase a timeout that fired at `first` belongs to.
    pub fn first_phase(&self) -> TimeoutPhase {
        if self.first < self.total {
            TimeoutPhase::FirstToken
        } else {
            TimeoutPhase::Total
        }
    }

    /// Upstream text, bounded and without secrets.
    pub(super) fn clean(&self, text: &str) -> String {
        let mut text = self.redactor.redact(text).into_owned();
        crate::text::ellipsize_in_place(&mut text, MAX_MESSAGE_CHARS);
        text
    }

    pub fn invalid(&self, detail: &str) -> ModelError {
        ModelError::Invalid {
            upstream: self.upstream.clone(),
            detail: self.clean(detail),
        }
    }

    pub fn cut(&self, detail: &str) -> ModelError {
        ModelError::StreamCut {
            upstream: self.upstream.clone(),
            detail: self.clean(detail),
        }
    }

    pub(super) fn reported(&self, message: &str, streamed: bool) -> ModelError {
        ModelError::Reported {
            upstream: self.upstream.clone(),
            message: self.clean(message),
            streamed,
        }
    }
}

/// A duration to whole milliseconds, as errors quote it.
pub(super) fn round_ms(d: Duration) -> Duration {
    Duration::from_millis(d.as_millis().try_into().unwrap_or(u64::MAX))
}
