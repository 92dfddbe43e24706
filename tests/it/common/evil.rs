//! A hostile OpenAI-compatible upstream for black-box tests, run in the
//! test process on 127.0.0.1:0. The request's `model` picks its fault; the
//! failure messages quote the `Authorization` header it received, so a
//! test can prove the gateway's key never travels any further. The
//! [`ECHOES`] quote it in the disguises a redactor must see through, and
//! in 200 answers that echo the request's headers.
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

use super::Served;

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

/// Faults that quote the key received in a disguise, by model name.
pub const ECHOES: &[&str] = &[
    "echo-upper-500",
    "echo-suffix-500",
    "echo-middle-500",
    "echo-base64-500",
    "echo-wrapped-500",
    "echo-upper-error-event",
    "echo-retry-after",
    "echo-headers",
];

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Want {
    /// An HTTP error before any byte of an answer: status and `code`
    /// (`None`: the upstream's own code, redacted, is passed on).
    Http(u16, Option<&'static str>),
    /// 200, some chunks, then one SSE error event with this code.
    Event(&'static str),
    /// An answer, from the fault model itself or (chains) from `ok`.
    Answer,
}

/// What a client sees for `fault` through a passthrough route.
pub fn direct(fault: &str, stream: bool) -> Want {
    use Want::*;
    match fault {
        "echo-500" | "echo-error-body" => Http(502, Some("upstream_error")),
        "echo-400" => Http(400, None),
        "echo-413" => Http(413, None),
        "echo-422" => Http(422, None),
        "echo-429" => Http(429, Some("rate_limit_exceeded")),
        "echo-401" | "echo-403" => Http(502, Some("upstream_auth_failed")),
        "hang" => Http(504, Some("upstream_timeout")),
        "trickle-forever" | "stall-after-first" if stream => Event("upstream_timeout"),
        "trickle-forever" | "stall-after-first" => Http(504, Some("upstream_timeout")),
        "huge-tool-index" => Answer,
        // `[DONE]` before any answer: a cut (retried), not an answer.
        "done-first" if stream => Http(502, Some("upstream_stream_cut")),
        _ => Http(502, Some("upstream_invalid_response")),
    }
}

/// What a client sees through a fallback chain `[fault, ok]`: plain 4xx
/// come straight back, a stream that already started stays with its tier,
/// everything else falls over to `ok`.
pub fn chained(fault: &str, stream: bool) -> Want {
    match direct(fault, stream) {
        w @ (Want::Http(400 | 413 | 422, _) | Want::Event(_)) => w,
        _ => Want::Answer,
    }
}

/// What `r` (an answer to a `stream`ed or whole request) lacks of
/// `want`; `None` when it is what was wanted.
pub fn unmet(r: &super::Resp, want: Want, stream: bool) -> Option<String> {
    match want {
        Want::Http(status, code) => {
            let v: Value = serde_json::from_str(&r.text).unwrap_or(Value::Null);
            let got_code = v["error"]["code"].as_str();
            if r.status != status || v["error"]["message"].as_str().is_none() {
                return Some(format!("want HTTP {status} with an OpenAI error body"));
            }
            match code {
                Some(code) if got_code != Some(code) => Some(format!("want code {code}")),
                _ => None,
            }
        }
        Want::Event(code) => {
            let ev = r.data_events();
            let last: Value = ev
                .last()
                .and_then(|e| serde_json::from_str(e).ok())
                .unwrap_or(Value::Null);
            let ok = r.status == 200
                && ev.len() >= 2
                && last["error"]["code"] == code
                && !r.text.contains("[DONE]");
            (!ok).then(|| format!("want 200, chunks, then one error event {code} and no [DONE]"))
        }
        Want::Answer => {
            let ok = if stream {
                r.status == 200 && r.text.contains("data: [DONE]") && !r.text.contains("\"error\"")
            } else {
                r.status == 200 && r.json()["choices"].is_array()
            };
            (!ok).then(|| "want an answer".to_owned())
        }
    }
}

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
    if let Some(r) = disguised(&model, stream, &headers, &auth) {
        return r;
    }
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

/// `text` wrapped every `width` characters, each new line indented.
fn wrap(text: &str, width: usize) -> String {
    let chars: Vec<char> = text.chars().collect();
    let lines: Vec<String> = chars.chunks(width).map(|c| c.iter().collect()).collect();
    lines.join("\n  ")
}

/// The [`ECHOES`]: `auth` is the `Authorization` header received.
fn disguised(model: &str, stream: bool, headers: &HeaderMap, auth: &str) -> Option<Response> {
    use base64::Engine as _;
    let key = auth.trim_start_matches("Bearer ");
    let message = match model {
        "echo-upper-500" | "echo-upper-error-event" => {
            format!("AUTHORIZATION: {}", auth.to_uppercase())
        }
        "echo-suffix-500" => format!("key ending in …{}", &key[key.len().min(8)..]),
        "echo-middle-500" => format!(
            "key …{}…",
            &key[4.min(key.len())..key.len().saturating_sub(4)]
        ),
        "echo-base64-500" => {
            let b = base64::engine::general_purpose::STANDARD;
            format!(
                "basic {} / {}",
                b.encode(auth),
                b.encode(format!("user:{key}"))
            )
        }
        "echo-wrapped-500" => format!("you sent:\n{}", wrap(auth, 6)),
        // No key: text that would forge a log line of its own.
        "multiline-500" => {
            "upstream broke:\n2099-01-01T00:00:00Z  INFO conclave: FORGED\r\nthe end".into()
        }
        _ => String::new(),
    };
    Some(match model {
        "echo-upper-error-event" if stream => raw(
            200,
            "text/event-stream",
            sse(
                vec![
                    chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                    chunk(json!({"content": "about to fail"}), Value::Null),
                    Bytes::from(format!(
                        "data: {}\n\n",
                        json!({"error": {"message": message}})
                    )),
                ],
                false,
            ),
        ),
        "echo-upper-error-event" => json_response(200, json!({"error": {"message": message}})),
        m if m.ends_with("-500") => json_response(
            500,
            json!({"error": {"message": message, "type": "x", "code": message}}),
        ),
        "echo-retry-after" => Response::builder()
            .status(429)
            .header(header::CONTENT_TYPE, "application/json")
            .header(header::RETRY_AFTER, auth.to_uppercase())
            .body(Body::from(
                json!({"error": {"message": "slow down"}}).to_string(),
            ))
            .unwrap(),
        "echo-headers" => {
            // A debugging proxy's answer: every request header, in every
            // disguise, as the answer text.
            let mut dump = String::new();
            for (name, value) in headers {
                dump.push_str(&format!("{name}: {}\n", value.to_str().unwrap_or("")));
            }
            let b = base64::engine::general_purpose::STANDARD;
            dump.push_str(&format!(
                "upper: {}\nbase64: {}\nwrapped: {}\n",
                auth.to_uppercase(),
                b.encode(auth),
                wrap(auth, 6)
            ));
            let echoed = |r: Response| {
                let (mut parts, body) = r.into_parts();
                if let Ok(v) = header::HeaderValue::from_str(auth) {
                    parts.headers.insert("x-echo-authorization", v);
                }
                Response::from_parts(parts, body)
            };
            if !stream {
                return Some(echoed(json_response(200, completion(&dump))));
            }
            // Whole in one event, then again a few characters per event.
            let mut events = vec![
                chunk(json!({"role": "assistant", "content": ""}), Value::Null),
                chunk(json!({"content": dump}), Value::Null),
            ];
            let chars: Vec<char> = dump.chars().collect();
            for piece in chars.chunks(3) {
                let piece: String = piece.iter().collect();
                events.push(chunk(json!({"content": piece}), Value::Null));
            }
            events.push(chunk(json!({}), json!("stop")));
            events.push(Bytes::from("data: [DONE]\n\n"));
            echoed(raw(200, "text/event-stream", sse(events, false)))
        }
        _ => return None,
    })
}

/// Whether `text` holds 8 characters in a row of `key` in any disguise:
/// any letter case, wrapped over lines (raw or JSON-escaped line breaks,
/// indentation), or base64 of any string holding the key (either
/// alphabet, any alignment).
pub fn leaks(text: &str, key: &str) -> bool {
    leak(text, key).is_some()
}

/// The first piece of `key` that [`leaks`] finds in `text`.
pub fn leak(text: &str, key: &str) -> Option<String> {
    leak_run(text, key, 8, 8)
}

/// The first run of `w` characters of `key`, or of `w64` of a base64 form
/// of it, in `text` (as [`leaks`] reads it).
pub fn leak_run(text: &str, key: &str, w: usize, w64: usize) -> Option<String> {
    use base64::Engine as _;
    use base64::engine::general_purpose::{STANDARD_NO_PAD, URL_SAFE_NO_PAD};
    let flat: String = text
        .replace("\\n", "\n")
        .replace("\\r", "\r")
        .lines()
        .map(|l| l.trim_start_matches([' ', '\t']).trim_end_matches('\r'))
        .collect();
    let lower = flat.to_ascii_lowercase();
    let windows = |s: &str, w: usize| -> Vec<String> {
        (0..=s.len().saturating_sub(w))
            .map(|i| s[i..(i + w).min(s.len())].to_owned())
            .collect()
    };
    let plain = windows(&key.to_ascii_lowercase(), w);
    if let Some(w) = plain.into_iter().find(|w| lower.contains(w.as_str())) {
        return Some(w);
    }
    (0..3).find_map(|skip| {
        let rest = &key.as_bytes()[skip.min(key.len())..];
        let whole = &rest[..rest.len() / 3 * 3];
        [STANDARD_NO_PAD.encode(whole), URL_SAFE_NO_PAD.encode(whole)]
            .iter()
            .filter(|enc| enc.len() >= w64)
            .find_map(|enc| {
                windows(enc, w64)
                    .into_iter()
                    .find(|w| flat.contains(w.as_str()))
            })
    })
}

/// What a fault matrix run through `gw` left behind: requests still in
/// flight, file descriptors past `bound` (the gateway may keep one pooled
/// upstream connection per case that was in flight), and `key` in the
/// event log or on stderr. Empty when nothing was.
pub async fn left_behind(gw: &super::Proc, bound: usize, key: &str) -> Vec<String> {
    let mut errs = Vec::new();
    let settled = super::eventually(10, || async {
        let m = gw.metrics().await;
        super::samples(&m, "conclave_inflight_requests", &[])
            .iter()
            .all(|v| *v == 0.0)
    })
    .await;
    if !settled {
        errs.push("requests still in flight after the matrix".into());
    }
    if !super::eventually(10, || async { gw.open_fds() <= bound }).await {
        errs.push(format!(
            "open file descriptors grew to {} (bound {bound})",
            gw.open_fds()
        ));
    }
    let log = std::fs::read_to_string(gw.path("events.jsonl")).unwrap_or_default();
    if leaks(&log, key) {
        errs.push("the upstream's key is in the event log".into());
    }
    if leaks(&gw.stderr(), key) {
        errs.push("the upstream's key is on stderr".into());
    }
    errs
}
