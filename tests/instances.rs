//! Gateways in one process, in-process: each has its own metrics recorder
//! and its own clock, so tests (and embedders) can run several side by
//! side without sharing a series or a date.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

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
