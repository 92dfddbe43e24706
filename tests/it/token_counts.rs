//! Exact token counts near a context window: an in-process gateway in
//! front of the mock server over HTTP, playing llama.cpp's server
//! (`/apply-template` and `/tokenize`), vLLM (`/tokenize` with `messages`)
//! or llama-cpp-python (`/extras/tokenize/count`). The mock counts tokens
//! by its own rule (a word is one token, a symbol one), not conclave's
//! bytes / 4: prose near the window that the estimate would refuse goes
//! through on the server's count, and a markdown table the estimate would
//! pass is refused on it, without a chat call. The count is asked once per
//! request and server, and through the lane.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use common::Resp;
use common::inproc::Gw;
use conclave::mock::context::{Tokenizer, prompt_tokens};
use conclave::mock::{Behavior, Quirks, Simulator, SwapSim};
use conclave::wire::ChatRequest;
use indexmap::IndexMap;
use serde_json::{Value, json};

const WINDOW: u64 = 2048;

/// The mock serving `tok`'s endpoints, its model `small` with a
/// [`WINDOW`]-token window; its `/v1` base.
async fn server(tok: Tokenizer) -> (String, Arc<Simulator>) {
    let small: Behavior = serde_json::from_value(json!({"context_window": WINDOW})).unwrap();
    let models: IndexMap<String, Behavior> = [("small".to_owned(), small)].into_iter().collect();
    let sim =
        Simulator::new(models, SwapSim::default(), Quirks::default(), false).with_tokenizer(tok);
    let sim = Arc::new(sim);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = conclave::mock::server::router(sim.clone());
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), sim)
}

/// A gateway whose model `small` is the server's (`extra` lines go on the
/// model), and a chain `ladder` whose two tiers are it.
fn gateway(v1: &str, extra: &str) -> Gw {
    Gw::start(&format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"

[upstreams.local]
kind = "openai"
base_url = "{v1}"
timeout = "10s"

[models.small]
upstream = "local"
{extra}

[models.small-again]
upstream = "local"
model = "small"
{extra}

[routes.ladder]
strategy = "chain"
tiers = ["small", "small-again"]
"#
    ))
}

fn chat(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

/// conclave's estimate of a request's input.
fn estimate(body: &Value) -> u64 {
    serde_json::from_value::<ChatRequest>(body.clone())
        .unwrap()
        .billable()
        .input
}

/// English prose the estimate puts at 1.2 windows: the server counts far
/// fewer.
fn prose(model: &str) -> Value {
    let body = chat(model, &"alpha bravo charlie delta ".repeat(372));
    let (e, n) = (estimate(&body), prompt_tokens(&body));
    assert!(e > WINDOW && e * 10 < WINDOW * 13, "estimate {e}");
    assert!(n < WINDOW * 8 / 10, "counted {n}");
    body
}

/// A markdown table the estimate puts at 0.85 of the window: the server
/// counts more than the window.
fn table(model: &str) -> Value {
    let body = chat(model, &"| alpha | b |\n".repeat(485));
    let (e, n) = (estimate(&body), prompt_tokens(&body));
    assert!(e * 100 > WINDOW * 70 && e < WINDOW, "estimate {e}");
    assert!(n > WINDOW, "counted {n}");
    body
}

/// Far beyond any error of the estimate: 1.6 windows.
fn huge(model: &str) -> Value {
    let body = chat(model, &"alpha bravo charlie delta ".repeat(500));
    assert!(estimate(&body) * 10 > WINDOW * 15);
    body
}

fn counts(sim: &Simulator) -> u64 {
    sim.stats.counts.load(Ordering::Relaxed)
}

fn chats(sim: &Simulator) -> usize {
    sim.recorded().len()
}

fn assert_too_long(r: &Resp) {
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(
        r.json()["error"]["code"],
        "context_length_exceeded",
        "{}",
        r.text
    );
}

/// The three answers every counting server gives: prose through, a table
/// refused on the count, a huge prompt refused without one.
async fn plays(tok: Tokenizer, extra: &str) {
    let (v1, sim) = server(tok).await;
    let gw = gateway(&v1, extra);

    let r = gw.chat(&prose("small")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!((counts(&sim), chats(&sim)), (1, 1));
    // The same request again (a client's retry): the count is kept.
    let r = gw.chat(&prose("small")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!((counts(&sim), chats(&sim)), (1, 2));

    let r = gw.chat(&table("small")).await;
    assert_too_long(&r);
    assert_eq!((counts(&sim), chats(&sim)), (2, 2), "no chat call");
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(msg.contains("2048 tokens"), "{msg}");

    let r = gw.chat(&huge("small")).await;
    assert_too_long(&r);
    assert_eq!((counts(&sim), chats(&sim)), (2, 2), "no count, no chat");

    let ev = gw.events(&["context_window_exceeded"]).await;
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0]["count"], "exact");
    assert!(ev[0]["needed_tokens"].as_u64().unwrap() > WINDOW);
    assert_eq!(ev[1]["count"], "estimate");
    assert_eq!(ev[0]["context_window"], WINDOW);
}

#[tokio::test]
async fn llama_cpp_counts_the_rendered_prompt() {
    // The window learned from `/props`.
    plays(Tokenizer::LlamaCpp, "").await;
}

#[tokio::test]
async fn vllm_counts_the_chat() {
    plays(Tokenizer::Vllm, &format!("context_window = {WINDOW}")).await;
}

#[tokio::test]
async fn llama_cpp_python_counts_the_text() {
    plays(Tokenizer::LlamaCppPython, "").await;
}

#[tokio::test]
async fn without_a_count_a_request_near_the_window_goes_to_the_server() {
    let (v1, sim) = server(Tokenizer::None).await;
    let gw = gateway(&v1, "");
    // Prose the estimate would refuse: the server takes it.
    let r = gw.chat(&prose("small")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // A table the server refuses: its own 400, passed on.
    let r = gw.chat(&table("small")).await;
    assert_too_long(&r);
    assert_eq!((counts(&sim), chats(&sim)), (0, 2));
    // Beyond 1.5 windows: refused without a call.
    let r = gw.chat(&huge("small")).await;
    assert_too_long(&r);
    assert_eq!(chats(&sim), 2);
}

#[tokio::test]
async fn a_chains_tiers_on_one_server_count_once() {
    let (v1, sim) = server(Tokenizer::LlamaCpp).await;
    let gw = gateway(&v1, "");
    let r = gw.chat(&table("ladder")).await;
    assert_too_long(&r);
    assert_eq!((counts(&sim), chats(&sim)), (1, 0));
    let ev = gw.events(&["context_window_exceeded"]).await;
    assert_eq!(ev.len(), 2, "both tiers skipped: {ev:?}");
    assert!(ev.iter().all(|e| e["count"] == "exact"));
}

/// An in-process mock upstream on a local lane of one call at a time
/// (paused time): a count asked while a stream holds the lane waits for
/// it, as a chat call would, so it cannot cut the stream.
#[tokio::test(start_paused = true)]
async fn a_count_waits_for_the_lane() {
    let gw = Gw::start(&format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"

[upstreams.local]
kind = "mock"
lane = "local"
max_concurrency = 1

[upstreams.local.models.small]
context_window = {WINDOW}
tokens_per_second = 10
reply = {{ text = "one two three four five six seven eight nine ten" }}

[models.small]
upstream = "local"
"#
    ));
    let gw = Arc::new(gw);
    let sim = gw.sim("local");
    let slow = {
        let gw = gw.clone();
        tokio::spawn(async move {
            let body = json!({"model": "small", "stream": true,
                              "messages": [{"role": "user", "content": "hi"}]});
            gw.chat(&body).await
        })
    };
    tokio::time::sleep(Duration::from_millis(100)).await;
    let near = {
        let gw = gw.clone();
        tokio::spawn(async move { gw.chat(&prose("small")).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(!slow.is_finished());
    assert_eq!(counts(&sim), 0, "the count waits behind the stream");
    let s = slow.await.unwrap();
    assert_eq!(s.status, 200);
    assert!(s.text.contains("ten"), "{}", s.text);
    let r = near.await.unwrap();
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(counts(&sim), 1);
}

/// Requests a fake server got, by path.
type Hits = Arc<parking_lot::Mutex<std::collections::HashMap<String, usize>>>;

/// A fake server with no `/props`, a `/v1/models` without windows and
/// chat answers of 200, that answers `counts` (path → answer) and
/// Ollama's `/api/show` (`show`, else 404); every request counted by path.
async fn fake(counts: Vec<(&'static str, u16, Value)>, show: Option<Value>) -> (String, Hits) {
    use axum::extract::State;
    use axum::http::{StatusCode, Uri};
    use axum::response::IntoResponse;
    let hits: Hits = Arc::default();
    let app = axum::Router::new()
        .fallback(move |State(hits): State<Hits>, uri: Uri| {
            let (counts, show) = (counts.clone(), show.clone());
            async move {
                let path = uri.path().to_owned();
                *hits.lock().entry(path.clone()).or_default() += 1;
                if path == "/v1/chat/completions" {
                    let done = json!({"id": "x", "object": "chat.completion", "created": 1, "model": "m",
                        "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}});
                    return axum::Json(done).into_response();
                }
                if path == "/v1/models" {
                    let list = json!({"object": "list", "data": [{"id": "small", "object": "model", "owned_by": "library"}]});
                    return axum::Json(list).into_response();
                }
                if path == "/api/show"
                    && let Some(s) = show
                {
                    return axum::Json(s).into_response();
                }
                match counts.iter().find(|(p, _, _)| *p == path) {
                    Some((_, status, body)) => {
                        (StatusCode::from_u16(*status).unwrap(), axum::Json(body.clone())).into_response()
                    }
                    None => (StatusCode::NOT_FOUND, axum::Json(json!({"detail": "Not Found"}))).into_response(),
                }
            }
        })
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{addr}/v1"), hits)
}

fn hits(h: &Hits, path: &str) -> usize {
    h.lock().get(path).copied().unwrap_or_default()
}

/// Prose like [`prose`], made different by `n`.
fn prose_n(model: &str, n: usize) -> Value {
    let mut body = prose(model);
    body["messages"][0]["content"] = json!(format!(
        "{n} {}",
        body["messages"][0]["content"].as_str().unwrap()
    ));
    body
}

#[tokio::test]
async fn the_server_kind_that_counted_is_asked_straight_away_and_one_without_counts_is_left_alone()
{
    // llama-cpp-python: only `/extras/tokenize/count`, counting 1,000.
    let (v1, h) = fake(
        vec![("/extras/tokenize/count", 200, json!({"count": 1000}))],
        None,
    )
    .await;
    let gw = gateway(&v1, &format!("context_window = {WINDOW}"));
    for n in 0..3 {
        let r = gw.chat(&prose_n("small", n)).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    assert_eq!(hits(&h, "/extras/tokenize/count"), 3);
    assert_eq!(
        hits(&h, "/apply-template"),
        1,
        "tried once, then left alone"
    );
    assert_eq!(hits(&h, "/tokenize"), 1);
    assert_eq!(hits(&h, "/v1/chat/completions"), 3);

    // A server with no count at all (Ollama, a cloud API): asked once in
    // ten minutes, its requests let through.
    let (v1, h) = fake(Vec::new(), None).await;
    let gw = gateway(&v1, &format!("context_window = {WINDOW}"));
    for n in 0..3 {
        let r = gw.chat(&prose_n("small", n)).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    assert_eq!(hits(&h, "/apply-template"), 1);
    assert_eq!(hits(&h, "/extras/tokenize/count"), 1);
    assert_eq!(hits(&h, "/v1/chat/completions"), 3);
}

#[tokio::test]
async fn absurd_or_failed_counts_refuse_nothing() {
    for counts in [
        // A count beyond any window: no count.
        vec![(
            "/tokenize",
            200,
            json!({"count": 1_000_000_000_000u64, "max_model_len": 2048}),
        )],
        // A failing server: no count, asked again next time.
        vec![("/apply-template", 500, json!({"error": "boom"}))],
        // llama.cpp's answer to a chat body it cannot read: no count.
        vec![("/tokenize", 200, json!({"tokens": []}))],
    ] {
        let (v1, h) = fake(counts, None).await;
        let gw = gateway(&v1, &format!("context_window = {WINDOW}"));
        let r = gw.chat(&table("small")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(hits(&h, "/v1/chat/completions"), 1);
    }
}

#[tokio::test]
async fn ollamas_window_is_read_from_api_show() {
    let show = json!({"parameters": "num_ctx                        2048\nstop \"<|im_end|>\"",
                      "model_info": {"general.architecture": "qwen2", "qwen2.context_length": 32768}});
    let (v1, h) = fake(Vec::new(), Some(show)).await;
    let gw = gateway(&v1, "");
    let r = gw.chat(&huge("small")).await;
    assert_too_long(&r);
    assert_eq!(hits(&h, "/api/show"), 1);
    assert_eq!(hits(&h, "/v1/chat/completions"), 0);
    let ev = gw.events(&["context_window_exceeded"]).await;
    assert_eq!(ev[0]["context_window"], WINDOW);
    assert_eq!(ev[0]["window_source"], "server");
    // Kept: not asked again.
    let r = gw.chat(&chat("small", "hello")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(hits(&h, "/api/show"), 1);
}
