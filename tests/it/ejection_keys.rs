//! Ejection and tenants, black-box (in-process, on paused time): one key
//! whose requests an upstream answers with 500s (llama-cpp-python answers
//! every validation error so) never takes the model, nor another model of
//! the same upstream, from another key; a model that fails for two keys
//! is ejected (that model only: the upstream's other models serve); a key
//! whose failures ejected a model is never its trial; a request's retries
//! count once; and a gateway without keys (one tenant) ejects as before.
//! A refused connection ejects the whole upstream (it says nothing about
//! whose request met it), on real time against a closed port.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, UNIX_EPOCH};

use common::inproc::{Gw, START};
use serde_json::{Value, json};

/// One upstream serving two models that answer a body carrying `bad_field`
/// with a 500, as llama-cpp-python answers a validation error; retried
/// twice, so that each bad request would have counted three times.
const UPSTREAM: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.llama]
kind = "mock"
retries = { max = 2, backoff = "10ms" }
eject = { after = 5, cooldown = "30s" }

[upstreams.llama.models.m1]
reply = { text = "fine" }

[[upstreams.llama.models.m1.rules]]
when_contains = "bad_field"
then = { status = 500, error_message = "1 validation error for Request" }

[upstreams.llama.models.m2]
reply = { text = "fine" }

[[upstreams.llama.models.m2.rules]]
when_contains = "bad_field"
then = { status = 500, error_message = "1 validation error for Request" }

[upstreams.llama.models.broken]
status = 500
error_message = "CUDA error"

[upstreams.llama.models.picky]
reply = { text = "fine" }

[[upstreams.llama.models.picky.rules]]
when_contains = "bad_field"
then = { status = 500, error_message = "1 validation error for Request" }

[models.m1]
upstream = "llama"

[models.m2]
upstream = "llama"

[models.broken]
upstream = "llama"

[models.picky]
upstream = "llama"
"#;

const KEYS: &str = r#"
[[keys]]
name = "attacker"
key_env = "KEY_ATTACKER"

[[keys]]
name = "victim"
key_env = "KEY_VICTIM"

[[keys]]
name = "third"
key_env = "KEY_THIRD"
"#;

const ENV: &[(&str, &str)] = &[
    ("KEY_ATTACKER", "k-attacker"),
    ("KEY_VICTIM", "k-victim"),
    ("KEY_THIRD", "k-third"),
];

fn keyed() -> Gw {
    Gw::start_with(&format!("{UPSTREAM}{KEYS}"), ENV, UNIX_EPOCH + START)
}

fn ask(model: &str, text: &str) -> Value {
    json!({"model": model, "messages": [{"role": "user", "content": text}]})
}

/// A chat request of `key`'s: its status.
async fn chat(gw: &Gw, key: &str, model: &str, text: &str) -> u16 {
    let auth = format!("Bearer k-{key}");
    let body = ask(model, text);
    gw.chat_with(&body, &[("authorization", auth.as_str())])
        .await
        .status
}

/// The value of the metric line starting with `series`.
fn metric(gw: &Gw, series: &str) -> Option<f64> {
    gw.metrics()
        .lines()
        .find(|l| l.starts_with(series))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The attack of issue 40: `bad` bad requests of the attacker's (two in
/// the issue) before each of 30 requests of the victim's, one round a
/// second; the share of the victim's requests that succeeded.
async fn attack(gw: &Gw, bad: usize, attacked: &str, victim_model: &str) -> f64 {
    let mut served = 0;
    for _ in 0..30 {
        for _ in 0..bad {
            let s = chat(gw, "attacker", attacked, "hi {\"bad_field\": 1}").await;
            assert_eq!(s, 502, "the attacker gets the upstream's failure");
        }
        if chat(gw, "victim", victim_model, "hello").await == 200 {
            served += 1;
        }
        tokio::time::advance(Duration::from_secs(1)).await;
    }
    f64::from(served) / 30.0
}

#[tokio::test(start_paused = true)]
async fn one_keys_bad_requests_never_take_the_model_from_another_key() {
    let gw = keyed();
    let same = attack(&gw, 2, "m1", "m1").await;
    let other = attack(&gw, 2, "m1", "m2").await;
    // Ten in a row, past `eject.after` even counted once each: still one
    // key's alone.
    let heavy = attack(&gw, 10, "m1", "m1").await;
    eprintln!(
        "victim availability under attack: same model {same:.3}, other model {other:.3}, \
         ten bad requests a round {heavy:.3}"
    );
    assert!(same >= 0.99, "same model: {same}");
    assert!(other >= 0.99, "another model of the upstream: {other}");
    assert!(heavy >= 0.99, "ten bad requests a round: {heavy}");
    // Each bad request reached the upstream (some retried, as the route's
    // retry budget allowed, yet counted once), and nothing was ejected.
    let asked_m1 = 60 + 30 + 60 + 300 + 30;
    let m1 = gw.arrivals("llama").iter().filter(|m| *m == "m1").count();
    assert!(m1 > asked_m1, "{m1} calls for {asked_m1} requests");
    assert_eq!(
        metric(
            &gw,
            r#"conclave_upstream_healthy{upstream="llama",model="m1"}"#
        ),
        Some(1.0)
    );
    assert!(!gw.metrics().contains("conclave_ejections_total"));
    let ready = gw.get("/readyz").await.json();
    assert_eq!(ready["health"]["llama"]["health"], "serving", "{ready}");
    assert_eq!(
        ready["health"]["llama"]["models"]["m1"]["health"], "serving",
        "{ready}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_model_failing_for_two_keys_is_ejected_and_the_others_serve() {
    let gw = keyed();
    // Failing for everyone: ejected after five requests of two keys
    // (each retried twice, each counted once).
    for (i, key) in ["attacker", "victim", "attacker", "victim", "attacker"]
        .iter()
        .enumerate()
    {
        assert_eq!(chat(&gw, key, "broken", "hi").await, 502, "request {i}");
    }
    let sent = gw.arrivals("llama").len();
    assert!(sent > 5, "retried: {sent}");
    let started = tokio::time::Instant::now();
    assert_eq!(chat(&gw, "third", "broken", "hi").await, 503);
    assert_eq!(started.elapsed(), Duration::ZERO, "refused at once");
    assert_eq!(gw.arrivals("llama").len(), sent, "not called");
    // The upstream's other models serve.
    assert_eq!(chat(&gw, "third", "m2", "hi").await, 200);
    let m = |series: &str| metric(&gw, series);
    assert_eq!(
        m(r#"conclave_upstream_healthy{upstream="llama",model="broken"}"#),
        Some(0.0)
    );
    assert_eq!(
        m(r#"conclave_upstream_healthy{upstream="llama",model=""}"#),
        Some(1.0)
    );
    assert_eq!(
        m(r#"conclave_ejections_total{upstream="llama",model="broken"}"#),
        Some(1.0)
    );
    let ready = gw.get("/readyz").await.json();
    let llama = &ready["health"]["llama"];
    assert_eq!(llama["health"], "serving", "{ready}");
    assert_eq!(llama["models"]["broken"]["health"], "ejected", "{ready}");
    assert_eq!(llama["models"]["broken"]["retry_after_s"], 30, "{ready}");
    assert_eq!(llama["models"]["m2"]["health"], "serving", "{ready}");
    let events = gw.events(&["upstream_ejected"]).await;
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["upstream"], "llama");
    assert_eq!(events[0]["model"], "broken");
    assert_eq!(events[0]["failures"], 5);
}

#[tokio::test(start_paused = true)]
async fn a_key_whose_failures_ejected_a_model_is_never_its_trial() {
    let gw = keyed();
    // `picky` fails the bad body only: the attacker and the victim both
    // sent it (the victim once), and it is ejected.
    for key in ["attacker", "attacker", "attacker", "attacker", "victim"] {
        assert_eq!(chat(&gw, key, "picky", "bad_field").await, 502);
    }
    assert_eq!(chat(&gw, "third", "picky", "hi").await, 503);
    tokio::time::advance(Duration::from_secs(30)).await;
    // The cooldown is over: the attacker's bad request is its own probe,
    // not the trial. It fails, and holds back the attacker alone.
    let before = gw.arrivals("llama").len();
    assert_eq!(chat(&gw, "attacker", "picky", "bad_field").await, 502);
    assert_eq!(
        gw.arrivals("llama").len(),
        before + 1,
        "a probe, not retried"
    );
    assert_eq!(chat(&gw, "attacker", "picky", "hi").await, 503);
    // Another key's call is the trial: it succeeds, and the model serves
    // every key again.
    assert_eq!(chat(&gw, "third", "picky", "hi").await, 200);
    assert_eq!(chat(&gw, "attacker", "picky", "hi").await, 200);
    let events = gw.events(&["upstream_ejected", "upstream_recovered"]).await;
    let kinds: Vec<_> = events.iter().map(|e| e["event"].clone()).collect();
    assert_eq!(
        kinds,
        ["upstream_ejected", "upstream_recovered"],
        "{events:?}"
    );
    assert_eq!(events[1]["model"], "picky");
}

#[tokio::test(start_paused = true)]
async fn without_keys_one_tenant_ejects_as_before_and_retries_count_once() {
    let gw = Gw::start(&UPSTREAM.replace("after = 5", "after = 2"));
    // One request, three tries: one failure.
    assert_eq!(chat(&gw, "nobody", "broken", "hi").await, 502);
    assert_eq!(gw.arrivals("llama").len(), 3);
    assert_eq!(chat(&gw, "nobody", "broken", "hi").await, 502);
    // Two requests in a row: ejected (one tenant: no second key needed).
    let sent = gw.arrivals("llama").len();
    assert_eq!(chat(&gw, "nobody", "broken", "hi").await, 503);
    assert_eq!(gw.arrivals("llama").len(), sent);
    assert_eq!(chat(&gw, "nobody", "m1", "hi").await, 200, "another model");
}

/// A closed port on 127.0.0.1, found by binding one and letting it go.
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

#[tokio::test]
async fn a_refused_connection_ejects_the_whole_upstream() {
    let toml = format!(
        r#"
[upstreams.gone]
kind = "openai"
base_url = "http://127.0.0.1:{}/v1"
retries = {{ max = 0 }}
eject = {{ after = 2, cooldown = "30s" }}

[models.x]
upstream = "gone"

[models.y]
upstream = "gone"
{KEYS}"#,
        closed_port()
    );
    let gw = Gw::start_with(&toml, ENV, std::time::SystemTime::now());
    assert_eq!(chat(&gw, "attacker", "x", "hi").await, 502);
    assert_eq!(chat(&gw, "attacker", "x", "hi").await, 502);
    // Its transport failed, whoever asked: every model, every key.
    assert_eq!(chat(&gw, "victim", "y", "hi").await, 503);
    assert_eq!(
        metric(
            &gw,
            r#"conclave_upstream_healthy{upstream="gone",model=""}"#
        ),
        Some(0.0)
    );
    let ready = gw.get("/readyz").await.json();
    assert_eq!(ready["health"]["gone"]["health"], "ejected", "{ready}");
    assert_eq!(
        ready["health"]["gone"]["models"]["y"]["health"], "serving",
        "{ready}"
    );
}
