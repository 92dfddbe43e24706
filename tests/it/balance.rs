//! `strategy = "balance"` on simulated members, in process on paused
//! time: each policy spreads or chooses as documented, `max_concurrency`
//! holds (and a balance with every member busy fails fast), a retryable
//! failure is served by another member while a 400 is not retried, and a
//! balance nests as a chain tier. The fault matrix is tests/it/balance_faults.rs.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;

use common::inproc::Gw;
use common::world::streamed_text;
use common::*;
use serde_json::Value;

const WORLD: &str = r#"
[server]
event_log = "{dir}/events.jsonl"
request_timeout = "60s"

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.a]
reply = { text = "from a" }

[upstreams.sim.models.b]
reply = { text = "from b" }

[upstreams.sim.models.slow-a]
reply = { text = "from slow-a" }
ttft = "10s"

[upstreams.sim.models.slow-b]
reply = { text = "from slow-b" }
ttft = "10s"

[upstreams.sim.models.fast]
reply = { text = "fast" }
ttft = "20ms"

[upstreams.sim.models.sluggish]
reply = { text = "sluggish" }
ttft = "800ms"

[upstreams.sim.models.down]
status = 503

[upstreams.sim.models.bad]
status = 400
error_message = "unsupported parameter"

[models.a]
upstream = "sim"
[models.b]
upstream = "sim"
[models.slow-a]
upstream = "sim"
[models.slow-b]
upstream = "sim"
[models.fast]
upstream = "sim"
[models.sluggish]
upstream = "sim"
[models.down]
upstream = "sim"
[models.bad]
upstream = "sim"

[routes.weighted]
strategy = "balance"
policy = "weighted"
members = ["a", "b"]
weights = { a = 3, b = 1 }

[routes.idle]
strategy = "balance"
policy = "least_busy"
members = ["slow-a", "slow-b"]

[routes.quick]
strategy = "balance"
policy = "latency"
members = ["fast", "sluggish"]

[routes.capped]
strategy = "balance"
members = ["slow-a", "slow-b"]
max_concurrency = { slow-a = 1, slow-b = 1 }

[routes.flaky]
strategy = "balance"
members = ["down", "a"]
weights = { a = 0 }

[routes.no-retry]
strategy = "balance"
members = ["down", "a"]
weights = { a = 0 }
retries = 0

[routes.picky]
strategy = "balance"
members = ["bad", "a"]
weights = { a = 0 }

[routes.escalate]
strategy = "chain"
tiers = ["flaky", "b"]
"#;

fn served(r: &common::Resp) -> String {
    r.header("x-conclave-served-by")
        .unwrap_or_default()
        .to_owned()
}

#[tokio::test(start_paused = true)]
async fn weighted_splits_by_weight() {
    let gw = Gw::start(WORLD);
    let mut by: HashMap<String, usize> = HashMap::new();
    for _ in 0..300 {
        let r = gw.chat(&chat("weighted", "hi")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        *by.entry(served(&r)).or_default() += 1;
    }
    // 3:1 → 225 / 75; a binomial's sd here is 7.5.
    let a = by.get("a").copied().unwrap_or(0);
    assert!((190..=260).contains(&a), "{by:?}");
    assert_eq!(a + by.get("b").copied().unwrap_or(0), 300, "{by:?}");
    assert_eq!(
        gw.arrivals("sim").len(),
        300,
        "one upstream call per request"
    );
}

#[tokio::test(start_paused = true)]
async fn least_busy_sends_concurrent_calls_to_the_idle_member() {
    let gw = Gw::start(WORLD);
    let body = chat("idle", "hi");
    let calls = (0..6).map(|_| gw.chat(&body));
    let replies = futures::future::join_all(calls).await;
    let mut by: HashMap<String, usize> = HashMap::new();
    for r in &replies {
        assert_eq!(r.status, 200, "{}", r.text);
        *by.entry(served(r)).or_default() += 1;
    }
    assert_eq!(by.get("slow-a"), Some(&3), "{by:?}");
    assert_eq!(by.get("slow-b"), Some(&3), "{by:?}");
}

#[tokio::test(start_paused = true)]
async fn latency_moves_traffic_off_a_slow_member() {
    let gw = Gw::start(WORLD);
    let mut slow = Vec::new();
    for i in 0..40 {
        let r = gw.chat(&chat_stream("quick", "hi")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        if served(&r) == "sluggish" {
            slow.push(i);
        }
    }
    // Each member is tried once with no estimate; then the faster wins.
    assert_eq!(slow.len(), 1, "sluggish served calls {slow:?}");
    assert!(slow[0] < 2, "{slow:?}");
}

#[tokio::test(start_paused = true)]
async fn max_concurrency_holds_and_a_full_balance_fails_fast() {
    let gw = Gw::start(WORLD);
    let body = chat("capped", "hi");
    let calls = (0..3).map(|_| gw.chat(&body));
    let replies = futures::future::join_all(calls).await;
    let mut statuses: Vec<u16> = replies.iter().map(|r| r.status).collect();
    statuses.sort();
    assert_eq!(statuses, [200, 200, 429]);
    let busy = replies.iter().find(|r| r.status == 429).unwrap();
    assert_eq!(
        busy.json()["error"]["code"],
        "members_busy",
        "{}",
        busy.text
    );
    assert_eq!(busy.header("retry-after"), Some("1"));
    let mut by: Vec<String> = replies
        .iter()
        .filter(|r| r.status == 200)
        .map(served)
        .collect();
    by.sort();
    assert_eq!(by, ["slow-a", "slow-b"]);
    // The slots were given back.
    let r = gw.chat(&chat("capped", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

#[tokio::test(start_paused = true)]
async fn a_retryable_failure_is_served_by_another_member() {
    let gw = Gw::start(WORLD);
    let r = gw.chat(&chat("flaky", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(served(&r), "a");
    let r = gw.chat(&chat_stream("flaky", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(streamed_text(&r.data_events()), "from a");
    assert!(r.text.contains("[DONE]"));
    // retries = 0: the member's own error.
    let r = gw.chat(&chat("no-retry", "hi")).await;
    assert_eq!(r.status, 502, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "upstream_error");
    // A balance nested as a chain tier answers through its member.
    let r = gw.chat(&chat("escalate", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(served(&r), "a");
    let attempts = gw.events(&["attempt"]).await;
    let of = |model: &str| -> Vec<(String, String)> {
        attempts
            .iter()
            .filter(|e| e["model"] == model)
            .map(|e| {
                (
                    e["role"].as_str().unwrap_or_default().to_owned(),
                    e["verdict"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect()
    };
    let member = |v: &str| ("member".to_owned(), v.to_owned());
    // With `retries = 0` the balance goes nowhere else, so the member's
    // upstream makes its own one retry: that route's call is two tries.
    assert_eq!(
        of("down"),
        [
            member("error"),
            member("error"),
            member("error"),
            member("error"),
            member("error")
        ]
    );
    assert_eq!(
        of("a"),
        [member("accept"), member("accept"), member("accept")]
    );
    assert_eq!(gw.arrivals("sim").len(), 8);
}

#[tokio::test(start_paused = true)]
async fn a_400_is_not_retried() {
    let gw = Gw::start(WORLD);
    let r = gw.chat(&chat("picky", "hi")).await;
    assert_eq!(r.status, 400, "{}", r.text);
    let v: Value = r.json();
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("unsupported parameter"),
        "{}",
        r.text
    );
    assert_eq!(gw.arrivals("sim"), ["bad"]);
}

#[tokio::test(start_paused = true)]
async fn a_pin_names_a_member() {
    let gw = Gw::start(WORLD);
    let r = gw
        .chat_with(&chat("weighted", "hi"), &[("x-conclave-pin", "b")])
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(served(&r), "b");
    let r = gw
        .chat_with(&chat("weighted", "hi"), &[("x-conclave-pin", "zz")])
        .await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert!(r.text.contains("is not a member of balance"), "{}", r.text);
}

const WARMTH: &str = r#"
[upstreams.box1]
kind = "mock"
lane = "local"
swap_delay = "5s"

[upstreams.box2]
kind = "mock"
lane = "local"
swap_delay = "5s"

[models.q1]
upstream = "box1"
model = "qwen"

[models.q2]
upstream = "box2"
model = "qwen"

[routes.local]
strategy = "balance"
policy = "weighted"
members = ["q1", "q2"]
"#;

#[tokio::test(start_paused = true)]
async fn a_member_with_the_model_warm_goes_first() {
    let gw = Gw::start(WARMTH);
    let r = gw.chat(&chat("local", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let first = served(&r);
    // The other box is cold: every later call goes to the warm one.
    for _ in 0..20 {
        let r = gw.chat(&chat("local", "hi")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(served(&r), first);
    }
}
