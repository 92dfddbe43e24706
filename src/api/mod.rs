//! The HTTP surface: the axum router, shared state, auth, the chat handler,
//! SSE relaying, and the OpenAI error mapping (`error`).

mod auth;
mod chat;
pub mod error;
mod info;
mod sse;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::http::{Method, Uri};
use axum::routing::{get, post};

use crate::graph::Graph;
use crate::telemetry::Telemetry;
pub use auth::Keys;
use error::ApiError;

/// What every handler shares; built once, read-only afterwards.
pub struct AppState {
    pub graph: Graph,
    pub keys: Keys,
    pub request_timeout: Duration,
    pub sse_keepalive: Option<Duration>,
    pub max_body_bytes: usize,
    pub telemetry: Arc<Telemetry>,
    /// Unix time the gateway started (the `created` of `/v1/models`).
    pub started_at: u64,
}

pub fn router(state: Arc<AppState>) -> Router {
    let chat = post(chat::chat_completions).layer(DefaultBodyLimit::max(state.max_body_bytes));
    Router::new()
        .route("/v1/chat/completions", chat.clone())
        .route("/chat/completions", chat)
        .route("/v1/models", get(info::models))
        .route("/models", get(info::models))
        .route("/metrics", get(info::metrics))
        .route("/healthz", get(info::healthz))
        .route("/readyz", get(info::readyz))
        .fallback(unknown_url)
        .method_not_allowed_fallback(|| async { ApiError::MethodNotAllowed })
        .with_state(state)
}

async fn unknown_url(method: Method, uri: Uri) -> ApiError {
    ApiError::UnknownUrl {
        method: method.to_string(),
        path: uri.path().to_owned(),
    }
}
