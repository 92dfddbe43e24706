//! The official `anthropic` Python SDK against the gateway's `/v1/messages`
//! (`tests/sdk/anthropic_*.py`: `messages.create` whole and streamed, the
//! `messages.stream` helper, a tool round trip, extended thinking,
//! `count_tokens`, typed errors; the key as `x-api-key` and as
//! `Authorization: Bearer`) on a passthrough to an Anthropic upstream
//! (forwarded verbatim), a passthrough to an OpenAI upstream (translated), a
//! chain whose verifier is an Anthropic upstream, a judge panel, a hedge and
//! an arena; and the official `openai` SDK's Chat Completions through routes
//! whose members are all Anthropic upstreams.
//!
//! The upstreams are two `conclave mock` processes, one speaking the
//! Messages API (`api = "anthropic"`, reached through `kind = "anthropic"`),
//! one Chat Completions (`tests/it/sdk_setup/anthropic.rs`).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::sdk_setup;

use std::time::Duration;

use common::*;
use sdk_setup::anthropic::*;
use serde_json::{Value, json};

/// Every script in `scripts` against `route`, each on a fresh world; all
/// failures reported together.
fn scripts_on(route: &str, scripts: &[&str], extra: &[(&str, &str)]) {
    let fails: Vec<String> = scripts
        .iter()
        .filter_map(|s| match world().script(s, route, extra) {
            Ok(out) => {
                eprintln!("{s} on {route}:\n{out}");
                None
            }
            Err(e) => Some(e),
        })
        .collect();
    assert!(
        fails.is_empty(),
        "{} of {} scripts failed on {route}:\n\n{}",
        fails.len(),
        scripts.len(),
        fails.join("\n\n")
    );
}

/// The scripts every route answers alike.
const COMMON: [&str; 3] = [
    "anthropic_text.py",
    "anthropic_tools.py",
    "anthropic_count.py",
];

#[test]
fn the_anthropic_sdk_on_a_passthrough_to_an_anthropic_upstream() {
    let mut s = COMMON.to_vec();
    s.extend(["anthropic_errors.py", "anthropic_thinking.py"]);
    scripts_on(
        "pass-a",
        &s,
        &[("PASS_THINKING", "1"), ("EXPECT_THINKING", "1")],
    );
}

#[test]
fn the_anthropic_sdk_on_a_passthrough_to_an_openai_upstream() {
    let mut s = COMMON.to_vec();
    s.extend(["anthropic_errors.py", "anthropic_thinking.py"]);
    scripts_on("pass-o", &s, &[]);
}

#[test]
fn the_anthropic_sdk_on_a_chain_with_an_anthropic_verifier() {
    let mut s = COMMON.to_vec();
    s.push("anthropic_thinking.py");
    scripts_on("chain", &s, &[]);
}

#[test]
fn the_anthropic_sdk_on_a_judge_panel() {
    scripts_on("panel", &COMMON, &[]);
}

#[test]
fn the_anthropic_sdk_on_a_hedge() {
    let mut s = COMMON.to_vec();
    s.push("anthropic_thinking.py");
    scripts_on("hedge", &s, &[("EXPECT_THINKING", "1")]);
}

#[test]
fn the_anthropic_sdk_on_an_arena() {
    scripts_on("arena", &["anthropic_arena.py", "anthropic_count.py"], &[]);
}

#[test]
fn the_openai_sdk_through_anthropic_members() {
    for route in ["pass-a", "chain-a", "hedge"] {
        scripts_on(route, &["openai_chat.py"], &[]);
    }
}

/// The chain's first tier (an OpenAI upstream) answers; the verifier, an
/// Anthropic upstream, is asked in the Messages format and its verdict
/// (accept) is read: the top tier is never asked.
#[tokio::test]
async fn an_anthropic_verifier_s_verdict_is_read() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    let http = client();
    for stream in [false, true] {
        let req = http
            .post(w.gw.url("/v1/messages"))
            .header("x-api-key", ALICE)
            .header("anthropic-version", "2023-06-01")
            .json(&json!({
                "model": "chain",
                "max_tokens": 256,
                "stream": stream,
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
            }));
        let r = tokio::time::timeout(Duration::from_secs(30), send(req))
            .await
            .expect("an answer within 30 s");
        assert_eq!(r.status, 200, "stream={stream}: {}", r.text);
        assert_eq!(
            r.header("x-conclave-served-by"),
            Some("o-good"),
            "stream={stream}: {}",
            r.text
        );
        assert!(
            r.text.contains("Paris") && !r.text.contains("TOP-TIER"),
            "{}",
            r.text
        );
    }
    let asked = w.anth.asked("a-ver").await;
    assert_eq!(asked.len(), 2, "the verifier was asked twice: {asked:?}");
    for body in &asked {
        assert!(body["max_tokens"].as_u64().is_some(), "{body}");
        let text = body.to_string();
        assert!(text.contains("strict reviewer"), "{body}");
        assert!(text.contains(CAPITAL), "the candidate reached it: {body}");
    }
    assert!(w.anth.asked("a-top").await.is_empty());
}

/// The upstream gets conclave's key as `x-api-key` with an
/// `anthropic-version`, never the client's key; no answer or log shows the
/// upstream key.
#[tokio::test]
async fn the_anthropic_upstream_gets_its_own_key() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    for route in ["pass-a", "hedge"] {
        let r = send(
            client()
                .post(w.gw.url("/v1/messages"))
                .bearer_auth(ALICE)
                .json(&json!({
                    "model": route,
                    "max_tokens": 64,
                    "messages": [{"role": "user", "content": "hi"}],
                })),
        )
        .await;
        assert_eq!(r.status, 200, "{route}: {}", r.text);
        let got: Value = r.json();
        assert_eq!(got["content"][0]["text"], CAPITAL, "{route}: {got}");
        assert!(!r.text.contains(UPSTREAM_KEY));
        let seen = w.anth.received().await;
        let last = seen.last().unwrap();
        assert_eq!(last["api_key"], UPSTREAM_KEY, "{route}: {last}");
        assert!(last["anthropic_version"].is_string(), "{route}: {last}");
        assert!(
            !last.to_string().contains(ALICE),
            "{route}: the client's key went upstream: {last}"
        );
    }
    assert!(
        !w.gw.stderr().contains(UPSTREAM_KEY),
        "the upstream key is in the log"
    );
}
