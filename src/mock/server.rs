//! `conclave mock`: the simulator as a standalone OpenAI-compatible server
//! (Chat Completions, Completions, Embeddings, and the Responses API when
//! `responses = true`, else a 404 there)
//! that also answers llama-swap's `GET /running` and
//! With `api = "anthropic"` it plays Anthropic instead: `POST
//! /v1/messages` and `/v1/messages/count_tokens`, reading `x-api-key`,
//! `anthropic-version` and `anthropic-beta`, and a 429 carries
//! `anthropic-ratelimit-requests-*` headers besides `retry-after`.
//! It also answers
//! `GET /upstream/<model>/props` (which loads the model, as llama-swap's
//! passthrough does) and llama.cpp's `GET /props` (`?model=` picks the
//! model, as in router mode), the token-counting endpoints of llama.cpp
//! (`POST /apply-template`, `/tokenize`), vLLM (`POST /tokenize` with
//! `messages`) and llama-cpp-python (`POST /extras/tokenize`,
//! `/extras/tokenize/count`), see [`context::Tokenizer`], plus two test
//! hooks:
//! `GET /mock/requests` (what it received) and `GET /mock/stats`
//! (answers completed, abandoned by a client that went away, models
//! loaded, and token counts asked).

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::serve::ListenerExt;
use serde_json::json;
use tokio::net::TcpListener;

use std::collections::HashMap;

use super::{Api, Heard, Quirk, Simulator, context};
use crate::wire::Endpoint;

pub fn router(sim: Arc<Simulator>) -> Router {
    Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/chat/completions", post(chat))
        .route("/v1/completions", post(completions))
        .route("/completions", post(completions))
        .route("/v1/embeddings", post(embeddings))
        .route("/embeddings", post(embeddings))
        .route("/v1/responses", post(responses))
        .route("/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1/messages/count_tokens", post(count_tokens))
        .route("/v1/models", get(models))
        .route("/running", get(running))
        .route("/props", get(props))
        .route("/apply-template", post(apply_template))
        .route("/tokenize", post(tokenize))
        .route("/extras/tokenize", post(extras_tokenize))
        .route("/extras/tokenize/count", post(extras_tokenize))
        .route("/upstream/{model}/props", get(upstream_props))
        .route("/health", get(|| async { "OK" }))
        .route("/mock/requests", get(requests).delete(clear))
        .route("/mock/stats", get(stats))
        .with_state(sim)
}

/// Serves until `shutdown` resolves.
pub async fn serve(
    listener: TcpListener,
    sim: Arc<Simulator>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> std::io::Result<()> {
    let listener = listener.tap_io(|tcp| {
        let _ = tcp.set_nodelay(true);
    });
    axum::serve(listener, router(sim))
        .with_graceful_shutdown(shutdown)
        .await
}

async fn chat(State(sim): State<Arc<Simulator>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(Endpoint::CHAT, &sim, &headers, &body).await
}

async fn completions(
    State(sim): State<Arc<Simulator>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(Endpoint::COMPLETIONS, &sim, &headers, &body).await
}

async fn embeddings(
    State(sim): State<Arc<Simulator>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(Endpoint::EMBEDDINGS, &sim, &headers, &body).await
}

async fn responses(State(sim): State<Arc<Simulator>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(Endpoint::RESPONSES, &sim, &headers, &body).await
}

async fn messages(State(sim): State<Arc<Simulator>>, headers: HeaderMap, body: Bytes) -> Response {
    answer(Endpoint::MESSAGES, &sim, &headers, &body).await
}

async fn count_tokens(
    State(sim): State<Arc<Simulator>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    answer(Endpoint::COUNT_TOKENS, &sim, &headers, &body).await
}

async fn answer(
    endpoint: Endpoint,
    sim: &Arc<Simulator>,
    headers: &HeaderMap,
    body: &[u8],
) -> Response {
    let get = |name: &str| {
        headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned)
    };
    let heard = Heard {
        authorization: get(header::AUTHORIZATION.as_str()),
        request_id: get("x-request-id"),
        api_key: get("x-api-key"),
        anthropic_version: get("anthropic-version"),
        anthropic_beta: get("anthropic-beta"),
    };
    let r = sim.respond_to(endpoint, body, heard).await;
    let mut resp = Response::new(Body::from_stream(r.body));
    *resp.status_mut() =
        StatusCode::from_u16(r.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let h = resp.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(r.content_type),
    );
    if let Some(secs) = r.retry_after {
        h.insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    if r.status == 429 && sim.api() == Api::Anthropic {
        let reset = std::time::SystemTime::now() + Duration::from_secs(r.retry_after.unwrap_or(1));
        let reset = humantime::format_rfc3339_seconds(reset).to_string();
        for (name, v) in [
            ("anthropic-ratelimit-requests-limit", "50".to_owned()),
            ("anthropic-ratelimit-requests-remaining", "0".to_owned()),
            ("anthropic-ratelimit-requests-reset", reset),
        ] {
            if let Ok(v) = HeaderValue::from_str(&v) {
                h.insert(name, v);
            }
        }
    }
    resp
}

async fn models(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    let data: Vec<_> = sim
        .model_names()
        .into_iter()
        .map(|id| {
            let mut m = json!({"id": id, "object": "model", "created": 0, "owned_by": sim.owner()});
            // As older llama-server builds: the training length only, not
            // the served window (newer ones add `meta.n_ctx`), so `/props`
            // is where a client learns it.
            if let Some(w) = sim.context_window(&id) {
                m["meta"] = json!({"n_ctx_train": w.saturating_mul(4), "n_vocab": 49152});
            }
            m
        })
        .collect();
    axum::Json(json!({"object": "list", "data": data}))
}

/// llama.cpp's `/props`: the window of `?model=`, else of the first model
/// that has one; 404 for a model without one.
async fn props(
    State(sim): State<Arc<Simulator>>,
    Query(q): Query<HashMap<String, String>>,
) -> Response {
    if sim.plays(Quirk::InterruptsOnNewRequest) {
        // Playing llama-cpp-python, which has no `/props`.
        return no_window();
    }
    let found = match q.get("model") {
        Some(m) => sim.context_window(m).map(|w| (m.clone(), w)),
        None => sim.first_window(),
    };
    match found {
        Some((m, w)) => axum::Json(context::props(&m, w)).into_response(),
        None => no_window(),
    }
}

/// A JSON object body.
fn object(body: &[u8]) -> Option<serde_json::Map<String, serde_json::Value>> {
    match serde_json::from_slice(body) {
        Ok(serde_json::Value::Object(o)) => Some(o),
        _ => None,
    }
}

/// The answer to a body that is not a JSON object.
fn not_an_object() -> Response {
    (
        StatusCode::BAD_REQUEST,
        "mock: a JSON object body is expected",
    )
        .into_response()
}

/// What a server without the endpoint answers (FastAPI's words).
fn not_here() -> Response {
    (
        StatusCode::NOT_FOUND,
        axum::Json(json!({"detail": "Not Found"})),
    )
        .into_response()
}

/// `n` token ids, as a list.
fn ids(n: u64) -> Vec<u64> {
    (0..n).map(|i| 1 + i % 49_151).collect()
}

/// llama.cpp's `POST /apply-template`: the chat's rendered prompt.
async fn apply_template(State(sim): State<Arc<Simulator>>, body: Bytes) -> Response {
    if !sim.counts_as(context::Tokenizer::LlamaCpp) {
        return not_here();
    }
    match object(&body) {
        Some(o) => axum::Json(json!({"prompt": context::render(&serde_json::Value::Object(o))}))
            .into_response(),
        None => not_an_object(),
    }
}

/// `POST /tokenize`: vLLM's for a chat (`messages` → `count` and
/// `max_model_len`), llama.cpp's for text (`content` → `tokens`).
async fn tokenize(State(sim): State<Arc<Simulator>>, body: Bytes) -> Response {
    let Some(o) = object(&body) else {
        return not_an_object();
    };
    let vllm = sim.counts_as(context::Tokenizer::Vllm);
    let llama = sim.counts_as(context::Tokenizer::LlamaCpp);
    if vllm && o.contains_key("messages") {
        let model = o
            .get("model")
            .and_then(serde_json::Value::as_str)
            .unwrap_or_default();
        let window = sim.context_window(model).unwrap_or(4096);
        let Some(n) = sim.count_prompt(&serde_json::Value::Object(o)) else {
            return not_here();
        };
        return axum::Json(
            json!({"count": n, "max_model_len": window, "tokens": ids(n), "token_strs": null}),
        )
        .into_response();
    }
    if !llama {
        return not_here();
    }
    // llama.cpp reads `content` only (a chat body counts as nothing).
    let text = o
        .get("content")
        .and_then(serde_json::Value::as_str)
        .unwrap_or_default();
    sim.stats.counts.fetch_add(1, Ordering::Relaxed);
    axum::Json(json!({"tokens": ids(context::text_tokens(text))})).into_response()
}

/// llama-cpp-python's `POST /extras/tokenize` (`tokens`) and
/// `/extras/tokenize/count` (`count`) of `input`.
async fn extras_tokenize(
    State(sim): State<Arc<Simulator>>,
    uri: axum::http::Uri,
    body: Bytes,
) -> Response {
    if !sim.counts_as(context::Tokenizer::LlamaCppPython) {
        return not_here();
    }
    let Some(o) = object(&body) else {
        return not_an_object();
    };
    let Some(input) = o.get("input").and_then(serde_json::Value::as_str) else {
        let detail = json!({"detail": [{"type": "missing", "loc": ["body", "input"], "msg": "Field required"}]});
        return (StatusCode::UNPROCESSABLE_ENTITY, axum::Json(detail)).into_response();
    };
    let n = sim.count_text(input).unwrap_or_default();
    if uri.path().ends_with("/count") {
        axum::Json(json!({"count": n})).into_response()
    } else {
        axum::Json(json!({"tokens": ids(n)})).into_response()
    }
}

/// llama-swap's passthrough to a model's server: loads the model first.
async fn upstream_props(State(sim): State<Arc<Simulator>>, Path(model): Path<String>) -> Response {
    let Some(w) = sim.context_window(&model) else {
        return no_window();
    };
    sim.load(&model).await;
    axum::Json(context::props(&model, w)).into_response()
}

fn no_window() -> Response {
    let body = json!({"error": {"code": 404, "message": "mock: no model with a context_window", "type": "not_found_error"}});
    (StatusCode::NOT_FOUND, axum::Json(body)).into_response()
}

async fn running(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    let running: Vec<_> = sim
        .process()
        .into_iter()
        .map(|p| json!({"model": p.model, "state": if p.ready { "ready" } else { "starting" }}))
        .collect();
    axum::Json(json!({"running": running}))
}

async fn requests(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    axum::Json(json!({"requests": sim.recorded()}))
}

async fn clear(State(sim): State<Arc<Simulator>>) -> StatusCode {
    sim.clear_recorded();
    StatusCode::NO_CONTENT
}

async fn stats(State(sim): State<Arc<Simulator>>) -> impl IntoResponse {
    let s = &sim.stats;
    axum::Json(json!({
        "requests": s.requests.load(Ordering::Relaxed),
        "completed": s.completed.load(Ordering::Relaxed),
        "cancelled": s.cancelled.load(Ordering::Relaxed),
        "loads": s.loads.load(Ordering::Relaxed),
        "counts": s.counts.load(Ordering::Relaxed),
        "tokens_generated_after_disconnect": s.tokens_generated_after_disconnect.load(Ordering::Relaxed),
    }))
}
