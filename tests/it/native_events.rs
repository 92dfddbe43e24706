//! Native relays (a Responses upstream with `responses = true` on
//! `/v1/responses`, an Anthropic upstream on `/v1/messages`, both over
//! HTTP) write an event under the upstream's `type` only when it is an
//! event name (`[a-z_.]`, at most 64 characters). An upstream whose `type`
//! holds a line break and a forged event, its key spelt in `\u` escapes,
//! or a name too long gets nothing through from that event on: the stream
//! ends with the dialect's error event. Data an upstream spreads over
//! several `data:` lines reaches the client on one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use axum::http::HeaderMap;
use axum::response::IntoResponse;
use common::evil::leaks;
use common::inproc::Gw;
use serde_json::{Value, json};

const OAI_KEY: &str = "sk-proj-T3stq7Zr9XwP2mVt4LbN8cJdWx";
const ANT_KEY: &str = "sk-ant-api03-Zq7Xr9WpT2mVt4LbN8cJdK";

/// `s` as a JSON string with every character a `\u` escape.
fn escaped(s: &str) -> String {
    let inner: String = s.chars().map(|c| format!("\\u{:04x}", c as u32)).collect();
    format!("\"{inner}\"")
}

/// The bad `type` (as JSON) that `fault` stands for, with the key sent.
fn bad_type(fault: &str, key: &str, forged: &Value) -> String {
    match fault {
        "forge" => Value::from(format!(
            "x\n\nevent: {}\ndata: {forged}",
            forged["type"].as_str().unwrap()
        ))
        .to_string(),
        "escaped-key" => escaped(key),
        "long" => Value::from("a".repeat(65)).to_string(),
        "upper" => Value::from("Response.Output_Text.Delta").to_string(),
        other => panic!("{other}"),
    }
}

/// One SSE event, its data lines as given.
fn event(name: &str, data_lines: &[&str]) -> String {
    let mut out = format!("event: {name}\n");
    for l in data_lines {
        out.push_str(&format!("data: {l}\n"));
    }
    out.push('\n');
    out
}

/// A Responses and Messages server whose streams go wrong as `model`
/// says: `<fault>` (an event with a bad `type` after a first delta), or
/// `two-lines` (a delta whose data spans two lines), else a clean stream.
async fn upstream() -> String {
    async fn responses(headers: HeaderMap, body: axum::body::Bytes) -> axum::response::Response {
        let key = headers
            .get("authorization")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim_start_matches("Bearer ")
            .to_owned();
        let req: Value = serde_json::from_slice(&body).unwrap_or_default();
        let model = req["model"].as_str().unwrap_or("").to_owned();
        let resp = |status: &str| {
            json!({"id": "resp_1", "object": "response", "status": status, "model": model, "output": [],
                   "usage": {"input_tokens": 3, "output_tokens": 2, "total_tokens": 5}})
        };
        let delta = |seq: u64, text: &str| {
            json!({"type": "response.output_text.delta", "sequence_number": seq, "item_id": "msg_1",
                   "output_index": 0, "content_index": 0, "delta": text})
            .to_string()
        };
        let mut out = event(
            "response.created",
            &[&json!({"type": "response.created", "sequence_number": 0, "response": resp("in_progress")}).to_string()],
        );
        out.push_str(&event("response.output_text.delta", &[&delta(1, "hi")]));
        match model.as_str() {
            "two-lines" => out.push_str(&event(
                "response.output_text.delta",
                &[
                    r#"{"type": "response.output_text.delta","#,
                    r#" "sequence_number": 2, "delta": " there"}"#,
                ],
            )),
            "clean" => {}
            fault => {
                let forged = json!({"type": "response.output_text.delta", "sequence_number": 2, "delta": "FORGED"});
                let t = bad_type(fault, &key, &forged);
                out.push_str(&event(
                    "x",
                    &[&format!(
                        r#"{{"type":{t},"sequence_number":2,"delta":"after"}}"#
                    )],
                ));
                out.push_str(&event("response.output_text.delta", &[&delta(3, "LATER")]));
            }
        }
        out.push_str(&event(
            "response.completed",
            &[&json!({"type": "response.completed", "sequence_number": 9, "response": resp("completed")}).to_string()],
        ));
        ([("content-type", "text/event-stream")], out).into_response()
    }
    async fn messages(headers: HeaderMap, body: axum::body::Bytes) -> axum::response::Response {
        let key = headers
            .get("x-api-key")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        let req: Value = serde_json::from_slice(&body).unwrap_or_default();
        let model = req["model"].as_str().unwrap_or("").to_owned();
        let delta = |text: &str| {
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": text}})
                .to_string()
        };
        let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": model, "content": [], "stop_reason": null,
            "usage": {"input_tokens": 5, "output_tokens": 1}}});
        let mut out = event("message_start", &[&start.to_string()]);
        out.push_str(&event(
            "content_block_start",
            &[&json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}).to_string()],
        ));
        out.push_str(&event("content_block_delta", &[&delta("hi")]));
        match model.as_str() {
            "two-lines" => out.push_str(&event(
                "content_block_delta",
                &[
                    r#"{"type": "content_block_delta", "index": 0,"#,
                    r#" "delta": {"type": "text_delta", "text": " there"}}"#,
                ],
            )),
            "clean" => {}
            fault => {
                let forged = json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "FORGED"}});
                let t = bad_type(fault, &key, &forged);
                out.push_str(&event(
                    "x",
                    &[&format!(
                        r#"{{"type":{t},"index":0,"delta":{{"type":"text_delta","text":"after"}}}}"#
                    )],
                ));
                out.push_str(&event("content_block_delta", &[&delta("LATER")]));
            }
        }
        for e in [
            json!({"type": "content_block_stop", "index": 0}),
            json!({"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}}),
            json!({"type": "message_stop"}),
        ] {
            out.push_str(&event(e["type"].as_str().unwrap(), &[&e.to_string()]));
        }
        ([("content-type", "text/event-stream")], out).into_response()
    }
    let app = axum::Router::new()
        .route("/v1/responses", axum::routing::post(responses))
        .route("/v1/messages", axum::routing::post(messages));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}")
}

const MODELS: [&str; 6] = [
    "clean",
    "two-lines",
    "forge",
    "escaped-key",
    "long",
    "upper",
];

fn gateway(base: &str) -> Gw {
    let mut toml = format!(
        "[upstreams.oai]\nkind = \"openai\"\nbase_url = \"{base}/v1\"\napi_key_env = \"OAI_KEY\"\nresponses = true\n\
         [upstreams.ant]\nkind = \"anthropic\"\nbase_url = \"{base}\"\napi_key_env = \"ANT_KEY\"\n"
    );
    for m in MODELS {
        toml.push_str(&format!(
            "[models.oai-{m}]\nupstream = \"oai\"\nmodel = \"{m}\"\n[models.ant-{m}]\nupstream = \"ant\"\nmodel = \"{m}\"\n"
        ));
    }
    Gw::start_with(
        &toml,
        &[("OAI_KEY", OAI_KEY), ("ANT_KEY", ANT_KEY)],
        std::time::SystemTime::now(),
    )
}

/// The events of an SSE body as a client reads them: (name, data), each
/// data line of an event joined by `\n`; comments skipped.
fn client_events(text: &str) -> Vec<(String, String)> {
    text.split("\n\n")
        .filter(|ev| ev.lines().any(|l| !l.starts_with(':') && !l.is_empty()))
        .map(|ev| {
            let name = ev
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or("message");
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            (name.to_owned(), data.join("\n"))
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_event_names_are_written_and_a_bad_one_ends_the_stream() {
    let base = upstream().await;
    let gw = gateway(&base);
    for (path, dialect, key) in [
        ("/v1/responses", "oai", OAI_KEY),
        ("/v1/messages", "ant", ANT_KEY),
    ] {
        for m in MODELS {
            let tag = format!("{path} {m}");
            let model = format!("{dialect}-{m}");
            let body = match dialect {
                "oai" => json!({"model": model, "stream": true, "store": false, "input": "hi"}),
                _ => json!({"model": model, "stream": true, "max_tokens": 64,
                            "messages": [{"role": "user", "content": "hi"}]}),
            };
            let r = gw.post_with(path, &body, &[]).await;
            assert_eq!(r.status, 200, "{tag}: {}", r.text);
            let evs = client_events(&r.text);
            // Every event: a name of [a-z_.], its data one JSON line whose
            // `type` is that name.
            for (name, data) in &evs {
                assert!(
                    !name.is_empty()
                        && name
                            .bytes()
                            .all(|b| b.is_ascii_lowercase() || b == b'_' || b == b'.'),
                    "{tag}: event {name:?} in {}",
                    r.text
                );
                assert!(!data.contains('\n'), "{tag}: data over lines: {}", r.text);
                let v: Value =
                    serde_json::from_str(data).unwrap_or_else(|e| panic!("{tag}: {e}: {data}"));
                assert_eq!(v["type"], name.as_str(), "{tag}: {}", r.text);
            }
            let names: Vec<&str> = evs.iter().map(|e| e.0.as_str()).collect();
            let said: String = evs
                .iter()
                .filter_map(|(_, d)| {
                    let v: Value = serde_json::from_str(d).ok()?;
                    let d = &v["delta"];
                    d.as_str().or(d["text"].as_str()).map(str::to_owned)
                })
                .collect();
            assert!(!leaks(&r.text, key), "{tag}: {}", r.text);
            match m {
                "clean" | "two-lines" => {
                    let end = if dialect == "oai" {
                        "response.completed"
                    } else {
                        "message_stop"
                    };
                    assert_eq!(names.last(), Some(&end), "{tag}: {}", r.text);
                    let want = if m == "clean" { "hi" } else { "hi there" };
                    assert_eq!(said, want, "{tag}: {}", r.text);
                }
                _ => {
                    // The stream ends at the bad event, with the error.
                    assert_eq!(names.last(), Some(&"error"), "{tag}: {}", r.text);
                    assert_eq!(said, "hi", "{tag}: {}", r.text);
                    for word in ["FORGED", "after", "LATER"] {
                        assert!(!r.text.contains(word), "{tag}: {}", r.text);
                    }
                    let err: Value = serde_json::from_str(&evs.last().unwrap().1).unwrap();
                    let message = match dialect {
                        "oai" => {
                            assert_eq!(err["code"], "upstream_invalid_response", "{tag}: {err}");
                            err["message"].as_str().unwrap().to_owned()
                        }
                        _ => {
                            assert!(err["error"]["type"].is_string(), "{tag}: {err}");
                            err["error"]["message"].as_str().unwrap().to_owned()
                        }
                    };
                    assert!(message.contains("sent an invalid response"), "{tag}: {err}");
                }
            }
        }
    }
}
