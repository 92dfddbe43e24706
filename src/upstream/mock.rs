//! `kind = "mock"`: the simulator in-process, behind the same [`Transport`]
//! interface as a real server, so its answers go through the same decoding
//! (in-process tests reach it through [`crate::Prepared::simulator`]).

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use indexmap::IndexMap;

use super::lane::Gate;
use super::window::count::Tokens;
use super::{BoxError, CallIds, RawResponse, Transport, TransportError};
use crate::labels::Warm;
use crate::mock::{Api, Behavior, Heard, Quirk, Quirks, Simulator, SwapSim};
use crate::wire::Endpoint;

pub struct MockTransport {
    sim: Arc<Simulator>,
    /// Warm state is only meaningful when swaps are emulated.
    swaps: bool,
}

impl MockTransport {
    /// A simulator speaking `api` (and the Responses API when
    /// `responses`).
    pub fn new(
        models: IndexMap<String, Behavior>,
        swap: SwapSim,
        quirks: Quirks,
        api: Api,
        responses: bool,
    ) -> Self {
        let sim = Simulator::new(models, swap, quirks, true)
            .with_api(api)
            .with_responses(responses);
        MockTransport {
            sim: Arc::new(sim),
            swaps: swap.delay.is_some(),
        }
    }
}

#[async_trait]
impl Transport for MockTransport {
    async fn send(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        ids: &CallIds<'_>,
    ) -> Result<RawResponse, TransportError> {
        let r = self.sim.respond_to(endpoint, &body, heard(ids)).await;
        Ok(RawResponse {
            status: r.status,
            retry_after: r.retry_after.map(|s| s.to_string()),
            // The simulation streams what is asked streamed.
            json: false,
            body: Box::pin(r.body.map_err(|e| Box::new(e) as BoxError)),
        })
    }

    async fn server_kind(&self) -> super::server_kind::ServerKind {
        // It answers any number at once, unless it plays llama-cpp-python
        // ending a stream for the next request.
        if self.sim.plays(Quirk::InterruptsOnNewRequest) {
            super::server_kind::ServerKind::LlamaCppPython
        } else {
            super::server_kind::ServerKind::Mock
        }
    }

    async fn context_window(&self, model: &str, _warm: Warm, _lane: &Arc<Gate>) -> Option<u64> {
        self.sim.context_window(model)
    }

    fn known_window(&self, model: &str, _warm: Warm) -> Option<Option<u64>> {
        Some(self.sim.context_window(model))
    }

    /// As the simulated server counts (see [`crate::mock::context`]): a
    /// chat's whole prompt where it plays llama.cpp or vLLM, the messages'
    /// text where it plays llama-cpp-python.
    async fn exact_tokens(&self, _model: &str, req: &crate::wire::ChatRequest) -> Option<Tokens> {
        let v = serde_json::to_value(req).ok()?;
        if let Some(n) = self.sim.count_prompt(&v) {
            return Some(Tokens::Prompt(n));
        }
        self.sim.count_text(&req.prompt_text()).map(Tokens::Text)
    }

    fn loaded(&self) -> Option<Vec<String>> {
        self.swaps.then(|| self.sim.running().into_iter().collect())
    }

    async fn ready(&self) -> Result<(), String> {
        Ok(())
    }

    /// A simulated check: a path naming one of its models (`/sick` for
    /// model `sick`) asks that model a chat question and passes on a 2xx,
    /// so its behaviour (`status = 503`) fails the check; any other path
    /// passes.
    async fn check(&self, path: &str) -> Result<(), String> {
        let model = path.trim_start_matches('/');
        if !self.sim.model_names().iter().any(|m| m == model) {
            return Ok(());
        }
        let body = serde_json::json!({
            "model": model,
            "max_tokens": 16,
            "messages": [{"role": "user", "content": "health check"}],
        });
        let endpoint = match self.sim.api() {
            Api::OpenAi => Endpoint::CHAT,
            Api::Anthropic => Endpoint::MESSAGES,
        };
        let body = Bytes::from(body.to_string());
        let r = self.sim.respond_to(endpoint, &body, Heard::default()).await;
        match r.status {
            200..=299 => Ok(()),
            s => Err(format!("HTTP {s}")),
        }
    }

    fn simulator(&self) -> Option<Arc<Simulator>> {
        Some(self.sim.clone())
    }
}

/// What an in-process call tells the simulator (no HTTP headers).
fn heard(ids: &CallIds<'_>) -> Heard {
    Heard {
        request_id: Some(ids.request_id.to_owned()),
        anthropic_beta: ids.anthropic_beta.map(str::to_owned),
        ..Heard::default()
    }
}
