//! The upstream's key never comes back, in any disguise: upper-cased, a
//! suffix or a middle part of it, base64 of `Bearer <key>`, wrapped over
//! lines, in an error or in a 200 answer (whole or streamed, a few
//! characters per event) that echoes the request's headers. Checked in
//! what the client gets (body, headers, the text a stream spells out),
//! the event log and stderr. And upstream text with line breaks stays on
//! one stderr line.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::evil::{self, ECHOES, leak, leaks};
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
            let spelt = streamed_text(&r.data_events());
            if leaks(&spelt, KEY) {
                errs.push(format!("{tag}: the streamed text spells the key: {spelt}"));
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
