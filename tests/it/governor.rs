//! Governors: API keys, per-minute limits and their headers, daily
//! budgets under concurrency, across the UTC day's end and across
//! restarts, a strategy's fan-out in the estimate, and upstream limits
//! (rpm, 429 retries). Windows, waits and the day roll-over run
//! in-process on paused time (exact figures), the rest against a gateway
//! served in-process over HTTP; a restart after a `kill -9` runs the
//! binary.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, UNIX_EPOCH};

use tokio::time::{Instant, advance};

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

fn gateway(keys: &str, extra: &str) -> Srv {
    let toml = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n{keys}\n{SIM}\n{extra}\n\n\
         [[keys]]\nname = \"admin\"\nkey_env = \"KEY_ADMIN\"\nadmin = true\n"
    );
    Srv::gateway_env(&toml, KEYS)
}

/// [`gateway`] in-process, its clock at [`inproc::START`] (23:59:00 UTC):
/// under paused time every window and the day's end are `advance`s away.
fn gateway_in(keys: &str, extra: &str) -> inproc::Gw {
    let toml = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n{keys}\n{SIM}\n{extra}\n\n\
         [[keys]]\nname = \"admin\"\nkey_env = \"KEY_ADMIN\"\nadmin = true\n"
    );
    inproc::Gw::start_with(&toml, KEYS, UNIX_EPOCH + inproc::START)
}

/// `body` to an in-process gateway as `key`.
async fn ask(gw: &inproc::Gw, body: &Value, key: &str) -> Resp {
    gw.chat_as(body, key).await
}

/// Key `name`'s line of `GET /v1/keys/usage` on an in-process gateway.
async fn usage_in(gw: &inproc::Gw, name: &str) -> Value {
    gw.key_usage("k-admin", name).await
}

fn bearer(key: &str) -> Vec<(String, String)> {
    vec![("authorization".into(), format!("Bearer {key}"))]
}

async fn call(gw: &impl Served, body: &Value, key: &str) -> Resp {
    let h = bearer(key);
    let h: Vec<(&str, &str)> = h.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    post_with(gw.base(), body, &h).await
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

async fn usage_of(gw: &impl Served, name: &str) -> Value {
    key_usage(gw, "k-admin", name).await
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

/// In-process, on paused time: nothing moves the clock but the mock's
/// 20 ms and the test's `advance`, so the counts are exact.
#[tokio::test(start_paused = true)]
async fn rpm_turns_requests_away_with_an_honest_retry_after() {
    let keys = "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\nrpm = 60\n";
    let gw = gateway_in(keys, "");
    let body = chat("echo", "hi");
    let first = ask(&gw, &body, "k-alpha").await;
    assert_eq!(first.status, 200, "{}", first.text);
    assert_eq!(first.header("x-ratelimit-limit-requests"), Some("60"));
    assert_eq!(first.header("x-ratelimit-remaining-requests"), Some("59"));
    assert_eq!(first.header("x-ratelimit-reset-requests"), Some("1s"));
    assert_eq!(first.header("x-ratelimit-limit-tokens"), None, "no tpm set");
    // Streamed answers carry them too.
    let streamed = ask(&gw, &chat_stream("echo", "hi"), "k-alpha").await;
    assert_eq!(streamed.status, 200, "{}", streamed.text);
    assert_eq!(
        streamed.header("x-ratelimit-remaining-requests"),
        Some("58")
    );
    // The rest of the minute's burst, at once (40 ms in: no slot is back).
    let burst = futures::future::join_all((0..58).map(|_| ask(&gw, &body, "k-alpha"))).await;
    assert!(burst.iter().all(|r| r.status == 200));
    let left: Vec<Option<&str>> = burst
        .iter()
        .map(|r| r.header("x-ratelimit-remaining-requests"))
        .collect();
    assert!(left.contains(&Some("0")), "{left:?}");
    // The 61st, 60 ms in: the first slot is back at 1 s.
    let r = ask(&gw, &body, "k-alpha").await;
    let e = error_of(&r, 429);
    assert_eq!(e["code"], "rate_limit_exceeded");
    assert_eq!(e["type"], "requests");
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    // The admin key has no limit of its own (20 ms more).
    assert_eq!(ask(&gw, &body, "k-admin").await.status, 200);
    // 980 ms in: 20 ms short of the slot, still turned away.
    advance(Duration::from_millis(900)).await;
    let r = ask(&gw, &body, "k-alpha").await;
    assert_eq!(r.status, 429, "a slot came back early: {}", r.text);
    assert_eq!(r.header("retry-after"), Some("1"));
    advance(Duration::from_millis(20)).await;
    let r = ask(&gw, &body, "k-alpha").await;
    assert_eq!(
        r.status, 200,
        "a retry after Retry-After succeeds: {}",
        r.text
    );
    // One slot came back, and it is taken.
    assert_eq!(r.header("x-ratelimit-remaining-requests"), Some("0"));
    assert_eq!(ask(&gw, &body, "k-alpha").await.status, 429);

    let m = gw.metrics();
    let n = samples(
        &m,
        "conclave_governor_rejections_total",
        &[("key", "alpha"), ("scope", "rpm")],
    );
    assert_eq!(n, vec![3.0], "{m}");
    let s = samples(
        &m,
        "conclave_requests_total",
        &[("route", "echo"), ("status", "429")],
    );
    assert_eq!(s, vec![3.0], "{m}");
    let ok = samples(
        &m,
        "conclave_requests_total",
        &[("route", "echo"), ("status", "200")],
    );
    assert_eq!(
        ok,
        vec![62.0],
        "60 in the first minute, the admin's, one more"
    );
    let unknown = samples(
        &m,
        "conclave_requests_total",
        &[("route", "unknown"), ("status", "429")],
    );
    assert!(unknown.is_empty(), "a 429 counted twice: {unknown:?}");
    let ev = gw.events(&["governor_rejection"]).await;
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert_eq!(ev[0]["key"], "alpha");
    assert_eq!(ev[0]["scope"], "rpm");
    assert_eq!(ev[0]["limit"], 60.0);
    assert_eq!(ev[0]["route"], "echo");
}

/// In-process, on paused time: the wait a refusal states is exact, and
/// waiting it out (not a second less) lets the request in.
#[tokio::test(start_paused = true)]
async fn tpm_counts_estimates_then_real_usage_and_refuses_what_never_fits() {
    let keys = "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\ntpm = 1000\n";
    let gw = gateway_in(keys, "");
    // More than a minute's tokens in one request: no retry can help.
    let r = ask(&gw, &capped("echo", "hi", 5000), "k-alpha").await;
    let e = error_of(&r, 429);
    assert_eq!(e["code"], "rate_limit_exceeded");
    assert!(e["message"].as_str().unwrap().contains("never fit"), "{e}");
    // Said with when the limit is whole again, and not to retry as is.
    assert_eq!(r.header("retry-after"), Some("1"));
    assert_eq!(r.header("x-should-retry"), Some("false"));

    // 1 token of input (`hi`), 39 of chat template (32 a request, 7 a
    // message) and up to 800 out: 840 are taken first.
    let r = ask(&gw, &capped("big", "hi", 800), "k-alpha").await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-ratelimit-limit-tokens"), Some("1000"));
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("160"));
    // It used 705: the next request is charged the 135 it overestimated
    // back, and 840 do not fit in the 295 left.
    let r = ask(&gw, &capped("big", "hi", 800), "k-alpha").await;
    let e = error_of(&r, 429);
    assert_eq!(e["type"], "tokens");
    // (840 - 295) tokens at 1000 a minute: 32.7 s.
    assert_eq!(r.header("retry-after"), Some("33"));
    assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("0"));
    // A second short of it, it still does not fit; at 33 s it does.
    advance(Duration::from_secs(32)).await;
    let r = ask(&gw, &capped("big", "hi", 800), "k-alpha").await;
    assert_eq!(error_of(&r, 429)["type"], "tokens");
    assert_eq!(r.header("retry-after"), Some("1"));
    advance(Duration::from_secs(1)).await;
    let r = ask(&gw, &capped("big", "hi", 800), "k-alpha").await;
    assert_eq!(r.status, 200, "{}", r.text);
    // Small requests still fit.
    let r = ask(&gw, &capped("echo", "hi", 10), "k-alpha").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let ev = gw.events(&["governor_rejection"]).await;
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert!(ev.iter().all(|e| e["scope"] == "tpm"));
    assert_eq!(
        ev[0]["asked"], 5040.0,
        "a request that set its cap is never trimmed"
    );
}

/// In-process, on paused time: all 100 reserve before the first answers
/// (the mock takes 50 ms), so exactly as many as fit get in.
#[tokio::test(start_paused = true)]
async fn a_daily_budget_holds_under_100_concurrent_requests() {
    let keys = "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\ndaily_tokens = 2000\n";
    let gw = gateway_in(keys, "");
    // Each request is estimated at 3 tokens of text ("hello there") and
    // 39 of chat template in, up to 100 out: 14 estimates fit in 2000. It
    // is billed 103 (the mock counts no template).
    let body = capped("full", "hello there", 100);
    let all = futures::future::join_all((0..100).map(|_| ask(&gw, &body, "k-alpha"))).await;
    let ok: Vec<&Resp> = all.iter().filter(|r| r.status == 200).collect();
    let spent: u64 = ok
        .iter()
        .map(|r| r.json()["usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    let refused: Vec<&Resp> = all.iter().filter(|r| r.status == 429).collect();
    assert_eq!(ok.len() + refused.len(), 100);
    // Every request the budget could hold was let in, and no more.
    let estimate = 3 + 39 + 100;
    assert_eq!(ok.len() as u64, 2000 / estimate);
    assert_eq!(spent, 14 * 103, "spent {spent} of a 2000-token budget");
    let e = error_of(refused[0], 429);
    assert_eq!(e["code"], "budget_exceeded");
    assert_eq!(e["type"], "insufficient_quota");
    // All were turned away while the 14 were in flight, which hold the
    // rest of the budget: retry when they finish.
    assert!(
        refused.iter().all(|r| r.header("retry-after") == Some("1")),
        "{}",
        refused[0].text
    );
    assert!(e["message"].as_str().unwrap().contains("in flight"), "{e}");
    // They spent 103 of the 142 each held: one at a time, five more fit
    // (1957), then a refusal until the UTC day ends (the clock reads
    // 23:59:00.300).
    for _ in 0..5 {
        let r = ask(&gw, &body, "k-alpha").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = ask(&gw, &body, "k-alpha").await;
    assert_eq!(error_of(&r, 429)["code"], "budget_exceeded");
    assert_eq!(r.header("retry-after"), Some("60"));
    let spent = spent + 5 * 103;

    let u = usage_in(&gw, "alpha").await;
    assert_eq!(u["today"]["tokens"], spent, "{u}");
    assert_eq!(u["today"]["reserved_tokens"], 0, "{u}");
    assert_eq!(u["limits"]["daily_tokens"], 2000);
    assert_eq!(u["remaining"]["tokens"], 2000 - spent);
    let m = gw.metrics();
    let left = samples(&m, "conclave_budget_remaining_tokens", &[("key", "alpha")]);
    assert_eq!(left, vec![(2000 - spent) as f64], "{m}");
    let n = samples(
        &m,
        "conclave_governor_rejections_total",
        &[("key", "alpha"), ("scope", "daily_tokens")],
    );
    assert_eq!(n, vec![refused.len() as f64 + 1.0]);
}

/// In-process: the clock starts at 23:59:00 UTC. A spent budget refuses
/// until midnight and says so; past midnight it is whole again, under the
/// new day's name, and the refused request goes through.
#[tokio::test(start_paused = true)]
async fn a_daily_budget_is_whole_again_when_the_utc_day_rolls_over() {
    let keys = "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\ndaily_tokens = 300\n";
    let gw = gateway_in(keys, "");
    // 142 estimated, 103 billed: two fit in 300, a third does not.
    let body = capped("full", "hello there", 100);
    for _ in 0..2 {
        let r = ask(&gw, &body, "k-alpha").await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    let r = ask(&gw, &body, "k-alpha").await;
    assert_eq!(error_of(&r, 429)["code"], "budget_exceeded");
    // Two answers of 50 ms each: 23:59:00.100, a minute to go (in the
    // whole seconds the clock is read in).
    assert_eq!(r.header("retry-after"), Some("60"));
    let u = usage_in(&gw, "alpha").await;
    assert_eq!(u["today"]["day"], "2026-03-01", "{u}");
    assert_eq!(u["today"]["tokens"], 206, "{u}");
    assert_eq!(u["remaining"]["tokens"], 94, "{u}");
    assert_eq!(u["resets_in_seconds"], 60, "{u}");

    // 23:59:59.900: still that day, still refused.
    advance(Duration::from_millis(59_800)).await;
    let r = ask(&gw, &body, "k-alpha").await;
    assert_eq!(error_of(&r, 429)["code"], "budget_exceeded");
    assert_eq!(r.header("retry-after"), Some("1"));
    let u = usage_in(&gw, "alpha").await;
    assert_eq!(
        (u["today"]["day"].as_str(), u["resets_in_seconds"].as_u64()),
        (Some("2026-03-01"), Some(1)),
        "{u}"
    );

    // 00:00:00.100: a new day, the budget whole.
    advance(Duration::from_millis(200)).await;
    let u = usage_in(&gw, "alpha").await;
    assert_eq!(u["today"]["day"], "2026-03-02", "{u}");
    assert_eq!(u["today"]["tokens"], 0, "{u}");
    assert_eq!(u["remaining"]["tokens"], 300, "{u}");
    assert_eq!(u["resets_in_seconds"], 86_400, "{u}");
    for _ in 0..2 {
        let r = ask(&gw, &body, "k-alpha").await;
        assert_eq!(r.status, 200, "the new day's budget: {}", r.text);
    }
    let r = ask(&gw, &body, "k-alpha").await;
    assert_eq!(error_of(&r, 429)["code"], "budget_exceeded");
    // Now a whole day until it resets.
    let retry: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert_eq!(retry, 86_400);
    let u = usage_in(&gw, "alpha").await;
    assert_eq!(u["today"]["tokens"], 206, "{u}");
    let ev = gw.events(&["governor_rejection"]).await;
    assert_eq!(ev.len(), 3, "{ev:?}");
    assert!(ev.iter().all(|e| e["scope"] == "daily_tokens"), "{ev:?}");
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

/// The tokens the state file holds for `key`, over every day (0 while
/// it cannot be read).
fn spent_in_file(db: &std::path::Path, key: &str) -> u64 {
    let flags = rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY;
    let Ok(c) = rusqlite::Connection::open_with_flags(db, flags) else {
        return 0;
    };
    c.query_row(
        "SELECT COALESCE(SUM(tokens), 0) FROM key_spend WHERE key = ?1",
        [key],
        |row| row.get::<_, i64>(0),
    )
    .map_or(0, |n| u64::try_from(n).unwrap_or(0))
}

/// Out of process: a restart and a `kill -9` are the point.
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

    // kill -9 loses at most the last flush interval (1 s): once the
    // spend is in the file (read as another process would), it survives.
    assert_eq!(call(&gw, &body, "k-alpha").await.status, 200);
    let db = dir.path().join("state.db");
    let flushed = eventually(5, || {
        let db = db.clone();
        async move { spent_in_file(&db, "alpha") == 2115 }
    })
    .await;
    assert!(flushed, "{} in the file", spent_in_file(&db, "alpha"));
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

/// The models of [`UPSTREAM_MOCK`], in-process.
fn upstream_mock(routes: &str) -> inproc::Gw {
    inproc::Gw::start(&format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n{UPSTREAM_MOCK}\n\
         [models.flaky]\nupstream = \"sim\"\n\n[models.limited]\nupstream = \"sim\"\n\n\
         [models.ok]\nupstream = \"sim\"\n\n{routes}"
    ))
}

/// In-process, on paused time: the retry waits the upstream's
/// `Retry-After` exactly.
#[tokio::test(start_paused = true)]
async fn an_upstream_429_is_retried_after_its_retry_after() {
    let routes = "[routes.fallback]\nstrategy = \"chain\"\ntiers = [\"limited\", \"ok\"]\n";
    let gw = upstream_mock(routes);
    let t = Instant::now();
    let r = gw.chat(&chat("flaky", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_secs(1), "it waited Retry-After");
    assert_eq!(gw.arrivals("sim"), ["flaky", "flaky"]);

    // A chain's first tier is not retried on its upstream: the next tier
    // is its retry, at once.
    let t = Instant::now();
    let r = gw.chat(&chat("fallback", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("ok"));
    assert_eq!(t.elapsed(), Duration::ZERO);
    assert_eq!(gw.arrivals("sim")[2..], ["limited", "ok"], "no retry");
    // Each try is its own attempt; the retry says why.
    let ev = gw.events(&["attempt"]).await;
    assert_eq!(ev.len(), 4, "{ev:?}");
    let of = |e: &Value| {
        (
            e["model"].as_str().unwrap().to_owned(),
            e["verdict"].as_str().unwrap().to_owned(),
            e["retry"].as_str().map(str::to_owned),
        )
    };
    let seen: Vec<_> = ev.iter().map(of).collect();
    let want =
        |m: &str, v: &str, r: Option<&str>| (m.to_owned(), v.to_owned(), r.map(str::to_owned));
    assert_eq!(
        seen,
        [
            want("flaky", "error", None),
            want("flaky", "ok", Some("429")),
            want("limited", "error", None),
            want("ok", "accept", None),
        ]
    );
}

/// In-process, on paused time: a turn past the deadline fails at once; a
/// turn within it is waited for, to the millisecond.
#[tokio::test(start_paused = true)]
async fn an_upstream_rpm_waits_its_turn_or_fails_fast_at_the_deadline() {
    let toml = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\nrequest_timeout = \"3s\"\n\n{}",
        SIM.replace("kind = \"mock\"\n", "kind = \"mock\"\nrpm = 1\n")
    );
    let gw = inproc::Gw::start(&toml);
    assert_eq!(gw.chat(&chat("echo", "hi")).await.status, 200);
    // The next slot is a minute away, past the 3 s deadline: a 429 now,
    // not a 504 in three seconds.
    let t = Instant::now();
    let r = gw.chat(&chat("echo", "hi")).await;
    assert_eq!(t.elapsed(), Duration::ZERO, "it failed at once");
    let e = error_of(&r, 429);
    assert_eq!(e["code"], "rate_limit_exceeded");
    assert!(
        e["message"]
            .as_str()
            .unwrap()
            .contains("1 requests per minute"),
        "{e}"
    );
    // 59.98 s to go (the first call took 20 ms).
    assert_eq!(r.header("retry-after"), Some("60"));
    // 57.5 s in, the slot is 2.5 s away, within the deadline: the call
    // waits for it, then takes its 20 ms.
    advance(Duration::from_millis(57_480)).await;
    let t = Instant::now();
    let r = gw.chat(&chat("echo", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::from_millis(2_520));
    assert_eq!(gw.arrivals("sim"), ["echo", "echo"]);
    let ev = gw.events(&["governor_rejection"]).await;
    assert_eq!(ev.len(), 1, "{ev:?}");
    assert_eq!(
        (ev[0]["scope"].as_str(), ev[0]["upstream"].as_str()),
        (Some("upstream"), Some("sim"))
    );
    assert_eq!(ev[0]["key"], "anonymous");
}
