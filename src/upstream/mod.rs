//! Upstreams: where concrete models live. A [`Transport`] moves request
//! bytes to a server and hands back its raw response (`openai` and
//! `anthropic` over reqwest, `mock` in-process; an Anthropic-speaking one
//! behind [`translate`], which makes chat of it; `http` is the reqwest
//! plumbing they share, `served` which endpoints each kind serves).
//! One call is an [`exchange`]: [`decode`] turns its raw response into a
//! completion, [`relay`] into a committed chunk stream, reading bodies and
//! events as the call's [`crate::wire::Endpoint`] says (no transport or
//! relay names a dialect);
//! [`ConcreteModel`] is the one decorator that makes an upstream model a
//! [`crate::model::ChatModel`] and records every call as an attempt (a
//! failed one sent again, as [`retry`] says, is a new attempt; a stream
//! the server refuses asked again whole, `reply`), after
//! checking that the request fits the model's context window ([`fit`],
//! with windows the server reports learned by [`window`], and exact token
//! counts asked of it near the window by [`window::count`]). A 500 that
//! is a request-validation error is read by [`validation`] as the client's.
//! A local lane without `max_concurrency` lets through as many calls as
//! its server takes ([`server_kind`], asked before its first call).

pub mod anthropic;
mod concrete;
pub mod decode;
pub mod delivery;
mod direct;
pub mod exchange;
mod fit;
pub mod health;
mod http;
pub mod lane;
pub mod limit;
pub mod llama_swap;
mod mock;
pub mod openai;
pub mod registry;
mod relay;
mod reply;
pub mod retry;
mod served;
pub mod server_kind;
pub mod sse;
pub mod translate;
pub mod validation;
pub mod window;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::Stream;

pub use concrete::ConcreteModel;
pub use direct::keep_apart;
use lane::Gate;
use llama_swap::{Loaded, WarmProbe, show_loaded};

use crate::clock::Clock;
use crate::config::{self, Lane, UpstreamKind};
use crate::labels::Warm;
use crate::sink::Metrics;
use crate::wire::Endpoint;

pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A response body as it arrives from the server.
pub type BodyStream = Pin<Box<dyn Stream<Item = Result<Bytes, BoxError>> + Send>>;

/// An upstream's raw HTTP answer.
pub struct RawResponse {
    pub status: u16,
    pub retry_after: Option<String>,
    /// The server said its body is JSON (`content-type:
    /// application/json`): a whole answer, even to a call that asked for
    /// a stream (a server that ignores `stream`).
    pub json: bool,
    pub body: BodyStream,
}

/// Whether a response's `content-type` names JSON.
pub fn is_json(headers: &hyper::HeaderMap) -> bool {
    headers
        .get(hyper::header::CONTENT_TYPE)
        .and_then(|v| v.as_bytes().get(..16))
        .is_some_and(|v| v.eq_ignore_ascii_case(b"application/json"))
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
        ids: &CallIds<'_>,
    ) -> Result<RawResponse, TransportError>;

    /// The models loaded right now, when the transport knows (the
    /// simulator playing llama-swap); a real llama-swap is probed instead.
    fn loaded(&self) -> Option<Vec<String>> {
        None
    }

    /// `model`'s context window as the server reports it (see [`window`]);
    /// `None` when it says nothing, cannot be asked now, or this transport
    /// does not ask. `warm`: whether llama-swap has the model loaded;
    /// `lane`: the upstream's, which a fetch from the server goes through
    /// (llama-cpp-python answers `/v1/models` under its generation lock).
    async fn context_window(&self, _model: &str, _warm: Warm, _lane: &Arc<Gate>) -> Option<u64> {
        None
    }

    /// What [`Self::context_window`] would answer, when it would answer
    /// without waiting (a window already learned, or none to ask for):
    /// `Some` of that; `None` when it would have to ask. Every chat call
    /// of a model without a configured window asks this first, so the
    /// usual call makes no future for the look-up.
    fn known_window(&self, _model: &str, _warm: Warm) -> Option<Option<u64>> {
        None
    }

    /// `req`'s exact token count for `model` as the server counts it (see
    /// [`window::count`]); `None` when it cannot say. The caller holds a
    /// lane permit and bounds the wait.
    async fn exact_tokens(
        &self,
        _model: &str,
        _req: &crate::wire::ChatRequest,
    ) -> Option<window::count::Tokens> {
        None
    }

    /// What kind of server it is (see [`server_kind`]), for a local
    /// lane's default concurrency; asked once, before the lane's first
    /// call.
    async fn server_kind(&self) -> server_kind::ServerKind {
        server_kind::ServerKind::Unknown
    }

    /// `Ok` when the server answers at all.
    async fn ready(&self) -> Result<(), String>;

    /// An active health check: `Ok` when `GET` `path` (under the base
    /// URL, with the upstream's key) answers 2xx. The caller bounds it.
    async fn check(&self, _path: &str) -> Result<(), String> {
        self.ready().await
    }

    /// The simulator behind a `kind = "mock"` upstream (for tests that
    /// read what it received); `None` for a real server.
    fn simulator(&self) -> Option<Arc<crate::mock::Simulator>> {
        None
    }
}

/// What identifies one upstream call to the server: the request's id,
/// and the W3C `traceparent` of the call's span when it is traced.
pub struct CallIds<'a> {
    pub request_id: &'a str,
    pub traceparent: Option<String>,
    /// Sent as `anthropic-beta` to an Anthropic upstream (a native
    /// Messages call passes on the client's).
    pub anthropic_beta: Option<&'a str>,
}

/// One configured upstream.
pub struct Upstream {
    pub name: Arc<str>,
    pub lane: Lane,
    /// Its lane; handed on to the upstream a reload builds when the
    /// lane's settings stay (see [`registry`]).
    pub gate: Arc<Gate>,
    /// Its `rpm`: calls wait their turn.
    pub pace: Option<limit::Pace>,
    pub timeout: Duration,
    pub stream_idle_timeout: Duration,
    /// Its server speaks the Responses API natively (`responses = true`).
    pub responses: bool,
    /// Its server speaks Anthropic's Messages API natively (`kind =
    /// "anthropic"`, or a mock with `api = "anthropic"`).
    pub messages: bool,
    /// Its server continues a final assistant message (a prefill):
    /// Anthropic, and the mock.
    pub prefill: bool,
    pub transport: Box<dyn Transport>,
    /// llama-swap's warm state, for `llama_swap = URL` upstreams.
    pub probe: Option<Arc<WarmProbe>>,
    /// (name sent upstream, conclave's name) of its models.
    models: Vec<(String, Arc<str>)>,
    /// Windows its server stated in context-length errors.
    pub stated: window::Stated,
    /// Exact token counts its server gave, by model and request.
    pub counts: window::count::Counts,
    /// The instance's recorder.
    metrics: Metrics,
    /// Its `retries`: how its failed calls are sent again.
    pub retries: config::Retries,
    /// Its health (ejection), its models' and its own; handed on to the
    /// upstream a reload builds for the same server (see [`registry`]).
    pub health: Arc<health::UpstreamHealth>,
    /// Its active check (`health = { … }`), if it has one.
    pub check: Option<config::HealthCheck>,
    /// Its active checks have started ([`health::check::start`]).
    checking: std::sync::atomic::AtomicBool,
    /// What its server turned out to be (a local lane without
    /// `max_concurrency` asks once).
    kind: tokio::sync::OnceCell<server_kind::ServerKind>,
}

impl Upstream {
    /// `models`: (name sent upstream, conclave's name) of the models on it;
    /// `max_tokens`: their `max_tokens` by the name sent upstream (for an
    /// upstream that requires one); `lane_of`: a running upstream whose
    /// lane (and llama-swap probe) it takes over instead of making its own;
    /// `health_of`: the running health of its server, which it takes over.
    pub fn from_config(
        name: &str,
        cfg: &config::Upstream,
        models: Vec<(String, Arc<str>)>,
        max_tokens: HashMap<String, u32>,
        (metrics, clock): (Metrics, Clock),
        lane_of: Option<&Upstream>,
        health_of: Option<Arc<health::UpstreamHealth>>,
    ) -> Result<Self, openai::BuildError> {
        let name: Arc<str> = name.into();
        let mut probe = lane_of.and_then(|u| u.probe.clone());
        if let Some(p) = &probe {
            p.set_models(models.clone());
        }
        let transport: Box<dyn Transport> = match &cfg.kind {
            UpstreamKind::OpenAi {
                base_url,
                api_key,
                llama_swap,
            } => {
                let ls = llama_swap.as_ref().map(|l| l.url.as_str());
                let t = openai::OpenAiTransport::new(base_url, api_key.as_ref(), ls)?;
                if let Some(ls) = llama_swap.as_ref().filter(|_| probe.is_none()) {
                    let m = metrics.clone();
                    probe = Some(Arc::new(t.probe(ls, &name, models.clone(), m)?));
                }
                Box::new(t)
            }
            UpstreamKind::Anthropic(a) => Box::new(translate::Translate::new(
                Box::new(anthropic::AnthropicTransport::new(a, clock)?),
                max_tokens,
                clock,
            )),
            UpstreamKind::Mock {
                api,
                swap,
                quirks,
                models,
            } => {
                let (s, q) = (*swap, quirks.clone());
                let m = mock::MockTransport::new(models.clone(), s, q, *api, cfg.responses);
                match api {
                    crate::mock::Api::OpenAi => Box::new(m),
                    crate::mock::Api::Anthropic => {
                        Box::new(translate::Translate::new(Box::new(m), max_tokens, clock))
                    }
                }
            }
        };
        let gate = match lane_of {
            Some(u) => u.gate.clone(),
            None => Arc::new(Gate::new(
                cfg.lane == Lane::Local,
                &name,
                cfg.limits,
                probe.clone(),
                metrics.clone(),
            )),
        };
        let served = models.iter().map(|(_, m)| &**m);
        let health = match health_of {
            Some(h) => {
                h.configure(cfg.resilience.eject, served);
                h
            }
            None => health::UpstreamHealth::new(
                name.clone(),
                cfg.resilience.eject,
                served,
                metrics.clone(),
            ),
        };
        Ok(Upstream {
            gate,
            health,
            check: cfg.resilience.health.clone(),
            checking: std::sync::atomic::AtomicBool::new(false),
            kind: tokio::sync::OnceCell::new(),
            metrics,
            pace: limit::Pace::new(cfg.rpm),
            name,
            lane: cfg.lane,
            timeout: cfg.timeout,
            stream_idle_timeout: cfg.stream_idle_timeout,
            responses: cfg.responses,
            messages: matches!(
                &cfg.kind,
                UpstreamKind::Anthropic(_)
                    | UpstreamKind::Mock {
                        api: crate::mock::Api::Anthropic,
                        ..
                    }
            ),
            prefill: matches!(
                &cfg.kind,
                UpstreamKind::Anthropic(_) | UpstreamKind::Mock { .. }
            ),
            transport,
            probe,
            models,
            stated: window::Stated::default(),
            counts: window::count::Counts::default(),
            retries: cfg.resilience.retries,
        })
    }

    /// Shares its local lane (if it has one) and its `rpm` (if it has
    /// one) with the other replicas, when `backend` is shared (`[state]`).
    pub fn share(&self, backend: &crate::store::Backend) {
        if let Some(p) = &self.pace
            && let Some(turns) = backend.upstream_turns(&self.name)
        {
            p.share(turns);
        }
        if self.gate.is_local()
            && let Some(lease) = backend.lane_lease(&self.name)
        {
            self.gate.share(lease);
        }
    }

    /// Before a local lane without `max_concurrency` lets its first call
    /// through: asks what its server is, once (within
    /// [`server_kind::PROBE_TIMEOUT`] per question), and lets that many
    /// calls per model through from then on.
    pub async fn learn_lane(&self) {
        if !self.gate.follows_server() {
            return;
        }
        let kind = *self.kind.get_or_init(|| self.transport.server_kind()).await;
        if self.gate.follow(kind.concurrency()) {
            tracing::info!(upstream = %self.name, server = kind.as_str(), concurrency = kind.concurrency(), "local lane follows its server");
        }
    }

    /// Whether `model` (the name sent upstream) is loaded right now.
    pub async fn warm(&self, model: &str) -> Warm {
        if let Some(p) = &self.probe {
            return p.warm(model).await;
        }
        // A transport that knows what is loaded (the simulator) shows it
        // as a probe would.
        match self.transport.loaded() {
            Some(l) => {
                let on = |m: &str| Some(l.iter().any(|x| x == m));
                show_loaded((&self.metrics, &self.name), &self.models, on);
                if l.iter().any(|x| x == model) {
                    Warm::Yes
                } else {
                    Warm::No
                }
            }
            None => Warm::Unknown,
        }
    }

    /// Shows what the simulator has loaded now, after a call that may
    /// have swapped it (a real llama-swap is shown by its probe).
    pub fn show_simulated(&self) {
        if self.probe.is_none()
            && let Some(l) = self.transport.loaded()
        {
            let on = |m: &str| Some(l.iter().any(|x| x == m));
            show_loaded((&self.metrics, &self.name), &self.models, on);
        }
    }

    /// Whether the upstream answers and, for llama-swap, what it has
    /// loaded (the probe's answer if fresh, else asked now), for `/readyz`
    /// and `conclave check --probe`.
    pub async fn status(&self) -> Status {
        let loaded = async {
            match (&self.probe, self.transport.loaded()) {
                (Some(p), _) => Some(p.current().await),
                (None, Some(l)) => Some(Ok(Arc::new(l))),
                (None, None) => None,
            }
        };
        let (ready, loaded) = tokio::join!(self.transport.ready(), loaded);
        Status { ready, loaded }
    }
}

/// An upstream's state as [`Upstream::status`] found it.
pub struct Status {
    /// `Err`: why it did not answer.
    pub ready: Result<(), String>,
    /// A llama-swap upstream's loaded models (`Err`: why they are
    /// unknown); `None` for any other upstream.
    pub loaded: Option<Result<Loaded, String>>,
}
