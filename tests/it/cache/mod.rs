//! The response cache on the request path, in-process on paused time:
//! `x-conclave-cache` (hit, miss, bypass, off) whole and streamed, what
//! a hit costs (nothing: no attempt, no spend) and says (the original's
//! usage, `age`, `cached: true`, a `cache_hit` event), the scope and
//! temperature rules, the client's `Cache-Control`, route-level and
//! model-level entries inside strategies, what is never stored (errors,
//! cut streams), `DELETE /v1/cache`, and identical requests coalesced
//! into one upstream call. Rules are set on the parsed config.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, UNIX_EPOCH};

use conclave::config::{CacheRule, CacheScope, Config};
use serde_json::{Value, json};

use crate::common::*;

mod coalescing;
mod edges;

const ENV: &[(&str, &str)] = &[
    ("KEY_A", "k-alpha"),
    ("KEY_B", "k-beta"),
    ("KEY_ADMIN", "k-admin"),
];

const TOML: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.m]
reply = { text = "answer to {last_user}" }
usage = { prompt_tokens = 10, completion_tokens = 4 }

[upstreams.sim.models.slow]
reply = { text = "slow answer to {last_user}" }
ttft = "2s"
usage = { prompt_tokens = 10, completion_tokens = 4 }

[upstreams.sim.models.broken]
status = 500

[upstreams.sim.models.cut]
reply = { text = "a long answer that breaks off midway" }
fail = "cut"
fail_after_chars = 8

[upstreams.sim.models.p1]
reply = { text = "p1 says {last_user}" }
[upstreams.sim.models.p2]
reply = { text = "p2 says {last_user}" }
[upstreams.sim.models.syn]
reply = { text = "synthesis" }
[upstreams.sim.models.def]
reply = { text = "default" }

[models.m]
upstream = "sim"
price = { input_per_mtok = 1000.0, output_per_mtok = 1000.0 }
[models.slow]
upstream = "sim"
[models.broken]
upstream = "sim"
[models.cut]
upstream = "sim"
[models.p1]
upstream = "sim"
[models.p2]
upstream = "sim"
[models.syn]
upstream = "sim"
[models.def]
upstream = "sim"

[routes.shared]
strategy = "passthrough"
model = "m"

[routes.panel]
strategy = "judge"
panel = ["p1", "p2", "def"]
synthesis = "syn"
default = "def"

[routes.panel2]
strategy = "judge"
panel = ["p1", "p2"]
synthesis = "syn"
default = "def"

[routes.ab]
strategy = "arena"
contestants = ["p1", "p2"]

[routes.alias]
strategy = "passthrough"
model = "ab"

[routes.sc]
strategy = "vote"
model = "p1"
samples = 4

[[keys]]
name = "alpha"
key_env = "KEY_A"
daily_tokens = 1000000

[[keys]]
name = "beta"
key_env = "KEY_B"

[[keys]]
name = "admin"
key_env = "KEY_ADMIN"
admin = true
"#;

fn rule(scope: CacheScope, max_temperature: f64) -> CacheRule {
    CacheRule {
        ttl: Duration::from_secs(3600),
        scope,
        max_temperature,
    }
}

/// The gateway with `rules` (name, scope, max temperature).
pub(super) fn gw(rules: &[(&str, CacheScope, f64)]) -> inproc::Gw {
    let rules: Vec<(String, CacheRule)> = rules
        .iter()
        .map(|(n, s, t)| ((*n).to_owned(), rule(*s, *t)))
        .collect();
    inproc::Gw::start_edited(TOML, ENV, UNIX_EPOCH + inproc::START, |c: &mut Config| {
        c.cache_rules.extend(rules);
    })
}

pub(super) const ALPHA: (&str, &str) = ("authorization", "Bearer k-alpha");
pub(super) const BETA: (&str, &str) = ("authorization", "Bearer k-beta");
const ADMIN: (&str, &str) = ("authorization", "Bearer k-admin");

pub(super) fn ask(model: &str, text: &str) -> Value {
    let mut b = chat(model, text);
    b["temperature"] = json!(0);
    b
}

fn streamed(mut b: Value) -> Value {
    b["stream"] = json!(true);
    b["stream_options"] = json!({"include_usage": true});
    b
}

pub(super) fn calls(gw: &inproc::Gw, model: &str) -> usize {
    gw.arrivals("sim").iter().filter(|m| *m == model).count()
}

/// A streamed answer's text, and its usage chunk.
fn stream_text(text: &str) -> (String, Option<Value>) {
    let mut out = String::new();
    let mut usage = None;
    for d in sse_data(text) {
        if d == "[DONE]" {
            continue;
        }
        let v: Value = serde_json::from_str(&d).unwrap();
        if let Some(s) = v
            .pointer("/choices/0/delta/content")
            .and_then(Value::as_str)
        {
            out.push_str(s);
        }
        if v["usage"].is_object() {
            usage = Some(v["usage"].clone());
        }
    }
    (out, usage)
}

pub(super) fn cache_hdr(r: &Resp) -> Option<&str> {
    r.header("x-conclave-cache")
}

#[tokio::test(start_paused = true)]
async fn a_repeated_request_is_a_hit_whole_and_streamed_and_costs_nothing() {
    let gw = gw(&[("m", CacheScope::Key, 0.0)]);
    let first = gw.chat_with(&ask("m", "hi"), &[ALPHA]).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(cache_hdr(&first), Some("miss"));
    let spent = key_spend(&gw).await;
    assert_eq!(spent[0]["tokens"], 14, "{spent}");
    tokio::time::advance(Duration::from_secs(5)).await;

    let hit = gw.chat_with(&ask("m", "hi"), &[ALPHA]).await;
    assert_eq!(hit.status, 200, "{}", hit.text);
    assert_eq!(cache_hdr(&hit), Some("hit"));
    assert_eq!(hit.header("age"), Some("5"));
    let (a, b) = (first.json(), hit.json());
    assert_eq!(a["choices"], b["choices"]);
    assert_eq!(a["usage"], b["usage"], "a hit says what the original cost");
    assert_ne!(a["id"], b["id"], "a new id");
    assert_eq!(calls(&gw, "m"), 1);
    assert_eq!(key_spend(&gw).await, spent, "a hit spends nothing");

    // The stream flag is not part of the key: the stored answer replays.
    let s = gw.chat_with(&streamed(ask("m", "hi")), &[ALPHA]).await;
    assert_eq!(cache_hdr(&s), Some("hit"));
    let (text, usage) = stream_text(&s.text);
    assert_eq!(text, "answer to hi");
    assert_eq!(usage.unwrap()["total_tokens"], a["usage"]["total_tokens"]);
    assert!(s.text.contains("[DONE]"));
    assert_eq!(calls(&gw, "m"), 1);

    // Without `include_usage`, a replay has no usage chunk, as a miss has none.
    let mut plain = ask("m", "hi");
    plain["stream"] = json!(true);
    let s = gw.chat_with(&plain, &[ALPHA]).await;
    assert_eq!(cache_hdr(&s), Some("hit"));
    assert_eq!(stream_text(&s.text), ("answer to hi".to_owned(), None));

    // A streamed miss is stored at its clean end, then hits whole.
    let s = gw.chat_with(&streamed(ask("m", "ho")), &[ALPHA]).await;
    assert_eq!(cache_hdr(&s), Some("miss"));
    assert_eq!(stream_text(&s.text).0, "answer to ho");
    let w = gw.chat_with(&ask("m", "ho"), &[ALPHA]).await;
    assert_eq!(cache_hdr(&w), Some("hit"));
    assert_eq!(w.json()["choices"][0]["message"]["content"], "answer to ho");
    assert_eq!(calls(&gw, "m"), 2);

    let m = gw.metrics();
    assert_eq!(
        samples(
            &m,
            "conclave_cache_requests_total",
            &[("result", "hit"), ("route", "m")]
        ),
        vec![4.0]
    );
    assert_eq!(
        samples(
            &m,
            "conclave_cache_requests_total",
            &[("result", "miss"), ("route", "m")]
        ),
        vec![2.0]
    );
    let entries = m
        .lines()
        .find_map(|l| l.strip_prefix("conclave_cache_entries "));
    assert_eq!(entries.map(str::trim), Some("2"), "{m}");
    assert_eq!(
        samples(&m, "conclave_cache_saved_tokens_total", &[("route", "m")]),
        vec![56.0]
    );
    let hits = gw.events(&["cache_hit"]).await;
    assert_eq!(hits.len(), 4);
    assert_eq!(hits[0]["layer"], "model");
    assert_eq!(hits[0]["age_s"], 5);
    let text = std::fs::read_to_string(gw.dir.path().join("events.jsonl")).unwrap();
    let requests: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["event"] == "request")
        .collect();
    let cached: Vec<bool> = requests.iter().map(|r| r["cached"] == true).collect();
    assert_eq!(cached, [false, true, true, true, false, true]);
    assert!(
        requests
            .iter()
            .filter(|r| r["cached"] == true)
            .all(|r| r["attempts"] == 0)
    );
}

/// Today's spend of key `alpha`, as `/v1/keys/usage` says it.
async fn key_spend(gw: &inproc::Gw) -> Value {
    let k = gw.key_usage("k-admin", "alpha").await;
    json!([k["today"], k["now"]["tpm"]["used"]])
}

#[tokio::test(start_paused = true)]
async fn the_key_scope_keeps_keys_apart_and_the_shared_scope_does_not() {
    let gw = gw(&[
        ("m", CacheScope::Key, 0.0),
        ("shared", CacheScope::Shared, 0.0),
    ]);
    gw.chat_with(&ask("m", "hi"), &[ALPHA]).await;
    let other = gw.chat_with(&ask("m", "hi"), &[BETA]).await;
    assert_eq!(cache_hdr(&other), Some("miss"), "another key never hits");
    assert_eq!(calls(&gw, "m"), 2);
    let again = gw.chat_with(&ask("m", "hi"), &[BETA]).await;
    assert_eq!(cache_hdr(&again), Some("hit"));

    let a = gw.chat_with(&ask("shared", "x"), &[ALPHA]).await;
    assert_eq!(cache_hdr(&a), Some("miss"));
    let b = gw.chat_with(&ask("shared", "x"), &[BETA]).await;
    assert_eq!(cache_hdr(&b), Some("hit"), "{:?}", b.headers);
    // The route's entry answered: the model's own was not asked.
    assert_eq!(calls(&gw, "m"), 3);
}

#[tokio::test(start_paused = true)]
async fn temperature_and_the_clients_cache_control_decide() {
    let gw = gw(&[("m", CacheScope::Key, 0.5)]);
    // Above max_temperature (and no temperature at all counts as 1): off.
    let mut hot = chat("m", "t");
    hot["temperature"] = json!(0.9);
    for _ in 0..2 {
        assert_eq!(cache_hdr(&gw.chat_with(&hot, &[ALPHA]).await), Some("off"));
    }
    for _ in 0..2 {
        let r = gw.chat_with(&chat("m", "t"), &[ALPHA]).await;
        assert_eq!(cache_hdr(&r), Some("off"));
    }
    assert_eq!(calls(&gw, "m"), 4);
    // A seed makes a hot request deterministic enough.
    hot["seed"] = json!(7);
    assert_eq!(cache_hdr(&gw.chat_with(&hot, &[ALPHA]).await), Some("miss"));
    assert_eq!(cache_hdr(&gw.chat_with(&hot, &[ALPHA]).await), Some("hit"));

    // no-store: neither looked up nor stored.
    let ns = [ALPHA, ("cache-control", "no-store")];
    assert_eq!(
        cache_hdr(&gw.chat_with(&ask("m", "s"), &ns).await),
        Some("off")
    );
    assert_eq!(
        cache_hdr(&gw.chat_with(&ask("m", "s"), &[ALPHA]).await),
        Some("miss")
    );
    assert_eq!(cache_hdr(&gw.chat_with(&hot, &ns).await), Some("off"));

    // no-cache and x-conclave-cache: bypass skip the lookup but store.
    let nc = [ALPHA, ("cache-control", "max-age=0, no-cache")];
    assert_eq!(
        cache_hdr(&gw.chat_with(&ask("m", "c"), &nc).await),
        Some("bypass")
    );
    assert_eq!(
        cache_hdr(&gw.chat_with(&ask("m", "c"), &[ALPHA]).await),
        Some("hit")
    );
    let bp = [ALPHA, ("x-conclave-cache", "bypass")];
    assert_eq!(
        cache_hdr(&gw.chat_with(&ask("m", "c"), &bp).await),
        Some("bypass")
    );
    let before = calls(&gw, "m");
    assert_eq!(
        cache_hdr(&gw.chat_with(&ask("m", "c"), &[ALPHA]).await),
        Some("hit")
    );
    assert_eq!(calls(&gw, "m"), before);

    let bad = gw
        .chat_with(&ask("m", "c"), &[ALPHA, ("x-conclave-cache", "please")])
        .await;
    assert_eq!(bad.status, 400, "{}", bad.text);
}

#[tokio::test(start_paused = true)]
async fn errors_and_cut_streams_are_never_stored() {
    let gw = gw(&[
        ("broken", CacheScope::Key, 0.0),
        ("cut", CacheScope::Key, 0.0),
    ]);
    let a = gw.chat_with(&ask("broken", "x"), &[ALPHA]).await;
    assert!(a.status >= 500, "{}", a.text);
    let n = calls(&gw, "broken");
    let b = gw.chat_with(&ask("broken", "x"), &[ALPHA]).await;
    assert!(b.status >= 500);
    assert!(calls(&gw, "broken") > n, "an error is not stored");

    let s = gw.chat_with(&streamed(ask("cut", "x")), &[ALPHA]).await;
    assert_eq!(s.status, 200);
    assert!(s.text.contains("error"), "{}", s.text);
    let n = calls(&gw, "cut");
    let again = gw.chat_with(&streamed(ask("cut", "x")), &[ALPHA]).await;
    assert_eq!(cache_hdr(&again), Some("miss"));
    assert!(calls(&gw, "cut") > n, "a cut stream is not stored");
}

#[tokio::test(start_paused = true)]
async fn a_judge_panel_is_cached_whole_and_its_members_one_by_one() {
    let gw = gw(&[
        ("panel", CacheScope::Key, 0.0),
        ("p1", CacheScope::Shared, 0.0),
    ]);
    let first = gw.chat_with(&ask("panel", "q"), &[ALPHA]).await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(cache_hdr(&first), Some("miss"));
    let made = gw.arrivals("sim").len();
    assert_eq!(made, 5, "three panellists, synthesis, default");
    let hit = gw.chat_with(&ask("panel", "q"), &[ALPHA]).await;
    assert_eq!(cache_hdr(&hit), Some("hit"));
    assert_eq!(
        hit.json()["choices"][0]["message"],
        first.json()["choices"][0]["message"]
    );
    assert_eq!(gw.arrivals("sim").len(), made, "all five calls saved");

    // Another panel with p1 on it: p1's answer to the same request is
    // its entry; p1 is not called again.
    let other = gw.chat_with(&ask("panel2", "q"), &[BETA]).await;
    assert_eq!(other.status, 200, "{}", other.text);
    assert_eq!(calls(&gw, "p1"), 1);
    assert_eq!(calls(&gw, "p2"), 2);
    let events = gw.events(&["cache_hit"]).await;
    let layers: Vec<&str> = events.iter().filter_map(|e| e["layer"].as_str()).collect();
    assert_eq!(layers, ["route", "model"]);
}

#[tokio::test(start_paused = true)]
async fn delete_v1_cache_is_for_admins() {
    let gw = gw(&[
        ("m", CacheScope::Key, 0.0),
        ("shared", CacheScope::Key, 0.0),
    ]);
    gw.chat_with(&ask("m", "a"), &[ALPHA]).await;
    gw.chat_with(&ask("m", "b"), &[ALPHA]).await;
    gw.chat_with(&ask("shared", "c"), &[ALPHA]).await;
    let delete = |headers: Vec<(&'static str, &'static str)>, path: &'static str| {
        let gw = &gw;
        async move {
            let mut req = axum::http::Request::builder()
                .method(axum::http::Method::DELETE)
                .uri(path);
            for (k, v) in headers {
                req = req.header(k, v);
            }
            gw.send(req.body(axum::body::Body::empty()).unwrap()).await
        }
    };
    assert_eq!(delete(vec![], "/v1/cache").await.status, 401);
    let r = delete(vec![ALPHA], "/v1/cache").await;
    assert_eq!(r.status, 403);
    assert_eq!(r.json()["error"]["code"], "admin_only");
    let r = delete(vec![ADMIN], "/v1/cache?route=shared").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json(), json!({"deleted": 1}));
    assert_eq!(delete(vec![ADMIN], "/cache?nope=1").await.status, 400);
    let r = delete(vec![ADMIN], "/cache").await;
    assert_eq!(r.json(), json!({"deleted": 3}), "m: a, b, c");
    assert_eq!(
        cache_hdr(&gw.chat_with(&ask("m", "a"), &[ALPHA]).await),
        Some("miss")
    );
}

#[tokio::test(start_paused = true)]
async fn contestants_are_never_answered_from_a_models_cache() {
    let gw = gw(&[("p1", CacheScope::Shared, 0.0)]);
    for _ in 0..2 {
        let r = gw.chat_with(&ask("ab", "q"), &[ALPHA]).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    assert_eq!(
        calls(&gw, "p1"),
        2,
        "a blind comparison needs fresh answers"
    );
    // The same model asked directly is cached as usual.
    gw.chat_with(&ask("p1", "q"), &[ALPHA]).await;
    let r = gw.chat_with(&ask("p1", "q"), &[ALPHA]).await;
    assert_eq!(cache_hdr(&r), Some("hit"));
    assert_eq!(calls(&gw, "p1"), 3);
}

#[tokio::test(start_paused = true)]
async fn a_votes_samples_each_reach_their_model() {
    // A rule that would cache every sample of p1.
    let gw = gw(&[("p1", CacheScope::Shared, 2.0)]);
    let r = gw.chat_with(&ask("sc", "q"), &[ALPHA]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(calls(&gw, "p1"), 4, "four samples, four calls: none merged");
    let r = gw.chat_with(&ask("sc", "q"), &[ALPHA]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(calls(&gw, "p1"), 8, "and none answered from the cache");
}

#[tokio::test(start_paused = true)]
async fn chat_responses_and_messages_share_entries() {
    let gw = gw(&[("m", CacheScope::Key, 0.0)]);
    let mut c = ask("m", "shared across dialects");
    c["max_tokens"] = json!(50);
    let first = gw.chat_with(&c, &[ALPHA]).await;
    assert_eq!(cache_hdr(&first), Some("miss"));
    let messages = json!({"model": "m", "max_tokens": 50, "temperature": 0,
        "messages": [{"role": "user", "content": "shared across dialects"}]});
    let r = gw.post_with("/v1/messages", &messages, &[ALPHA]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(cache_hdr(&r), Some("hit"), "{}", r.text);
    assert_eq!(
        r.json()["content"][0]["text"],
        "answer to shared across dialects"
    );
    let responses = json!({"model": "m", "max_output_tokens": 50, "temperature": 0,
        "input": [{"role": "user", "content": "shared across dialects"}], "store": false});
    let r = gw.post_with("/v1/responses", &responses, &[ALPHA]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(cache_hdr(&r), Some("hit"), "{}", r.text);
    assert_eq!(calls(&gw, "m"), 1);
}
