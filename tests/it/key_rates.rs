//! `GET /v1/keys/usage` says how much of each key's `rpm` and `tpm` is in
//! use now (`now.rpm`, `now.tpm`: `used`, `remaining`, `resets_in_ms`),
//! read from the limiter's own GCRA state: after K requests the figures
//! are exact, `remaining` is what the next admission decides with (its
//! `x-ratelimit-remaining-*` header is one less), cells come back as the
//! limiter gives them back, a refused request counts nowhere, and debt
//! (a request that used more than it took) shows as `used` over the
//! limit. In-process on paused time (exact), then on a real
//! `redis-server` shared by two replicas (Redis's clock runs in real
//! time: figures are bounded by the time that passed), with the same
//! semantics. A key without a limit has `null` there: nothing counts it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, UNIX_EPOCH};

use tokio::time::{Instant, advance};

use common::redis::RedisServer;
use common::*;
use serde_json::{Value, json};

/// `fixed` answers with 25 tokens and `huge` with 3000, at once.
const MODELS: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.fixed]
reply = { text = "ten" }
usage = { prompt_tokens = 5, completion_tokens = 20 }

[upstreams.sim.models.huge]
reply = { text = "a lot" }
usage = { prompt_tokens = 5, completion_tokens = 2995 }

[models.fixed]
upstream = "sim"

[models.huge]
upstream = "sim"
"#;

const ENV: &[(&str, &str)] = &[
    ("KEY_A", "k-alpha"),
    ("KEY_FREE", "k-free"),
    ("KEY_ADMIN", "k-admin"),
];

/// Estimated at 1 token of input (`hi`), 39 of chat template and the
/// cap of 50: 90 are taken, 25 used.
const ESTIMATE: u64 = 90;
const USED: u64 = 25;

fn body(model: &str) -> Value {
    let mut b = chat(model, "hi");
    b["max_tokens"] = json!(50);
    b
}

fn keys(rpm: u32, tpm: u32) -> String {
    format!(
        "[[keys]]\nname = \"alpha\"\nkey_env = \"KEY_A\"\nrpm = {rpm}\ntpm = {tpm}\n\n\
         [[keys]]\nname = \"free\"\nkey_env = \"KEY_FREE\"\n\n\
         [[keys]]\nname = \"admin\"\nkey_env = \"KEY_ADMIN\"\nadmin = true\n"
    )
}

/// `(used, remaining, resets_in_ms)` of `now.<limit>`.
fn fig(u: &Value, limit: &str) -> (u64, u64, u64) {
    let n = &u["now"][limit];
    let f = |k: &str| {
        n[k].as_u64()
            .unwrap_or_else(|| panic!("now.{limit}.{k}: {u}"))
    };
    (f("used"), f("remaining"), f("resets_in_ms"))
}

fn header(r: &Resp, name: &str) -> u64 {
    r.header(name)
        .unwrap_or_else(|| panic!("no {name}: {:?}", r.text))
        .parse()
        .unwrap()
}

mod in_process {
    use super::*;

    fn gateway(rpm: u32, tpm: u32) -> inproc::Gw {
        let toml = format!("{}\n{MODELS}", keys(rpm, tpm));
        inproc::Gw::start_with(&toml, ENV, UNIX_EPOCH + inproc::START)
    }

    async fn ask(gw: &inproc::Gw, model: &str, key: &str) -> Resp {
        gw.chat_as(&body(model), key).await
    }

    async fn usage(gw: &inproc::Gw, name: &str) -> Value {
        gw.key_usage("k-admin", name).await
    }

    /// Nothing moves the clock but the test's `advance`: every figure is
    /// exact. rpm 60 gives a cell back each second, tpm 1000 a token
    /// each 60 ms.
    #[tokio::test(start_paused = true)]
    async fn after_k_requests_the_figures_are_exact_and_recover_as_the_limiter_does() {
        let gw = gateway(60, 1000);
        let idle = usage(&gw, "alpha").await;
        assert_eq!(fig(&idle, "rpm"), (0, 60, 0), "{idle}");
        assert_eq!(fig(&idle, "tpm"), (0, 1000, 0), "{idle}");
        // A key without limits: nothing counts it.
        let free = usage(&gw, "free").await;
        assert_eq!(free["now"], json!({"rpm": null, "tpm": null}), "{free}");
        assert_eq!(free["limits"]["rpm"], Value::Null);

        for _ in 0..3 {
            let r = ask(&gw, "fixed", "k-alpha").await;
            assert_eq!(r.status, 200, "{}", r.text);
            assert_eq!(r.json()["usage"]["total_tokens"], USED);
        }
        // Reading takes nothing: twice, the same.
        let u = usage(&gw, "alpha").await;
        assert_eq!(u, usage(&gw, "alpha").await);
        assert_eq!(fig(&u, "rpm"), (3, 57, 3000), "{u}");
        // Each took 90 and gave back the 65 it did not use: 75 tokens,
        // 75 × 60 ms until whole.
        assert_eq!(fig(&u, "tpm"), (3 * USED, 1000 - 3 * USED, 4500), "{u}");

        // `remaining` is what the next admission decides with: its
        // headers say one request and its estimate less.
        let r = ask(&gw, "fixed", "k-alpha").await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(header(&r, "x-ratelimit-remaining-requests"), 57 - 1);
        assert_eq!(
            header(&r, "x-ratelimit-remaining-tokens"),
            1000 - 3 * USED - ESTIMATE
        );
        let u = usage(&gw, "alpha").await;
        assert_eq!(fig(&u, "rpm"), (4, 56, 4000), "{u}");
        assert_eq!(fig(&u, "tpm"), (100, 900, 6000), "{u}");
        // The unlimited key's requests are not counted anywhere.
        assert_eq!(ask(&gw, "fixed", "k-free").await.status, 200);
        assert_eq!(usage(&gw, "free").await["now"]["rpm"], Value::Null);

        // Half a cell later nothing is back; a whole one later one is.
        advance(Duration::from_millis(500)).await;
        let u = usage(&gw, "alpha").await;
        assert_eq!(fig(&u, "rpm"), (4, 56, 3500), "{u}");
        // 5.5 s of tokens left: 91.67 cells, 908 of them free.
        assert_eq!(fig(&u, "tpm"), (92, 908, 5500), "{u}");
        advance(Duration::from_millis(500)).await;
        let u = usage(&gw, "alpha").await;
        assert_eq!(fig(&u, "rpm"), (3, 57, 3000), "{u}");
        assert_eq!(fig(&u, "tpm"), (84, 916, 5000), "{u}");
        // Whole again.
        advance(Duration::from_secs(5)).await;
        let u = usage(&gw, "alpha").await;
        assert_eq!(fig(&u, "rpm"), (0, 60, 0), "{u}");
        assert_eq!(fig(&u, "tpm"), (0, 1000, 0), "{u}");
    }

    /// A request that used more than it took leaves debt: `used` over the
    /// limit, nothing remaining until it is paid back; a request refused
    /// for it gives its `rpm` cell back and counts nowhere.
    #[tokio::test(start_paused = true)]
    async fn debt_shows_over_the_limit_and_a_refused_request_counts_nowhere() {
        let gw = gateway(60, 1000);
        let r = ask(&gw, "huge", "k-alpha").await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.json()["usage"]["total_tokens"], 3000);
        let u = usage(&gw, "alpha").await;
        assert_eq!(fig(&u, "rpm"), (1, 59, 1000), "{u}");
        // 3000 tokens: a minute's 1000, and 2000 owed (2 minutes more).
        assert_eq!(fig(&u, "tpm"), (3000, 0, 180_000), "{u}");
        let r = ask(&gw, "fixed", "k-alpha").await;
        assert_eq!(r.status, 429, "{}", r.text);
        assert_eq!(r.json()["error"]["type"], "tokens", "{}", r.text);
        // 90 more fit once the debt and 90 cells are paid: 120 s + 5.4 s.
        assert_eq!(r.header("retry-after"), Some("126"));
        let after = usage(&gw, "alpha").await;
        assert_eq!(after, u, "the refused request took nothing");
        // Paid back down to the minute: a full minute in use, no debt.
        advance(Duration::from_secs(120)).await;
        let u = usage(&gw, "alpha").await;
        assert_eq!(fig(&u, "tpm"), (1000, 0, 60_000), "{u}");
        assert_eq!(fig(&u, "rpm"), (0, 60, 0), "{u}");
        advance(Duration::from_millis(5400)).await;
        let u = usage(&gw, "alpha").await;
        assert_eq!(fig(&u, "tpm"), (1000 - ESTIMATE, ESTIMATE, 54_600), "{u}");
        assert_eq!(ask(&gw, "fixed", "k-alpha").await.status, 200);
    }
}

mod shared {
    use super::*;

    fn replica(redis: &RedisServer, rpm: u32, tpm: u32) -> Srv {
        let toml = format!(
            "[server]\nreadyz_cache = \"10ms\"\n\n[state]\nurl = \"{}\"\ntimeout = \"2s\"\n\n{}\n{MODELS}",
            redis.url(),
            keys(rpm, tpm)
        );
        Srv::gateway_env(&toml, ENV)
    }

    async fn ask(gw: &Srv, model: &str, key: &str) -> Resp {
        chat_as(gw, &body(model), key).await
    }

    /// Waits until the key's settlements (sent off the request path) have
    /// landed: today's tokens are `spent`.
    async fn settled(gw: &Srv, spent: u64) {
        let landed = eventually(10, || async {
            key_usage(gw, "k-admin", "alpha").await["today"]["tokens"] == spent
        })
        .await;
        assert!(
            landed,
            "want {spent}: {}",
            key_usage(gw, "k-admin", "alpha").await
        );
    }

    /// Cells of `cell_ms` that came back in `elapsed`, rounded up, and one
    /// more for the rounding of `used` itself.
    fn back(elapsed: Duration, cell_ms: u64) -> u64 {
        (elapsed.as_millis() as u64).div_ceil(cell_ms) + 1
    }

    /// rpm 8 gives a cell back each 7.5 s (a test on a slow machine still
    /// reads exact figures); tpm 600 a token each 100 ms, so its figures
    /// are bounded by the time that passed, and decay while we watch.
    #[tokio::test]
    async fn two_replicas_read_the_same_state_with_the_same_semantics() {
        let redis = RedisServer::start();
        let (a, b) = (replica(&redis, 8, 600), replica(&redis, 8, 600));
        ready(&a).await;
        ready(&b).await;
        for gw in [&a, &b] {
            let u = key_usage(gw, "k-admin", "alpha").await;
            assert_eq!(fig(&u, "rpm"), (0, 8, 0), "{u}");
            assert_eq!(fig(&u, "tpm"), (0, 600, 0), "{u}");
            let free = key_usage(gw, "k-admin", "free").await;
            assert_eq!(free["now"], json!({"rpm": null, "tpm": null}), "{free}");
        }
        let start = Instant::now();
        for i in 0..4 {
            let r = ask(if i % 2 == 0 { &a } else { &b }, "fixed", "k-alpha").await;
            assert_eq!(r.status, 200, "{}", r.text);
        }
        // Settlements are sent off the request path: wait until the
        // refunds of what was not used have landed.
        settled(&a, 4 * USED).await;
        for gw in [&a, &b] {
            let u = key_usage(gw, "k-admin", "alpha").await;
            let elapsed = start.elapsed();
            assert!(elapsed < Duration::from_secs(7), "too slow: {elapsed:?}");
            // Exact while no rpm cell came back, as in-process.
            let (used, left, reset) = fig(&u, "rpm");
            assert_eq!((used, left), (4, 4), "{u}");
            let ms = elapsed.as_millis() as u64;
            assert!(reset <= 30_000 && reset + ms + 10 >= 30_000, "{u}");
            let (used, left, reset) = fig(&u, "tpm");
            assert!(
                used <= 4 * USED && used + back(elapsed, 100) >= 4 * USED,
                "{u}"
            );
            assert_eq!(used + left, 600, "{u}");
            assert!(reset <= 10_000 && reset + ms + 10 >= 10_000, "{u}");
        }
        // `remaining` is what the next admission decides with.
        let t = Instant::now();
        let before = key_usage(&b, "k-admin", "alpha").await;
        let r = ask(&a, "fixed", "k-alpha").await;
        let gap = t.elapsed();
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(header(&r, "x-ratelimit-remaining-requests"), 4 - 1);
        let tokens = header(&r, "x-ratelimit-remaining-tokens");
        let was = fig(&before, "tpm").1;
        assert!(
            tokens + ESTIMATE >= was && tokens + ESTIMATE <= was + back(gap, 100),
            "{tokens} after {before}"
        );

        settled(&a, 5 * USED).await;

        // tpm decays at a token each 100 ms, as the limiter gives them
        // back: watch it between two reads half a second apart.
        let t0 = Instant::now();
        let first = fig(&key_usage(&a, "k-admin", "alpha").await, "tpm").0;
        let t1 = Instant::now();
        tokio::time::sleep(Duration::from_millis(500)).await;
        let t2 = Instant::now();
        let second = fig(&key_usage(&b, "k-admin", "alpha").await, "tpm").0;
        let t3 = Instant::now();
        let fell = first - second;
        let (least, most) = ((t2 - t1).as_millis() as u64 / 100, back(t3 - t0, 100));
        assert!(
            (least.saturating_sub(1)..=most).contains(&fell),
            "{first} -> {second}: want {least}..={most} back"
        );

        // Debt: `huge` used 3000 tokens of the 90 it took.
        let t = Instant::now();
        let r = ask(&b, "huge", "k-alpha").await;
        assert_eq!(r.status, 200, "{}", r.text);
        settled(&a, 5 * USED + 3000).await;
        let u = key_usage(&a, "k-admin", "alpha").await;
        let (used, left, reset) = fig(&u, "tpm");
        assert_eq!(left, 0, "{u}");
        // All of it is within a second's decay of 3000 and what was left.
        assert!(
            used <= second + 3000 && used + back(t.elapsed(), 100) >= 3000,
            "{u}"
        );
        assert!(reset > 60_000, "{u}");
        // A request refused for it counts in neither limit.
        let rpm_before = fig(&u, "rpm");
        let r = ask(&a, "fixed", "k-alpha").await;
        assert_eq!(r.status, 429, "{}", r.text);
        assert_eq!(r.json()["error"]["type"], "tokens", "{}", r.text);
        // Retry-After is when the debt and 90 cells are paid: what `used`
        // says, to the second.
        let wait = header(&r, "retry-after");
        let due = (used + ESTIMATE - 600) / 10;
        assert!(wait <= due + 1 && wait + 3 >= due, "{wait} s for {u}");
        let u = key_usage(&b, "k-admin", "alpha").await;
        assert_eq!(fig(&u, "rpm").0, rpm_before.0, "{u}");
        assert!(fig(&u, "tpm").0 <= used, "{u}");
    }
}
