//! The shared state on a real `redis-server`: the gateway names it at
//! start, `check --probe` and `/readyz` check it, and a gateway started
//! while Redis is down becomes ready by itself once Redis is up.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::redis::RedisServer;
use common::*;
use serde_json::Value;

fn config(redis_url: &str, on_error: &str) -> String {
    format!(
        "[server]\nreadyz_cache = \"10ms\"\n\n[state]\nurl = \"{redis_url}\"\non_error = \"{on_error}\"\ntimeout = \"200ms\"\n\n\
         [upstreams.sim]\nkind = \"mock\"\n\n[models.m]\nupstream = \"sim\"\n"
    )
}

async fn ready(gw: &Srv) -> (u16, Value) {
    let r = reqwest::get(gw.url("/readyz")).await.unwrap();
    let status = r.status().as_u16();
    (status, r.json().await.unwrap())
}

/// Polls `/readyz` until its status is `want` (for up to 10 s).
async fn ready_becomes(gw: &Srv, want: u16) -> Value {
    let became = eventually(10, || async { ready(gw).await.0 == want }).await;
    let (_, body) = ready(gw).await;
    assert!(became, "/readyz never answered {want}: {body}");
    body
}

#[tokio::test]
async fn readyz_and_the_start_line_name_redis_and_follow_it_down_and_up() {
    let mut redis = RedisServer::start_with(Some("hunter2"));
    let gw = Srv::gateway(&config(&redis.url(), "fail_closed"));
    let body = ready_becomes(&gw, 200).await;
    assert_eq!(body["state"]["backend"], "redis");
    assert_eq!(body["state"]["status"], "ok");
    assert!(!body.to_string().contains("hunter2"), "{body}");
    let log = gw.stderr();
    assert!(
        log.contains("state redis at redis://:***@127.0.0.1"),
        "{log}"
    );
    redis.stop();
    let body = ready_becomes(&gw, 503).await;
    assert!(
        body["state"]["status"]
            .as_str()
            .unwrap()
            .starts_with("unreachable"),
        "{body}"
    );
    redis.restart();
    ready_becomes(&gw, 200).await;
    assert!(!gw.stderr().contains("hunter2"));
}

#[tokio::test]
async fn a_fail_open_replica_stays_ready_while_redis_is_down() {
    let mut redis = RedisServer::start();
    let gw = Srv::gateway(&config(&redis.url(), "fail_open"));
    ready_becomes(&gw, 200).await;
    redis.stop();
    let body = ready_becomes(&gw, 200).await;
    let seen = eventually(5, || async {
        ready(&gw).await.1["state"]["status"] != "ok"
    })
    .await;
    assert!(seen, "redis stopped but /readyz still says ok: {body}");
    let (_, body) = ready(&gw).await;
    assert_eq!(body["status"], "ready", "{body}");
}

#[test]
fn check_probe_says_whether_redis_answers() {
    let redis = RedisServer::start();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(&path, config(&redis.url(), "fail_closed")).unwrap();
    let run = || {
        std::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
            .args(["check", "--probe", "--config"])
            .arg(&path)
            .output()
            .unwrap()
    };
    let out = run();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(out.status.success(), "{text}");
    assert!(text.contains("state redis at redis://127.0.0.1"), "{text}");
    assert!(text.contains(": answers"), "{text}");
    drop(redis);
    let out = run();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("unreachable"), "{text}");
}

/// An upstream's `rpm` is its provider's limit: two replicas together
/// send it no more than that. Each replica alone would let its two calls
/// through (2 of 3 a minute); shared, the fourth call's turn is 20 s
/// away, past its deadline, so it is refused at once (a 429).
#[tokio::test]
async fn an_upstreams_rpm_holds_across_replicas() {
    let redis = RedisServer::start();
    let toml = format!(
        "[server]\nrequest_timeout = \"5s\"\n\n[state]\nurl = \"{}\"\ntimeout = \"2s\"\n\n\
         [upstreams.sim]\nkind = \"mock\"\nrpm = 3\n\n[models.m]\nupstream = \"sim\"\n",
        redis.url()
    );
    let (a, b) = (Srv::gateway(&toml), Srv::gateway(&toml));
    let client = reqwest::Client::new();
    let ask = |gw: &Srv| {
        client
            .post(gw.url("/v1/chat/completions"))
            .json(
                &serde_json::json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}),
            )
            .send()
    };
    let started = tokio::time::Instant::now();
    let answers = futures::future::join_all([ask(&a), ask(&b), ask(&a), ask(&b)]).await;
    let statuses: Vec<u16> = answers
        .into_iter()
        .map(|r| r.unwrap().status().as_u16())
        .collect();
    let ok = statuses.iter().filter(|s| **s == 200).count();
    let limited = statuses.iter().filter(|s| **s == 429).count();
    assert_eq!((ok, limited), (3, 1), "{statuses:?}");
    // The next turn is 20 s away (rpm 3): the refusal does not wait for
    // it. Generous, for a busy machine.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "the refusal waited"
    );
}

/// The replicas configs the README and `deploy/replicas/` use are valid.
#[test]
fn the_replicas_configs_check() {
    for file in ["config/replicas.toml", "deploy/replicas/conclave.toml"] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
            .args(["check", "--config", file])
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .env("CONCLAVE_REDIS_URL", "redis://127.0.0.1:6379/0")
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout).to_string()
            + &String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{file}: {text}");
        assert!(!text.contains("warning"), "{file}: {text}");
    }
}

/// Settlements go to Redis in pipelines of the script's SHA: a Redis
/// that lost its scripts (restarted, `SCRIPT FLUSH`) is sent the script
/// again, and nothing is lost or left reserved.
#[tokio::test]
async fn settlements_land_after_redis_loses_its_scripts() {
    let redis = RedisServer::start();
    let toml = format!(
        "[state]\nurl = \"{}\"\ntimeout = \"2s\"\n\n\
         [[keys]]\nname = \"team\"\nkey_env = \"KEY_T\"\ndaily_tokens = 100000\n\n\
         [[keys]]\nname = \"ops\"\nkey_env = \"KEY_O\"\nadmin = true\n\n\
         [upstreams.sim]\nkind = \"mock\"\n\n[models.m]\nupstream = \"sim\"\n",
        redis.url()
    );
    let gw = Srv::gateway_env(&toml, &[("KEY_T", "k-team"), ("KEY_O", "k-ops")]);
    let client = reqwest::Client::new();
    let ask = || async {
        let r = client
            .post(gw.url("/v1/chat/completions"))
            .bearer_auth("k-team")
            .json(&serde_json::json!({"model": "m", "max_tokens": 20,
                "messages": [{"role": "user", "content": "hi"}]}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let body: Value = r.json().await.unwrap();
        body["usage"]["total_tokens"].as_u64().unwrap()
    };
    let today = || async { key_usage(&gw, "k-ops", "team").await["today"].clone() };
    let first = ask().await;
    assert!(
        eventually(5, || async { today().await["tokens"] == first }).await,
        "{}",
        today().await
    );
    assert_eq!(redis.cli(&["SCRIPT", "FLUSH"]), "OK");
    let second = ask().await;
    let landed = eventually(5, || async {
        let t = today().await;
        t["tokens"] == first + second && t["reserved_tokens"] == 0
    })
    .await;
    assert!(landed, "{}", today().await);
}
