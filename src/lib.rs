//! conclave: an OpenAI-compatible gateway that convenes several models
//! behind one model name.
//!
//! A request flows through these parts, each owning one thing:
//!
//! - [`config`]: the TOML file, validated once into a [`config::Config`]
//!   (every error with its key path).
//! - [`graph`]: compiles the config into `Arc<dyn ChatModel>` nodes, one per
//!   concrete model and per route.
//! - [`model`]: the [`model::ChatModel`] trait that concrete models and
//!   strategies share, and the replies it returns (whole or streamed).
//! - [`upstream`]: transports to real servers (`openai`) and the built-in
//!   simulator (`mock`), response decoding, and [`upstream::ConcreteModel`],
//!   the one decorator that records every upstream call as an attempt.
//! - [`strategy`]: models made of models (chain, with more to come).
//! - [`api`]: the axum router, auth, SSE relaying and the single mapping of
//!   errors to OpenAI-shaped HTTP responses.
//! - [`telemetry`]: metric names, the Prometheus recorder, the JSONL event
//!   log and the attempt record.
//! - [`context`]: the per-request context (id, route, key, deadline).
//! - [`openai`]: wire types that keep unknown fields.
//! - [`mock`]: the simulator and the standalone `conclave mock` server.
//! - [`error`]: `ModelError`, what can go wrong while a model answers.

pub mod api;
pub mod config;
pub mod context;
pub mod error;
pub mod graph;
pub mod mock;
pub mod model;
pub mod openai;
pub mod redact;
pub mod strategy;
pub mod telemetry;
pub mod upstream;

use std::future::Future;
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use axum::serve::ListenerExt;
use tokio::net::TcpListener;

use crate::api::{AppState, Keys};
use crate::config::Config;
use crate::graph::{BuildError, Graph};
use crate::telemetry::Telemetry;

#[derive(Debug, thiserror::Error)]
pub enum ServeError {
    #[error(transparent)]
    Build(#[from] BuildError),
    #[error("cannot open the event log {path}: {source}")]
    EventLog {
        path: String,
        #[source]
        source: std::io::Error,
    },
    #[error("server error: {0}")]
    Io(#[from] std::io::Error),
}

/// Runs the gateway on `listener` until `shutdown` resolves, then drains
/// in-flight requests and flushes the event log.
pub async fn serve(
    listener: TcpListener,
    config: Config,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> Result<(), ServeError> {
    let telemetry = Telemetry::new(config.server.event_log.as_deref()).map_err(|source| {
        ServeError::EventLog {
            path: config
                .server
                .event_log
                .as_ref()
                .map(|p| p.display().to_string())
                .unwrap_or_default(),
            source,
        }
    })?;
    let graph = Graph::build(&config)?;
    let state = Arc::new(AppState {
        graph,
        keys: Keys::new(&config.keys),
        request_timeout: config.server.request_timeout,
        sse_keepalive: config.server.sse_keepalive,
        max_body_bytes: config.server.max_body_bytes,
        telemetry: telemetry.clone(),
        started_at: SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or_default(),
    });
    let listener = listener.tap_io(|tcp| {
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!("TCP_NODELAY not set: {e}");
        }
    });
    let result = axum::serve(listener, api::router(state))
        .with_graceful_shutdown(shutdown)
        .await;
    telemetry.shutdown();
    result.map_err(ServeError::from)
}
