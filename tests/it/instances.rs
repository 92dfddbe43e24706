//! Gateways in one process, in-process: each has its own metrics recorder
//! and its own clock, so tests (and embedders) can run several side by
//! side without sharing a series or a date.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, UNIX_EPOCH};

use common::*;

const GATEWAY: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.echo]
reply = { text = "hello" }

[models.echo]
upstream = "sim"
"#;

#[tokio::test(start_paused = true)]
async fn two_gateways_keep_their_own_metrics_and_clocks() {
    let a = inproc::Gw::start(GATEWAY);
    let later = UNIX_EPOCH + inproc::START + Duration::from_secs(86_400);
    let b = inproc::Gw::start_at(GATEWAY, later);
    for _ in 0..3 {
        assert_eq!(a.chat(&chat("echo", "hi")).await.status, 200);
    }
    assert_eq!(b.chat(&chat("echo", "hi")).await.status, 200);
    let count = |m: &str| {
        samples(
            m,
            "conclave_requests_total",
            &[("route", "echo"), ("status", "200")],
        )
    };
    assert_eq!(count(&a.metrics()), vec![3.0], "{}", a.metrics());
    assert_eq!(count(&b.metrics()), vec![1.0], "{}", b.metrics());
    // Over HTTP too: `/metrics` is the instance's own.
    let m = a.get("/metrics").await;
    assert_eq!(count(&m.text), vec![3.0], "{}", m.text);

    // `created` of `/v1/models` is each gateway's start, on its own clock.
    let created = |r: Resp| r.json()["data"][0]["created"].as_u64().unwrap();
    let start = inproc::START.as_secs();
    assert_eq!(created(a.get("/v1/models").await), start);
    assert_eq!(created(b.get("/v1/models").await), start + 86_400);
}

/// Every metric belongs to an instance: driving every strategy of the demo
/// (whole and streamed, a vote, the info endpoints) records nothing on the
/// global recorder, which would lose it.
#[tokio::test(start_paused = true)]
async fn no_metric_is_recorded_outside_an_instance() {
    // On this test's thread, where its runtime runs the gateway: the other
    // tests of the binary run gateways of their own meanwhile.
    let _strays = metrics::set_default_local_recorder(&conclave::sink::Strays);
    let before = conclave::sink::strays();
    let demo = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo.toml"))
        .unwrap()
        .replace(
            "event_log = \"conclave-events.jsonl\"",
            "event_log = \"{dir}/events.jsonl\"",
        );
    let gw = inproc::Gw::start(&demo);
    let routes = [
        "fast",
        "review",
        "failover",
        "council",
        "best-of-3",
        "hedge",
        "ab",
        "wise",
    ];
    let mut arena = None;
    for route in routes {
        for body in [chat(route, "hello"), chat_stream(route, "hello")] {
            let r = gw.chat(&body).await;
            assert_eq!(r.status, 200, "{route}: {}", r.text);
            if let Some(id) = r.header("x-conclave-arena-id") {
                arena = Some(id.to_owned());
            }
        }
    }
    let id = arena.expect("the arena gave no id");
    let vote = serde_json::json!({ "pick": "A" });
    let v = gw
        .post_with(&format!("/v1/arena/{id}/vote"), &vote, &[])
        .await;
    assert_eq!(v.status, 200, "{}", v.text);
    for path in [
        "/metrics",
        "/v1/models",
        "/readyz",
        "/v1/arena/ab/leaderboard",
    ] {
        gw.get(path).await;
    }
    // An error before any route is known counts under `route="unknown"`.
    assert_eq!(gw.chat(&chat("nope", "hi")).await.status, 404);
    let m = gw.metrics();
    for name in [
        "conclave_requests_total",
        "conclave_attempts_total",
        "conclave_race_score",
        "conclave_arena_votes_total",
        "conclave_lane_wait_seconds",
    ] {
        assert!(m.contains(name), "no {name} in:\n{m}");
    }
    assert_eq!(conclave::sink::strays(), before);
}
