//! A server's request-validation error sent as a 500 (issue 41, item 2),
//! black-box (in-process, on paused time) against a simulated
//! llama-cpp-python (`quirks = ["rejects_null_content"]`: an assistant
//! turn with `"content": null` gets a 500 whose body is pydantic's dump,
//! Python reprs and a traceback with the server's file path):
//! - the client gets a 400 `invalid_request_error` naming the field
//!   (`messages[1].content`), whole and streamed, with none of the
//!   server's internals;
//! - the upstream is called exactly once per request (no retry), and a
//!   chain does not hand the request to its next tier;
//! - likewise a `response_format` of type `json_schema`
//!   (`quirks = ["rejects_json_schema"]`: pydantic's `literal_error`):
//!   400 naming `response_format.type`;
//! - a route each of whose members' servers rejected the request (a
//!   verified chain, which tries its next tier, and a race) is the
//!   client's 400 too, not `chain_exhausted` or `race_exhausted`;
//! - however many such requests come, from a gateway without keys (one
//!   tenant: any failure would count for everyone), the upstream is never
//!   ejected: `/readyz` says serving, no ejection is counted, and a good
//!   request is answered.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::inproc::Gw;
use serde_json::{Value, json};

/// Retried twice and ejected after three failures in a row: were the
/// validation 500 a failure, three requests would eject it.
const CONFIG: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.llama]
kind = "mock"
quirks = ["rejects_null_content", "rejects_json_schema"]
retries = { max = 2, backoff = "10ms" }
eject = { after = 3, cooldown = "60s" }

[upstreams.llama.models.small]
reply = { text = "fine" }

[upstreams.llama.models.big]
reply = { text = "big fine" }

[models.small]
upstream = "llama"

[models.big]
upstream = "llama"

[routes.tiers]
strategy = "chain"
tiers = ["small", "big"]

[routes.checked]
strategy = "chain"
tiers = ["small", "big"]
verifier = "big"
verify = ["small"]

[routes.racing]
strategy = "race"
candidates = ["small", "big"]
"#;

/// Pieces of the server's answer a client must never read.
const INTERNALS: &[&str] = &[
    "validation error",
    "string_type",
    "literal_error",
    "ChatCompletionRequest",
    "app.py",
    "site-packages",
    "Input should be",
    "None",
    "Paris",
    "HTTP 500",
];

/// A tool-call turn whose assistant message has `"content": null`.
fn null_content(model: &str, stream: bool) -> Value {
    let tc = json!([{"id": "call_1", "type": "function",
        "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]);
    json!({"model": model, "stream": stream, "messages": [
        {"role": "user", "content": "What is the weather?"},
        {"role": "assistant", "content": null, "tool_calls": tc},
        {"role": "tool", "tool_call_id": "call_1", "content": "18"}
    ]})
}

fn assert_rejected(what: &str, text: &str, e: &Value) {
    assert_eq!(e["type"], "invalid_request_error", "{what}: {text}");
    assert_eq!(e["code"], "upstream_rejected_request", "{what}: {text}");
    assert_eq!(e["param"], "messages[1].content", "{what}: {text}");
    let message = e["message"].as_str().unwrap();
    assert!(
        message.contains("`messages[1].content` is of the wrong type"),
        "{what}: {message}"
    );
    for bit in INTERNALS {
        assert!(
            !text.contains(bit),
            "{what}: {bit:?} reached the client: {text}"
        );
    }
}

fn calls(gw: &Gw) -> usize {
    gw.arrivals("llama").len()
}

#[tokio::test(start_paused = true)]
async fn a_validation_500_is_the_clients_400_sent_once_and_never_ejects() {
    let gw = Gw::start(CONFIG);
    for i in 0..20 {
        let stream = i % 2 == 1;
        let before = calls(&gw);
        let r = gw.chat(&null_content("small", stream)).await;
        assert_eq!(r.status, 400, "request {i} (stream {stream}): {}", r.text);
        assert_rejected(&format!("request {i}"), &r.text, &r.json()["error"]);
        assert_eq!(calls(&gw) - before, 1, "request {i}: retried");
    }
    // The upstream serves everyone, and says so.
    let r = gw
        .chat(&json!({"model": "small", "messages": [{"role": "user", "content": "hi"}]}))
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ready = gw.get("/readyz").await.json();
    assert_eq!(ready["health"]["llama"]["health"], "serving", "{ready}");
    assert_eq!(
        ready["health"]["llama"]["models"]["small"]["health"], "serving",
        "{ready}"
    );
    let metrics = gw.metrics();
    assert!(!metrics.contains("conclave_ejections_total"), "{metrics}");
    assert!(
        metrics.contains(r#"kind="validation_error""#),
        "counted as what it is: {metrics}"
    );
    assert!(!metrics.contains(r#"kind="status_5xx""#), "{metrics}");
    // The operator's event log keeps what the server said.
    let attempts = gw.events(&["attempt"]).await;
    let failed: Vec<&Value> = attempts.iter().filter(|a| a["error"].is_string()).collect();
    assert_eq!(failed.len(), 20, "{attempts:#?}");
    let error = failed[0]["error"].as_str().unwrap();
    assert!(
        error.contains("rejected the request as invalid (HTTP 500"),
        "{error}"
    );
    assert!(error.contains("validation error"), "{error}");
}

#[tokio::test(start_paused = true)]
async fn structured_outputs_on_llama_cpp_python_are_the_clients_400() {
    let gw = Gw::start(CONFIG);
    for stream in [false, true] {
        let before = calls(&gw);
        let body = json!({"model": "small", "stream": stream,
            "messages": [{"role": "user", "content": "Give a JSON object."}],
            "response_format": {"type": "json_schema",
                "json_schema": {"name": "o", "schema": {"type": "object"}}}});
        let r = gw.chat(&body).await;
        assert_eq!(r.status, 400, "stream {stream}: {}", r.text);
        let e = &r.json()["error"];
        assert_eq!(e["type"], "invalid_request_error", "{}", r.text);
        assert_eq!(e["param"], "response_format.type", "{}", r.text);
        assert_eq!(
            e["message"],
            "invalid request: `response_format.type` is not an allowed value; upstream `llama` \
             rejected it",
            "{}",
            r.text
        );
        assert_eq!(calls(&gw) - before, 1, "retried");
    }
}

#[tokio::test(start_paused = true)]
async fn a_chain_does_not_hand_a_rejected_request_to_its_next_tier() {
    let gw = Gw::start(CONFIG);
    for stream in [false, true] {
        let before = gw.asked("llama", "big").len();
        let r = gw.chat(&null_content("tiers", stream)).await;
        assert_eq!(r.status, 400, "stream {stream}: {}", r.text);
        assert_rejected("chain", &r.text, &r.json()["error"]);
        assert_eq!(gw.asked("llama", "big").len(), before, "tier 2 was asked");
    }
    assert_eq!(gw.asked("llama", "small").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn a_route_whose_every_member_rejected_the_request_is_the_clients_400() {
    let gw = Gw::start(CONFIG);
    for route in ["checked", "racing"] {
        for stream in [false, true] {
            let r = gw.chat(&null_content(route, stream)).await;
            assert_eq!(r.status, 400, "{route} stream {stream}: {}", r.text);
            assert_rejected(route, &r.text, &r.json()["error"]);
        }
    }
    // Each member was asked once a request, and none was retried.
    assert_eq!(gw.asked("llama", "small").len(), 4);
    assert_eq!(gw.asked("llama", "big").len(), 4);
}
