//! `x-conclave-pin` on every strategy, black-box: the named member answers
//! alone in the strategy's member role, any other name is a 400 listing
//! the members, and a pin names a member of the outermost strategy only
//! (nested routes never see it). One gateway with simulated models.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::Value;

const CONFIG: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.alpha]
reply = { text = "alpha here" }

[upstreams.sim.models.beta]
reply = { text = "beta here" }

[upstreams.sim.models.gamma]
reply = { text = "gamma here" }

[models.alpha]
upstream = "sim"

[models.beta]
upstream = "sim"

[models.gamma]
upstream = "sim"

[routes.fast]
strategy = "race"
candidates = ["alpha", "beta"]

[routes.duel]
strategy = "arena"
contestants = ["alpha", "beta"]

[routes.wise]
strategy = "oracle"
base = "alpha"
oracle = "gamma"

[routes.outer]
strategy = "race"
candidates = ["fast", "gamma"]

[routes.alias]
strategy = "passthrough"
model = "duel"
"#;

/// The attempt events of the request with id `id`.
async fn attempts(gw: &Srv, id: &str) -> Vec<Value> {
    let of_id = || async {
        gw.events_of(&["attempt"], 1)
            .await
            .into_iter()
            .filter(|e| e["request_id"] == id)
            .collect::<Vec<Value>>()
    };
    eventually(10, || async { !of_id().await.is_empty() }).await;
    of_id().await
}

async fn pinned(gw: &Srv, route: &str, pin: &str) -> Resp {
    post_with(&gw.base, &chat(route, "q"), &[("x-conclave-pin", pin)]).await
}

#[tokio::test]
async fn a_pinned_member_answers_alone_in_its_role() {
    let gw = Srv::gateway(CONFIG);
    for (route, pin, role) in [
        ("fast", "beta", "candidate"),
        ("duel", "beta", "contestant"),
        ("alias", "alpha", "contestant"),
        ("wise", "alpha", "base"),
        ("outer", "gamma", "candidate"),
    ] {
        let r = pinned(&gw, route, pin).await;
        assert_eq!(r.status, 200, "{route} pinned to {pin}: {}", r.text);
        assert_eq!(r.header("x-conclave-served-by"), Some(pin), "{route}");
        let body = r.json();
        assert_eq!(
            body["choices"].as_array().map(Vec::len),
            Some(1),
            "{route}: {body}"
        );
        assert_eq!(
            body["choices"][0]["message"]["content"],
            format!("{pin} here"),
            "{route}"
        );
        let id = r.header("x-request-id").unwrap().to_owned();
        let tries = attempts(&gw, &id).await;
        assert_eq!(tries.len(), 1, "{route}: {tries:?}");
        assert_eq!(tries[0]["model"], pin, "{route}");
        assert_eq!(tries[0]["role"], role, "{route}");
        assert_eq!(tries[0]["verdict"], "ok", "{route}");
    }
}

#[tokio::test]
async fn a_pin_that_is_not_a_member_is_refused_with_the_members() {
    let gw = Srv::gateway(CONFIG);
    for (route, pin, message) in [
        (
            "fast",
            "gamma",
            r#"x-conclave-pin: "gamma" is not a candidate of race "fast" (candidates: alpha, beta)"#,
        ),
        (
            "duel",
            "gamma",
            r#"x-conclave-pin: "gamma" is not a contestant of arena "duel" (contestants: alpha, beta)"#,
        ),
        (
            "alias",
            "nope",
            r#"x-conclave-pin: "nope" is not a contestant of arena "duel" (contestants: alpha, beta)"#,
        ),
        (
            "wise",
            "gamma",
            r#"x-conclave-pin: "gamma" is not a base of oracle "wise" (bases: alpha)"#,
        ),
        // A member of a nested route is not a member of the outer one.
        (
            "outer",
            "alpha",
            r#"x-conclave-pin: "alpha" is not a candidate of race "outer" (candidates: fast, gamma)"#,
        ),
    ] {
        let r = pinned(&gw, route, pin).await;
        assert_eq!(r.status, 400, "{route} pinned to {pin}: {}", r.text);
        let err = &r.json()["error"];
        assert_eq!(err["message"], message, "{route}");
        assert_eq!(err["type"], "invalid_request_error", "{route}");
    }
}

#[tokio::test]
async fn a_pinned_nested_route_runs_whole_without_the_pin() {
    let gw = Srv::gateway(CONFIG);
    // `fast` is pinned on `outer`: it races its own candidates as usual
    // (a pin reaching it would name none of them and be refused).
    let r = pinned(&gw, "outer", "fast").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let by = r.header("x-conclave-served-by").unwrap();
    assert!(by == "alpha" || by == "beta", "{by}");
}

/// A pinned tier answers under its chain's `stream_idle_timeout` (100 ms
/// here; the upstream's own is 2 s), as the chain's tiers always do.
#[tokio::test]
async fn a_pinned_tier_keeps_its_chains_stream_idle_timeout() {
    let evil_v1 = common::evil::start().await;
    let gw = Srv::gateway_env(
        &format!(
            "[upstreams.evil]\nkind = \"openai\"\nbase_url = \"{evil_v1}\"\napi_key_env = \"EVIL_KEY\"\n\
             timeout = \"5s\"\nstream_idle_timeout = \"2s\"\n\n\
             [models.stall-after-first]\nupstream = \"evil\"\n\n[models.ok]\nupstream = \"evil\"\n\n\
             [routes.patient]\nstrategy = \"chain\"\ntiers = [\"stall-after-first\", \"ok\"]\n\
             stream_idle_timeout = \"100ms\"\n"
        ),
        &[("EVIL_KEY", "sk-pins-test-key")],
    );
    let r = post_with(
        &gw.base,
        &chat_stream("patient", "hi"),
        &[("x-conclave-pin", "stall-after-first")],
    )
    .await;
    let last = r.data_events().last().cloned().unwrap_or_default();
    assert!(last.contains("no event for 100ms"), "{}", r.text);
}
