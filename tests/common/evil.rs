//! A hostile OpenAI-compatible upstream for black-box tests, run in the
//! test process on 127.0.0.1:0. The request's `model` picks its fault; the
//! failure messages quote the `Authorization` header it received, so a
//! test can prove the gateway's key never travels any further.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::convert::Infallible;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::http::{HeaderMap, header};
use axum::response::Response;
use axum::routing::post;
use futures::StreamExt;
use serde_json::{Value, json};
use tokio::net::TcpListener;

/// Every fault the evil upstream plays, by model name.
pub const FAULTS: &[&str] = &[
    "echo-500",
    "echo-400",
    "echo-413",
    "echo-422",
    "echo-429",
    "echo-401",
    "echo-403",
    "echo-error-body",
    "echo-garbage",
    "echo-bad-type",
    "empty-object",
    "empty-array",
    "bad-utf8",
    "done-first",
    "no-newline",
    "hang",
    "trickle-forever",
    "stall-after-first",
    "huge-tool-index",
];

/// Starts the evil upstream; returns its `…/v1` base URL.
pub async fn start() -> String {
    let app = Router::new().route("/v1/chat/completions", post(chat));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    format!("http://{addr}/v1")
}

fn json_response(status: u16, body: Value) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .header(header::RETRY_AFTER, "1")
        .body(Body::from(body.to_string()))
        .unwrap()
}

fn raw(status: u16, content_type: &str, body: Body) -> Response {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, content_type)
        .body(body)
        .unwrap()
}

fn sse(events: Vec<Bytes>, then_hang: bool) -> Body {
    let s = futures::stream::iter(events.into_iter().map(Ok::<_, Infallible>));
    if then_hang {
        Body::from_stream(s.chain(futures::stream::pending()))
    } else {
        Body::from_stream(s)
    }
}

fn chunk(delta: Value, finish: Value) -> Bytes {
    let c = json!({"id": "evil-1", "object": "chat.completion.chunk", "created": 1, "model": "evil",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
    Bytes::from(format!("data: {c}\n\n"))
}

fn completion(text: &str) -> Value {
    json!({"id": "evil-1", "object": "chat.completion", "created": 1, "model": "evil",
           "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
           "usage": {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5}})
}

async fn chat(headers: HeaderMap, body: Bytes) -> Response {
    let req: Value = serde_json::from_slice(&body).unwrap_or(Value::Null);
    let model = req["model"].as_str().unwrap_or("").to_owned();
    let stream = req["stream"].as_bool().unwrap_or(false);
    let auth = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    let echo = format!(
        "you sent Authorization: {auth} (key {})",
        auth.trim_start_matches("Bearer ")
    );
    let status_echo = |status: u16| {
        json_response(
            status,
            json!({"error": {"message": echo, "type": "x", "code": auth}}),
        )
    };
    match model.as_str() {
        "echo-500" => status_echo(500),
        "echo-400" => status_echo(400),
        "echo-413" => status_echo(413),
        "echo-422" => status_echo(422),
        "echo-429" => status_echo(429),
        "echo-401" => json_response(
            401,
            json!({"error": {"message": format!("Incorrect API key provided: {}", auth.trim_start_matches("Bearer ")), "code": "invalid_api_key"}}),
        ),
        "echo-403" => status_echo(403),
        "echo-error-body" if stream => raw(
            200,
            "text/event-stream",
            sse(
                vec![Bytes::from(format!(
                    "data: {}\n\n",
                    json!({"error": {"message": echo}})
                ))],
                false,
            ),
        ),
        "echo-error-body" => json_response(200, json!({"error": {"message": echo}})),
        "echo-garbage" if stream => raw(
            200,
            "text/event-stream",
            sse(
                vec![Bytes::from(format!("data: <html>{echo}</html>\n\n"))],
                false,
            ),
        ),
        "echo-garbage" => raw(200, "text/html", Body::from(format!("<html>{echo}</html>"))),
        "echo-bad-type" if stream => raw(
            200,
            "text/event-stream",
            sse(
                vec![Bytes::from(format!(
                    "data: {}\n\n",
                    json!({"choices": auth})
                ))],
                false,
            ),
        ),
        "echo-bad-type" => json_response(200, json!({"choices": auth})),
        "empty-object" if stream => raw(
            200,
            "text/event-stream",
            sse(vec![Bytes::from("data: {}\n\n")], false),
        ),
        "empty-object" => json_response(200, json!({})),
        "empty-array" if stream => raw(
            200,
            "text/event-stream",
            sse(vec![Bytes::from("data: []\n\n")], false),
        ),
        "empty-array" => json_response(200, json!([])),
        "bad-utf8" => {
            let mut b =
                br#"{"choices":[{"index":0,"message":{"role":"assistant","content":"bad "#.to_vec();
            b.extend_from_slice(&[0xff, 0xfe]);
            b.extend_from_slice(br#""},"finish_reason":"stop"}]}"#);
            if stream {
                let mut ev = b"data: ".to_vec();
                ev.extend_from_slice(&b);
                ev.extend_from_slice(b"\n\n");
                raw(200, "text/event-stream", sse(vec![Bytes::from(ev)], false))
            } else {
                raw(200, "application/json", Body::from(b))
            }
        }
        "done-first" if stream => raw(
            200,
            "text/event-stream",
            sse(vec![Bytes::from("data: [DONE]\n\n")], false),
        ),
        "done-first" => json_response(200, json!({"choices": []})),
        "no-newline" => {
            // 100 MB without a line end (or a JSON end), as fast as it goes.
            let block = Bytes::from(vec![b'x'; 1 << 20]);
            let head = if stream {
                Bytes::from("data: ")
            } else {
                Bytes::from("{\"choices\":\"")
            };
            let s = futures::stream::once(async move { head })
                .chain(futures::stream::iter((0..100).map(move |_| block.clone())))
                .map(Ok::<_, Infallible>);
            raw(
                200,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
                Body::from_stream(s),
            )
        }
        "hang" => std::future::pending().await,
        "trickle-forever" => {
            // Never pauses long and never ends: only a deadline stops it.
            let piece = if stream {
                chunk(json!({"content": "x"}), Value::Null)
            } else {
                Bytes::from_static(b" ")
            };
            let head = if stream {
                chunk(json!({"role": "assistant", "content": ""}), Value::Null)
            } else {
                Bytes::from("{")
            };
            let s = futures::stream::once(async move { head })
                .chain(futures::stream::unfold(piece, |p| async move {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                    Some((p.clone(), p))
                }))
                .map(Ok::<_, Infallible>);
            raw(
                200,
                if stream {
                    "text/event-stream"
                } else {
                    "application/json"
                },
                Body::from_stream(s),
            )
        }
        "stall-after-first" if stream => raw(
            200,
            "text/event-stream",
            sse(
                vec![
                    chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                    chunk(json!({"content": "half an"}), Value::Null),
                ],
                true,
            ),
        ),
        "stall-after-first" => raw(
            200,
            "application/json",
            sse(
                vec![Bytes::from(
                    r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"half"#,
                )],
                true,
            ),
        ),
        "huge-tool-index" if stream => raw(
            200,
            "text/event-stream",
            sse(
                vec![
                    chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                    chunk(
                        json!({"tool_calls": [{"index": 4_000_000_000u64, "id": "c", "type": "function", "function": {"name": "f", "arguments": "{}"}}]}),
                        Value::Null,
                    ),
                    chunk(json!({}), json!("tool_calls")),
                    Bytes::from("data: [DONE]\n\n"),
                ],
                false,
            ),
        ),
        "huge-tool-index" => {
            let calls: Vec<Value> = (0..5000)
                .map(|i| json!({"id": format!("c{i}"), "type": "function", "function": {"name": "f", "arguments": "{}"}}))
                .collect();
            json_response(
                200,
                json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": calls}, "finish_reason": "tool_calls"}]}),
            )
        }
        _ if stream => raw(
            200,
            "text/event-stream",
            sse(
                vec![
                    chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                    chunk(json!({"content": "all good"}), Value::Null),
                    chunk(json!({}), json!("stop")),
                    Bytes::from("data: [DONE]\n\n"),
                ],
                false,
            ),
        ),
        _ => json_response(200, completion("all good")),
    }
}

/// Whether `text` holds the key, or any 8-character piece of its start.
pub fn leaks(text: &str, key: &str) -> bool {
    text.contains(&key[..8.min(key.len())])
}
