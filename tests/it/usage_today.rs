//! `GET /v1/usage`: today's (UTC) requests per route and attempts per
//! model, the increments of the Prometheus counters since midnight or the
//! gateway's start (one source), admin keys only, starting again at zero
//! when the day rolls over on the gateway's clock.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

use crate::common::inproc::{Gw, START};
use crate::common::{chat, samples};

const ENV: &[(&str, &str)] = &[("K_ADMIN", "sk-admin"), ("K_ALICE", "sk-alice")];

const KEYS: &str = "\n[[keys]]\nname = \"admin\"\nkey_env = \"K_ADMIN\"\nadmin = true\n\n\
     [[keys]]\nname = \"alice\"\nkey_env = \"K_ALICE\"\nrpm = 3\n";

fn demo() -> Gw {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo.toml")).unwrap();
    let text = text.replace("event_log = \"conclave-events.jsonl\"", "");
    Gw::start_with(&format!("{text}\n{KEYS}"), ENV, UNIX_EPOCH + START)
}

async fn ask(gw: &Gw, route: &str, key: &str) -> u16 {
    gw.chat_as(&chat(route, "hi"), key).await.status
}

async fn usage(gw: &Gw) -> Value {
    let r = gw
        .get_with("/v1/usage", &[("authorization", "Bearer sk-admin")])
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
}

fn sum(metrics: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    samples(metrics, name, labels).iter().sum()
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

#[tokio::test(start_paused = true)]
async fn todays_usage_is_prometheuss_counters_and_rolls_over_at_midnight() {
    let gw = demo();
    // A passthrough, a chain, a judge panel, a vote; alice's fourth
    // request is over her rpm (a 429 counted under its route).
    for (route, key) in [
        ("fast", "sk-admin"),
        ("fast", "sk-alice"),
        ("review", "sk-alice"),
        ("council", "sk-admin"),
        ("sc", "sk-alice"),
    ] {
        assert_eq!(ask(&gw, route, key).await, 200, "{route}");
    }
    assert_eq!(ask(&gw, "review", "sk-alice").await, 429);
    let u = usage(&gw).await;
    let metrics = gw.metrics();

    assert_eq!(u["object"], "usage");
    assert_eq!(u["day"], "2026-03-01");
    // The gateway started after midnight: the tally counts from then.
    assert_eq!(u["since"], START.as_secs());
    let routes = u["routes"].as_array().unwrap();
    let names: Vec<&str> = routes
        .iter()
        .map(|r| r["route"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["council", "fast", "review", "sc"]);
    for r in routes {
        let route = r["route"].as_str().unwrap();
        let at = [("route", route)];
        let requests = sum(&metrics, "conclave_requests_total", &at);
        let ok = sum(
            &metrics,
            "conclave_requests_total",
            &[("route", route), ("status", "200")],
        );
        assert_eq!(r["requests"].as_f64(), Some(requests), "{route}");
        assert_eq!(r["errors"].as_f64(), Some(requests - ok), "{route}");
        assert!(r["input_tokens"].as_u64().unwrap() > 0, "{r}");
        assert!(r["output_tokens"].as_u64().unwrap() > 0, "{r}");
    }
    let review = routes.iter().find(|r| r["route"] == "review").unwrap();
    assert_eq!(
        (review["requests"].as_u64(), review["errors"].as_u64()),
        (Some(2), Some(1))
    );

    let models = u["models"].as_array().unwrap();
    let mut attempts_seen = 0.0;
    for m in models {
        let (model, upstream) = (
            m["model"].as_str().unwrap(),
            m["upstream"].as_str().unwrap(),
        );
        let attempts = sum(
            &metrics,
            "conclave_attempts_total",
            &[("model", model), ("upstream", upstream)],
        );
        assert!(attempts > 0.0, "{model}");
        assert_eq!(m["attempts"].as_f64(), Some(attempts), "{model}");
        attempts_seen += attempts;
        for kind in ["input", "output"] {
            let tokens = sum(
                &metrics,
                "conclave_tokens_total",
                &[("model", model), ("kind", kind)],
            );
            assert_eq!(
                m[format!("{kind}_tokens")].as_f64(),
                Some(tokens),
                "{model} {kind}"
            );
        }
        let cost = sum(&metrics, "conclave_cost_usd_total", &[("model", model)]);
        assert!(
            close(m["cost_usd"].as_f64().unwrap(), cost),
            "{model}: {m} {cost}"
        );
    }
    // Every attempt Prometheus counted is some model's today.
    assert_eq!(attempts_seen, sum(&metrics, "conclave_attempts_total", &[]));
    // And the spend by route is the spend by model.
    let by_route: f64 = routes.iter().map(|r| r["cost_usd"].as_f64().unwrap()).sum();
    let by_model: f64 = models.iter().map(|m| m["cost_usd"].as_f64().unwrap()).sum();
    assert!(
        by_model > 0.0 && close(by_route, by_model),
        "{by_route} {by_model}"
    );

    // A minute later it is 2026-03-02 (UTC): a new tally, from midnight,
    // while Prometheus's counters go on.
    tokio::time::advance(Duration::from_secs(61)).await;
    let u = usage(&gw).await;
    assert_eq!(u["day"], "2026-03-02");
    assert_eq!(u["since"], START.as_secs() + 60);
    assert_eq!(u["routes"], Value::Array(vec![]));
    assert_eq!(u["models"], Value::Array(vec![]));
    assert_eq!(ask(&gw, "fast", "sk-admin").await, 200);
    let u = usage(&gw).await;
    assert_eq!(u["routes"][0]["route"], "fast");
    assert_eq!(u["routes"][0]["requests"], 1);
    assert_eq!(u["models"][0]["attempts"], 1);
    let metrics = gw.metrics();
    assert_eq!(
        sum(&metrics, "conclave_requests_total", &[("route", "fast")]),
        3.0
    );
}

#[tokio::test(start_paused = true)]
async fn only_an_admin_reads_it() {
    let gw = demo();
    for (path, what) in [
        ("/v1/usage", "/v1/usage"),
        ("/v1/keys/usage", "/v1/keys/usage"),
    ] {
        let r = gw
            .get_with(path, &[("authorization", "Bearer sk-alice")])
            .await;
        assert_eq!(r.status, 403, "{}", r.text);
        let e = &r.json()["error"];
        assert_eq!(e["code"], "admin_only");
        assert_eq!(e["type"], "permission_error");
        assert!(e["message"].as_str().unwrap().contains(what), "{e}");
    }
    let r = gw.get("/v1/usage").await;
    assert_eq!(r.status, 401, "{}", r.text);
    // Without [[keys]], every caller is an admin, as for /v1/keys/usage.
    let open = Gw::start(
        "[upstreams.sim]\nkind = \"mock\"\n\n[upstreams.sim.models.echo]\n\
         reply = { text = \"hi\" }\n\n[models.echo]\nupstream = \"sim\"\n",
    );
    assert_eq!(open.chat(&chat("echo", "hi")).await.status, 200);
    let r = open.get("/usage").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["models"][0]["model"], "echo");
    assert_eq!(r.json()["routes"][0]["route"], "echo");
}

/// Every endpoint only an admin key may use, one rule: no key is a 401,
/// another key a 403 `admin_only`, an admin key is answered.
#[tokio::test(start_paused = true)]
async fn every_admin_endpoint_refuses_other_keys_alike() {
    use axum::body::Body;
    use axum::http::{Method, Request};
    let gw = demo();
    let admin_only = [
        (Method::GET, "/v1/keys/usage"),
        (Method::GET, "/v1/usage"),
        (Method::DELETE, "/v1/cache"),
    ];
    for (method, path) in admin_only {
        for (key, want) in [
            (None, 401),
            (Some("sk-alice"), 403),
            (Some("sk-admin"), 200),
        ] {
            let mut req = Request::builder().method(method.clone()).uri(path);
            if let Some(k) = key {
                req = req.header("authorization", format!("Bearer {k}"));
            }
            let r = gw.send(req.body(Body::empty()).unwrap()).await;
            assert_eq!(r.status, want, "{method} {path} as {key:?}: {}", r.text);
            if want == 403 {
                assert_eq!(r.json()["error"]["code"], "admin_only", "{path}");
            }
        }
    }
}
