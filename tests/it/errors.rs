//! Errors, black box: every failure a client can meet comes back in
//! OpenAI's shape `{"error": {"message", "type", "param", "code"}}` with the
//! status DESIGN.md lists; upstream failures name the upstream and never its
//! key; once a stream has started, a failure is one SSE error event.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

/// The upstream's API key: it must reach the upstream and nobody else.
const SECRET: &str = "sk-secret-123";

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.ok]
reply = { text = "fine thanks" }

[upstreams.sim.models.other]
reply = { text = "other answer" }

[upstreams.sim.models.hang]
fail = "hang"

[upstreams.sim.models.boom]
status = 500
error_message = "boom inside the upstream"

[upstreams.sim.models.garbage]
fail = "garbage"

[upstreams.sim.models.cut]
reply = { text = "one two three four five six seven eight nine ten" }
fail = "cut"

[upstreams.sim.models.bad]
status = 400
error_message = "bad tool schema from upstream"

[upstreams.sim.models.limited]
status = 429
retry_after = 7
error_message = "slow down please"

[upstreams.sim.models.denied]
status = 401
error_message = "Incorrect API key provided: sk-sec*******123. Find your key elsewhere."

[upstreams.sim.models.errev]
fail = "error_event"

[upstreams.sim.models.midcut]
reply = { text = "one two three four five six seven eight nine ten" }
tokens_per_second = 50
fail = "cut"

[upstreams.sim.models.slow-ok]
reply = { text = "worth the wait" }
ttft = "400ms"

[upstreams.sim.models.slow-errev]
ttft = "400ms"
fail = "error_event"
"#;

/// A gateway in front of `mock`: upstream `cloudy` (300 ms timeout) for
/// most models, `roomy` (5 s) for the slow ones, and `dead` (30 s) at a port
/// nothing listens on. `server` goes into `[server]`.
fn gateway(mock: &Srv, server: &str) -> Srv {
    let toml = r#"
[server]
event_log = "{dir}/events.jsonl"
SERVER

# These upstreams fail on purpose, case after case: never ejected.
[upstreams.cloudy]
kind = "openai"
base_url = "MOCK_V1"
api_key_env = "CLOUDY_KEY"
timeout = "300ms"
eject = false

[upstreams.roomy]
kind = "openai"
base_url = "MOCK_V1"
api_key_env = "CLOUDY_KEY"
timeout = "5s"
eject = false

[upstreams.dead]
kind = "openai"
base_url = "http://127.0.0.1:DEAD_PORT/v1"
api_key_env = "CLOUDY_KEY"
timeout = "30s"
eject = false

[models.ok]
upstream = "cloudy"
[models.other]
upstream = "cloudy"
[models.hang]
upstream = "cloudy"
[models.boom]
upstream = "cloudy"
[models.garbage]
upstream = "cloudy"
[models.cut]
upstream = "cloudy"
[models.bad]
upstream = "cloudy"
[models.limited]
upstream = "cloudy"
[models.denied]
upstream = "cloudy"
[models.errev]
upstream = "cloudy"
[models.midcut]
upstream = "roomy"
[models.slow-ok]
upstream = "roomy"
[models.slow-errev]
upstream = "roomy"
[models.gone]
upstream = "dead"
model = "ok"

[routes.front]
strategy = "passthrough"
model = "ok"
"#
    .replace("SERVER", server)
    .replace("MOCK_V1", &mock.v1())
    .replace("DEAD_PORT", &closed_port().to_string());
    Srv::gateway_env(&toml, &[("CLOUDY_KEY", SECRET)])
}

/// A port nothing listens on (bound, read, released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

/// Checks the OpenAI error body and status; returns the `error` object.
fn openai_error(r: &Resp, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.text);
    assert!(
        r.header("content-type")
            .is_some_and(|c| c.starts_with("application/json")),
        "content-type {:?}: {}",
        r.header("content-type"),
        r.text
    );
    let v = r.json();
    let e = v["error"].clone();
    let obj = e
        .as_object()
        .unwrap_or_else(|| panic!("no error object: {}", r.text));
    for k in ["message", "type", "param", "code"] {
        assert!(obj.contains_key(k), "error without `{k}`: {}", r.text);
    }
    assert!(
        e["message"].as_str().is_some_and(|m| !m.is_empty()),
        "{}",
        r.text
    );
    assert!(
        e["type"].as_str().is_some_and(|t| !t.is_empty()),
        "{}",
        r.text
    );
    e
}

/// The secret appears nowhere in a response, its headers included.
fn assert_no_secret(r: &Resp) {
    assert!(!r.text.contains(SECRET), "secret in body: {}", r.text);
    for (name, value) in &r.headers {
        assert!(
            !String::from_utf8_lossy(value.as_bytes()).contains(SECRET),
            "secret in header {name}"
        );
    }
}

async fn assert_healthy(gw: &Srv) {
    let r = send(client().get(gw.url("/healthz"))).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test]
async fn malformed_requests_are_400_and_name_the_field() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock, "");
    let msgs = json!([{"role": "user", "content": "hi"}]);

    let r = post_raw(&gw.base, r#"{"model": "ok", "messages": ["#, &[]).await;
    let e = openai_error(&r, 400);
    assert_eq!(e["code"], "invalid_json", "{}", r.text);
    assert_eq!(e["type"], "invalid_request_error");

    let r = post_raw(&gw.base, "not json at all", &[]).await;
    assert_eq!(openai_error(&r, 400)["code"], "invalid_json");

    let cases = [
        (json!({"messages": msgs}), "model"),
        (json!({"model": "ok"}), "messages"),
        (json!({"model": "ok", "messages": "hi"}), "messages"),
        (
            json!({"model": "ok", "messages": msgs, "stream": "yes"}),
            "stream",
        ),
        (json!({"model": 5, "messages": msgs}), "model"),
        (json!({"model": "ok", "messages": []}), "messages"),
    ];
    for (body, param) in cases {
        let r = post(&gw.base, &body).await;
        let e = openai_error(&r, 400);
        assert_eq!(e["param"], param, "{body}: {}", r.text);
        assert_eq!(e["type"], "invalid_request_error", "{}", r.text);
    }

    // Trailing garbage after a valid object.
    let good = chat("ok", "hi").to_string();
    let r = post_raw(&gw.base, format!("{good} trailing"), &[]).await;
    openai_error(&r, 400);
    let r = post_raw(&gw.base, format!("{good}{good}"), &[]).await;
    openai_error(&r, 400);

    // None of it reached the upstream; a good request still works.
    assert!(mock.received().await.is_empty());
    let r = post_raw(&gw.base, good, &[]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_healthy(&gw).await;
}

#[tokio::test]
async fn keys_401_404_and_the_models_a_key_sees() {
    let mock = Srv::mock(MOCK);
    let keys = r#"
[[keys]]
name = "team"
key_env = "KEY_TEAM"
models = ["ok"]

[[keys]]
name = "admin"
key_env = "KEY_ADMIN"
"#;
    let gw = gateway_keys(&mock, keys);

    let r = post(&gw.base, &chat("ok", "hi")).await;
    assert_eq!(openai_error(&r, 401)["code"], "invalid_api_key");
    let r = post_with(
        &gw.base,
        &chat("ok", "hi"),
        &[("authorization", "Bearer wrong-key")],
    )
    .await;
    assert_eq!(openai_error(&r, 401)["code"], "invalid_api_key");
    assert!(!r.text.contains("k-team") && !r.text.contains("k-admin"));

    let team = [("authorization", "Bearer k-team")];
    let r = post_with(&gw.base, &chat("other", "hi"), &team).await;
    // A model outside the key's list does not exist for the key.
    let e = openai_error(&r, 404);
    assert_eq!(e["code"], "model_not_found", "{}", r.text);
    let r = post_with(&gw.base, &chat("ok", "hi"), &team).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = post_with(
        &gw.base,
        &chat("other", "hi"),
        &[("authorization", "Bearer k-admin")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        mock.received().await.len(),
        2,
        "only allowed requests go up"
    );

    // /v1/models: the team key sees only its model, the admin key all.
    let ids = |r: &Resp| -> Vec<String> {
        r.json()["data"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let r = send(client().get(gw.url("/v1/models")).bearer_auth("k-team")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(ids(&r), vec!["ok".to_owned()]);
    let r = send(client().get(gw.url("/v1/models")).bearer_auth("k-admin")).await;
    let all = ids(&r);
    assert!(all.contains(&"ok".to_owned()) && all.contains(&"other".to_owned()));
    let r = send(client().get(gw.url("/v1/models"))).await;
    openai_error(&r, 401);
    assert_healthy(&gw).await;
}

fn gateway_keys(mock: &Srv, keys: &str) -> Srv {
    let toml = format!(
        "{keys}\n[upstreams.cloudy]\nkind = \"openai\"\nbase_url = \"{}\"\ntimeout = \"2s\"\n\n[models.ok]\nupstream = \"cloudy\"\n\n[models.other]\nupstream = \"cloudy\"\n",
        mock.v1()
    );
    Srv::gateway_env(&toml, &[("KEY_TEAM", "k-team"), ("KEY_ADMIN", "k-admin")])
}

#[tokio::test]
async fn unknown_model_url_and_method() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock, "");
    let ghost = "ghost-model-7f3a";

    let r = post(&gw.base, &chat(ghost, "hi")).await;
    let e = openai_error(&r, 404);
    assert_eq!(e["code"], "model_not_found", "{}", r.text);
    let r = post(&gw.base, &chat_stream(ghost, "hi")).await;
    assert_eq!(openai_error(&r, 404)["code"], "model_not_found");

    // A made-up name never becomes a label value.
    let m = gw.metrics().await;
    assert!(m.contains("conclave_requests_total"), "{m}");
    assert!(!m.contains(ghost), "{m}");

    let r = send(client().get(gw.url("/v1/nothing/here"))).await;
    openai_error(&r, 404);
    let r = send(client().post(gw.url("/v1/images/generations")).body("{}")).await;
    openai_error(&r, 404);
    let r = send(client().get(gw.url("/v1/chat/completions"))).await;
    openai_error(&r, 405);
    let r = send(client().put(gw.url("/v1/chat/completions")).body("{}")).await;
    openai_error(&r, 405);

    assert!(mock.received().await.is_empty());
    assert_healthy(&gw).await;
}

#[tokio::test]
async fn bodies_over_the_limit_are_413() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock, "max_body_bytes = 1024");
    let big = chat("ok", &"a".repeat(3000)).to_string();

    // With a Content-Length.
    let r = post_raw(&gw.base, big.clone(), &[]).await;
    openai_error(&r, 413);

    // Chunked, no Content-Length.
    let parts: Vec<Result<Vec<u8>, std::io::Error>> =
        big.as_bytes().chunks(256).map(|c| Ok(c.to_vec())).collect();
    let r = post_raw(
        &gw.base,
        reqwest::Body::wrap_stream(futures::stream::iter(parts)),
        &[],
    )
    .await;
    openai_error(&r, 413);

    // Under the limit, both ways, it works.
    let small = chat("ok", "hi").to_string();
    assert_eq!(post_raw(&gw.base, small.clone(), &[]).await.status, 200);
    let parts: Vec<Result<Vec<u8>, std::io::Error>> =
        small.as_bytes().chunks(8).map(|c| Ok(c.to_vec())).collect();
    let r = post_raw(
        &gw.base,
        reqwest::Body::wrap_stream(futures::stream::iter(parts)),
        &[],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(mock.received().await.len(), 2);
    assert_healthy(&gw).await;
}

#[tokio::test(start_paused = true)]
async fn upstream_failures_map_to_statuses_and_never_leak_the_key() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock, "");

    // (model, status, code if the spec fixes one, upstream in the message,
    // calls: a refused connection, a timeout, a 5xx and a cut are retried
    // once, by the upstreams' default `retries`)
    let cases = [
        ("gone", 502, Some("upstream_unreachable"), "dead", "2"),
        ("hang", 504, Some("upstream_timeout"), "cloudy", "2"),
        ("boom", 502, Some("upstream_error"), "cloudy", "2"),
        (
            "garbage",
            502,
            Some("upstream_invalid_response"),
            "cloudy",
            "1",
        ),
        ("cut", 502, Some("upstream_stream_cut"), "cloudy", "2"),
        ("denied", 502, Some("upstream_auth_failed"), "cloudy", "1"),
    ];
    for (model, status, code, upstream, calls) in cases {
        let started = tokio::time::Instant::now();
        let r = post(&gw.base, &chat(model, "hi")).await;
        let e = openai_error(&r, status);
        if let Some(code) = code {
            assert_eq!(e["code"], code, "{model}: {}", r.text);
        }
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains(upstream), "{model}: {msg}");
        // A request that reached its route says which route and how many calls.
        assert_eq!(r.header("x-conclave-route"), Some(model), "{model}");
        assert_eq!(r.header("x-conclave-attempts"), Some(calls), "{model}");
        assert!(!msg.contains("127.0.0.1"), "{model}: internal URL: {msg}");
        assert_no_secret(&r);
        // Nothing waits on a long timeout: a refused connection fails at
        // once (`dead`'s 30 s timeout twice would be a minute), a hang at
        // cloudy's 300 ms. Generous, so a busy machine does not fail it.
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "{model} took {:?}",
            started.elapsed()
        );
    }

    // The upstream's refusal of the gateway's own key is not passed on.
    let r = post(&gw.base, &chat("denied", "hi")).await;
    assert!(!r.text.contains("Incorrect API key"), "{}", r.text);
    assert!(!r.text.contains("sk-sec"), "{}", r.text);

    // 4xx the client caused: relayed with the upstream's message.
    let r = post(&gw.base, &chat("bad", "hi")).await;
    let e = openai_error(&r, 400);
    let msg = e["message"].as_str().unwrap();
    assert!(msg.contains("bad tool schema from upstream"), "{msg}");
    assert_no_secret(&r);

    // 429: rate limited, with the upstream's Retry-After.
    let r = post(&gw.base, &chat("limited", "hi")).await;
    let e = openai_error(&r, 429);
    assert_eq!(e["code"], "rate_limit_exceeded", "{}", r.text);
    assert_eq!(r.header("retry-after"), Some("7"));
    assert_no_secret(&r);

    // The key did reach the upstream, on every call that got there.
    let received = mock.received().await;
    // (hang, boom, cut and limited twice: retried once)
    assert_eq!(received.len(), 12, "{received:?}");
    for req in &received {
        assert_eq!(req["authorization"], format!("Bearer {SECRET}"), "{req}");
    }

    // And is nowhere in the metrics, the event log or the gateway's log.
    let m = gw.metrics().await;
    assert!(m.contains("conclave_upstream_errors_total"), "{m}");
    assert!(!m.contains(SECRET), "secret in /metrics");
    let events = gw.events(1).await;
    for ev in &events {
        assert!(
            !ev.to_string().contains(SECRET),
            "secret in event log: {ev}"
        );
    }
    assert!(!gw.stderr().contains(SECRET), "secret in the gateway's log");
    assert_healthy(&gw).await;
}

#[tokio::test(start_paused = true)]
async fn stream_errors_before_the_first_chunk_are_plain_http_errors() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock, "");
    let cases = [
        ("gone", 502, "dead"),
        ("hang", 504, "cloudy"),
        ("boom", 502, "cloudy"),
        ("garbage", 502, "cloudy"),
        ("errev", 502, "cloudy"),
        ("denied", 502, "cloudy"),
    ];
    for (model, status, upstream) in cases {
        let r = post(&gw.base, &chat_stream(model, "hi")).await;
        let e = openai_error(&r, status);
        assert!(!r.text.contains("data:"), "{model}: SSE: {}", r.text);
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains(upstream), "{model}: {msg}");
        assert_no_secret(&r);
    }
    let r = post(&gw.base, &chat_stream("limited", "hi")).await;
    assert_eq!(openai_error(&r, 429)["code"], "rate_limit_exceeded");
    assert_eq!(r.header("retry-after"), Some("7"));
    let r = post(&gw.base, &chat_stream("bad", "hi")).await;
    openai_error(&r, 400);
    assert_healthy(&gw).await;
}

/// The error events in a stream body.
fn error_events(r: &Resp) -> Vec<Value> {
    r.data_events()
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter(|v| v.get("error").is_some())
        .collect()
}

#[tokio::test]
async fn a_stream_cut_midway_ends_with_one_error_event_and_no_done() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock, "");
    let r = post(&gw.base, &chat_stream("midcut", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let events = r.data_events();
    assert!(!events.iter().any(|e| e == "[DONE]"), "{}", r.text);
    let errors = error_events(&r);
    assert_eq!(errors.len(), 1, "{}", r.text);
    // Some content first, the error last.
    let last: Value = serde_json::from_str(events.last().unwrap()).unwrap();
    assert!(last.get("error").is_some(), "{}", r.text);
    let content: String = events[..events.len() - 1]
        .iter()
        .map(|e| serde_json::from_str::<Value>(e).unwrap())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect();
    assert!(content.starts_with("one two"), "{}", r.text);
    let err = &last["error"];
    for k in ["message", "type", "param", "code"] {
        assert!(err.get(k).is_some(), "{}", r.text);
    }
    assert!(err["message"].as_str().unwrap().contains("roomy"), "{err}");
    assert!(r.text.ends_with("\n\n"), "{:?}", r.text);
    assert_no_secret(&r);
    assert_healthy(&gw).await;
}

#[tokio::test]
async fn keepalives_commit_the_stream_and_a_later_failure_is_an_event() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock, "sse_keepalive = \"100ms\"");

    // A slow first token: keep-alive comments come before the first data.
    let r = post(&gw.base, &chat_stream("slow-ok", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ka = r.text.find(": keep-alive").expect("no keep-alive");
    let data = r.text.find("data:").expect("no data");
    assert!(ka < data, "{}", r.text);
    assert_eq!(
        r.data_events().last().map(String::as_str),
        Some("[DONE]"),
        "{}",
        r.text
    );

    // The upstream fails after keep-alives went out: 200, one error event.
    for (model, upstream) in [("slow-errev", "roomy"), ("hang", "cloudy")] {
        let r = post(&gw.base, &chat_stream(model, "hi")).await;
        assert_eq!(r.status, 200, "{model}: {}", r.text);
        assert!(r.text.starts_with(": keep-alive"), "{model}: {}", r.text);
        let events = r.data_events();
        assert_eq!(events.len(), 1, "{model}: {}", r.text);
        let v: Value = serde_json::from_str(&events[0]).unwrap();
        let msg = v["error"]["message"].as_str().unwrap_or_default();
        assert!(msg.contains(upstream), "{model}: {}", r.text);
        let tail = r.text.trim_end();
        assert!(
            tail.ends_with(&format!("data: {}", events[0])),
            "{model}: body does not end with the error event: {:?}",
            r.text
        );
        assert_no_secret(&r);
    }
    assert_healthy(&gw).await;
}

#[tokio::test]
async fn successful_answers_carry_conclave_headers() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock, "");

    let r = post_with(
        &gw.base,
        &chat("front", "hi"),
        &[("x-request-id", "client-req-42")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-request-id"), Some("client-req-42"));
    assert_eq!(r.header("x-conclave-route"), Some("front"));
    assert_eq!(r.header("x-conclave-strategy"), Some("passthrough"));
    assert_eq!(r.header("x-conclave-served-by"), Some("ok"));
    assert_eq!(r.header("x-conclave-attempts"), Some("1"));

    // Streamed, and with a generated id.
    let r = post(&gw.base, &chat_stream("front", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.header("x-request-id").is_some_and(|id| !id.is_empty()));
    assert_eq!(r.header("x-conclave-route"), Some("front"));
    assert_eq!(r.header("x-conclave-strategy"), Some("passthrough"));
    assert_eq!(r.header("x-conclave-served-by"), Some("ok"));
    assert_eq!(r.header("x-conclave-attempts"), Some("1"));

    // Errors carry the request id too.
    let r = post_with(
        &gw.base,
        &chat("boom", "hi"),
        &[("x-request-id", "rid-err-1")],
    )
    .await;
    openai_error(&r, 502);
    assert_eq!(r.header("x-request-id"), Some("rid-err-1"));
    assert_healthy(&gw).await;
}

/// The `x-conclave-*` options are read once, each with its own 400.
#[tokio::test]
async fn malformed_conclave_headers_are_400() {
    let mock = Srv::mock(MOCK);
    let gw = gateway(&mock, "");
    for (header, value) in [
        ("x-conclave-confirm", "perhaps"),
        ("x-conclave-pin", "two words"),
        ("x-conclave-session", &"s".repeat(200)),
    ] {
        let r = post_with(&gw.base, &chat("ok", "hi"), &[(header, value)]).await;
        let e = openai_error(&r, 400);
        assert_eq!(e["code"], "invalid_header", "{}", r.text);
        assert_eq!(e["param"], header, "{}", r.text);
    }
    let r = post_with(
        &gw.base,
        &chat("ok", "hi"),
        &[("x-conclave-confirm", "YES")],
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(mock.received().await.len() == 1);
}
