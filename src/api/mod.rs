//! The HTTP surface: the axum router and shared state. Every request that
//! runs a model goes through one life cycle (`ingress`: admit, parse,
//! resolve, open, bound, respond) that each API dialect plugs into with
//! its own parse and `render::Render`: `chat` (chat completions, the
//! internal form), `forward` (completions and embeddings, relayed),
//! `responses` (the Responses API: translated, or verbatim to a native
//! upstream; and its stored responses), `messages` (Anthropic's Messages
//! API, errors in Anthropic's shape).
//! Answers go out through `respond` (whole, or streamed by `relay`, in
//! `sse` framing), with the `x-conclave-*` response `headers`;
//! `guard` counts each request. `info` answers the other endpoints,
//! `requests` the ring of recent request records, and
//! `endpoints` mounts those the strategies serve (the arena's votes);
//! `ready` answers `/readyz` from its cache; `console` serves the web
//! console's page and files; `auth`, `body`, `query`
//! and `options` read what the client sent; `error` is the one OpenAI
//! error mapping.
//!
//! [`Gateway`] holds the current [`AppState`] behind an atomic swap, so a
//! config reload (SIGHUP) changes what new requests see while requests in
//! flight keep the state they started with.

mod auth;
mod body;
mod cache;
mod chat;
pub mod console;
mod endpoints;
pub mod error;
mod forward;
mod guard;
mod headers;
mod info;
mod ingress;
mod messages;
mod native;
mod options;
mod query;
mod ready;
mod relay;
mod render;
mod requests;
mod respond;
mod responses;
mod routes;
pub use routes::Routes;
mod sse;

use hashbrown::HashMap;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use axum::Router;
use axum::http::{Method, Uri};
use axum::routing::{get, post};
use tokio_util::sync::CancellationToken;

use crate::clock::Clock;
use crate::config::{Config, Route, RouteSpec};
use crate::governor::Governor;
use crate::graph::{BuildError, Graph, Kept};
use crate::retry::{RetryBudget, RetryBudgets};
use crate::store::Backend;
use crate::store::records::Records;
use crate::store::responses::Responses;
use crate::telemetry::Telemetry;
use crate::upstream::registry::Registry;
pub use auth::Keys;
pub use chat::parse as parse_chat_request;
use error::ApiError;
use indexmap::IndexMap;

/// What outlives config reloads: telemetry, the governor's spend, the
/// upstreams, the strategies' kept state, the routes' retry budgets, and
/// the start time.
#[derive(Clone)]
pub struct Shared {
    /// The response cache (its entries and the calls in flight), kept
    /// across reloads.
    pub cache: Arc<crate::graph::Cache>,
    pub telemetry: Arc<Telemetry>,
    pub governor: Arc<Governor>,
    /// Where the state lives (this process, or `[state]`'s shared one).
    pub backend: Arc<Backend>,
    /// The Responses API's stored responses (the backend's).
    pub responses: Arc<Responses>,
    /// Arenas and oracle spend (the backend's).
    pub records: Records,
    /// The upstreams built so far, reused by reloads that leave them be.
    pub upstreams: Arc<Registry>,
    /// The state strategies keep (a balance's members'), across reloads.
    pub kept: Arc<Kept>,
    /// Each route's retry budget, its counts kept across reloads.
    pub retry_budgets: Arc<RetryBudgets>,
    /// Unix time the gateway started (the `created` of `/v1/models`).
    pub started_at: u64,
    /// The instance's wall clock.
    pub clock: Clock,
}

/// What every handler shares for one generation of the config; read-only.
pub struct AppState {
    pub graph: Graph,
    /// The response cache (`DELETE /v1/cache`).
    pub cache: Arc<crate::graph::Cache>,
    pub keys: Keys,
    /// Output tokens assumed for a request without `max_tokens`.
    pub estimate_output_tokens: u32,
    pub request_timeout: Duration,
    pub sse_keepalive: Option<Duration>,
    pub max_body_bytes: usize,
    pub body_read_timeout: Duration,
    pub access_log: bool,
    pub telemetry: Arc<Telemetry>,
    /// Where the state lives, which `/readyz` checks too.
    pub backend: Arc<Backend>,
    /// Arenas and oracle spend (the backend's).
    pub records: Records,
    /// Stored responses, kept for this config's `server.responses_retention`
    /// and within its `responses_max_*` bounds.
    pub responses: Arc<Responses>,
    pub clock: Clock,
    /// The strategy routes, by name in config order, for the endpoints
    /// strategies serve (the arena's votes and leaderboard).
    pub specs: IndexMap<String, Arc<dyn RouteSpec>>,
    /// Unix time the gateway started (the `created` of `/v1/models`).
    pub started_at: u64,
    /// The digest of the key `/metrics` and `/readyz` require, if any.
    pub metrics_key: Option<[u8; 32]>,
    /// `[console]`: whether `/console` is served, to whom, and its links.
    pub console: crate::config::ConsoleConfig,
    /// `/readyz`'s last answer, reused for `server.readyz_cache`.
    pub ready: ready::Cached<ready::Answer>,
    /// The retry budget of every name a client may ask for (a route's
    /// `retry_budget`, the default for a model named directly). On
    /// foldhash, as the graph's nodes: config keys, read by every request.
    pub retry_budgets: HashMap<Arc<str>, Arc<RetryBudget>>,
}

impl AppState {
    pub fn new(config: &Config, shared: &Shared) -> Result<Self, BuildError> {
        let graph = Graph::build_cached(
            config,
            &shared.records,
            &shared.upstreams,
            &shared.kept,
            &shared.telemetry.metrics,
            crate::strategy::STRATEGIES,
            Some(&shared.cache),
        )?;
        shared
            .upstreams
            .keep_only(config.upstreams.keys().map(String::as_str));
        for probe in graph.upstreams.iter().filter_map(|u| u.probe.as_ref()) {
            probe.start_polling();
        }
        for u in &graph.upstreams {
            if let Some(check) = &u.check {
                crate::upstream::health::check::start(u, check);
            }
        }
        for u in &graph.upstreams {
            u.share(&shared.backend);
        }
        let retry_budgets = graph
            .names
            .iter()
            .map(|n| {
                let cfg = config.retry_budgets.get(&**n).copied().unwrap_or_default();
                (n.clone(), shared.retry_budgets.get(n, cfg))
            })
            .collect();
        shared
            .retry_budgets
            .keep_only(graph.names.iter().map(|n| &**n));
        Ok(AppState {
            graph,
            cache: shared.cache.clone(),
            keys: Keys::new(&config.keys, &shared.governor),
            estimate_output_tokens: config.server.estimate_output_tokens,
            request_timeout: config.server.request_timeout,
            sse_keepalive: config.server.sse_keepalive,
            max_body_bytes: config.server.max_body_bytes,
            body_read_timeout: config.server.body_read_timeout,
            access_log: config.server.access_log,
            telemetry: shared.telemetry.clone(),
            backend: shared.backend.clone(),
            records: shared.records.clone(),
            responses: Arc::new(shared.responses.configured(
                config.server.responses_retention,
                config.server.responses_bounds,
            )),
            clock: shared.clock,
            specs: config
                .routes
                .iter()
                .filter_map(|(name, r)| match r {
                    Route::Strategy(s) => Some((name.clone(), s.clone())),
                    Route::Passthrough { .. } => None,
                })
                .collect(),
            started_at: shared.started_at,
            metrics_key: config
                .server
                .metrics_key
                .as_ref()
                .map(|k| crate::config::digest(&k.0)),
            console: config.console.clone(),
            ready: ready::Cached::new(config.server.readyz_cache),
            retry_budgets,
        })
    }
}

/// The running gateway: the current state and the shutdown signals.
pub struct Gateway {
    /// Swapped whole on reload; a request loads it once and keeps its `Arc`.
    current: ArcSwap<AppState>,
    /// Shutdown began: bodies still being read are refused with a 503.
    pub stop: CancellationToken,
    /// The grace period is over: requests still running end now.
    pub hard: CancellationToken,
}

impl Gateway {
    pub fn new(state: AppState) -> Self {
        Gateway {
            current: ArcSwap::from_pointee(state),
            stop: CancellationToken::new(),
            hard: CancellationToken::new(),
        }
    }

    pub fn state(&self) -> Arc<AppState> {
        self.current.load_full()
    }

    pub fn replace(&self, state: AppState) {
        self.current.store(Arc::new(state));
    }
}

pub fn router(gateway: Arc<Gateway>) -> Router {
    let mut router = Router::new();
    for path in routes::CHAT_PATHS {
        router = router.route(path, post(chat::chat_completions));
    }
    let router = router
        .route("/v1/completions", post(forward::completions))
        .route("/completions", post(forward::completions))
        .route("/v1/embeddings", post(forward::embeddings))
        .route("/embeddings", post(forward::embeddings))
        .route("/v1/messages", post(messages::dialect::create))
        .route("/messages", post(messages::dialect::create))
        .route(
            "/v1/messages/count_tokens",
            post(messages::dialect::count_tokens),
        )
        .route(
            "/messages/count_tokens",
            post(messages::dialect::count_tokens),
        )
        .route("/v1/responses", post(responses::dialect::create))
        .route("/responses", post(responses::dialect::create))
        .route(
            "/v1/responses/{id}",
            get(responses::stored::get).delete(responses::stored::delete),
        )
        .route(
            "/responses/{id}",
            get(responses::stored::get).delete(responses::stored::delete),
        )
        .route(
            "/v1/responses/{id}/input_items",
            get(responses::stored::input_items),
        )
        .route(
            "/responses/{id}/input_items",
            get(responses::stored::input_items),
        )
        .route("/v1/models", get(info::models))
        .route("/models", get(info::models))
        .route("/v1/models/{id}", get(info::model))
        .route("/models/{id}", get(info::model))
        .route("/v1/keys/usage", get(info::keys_usage))
        .route("/keys/usage", get(info::keys_usage))
        .route("/v1/cache", axum::routing::delete(cache::clear))
        .route("/cache", axum::routing::delete(cache::clear))
        .route("/v1/usage", get(info::usage))
        .route("/usage", get(info::usage))
        .route("/v1/requests", get(requests::list))
        .route("/requests", get(requests::list))
        .route("/v1/requests/{id}", get(requests::one))
        .route("/requests/{id}", get(requests::one))
        .route(console::CONSOLE, get(console::page))
        .route("/console/", get(console::page))
        .route("/console/{file}", get(console::file))
        .route("/metrics", get(info::metrics))
        .route("/healthz", get(info::healthz))
        .route("/readyz", get(ready::readyz));
    endpoints::mount(router, crate::strategy::STRATEGIES)
        .fallback(unknown_url)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(gateway)
}

async fn unknown_url(method: Method, uri: Uri) -> ApiError {
    ApiError::UnknownUrl {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}
