//! `/readyz` and `/metrics` under load and behind a key: readiness answers
//! from a short cache, probing each upstream at most once per period
//! however many callers ask at once, each probe bounded; with
//! `server.metrics_key_env` set, `/metrics` and `/readyz` take that key
//! (or an admin key) and `/healthz` stays open.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::extract::{Path, State};
use axum::routing::get;
use common::*;
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::Instant;

/// A fake upstream that counts `GET /{name}/v1/models` per name; the
/// name `hang` never answers.
async fn counting_upstream() -> (String, Arc<Mutex<HashMap<String, usize>>>) {
    let hits = Arc::new(Mutex::new(HashMap::<String, usize>::new()));
    let app = axum::Router::new()
        .route(
            "/{name}/v1/models",
            get(
                |State(hits): State<Arc<Mutex<HashMap<String, usize>>>>,
                 Path(name): Path<String>| async move {
                    *hits.lock().entry(name.clone()).or_default() += 1;
                    if name == "hang" {
                        tokio::time::sleep(Duration::from_secs(60)).await;
                    }
                    axum::Json(json!({"object": "list", "data": []}))
                },
            ),
        )
        .with_state(hits.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, hits)
}

fn upstreams(base: &str, names: &[&str]) -> String {
    let mut t = String::new();
    for n in names {
        t.push_str(&format!(
            "[upstreams.{n}]\nkind = \"openai\"\nbase_url = \"{base}/{n}/v1\"\napi_key_env = \"UP_KEY\"\n\n\
             [models.m-{n}]\nupstream = \"{n}\"\n\n"
        ));
    }
    t
}

#[tokio::test(start_paused = true)]
async fn readyz_probes_each_upstream_once_per_period_however_many_ask() {
    let (base, hits) = counting_upstream().await;
    // A period far longer than the test, however slow the machine: every
    // ask after the first round is within it.
    let gw = Srv::gateway_env(
        &format!(
            "[server]\nreadyz_cache = \"60s\"\n\n{}",
            upstreams(&base, &["a", "b", "hang"])
        ),
        &[("UP_KEY", "sk-upstream-secret-1234")],
    );
    let http = client();
    let started = Instant::now();
    // Ten at once, then ten one after another.
    let burst = (0..10).map(|_| {
        let (http, url) = (http.clone(), gw.url("/readyz"));
        async move { http.get(url).send().await.unwrap() }
    });
    let mut answers = futures::future::join_all(burst).await;
    for _ in 0..10 {
        answers.push(http.get(gw.url("/readyz")).send().await.unwrap());
    }
    let took = started.elapsed();
    for r in answers {
        assert_eq!(r.status(), 503);
        let body: serde_json::Value = r.json().await.unwrap();
        assert_eq!(body["upstreams"]["a"], "ok", "{body}");
        assert_eq!(body["upstreams"]["b"], "ok", "{body}");
        let hang = body["upstreams"]["hang"].as_str().unwrap();
        assert!(hang.starts_with("unreachable"), "{body}");
        assert!(!body.to_string().contains("sk-upstream"), "{body}");
    }
    let seen = hits.lock().clone();
    for n in ["a", "b", "hang"] {
        assert_eq!(seen.get(n), Some(&1), "probes of {n}: {seen:?}");
    }
    // One bounded probe round (the hung upstream's 3 s), not twenty (a
    // minute).
    assert!(took < Duration::from_secs(30), "{took:?}");
}

#[tokio::test]
async fn the_metrics_key_guards_metrics_and_readyz_but_not_healthz() {
    let (base, _hits) = counting_upstream().await;
    let toml = format!(
        "[server]\nmetrics_key_env = \"METRICS_KEY\"\n\n\
         [[keys]]\nname = \"ops\"\nkey_env = \"KEY_OPS\"\nadmin = true\n\n\
         [[keys]]\nname = \"team\"\nkey_env = \"KEY_TEAM\"\n\n{}",
        upstreams(&base, &["a"])
    );
    let gw = Srv::gateway_env(
        &toml,
        &[
            ("UP_KEY", "sk-upstream-secret-1234"),
            ("METRICS_KEY", "scrape-0123456789"),
            ("KEY_OPS", "k-ops-0123456789"),
            ("KEY_TEAM", "k-team-0123456789"),
        ],
    );
    let http = client();
    let get = |path: &str, key: Option<&str>| {
        let mut req = http.get(gw.url(path));
        if let Some(k) = key {
            req = req.bearer_auth(k);
        }
        send(req)
    };
    for path in ["/metrics", "/readyz"] {
        for key in [None, Some("wrong-key-0123456789")] {
            let r = get(path, key).await;
            assert_eq!(r.status, 401, "{path} {key:?}: {}", r.text);
            let e = &r.json()["error"];
            assert_eq!(e["code"], "invalid_api_key", "{path}: {}", r.text);
            assert_eq!(e["type"], "invalid_request_error");
        }
        let r = get(path, Some("k-team-0123456789")).await;
        assert_eq!(r.status, 403, "{path}: {}", r.text);
        assert_eq!(r.json()["error"]["code"], "admin_only");
        for key in ["scrape-0123456789", "k-ops-0123456789"] {
            let r = get(path, Some(key)).await;
            assert_eq!(r.status, 200, "{path}: {}", r.text);
        }
    }
    let r = get("/healthz", None).await;
    assert_eq!(r.status, 200);
    // The metrics key is a secret like any other: in no answer, no log.
    let m = get("/metrics", Some("scrape-0123456789")).await.text;
    for secret in ["scrape-0123456789", "sk-upstream-secret"] {
        assert!(!m.contains(secret) && !gw.stderr().contains(secret));
    }
}
