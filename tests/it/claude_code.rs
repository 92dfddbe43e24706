//! Claude Code against the gateway's `/v1/messages`: the request body
//! Claude Code 2.1.331 sent for one `claude -p` turn
//! (`tests/fixtures/claude_code_request.json`, recorded against a logging
//! server: three system blocks, two with `cache_control`, twelve tools, a
//! `system` message inside `messages`, adaptive `thinking`,
//! `context_management`, `output_config`, `stream: true`) with the headers
//! it sends (`?beta=true`, `anthropic-beta`, `anthropic-version`,
//! `x-api-key`), on a chain and on a passthrough to an Anthropic upstream;
//! and Claude Code itself (`@anthropic-ai/claude-code` from npm, into
//! `target/claude-code`) completing `claude -p` turns on translated and
//! verbatim routes, running its `Bash` tool, and reporting a wrong key at
//! once. What a logging server showed Claude Code needs of a stream:
//! `message_start` and `content_block_start` before the deltas (without
//! them it asks again with `stream: false`); `message_delta`,
//! `message_stop` and `message_start`'s usage are optional (the end of the
//! body ends the turn); `ping` and unknown events are ignored; an `error`
//! event makes it ask again once with `stream: false`; a 401 is retried
//! for minutes unless it says `x-should-retry: false`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::sdk_setup;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use common::*;
use sdk_setup::anthropic::*;
use sdk_setup::*;
use serde_json::{Value, json};

/// The Claude Code release the tests install (the fixture was recorded
/// with it).
const CLAUDE_CODE_VERSION: &str = "2.1.331";

/// The `anthropic-beta` header Claude Code sent with the recorded request.
const BETAS: &str = "claude-code-20250219,interleaved-thinking-2025-05-14,context-management-2025-06-27,per-turn-control-2026-07-01,mid-conversation-tool-changes-2026-07-01,thinking-token-count-2026-05-13,advanced-tool-use-2025-11-20,effort-2025-11-24";

fn claude() -> PathBuf {
    npm_tool(
        "claude-code",
        "@anthropic-ai/claude-code",
        CLAUDE_CODE_VERSION,
        "claude",
    )
}

/// An Anthropic event stream: (event name, data) pairs, each data's `type`
/// equal to its event name.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        // SSE comments are valid (and ignored by clients).
        .filter(|ev| ev.lines().any(|l| !l.is_empty() && !l.starts_with(':')))
        .map(|ev| {
            let name = ev
                .lines()
                .find_map(|l| l.strip_prefix("event: "))
                .unwrap_or_else(|| panic!("an event without a name: {ev:?} in {text}"));
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            let data: Value = serde_json::from_str(&data.join("\n"))
                .unwrap_or_else(|e| panic!("event {name} is not JSON ({e}): {text}"));
            assert_eq!(data["type"], name, "{text}");
            (name.to_owned(), data)
        })
        .collect()
}

/// A well-formed Messages stream ending with `message_stop`; its text.
fn check_stream(text: &str) -> String {
    let evs = events(text);
    let names: Vec<&str> = evs.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names.first(), Some(&"message_start"), "{text}");
    assert_eq!(names.last(), Some(&"message_stop"), "{text}");
    let msg = &evs[0].1["message"];
    assert_eq!(msg["role"], "assistant", "{text}");
    assert!(msg["id"].as_str().unwrap().starts_with("msg_"), "{text}");
    assert_eq!(msg["content"], json!([]), "{text}");
    for (name, _) in &evs {
        assert!(
            [
                "message_start",
                "content_block_start",
                "content_block_delta",
                "content_block_stop",
                "message_delta",
                "message_stop",
                "ping"
            ]
            .contains(&name.as_str()),
            "an undocumented event {name}: {text}"
        );
    }
    let deltas: Vec<&Value> = evs
        .iter()
        .filter(|(n, _)| n == "message_delta")
        .map(|(_, d)| d)
        .collect();
    assert_eq!(deltas.len(), 1, "{text}");
    assert_eq!(deltas[0]["delta"]["stop_reason"], "end_turn", "{text}");
    assert!(
        deltas[0]["usage"]["output_tokens"].as_u64().unwrap() > 0,
        "{text}"
    );
    evs.iter()
        .filter(|(n, d)| n == "content_block_delta" && d["delta"]["type"] == "text_delta")
        .map(|(_, d)| d["delta"]["text"].as_str().unwrap())
        .collect()
}

/// The text blocks of a whole `message`, joined.
fn whole_text(m: &Value) -> String {
    m["content"]
        .as_array()
        .unwrap_or_else(|| panic!("no content: {m}"))
        .iter()
        .filter(|b| b["type"] == "text")
        .map(|b| b["text"].as_str().unwrap())
        .collect()
}

fn fixture() -> Value {
    let path = root().join("tests/fixtures/claude_code_request.json");
    serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap()
}

/// Posts the recorded body to `route` as Claude Code does.
async fn post_recorded(w: &World, route: &str, stream: bool) -> Resp {
    let mut body = fixture();
    body["model"] = json!(route);
    body["stream"] = json!(stream);
    let req = client()
        .post(w.gw.url("/v1/messages?beta=true"))
        .header("x-api-key", ALICE)
        .header("anthropic-version", "2023-06-01")
        .header("anthropic-beta", BETAS)
        .header("anthropic-dangerous-direct-browser-access", "true")
        .header("x-app", "cli")
        .header("user-agent", "claude-cli/2.1.331 (external, sdk-cli)")
        .json(&body);
    tokio::time::timeout(Duration::from_secs(30), send(req))
        .await
        .unwrap_or_else(|_| panic!("{route} stream={stream}: no answer within 30 s"))
}

#[tokio::test]
async fn the_recorded_claude_code_request_is_answered_on_a_chain() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    for stream in [true, false] {
        let r = post_recorded(&w, "chain", stream).await;
        assert_eq!(r.status, 200, "stream={stream}: {}", r.text);
        let text = if stream {
            assert_eq!(
                r.header("content-type"),
                Some("text/event-stream"),
                "{}",
                r.text
            );
            check_stream(&r.text)
        } else {
            let m = r.json();
            assert_eq!(m["type"], "message", "{m}");
            assert_eq!(m["stop_reason"], "end_turn", "{m}");
            whole_text(&m)
        };
        assert_eq!(text, CAPITAL, "stream={stream}");
    }
    // Translated for the OpenAI tier: the twelve tools as chat tools, the
    // system blocks and the mid-conversation system message as system text.
    let asked = w.oai.asked("o-good").await;
    let last = asked.last().unwrap();
    let tools = last["tools"].as_array().unwrap();
    assert_eq!(
        tools.len(),
        fixture()["tools"].as_array().unwrap().len(),
        "{last}"
    );
    assert!(
        tools.iter().any(|t| t["function"]["name"] == "Bash"),
        "{last}"
    );
    let text = last["messages"].to_string();
    assert!(text.contains("say hi"), "{last}");
    assert!(
        text.contains("# Environment"),
        "the system message went upstream: {last}"
    );
}

#[tokio::test]
async fn the_recorded_claude_code_request_is_forwarded_to_an_anthropic_upstream() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    for stream in [true, false] {
        let r = post_recorded(&w, "pass-a", stream).await;
        assert_eq!(r.status, 200, "stream={stream}: {}", r.text);
        if stream {
            assert_eq!(check_stream(&r.text), CAPITAL);
        } else {
            assert_eq!(whole_text(&r.json()), CAPITAL, "{}", r.text);
        }
    }
    // Verbatim: every field as sent but the model's name, and the betas.
    let seen = w.anth.received().await;
    for q in &seen {
        assert_eq!(
            q["anthropic_beta"], BETAS,
            "the client's betas went upstream"
        );
    }
    let asked = w.anth.asked("a-good").await;
    let mut want = fixture();
    want["model"] = json!("a-good");
    for (got, stream) in asked.iter().zip([true, false]) {
        want["stream"] = json!(stream);
        assert_eq!(
            got, &want,
            "stream={stream}: the body was changed on its way"
        );
    }
    assert_eq!(asked.len(), 2);
}

/// Runs `claude -p PROMPT --model ROUTE` against the gateway with a scratch
/// home and nothing non-essential (no telemetry, no updates), within 90 s.
fn claude_run(w: &World, route: &str, prompt: &str, extra: &[&str]) -> Ran {
    claude_run_as(w, ALICE, route, prompt, extra, Duration::from_secs(90))
}

fn claude_run_as(
    w: &World,
    key: &str,
    route: &str,
    prompt: &str,
    extra: &[&str],
    limit: Duration,
) -> Ran {
    let claude = claude();
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    run_bounded(
        Command::new(claude)
            .args(["--model", route])
            .args(extra)
            .arg("-p")
            .arg(prompt)
            .current_dir(&work)
            .env_clear()
            .env("PATH", std::env::var("PATH").unwrap_or_default())
            .env("HOME", home.path())
            .env("CLAUDE_CONFIG_DIR", home.path().join("config"))
            .env("ANTHROPIC_BASE_URL", &w.gw.base)
            .env("ANTHROPIC_API_KEY", key)
            .env("CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC", "1")
            .env("DISABLE_TELEMETRY", "1")
            .env("DISABLE_AUTOUPDATER", "1")
            .env("DISABLE_ERROR_REPORTING", "1")
            .env("NO_PROXY", "127.0.0.1,localhost"),
        limit,
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

fn claude_ok(w: &World, route: &str, prompt: &str, extra: &[&str]) -> String {
    let ran = claude_run(w, route, prompt, extra);
    assert!(
        ran.ok(),
        "claude -p on {route}: {}\n--- gateway log (tail)\n{}",
        ran.show(),
        tail(&w.gw.stderr(), 30)
    );
    ran.stdout
}

/// One turn on a passthrough to an Anthropic upstream (Claude Code's body
/// and betas forwarded verbatim), a chain and a judge panel (translated).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_completes_a_turn_through_the_gateway() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    for route in ["pass-a", "chain", "panel"] {
        let out = tokio::task::block_in_place(|| claude_ok(&w, route, "say hi", &[]));
        assert_eq!(out.trim(), CAPITAL, "{route}: {out}");
        if route == "pass-a" {
            let seen = w.anth.received().await;
            let q = seen.last().unwrap();
            assert!(q["body"]["output_config"].is_object(), "not verbatim: {q}");
            assert!(
                q["anthropic_beta"]
                    .as_str()
                    .unwrap_or_default()
                    .contains("claude-code-20250219"),
                "{q}"
            );
        }
    }
}

/// Claude Code runs the `Bash` call the mock asks for and sends its output
/// back: on a chain (an OpenAI tier, translated) and on a passthrough to an
/// Anthropic upstream (verbatim).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claude_code_runs_its_bash_tool_through_the_gateway() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    for route in ["chain", "pass-a"] {
        let out = tokio::task::block_in_place(|| {
            claude_ok(
                &w,
                route,
                "Run the claude echo.",
                &["--allowedTools", "Bash(echo:*)"],
            )
        });
        assert_eq!(out.trim(), CLAUDE_TOOL_OK, "{route}: {out}");
    }
    // The command ran and its output went back as a tool result: a chat
    // tool message to the OpenAI tier, a `tool_result` block to Anthropic.
    let asked = w.oai.asked("o-good").await;
    let last = asked.last().unwrap();
    let tool = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "tool")
        .unwrap_or_else(|| panic!("no tool message: {last}"))
        .clone();
    assert!(tool.to_string().contains("CLAUDE-TOOL-OK"), "{tool}");
    let asked = w.anth.asked("a-good").await;
    let last = asked.last().unwrap();
    let user = last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .rfind(|m| m["role"] == "user")
        .unwrap()
        .clone();
    let result = user["content"]
        .as_array()
        .unwrap()
        .iter()
        .find(|b| b["type"] == "tool_result")
        .unwrap_or_else(|| panic!("no tool_result: {user}"));
    assert!(result.to_string().contains("CLAUDE-TOOL-OK"), "{result}");
}

/// A wrong key: Claude Code says so and exits 1 at once. It retries a 401
/// for minutes unless the answer says `x-should-retry: false` (found with a
/// logging server: 8 attempts in 90 s without it, one with it).
#[test]
fn claude_code_reports_a_wrong_key_at_once() {
    let w = world();
    let t = tokio::time::Instant::now();
    let ran = claude_run_as(
        &w,
        "sk-anth-wrong-0123456789",
        "pass-a",
        "say hi",
        &[],
        Duration::from_secs(40),
    );
    let took = t.elapsed();
    assert_eq!(ran.code, Some(1), "{}", ran.show());
    // Without it: minutes of retries (and the 40 s limit above). The
    // bound leaves a busy machine room to start Claude Code.
    assert!(
        took < Duration::from_secs(30),
        "took {took:?}: {}",
        ran.show()
    );
    assert!(ran.stdout.contains("API key"), "{}", ran.show());
}
