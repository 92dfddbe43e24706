//! A client that goes away cancels the upstream request: the gateway drops
//! its upstream call (the mock sees its answer abandoned) and records the
//! request as `499` and the attempt as `cancelled`. The upstream answers
//! slowly (a 12 s trickle, 20 s to a first token) and each wait here is
//! generous, so a busy machine cannot finish an answer the test expects
//! to be still in flight.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::*;
use futures::StreamExt;

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.trickle]
reply = { text = "one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen eighteen nineteen twenty twenty-one twenty-two twenty-three twenty-four twenty-five" }
tokens_per_second = 2

[upstreams.sim.models.sleepy]
reply = { text = "finally" }
ttft = "20s"
"#;

fn gateway_for(mock: &Srv) -> Srv {
    gateway_with(mock, "")
}

/// `server` goes into `[server]`.
fn gateway_with(mock: &Srv, server: &str) -> Srv {
    Srv::gateway(&format!(
        r#"
[server]
{server}

[upstreams.up]
kind = "openai"
base_url = "{}"
timeout = "30s"

[models.trickle]
upstream = "up"

[models.sleepy]
upstream = "up"

[routes.slow]
strategy = "passthrough"
model = "trickle"

[routes.snooze]
strategy = "passthrough"
model = "sleepy"
"#,
        mock.v1()
    ))
}

async fn cancelled(mock: &Srv) -> u64 {
    mock.stats().await["cancelled"].as_u64().unwrap_or(0)
}

/// Waits until the gateway's metrics show the route's request as 499 and
/// its attempt as cancelled.
async fn assert_recorded_as_abandoned(gw: &Srv, route: &str, model: &str) {
    let ok = eventually(10, || async {
        let m = gw.metrics().await;
        samples(
            &m,
            "conclave_requests_total",
            &[("route", route), ("status", "499")],
        ) == [1.0]
            && samples(
                &m,
                "conclave_attempts_total",
                &[("route", route), ("model", model), ("verdict", "cancelled")],
            ) == [1.0]
    })
    .await;
    assert!(ok, "not recorded as abandoned:\n{}", gw.metrics().await);
    let m = gw.metrics().await;
    assert!(
        samples(
            &m,
            "conclave_requests_total",
            &[("route", route), ("status", "200")]
        )
        .is_empty(),
        "{m}"
    );
}

async fn assert_healthy(gw: &Srv) {
    let r = client().get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn dropping_a_stream_cancels_the_upstream_call() {
    let mock = Srv::mock(MOCK);
    let gw = gateway_for(&mock);

    let resp = client()
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_stream("slow", "go"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let mut seen = String::new();
    let first = tokio::time::timeout(Duration::from_secs(10), async {
        while !seen.contains("\n\n") {
            let part = body.next().await.unwrap().unwrap();
            seen.push_str(&String::from_utf8_lossy(&part));
        }
    })
    .await;
    assert!(first.is_ok(), "no first event: {seen:?}");
    assert!(seen.starts_with("data: "), "{seen:?}");
    assert_eq!(cancelled(&mock).await, 0);
    drop(body);

    let ok = eventually(10, || async { cancelled(&mock).await == 1 }).await;
    assert!(ok, "upstream not cancelled: {}", mock.stats().await);
    let stats = mock.stats().await;
    assert_eq!(stats["requests"], 1, "{stats}");
    assert_eq!(stats["completed"], 0, "{stats}");
    assert_recorded_as_abandoned(&gw, "slow", "trickle").await;
    assert_healthy(&gw).await;
}

#[tokio::test]
async fn a_client_timeout_cancels_a_whole_answer() {
    let mock = Srv::mock(MOCK);
    let gw = gateway_for(&mock);

    let started = tokio::time::Instant::now();
    let err = client()
        .post(gw.url("/v1/chat/completions"))
        .json(&chat("snooze", "go"))
        .timeout(Duration::from_millis(300))
        .send()
        .await
        .unwrap_err();
    assert!(err.is_timeout(), "{err}");

    let ok = eventually(10, || async { cancelled(&mock).await == 1 }).await;
    assert!(ok, "upstream not cancelled: {}", mock.stats().await);
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let stats = mock.stats().await;
    assert_eq!(stats["requests"], 1, "{stats}");
    assert_eq!(stats["completed"], 0, "{stats}");
    assert_recorded_as_abandoned(&gw, "snooze", "sleepy").await;
    assert_healthy(&gw).await;
}

#[tokio::test]
async fn leaving_during_keepalives_cancels_the_upstream_call() {
    let mock = Srv::mock(MOCK);
    let gw = gateway_with(&mock, "sse_keepalive = \"100ms\"");

    // The upstream takes 20 s to its first token; the client hears a
    // keep-alive, then leaves.
    let resp = client()
        .post(gw.url("/v1/chat/completions"))
        .json(&chat_stream("snooze", "go"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mut body = resp.bytes_stream();
    let part = tokio::time::timeout(Duration::from_secs(10), body.next())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(part.starts_with(b": keep-alive"), "{part:?}");
    drop(body);

    let ok = eventually(10, || async { cancelled(&mock).await == 1 }).await;
    assert!(ok, "upstream not cancelled: {}", mock.stats().await);
    assert_recorded_as_abandoned(&gw, "snooze", "sleepy").await;
    assert_healthy(&gw).await;
}
