//! Whether a request fits a concrete model's context window, checked
//! before every chat call: the config's `context_window`, else the one its
//! server stated in an earlier context-length error, else the one it
//! reports ([`super::window`], waited for at most [`super::window::WAIT`]),
//! else no check at all.
//!
//! The rule: the request's input estimate (its text, the fields that reach
//! the prompt and the chat template's own tokens, as budgets count them,
//! but not its images, which models count too differently) plus one token
//! of answer must fit the window. The output cap (`max_tokens`) is not
//! counted: llama.cpp and llama-cpp-python cut the answer short at the
//! window rather than refuse, and a server that does refuse (vLLM) still
//! answers its own 400.
//!
//! A request that does not fit is not sent: [`ModelError::TooLong`] (400
//! `context_length_exceeded` for a client calling the model directly; a
//! strategy skips the member and records why), and a
//! `context_window_exceeded` event.

use serde_json::{Map, Value};
use tokio::time::{Instant, timeout_at};

use super::ConcreteModel;
use super::window::WAIT;
use crate::error::{ModelError, TooLong};
use crate::labels::Warm;
use crate::model::Call;

impl ConcreteModel {
    /// `Ok` unless a request of `input` estimated tokens is known not to
    /// fit this model's context window.
    pub(super) async fn fits(&self, call: &Call, input: u64) -> Result<(), ModelError> {
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
        if needed <= window {
            return Ok(());
        }
        let fit = TooLong { window, needed };
        self.exceeded(call, fit, source);
        Err(ModelError::TooLong {
            model: self.info.name.clone(),
            fit,
            attempts: Vec::new(),
        })
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
        let by = (Instant::now() + WAIT).min(call.by());
        let model = &self.info.upstream_model;
        let ask = async {
            // Only llama-swap's warm state matters here: its `/props` is
            // asked for loaded models only.
            let warm = match &up.probe {
                Some(p) => p.warm(model).await,
                None => Warm::Unknown,
            };
            up.transport.context_window(model, warm).await
        };
        timeout_at(by, ask).await.ok().flatten()
    }

    /// The `context_window_exceeded` event.
    fn exceeded(&self, call: &Call, fit: TooLong, source: &str) {
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
        ctx.emit("context_window_exceeded", f);
    }
}
