//! Upstream retries: a failed call (connect error, timeout before the
//! first token, 5xx, 429) is sent again as a new attempt that says why,
//! after a backoff with full jitter or exactly its `Retry-After` (up to
//! `max_retry_after`), never past the deadline nor once a stream began,
//! and never beyond the route's retry budget. In-process on paused time
//! (timing is exact), and against the real binary for a refused
//! connection.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::*;
use serde_json::Value;
use tokio::time::Instant;

const SIM: &str = r#"
[server]
event_log = "{dir}/events.jsonl"
request_timeout = "30s"

[upstreams.sim]
kind = "mock"
eject = false

[upstreams.sim.models.flaky]
reply = { text = "made it" }

[[upstreams.sim.models.flaky.rules]]
when_call = [1]
then = { status = 500, error_message = "boom" }

[upstreams.sim.models.busy]
reply = { text = "made it" }

[[upstreams.sim.models.busy.rules]]
when_call = [1]
then = { status = 429, retry_after = 3, error_message = "slow down" }

[upstreams.sim.models.patient]
status = 429
retry_after = 5
error_message = "come back later"

[upstreams.sim.models.down]
status = 500
error_message = "down"

[upstreams.sim.models.cut]
reply = { text = "one two three four five six seven eight nine ten" }
fail = "cut"

[upstreams.capped]
kind = "mock"
retries = { max_retry_after = "2s" }

[upstreams.capped.models.patient2]
status = 429
retry_after = 5

[upstreams.none]
kind = "mock"
retries = { max = 0 }
eject = false

[upstreams.none.models.down0]
status = 500

[upstreams.many]
kind = "mock"
retries = { max = 3, backoff = "100ms", max_backoff = "250ms" }
# It fails on purpose, more often than `eject.after`.
eject = false

[upstreams.many.models.down3]
status = 500

[upstreams.many.models.last]
status = 500

[models.flaky]
upstream = "sim"

[models.busy]
upstream = "sim"

[models.patient]
upstream = "sim"

[models.down]
upstream = "sim"

[models.cut]
upstream = "sim"

[models.patient2]
upstream = "capped"

[models.down0]
upstream = "none"

[models.down3]
upstream = "many"

[models.last]
upstream = "many"

[routes.generous]
strategy = "passthrough"
model = "down3"
retry_budget = { ratio = 1.0, min = 1000 }

[routes.fallback]
strategy = "chain"
tiers = ["down", "last"]
retry_budget = { ratio = 1.0, min = 1000 }
"#;

fn gw() -> inproc::Gw {
    inproc::Gw::start(SIM)
}

/// (model, verdict, retry) of each attempt event.
fn attempts(ev: &[Value]) -> Vec<(String, String, Option<String>)> {
    ev.iter()
        .map(|e| {
            (
                e["model"].as_str().unwrap().to_owned(),
                e["verdict"].as_str().unwrap().to_owned(),
                e["retry"].as_str().map(str::to_owned),
            )
        })
        .collect()
}

fn att(model: &str, verdict: &str, retry: Option<&str>) -> (String, String, Option<String>) {
    (model.into(), verdict.into(), retry.map(str::to_owned))
}

fn counter(gw: &inproc::Gw, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(&gw.metrics(), name, labels).iter().sum()
}

#[tokio::test(start_paused = true)]
async fn a_500_then_success_is_retried_once_as_a_second_attempt() {
    let gw = gw();
    let t = Instant::now();
    let r = gw.chat(&chat("flaky", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"][0]["message"]["content"], "made it");
    // The first backoff is drawn from 0 to 200 ms.
    assert!(
        t.elapsed() <= Duration::from_millis(200),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(gw.arrivals("sim"), ["flaky", "flaky"]);
    let retried = [("route", "flaky"), ("reason", "5xx")];
    assert_eq!(counter(&gw, "conclave_retries_total", &retried), 1.0);
    let ev = gw.events(&["attempt"]).await;
    assert_eq!(
        attempts(&ev),
        [att("flaky", "error", None), att("flaky", "ok", Some("5xx"))]
    );
    assert_eq!(
        (ev[0]["attempt"].as_u64(), ev[1]["attempt"].as_u64()),
        (Some(1), Some(2))
    );
}

#[tokio::test(start_paused = true)]
async fn a_429_waits_its_retry_after_exactly() {
    let gw = gw();
    let t = Instant::now();
    let r = gw.chat(&chat("busy", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_secs(3));
    assert_eq!(gw.arrivals("sim"), ["busy", "busy"]);
    let ev = gw.events(&["attempt"]).await;
    assert_eq!(
        attempts(&ev),
        [att("busy", "error", None), att("busy", "ok", Some("429"))]
    );
}

#[tokio::test(start_paused = true)]
async fn a_retry_after_above_max_retry_after_is_not_retried() {
    let gw = gw();
    let t = Instant::now();
    let r = gw.chat(&chat("patient2", "hi")).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::ZERO, "it failed at once");
    assert_eq!(gw.arrivals("capped"), ["patient2"]);
    assert!(samples(&gw.metrics(), "conclave_retries_total", &[]).is_empty());
}

#[tokio::test(start_paused = true)]
async fn no_retry_whose_wait_ends_past_the_deadline() {
    // 5 s of Retry-After (under the 60 s cap) against a 4 s deadline.
    let gw =
        inproc::Gw::start(&SIM.replace("request_timeout = \"30s\"", "request_timeout = \"4s\""));
    let t = Instant::now();
    let r = gw.chat(&chat("patient", "hi")).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(
        t.elapsed(),
        Duration::ZERO,
        "no wait for a retry it cannot make"
    );
    assert_eq!(gw.arrivals("sim"), ["patient"]);
    // With the time, it waits the 5 s and tries once more.
    let gw = gw_with_timeout("30s");
    let t = Instant::now();
    let r = gw.chat(&chat("patient", "hi")).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_secs(5));
    assert_eq!(gw.arrivals("sim"), ["patient", "patient"]);
}

fn gw_with_timeout(t: &str) -> inproc::Gw {
    inproc::Gw::start(&SIM.replace(
        "request_timeout = \"30s\"",
        &format!("request_timeout = \"{t}\""),
    ))
}

#[tokio::test(start_paused = true)]
async fn a_stream_cut_after_its_first_chunk_is_not_retried() {
    let gw = gw();
    let r = gw.chat(&chat_stream("cut", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ev = r.data_events();
    assert!(ev.len() >= 2, "chunks, then an error event: {}", r.text);
    assert!(ev.last().unwrap().contains("\"error\""), "{}", r.text);
    assert_eq!(gw.arrivals("sim"), ["cut"], "sent once");
    let ev = gw.events(&["attempt"]).await;
    assert_eq!(attempts(&ev), [att("cut", "error", None)]);
}

#[tokio::test(start_paused = true)]
async fn retries_max_0_makes_one_try() {
    let gw = gw();
    let r = gw.chat(&chat("down0", "hi")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(gw.arrivals("none"), ["down0"]);
}

/// `max = 3`, backoff 100 ms doubling to at most 250 ms: the three waits
/// lie in [0, 100], [0, 200], [0, 250] ms, drawn at random.
#[tokio::test(start_paused = true)]
async fn backoff_waits_lie_between_zero_and_their_ceiling() {
    let gw = gw();
    let mut totals = Vec::new();
    for _ in 0..40 {
        let t = Instant::now();
        let r = gw.chat(&chat("generous", "hi")).await;
        assert_eq!(r.status, 502, "{}", r.text);
        totals.push(t.elapsed());
    }
    assert_eq!(
        gw.arrivals("many").len(),
        40 * 4,
        "a try and three retries each"
    );
    assert!(
        totals.iter().all(|t| *t <= Duration::from_millis(550)),
        "{totals:?}"
    );
    // Jittered: not all alike, and about half the ceiling on average.
    let mean = totals.iter().sum::<Duration>() / 40;
    assert!(
        (Duration::from_millis(180)..Duration::from_millis(370)).contains(&mean),
        "mean {mean:?} of {totals:?}"
    );
    assert!(totals.iter().any(|t| *t != totals[0]));
    // Each wait, from one attempt's end to the next one's start.
    let ev = gw.events(&["attempt"]).await;
    let at = |e: &Value| {
        let ts = humantime::parse_rfc3339_weak(e["ts"].as_str().unwrap()).unwrap();
        ts.duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs_f64()
            * 1000.0
    };
    for req in ev.chunks(4) {
        for (k, pair) in req.windows(2).enumerate() {
            let gap = at(&pair[1]) - at(&pair[0]) - pair[0]["duration_ms"].as_f64().unwrap();
            let ceiling = [100.0, 200.0, 250.0][k];
            assert!((-1.0..=ceiling + 1.0).contains(&gap), "wait {k}: {gap} ms");
            assert_eq!(pair[1]["retry"], "5xx");
        }
    }
}

#[tokio::test(start_paused = true)]
async fn a_chain_retries_on_the_next_tier_and_its_last_tier_on_its_upstream() {
    let gw = gw();
    let r = gw.chat(&chat("fallback", "hi")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(gw.arrivals("sim"), ["down"], "the first tier: one try");
    assert_eq!(
        gw.arrivals("many"),
        ["last"; 4],
        "the last: a try and 3 retries"
    );
}

/// 100 concurrent requests to an always-500 upstream with `max = 3` and
/// the default budget (20% of the window's requests, at least 3): at most
/// 100 + 20 calls reach it, and the metric counts the retries made.
#[tokio::test(start_paused = true)]
async fn the_retry_budget_holds_under_100_concurrent_failing_requests() {
    let gw = inproc::Gw::start(&SIM.replace("retries = { max = 0 }", "retries = { max = 3 }"));
    let body = chat("down0", "hi");
    let all = (0..100).map(|_| gw.chat(&body));
    let answers = futures::future::join_all(all).await;
    assert!(answers.iter().all(|r| r.status == 502));
    let calls = gw.arrivals("none").len();
    let retried = counter(
        &gw,
        "conclave_retries_total",
        &[("route", "down0"), ("reason", "5xx")],
    );
    let refused = counter(
        &gw,
        "conclave_retry_budget_exhausted_total",
        &[("route", "down0")],
    );
    eprintln!("100 requests: {calls} upstream calls, {retried} retries, {refused} refused");
    assert!(calls <= 100 + 20, "{calls} upstream calls");
    assert_eq!(calls as f64, 100.0 + retried);
    assert!(retried >= 3.0, "the floor at least");
    assert!(refused > 0.0);
    // Without a budget the same load would have made 400 calls.
}

/// The real binary, against a port nothing listens on: the refused
/// connection is tried three times in all (`max = 2`), each try its own
/// attempt, the retries saying `connect`.
#[tokio::test]
async fn a_refused_connection_is_retried() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let toml = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n[upstreams.gone]\nkind = \"openai\"\n\
         base_url = \"http://127.0.0.1:{port}/v1\"\nretries = {{ max = 2, backoff = \"10ms\" }}\n\n\
         [models.m]\nupstream = \"gone\"\n"
    );
    let gw = Srv::gateway(&toml);
    let r = post(&gw.base, &chat("m", "hi")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(
        r.json()["error"]["code"],
        "upstream_unreachable",
        "{}",
        r.text
    );
    let ev = gw.events_of(&["attempt"], 3).await;
    assert_eq!(
        attempts(&ev),
        [
            att("m", "error", None),
            att("m", "error", Some("connect")),
            att("m", "error", Some("connect")),
        ]
    );
    let m = gw.metrics().await;
    let retried = samples(
        &m,
        "conclave_retries_total",
        &[("route", "m"), ("reason", "connect")],
    );
    assert_eq!(retried, [2.0]);
}
