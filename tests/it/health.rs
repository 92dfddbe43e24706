//! Health and ejection, black-box (in-process, on paused time): an
//! upstream that fails is ejected after `eject.after` failures in a row
//! and no call reaches it while it is; clients are told 503 at once; after
//! the cooldown one trial goes and its success serves it again (a
//! model's answers eject that model; active checks the upstream). A chain
//! skips an ejected tier without calling it, a route whose members are all
//! ejected answers 503 `no_healthy_upstream`, the metrics, the events and
//! `/readyz` show it, and an active check ejects an upstream nobody calls.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::inproc::Gw;
use serde_json::{Value, json};

const CONFIG: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.sim]
kind = "mock"
retries = { max = 0 }
eject = { after = 3, cooldown = "30s" }

[upstreams.sim.models.flaky]
reply = { text = "back" }

[[upstreams.sim.models.flaky.rules]]
when_call = [1, 2, 3, 4, 5]
then = { status = 500, error_message = "boom" }

[upstreams.down]
kind = "mock"
retries = { max = 0 }
eject = { after = 2, cooldown = "30s" }

[upstreams.down.models.bad]
status = 500

[upstreams.down2]
kind = "mock"
retries = { max = 0 }
eject = { after = 2, cooldown = "20s" }

[upstreams.down2.models.bad2]
status = 503

[upstreams.fine]
kind = "mock"

[upstreams.fine.models.ok]
reply = { text = "from ok" }

[upstreams.checked]
kind = "mock"
eject = { after = 2, cooldown = "30s" }
health = { path = "/sick", interval = "1s", timeout = "1s" }

[upstreams.checked.models.sick]
status = 503

[upstreams.checked.models.idle]
reply = { text = "idle" }

[models.flaky]
upstream = "sim"

[models.bad]
upstream = "down"

[models.bad2]
upstream = "down2"

[models.ok]
upstream = "fine"

[models.idle]
upstream = "checked"

[routes.fallback]
strategy = "chain"
tiers = ["bad", "ok"]

[routes.doomed]
strategy = "chain"
tiers = ["bad", "bad2"]

[routes.rush]
strategy = "race"
candidates = ["bad", "ok"]
"#;

fn ask(model: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": "hi"}]})
}

/// The value of the metric line starting with `series`.
fn metric(gw: &Gw, series: &str) -> Option<f64> {
    gw.metrics()
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test(start_paused = true)]
async fn a_failing_upstream_is_ejected_refused_fast_and_one_trial_brings_it_back() {
    let gw = Gw::start(CONFIG);
    for i in 0..3 {
        let r = gw.chat(&ask("flaky")).await;
        assert_eq!(r.status, 502, "call {i}: {}", r.text);
    }
    assert_eq!(gw.arrivals("sim").len(), 3);
    let healthy = r#"conclave_upstream_healthy{upstream="sim",model="flaky"}"#;
    assert_eq!(metric(&gw, healthy), Some(0.0));
    assert_eq!(
        metric(
            &gw,
            r#"conclave_ejections_total{upstream="sim",model="flaky"}"#
        ),
        Some(1.0)
    );
    // Ejected: refused at once, nothing reaches the upstream.
    let started = tokio::time::Instant::now();
    for _ in 0..5 {
        let r = gw.chat(&ask("flaky")).await;
        assert_eq!(r.status, 503, "{}", r.text);
        let e = &r.json()["error"];
        assert_eq!(e["code"], "upstream_unavailable", "{e}");
        assert!(e["message"].as_str().unwrap().contains("`sim`"), "{e}");
        assert_eq!(r.header("retry-after"), Some("30"));
    }
    assert_eq!(started.elapsed(), Duration::ZERO, "refused without a wait");
    assert_eq!(gw.arrivals("sim").len(), 3, "no call while ejected");
    let ready = gw.get("/readyz").await.json();
    let flaky = &ready["health"]["sim"]["models"]["flaky"];
    assert_eq!(flaky["health"], "ejected", "{ready}");
    assert_eq!(flaky["retry_after_s"], 30, "{ready}");
    assert_eq!(ready["health"]["sim"]["health"], "serving", "{ready}");
    assert_eq!(ready["health"]["fine"]["health"], "serving", "{ready}");

    // The cooldown over, one trial goes: it fails (call 4), and the next
    // cooldown is twice as long.
    tokio::time::advance(Duration::from_secs(30)).await;
    assert_eq!(gw.chat(&ask("flaky")).await.status, 502);
    assert_eq!(gw.arrivals("sim").len(), 4);
    let r = gw.chat(&ask("flaky")).await;
    assert_eq!(r.header("retry-after"), Some("60"), "{}", r.text);
    tokio::time::advance(Duration::from_secs(59)).await;
    assert_eq!(gw.chat(&ask("flaky")).await.status, 503);
    assert_eq!(gw.arrivals("sim").len(), 4);
    // Call 5 fails too; then call 6 (the third trial) answers.
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(gw.chat(&ask("flaky")).await.status, 502);
    tokio::time::advance(Duration::from_secs(120)).await;
    let r = gw.chat(&ask("flaky")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(gw.arrivals("sim").len(), 6);
    assert_eq!(metric(&gw, healthy), Some(1.0));
    assert_eq!(gw.chat(&ask("flaky")).await.status, 200, "serving again");
    assert_eq!(
        metric(
            &gw,
            r#"conclave_ejections_total{upstream="sim",model="flaky"}"#
        ),
        Some(3.0)
    );
    let events = gw.events(&["upstream_ejected", "upstream_recovered"]).await;
    let kinds: Vec<&str> = events
        .iter()
        .map(|e| e["event"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        [
            "upstream_ejected",
            "upstream_ejected",
            "upstream_ejected",
            "upstream_recovered"
        ],
        "{events:?}"
    );
    assert_eq!(events[0]["upstream"], "sim");
    assert_eq!(events[0]["model"], "flaky");
    assert_eq!(events[0]["reason"], "status_5xx");
    assert_eq!(events[0]["failures"], 3);
    assert_eq!(events[0]["cooldown_ms"], 30_000);
    assert_eq!(events[1]["cooldown_ms"], 60_000);
    assert_eq!(events[2]["cooldown_ms"], 120_000);
    assert_eq!(events[3]["after_ms"], 210_000);
}

#[tokio::test(start_paused = true)]
async fn a_chain_skips_an_ejected_tier_and_a_route_with_every_member_ejected_fails_fast() {
    let gw = Gw::start(CONFIG);
    for _ in 0..2 {
        let r = gw.chat(&ask("fallback")).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    assert_eq!(gw.arrivals("down").len(), 2);
    // `bad` is ejected: skipped, not called; `ok` answers.
    for _ in 0..3 {
        let r = gw.chat(&ask("fallback")).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    assert_eq!(gw.arrivals("down").len(), 2, "no call to the ejected tier");
    assert_eq!(gw.arrivals("fine").len(), 5);
    // A race goes on with the candidates that serve.
    let r = gw.chat(&ask("rush")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(gw.arrivals("down").len(), 2);

    // `doomed`: `bad` is ejected; two calls eject `bad2` too.
    for _ in 0..2 {
        let r = gw.chat(&ask("doomed")).await;
        assert_eq!(r.status, 502, "{}", r.text);
    }
    tokio::time::advance(Duration::from_secs(5)).await;
    let started = tokio::time::Instant::now();
    let r = gw.chat(&ask("doomed")).await;
    assert_eq!(started.elapsed(), Duration::ZERO);
    assert_eq!(r.status, 503, "{}", r.text);
    let e = &r.json()["error"];
    assert_eq!(e["code"], "no_healthy_upstream", "{e}");
    // The soonest member's: bad2's 20 s cooldown began 5 s ago.
    assert_eq!(r.header("retry-after"), Some("15"));
    let trail = e["attempts"].as_array().unwrap();
    assert_eq!(trail.len(), 2, "{e}");
    assert!(trail.iter().all(|a| a["verdict"] == "skipped"), "{e}");
    assert!(
        trail[0]["feedback"].as_str().unwrap().contains("ejected"),
        "{e}"
    );
    assert_eq!(gw.arrivals("down").len(), 2);
    assert_eq!(gw.arrivals("down2").len(), 2);
}

#[tokio::test(start_paused = true)]
async fn an_active_check_ejects_an_upstream_nobody_calls() {
    let gw = Gw::start(CONFIG);
    // Checks at 0 s and 1 s fail: ejected after two.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let ready = gw.get("/readyz").await;
    let body = ready.json();
    assert_eq!(body["health"]["checked"]["health"], "ejected", "{body}");
    assert_eq!(
        ready.status, 200,
        "one ejected upstream is no reason to be unready"
    );
    assert_eq!(
        metric(
            &gw,
            r#"conclave_upstream_healthy{upstream="checked",model=""}"#
        ),
        Some(0.0)
    );
    let r = gw.chat(&ask("idle")).await;
    assert_eq!(r.status, 503, "{}", r.text);
    assert_eq!(
        gw.arrivals("checked")
            .iter()
            .filter(|m| *m == "idle")
            .count(),
        0
    );
}
