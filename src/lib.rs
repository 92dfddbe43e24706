//! conclave: an OpenAI-compatible gateway that convenes several models
//! behind one model name.
//!
//! A request flows: the API admits it (keys, limits, budgets) and looks its
//! model name up once; the node the graph built for that name answers it
//! (the pin decorator, a strategy, [`upstream::ConcreteModel`], a
//! transport); the answer goes back in the client's dialect.
//!
//! # The module map, by layer
//!
//! Bottom to top. A module imports only from its own layer or lower ones,
//! and no two modules import each other at any depth (siblings such as
//! `api::relay` and `api::render`; a parent and its own children may).
//! `tests/it/layers.rs` reads this table and checks every path in `src/`.
//!
//! 1. [`wire`], [`labels`], [`clock`], [`redact`], [`span`], [`log_line`], [`error`], [`alloc`], [`text`], [`boxed`]: the leaves.
//!    `wire`: each dialect's wire types (OpenAI chat, Responses,
//!    Anthropic Messages), keeping unknown fields; each endpoint as a
//!    protocol value ([`wire::Endpoint`], beside its dialect's reader); the
//!    bounded inspection of what upstreams send. `labels`: the bounded
//!    label sets (role, verdict, warm). `clock`: the instance's wall clock
//!    (the system's, or a test's on paused tokio time). `redact`: keeps
//!    the config's secrets out of what upstreams say. `span`: a request's
//!    place in its trace, exported through a trait telemetry implements.
//!    `log_line`: stderr's text log and its throttle. `error`:
//!    `ModelError`, what can go wrong while a model answers. `alloc`: the
//!    process's allocator (mimalloc on its fast path), the crate's only
//!    `unsafe` code. `text`: cutting text to a number of characters.
//!    `boxed`: a future boxed where it will run, not copied there.
//! 2. [`sink`], [`mock`]: what a request reports (attempt and request
//!    records) and the traits of what takes it (attempt and event sinks,
//!    the instance's metrics recorder, a route's retry budget); the
//!    simulator and the standalone `conclave mock` server.
//! 3. [`config`]: the TOML file, validated once into a [`config::Config`]
//!    (every error with its key path); plain data, no runtime types.
//! 4. [`context`], [`telemetry`]: the per-request context (id, route, key,
//!    deadline, options, running usage, the sinks it reports to); the
//!    metric contract (and the metrics strategies declare), each
//!    instance's Prometheus recorder (and today's tallies per route and
//!    model beside it), the JSONL event log and the ring of recent (and
//!    running) request records fed by the same lines, OpenTelemetry traces.
//!    The two meet only through the sinks.
//! 5. [`store`]: what must hold across requests, and the one
//!    [`store::Backend`] that decides where it lives (SQLite and this
//!    process, or `[state]`'s shared Redis, named nowhere above the
//!    store): keys' limits and spend, arenas and votes, oracle spend,
//!    stored Responses answers, lane leases, upstreams' shared `rpm`.
//! 6. [`retry`], [`attempt`]: why a failed call may be sent again, each
//!    route's retry budget and the one check every retry makes; the
//!    record of one upstream call, reported once to the request's sinks.
//! 7. [`model`], [`stream`]: the [`model::ChatModel`] trait that concrete
//!    models and strategies share, and its replies (whole or streamed);
//!    the streaming toolkit strategies share.
//! 8. [`upstream`]: transports to real servers (`openai`, `anthropic`)
//!    and the simulator, response decoding and stream relaying for any
//!    endpoint, local lanes, health and ejection, and
//!    [`upstream::ConcreteModel`], the one decorator that opens an attempt
//!    for every upstream call.
//! 9. [`graph`]: compiles the config into `Arc<dyn ChatModel>` nodes (a
//!    strategy route by the builder of the strategy table it is handed),
//!    pass-through routes, the one `x-conclave-pin` decorator, the
//!    response cache's decorator (its canonical key, coalescing of
//!    identical requests), the state it keeps for strategies across
//!    reloads, and the table's entry type.
//! 10. [`strategy`]: models made of models, one folder each, each one
//!     line of [`strategy::STRATEGIES`] (its parser, builder, metrics and
//!     endpoints).
//! 11. [`governor`]: API keys' rate limits and daily budgets: admission,
//!     settlement, rejections and the usage view.
//! 12. [`eval`], [`api`]: `conclave eval` (task sets run through routes,
//!     graded, compared); the axum router, admission, each dialect's
//!     endpoints, SSE relaying and the one mapping of errors to HTTP.
//! 13. [`server`], `reload`, `main`: the accept loop (connection and
//!     in-flight caps, HTTP/2 bounds, timeouts, graceful shutdown);
//!     SIGHUP's new config for new requests; the CLI. This file's
//!     [`prepare`] opens what a gateway needs, once.

pub mod alloc;
pub mod api;
pub mod attempt;
pub mod boxed;
pub mod clock;
pub mod config;
pub mod context;
pub mod error;
pub mod eval;
pub mod governor;
pub mod graph;
pub mod labels;
pub mod log_line;
pub mod mock;
pub mod model;
pub mod redact;
mod reload;
pub mod retry;
pub mod server;
pub mod sink;
pub mod span;
pub mod store;
pub mod strategy;
pub mod stream;
pub mod telemetry;
pub mod text;
pub mod upstream;
pub mod wire;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::mpsc;

use crate::api::{AppState, Gateway, Shared};
use crate::clock::Clock;
use crate::config::Config;
use crate::governor::Governor;
use crate::graph::BuildError;
use crate::telemetry::Telemetry;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error(transparent)]
    Store(#[from] store::StoreError),
    #[error(transparent)]
    Trace(#[from] telemetry::trace::TraceSetupError),
    #[error("cannot open the event log {path}: {source}")]
    EventLog {
        path: String,
        #[source]
        source: std::io::Error,
    },
}

/// What the process asks of a running gateway (from signals, in `main`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// Re-read the config file and reopen the event log (SIGHUP).
    Reload,
    /// Stop accepting, drain within the grace period, flush, return.
    Shutdown,
}

/// A gateway with everything that can fail to open already open (traces,
/// the event log, the state store, the graph): what `serve` needs before
/// it binds a port, so a bad store or log never leaves a port bound or a
/// "listening on" printed.
pub struct Prepared {
    config: Config,
    shared: Shared,
    gateway: Arc<Gateway>,
}

/// Opens what the gateway needs: traces, the event log, the state store
/// and the governor's spend, and builds the first state from `config`,
/// on the system's clock.
pub fn prepare(config: Config) -> Result<Prepared, ServeError> {
    prepare_with(config, Clock::system())
}

/// [`prepare`] on `clock` (a test's, which paused tokio time drives).
/// Each prepared gateway has its own metrics recorder, event log and
/// store, so several can run in one process. Call it on a tokio runtime:
/// it starts the recorder's upkeep and the spend flush there.
pub fn prepare_with(config: Config, clock: Clock) -> Result<Prepared, ServeError> {
    let tracer = match &config.telemetry.otlp_endpoint {
        Some(endpoint) => Some(telemetry::trace::Tracer::new(
            &config.telemetry,
            endpoint,
            tokio::runtime::Handle::current(),
        )?),
        None => None,
    };
    let log_path = config.server.event_log.clone();
    let buffer = config.server.event_log_buffer;
    let telemetry = Telemetry::new(
        log_path.as_deref(),
        buffer,
        tracer,
        clock,
        &strategy::metrics(),
        config.console.recent_requests,
    )
    .map_err(|source| ServeError::EventLog {
        path: log_path
            .as_ref()
            .map(|p| p.display().to_string())
            .unwrap_or_default(),
        source,
    })?;
    let metrics = telemetry.metrics.clone();
    // The one place that picks where state lives: with `[state]`, keys'
    // limits, arenas, oracle spend, stored answers, lanes and upstream
    // `rpm` are shared.
    let backend = Arc::new(store::Backend::open(
        config.server.state_path.as_deref(),
        config.state.as_ref(),
        clock,
        metrics.clone(),
    )?);
    // A reservation outlives the longest request, unless a replica dies.
    let hold_ttl = config.server.request_timeout + Duration::from_secs(60);
    let governor = Governor::open(backend.keys(hold_ttl)?, clock, metrics.clone());
    let records = backend.records();
    let responses = Arc::new(store::responses::Responses::new(
        backend.response_rows(),
        clock,
        config.server.responses_retention,
        config.server.responses_bounds,
    ));
    let cache = graph::Cache::new(backend.answers(config.cache));
    let shared = Shared {
        cache,
        telemetry,
        governor,
        backend,
        responses,
        records,
        upstreams: Arc::new(upstream::registry::Registry::with_clock(clock)),
        kept: Arc::default(),
        retry_budgets: Arc::default(),
        started_at: clock.unix_secs(),
        clock,
    };
    let gateway = Arc::new(Gateway::new(AppState::new(&config, &shared)?));
    Ok(Prepared {
        config,
        shared,
        gateway,
    })
}

/// Where a gateway serves: one listener on the caller's runtime (tests,
/// an embedding program), or one socket per worker thread
/// ([`server::Listeners`], what `conclave serve` uses).
pub enum Listen {
    Here(TcpListener),
    Workers(server::Listeners),
}

impl Listen {
    fn local_addr(&self) -> Option<std::net::SocketAddr> {
        match self {
            Listen::Here(l) => l.local_addr().ok(),
            Listen::Workers(w) => Some(w.local_addr()),
        }
    }
}

impl From<TcpListener> for Listen {
    fn from(l: TcpListener) -> Self {
        Listen::Here(l)
    }
}

/// Runs the gateway on `listener` until `control` says `Shutdown` (or is
/// closed), then drains in-flight requests and flushes the event log.
/// `source` is the config file that `Reload` re-reads.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    source: Option<PathBuf>,
    control: mpsc::UnboundedReceiver<Control>,
) -> Result<(), ServeError> {
    prepare(config)?.run(listener, source, control).await
}

impl Prepared {
    /// The config it was prepared from.
    pub fn config(&self) -> &Config {
        &self.config
    }

    /// The HTTP routes of this gateway, to call in-process (tests send
    /// requests with `tower::ServiceExt::oneshot`: no socket, so paused
    /// tokio time drives every deadline).
    pub fn router(&self) -> axum::Router {
        api::router(self.gateway.clone())
    }

    /// The simulator of this gateway's `kind = "mock"` upstream `name`, as
    /// the current config has it: what it received, its counters and what
    /// it has loaded, for in-process tests (`conclave mock` serves the
    /// same over HTTP).
    pub fn simulator(&self, name: &str) -> Option<Arc<mock::Simulator>> {
        let state = self.gateway.state();
        let up = state.graph.upstreams.iter().find(|u| &*u.name == name)?;
        up.transport.simulator()
    }

    /// The stored Responses API answers of the current config, for
    /// in-process tests.
    pub fn responses(&self) -> Arc<store::responses::Responses> {
        self.gateway.state().responses.clone()
    }

    /// This gateway's `/metrics` text, from its own recorder.
    pub fn metrics(&self) -> String {
        self.shared.telemetry.render()
    }

    /// What flushes telemetry's queues (the event log, spans) as shutdown
    /// does, for a test that reads them; it blocks, so run it off the
    /// runtime (`spawn_blocking`).
    pub fn flusher(&self) -> impl FnOnce() + Send + 'static {
        let telemetry = self.shared.telemetry.clone();
        move || telemetry.shutdown()
    }

    /// [`serve`] once prepared: nothing here can fail to open.
    pub async fn run(
        self,
        listen: impl Into<Listen>,
        source: Option<PathBuf>,
        mut control: mpsc::UnboundedReceiver<Control>,
    ) -> Result<(), ServeError> {
        let Prepared {
            config,
            shared,
            gateway,
        } = self;
        let listen: Listen = listen.into();
        let addr = listen.local_addr().unwrap_or(config.server.listen);
        if config.keys.is_empty() && !addr.ip().is_loopback() {
            tracing::warn!(
                "no [[keys]] configured: anyone who can reach {addr} may use every model"
            );
        }
        let budget: server::Budget = {
            let gateway = gateway.clone();
            Arc::new(move || {
                let state = gateway.state();
                state.body_read_timeout + state.request_timeout
            })
        };
        let server = server::Server::new(
            api::Routes::gateway(gateway.clone()),
            config.server.limits,
            budget,
            gateway.stop.clone(),
            gateway.hard.clone(),
        );
        // The workers' runtimes outlive the drain, for the last flushes.
        let release = tokio_util::sync::CancellationToken::new();
        // However this future ends (dropped, a panic), the workers end.
        let _release = release.clone().drop_guard();
        let server = match listen {
            Listen::Here(listener) => tokio::spawn(async move { server.serve(listener).await }),
            Listen::Workers(sockets) => {
                tokio::spawn(server::serve_on_workers(server, sockets, release.clone()))
            }
        };
        let mut running = config;
        while let Some(Control::Reload) = control.recv().await {
            if let Some(path) = &source {
                running = reload::reload(path, running, &gateway, &shared);
            }
        }
        tracing::info!("shutting down: no new connections; draining requests in flight");
        gateway.stop.cancel();
        if let Err(e) = server.await {
            tracing::warn!("the server task failed: {e}");
        }
        // Stored answers still waiting for the writer are written first,
        // and spend owed to the shared state gets a last try.
        shared
            .responses
            .flush(std::time::Duration::from_secs(5))
            .await;
        shared
            .governor
            .finish_shared(std::time::Duration::from_secs(2))
            .await;
        let Shared {
            governor,
            telemetry,
            ..
        } = shared;
        let _ = tokio::task::spawn_blocking(move || {
            governor.flush_blocking();
            telemetry.shutdown();
        })
        .await;
        release.cancel();
        Ok(())
    }
}
