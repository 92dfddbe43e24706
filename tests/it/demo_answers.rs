//! What the demo (`config/demo.toml`) answers, in every dialect, whole and
//! streamed: a chain's feedback never reaches the client (the simulated
//! models echo what the client wrote, not conclave's rejection notes), and
//! every `model` of one answer is the model that answered
//! (docs/http.md, "The model an answer names").
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

#[derive(Debug, Clone, Copy, PartialEq)]
enum Dialect {
    Chat,
    Responses,
    Messages,
}

const DIALECTS: [Dialect; 3] = [Dialect::Chat, Dialect::Responses, Dialect::Messages];

async fn ask(gw: &inproc::Gw, d: Dialect, route: &str, text: &str, stream: bool) -> Resp {
    let (path, body) = match d {
        Dialect::Chat => (
            "/v1/chat/completions",
            json!({"model": route, "stream": stream,
                   "messages": [{"role": "user", "content": text}]}),
        ),
        Dialect::Responses => (
            "/v1/responses",
            json!({"model": route, "stream": stream, "input": text}),
        ),
        Dialect::Messages => (
            "/v1/messages",
            json!({"model": route, "stream": stream, "max_tokens": 256,
                   "messages": [{"role": "user", "content": text}]}),
        ),
    };
    let r = gw.post_with(path, &body, &[]).await;
    assert_eq!(r.status, 200, "{d:?} {route} stream={stream}: {}", r.text);
    r
}

/// Every JSON document of an answer: the body, or each event's data.
fn documents(r: &Resp, stream: bool) -> Vec<Value> {
    match stream {
        false => vec![r.json()],
        true => r
            .data_events()
            .iter()
            .filter(|d| d.as_str() != "[DONE]")
            .map(|d| serde_json::from_str(d).unwrap_or_else(|e| panic!("{e}: {d}")))
            .collect(),
    }
}

/// The answer's text, as a client of its dialect reads it.
fn text_of(d: Dialect, r: &Resp, stream: bool) -> String {
    let docs = documents(r, stream);
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    match (d, stream) {
        (Dialect::Chat, false) => s(&docs[0]["choices"][0]["message"]["content"]),
        (Dialect::Chat, true) => docs
            .iter()
            .map(|c| s(&c["choices"][0]["delta"]["content"]))
            .collect(),
        (Dialect::Responses, false) => s(&docs[0]["output_text"]),
        (Dialect::Responses, true) => docs
            .iter()
            .filter(|e| e["type"] == "response.output_text.delta")
            .map(|e| s(&e["delta"]))
            .collect(),
        (Dialect::Messages, false) => docs[0]["content"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| s(&b["text"]))
            .collect(),
        (Dialect::Messages, true) => docs
            .iter()
            .filter(|e| e["type"] == "content_block_delta")
            .map(|e| s(&e["delta"]["text"]))
            .collect(),
    }
}

/// Every value of a `model` key, at any depth.
fn models(v: &Value, out: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                match (k.as_str(), x) {
                    ("model", Value::String(s)) => out.push(s.clone()),
                    _ => models(x, out),
                }
            }
        }
        Value::Array(xs) => xs.iter().for_each(|x| models(x, out)),
        _ => {}
    }
}

#[tokio::test(start_paused = true)]
async fn the_demo_chains_never_echo_their_feedback() {
    let gw = inproc::Gw::demo();
    // The draft is rejected ("This is only a draft; answer completely.")
    // and the next tier answers; that tier echoes the user's message.
    let cases = [
        ("claude-review", "sonnet", "Claude's answer: hi"),
        (
            "review",
            "gemma-large",
            "A careful, complete answer from the large local model.",
        ),
    ];
    for (route, by, want) in cases {
        for d in DIALECTS {
            for stream in [false, true] {
                let r = ask(&gw, d, route, "hi", stream).await;
                let tag = format!("{route} {d:?} stream={stream}");
                if let Some(served) = r.header("x-conclave-served-by") {
                    assert_eq!(served, by, "{tag}");
                }
                assert_eq!(text_of(d, &r, stream), want, "{tag}: {}", r.text);
                for leak in ["rejected", "draft;", "completely."] {
                    assert!(!r.text.contains(leak), "{tag}: {leak} in {}", r.text);
                }
            }
        }
    }
    // The escalation happened: the tier after the draft was sent the note.
    let asked = gw.asked("claude", "claude-sim");
    assert!(
        asked
            .iter()
            .any(|a| a.to_string().contains("A previous attempt was rejected")),
        "{asked:?}"
    );
}

#[tokio::test(start_paused = true)]
async fn every_model_of_an_answer_is_the_model_that_answered() {
    let gw = inproc::Gw::demo();
    // Route → the answering model's own name (its upstream's): neither
    // the route nor conclave's name for the model.
    let cases = [
        ("fast", "qwen-small"),
        ("review", "gemma-large"),
        ("failover", "frontier-sim"),
        ("council", "frontier-sim"),
        ("claude-review", "claude-sim"),
        ("claude", "claude-sim"),
    ];
    for (route, want) in cases {
        for d in DIALECTS {
            for stream in [false, true] {
                let r = ask(&gw, d, route, "hello", stream).await;
                let tag = format!("{route} {d:?} stream={stream}");
                let mut seen = Vec::new();
                for doc in documents(&r, stream) {
                    models(&doc, &mut seen);
                }
                // A Responses stream names it in created, in_progress and
                // completed; a chat stream in every chunk.
                let least = match (d, stream) {
                    (Dialect::Responses, true) => 3,
                    (Dialect::Chat, true) => 2,
                    _ => 1,
                };
                assert!(seen.len() >= least, "{tag}: {seen:?} in {}", r.text);
                assert!(seen.iter().all(|m| m == want), "{tag}: {seen:?}");
                assert_eq!(r.header("x-conclave-route"), Some(route), "{tag}");
            }
        }
    }
}

const SLOW: &str = r#"
[server]
sse_keepalive = "1s"

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.slow-sim]
reply = { text = "Worth the wait." }
ttft = "3s"

[models.slow]
upstream = "sim"
model = "slow-sim"

[routes.wait]
strategy = "chain"
tiers = ["slow"]
"#;

/// A stream that keep-alives commit before any model answered: the
/// Responses API's opening still names the model that answered (it waits
/// for the first chunk behind SSE comments); the Messages API's must come
/// before its first `ping`, so it names the model asked for.
#[tokio::test(start_paused = true)]
async fn a_stream_kept_alive_names_the_model_as_its_dialect_can() {
    let gw = inproc::Gw::start(SLOW);
    let r = ask(&gw, Dialect::Responses, "wait", "hi", true).await;
    let created = r.text.find("event: response.created").unwrap();
    let kept = r.text.find(": keep-alive").expect("keep-alives");
    assert!(kept < created, "{}", r.text);
    let mut seen = Vec::new();
    for doc in documents(&r, true) {
        models(&doc, &mut seen);
    }
    assert_eq!(seen, ["slow-sim"; 3], "{}", r.text);

    let r = ask(&gw, Dialect::Messages, "wait", "hi", true).await;
    let docs = documents(&r, true);
    assert_eq!(docs[0]["type"], "message_start", "{}", r.text);
    assert_eq!(docs[0]["message"]["model"], "wait");
    assert_eq!(docs[1]["type"], "ping", "{}", r.text);
    assert_eq!(text_of(Dialect::Messages, &r, true), "Worth the wait.");
}
