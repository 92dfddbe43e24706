//! The simulator playing Anthropic's Messages API (`api = "anthropic"`):
//! `POST /v1/messages` answers the same simulated answer as chat (text or
//! one tool call, usage with the cache fields, timing, failure modes) in
//! Anthropic's documented shapes ([`reply`]); `POST
//! /v1/messages/count_tokens` answers `{"input_tokens": N}`; every OpenAI
//! path is a 404, so a test that reaches it proves the gateway translated.
//!
//! It checks requests as Anthropic does ([`check`]): unknown top-level
//! fields, a missing `max_tokens`, a `system` role inside `messages`,
//! OpenAI-shaped content parts or tools, a `tool_result` without its
//! `tool_use` (and a `tool_use` whose result is missing) are 400
//! `invalid_request_error`s. Errors come in Anthropic's shape
//! (`{"type":"error","error":{"type","message"}}`): a behaviour's
//! `status` 429 is a `rate_limit_error` (with `retry-after` and, over
//! HTTP, `anthropic-ratelimit-requests-*`), 529 an `overloaded_error`.

mod check;
mod reply;

use std::sync::Arc;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Value, json};

use super::answer::request_text;
use super::{Behavior, FailMode, Finish, Heard, MockResponse, Simulator, once};
use crate::wire::anthropic::error_type;
use crate::wire::{Endpoint, content_text};

/// The wire format a mock upstream speaks.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Api {
    /// OpenAI's Chat Completions (and Completions, Embeddings, Responses).
    #[default]
    OpenAi,
    /// Anthropic's Messages API.
    Anthropic,
}

/// Answers one request as Anthropic's API would.
pub(super) async fn respond(
    sim: &Arc<Simulator>,
    endpoint: Endpoint,
    body: &[u8],
    heard: Heard,
    guard: Finish,
) -> MockResponse {
    let count = match endpoint {
        e if e == Endpoint::MESSAGES => false,
        e if e == Endpoint::COUNT_TOKENS => true,
        other => {
            let msg = format!(
                "mock: {} is not served here (api = \"anthropic\": POST /v1/messages)",
                other.path()
            );
            return guard.done(error(404, &msg, None));
        }
    };
    let req: Value = match serde_json::from_slice(body) {
        Ok(v @ Value::Object(_)) => v,
        _ => return guard.done(error(400, "mock: the body is not a JSON object", None)),
    };
    let Some(model) = req.get("model").and_then(Value::as_str).map(str::to_owned) else {
        return guard.done(error(400, "model: Field required", None));
    };
    sim.record(&model, heard, &req);
    if let Err(msg) = check::request(&req, count) {
        return guard.done(error(400, &msg, None));
    }
    let view = chat_view(&req);
    let text = request_text(&view);
    if count {
        let tokens = (text.len() as u64).div_ceil(4);
        let body = json!({"input_tokens": tokens}).to_string();
        return super::answer::json_body(Bytes::from(body), None, guard);
    }
    let call = sim.count_call(&model);
    let b = match sim.models.get(&model) {
        Some(b) => b.resolve(&text, call),
        None if sim.echo_unknown => Behavior::default().resolve(&text, call),
        None => {
            let msg = format!("model: {model}");
            return guard.done(error(404, &msg, None));
        }
    };
    let n = sim.next_id.fetch_add(1, Ordering::Relaxed);
    sim.swap_to(&model).await;
    if b.fails_at_once(FailMode::Hang) {
        return std::future::pending().await;
    }
    if let Some(status) = b.status.filter(|s| *s >= 300) {
        let msg = b
            .error_message
            .clone()
            .unwrap_or_else(|| default_message(status).to_owned());
        return guard.done(error(status, &msg, b.retry_after));
    }
    reply::respond(b, &req, &view, &model, n, guard).await
}

/// The request as chat messages (text only): `system` as a system
/// message, then each message's text blocks and tool results, so
/// behaviour rules and the echo see the same text as on chat.
fn chat_view(req: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(system) = req.get("system") {
        messages.push(json!({"role": "system", "content": content_text(Some(system))}));
    }
    for m in req
        .get("messages")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let mut parts = vec![content_text(m.get("content"))];
        for block in m
            .get("content")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
        {
            if block.get("type").and_then(Value::as_str) == Some("tool_result") {
                parts.push(content_text(block.get("content")));
            }
        }
        let text: Vec<String> = parts.into_iter().filter(|p| !p.is_empty()).collect();
        messages.push(json!({"role": m.get("role"), "content": text.join("\n")}));
    }
    json!({"messages": messages})
}

fn default_message(status: u16) -> &'static str {
    match status {
        429 => "Number of request tokens has exceeded your per-minute rate limit",
        529 => "Overloaded",
        _ => "mock: simulated error",
    }
}

/// An error in Anthropic's shape.
pub(super) fn error(status: u16, message: &str, retry_after: Option<u64>) -> MockResponse {
    MockResponse {
        status,
        content_type: "application/json",
        retry_after,
        body: once(Bytes::from(error_body(status, message).to_string())),
    }
}

/// `{"type":"error","error":{"type","message"}}` for a status.
pub(super) fn error_body(status: u16, message: &str) -> Value {
    json!({"type": "error", "error": {"type": error_type(status), "message": message}})
}

#[cfg(test)]
mod tests;
