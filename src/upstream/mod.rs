//! Upstreams: where concrete models live. A [`Transport`] moves request
//! bytes to a server and hands back its raw response (`openai` over
//! reqwest, `mock` in-process); [`decode`] turns any raw response into a
//! completion or a committed chunk stream; [`ConcreteModel`] is the one
//! decorator that makes an upstream model a [`crate::model::ChatModel`] and
//! records every call as an attempt.

mod concrete;
pub mod decode;
pub mod lane;
pub mod llama_swap;
mod mock;
pub mod openai;
pub mod sse;

use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

pub use concrete::ConcreteModel;
use lane::Gate;
use llama_swap::{WarmProbe, show_loaded};

use crate::config::{self, Lane, UpstreamKind};
use crate::labels::Warm;
use crate::wire::Endpoint;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body as it arrives from the server.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, BoxError>> + Send>>;

/// An upstream's raw HTTP answer.
pub struct RawResponse {
    pub status: u16,
    pub retry_after: Option<String>,
    pub body: BodyStream,
}

/// No response arrived (refused, reset, DNS, TLS, closed mid-request).
#[derive(Debug, thiserror::Error)]
#[error("{reason}")]
pub struct TransportError {
    pub reason: String,
    /// The connection was up: the server went away before answering.
    pub connected: bool,
    #[source]
    pub source: Option<BoxError>,
}

/// Moves a chat completion request to one server.
#[async_trait]
pub trait Transport: Send + Sync {
    /// POSTs a body to `endpoint` and returns once the status line is in.
    async fn send(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        request_id: &str,
    ) -> Result<RawResponse, TransportError>;

    /// Whether `model` is loaded right now (llama-swap), if that is known.
    async fn warm(&self, _model: &str) -> Warm {
        Warm::Unknown
    }

    /// `Ok` when the server answers at all.
    async fn ready(&self) -> Result<(), String>;
}

/// One configured upstream.
pub struct Upstream {
    pub name: Arc<str>,
    pub lane: Lane,
    pub gate: Gate,
    pub timeout: Duration,
    pub stream_idle_timeout: Duration,
    pub transport: Box<dyn Transport>,
    /// llama-swap's warm state, for `llama_swap = URL` upstreams.
    pub probe: Option<Arc<WarmProbe>>,
    /// (name sent upstream, conclave's name) of its models.
    models: Vec<(String, Arc<str>)>,
}

impl Upstream {
    /// `models`: (name sent upstream, conclave's name) of the models on it.
    pub fn from_config(
        name: &str,
        cfg: &config::Upstream,
        models: Vec<(String, Arc<str>)>,
    ) -> Result<Self, openai::BuildError> {
        let name: Arc<str> = name.into();
        let mut probe = None;
        let transport: Box<dyn Transport> = match &cfg.kind {
            UpstreamKind::OpenAi {
                base_url,
                api_key,
                llama_swap,
            } => {
                let t = openai::OpenAiTransport::new(base_url, api_key.as_ref())?;
                if let Some(ls) = llama_swap {
                    probe = Some(Arc::new(t.probe(ls, &name, models.clone())?));
                }
                Box::new(t)
            }
            UpstreamKind::Mock { swap_delay, models } => {
                Box::new(mock::MockTransport::new(models.clone(), *swap_delay))
            }
        };
        Ok(Upstream {
            gate: Gate::new(cfg.lane == Lane::Local, &name, cfg.limits, probe.clone()),
            name,
            lane: cfg.lane,
            timeout: cfg.timeout,
            stream_idle_timeout: cfg.stream_idle_timeout,
            transport,
            probe,
            models,
        })
    }

    /// Whether `model` (the name sent upstream) is loaded right now.
    pub async fn warm(&self, model: &str) -> Warm {
        if let Some(p) = &self.probe {
            return p.warm(model).await;
        }
        // A transport that knows its warm state (the simulator) shows it
        // like a probe would: the loaded model at 1, the others at 0.
        let warm = self.transport.warm(model).await;
        show_loaded(&self.name, &self.models, |m| match warm {
            Warm::Yes => Some(m == model),
            Warm::No => (m == model).then_some(false),
            Warm::Unknown => None,
        });
        warm
    }
}
