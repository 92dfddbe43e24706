//! The upstream's key never comes back, in any disguise: upper-cased, a
//! suffix or a middle part of it (two-thirds of it or more), base64 of
//! `Bearer <key>`, wrapped over lines, in an error or in a 200 answer
//! (whole or streamed, a few characters per event: less than two-thirds of
//! it goes out before the run counts) that echoes the request's headers.
//! A key made of words alters no answer that holds its words. Checked in
//! what the client gets (body, headers, the text a stream spells out),
//! the event log and stderr. And upstream text with line breaks stays on
//! one stderr line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::evil::{self, ECHOES, leak, leak_run, leaks};
use common::world::streamed_text;
use common::*;

/// Random past its prefix, as real keys are (a word in it, like the
/// product's name, would also be found in innocent text).
const KEY: &str = "sk-T3st-SECRET-q7Zr9XwP2mVt4LbN8cJd";

fn config(evil_v1: &str) -> String {
    let mut t = format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"
request_timeout = "10s"

[upstreams.evil]
kind = "openai"
eject = false
base_url = "{evil_v1}"
api_key_env = "EVIL_KEY"
timeout = "5s"
"#
    );
    for m in ECHOES.iter().chain(&["multiline-500"]) {
        t.push_str(&format!("\n[models.{m}]\nupstream = \"evil\"\n"));
    }
    t
}

/// What the client must get for each echo (the key aside).
fn status(fault: &str, stream: bool) -> u16 {
    match fault {
        "echo-headers" => 200,
        "echo-upper-error-event" if stream => 200,
        "echo-retry-after" => 429,
        _ => 502,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_disguise_of_the_key_gets_through() {
    let evil_v1 = evil::start().await;
    let gw = Proc::gateway_env(&config(&evil_v1), &[("EVIL_KEY", KEY)]);
    let http = client();
    let mut errs = Vec::new();
    let mut n = 0;
    for &fault in ECHOES {
        for stream in [false, true] {
            n += 1;
            let body = if stream {
                chat_stream(fault, "hi")
            } else {
                chat(fault, "hi")
            };
            let r = post_via(&http, &gw.base, body.to_string(), &[]).await;
            let tag = format!("{fault} {}", if stream { "streamed" } else { "whole" });
            if r.status != status(fault, stream) {
                errs.push(format!("{tag}: HTTP {}: {}", r.status, r.text));
            }
            if leaks(&r.text, KEY) {
                errs.push(format!("{tag}: the key is in the body: {}", r.text));
            }
            // Spelt a few characters an event, less than two-thirds of
            // each disguise goes out before its run counts (24 of the
            // key's 35 characters, 32 of its base64), and no more after.
            let spelt = streamed_text(&r.data_events());
            if let Some(run) = leak_run(&spelt, KEY, 24, 32) {
                errs.push(format!("{tag}: the streamed text spells {run}: {spelt}"));
            }
            for (name, value) in &r.headers {
                if leaks(&String::from_utf8_lossy(value.as_bytes()), KEY) {
                    errs.push(format!("{tag}: the key is in header {name}"));
                }
            }
            if fault == "echo-headers" {
                // The answer itself still goes out, the key cut from it.
                let text = if stream {
                    spelt
                } else {
                    r.json()["choices"][0]["message"]["content"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned()
                };
                if !text.contains("authorization: Bearer [REDACTED]") {
                    errs.push(format!("{tag}: the echoed answer is not there: {text}"));
                }
            }
        }
    }
    // One attempt event per request, then the log is complete.
    gw.events_of(&["attempt"], n).await;
    let log = std::fs::read_to_string(gw.path("events.jsonl")).unwrap();
    if let Some(piece) = leak(&log, KEY) {
        errs.push(format!("the key ({piece}) is in the event log:\n{log}"));
    }
    let stderr = gw.stderr();
    if let Some(piece) = leak(&stderr, KEY) {
        errs.push(format!("the key ({piece}) is on stderr:\n{stderr}"));
    }
    assert!(
        errs.is_empty(),
        "{} problems:\n{}",
        errs.len(),
        errs.join("\n")
    );
}

#[tokio::test]
async fn upstream_line_breaks_do_not_split_log_lines() {
    let evil_v1 = evil::start().await;
    let gw = Proc::gateway_env(&config(&evil_v1), &[("EVIL_KEY", KEY)]);
    for body in [
        chat("multiline-500", "hi"),
        chat_stream("multiline-500", "hi"),
    ] {
        let r = post(&gw.base, &body).await;
        assert_eq!(r.status, 502, "{}", r.text);
        // The client gets a short message; the upstream's 5xx text is
        // for the log (issue 23, item 6).
        assert_eq!(
            r.json()["error"]["message"],
            "upstream `evil` failed (HTTP 500)",
            "{}",
            r.text
        );
    }
    let logged = eventually(5, || async { gw.stderr().matches("FORGED").count() >= 2 }).await;
    let stderr = gw.stderr();
    assert!(logged, "{stderr}");
    for line in stderr.lines() {
        assert!(
            !line.starts_with("2099") && !line.starts_with("the end"),
            "an upstream's text made a log line of its own:\n{stderr}"
        );
        if line.contains("FORGED") {
            assert!(
                line.contains("upstream broke") && line.contains("the end"),
                "{line}"
            );
        }
    }
}

/// A key made of dictionary words, as a test or a local setup may have.
const WORDS: &str = "sk-acceptance-required-testing-upstream-4f9c2e81";

/// An upstream that answers with the user's message, whole or streamed
/// four characters per event.
async fn parrot() -> String {
    use axum::response::IntoResponse;
    async fn chat(body: axum::body::Bytes) -> axum::response::Response {
        let req: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
        let text = req["messages"][0]["content"]
            .as_str()
            .unwrap_or("")
            .to_owned();
        if req["stream"] != true {
            return axum::Json(serde_json::json!({"id": "c1", "object": "chat.completion", "model": "m",
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}}))
            .into_response();
        }
        let chunk = |delta: serde_json::Value, finish: serde_json::Value| {
            let c = serde_json::json!({"id": "c1", "object": "chat.completion.chunk", "model": "m",
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
            format!("data: {c}\n\n")
        };
        let mut out = chunk(
            serde_json::json!({"role": "assistant", "content": ""}),
            serde_json::Value::Null,
        );
        let chars: Vec<char> = text.chars().collect();
        for piece in chars.chunks(4) {
            let piece: String = piece.iter().collect();
            out.push_str(&chunk(
                serde_json::json!({"content": piece}),
                serde_json::Value::Null,
            ));
        }
        out.push_str(&chunk(serde_json::json!({}), serde_json::json!("stop")));
        out.push_str("data: [DONE]\n\n");
        ([("content-type", "text/event-stream")], out).into_response()
    }
    let app = axum::Router::new().route("/v1/chat/completions", axum::routing::post(chat));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    format!("http://{addr}/v1")
}

/// With a key made of words, an answer holding its words comes back as
/// the model wrote it; the key, its encodings and two-thirds of it are
/// still cut, and of a key streamed in pieces less than two-thirds goes
/// out.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_of_words_alters_no_honest_answer() {
    use base64::Engine as _;
    let base = parrot().await;
    let toml = format!(
        "[upstreams.local]\nkind = \"openai\"\nbase_url = \"{base}\"\napi_key_env = \"LOCAL_KEY\"\n\
         [models.m]\nupstream = \"local\"\n"
    );
    let gw = common::inproc::Gw::start_with(
        &toml,
        &[("LOCAL_KEY", WORDS)],
        std::time::SystemTime::now(),
    );
    let answer = |r: &Resp, stream: bool| -> String {
        if stream {
            streamed_text(&r.data_events())
        } else {
            r.json()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        }
    };
    for stream in [false, true] {
        let body = |text: &str| {
            if stream {
                chat_stream("m", text)
            } else {
                chat("m", text)
            }
        };
        for honest in [
            "hello from the acceptance test",
            "the vendor field is fake-upstream",
            "a key is required for testing the upstream",
            "sk-acceptance-required-testing- is 31 characters of it",
        ] {
            let r = gw.chat(&body(honest)).await;
            assert_eq!(r.status, 200, "{}", r.text);
            assert_eq!(answer(&r, stream), honest, "stream {stream}");
        }
        let b = base64::engine::general_purpose::STANDARD;
        for secret in [
            WORDS.to_owned(),
            WORDS.to_uppercase(),
            WORDS[..32].to_owned(),
            b.encode(WORDS),
            b.encode(format!("user:{WORDS}")),
            WORDS.replace('-', "%2D"),
        ] {
            let r = gw.chat(&body(&format!("it is {secret} here"))).await;
            assert_eq!(r.status, 200, "{}", r.text);
            let said = answer(&r, stream);
            assert!(
                said.contains("[REDACTED]") && said.ends_with(" here"),
                "{said}"
            );
            if stream {
                // Streamed four characters an event: what went out before
                // the run counted is less than two-thirds of it; its end
                // never does.
                assert!(!said.contains(&secret[secret.len() - 8..]), "{said}");
            } else {
                assert!(!leaks(&said, WORDS) && !leaks(&r.text, WORDS), "{}", r.text);
            }
        }
    }
}
