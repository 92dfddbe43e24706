//! An upstream that bills like a real provider, run in the test process on
//! 127.0.0.1:0: it counts what a request costs by its own rules (not the
//! gateway's), answers with that usage, and keeps the total it billed, so
//! a test can compare a key's budget with what the provider charged.
//!
//! Its rules: every string in the messages at 3 bytes a token (a little
//! dearer than the gateway's 4), `tools` and `response_format` by their
//! JSON at 3 bytes a token, 765 tokens an image (GPT-4o's price for a
//! 1024×1024 high-detail image), and every answer (`n`) written out to
//! its cap (`max_completion_tokens`, `max_tokens`, else 200 tokens).
//!
//! It speaks the Responses API (`POST /v1/responses`: the strings of
//! `instructions` and `input`, encrypted reasoning included; `tools` and
//! `text` by their JSON; written out to `max_output_tokens`) and
//! Anthropic's Messages API (`POST /v1/messages`: `system` and the
//! messages' strings, `tools` by their JSON; written out to `max_tokens`)
//! by the same rules, so a body forwarded verbatim is billed as a real
//! provider would.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// What the provider charged, in total.
#[derive(Default)]
pub struct Bill {
    pub tokens: AtomicU64,
    pub requests: AtomicU64,
}

/// Starts the billing upstream; returns its `…/v1` base URL and its bill.
pub async fn start() -> (String, Arc<Bill>) {
    let bill = Arc::new(Bill::default());
    let app = Router::new()
        .route("/v1/chat/completions", post(chat))
        .route("/v1/responses", post(responses))
        .route("/v1/messages", post(messages))
        .route("/v1/bill", get(total))
        .with_state(bill.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{addr}/v1"), bill)
}

async fn total(State(bill): State<Arc<Bill>>) -> Json<Value> {
    Json(json!({"tokens": bill.tokens.load(Ordering::SeqCst)}))
}

/// Bytes of every string in `v`, images apart.
fn text_and_images(v: &Value, text: &mut u64, images: &mut u64) {
    match v {
        Value::String(s) => *text += s.len() as u64,
        Value::Array(a) => a.iter().for_each(|i| text_and_images(i, text, images)),
        Value::Object(o)
            if matches!(
                o.get("type").and_then(Value::as_str),
                Some("image_url" | "input_image" | "image")
            ) =>
        {
            *images += 1
        }
        Value::Object(o) => o.values().for_each(|i| text_and_images(i, text, images)),
        _ => {}
    }
}

/// What the provider bills for the chat request `req`: (input, output)
/// tokens.
pub fn price(req: &Value) -> (u64, u64) {
    let (input, cap) = price_of(
        req,
        &["messages"],
        &["tools", "response_format"],
        &["max_completion_tokens", "max_tokens"],
    );
    let n = req.get("n").and_then(Value::as_u64).unwrap_or(1);
    (input, cap * n)
}

/// What the provider bills for the Responses request `req`.
pub fn price_responses(req: &Value) -> (u64, u64) {
    price_of(
        req,
        &["instructions", "input"],
        &["tools", "text"],
        &["max_output_tokens"],
    )
}

/// What the provider bills for the Messages request `req`.
pub fn price_messages(req: &Value) -> (u64, u64) {
    price_of(req, &["system", "messages"], &["tools"], &["max_tokens"])
}

/// The strings of the fields `texts`, the JSON of the fields `json` (at
/// 3 bytes a token), the images, and the first cap of `caps` (else 200).
fn price_of(req: &Value, texts: &[&str], json: &[&str], caps: &[&str]) -> (u64, u64) {
    let (mut text, mut images) = (0, 0);
    for k in texts {
        text_and_images(&req[*k], &mut text, &mut images);
    }
    for k in json {
        if let Some(v) = req.get(*k) {
            text += v.to_string().len() as u64;
        }
    }
    let input = text.div_ceil(3) + images * 765;
    let cap = caps
        .iter()
        .find_map(|k| req.get(*k).and_then(Value::as_u64))
        .unwrap_or(200);
    (input, cap)
}

async fn responses(State(bill): State<Arc<Bill>>, Json(req): Json<Value>) -> Json<Value> {
    let (input, output) = price_responses(&req);
    bill.tokens.fetch_add(input + output, Ordering::SeqCst);
    bill.requests.fetch_add(1, Ordering::SeqCst);
    Json(json!({
        "id": "resp_billing",
        "object": "response",
        "created_at": 1,
        "status": "completed",
        "model": req["model"],
        "output": [{"type": "message", "id": "msg_billing", "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": "billed", "annotations": []}]}],
        "usage": {"input_tokens": input, "output_tokens": output,
                  "total_tokens": input + output},
    }))
}

async fn messages(State(bill): State<Arc<Bill>>, Json(req): Json<Value>) -> Json<Value> {
    let (input, output) = price_messages(&req);
    bill.tokens.fetch_add(input + output, Ordering::SeqCst);
    bill.requests.fetch_add(1, Ordering::SeqCst);
    Json(json!({
        "id": "msg_billing",
        "type": "message",
        "role": "assistant",
        "model": req["model"],
        "content": [{"type": "text", "text": "billed"}],
        "stop_reason": "max_tokens",
        "stop_sequence": null,
        "usage": {"input_tokens": input, "output_tokens": output},
    }))
}

async fn chat(State(bill): State<Arc<Bill>>, Json(req): Json<Value>) -> Json<Value> {
    let (input, output) = price(&req);
    bill.tokens.fetch_add(input + output, Ordering::SeqCst);
    bill.requests.fetch_add(1, Ordering::SeqCst);
    let n = req.get("n").and_then(Value::as_u64).unwrap_or(1).min(1000);
    let choices: Vec<Value> = (0..n)
        .map(|i| {
            json!({"index": i, "finish_reason": "length",
                   "message": {"role": "assistant", "content": "billed"}})
        })
        .collect();
    Json(json!({
        "id": "chatcmpl-billing",
        "object": "chat.completion",
        "created": 1,
        "model": req["model"],
        "choices": choices,
        "usage": {"prompt_tokens": input, "completion_tokens": output,
                  "total_tokens": input + output},
    }))
}
