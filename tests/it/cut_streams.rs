//! A stream the server cut (it ended without a `finish_reason`, or before
//! `response.completed` / `message_stop`) and a whole answer without a
//! `finish_reason` are never passed off as complete answers: before the
//! answer began they are retried, after it the client gets an error
//! event, and no such attempt is recorded `ok`. A local lane's default
//! concurrency follows its server: one call at a time to a
//! llama-cpp-python, which cuts the stream in flight when another request
//! arrives (the mock's `interrupts_on_new_request`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::response::IntoResponse;
use common::inproc::Gw;
use common::*;
use serde_json::{Value, json};

/// One SSE event with a name.
fn event(name: &str, data: &Value) -> String {
    format!("event: {name}\ndata: {data}\n\n")
}

fn chunk(delta: Value) -> String {
    let c = json!({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                   "choices": [{"index": 0, "delta": delta, "finish_reason": null}]});
    format!("data: {c}\n\n")
}

const DONE: &str = "data: [DONE]\n\n";

/// A server whose answers end early, as `model` says, counting calls:
/// chat `null-finish` (a whole answer with `finish_reason: null`),
/// `absent-finish` (none at all), `role-then-done` (a stream of a role
/// delta and `[DONE]`), `text-then-done` (some text, then `[DONE]`);
/// Responses and Messages streams that send one delta, then `[DONE]`.
async fn upstream() -> (String, Arc<AtomicUsize>) {
    let (chat, calls) = counted_chat(|req| {
        let sse = |s: String| ([("content-type", "text/event-stream")], s).into_response();
        let message = json!({"role": "assistant", "content": "Le Marais is the capital of"});
        match req["model"].as_str().unwrap_or("") {
            "null-finish" => axum::Json(json!({"id": "c1", "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": null}]}))
            .into_response(),
            "absent-finish" => axum::Json(json!({"id": "c1", "object": "chat.completion",
                "choices": [{"index": 0, "message": message}]}))
            .into_response(),
            "role-then-done" => sse(chunk(json!({"role": "assistant", "content": ""})) + DONE),
            _ => sse(chunk(json!({"role": "assistant", "content": ""}))
                + &chunk(json!({"content": "Le Marais is the capital of"}))
                + DONE),
        }
    });
    let responses = || async {
        let resp = json!({"id": "resp_1", "object": "response", "status": "in_progress",
                          "model": "m", "output": []});
        let mut out = event(
            "response.created",
            &json!({"type": "response.created", "sequence_number": 0, "response": resp}),
        );
        out.push_str(&event(
            "response.output_text.delta",
            &json!({"type": "response.output_text.delta", "sequence_number": 1, "item_id": "msg_1",
                    "output_index": 0, "content_index": 0, "delta": "hi"}),
        ));
        out.push_str(DONE);
        ([("content-type", "text/event-stream")], out).into_response()
    };
    let messages = || async {
        let start = json!({"type": "message_start", "message": {"id": "msg_1", "type": "message",
            "role": "assistant", "model": "m", "content": [], "stop_reason": null,
            "usage": {"input_tokens": 5, "output_tokens": 1}}});
        let mut out = event("message_start", &start);
        out.push_str(&event(
            "content_block_start",
            &json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
        ));
        out.push_str(&event(
            "content_block_delta",
            &json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "hi"}}),
        ));
        out.push_str(DONE);
        ([("content-type", "text/event-stream")], out).into_response()
    };
    let app = axum::Router::new()
        .route("/v1/chat/completions", chat)
        .route("/v1/responses", axum::routing::post(responses))
        .route("/v1/messages", axum::routing::post(messages));
    (serve_app(app).await, calls)
}

fn gateway(base: &str) -> Gw {
    let mut toml = format!(
        "[upstreams.oai]\nkind = \"openai\"\nbase_url = \"{base}/v1\"\napi_key_env = \"OAI_KEY\"\nresponses = true\n\
         [upstreams.ant]\nkind = \"anthropic\"\nbase_url = \"{base}\"\napi_key_env = \"ANT_KEY\"\n\
         [models.ant-early]\nupstream = \"ant\"\nmodel = \"early\"\n\
         [server]\nevent_log = \"{{dir}}/events.jsonl\"\n\
         [upstreams.steady]\nkind = \"mock\"\n\
         [upstreams.steady.models.heir]\nreply = {{ text = \"Paris.\" }}\n\
         [models.heir]\nupstream = \"steady\"\n\
         [routes.story]\nstrategy = \"chain\"\ntiers = [\"oai-text-then-done\", \"heir\"]\n\
         midstream_failover = true\nretry_budget = {{ ratio = 1.0, min = 20 }}\n"
    );
    for m in [
        "null-finish",
        "absent-finish",
        "role-then-done",
        "text-then-done",
        "early",
    ] {
        toml.push_str(&format!(
            "[models.oai-{m}]\nupstream = \"oai\"\nmodel = \"{m}\"\n"
        ));
    }
    Gw::start_with(
        &toml,
        &[("OAI_KEY", "sk-test-oai"), ("ANT_KEY", "sk-ant-test")],
        std::time::SystemTime::now(),
    )
}

/// The `error` object of the last data event of a stream.
fn last_error(r: &Resp) -> Value {
    let ev = r.data_events();
    let last: Value = ev
        .last()
        .and_then(|e| serde_json::from_str(e).ok())
        .unwrap_or(Value::Null);
    last.get("error").cloned().unwrap_or(last)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_without_a_finish_reason_are_cuts_retried_before_they_begin() {
    let (base, calls) = upstream().await;
    let gw = gateway(&base);
    // Whole answers whose choice did not finish: a cut, retried once (the
    // default `retries`), then a 502 `upstream_stream_cut`.
    for m in ["null-finish", "absent-finish", "role-then-done"] {
        let before = calls.load(Ordering::SeqCst);
        let body = if m == "role-then-done" {
            chat_stream(&format!("oai-{m}"), "hi")
        } else {
            chat(&format!("oai-{m}"), "hi")
        };
        let r = gw.chat(&body).await;
        assert_eq!(r.status, 502, "{m}: {}", r.text);
        assert_eq!(
            r.json()["error"]["code"],
            "upstream_stream_cut",
            "{m}: {}",
            r.text
        );
        assert_eq!(
            calls.load(Ordering::SeqCst) - before,
            2,
            "{m}: retried once"
        );
    }
    // Text went out, then `[DONE]` without a finish_reason: the client's
    // stream ends with an error event, never `[DONE]`.
    let r = gw.chat(&chat_stream("oai-text-then-done", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.text.contains("Le Marais is the capital of"), "{}", r.text);
    assert!(!r.text.contains("[DONE]"), "{}", r.text);
    assert_eq!(last_error(&r)["code"], "upstream_stream_cut", "{}", r.text);

    // No attempt of any of these is `ok`.
    let attempts = gw.events(&["attempt"]).await;
    assert!(attempts.len() >= 7, "{attempts:?}");
    for a in &attempts {
        assert_eq!(a["verdict"], "error", "{a}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_cut_after_its_first_token_fails_over_mid_stream() {
    let (base, _) = upstream().await;
    let gw = gateway(&base);
    let r = gw.chat(&chat_stream("story", "hi")).await;
    assert!(whole(&r), "{} {}", r.status, r.text);
    assert!(r.text.contains("Le Marais is the capital of"), "{}", r.text);
    assert!(r.text.contains("Paris."), "{}", r.text);
    let events = gw.events(&["midstream_failover", "attempt"]).await;
    assert!(
        events.iter().any(|e| e["event"] == "midstream_failover"),
        "{events:?}"
    );
    let cut = events
        .iter()
        .find(|e| e["event"] == "attempt" && e["model"] == "oai-text-then-done")
        .unwrap();
    assert_ne!(cut["verdict"], "ok", "{cut}");
    assert_ne!(cut["verdict"], "accept", "{cut}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_streams_that_end_before_their_last_event_are_cuts() {
    let (base, _) = upstream().await;
    let gw = gateway(&base);
    let r = gw
        .post_with(
            "/v1/responses",
            &json!({"model": "oai-early", "stream": true, "store": false, "input": "hi"}),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("event: response.completed"), "{}", r.text);
    assert!(r.text.contains("event: error"), "{}", r.text);
    assert!(r.text.contains("upstream_stream_cut"), "{}", r.text);

    let r = gw
        .post_with(
            "/v1/messages",
            &json!({"model": "ant-early", "stream": true, "max_tokens": 64,
                    "messages": [{"role": "user", "content": "hi"}]}),
            &[],
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(!r.text.contains("event: message_stop"), "{}", r.text);
    assert!(r.text.contains("event: error"), "{}", r.text);

    let attempts = gw.events(&["attempt"]).await;
    assert_eq!(attempts.len(), 2, "{attempts:?}");
    for a in &attempts {
        assert_eq!(a["verdict"], "error", "{a}");
    }
}

/// A local mock that plays llama-cpp-python's `interrupt_requests`: a
/// slow streamed answer, `extra` lane settings.
fn interrupting(extra: &str) -> String {
    format!(
        r#"
[upstreams.local]
kind = "mock"
lane = "local"
quirks = ["interrupts_on_new_request"]
{extra}

[upstreams.local.models.small]
reply = {{ text = "{}" }}
ttft = "20ms"
tokens_per_second = 50
"#,
        "word ".repeat(20).trim_end()
    )
}

/// The mock as the gateway's own upstream, with an event log.
fn in_gateway(mock: &str) -> String {
    format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n{mock}\n[models.small]\nupstream = \"local\"\n"
    )
}

/// Four streamed requests sent together; each response.
async fn four_at_once(gw: &Gw) -> Vec<Resp> {
    let body = chat_stream("small", "hello");
    let one = || gw.chat(&body);
    let (a, b, c, d) = tokio::join!(one(), one(), one(), one());
    vec![a, b, c, d]
}

/// Whether a streamed response is a whole answer: a `finish_reason`, then
/// `[DONE]`.
fn whole(r: &Resp) -> bool {
    let ev = r.data_events();
    r.status == 200
        && ev.last().map(String::as_str) == Some("[DONE]")
        && ev.iter().any(|e| {
            serde_json::from_str::<Value>(e)
                .is_ok_and(|v| v["choices"][0]["finish_reason"].is_string())
        })
}

#[tokio::test(start_paused = true)]
async fn a_cut_stream_is_never_a_clean_answer_when_calls_overlap() {
    // Forced to four calls at once: the quirk cuts streams in flight.
    let gw = Gw::start(&in_gateway(&interrupting("max_concurrency = 4")));
    let rs = four_at_once(&gw).await;
    for r in &rs {
        let cut =
            r.status == 502 || (r.status == 200 && last_error(r)["code"] == "upstream_stream_cut");
        assert!(
            whole(r) || cut,
            "neither whole nor a cut: {} {}",
            r.status,
            r.text
        );
        if r.status == 200 && !whole(r) {
            assert!(!r.text.contains("[DONE]"), "{}", r.text);
        }
    }
    let attempts = gw.events(&["attempt"]).await;
    let failed = attempts.iter().filter(|a| a["verdict"] != "ok").count();
    assert!(failed >= 1, "the quirk cut nothing: {attempts:?}");
    let whole_answers = rs.iter().filter(|r| whole(r)).count();
    let ok = attempts.iter().filter(|a| a["verdict"] == "ok").count();
    assert_eq!(ok, whole_answers, "{attempts:?}");
}

#[tokio::test(start_paused = true)]
async fn a_llama_cpp_python_lane_takes_one_call_at_a_time_by_default() {
    let gw = Gw::start(&in_gateway(&interrupting("")));
    let rs = four_at_once(&gw).await;
    for r in &rs {
        assert!(whole(r), "{} {}", r.status, r.text);
        assert_eq!(r.text.matches("word").count(), 20, "{}", r.text);
    }
    let attempts = gw.events(&["attempt"]).await;
    assert_eq!(attempts.len(), 4, "{attempts:?}");
    assert!(
        attempts.iter().all(|a| a["verdict"] == "ok"),
        "{attempts:?}"
    );
    // Serialized: every call after the first waited for the lane.
    let waited = attempts
        .iter()
        .filter(|a| a["queued_ms"].as_f64().unwrap_or(0.0) > 0.0)
        .count();
    assert_eq!(waited, 3, "{attempts:?}");
}

/// The mock server playing llama-cpp-python over HTTP (no `/props`, models
/// `owned_by` "me") behind an `openai` upstream on a local lane: conclave
/// recognises it and sends one call at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_recognised_llama_cpp_python_over_http_is_served_one_at_a_time() {
    let mock = Srv::mock(&interrupting(""));
    let gw = Srv::gateway(&format!(
        "[upstreams.py]\nkind = \"openai\"\nbase_url = \"{}\"\nlane = \"local\"\n\
         [models.small]\nupstream = \"py\"\nmodel = \"small\"\n",
        mock.v1()
    ));
    let base = gw.url("");
    let body = chat_stream("small", "hello");
    let one = || post(&base, &body);
    let (a, b, c) = tokio::join!(one(), one(), one());
    for r in [a, b, c] {
        assert!(whole(&r), "{} {}", r.status, r.text);
    }
    let stats = mock.stats().await;
    assert_eq!(stats["completed"], 3, "{stats}");
}

/// A server that holds each chat call 150 ms and records how many were in
/// flight at most; `/props` says `total_slots` when `slots` is given (a
/// llama.cpp server; with `listed`, only `/slots` counts them), else 404
/// and an unknown `/v1/models` owner.
async fn slotted(slots: Option<u64>, listed: bool) -> (String, Arc<AtomicUsize>) {
    let (now, most) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let seen = most.clone();
    let chat = move || {
        let (now, most) = (now.clone(), most.clone());
        async move {
            let n = now.fetch_add(1, Ordering::SeqCst) + 1;
            most.fetch_max(n, Ordering::SeqCst);
            tokio::time::sleep(std::time::Duration::from_millis(150)).await;
            now.fetch_sub(1, Ordering::SeqCst);
            axum::Json(
                json!({"id": "c", "object": "chat.completion", "choices": [{"index": 0,
                "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}]}),
            )
        }
    };
    let props = move || async move {
        match slots {
            Some(_) if listed => {
                axum::Json(json!({"default_generation_settings": {"n_ctx": 4096}})).into_response()
            }
            Some(n) => axum::Json(
                json!({"total_slots": n, "default_generation_settings": {"n_ctx": 4096}}),
            )
            .into_response(),
            None => (axum::http::StatusCode::NOT_FOUND, "Not Found").into_response(),
        }
    };
    let models = || async {
        axum::Json(
            json!({"object": "list", "data": [{"id": "m", "object": "model", "owned_by": "someone"}]}),
        )
    };
    let list = move || async move {
        let n = slots.unwrap_or(0);
        axum::Json(Value::Array((0..n).map(|id| json!({"id": id})).collect()))
    };
    let app = axum::Router::new()
        .route("/v1/chat/completions", axum::routing::post(chat))
        .route("/props", axum::routing::get(props))
        .route("/slots", axum::routing::get(list))
        .route("/v1/models", axum::routing::get(models));
    (serve_app(app).await, seen)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_local_lane_takes_the_slots_its_server_says_else_one() {
    for (slots, listed, extra, want) in [
        (Some(2), false, "", 2),
        (Some(3), true, "", 3),
        (None, false, "", 1),
        // Set in the config, it wins over the server.
        (Some(2), false, "max_concurrency = 3\n", 3),
    ] {
        let (base, most) = slotted(slots, listed).await;
        let gw = Gw::start_with(
            &format!(
                "[upstreams.box]\nkind = \"openai\"\nbase_url = \"{base}/v1\"\nlane = \"local\"\n{extra}\
                 [models.m]\nupstream = \"box\"\n"
            ),
            &[],
            std::time::SystemTime::now(),
        );
        let body = chat("m", "hi");
        let one = || gw.chat(&body);
        let rs = tokio::join!(one(), one(), one(), one(), one(), one());
        for r in [rs.0, rs.1, rs.2, rs.3, rs.4, rs.5] {
            assert_eq!(r.status, 200, "{}", r.text);
        }
        assert_eq!(most.load(Ordering::SeqCst), want, "slots {slots:?} {extra}");
    }
}
