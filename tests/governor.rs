//! Governors, black-box: API keys, per-minute limits and their headers,
//! daily budgets under concurrency and across restarts, a strategy's
//! fan-out in the estimate, and upstream limits (rpm, 429 retries).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use std::time::Duration;

use common::*;
use serde_json::{Value, json};

/// Simulated models inside the gateway (no second process).
const SIM: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.echo]
ttft = "20ms"

[upstreams.sim.models.big]
reply = { text = "long answer" }
usage = { prompt_tokens = 5, completion_tokens = 700 }

[upstreams.sim.models.full]
reply = { text = "a hundred tokens" }
usage = { prompt_tokens = 3, completion_tokens = 100 }
ttft = "50ms"

[models.echo]
upstream = "sim"

[models.big]
upstream = "sim"

[models.full]
upstream = "sim"

[models.priced]
upstream = "sim"
model = "full"
price = { input_per_mtok = 100.0, output_per_mtok = 100.0 }
"#;

const KEYS: &[(&str, &str)] = &[("KEY_A", "k-alpha"), ("KEY_ADMIN", "k-admin")];

fn gateway(keys: &str, extra: &str) -> Proc {
    let toml = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n{keys}\n{SIM}\n{extra}\n\n\
         [[keys]]\nname = \"admin\"\nkey_env = \"KEY_ADMIN\"\nadmin = true\n"
    );
    Proc::gateway_env(&toml, KEYS)
}

fn bearer(key: &str) -> Vec<(String, String)> {
    vec![("authorization".into(), format!("Bearer {key}"))]
}

async fn call(gw: &Proc, body: &Value, key: &str) -> Resp {
    let h = bearer(key);
    let h: Vec<(&str, &str)> = h.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    post_with(&gw.base, body, &h).await
}

fn capped(model: &str, text: &str, max_tokens: u64) -> Value {
    let mut b = chat(model, text);
    b["max_tokens"] = json!(max_tokens);
    b
}

fn error_of(r: &Resp, status: u16) -> Value {
    assert_eq!(r.status, status, "{}", r.text);
    r.json()["error"].clone()
}

async fn usage_of(gw: &Proc, name: &str) -> Value {
    let r = send(
        client()
            .get(gw.url("/v1/keys/usage"))
            .bearer_auth("k-admin"),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == name)
        .cloned()
        .unwrap_or_else(|| panic!("no key {name}: {}", r.text))
}

#[tokio::test]
async fn keys_are_checked_by_digest_and_every_bad_header_is_a_401() {
    let hex: String = conclave::config::digest("k-hashed")
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let keys = format!(
        "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\nmodels = [\"echo\"]\n\n\
         [[keys]]\nname = \"hashed\"\nkey_sha256 = \"{hex}\"\n"
    );
    let gw = gateway(&keys, "");
    let body = chat("echo", "hi");
    for (headers, says) in [
        (vec![], "didn't provide an API key"),
        (vec![("authorization", "Basic azphbHBoYQ==")], "Malformed"),
        (vec![("authorization", "Bearer")], "Malformed"),
        (vec![("authorization", "Bearer ")], "Malformed"),
        (vec![("authorization", "k-alpha")], "Malformed"),
        (vec![("x-api-key", "")], "Malformed"),
        (
            vec![("authorization", "Bearer k-alph")],
            "Incorrect API key",
        ),
        (
            vec![("authorization", "Bearer k-alpha2")],
            "Incorrect API key",
        ),
    ] {
        let r = post_with(&gw.base, &body, &headers).await;
        let e = error_of(&r, 401);
        assert_eq!(e["code"], "invalid_api_key");
        assert!(
            e["message"].as_str().unwrap().contains(says),
            "{headers:?}: {e}"
        );
    }
    // The key given only as a digest works, as a bearer or `x-api-key`.
    assert_eq!(call(&gw, &body, "k-hashed").await.status, 200);
    let r = post_with(&gw.base, &body, &[("x-api-key", "k-hashed")]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // A model outside the key's list is a 404 (as if it did not exist),
    // and never reaches upstream.
    let r = call(&gw, &chat("big", "hi"), "k-alpha").await;
    assert_eq!(error_of(&r, 404)["code"], "model_not_found");
    // Only an admin key reads the usage view.
    let r = send(
        client()
            .get(gw.url("/v1/keys/usage"))
            .bearer_auth("k-alpha"),
    )
    .await;
    assert_eq!(error_of(&r, 403)["code"], "admin_only");
    // No secret in the log, the metrics or the events.
    let events = gw.events_of(&["attempt"], 2).await;
    let seen = format!("{}{}{events:?}", gw.stderr(), gw.metrics().await);
    for secret in ["k-alpha", "k-hashed", "k-admin", hex.as_str()] {
        assert!(!seen.contains(secret), "{secret} leaked");
    }
}

#[tokio::test]
async fn rpm_turns_requests_away_with_an_honest_retry_after() {
    let keys = "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\nrpm = 60\n";
    let gw = gateway(keys, "");
    let body = chat("echo", "hi");
    let first = call(&gw, &body, "k-alpha").await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.header("x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(first.header("x-ratelimit-remaining-requests"), Some("59"));
    assert_eq!(first.header("x-ratelimit-reset-requests"), Some("1s"));
    assert_eq!(first.header("x-ratelimit-limit-tokens"), None, "no tpm set");
    // Streamed answers carry them too.
    let streamed = call(&gw, &chat_stream("echo", "hi"), "k-alpha").await;
    assert_eq!(streamed.status, 200, "{}", streamed.text);
    assert_eq!(
        streamed.header("x-ratelimit-remaining-requests"),
        Some("58")
    );
    // The rest of the minute's burst, at once.
    let burst = futures::future::join_all((0..58).map(|_| call(&gw, &body, "k-alpha"))).await;
    assert!(burst.iter().all(|r| r.status == 200));
    // Over the limit (a request's slot comes back each second, so a slow
    // machine may see one or two more pass first).
    let mut over = None;
    for _ in 0..5 {
        let r = call(&gw, &body, "k-alpha").await;
        if r.status == 429 {
            over = Some(r);
            break;
        }
    }
    let r = over.expect("the limit never turned a request away");
    let e = error_of(&r, 429);
    assert_eq!(e["code"], "rate_limit_exceeded");
    assert_eq!(e["type"], "requests");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    // The admin key has no limit of its own.
    assert_eq!(call(&gw, &body, "k-admin").await.status, 200);
    tokio::time::sleep(Duration::from_secs(1)).await;
    let r = call(&gw, &body, "k-alpha").await;
    assert_eq!(
        r.status, 200,
        "a retry after Retry-After succeeds: {}",
        r.text
    );

    let ev = gw.events_of(&["governor_rejection"], 1).await;
    assert_eq!(ev[0]["key"], "alpha");
    assert_eq!(ev[0]["scope"], "rpm");
    assert_eq!(ev[0]["limit"], 60.0);
    assert_eq!(ev[0]["route"], "echo");
    let m = gw.metrics().await;
    let n = samples(
        &m,
        "conclave_governor_rejections_total",
        &[("key", "alpha"), ("scope", "rpm")],
    );
    assert!(n.first().is_some_and(|&n| n >= 1.0), "{m}");
    let s = samples(
        &m,
        "conclave_requests_total",
        &[("route", "echo"), ("status", "429")],
    );
    assert!(s.first().is_some_and(|&n| n >= 1.0));
    let unknown = samples(
        &m,
        "conclave_requests_total",
        &[("route", "unknown"), ("status", "429")],
    );
    assert!(unknown.is_empty(), "a 429 counted twice: {unknown:?}");
}

#[tokio::test]
async fn tpm_counts_estimates_then_real_usage_and_refuses_what_never_fits() {
    let keys = "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\ntpm = 1000\n";
    let gw = gateway(keys, "");
    // More than a minute's tokens in one request: no retry can help.
    let r = call(&gw, &capped("echo", "hi", 5000), "k-alpha").await;
    let e = error_of(&r, 429);
    assert_eq!(e["code"], "rate_limit_exceeded");
    assert!(e["message"].as_str().unwrap().contains("never fit"), "{e}");
    // Said with when the limit is whole again, and not to retry as is.
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("x-should-retry"), Some("false"));

    // 1 token of input (`hi`), 39 of chat template (32 a request, 7 a
    // message) and up to 800 out: 840 are taken first.
    let r = call(&gw, &capped("big", "hi", 800), "k-alpha").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("1000"));
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("160"));
    // It used 705: the next request is charged the 135 it overestimated
    // back, and 840 do not fit in the 295 left.
    let r = call(&gw, &capped("big", "hi", 800), "k-alpha").await;
    let e = error_of(&r, 429);
    assert_eq!(e["type"], "tokens");
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    // (840 - 295) tokens at 1000 a minute: about 33 s.
    assert!((31..=34).contains(&retry), "retry-after {retry}");
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("0"));
    // Small requests still fit.
    let r = call(&gw, &capped("echo", "hi", 10), "k-alpha").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ev = gw.events_of(&["governor_rejection"], 2).await;
    assert!(ev.iter().all(|e| e["scope"] == "tpm"));
    assert_eq!(
        ev[0]["asked"], 5040.0,
        "a request that set its cap is never trimmed"
    );
}

#[tokio::test]
async fn a_daily_budget_holds_under_100_concurrent_requests() {
    let keys = "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\ndaily_tokens = 2000\n";
    let gw = gateway(keys, "");
    // Each request is estimated at 3 tokens of text ("hello there") and
    // 39 of chat template in, up to 100 out: 14 estimates fit in 2000. It
    // is billed 103 (the mock counts no template).
    let body = capped("full", "hello there", 100);
    let all = futures::future::join_all((0..100).map(|_| call(&gw, &body, "k-alpha"))).await;
    let ok: Vec<&Resp> = all.iter().filter(|r| r.status == 200).collect();
    let spent: u64 = ok
        .iter()
        .map(|r| r.json()["usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    let refused: Vec<&Resp> = all.iter().filter(|r| r.status == 429).collect();
    assert_eq!(ok.len() + refused.len(), 100);
    assert!(spent <= 2000, "spent {spent} of a 2000-token budget");
    // Every request the budget could hold was let in.
    let estimate = 3 + 39 + 100;
    assert!(
        ok.len() as u64 * estimate + estimate > 2000,
        "only {} let in",
        ok.len()
    );
    let e = error_of(refused[0], 429);
    assert_eq!(e["code"], "budget_exceeded");
    assert_eq!(e["type"], "insufficient_quota");
    let retry: u64 = refused[0].header("retry-after").unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "until the UTC day ends");

    let u = usage_of(&gw, "alpha").await;
    assert_eq!(u["today"]["tokens"], spent, "{u}");
    assert_eq!(u["today"]["reserved_tokens"], 0, "{u}");
    assert_eq!(u["limits"]["daily_tokens"], 2000);
    assert_eq!(u["remaining"]["tokens"], 2000 - spent);
    let m = gw.metrics().await;
    let left = samples(&m, "conclave_budget_remaining_tokens", &[("key", "alpha")]);
    assert_eq!(left, vec![(2000 - spent) as f64], "{m}");
    let n = samples(
        &m,
        "conclave_governor_rejections_total",
        &[("key", "alpha"), ("scope", "daily_tokens")],
    );
    assert_eq!(n, vec![refused.len() as f64]);
}

#[tokio::test]
async fn a_daily_cost_budget_uses_the_models_prices() {
    // 100 $/Mtok: a request of 3 + 100 tokens costs $0.0103; four fit
    // in $0.05, a fifth does not.
    let keys = "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\ndaily_cost_usd = 0.05\n";
    let gw = gateway(keys, "");
    let body = capped("priced", "hello there", 100);
    for _ in 0..4 {
        let r = call(&gw, &body, "k-alpha").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = call(&gw, &body, "k-alpha").await;
    let e = error_of(&r, 429);
    assert_eq!(e["code"], "budget_exceeded");
    assert!(e["message"].as_str().unwrap().contains("$0.0088"), "{e}");
    let u = usage_of(&gw, "alpha").await;
    let cost = u["today"]["cost_usd"].as_f64().unwrap();
    assert!((cost - 0.0412).abs() < 1e-9, "${cost}");
    let ev = gw.events_of(&["governor_rejection"], 1).await;
    assert_eq!(ev[0]["scope"], "daily_cost");
    // The free model still runs within the cost budget.
    assert_eq!(call(&gw, &chat("echo", "hi"), "k-alpha").await.status, 200);
}

#[tokio::test]
async fn a_strategys_fan_out_is_in_the_estimate() {
    let keys = "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\ndaily_tokens = 350\n";
    let routes = "[routes.three]\nstrategy = \"race\"\ncandidates = [\"echo\", \"big\", \"priced\"]\n\
                  rubric = { finish = 1 }\n\n\
                  [routes.chain2]\nstrategy = \"chain\"\ntiers = [\"echo\", \"priced\"]\n";
    let gw = gateway(keys, routes);
    let body = |m| capped(m, "hello there", 100);
    // Three candidates of 142 tokens each (3 of text, 39 of chat
    // template, 100 out) do not fit in 350.
    let r = call(&gw, &body("three"), "k-alpha").await;
    assert_eq!(error_of(&r, 429)["code"], "budget_exceeded");
    assert!(r.text.contains("up to 426"), "{}", r.text);
    // Two tiers do (284), and so does one model (142).
    let r = call(&gw, &body("chain2"), "k-alpha").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ev = gw.events_of(&["governor_rejection"], 1).await;
    assert_eq!(ev[0]["asked"], 426.0);
    assert_eq!(ev[0]["route"], "three");
}

fn stateful(state: &std::path::Path) -> String {
    format!(
        "[server]\nstate_path = \"{}\"\n\n\
         [[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\ndaily_tokens = 100000\n\n\
         [[keys]]\nname = \"admin\"\nkey_env = \"KEY_ADMIN\"\nadmin = true\n{SIM}",
        state.display()
    )
}

#[tokio::test]
async fn spend_survives_a_restart_and_a_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let toml = stateful(&dir.path().join("state.db"));
    let mut gw = Proc::gateway_env(&toml, KEYS);
    let body = capped("big", "hi", 800);
    for _ in 0..2 {
        assert_eq!(call(&gw, &body, "k-alpha").await.status, 200);
    }
    // A clean shutdown writes everything.
    gw.signal("TERM");
    assert_eq!(gw.wait_exit(10), Some(0));
    let gw = Proc::gateway_env(&toml, KEYS);
    assert_eq!(usage_of(&gw, "alpha").await["today"]["tokens"], 1410);

    // kill -9 loses at most the last flush interval (1 s).
    assert_eq!(call(&gw, &body, "k-alpha").await.status, 200);
    tokio::time::sleep(Duration::from_millis(1500)).await;
    gw.signal("KILL");
    drop(gw);
    let gw = Proc::gateway_env(&toml, KEYS);
    let u = usage_of(&gw, "alpha").await;
    assert_eq!(u["today"]["tokens"], 2115, "{u}");
    assert_eq!(u["remaining"]["tokens"], 100_000 - 2115);
}

const UPSTREAM_MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.flaky]
reply = { text = "made it" }

[[upstreams.sim.models.flaky.rules]]
when_call = [1]
then = { status = 429, retry_after = 1, error_message = "slow down" }

[upstreams.sim.models.limited]
status = 429
retry_after = 1
error_message = "quota"

[upstreams.sim.models.ok]
reply = { text = "from ok" }
"#;

#[tokio::test]
async fn an_upstream_429_is_retried_after_its_retry_after() {
    let mock = Proc::mock(UPSTREAM_MOCK);
    let routes = "[routes.fallback]\nstrategy = \"chain\"\ntiers = [\"limited\", \"ok\"]\n";
    let gw = Proc::gateway(&front_of(&mock.v1(), &["flaky", "limited", "ok"], routes));
    let t = tokio::time::Instant::now();
    let r = post(&gw.base, &chat("flaky", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(
        t.elapsed() >= Duration::from_secs(1),
        "it waited Retry-After"
    );
    assert_eq!(mock.received().await.len(), 2);
    let ev = gw.events_of(&["attempt"], 1).await;
    assert_eq!(ev[0]["verdict"], "ok");
    assert_eq!(ev[0]["retries"], 1);

    // Twice in a row: the chain sees the failure and falls back.
    let r = post(&gw.base, &chat("fallback", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("ok"));
    let limited = mock
        .received()
        .await
        .iter()
        .filter(|q| q["model"] == "limited")
        .count();
    assert_eq!(limited, 2, "one try and one retry");
    let ev = gw.events_of(&["attempt"], 3).await;
    let l = ev.iter().find(|e| e["model"] == "limited").unwrap();
    assert_eq!(
        (l["verdict"].as_str(), l["retries"].as_u64()),
        (Some("error"), Some(1))
    );
}

#[tokio::test]
async fn an_upstream_rpm_waits_its_turn_or_fails_fast_at_the_deadline() {
    let toml = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\nrequest_timeout = \"3s\"\n\n{}",
        SIM.replace("kind = \"mock\"\n", "kind = \"mock\"\nrpm = 1\n")
    );
    let gw = Proc::gateway(&toml);
    assert_eq!(post(&gw.base, &chat("echo", "hi")).await.status, 200);
    // The next slot is a minute away, past the 3 s deadline: a 429 now,
    // not a 504 in three seconds.
    let t = tokio::time::Instant::now();
    let r = post(&gw.base, &chat("echo", "hi")).await;
    assert!(t.elapsed() < Duration::from_secs(2));
    let e = error_of(&r, 429);
    assert_eq!(e["code"], "rate_limit_exceeded");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("1 requests per minute"),
        "{e}"
    );
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((55..=60).contains(&retry), "{retry}");
    let ev = gw.events_of(&["governor_rejection"], 1).await;
    assert_eq!(
        (ev[0]["scope"].as_str(), ev[0]["upstream"].as_str()),
        (Some("upstream"), Some("sim"))
    );
    assert_eq!(ev[0]["key"], "anonymous");
}
