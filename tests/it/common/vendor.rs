//! Two OpenAI-compatible upstreams that answer the same question as
//! differently as real providers do, for black-box tests of what reaches
//! a client that must not tell them apart (arenas). Run in the test
//! process on 127.0.0.1:0; the request's `model` picks the vendor:
//!
//! - `vendor-a`, like OpenAI: `system_fingerprint`, `service_tier`,
//!   `obfuscation`, `refusal: null`, `annotations`, `logprobs`, `call_…`
//!   tool-call ids, usage details, a role-only first chunk.
//! - `vendor-b`, like vLLM behind a router: `provider`, `reasoning_content`
//!   and `reasoning`, `stop_reason`, `native_finish_reason`, text as
//!   content parts, `chatcmpl-tool-…` ids repeated in every piece, `stop`
//!   with a tool call (`eos` natively), the role in every chunk, the
//!   finish with the last piece, and usage in the last chunk with choices.
//! - `vendor-down`: a 500.
//!
//! Every answer is [`TEXT_A`] or [`TEXT_B`] and one tool call
//! `lookup({"q":"x"})`. Everything else that differs is in [`TELLS`].
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::header;
use axum::response::Response;
use axum::routing::post;
use serde_json::{Value, json};
use tokio::net::TcpListener;

pub const TEXT_A: &str = "Answer from the first.";
pub const TEXT_B: &str = "Answer from the second.";
/// Created times of the two vendors' answers.
pub const CREATED: [u64; 2] = [1_111_111_111, 1_222_222_222];
/// Text that must not reach an arena's client: what tells the vendors
/// (and their models) apart.
pub const TELLS: &[&str] = &[
    "vendor-a",
    "vendor-b",
    "1111111111",
    "1222222222",
    "chatcmpl-a",
    "gen-b",
    "fp_a",
    "default",
    "obfuscation",
    "refusal",
    "annotations",
    "logprobs",
    "call_",
    "chatcmpl-tool",
    "provider",
    "Together",
    "reasoning",
    "thinking",
    "stop_reason",
    "native_finish_reason",
    "eos",
    "details",
    "cached_tokens",
    "cost",
    "system_fingerprint",
];

/// Starts the two vendors; returns their `…/v1` base URL.
pub async fn start() -> String {
    let app = Router::new().route("/v1/chat/completions", post(chat));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1")
}

fn reply(status: u16, content_type: &str, body: Body) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(body)
        .unwrap()
}

fn sse(events: Vec<Value>) -> Response {
    let mut frames: Vec<Bytes> = events
        .into_iter()
        .map(|e| Bytes::from(format!("data: {e}\n\n")))
        .collect();
    frames.push(Bytes::from("data: [DONE]\n\n"));
    let s = futures::stream::iter(frames.into_iter().map(Ok::<_, Infallible>));
    reply(200, "text/event-stream", Body::from_stream(s))
}

async fn chat(body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let stream = req["stream"].as_bool().unwrap_or(false);
    let usage = req["stream_options"]["include_usage"]
        .as_bool()
        .unwrap_or(false);
    match (req["model"].as_str().unwrap_or(""), stream) {
        ("vendor-a", false) => reply(200, "application/json", Body::from(a_whole().to_string())),
        ("vendor-a", true) => sse(a_stream(usage)),
        ("vendor-b", false) => reply(200, "application/json", Body::from(b_whole().to_string())),
        ("vendor-b", true) => sse(b_stream(usage)),
        _ => reply(
            500,
            "application/json",
            Body::from(
                json!({"error": {"message": "vendor-down is down", "type": "server_error"}})
                    .to_string(),
            ),
        ),
    }
}

fn a_usage() -> Value {
    json!({"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18,
           "prompt_tokens_details": {"cached_tokens": 0, "audio_tokens": 0},
           "completion_tokens_details": {"reasoning_tokens": 0, "accepted_prediction_tokens": 0}})
}

fn b_usage() -> Value {
    json!({"prompt_tokens": 13, "completion_tokens": 9, "total_tokens": 22,
           "prompt_tokens_details": null, "cost": 0.0001})
}

fn a_whole() -> Value {
    json!({
        "id": "chatcmpl-a1", "object": "chat.completion", "created": CREATED[0], "model": "vendor-a-2025",
        "system_fingerprint": "fp_a1", "service_tier": "default",
        "choices": [{
            "index": 0,
            "message": {"role": "assistant", "content": TEXT_A, "refusal": null, "annotations": [],
                        "audio": null, "function_call": null,
                        "tool_calls": [{"id": "call_Ab12Cd34Ef56Gh78Ij90Kl12", "type": "function",
                                        "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}"}}]},
            "logprobs": {"content": [{"token": "Answer", "logprob": -0.1, "bytes": [65], "top_logprobs": []}], "refusal": null},
            "finish_reason": "tool_calls"
        }],
        "usage": a_usage()
    })
}

fn b_whole() -> Value {
    json!({
        "id": "gen-b-77", "object": "chat.completion", "created": CREATED[1], "model": "vendor-b/llama",
        "provider": "Together", "prompt_logprobs": null, "kv_transfer_params": null,
        "choices": [{
            "index": 0,
            "message": {"role": "assistant",
                        "content": [{"type": "thinking", "thinking": "let me see"}, {"type": "text", "text": TEXT_B}],
                        "reasoning_content": "let me see", "reasoning": "let me see",
                        "tool_calls": [{"id": "chatcmpl-tool-9f8e7d", "type": "function", "index": 0,
                                        "function": {"name": "lookup", "arguments": "{\"q\":\"x\"}"}}]},
            "logprobs": null, "finish_reason": "stop", "native_finish_reason": "eos", "stop_reason": 128008
        }],
        "usage": b_usage()
    })
}

fn a_chunk(choice: Value) -> Value {
    json!({"id": "chatcmpl-a1", "object": "chat.completion.chunk", "created": CREATED[0],
           "model": "vendor-a-2025", "system_fingerprint": "fp_a1", "service_tier": "default",
           "obfuscation": "xYz", "choices": [choice]})
}

fn a_stream(usage: bool) -> Vec<Value> {
    let mut out = vec![
        a_chunk(
            json!({"index": 0, "delta": {"role": "assistant", "content": "", "refusal": null}, "logprobs": null, "finish_reason": null}),
        ),
        a_chunk(
            json!({"index": 0, "delta": {"content": "Answer from"}, "logprobs": {"content": []}, "finish_reason": null}),
        ),
        a_chunk(
            json!({"index": 0, "delta": {"content": " the first."}, "logprobs": {"content": []}, "finish_reason": null}),
        ),
        a_chunk(
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "id": "call_Ab12Cd34Ef56Gh78Ij90Kl12",
            "type": "function", "function": {"name": "lookup", "arguments": ""}}]}, "logprobs": null, "finish_reason": null}),
        ),
        a_chunk(
            json!({"index": 0, "delta": {"tool_calls": [{"index": 0, "function": {"arguments": "{\"q\":\"x\"}"}}]},
            "logprobs": null, "finish_reason": null}),
        ),
        a_chunk(json!({"index": 0, "delta": {}, "logprobs": null, "finish_reason": "tool_calls"})),
    ];
    if usage {
        let mut u = a_chunk(Value::Null);
        u["choices"] = json!([]);
        u["usage"] = a_usage();
        out.push(u);
    }
    out
}

fn b_chunk(choice: Value) -> Value {
    json!({"id": "gen-b-77", "object": "chat.completion.chunk", "created": CREATED[1],
           "model": "vendor-b/llama", "provider": "Together", "choices": [choice]})
}

fn b_stream(usage: bool) -> Vec<Value> {
    let mut last = b_chunk(json!({"index": 0,
        "delta": {"role": "assistant", "content": null, "reasoning_content": null,
                  "tool_calls": [{"index": 0, "id": "chatcmpl-tool-9f8e7d", "function": {"arguments": "{\"q\":\"x\"}"}}]},
        "logprobs": null, "finish_reason": "stop", "native_finish_reason": "eos", "stop_reason": 128008}));
    if usage {
        last["usage"] = b_usage();
    }
    vec![
        b_chunk(
            json!({"index": 0, "delta": {"role": "assistant", "content": null, "reasoning_content": "let me"}, "finish_reason": null}),
        ),
        b_chunk(
            json!({"index": 0, "delta": {"role": "assistant", "reasoning": " see", "reasoning_content": " see"}, "finish_reason": null}),
        ),
        b_chunk(
            json!({"index": 0, "delta": {"role": "assistant", "content": "Answer from the"}, "finish_reason": null, "stop_reason": null}),
        ),
        b_chunk(
            json!({"index": 0, "delta": {"role": "assistant", "content": " second."}, "finish_reason": null, "stop_reason": null}),
        ),
        b_chunk(
            json!({"index": 0, "delta": {"role": "assistant", "tool_calls": [{"index": 0, "id": "chatcmpl-tool-9f8e7d",
            "type": "function", "function": {"name": "lookup"}}]}, "finish_reason": null}),
        ),
        last,
    ]
}
