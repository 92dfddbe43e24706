//! Budgets that cannot be gamed, black-box: against an upstream that bills
//! like a real provider (tests/it/common/billing.rs), a key's daily budget
//! holds whatever the body carries (tools, images, `n`), output caps that
//! are not positive integers are refused, and `tpm` debt carries over
//! (in-process, on paused time: its wait is exact).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::atomic::Ordering;

use common::*;
use serde_json::{Value, json};

/// What one kind of body does to a budget.
struct Kind {
    name: &'static str,
    budget: u64,
    body: Value,
}

fn tools(bytes: usize) -> Value {
    let per = 1000;
    let tools: Vec<Value> = (0..bytes / per)
        .map(|i| {
            json!({"type": "function", "function": {"name": format!("tool_{i}"),
                "description": "d".repeat(per - 120),
                "parameters": {"type": "object", "properties": {"x": {"type": "string"}}}}})
        })
        .collect();
    json!(tools)
}

fn with_images(n: usize) -> Value {
    let mut parts = vec![json!({"type": "text", "text": "what is in these?"})];
    for _ in 0..n {
        parts.push(json!({"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}));
    }
    json!([{"role": "user", "content": parts}])
}

fn kinds() -> Vec<Kind> {
    let base = |extra: Value| {
        let mut b = json!({"model": "billed", "messages": [{"role": "user", "content": "hello there"}],
                           "max_tokens": 100});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let kind = |name, budget, extra| Kind {
        name,
        budget,
        body: base(extra),
    };
    let schema = json!({"type": "object", "description": "s".repeat(6000)});
    vec![
        // The probe's bodies against its 2,000-token budget.
        kind("tools-32k", 2000, json!({"tools": tools(32_000)})),
        kind("images-20", 2000, json!({"messages": with_images(20)})),
        kind("n-100", 2000, json!({"n": 100})),
        // Bodies of which some fit.
        kind("tools-8k", 50_000, json!({"tools": tools(8_000)})),
        kind("images-4", 50_000, json!({"messages": with_images(4)})),
        kind("n-20", 50_000, json!({"n": 20})),
        kind(
            "schema",
            50_000,
            json!({"response_format": {"type": "json_schema",
                                       "json_schema": {"name": "s", "schema": schema}}}),
        ),
    ]
}

fn config(billing_v1: &str, kinds: &[Kind]) -> (String, Vec<(String, String)>) {
    let mut toml = format!(
        "[upstreams.billing]\nkind = \"openai\"\nbase_url = \"{billing_v1}\"\n\n\
         [models.billed]\nupstream = \"billing\"\n\n"
    );
    let mut env = Vec::new();
    for (i, k) in kinds.iter().enumerate() {
        toml.push_str(&format!(
            "[[keys]]\nname = \"{}\"\nkey_env = \"KEY_{i}\"\ndaily_tokens = {}\n\n",
            k.name, k.budget
        ));
        env.push((format!("KEY_{i}"), format!("k-{}", k.name)));
    }
    (toml, env)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_budget_holds_whatever_the_body_holds() {
    let (billing_v1, bill) = billing::start().await;
    let kinds = kinds();
    let (toml, env) = config(&billing_v1, &kinds);
    let env: Vec<(&str, &str)> = env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let gw = Srv::gateway_env(&toml, &env);
    let mut report = Vec::new();
    for k in &kinds {
        let before = bill.tokens.load(Ordering::SeqCst);
        let auth = format!("Bearer k-{}", k.name);
        let h = [("authorization", auth.as_str())];
        let all =
            futures::future::join_all((0..100).map(|_| post_with(&gw.base, &k.body, &h))).await;
        let billed = bill.tokens.load(Ordering::SeqCst) - before;
        let ok = all.iter().filter(|r| r.status == 200).count();
        for r in all.iter().filter(|r| r.status != 200) {
            assert_eq!(r.status, 429, "{}: {}", k.name, r.text);
            assert_eq!(r.json()["error"]["code"], "budget_exceeded", "{}", r.text);
            assert!(
                r.header("retry-after").is_some(),
                "{}: no Retry-After",
                k.name
            );
        }
        let (one_in, one_out) = billing::price(&k.body);
        let ratio = billed as f64 / k.budget as f64;
        report.push(format!(
            "{}: {ok} of 100 admitted, billed {billed} of {} ({ratio:.2}x; one request bills {})",
            k.name,
            k.budget,
            one_in + one_out
        ));
        // The provider charges 4/3 of the gateway's text estimate: what
        // is admitted may overshoot by that, never by more.
        assert!(ratio <= 1.34, "{}", report.join("\n"));
    }
    eprintln!("{}", report.join("\n"));
    // The probe's bodies never fit a 2,000-token day: nothing was billed.
    let probe: Vec<&String> = report.iter().take(3).collect();
    assert!(
        probe.iter().all(|l| l.contains(" 0 of 100 admitted")),
        "{probe:?}"
    );
    // The others spent most of their budget: the estimate is not a wall.
    assert!(
        report[3..].iter().all(|l| !l.contains(" 0 of 100")),
        "{report:?}"
    );
}

/// The simulated upstream used for caps and debt.
const SIM: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.echo]

[upstreams.sim.models.greedy]
reply = { text = "a very long answer" }
usage = { prompt_tokens = 25, completion_tokens = 100000 }

[models.echo]
upstream = "sim"

[models.greedy]
upstream = "sim"

[[keys]]
name = "alpha"
key_env = "KEY_A"
tpm = 1000
"#;

/// Posts a chat body as written (numbers JSON cannot round-trip).
async fn post_raw(gw: &Srv, body: String, auth: &str) -> Resp {
    let req = client()
        .post(gw.url("/v1/chat/completions"))
        .header("authorization", auth)
        .header("content-type", "application/json")
        .body(body);
    send(req).await
}

#[tokio::test]
async fn caps_that_are_not_positive_integers_are_a_400_and_huge_ones_never_fit() {
    let gw = Srv::gateway_env(SIM, &[("KEY_A", "k-alpha")]);
    let h = [("authorization", "Bearer k-alpha")];
    for (field, bad) in [
        ("max_tokens", "5000.0"),
        ("max_tokens", "\"5000\""),
        ("max_tokens", "-1"),
        ("max_tokens", "0"),
        ("max_completion_tokens", "1e4"),
        ("n", "0"),
        ("n", "2.5"),
    ] {
        let body = format!(
            r#"{{"model": "echo", "messages": [{{"role": "user", "content": "hi"}}], "{field}": {bad}}}"#
        );
        let r = post_raw(&gw, body, h[0].1).await;
        assert_eq!(r.status, 400, "{field} = {bad}: {}", r.text);
        let e = &r.json()["error"];
        assert_eq!(e["param"], field, "{e}");
        assert_eq!(e["type"], "invalid_request_error", "{e}");
    }
    // Beyond 64 bits: a valid cap, clamped for the estimate, which no
    // minute of 1,000 tokens holds. Said so, with when to look again.
    let body = r#"{"model": "echo", "messages": [{"role": "user", "content": "hi"}],
                   "max_tokens": 18446744073709551616}"#;
    let r = post_raw(&gw, body.to_owned(), h[0].1).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "rate_limit_exceeded");
    assert!(r.text.contains("never fit"), "{}", r.text);
    assert!(
        r.header("retry-after").is_some(),
        "a 429 without Retry-After"
    );
    assert_eq!(r.header("x-should-retry"), Some("false"));
    // `n` multiplies the cap: 2 × 600 does not fit 1,000 either (with
    // "hi" and its chat template: 1 + 32 + 7 input tokens).
    let mut b = chat("echo", "hi");
    b["max_tokens"] = json!(600);
    b["n"] = json!(2);
    let r = post_with(&gw.base, &b, &h).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert!(r.text.contains("up to 1240"), "{}", r.text);
}

/// In-process, on paused time: the debt's wait is stated exactly, and
/// waiting it out (not a second less) pays it back.
#[tokio::test(start_paused = true)]
async fn tpm_debt_carries_over_until_it_is_paid_back() {
    let gw = inproc::Gw::start_with(
        SIM,
        &[("KEY_A", "k-alpha")],
        std::time::UNIX_EPOCH + inproc::START,
    );
    let h = [("authorization", "Bearer k-alpha")];
    // No cap: the estimate is trimmed to fit, then the model writes
    // 100,000 tokens. The key owes about 100 minutes of its limit.
    let r = gw.chat_with(&chat("greedy", "hi"), &h).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let mut retry = 0;
    for _ in 0..3 {
        let r = gw.chat_with(&chat("echo", "hi"), &h).await;
        assert_eq!(r.status, 429, "debt forgiven: {}", r.text);
        // (100,025 - 1,000 + what echo asks) tokens at 1,000 a minute:
        // 6,002 s.
        retry = r.header("retry-after").unwrap().parse().unwrap();
        assert_eq!(retry, 6002, "retry-after {retry}");
        assert_eq!(r.header("x-ratelimit-remaining-tokens"), Some("0"));
        assert_eq!(r.header("x-should-retry"), None, "a wait helps here");
    }
    // A second short of it the debt still stands; then it is paid back.
    tokio::time::advance(std::time::Duration::from_secs(retry - 1)).await;
    let r = gw.chat_with(&chat("echo", "hi"), &h).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.header("retry-after"), Some("1"));
    tokio::time::advance(std::time::Duration::from_secs(1)).await;
    let r = gw.chat_with(&chat("echo", "hi"), &h).await;
    assert_eq!(r.status, 200, "{}", r.text);
}
