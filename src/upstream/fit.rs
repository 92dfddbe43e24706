//! Whether a request fits a concrete model's context window, checked
//! before every chat call: the config's `context_window`, else the one its
//! server stated in an earlier context-length error, else the one it
//! reports ([`super::window`], waited for at most [`super::window::WAIT`]),
//! else no check at all.
//!
//! The rule: the request's input estimate (its text, the fields that reach
//! the prompt and the chat template's own tokens, as budgets count them,
//! but not its images, which models count too differently) plus one token
//! of answer is what the request needs. The estimate is bytes / 4, which
//! is a quarter over on English prose and a fifth under on markdown, so it
//! alone refuses nothing it could be wrong about:
//!
//! - an estimate under [`ASK_FROM`] % of the window goes ahead;
//! - one over [`REFUSE_BEYOND`] % of it (beyond any plausible error) is
//!   refused;
//! - in between, the server is asked for an exact count
//!   ([`super::window::count`]: llama.cpp's `/apply-template` and
//!   `/tokenize`, vLLM's `/tokenize`, llama-cpp-python's
//!   `/extras/tokenize/count`), through the upstream's lane like any call
//!   to that server (llama-cpp-python counts under the lock it generates
//!   under: a count sent beside a stream would cut it), and the request
//!   is refused only when that count plus one does not fit. A server that
//!   cannot count (or does not answer within [`COUNT_WAIT`]) lets the
//!   request through: its own context-length error is then mapped as any
//!   other. Each count is kept per server, model and request
//!   ([`super::window::count::Counts`]), so a request's retries and the
//!   tiers on the same server ask once.
//!
//! The output cap (`max_tokens`) is not counted: llama.cpp and
//! llama-cpp-python cut the answer short at the window rather than refuse,
//! and a server that does refuse (vLLM) still answers its own 400.
//!
//! A request that does not fit is not sent: [`ModelError::TooLong`] (400
//! `context_length_exceeded` for a client calling the model directly; a
//! strategy skips the member and records why), and a
//! `context_window_exceeded` event (`count`: `exact` or `estimate`).

use std::time::Duration;

use serde_json::{Map, Value};
use tokio::time::{Instant, timeout_at};

use super::ConcreteModel;
use super::window::WAIT;
use super::window::count::{Counts, Tokens};
use crate::error::{ModelError, TooLong};
use crate::labels::Warm;
use crate::model::Call;
use crate::wire::{ChatRequest, estimate_tokens};

/// The share of the window (in %) from which an estimate is checked by an
/// exact count.
pub const ASK_FROM: u64 = 70;

/// The share of the window (in %) beyond which an estimate is refused
/// without a count.
pub const REFUSE_BEYOND: u64 = 150;

/// Longest a count is waited for, once the lane let it through.
pub const COUNT_WAIT: Duration = Duration::from_secs(3);

/// How a request's tokens were known.
#[derive(Clone, Copy)]
enum Known {
    Estimate,
    Exact,
}

impl ConcreteModel {
    /// `Ok` unless `req` (of `input` estimated tokens) is known not to fit
    /// this model's context window.
    pub(super) async fn fits(
        &self,
        call: &Call,
        req: &ChatRequest,
        input: u64,
    ) -> Result<(), ModelError> {
        let needed = input.saturating_add(1);
        let stated = || self.upstream.stated.get(&self.info.upstream_model);
        let (window, source) = match (self.info.context_window, stated()) {
            (Some(w), _) => (w, "config"),
            (None, Some(w)) => (w, "error"),
            (None, None) => match self.learned(call).await {
                Some(w) => (w, "server"),
                None => return Ok(()),
            },
        };
        let share = |n: u64| u128::from(n) * 100;
        if share(needed) < u128::from(window) * u128::from(ASK_FROM) {
            return Ok(());
        }
        let (needed, known) = if share(needed) > u128::from(window) * u128::from(REFUSE_BEYOND) {
            (needed, Known::Estimate)
        } else {
            let Some(t) = self.exact(call, req).await else {
                return Ok(());
            };
            let counted = match t {
                Tokens::Prompt(n) => n,
                // The text counted, the rest (the template, tool
                // definitions) still estimated.
                Tokens::Text(n) => {
                    n.saturating_add(input.saturating_sub(estimate_tokens(req.text_bytes())))
                }
            };
            (counted.saturating_add(1), Known::Exact)
        };
        if needed <= window {
            return Ok(());
        }
        let fit = TooLong { window, needed };
        self.exceeded(call, fit, source, known);
        Err(ModelError::TooLong {
            model: self.info.name.clone(),
            fit,
            attempts: Vec::new(),
        })
    }

    /// `req`'s tokens as this model's server counts them: kept from an
    /// earlier count, else asked through the lane (one count at a time
    /// per server; the lane waited for as the call would, until its
    /// deadline or its first token's), within [`COUNT_WAIT`].
    async fn exact(&self, call: &Call, req: &ChatRequest) -> Option<Tokens> {
        let up = &self.upstream;
        let model = &self.info.upstream_model;
        let key = Counts::key(model, req);
        if let Some(t) = up.counts.get(&key) {
            return Some(t);
        }
        let by = call.by();
        let _one = timeout_at(by, up.counts.one()).await.ok()?;
        if let Some(t) = up.counts.get(&key) {
            return Some(t);
        }
        // As long as the call itself would wait for the lane: no later
        // than its first token is due.
        let lane_by = match call.ttft_timeout {
            Some(t) => by.min(Instant::now() + t),
            None => by,
        };
        let admitted = up.gate.admit(model, lane_by).await.ok()?;
        if let Some(from) = &admitted.swapped_from {
            super::concrete::lane_swap(&call.ctx, &up.name, from, model);
        }
        let counted = timeout_at(
            by.min(Instant::now() + COUNT_WAIT),
            up.transport.exact_tokens(model, req),
        )
        .await
        .ok()
        .flatten();
        drop(admitted);
        let t = counted?;
        up.counts.keep(key, t);
        Some(t)
    }

    /// Keeps the window a context-length error from the server states.
    pub(super) fn heard(&self, e: &ModelError) {
        if let ModelError::Status {
            status: 400 | 413 | 422,
            message,
            ..
        } = e
        {
            self.upstream
                .stated
                .hear(&self.info.upstream_model, message);
        }
    }

    /// The window the server reports, if it says within [`WAIT`] (and
    /// before the call's deadline).
    async fn learned(&self, call: &Call) -> Option<u64> {
        let up = &self.upstream;
        let model = &self.info.upstream_model;
        if up.probe.is_none()
            && let Some(window) = up.transport.known_window(model, Warm::Unknown)
        {
            return window;
        }
        let by = (Instant::now() + WAIT).min(call.by());
        let ask = async {
            // Only llama-swap's warm state matters here: its `/props` is
            // asked for loaded models only.
            let warm = match &up.probe {
                Some(p) => p.warm(model).await,
                None => Warm::Unknown,
            };
            up.transport.context_window(model, warm, &up.gate).await
        };
        timeout_at(by, ask).await.ok().flatten()
    }

    /// The `context_window_exceeded` event.
    fn exceeded(&self, call: &Call, fit: TooLong, source: &str, known: Known) {
        let ctx = &call.ctx;
        if !ctx.events_enabled() {
            return;
        }
        let mut f = Map::new();
        f.insert("model".into(), Value::from(&*self.info.name));
        f.insert("upstream".into(), Value::from(&*self.upstream.name));
        f.insert("role".into(), Value::from(call.role.as_str()));
        f.insert("context_window".into(), Value::from(fit.window));
        f.insert("window_source".into(), Value::from(source));
        f.insert("needed_tokens".into(), Value::from(fit.needed));
        let count = match known {
            Known::Estimate => "estimate",
            Known::Exact => "exact",
        };
        f.insert("count".into(), Value::from(count));
        ctx.emit("context_window_exceeded", f);
    }
}
