//! `conclave mock`: the standalone simulated OpenAI + llama-swap server.
//! Replies, rules and failures are checked on its server over HTTP
//! (in-process; the binary for its command-line flags); the swap timing (a load takes `swap_delay`, a cancelled
//! load still completes, the banner streams while a model is "starting")
//! runs the same router in-process on paused time, so those waits are
//! exact however busy the machine is.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use common::*;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::ServiceExt;

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"
swap_delay = "200ms"

[upstreams.sim.models.a]
reply = "echo"

[upstreams.sim.models.b]
reply = { json = { accept = true, score = 0.5 } }

[upstreams.sim.models.tool]
reply = { tool_call = { name = "lookup", arguments = { q = "weather" } } }

[upstreams.sim.models.flaky]
reply = { text = "fine" }
[[upstreams.sim.models.flaky.rules]]
when_call = [1]
then = { status = 503, error_message = "warming up", retry_after = 2 }
[[upstreams.sim.models.flaky.rules]]
when_contains = "secret word"
then = { reply = { text = "you said it" } }

[upstreams.sim.models.junk]
fail = "garbage"
"#;

/// `conclave mock`'s router on `toml`'s mock upstream, built as the
/// command builds it, answering without a socket (so on the test's
/// clock).
struct InMock {
    router: axum::Router,
    _dir: tempfile::TempDir,
}

impl InMock {
    fn new(toml: &str) -> InMock {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("mock.toml");
        std::fs::write(&path, toml).unwrap();
        let setup = conclave::config::mock_models(&path, None).unwrap_or_else(|e| panic!("{e}"));
        let sim = conclave::mock::Simulator::new(setup.models, setup.swap, setup.quirks, false)
            .with_responses(setup.responses)
            .with_api(setup.api);
        InMock {
            router: conclave::mock::server::router(Arc::new(sim)),
            _dir: dir,
        }
    }

    async fn send(&self, req: Request<Body>) -> Resp {
        let r = self.router.clone().oneshot(req).await.unwrap();
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        Resp {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    async fn post(&self, body: &Value) -> Resp {
        let req = Request::builder()
            .method(Method::POST)
            .uri("/v1/chat/completions")
            .header("content-type", "application/json")
            .body(Body::from(body.to_string()))
            .unwrap();
        self.send(req).await
    }

    async fn running(&self) -> Value {
        let req = Request::builder()
            .uri("/running")
            .body(Body::empty())
            .unwrap();
        self.send(req).await.json()
    }
}

#[tokio::test(start_paused = true)]
async fn one_model_is_loaded_at_a_time_and_swaps_take_time() {
    let mock = InMock::new(MOCK);
    assert_eq!(mock.running().await, json!({"running": []}));
    let t = Instant::now();
    assert_eq!(mock.post(&chat("a", "x")).await.status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "the first load swaps: {:?}",
        t.elapsed()
    );
    assert_eq!(
        mock.running().await,
        json!({"running": [{"model": "a", "state": "ready"}]})
    );
    let t = Instant::now();
    assert_eq!(mock.post(&chat("a", "x")).await.status, 200);
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "a loaded model answers without a swap: {:?}",
        t.elapsed()
    );
    mock.post(&chat("b", "x")).await;
    assert_eq!(mock.running().await["running"][0]["model"], "b");
}

#[tokio::test]
async fn replies_rules_and_failures() {
    let mock = Srv::mock(MOCK);
    let r = post(&mock.base, &chat("a", "say this back")).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "say this back"
    );

    let r = post(&mock.base, &chat("b", "x")).await;
    let content: Value = serde_json::from_str(
        r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap(),
    )
    .unwrap();
    assert_eq!(content, json!({"accept": true, "score": 0.5}));

    let r = post(&mock.base, &chat("tool", "x")).await.json();
    assert_eq!(r["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        r["choices"][0]["message"]["tool_calls"][0]["function"]["name"],
        "lookup"
    );
    assert_eq!(
        r["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        r#"{"q":"weather"}"#
    );

    let r = post(&mock.base, &chat("flaky", "x")).await;
    assert_eq!(r.status, 503);
    assert_eq!(r.header("retry-after"), Some("2"));
    assert_eq!(r.json()["error"]["message"], "warming up");
    let r = post(&mock.base, &chat("flaky", "x")).await;
    assert_eq!(r.json()["choices"][0]["message"]["content"], "fine");
    let r = post(&mock.base, &chat("flaky", "the secret word")).await;
    assert_eq!(r.json()["choices"][0]["message"]["content"], "you said it");

    let r = post(&mock.base, &chat("junk", "x")).await;
    assert_eq!(r.status, 200);
    assert!(serde_json::from_str::<Value>(&r.text).is_err());

    let models = get_json(&client(), &mock.url("/v1/models")).await;
    assert_eq!(models["data"].as_array().unwrap().len(), 5);
    let received = mock.received().await;
    assert_eq!(received.len(), 7);
    assert_eq!(
        received[0]["body"]["messages"][0]["content"],
        "say this back"
    );
}

#[tokio::test]
async fn streamed_tool_calls_arrive_in_pieces() {
    let mock = Srv::mock(MOCK);
    let r = post(&mock.base, &chat_stream("tool", "x")).await;
    let events = r.data_events();
    assert_eq!(events.last().unwrap(), "[DONE]");
    let mut args = String::new();
    for e in &events[..events.len() - 1] {
        let v: Value = serde_json::from_str(e).unwrap();
        if let Some(a) = v["choices"][0]["delta"]["tool_calls"][0]["function"]["arguments"].as_str()
        {
            args.push_str(a);
        }
    }
    assert_eq!(args, r#"{"q":"weather"}"#);
}

/// A client that gives up during a swap does not leave the simulator
/// confused: the swap finishes (as llama-swap's does) and `/running` names
/// the model that now answers warm.
#[tokio::test(start_paused = true)]
async fn a_cancelled_swap_completes_and_running_stays_true() {
    let mock = InMock::new(MOCK);
    assert_eq!(mock.post(&chat("a", "x")).await.status, 200);
    // Ask for b and give up half-way through its 200 ms load.
    let gave_up = tokio::time::timeout(Duration::from_millis(80), mock.post(&chat("b", "x"))).await;
    assert!(gave_up.is_err(), "the request should have been cut off");
    assert_eq!(
        mock.running().await,
        json!({"running": [{"model": "b", "state": "starting"}]}),
        "b is still loading when its caller leaves"
    );
    tokio::time::sleep(Duration::from_millis(250)).await;
    assert_eq!(
        mock.running().await,
        json!({"running": [{"model": "b", "state": "ready"}]})
    );
    // b answers warm now, a needs a swap back.
    let t = Instant::now();
    assert_eq!(mock.post(&chat("b", "x")).await.status, 200);
    assert!(
        t.elapsed() < Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    let t = Instant::now();
    assert_eq!(mock.post(&chat("a", "x")).await.status, 200);
    assert!(
        t.elapsed() >= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
}

#[tokio::test]
async fn with_a_config_only_its_models_answer_unless_echo_unknown() {
    let mock = Srv::mock(MOCK);
    let r = post(&mock.base, &chat("not-in-the-config", "x")).await;
    assert_eq!(r.status, 404, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "model_not_found");
    let echo = Proc::start(
        &["mock", "--listen", "127.0.0.1:0", "--echo-unknown"],
        MOCK,
        &[],
    );
    let r = post(&echo.base, &chat("not-in-the-config", "echo me")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "echo me");
}

/// With `send_loading_state`, a cold streamed request gets llama-swap's
/// banner first: `reasoning_content` chunks without `id` or `object`, a
/// "starting" process in `/running` meanwhile, then the answer.
#[tokio::test(start_paused = true)]
async fn send_loading_state_streams_llama_swap_s_banner_while_loading() {
    let mock = Arc::new(InMock::new(&MOCK.replace(
        "swap_delay = \"200ms\"\n",
        "swap_delay = \"200ms\"\nsend_loading_state = true\n",
    )));
    let body = chat_stream("a", "x");
    let pending = {
        let mock = mock.clone();
        tokio::spawn(async move { mock.post(&body).await })
    };
    // Half-way through the 200 ms load (paused time: exactly 100 ms).
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert!(!pending.is_finished());
    assert_eq!(
        mock.running().await,
        json!({"running": [{"model": "a", "state": "starting"}]})
    );
    let r = pending.await.unwrap();
    let events = r.data_events();
    let banner: Vec<Value> = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .take_while(|v| v.get("id").is_none())
        .collect();
    let text: String = banner
        .iter()
        .map(|v| {
            v["choices"][0]["delta"]["reasoning_content"]
                .as_str()
                .unwrap()
        })
        .collect();
    assert!(
        text.starts_with("━━━━━\nllama-swap loading model: a\n"),
        "{text}"
    );
    assert!(text.contains("Done! ("), "{text}");
    assert!(banner.iter().all(|v| v.get("object").is_none()));
    let rest = &events[banner.len()..];
    assert!(
        rest.iter().any(|e| e.contains("chat.completion.chunk")),
        "{rest:?}"
    );
    // Loaded now: no banner.
    let again = mock.post(&chat_stream("a", "y")).await;
    assert!(!again.text.contains("reasoning_content"), "{}", again.text);
}
