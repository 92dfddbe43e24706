//! Context windows, over HTTP: a gateway in front of the mock server
//! playing llama-cpp-python with SmolLM2 (`context_window = 512`, a
//! too-long stream answered with an empty 200 stream), learning windows
//! from llama.cpp's `/props`, llama-swap's `/upstream/<model>/props` and
//! vLLM's `/v1/models`. A request that does not fit is refused before any
//! call (passthrough) or the member is skipped with its reason (chain,
//! race, hedge, judge panel); near the window the server's own count
//! decides (the mock counts as its tokenizer would, not as conclave
//! estimates).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::extract::State;
use axum::routing;
use common::*;
use serde_json::{Value, json};

/// A llama-cpp-python-like server: `small` has a 512-token window (and
/// answers a too-long stream with an empty 200 stream), `big` none that
/// the server reports.
const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"
quirks = ["empty_stream_on_overflow"]

[upstreams.sim.models.small]
reply = { text = "from small" }
context_window = 512

[upstreams.sim.models.big]
reply = { text = "from big" }

[upstreams.sim.models.syn]
reply = { text = "GUIDANCE: be plain." }
"#;

/// About 2,000 tokens: more than 512.
fn long() -> String {
    "alpha bravo charlie delta ".repeat(320)
}

/// About 300 tokens: fits 512.
fn mid() -> String {
    "alpha bravo charlie delta ".repeat(46)
}

const ROUTES: &str = r#"
[models.capped]
upstream = "up"
model = "big"
context_window = 300

[models.roomy]
upstream = "up"
model = "small"
context_window = 100000

[routes.ladder]
strategy = "chain"
tiers = ["small", "big"]

[routes.cramped]
strategy = "chain"
tiers = ["small", "capped"]

[routes.tight]
strategy = "chain"
tiers = ["capped", "roomy"]

[routes.best]
strategy = "race"
candidates = ["small", "big"]
cancel_on_perfect = false
budget_tokens = 100000000
confirm_threshold_tokens = 100000000

[routes.hedge]
strategy = "race"
mode = "first"
candidates = ["small", "big"]
budget_tokens = 100000000
confirm_threshold_tokens = 100000000

[routes.council]
strategy = "judge"
panel = ["small", "big"]
synthesis = "syn"
default = "big"
min_panel = 2
"#;

struct World {
    mock: Srv,
    gw: Srv,
}

fn world() -> World {
    let mock = Srv::mock(MOCK);
    let gw = Srv::gateway(&front_of(&mock.v1(), &["small", "big", "syn"], ROUTES));
    World { mock, gw }
}

impl World {
    /// The chat requests the mock received for `model`.
    async fn asked(&self, model: &str) -> usize {
        self.mock.asked(model).await.len()
    }
}

fn with_text(model: &str, text: &str, stream: bool) -> Value {
    if stream {
        chat_stream(model, text)
    } else {
        chat(model, text)
    }
}

/// The answer's text, whole or streamed.
fn said(r: &Resp) -> String {
    if r.text.starts_with('{') {
        return r.json()["choices"][0]["message"]["content"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
    }
    r.data_events()
        .iter()
        .filter_map(|d| serde_json::from_str::<Value>(d).ok())
        .filter_map(|v| {
            v["choices"][0]["delta"]["content"]
                .as_str()
                .map(str::to_owned)
        })
        .collect()
}

/// A 400 `context_length_exceeded` naming the window.
fn assert_too_long(r: &Resp, window: u64) -> Value {
    assert_eq!(r.status, 400, "{}", r.text);
    let e = r.json()["error"].clone();
    assert_eq!(e["code"], "context_length_exceeded", "{e}");
    assert_eq!(e["type"], "invalid_request_error", "{e}");
    assert_eq!(e["param"], "messages", "{e}");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.contains(&format!("maximum context length is {window} tokens"))
            && msg.contains("the request needs about"),
        "{msg}"
    );
    e
}

#[tokio::test]
async fn a_passthrough_too_long_is_refused_before_any_call_whole_and_streamed() {
    let w = world();
    for stream in [false, true] {
        let r = post(&w.gw.base, &with_text("small", &long(), stream)).await;
        assert_too_long(&r, 512);
    }
    // Nothing reached the server; a request that fits still does.
    assert_eq!(w.asked("small").await, 0);
    for stream in [false, true] {
        let r = post(&w.gw.base, &with_text("small", &mid(), stream)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(said(&r), "from small", "{}", r.text);
    }
    assert_eq!(w.asked("small").await, 2);
    let ev = w.gw.events_of(&["context_window_exceeded"], 2).await;
    assert_eq!(ev[0]["model"], "small");
    assert_eq!(ev[0]["role"], "direct");
    assert_eq!(ev[0]["context_window"], 512);
    assert_eq!(ev[0]["window_source"], "server");
    assert!(ev[0]["needed_tokens"].as_u64().unwrap() > 2000, "{}", ev[0]);
}

#[tokio::test]
async fn a_chain_skips_a_tier_too_small_and_says_why() {
    let w = world();
    for stream in [false, true] {
        let r = post(&w.gw.base, &with_text("ladder", &long(), stream)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(said(&r), "from big", "{}", r.text);
        assert_eq!(r.header("x-conclave-served-by"), Some("big"));
    }
    assert_eq!(w.asked("small").await, 0);
    assert_eq!(w.asked("big").await, 2);
    let ev = w.gw.events_of(&["context_window_exceeded"], 2).await;
    assert!(
        ev.iter()
            .all(|e| e["model"] == "small" && e["role"] == "tier"),
        "{ev:?}"
    );

    // Every tier too small: a 400 listing each with its reason, not a 502.
    let r = post(&w.gw.base, &chat("cramped", &long())).await;
    let e = assert_too_long(&r, 512);
    let attempts = e["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{e}");
    assert_eq!(attempts[0]["model"], "small");
    assert_eq!(attempts[0]["verdict"], "skipped");
    let why = attempts[0]["feedback"].as_str().unwrap();
    assert!(why.starts_with("context window 512 < ~"), "{why}");
    assert_eq!(attempts[1]["model"], "capped");
    assert!(
        attempts[1]["feedback"]
            .as_str()
            .unwrap()
            .starts_with("context window 300 < ~"),
        "{e}"
    );
    assert_eq!(w.asked("small").await + w.asked("big").await, 2);

    // One tier skipped, the other called and refused by its server as too
    // long (its config claims a larger window): still a 400.
    let r = post(&w.gw.base, &chat("tight", &long())).await;
    let e = assert_too_long(&r, 300);
    let attempts = e["attempts"].as_array().unwrap();
    assert_eq!(attempts[0]["verdict"], "skipped", "{e}");
    assert_eq!(attempts[1]["model"], "roomy", "{e}");
    assert_eq!(attempts[1]["verdict"], "error", "{e}");
    assert_eq!(w.asked("small").await, 1, "roomy is small upstream");
}

#[tokio::test]
async fn races_hedges_and_panels_skip_members_too_small() {
    let w = world();
    // Learned first, so that the skip is immediate (a hedge cancels a
    // candidate still learning its window once another has won).
    assert_too_long(&post(&w.gw.base, &chat("small", &long())).await, 512);
    for route in ["best", "hedge"] {
        let r = post(&w.gw.base, &chat(route, &long())).await;
        assert_eq!(r.status, 200, "{route}: {}", r.text);
        assert_eq!(said(&r), "from big", "{route}: {}", r.text);
    }
    let r = post(&w.gw.base, &chat_stream("hedge", &long())).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(said(&r), "from big", "{}", r.text);
    let rows = w.gw.events_of(&["race_candidate"], 6).await;
    let small: Vec<&Value> = rows.iter().filter(|e| e["model"] == "small").collect();
    assert_eq!(small.len(), 3, "{rows:?}");
    for e in small {
        assert_eq!(e["verdict"], "skipped", "{e}");
        assert!(
            e["reason"]
                .as_str()
                .unwrap()
                .starts_with("context window 512 < ~"),
            "{e}"
        );
    }

    // A judge whose panel loses a member falls back, saying why.
    let r = post(&w.gw.base, &chat("council", &long())).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(said(&r), "from big", "{}", r.text);
    let fb = w.gw.events_of(&["judge_fallback"], 1).await;
    let why = fb[0]["reason"].as_str().unwrap();
    assert!(
        why.contains("small: skipped, context window 512 < ~"),
        "{why}"
    );
    assert_eq!(w.asked("small").await, 0);
    // Every race and hedge, plus the panel and the default.
    assert_eq!(w.asked("big").await, 5);
}

#[tokio::test]
async fn the_config_window_wins_over_the_servers() {
    let w = world();
    // `capped` is `big` (no window the server reports) capped at 300: a
    // markdown table estimated under 300 that the server counts at more.
    let table = "| alpha | b |\n".repeat(70);
    let r = post(&w.gw.base, &chat("capped", &table)).await;
    assert_too_long(&r, 300);
    assert_eq!(w.asked("big").await, 0);
    // `roomy` is `small` (512 on the server) said to hold 100,000: the
    // gateway sends it, and the server refuses it itself.
    let r = post(&w.gw.base, &chat("roomy", &long())).await;
    assert_eq!(r.status, 400, "{}", r.text);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("upstream `up` rejected the request"), "{msg}");
    assert_eq!(w.asked("small").await, 1);
    let ev = w.gw.events_of(&["context_window_exceeded"], 1).await;
    assert_eq!(ev[0]["window_source"], "config");
}

/// Requests around the window, in several shapes, counted by the mock as
/// its template and tokenizer do (not as conclave estimates): the gateway
/// refuses exactly what the server would refuse (on the server's own
/// count) and sends everything else, which the server answers.
#[tokio::test]
async fn near_the_window_the_gateway_refuses_what_the_server_would() {
    let w = world();
    let shapes = |text: &str| -> Vec<Value> {
        vec![
            json!([{"role": "user", "content": text}]),
            json!([{"role": "system", "content": "You are a helpful assistant."},
                   {"role": "user", "content": text}]),
            json!([{"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi!"},
                   {"role": "user", "content": "what is 2+2?"}, {"role": "assistant", "content": "4"},
                   {"role": "user", "content": text}]),
        ]
    };
    let (mut refused, mut answered) = (0, 0);
    for k in (140..185).step_by(3) {
        // Estimated a third over what the server counts, as English is.
        let text = "alpha bravo cat ".repeat(k);
        for messages in shapes(&text) {
            let body = json!({"model": "small", "messages": messages});
            let fits = conclave::mock::context::prompt_tokens(&body) < 512;
            let before = w.mock.received().await.len();
            let r = post(&w.gw.base, &body).await;
            let sent = w.mock.received().await.len() > before;
            match (r.status, sent, fits) {
                (200, true, true) => answered += 1,
                (400, false, false) => refused += 1,
                (s, sent, fits) => {
                    panic!("k {k}: status {s}, sent {sent}, fits {fits}: {}", r.text)
                }
            }
        }
    }
    // The sweep crosses the window for every shape.
    assert!(refused > 10 && answered > 10, "{refused} {answered}");
}

#[tokio::test]
async fn the_mock_plays_llama_cpp_python_and_llama_cpp() {
    let mock = Srv::mock(MOCK);
    let http = client();
    // Whole: llama-cpp-python's 400, in its words.
    let mut body = chat("small", &long());
    body["max_tokens"] = json!(16);
    let r = post(&mock.base, &body).await;
    assert_eq!(r.status, 400);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "context_length_exceeded");
    assert_eq!(e["param"], "messages");
    let msg = e["message"].as_str().unwrap();
    assert!(
        msg.starts_with(
            "This model's maximum context length is 512 tokens. However, you requested "
        ) && msg.contains(" in the messages, 16 in the completion)."),
        "{msg}"
    );
    // Streamed: an empty 200 event stream.
    let r = post(&mock.base, &chat_stream("small", &long())).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    assert_eq!(r.text, "");
    // llama.cpp's /props, per model in router mode; the first window
    // without `?model=`; none for a model without one.
    let p = get_json(&http, &mock.url("/props")).await;
    assert_eq!(p["default_generation_settings"]["n_ctx"], 512);
    let p = get_json(&http, &mock.url("/props?model=small")).await;
    assert_eq!(p["default_generation_settings"]["n_ctx"], 512);
    let r = http.get(mock.url("/props?model=big")).send().await.unwrap();
    assert_eq!(r.status(), 404);
    // /v1/models carries only the training length, as llama-server does.
    let m = get_json(&http, &mock.url("/v1/models")).await;
    let small = m["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["id"] == "small")
        .unwrap();
    assert_eq!(small["meta"]["n_ctx_train"], 2048);
    assert!(small.get("max_model_len").is_none());
}

/// llama-swap: `/upstream/<model>/props` is asked only once the model is
/// loaded (asking a cold model would load it).
#[tokio::test]
async fn behind_llama_swap_only_a_warm_models_props_are_asked() {
    let quirks = "quirks = [\"empty_stream_on_overflow\"]";
    let mock = Srv::mock(&MOCK.replace(quirks, &format!("{quirks}\nswap_delay = \"100ms\"")));
    let gw = Srv::gateway(&format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n[upstreams.up]\nkind = \"openai\"\n\
         base_url = \"{}\"\nllama_swap = \"{}\"\nprobe_cache = \"50ms\"\ntimeout = \"5s\"\n\n\
         [models.small]\nupstream = \"up\"\n\n[models.big]\nupstream = \"up\"\n",
        mock.v1(),
        mock.base
    ));
    // `big` loaded; `small` cold: its window is not asked, so the long
    // request goes to the server, which loads `small` and refuses it.
    let r = post(&gw.base, &chat("big", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let r = post(&gw.base, &chat("small", &long())).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("rejected the request"), "{}", r.text);
    let received = |m: &Srv| {
        let m = m.url("/mock/requests");
        async move {
            let v = get_json(&client(), &m).await;
            v["requests"].as_array().unwrap().len()
        }
    };
    assert_eq!(received(&mock).await, 2);
    assert_eq!(mock.stats().await["loads"], 2);
    // Now warm (once the probe has seen it): learned from
    // /upstream/small/props, refused before the call.
    let warm = r#"conclave_llama_swap_warm{upstream="up",model="small"} 1"#;
    assert!(
        eventually(5, || async { gw.metrics().await.contains(warm) }).await,
        "the probe never saw small loaded:\n{}",
        gw.metrics().await
    );
    let r = post(&gw.base, &chat("small", &long())).await;
    assert_too_long(&r, 512);
    assert_eq!(received(&mock).await, 2);
    assert_eq!(mock.stats().await["loads"], 2);
}

/// A vLLM-like server: `/v1/models` says `max_model_len`; chat calls are
/// counted.
#[derive(Default)]
struct Vllm {
    chats: AtomicUsize,
    props: AtomicUsize,
}

async fn vllm() -> (String, Arc<Vllm>) {
    let state = Arc::new(Vllm::default());
    let app = Router::new()
        .route(
            "/v1/models",
            routing::get(|| async {
                axum::Json(json!({"object": "list", "data": [
                    {"id": "qwen", "object": "model", "owned_by": "vllm", "max_model_len": 1024},
                    {"id": "other", "object": "model", "owned_by": "vllm", "max_model_len": 9}]}))
            }),
        )
        .route(
            "/props",
            routing::get(|State(s): State<Arc<Vllm>>| async move {
                s.props.fetch_add(1, Ordering::SeqCst);
                axum::http::StatusCode::NOT_FOUND
            }),
        )
        .route(
            "/v1/chat/completions",
            routing::post(|State(s): State<Arc<Vllm>>| async move {
                s.chats.fetch_add(1, Ordering::SeqCst);
                axum::Json(json!({"id": "x", "object": "chat.completion", "created": 1, "model": "qwen",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "from vllm"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}}))
            }),
        )
        .with_state(state.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), state)
}

#[tokio::test]
async fn a_window_is_learned_from_vllms_max_model_len() {
    let (v1, server) = vllm().await;
    let gw = Srv::gateway(&front_of(&v1, &["qwen"], ""));
    let r = post(&gw.base, &chat("qwen", &long())).await;
    assert_too_long(&r, 1024);
    assert_eq!(server.chats.load(Ordering::SeqCst), 0);
    let r = post(&gw.base, &chat("qwen", &mid())).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(server.chats.load(Ordering::SeqCst), 1);
    // The list answered: /props was never asked.
    assert_eq!(server.props.load(Ordering::SeqCst), 0);
}

/// A llama-cpp-python-like server (window 512, reported nowhere but in its
/// 400): a too-long whole request gets its 400, a too-long stream an empty
/// 200 event stream. Chat calls are counted.
async fn llama_cpp_python() -> (String, Arc<AtomicUsize>) {
    let chats = Arc::new(AtomicUsize::new(0));
    let app = Router::new()
        .route(
            "/v1/models",
            routing::get(|| async {
                axum::Json(json!({"object": "list", "data": [{"id": "smol", "object": "model", "owned_by": "me", "permissions": []}]}))
            }),
        )
        .route(
            "/v1/chat/completions",
            routing::post(|State(n): State<Arc<AtomicUsize>>, body: axum::body::Bytes| async move {
                use axum::response::IntoResponse;
                n.fetch_add(1, Ordering::SeqCst);
                let v: Value = serde_json::from_slice(&body).unwrap();
                let bytes = v["messages"][0]["content"].as_str().unwrap_or_default().len();
                let prompt = bytes.div_ceil(4) + 29;
                if prompt >= 512 {
                    if v["stream"] == true {
                        return ([("content-type", "text/event-stream; charset=utf-8")], "").into_response();
                    }
                    let message = format!("This model's maximum context length is 512 tokens. However, you requested {prompt} tokens ({prompt} in the messages, None in the completion). Please reduce the length of the messages or completion.");
                    let e = json!({"error": {"message": message, "type": "invalid_request_error", "param": "messages", "code": "context_length_exceeded"}});
                    return (axum::http::StatusCode::BAD_REQUEST, axum::Json(e)).into_response();
                }
                axum::Json(json!({"id": "x", "object": "chat.completion", "created": 1, "model": "smol",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "from smol"}, "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": prompt, "completion_tokens": 2, "total_tokens": prompt + 2}})).into_response()
            }),
        )
        .with_state(chats.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), chats)
}

/// llama-cpp-python says its window only in its 400: once heard, a
/// too-long stream is refused before it is sent (instead of the server's
/// empty 200 stream, a 502 to the client).
#[tokio::test]
async fn a_window_stated_in_a_servers_error_is_kept() {
    let (v1, chats) = llama_cpp_python().await;
    let gw = Srv::gateway(&front_of(&v1, &["smol"], ""));
    let r = post(&gw.base, &chat("smol", &long())).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(
        r.text.contains("upstream `up` rejected the request"),
        "{}",
        r.text
    );
    assert_eq!(chats.load(Ordering::SeqCst), 1);
    for stream in [true, false] {
        let r = post(&gw.base, &with_text("smol", &long(), stream)).await;
        assert_too_long(&r, 512);
    }
    assert_eq!(chats.load(Ordering::SeqCst), 1);
    // A request that fits still goes.
    let r = post(&gw.base, &chat("smol", &mid())).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(chats.load(Ordering::SeqCst), 2);
    let ev = gw.events_of(&["context_window_exceeded"], 2).await;
    assert_eq!(ev[0]["window_source"], "error");
}
