//! `strategy = "chain"`, streamed: keep-alives while a tier is verified,
//! then a verbatim replay (its usage counting every call); self-certified tiers stream live; ttft timeouts.
//! The tests that time a stream (held back or live, a first-token
//! timeout) run the same world in-process on paused time.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use common::world::*;
use common::*;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tokio::time::Instant;

// ---------------------------------------------------------------------------
// Streaming a verified chain: keep-alives, then a verbatim replay.
// ---------------------------------------------------------------------------

/// `resp` is `direct` (the tier's own stream) event for event, but for its
/// usage, which counts every call of the request (the verifier's too):
/// more than the tier's own.
fn replayed(resp: &Resp, direct: &Resp) {
    let parse = |r: &Resp| -> Vec<Value> {
        r.data_events()
            .iter()
            .map(|e| serde_json::from_str(e).unwrap_or_else(|_| Value::String(e.clone())))
            .collect()
    };
    let (mut got, mut want) = (parse(resp), parse(direct));
    assert_eq!(got.len(), want.len(), "{}", resp.text);
    for (g, w) in got.iter_mut().zip(want.iter_mut()) {
        let (Some(g), Some(w)) = (g.as_object_mut(), w.as_object_mut()) else {
            continue;
        };
        if let (Some(gu), Some(wu)) = (g.remove("usage"), w.remove("usage")) {
            if wu.is_object() {
                let n = |u: &Value, k: &str| u[k].as_u64().unwrap();
                assert!(
                    n(&gu, "prompt_tokens") > n(&wu, "prompt_tokens"),
                    "{gu} {wu}"
                );
                assert!(n(&gu, "completion_tokens") > n(&wu, "completion_tokens"));
            } else {
                assert_eq!(gu, wu);
            }
        }
    }
    assert_eq!(got, want, "{}", resp.text);
}

/// The keep-alive comments before the first `data:` event, and whether any
/// come after it.
fn keepalives(text: &str) -> (usize, bool) {
    let first = text.find("data:").unwrap_or(text.len());
    (
        text[..first].matches(": keep-alive\n\n").count(),
        text[first..].contains("keep-alive"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_verified_answer_is_replayed_verbatim_after_keepalives() {
    let ka = "keepalive = \"100ms\"";
    let w = world(
        &(r(&["l-good"], Some("v-slow"), ka)
            + &route("esc", &["l-bad", "c-good"], Some("v-slow"), ka)),
    )
    .await;

    for include_usage in [true, false] {
        w.clear().await;
        let mut body = chat_stream("r", "tell me a story about a quiet harbour");
        if include_usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        let resp = w.ask(&body).await;
        assert_eq!(resp.status, 200, "{}", resp.text);
        assert_eq!(resp.header("content-type"), Some("text/event-stream"));
        assert_eq!(resp.header("x-conclave-strategy"), Some("chain"));
        let (before, after) = keepalives(&resp.text);
        assert!(
            before >= 2,
            "want keep-alives while the verifier works:\n{}",
            resp.text
        );
        assert!(
            !after,
            "keep-alive after the replay started:\n{}",
            resp.text
        );

        // The replay is the tier's own stream, event for event: ask the mock
        // again with exactly what the tier was asked.
        let got = w.received().await;
        assert_eq!(w.calls().await, ["l-good", "v-slow"]);
        let mut tier_req = got[0]["body"].clone();
        assert_eq!(tier_req["stream_options"]["include_usage"], true);
        if !include_usage {
            tier_req.as_object_mut().unwrap().remove("stream_options");
        }
        let direct = w.direct(&tier_req).await;
        replayed(&resp, &direct);
        assert!(resp.data_events().len() >= 5, "{}", resp.text);
        assert_eq!(
            streamed_text(&resp.data_events()),
            "GOOD answer from l-good"
        );
        assert_eq!(resp.text.contains("\"usage\""), include_usage);
        // The headers went out before anyone answered: who did comes as
        // a comment just before [DONE].
        assert!(resp.header("x-conclave-served-by").is_none());
        assert!(
            resp.text.ends_with(
                ": x-conclave-served-by: l-good\n: x-conclave-attempts: 2\n\ndata: [DONE]\n\n"
            ),
            "{}",
            resp.text
        );
    }

    // Escalated past the verified tier: keep-alives while judging, then the
    // self-certifying cloud tier streams live, its own events unchanged.
    w.clear().await;
    let mut body = chat_stream("esc", "hello");
    body["stream_options"] = json!({"include_usage": true});
    let resp = w.ask(&body).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert!(keepalives(&resp.text).0 >= 2, "{}", resp.text);
    assert_eq!(w.calls().await, ["l-bad", "v-slow", "c-good"]);
    let tier_req = w.received().await[2]["body"].clone();
    let direct = w.direct(&tier_req).await;
    replayed(&resp, &direct);
    assert!(!resp.text.contains(NEEDS), "{}", resp.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_chain_exhausted_after_keepalives_ends_in_one_error_event() {
    let ka = "keepalive = \"100ms\"";
    let w = world(
        &(r(&["l-bad"], Some("v-slow"), ka)
            + &route("best", &["l-bad"], Some("v-slow"), &format!("{ka}\n{BEST}"))),
    )
    .await;

    let resp = w.ask(&chat_stream("r", "hi")).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert!(keepalives(&resp.text).0 >= 2, "{}", resp.text);
    let events = resp.data_events();
    assert_eq!(events.len(), 1, "{}", resp.text);
    let err: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(err["error"]["code"], "chain_exhausted");
    assert_eq!(err["error"]["attempts"][0]["model"], "l-bad");
    assert_eq!(err["error"]["attempts"][0]["verdict"], "escalate");
    assert_eq!(err["error"]["attempts"][0]["feedback"], NEEDS);
    assert!(!resp.text.contains("[DONE]"));

    // best_attempt: the rejected answer is replayed after the keep-alives.
    w.clear().await;
    let mut body = chat_stream("best", "hi");
    body["stream_options"] = json!({"include_usage": true});
    let resp = w.ask(&body).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert!(keepalives(&resp.text).0 >= 2, "{}", resp.text);
    let tier_req = w.received().await[0]["body"].clone();
    let direct = w.direct(&tier_req).await;
    replayed(&resp, &direct);
    assert!(
        resp.text.contains(": x-conclave-exhausted: true\n"),
        "{}",
        resp.text
    );
}

/// When, after the request was sent, the first `data:` event and the
/// `[DONE]` arrived, reading the in-process gateway's body frame by frame
/// (on the test's clock).
async fn data_timing(gw: &inproc::Gw, body: &Value) -> (u16, Duration, Duration, String) {
    let started = Instant::now();
    let req = Request::builder()
        .method(Method::POST)
        .uri("/v1/chat/completions")
        .header("content-type", "application/json")
        .body(Body::from(body.to_string()))
        .unwrap();
    let r = gw.open(req).await;
    let status = r.status().as_u16();
    let mut body = r.into_body();
    let mut text = String::new();
    let (mut first, mut done) = (None, None);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            text.push_str(&String::from_utf8_lossy(&data));
        }
        if first.is_none() && text.contains("data: ") {
            first = Some(started.elapsed());
        }
        if done.is_none() && text.contains("data: [DONE]") {
            done = Some(started.elapsed());
        }
    }
    let end = started.elapsed();
    (status, first.unwrap_or(end), done.unwrap_or(end), text)
}

/// In-process on paused time: the trickle's pace and the replay are
/// exact, so "held back" and "live" are told apart however busy the
/// machine is.
#[tokio::test(start_paused = true)]
async fn verified_streams_are_held_back_and_self_certified_streams_are_live() {
    // c-trickle / l-trickle: 8 tokens at 20 per second, about 350 ms.
    let gw = inproc::Gw::start(&inproc_toml(
        &(route("held", &["l-trickle"], Some("v"), "")
            + &route("esc", &["l-bad", "c-trickle"], Some("v"), "")
            + &route("fb", &["c-down", "c-trickle"], None, "")),
    ));

    // Verified: nothing until the whole answer is in and accepted, then the
    // replay at once.
    let (status, first, done, text) = data_timing(&gw, &chat_stream("held", "hi")).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        streamed_text(&sse_data(&text)),
        "one two three four five six from l-trickle"
    );
    assert!(
        first >= Duration::from_millis(300),
        "first data after {first:?}"
    );
    assert!(
        done - first < Duration::from_millis(200),
        "the replay took {:?}",
        done - first
    );

    // Self-certifying after an escalation, and a fallback tier: live.
    for route in ["esc", "fb"] {
        let (status, first, done, text) = data_timing(&gw, &chat_stream(route, "hi")).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(
            streamed_text(&sse_data(&text)),
            "one two three four five six from c-trickle"
        );
        assert!(
            done - first >= Duration::from_millis(250),
            "{route}: the answer was not streamed live (first data {first:?}, [DONE] {done:?})"
        );
    }
}

/// A chain nested as a tier verifies its own tiers; a streamed request
/// waiting on that verification gets keep-alives like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nested_verifying_chain_sends_keepalives_while_it_verifies() {
    let w = world(
        &(r(&["inner", "c-good"], None, "")
            + &route(
                "inner",
                &["l-good"],
                Some("v-slow"),
                "keepalive = \"100ms\"",
            )),
    )
    .await;
    let resp = w.ask(&chat_stream("r", "hi")).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert_eq!(
        streamed_text(&resp.data_events()),
        "GOOD answer from l-good"
    );
    assert_eq!(w.calls().await, ["l-good", "v-slow"]);
    let (before, after) = keepalives(&resp.text);
    assert!(
        before >= 2,
        "no keep-alives while the nested chain's verifier (300 ms) worked:\n{}",
        resp.text
    );
    assert!(!after, "{}", resp.text);
}

/// In-process on paused time: the 150 ms first-token timeout moves on
/// exactly then, not after the slow tier's 1 s.
#[tokio::test(start_paused = true)]
async fn ttft_timeout_abandons_the_slow_tier() {
    let gw = inproc::Gw::start(&inproc_toml(&r(
        &["c-slow", "c-good"],
        None,
        "ttft_timeout = \"150ms\"",
    )));
    let started = Instant::now();
    let resp = gw.chat(&chat_stream("r", "hi")).await;
    let took = started.elapsed();
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
    assert!(
        took < Duration::from_millis(800),
        "took {took:?}: the slow tier was waited for"
    );
    // The slow tier's answer was abandoned, not left running: past its
    // 1 s no further answer completes, and both calls have ended.
    let stats = gw.sim("cld").stats.clone();
    let completed = stats.completed.load(Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(stats.completed.load(Ordering::Relaxed), completed);
    assert!(stats.cancelled.load(Ordering::Relaxed) >= 1);
    assert_eq!(
        stats.completed.load(Ordering::Relaxed) + stats.cancelled.load(Ordering::Relaxed),
        2
    );
    assert_eq!(gw.arrivals("cld"), ["c-slow", "c-good"]);
}
