//! The real clients against the real gateway process: the official `openai`
//! Python SDK's Responses API (`tests/sdk/*.py`) on a passthrough route, a
//! chain, a judge panel and a hedge; `openai-agents` running an agent with a
//! function tool through a chain; the request bodies Codex CLI 0.169.0 sent
//! (`tests/fixtures/codex_request*.json`, recorded against a logging server);
//! and Codex CLI itself (`@openai/codex` from npm) completing `codex exec`
//! turns against the mock.
//!
//! The Python packages are pinned in `tests/sdk/requirements.txt` and
//! installed once into `target/sdk-venv` (again when the file changes);
//! Codex into `target/codex`. Both need the network the first time; a setup
//! that fails fails the tests (they never skip).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;
use crate::sdk_setup;

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use tokio::time::Instant;

use common::*;
use sdk_setup::*;
use serde_json::{Value, json};

/// The Codex CLI release the tests install (the fixtures were recorded
/// with it).
const CODEX_VERSION: &str = "0.169.0";

const ALICE: &str = "sk-sdk-alice-0123456789";
const BOB: &str = "sk-sdk-bob-0123456789";

// The mock's answers; `tests/sdk/common.py` has the same strings.
const CAPITAL: &str = "The capital of France is Paris.";
const WEATHER: &str = "It is 18C and sunny in Paris.";
const TOOL_RESULT: &str = "TOOL-RESULT: 18C, sunny";
const MEMO: &str = "Noted: MEMO-42";
const CONTINUED: &str = "Continuing after MEMO-42: the word was AZURE.";
const CODEX_TOOL_OK: &str = "The command printed CODEX-TOOL-OK.";
const ESSAY: &str = "Once upon a time, in a land";

/// `target/codex` with `@openai/codex@CODEX_VERSION`; the CLI's path.
fn codex() -> PathBuf {
    npm_tool("codex", "@openai/codex", CODEX_VERSION, "codex")
}

// ---------------------------------------------------------------------------
// The world: a mock upstream process and the gateway process in front.
// ---------------------------------------------------------------------------

/// One mock model's behaviour: a plain answer, and rules (first match wins)
/// that the scripts' prompts trigger.
fn behaviour(name: &str) -> String {
    let rules: [(&str, String); 8] = [
        (
            "Write a long essay",
            format!("reply = {{ text = \"{ESSAY}\" }}, finish_reason = \"length\""),
        ),
        ("MEMO-42", format!("reply = {{ text = \"{CONTINUED}\" }}")),
        (
            "the secret word is AZURE",
            format!("reply = {{ text = \"{MEMO}\" }}"),
        ),
        (
            TOOL_RESULT,
            format!("reply = {{ text = \"{WEATHER}\" }}"),
        ),
        (
            "What is the weather in Paris?",
            r#"reply = { tool_call = { name = "get_weather", arguments = { city = "Paris" } } }"#
                .into(),
        ),
        (
            "Reply in JSON",
            r#"reply = { json = { city = "Paris", country = "France" } }"#.into(),
        ),
        (
            "CODEX-TOOL-OK",
            format!("reply = {{ text = \"{CODEX_TOOL_OK}\" }}"),
        ),
        (
            "Run the codex echo",
            r#"reply = { tool_call = { name = "exec_command", arguments = { cmd = "echo CODEX-TOOL-OK" } } }"#
                .into(),
        ),
    ];
    let mut t = format!("[upstreams.sim.models.{name}]\nreply = {{ text = \"{CAPITAL}\" }}\n\n");
    for (when, then) in rules {
        t.push_str(&format!(
            "[[upstreams.sim.models.{name}.rules]]\nwhen_contains = \"{when}\"\nthen = {{ {then} }}\n\n"
        ));
    }
    t
}

fn mock_toml() -> String {
    let mut t = String::from("[upstreams.sim]\nkind = \"mock\"\n\n");
    for m in ["m-good", "m-twin", "m-pa", "m-pb"] {
        t.push_str(&behaviour(m));
    }
    // The hedge's first candidate and the panel are slow: the hedge starts
    // its second candidate, the panel's stream sends keep-alives.
    for (m, ttft) in [("m-twin", "3s"), ("m-pa", "400ms"), ("m-pb", "400ms")] {
        t = t.replace(
            &format!("[upstreams.sim.models.{m}]\n"),
            &format!("[upstreams.sim.models.{m}]\nttft = \"{ttft}\"\n"),
        );
    }
    t.push_str(
        r#"[upstreams.sim.models.m-cut]
reply = { text = "one two three four five six seven eight nine ten" }
tokens_per_second = 50
fail = "cut"

[upstreams.sim.models.m-syn]
reply = { text = "Guidance: state the answer plainly." }

[upstreams.sim.models.m-down]
status = 503
error_message = "simulated outage"
"#,
    );
    t
}

/// The routes: a passthrough, a fallback chain whose first tier is down, a
/// judge panel, a hedge (first-of-N race) whose first candidate is slow,
/// and a passthrough to a model whose stream breaks halfway.
const ROUTES: &str = r#"
[routes.pass]
strategy = "passthrough"
model = "m-good"

[routes.chain]
strategy = "chain"
tiers = ["m-down", "m-good"]

[routes.panel]
strategy = "judge"
panel = ["m-pa", "m-pb"]
synthesis = "m-syn"
default = "m-good"
keepalive = "100ms"

[routes.hedge]
strategy = "race"
mode = "first"
candidates = ["m-twin", "m-good"]
hedge_delay = "100ms"

[routes.cut]
strategy = "passthrough"
model = "m-cut"

[routes.cached]
strategy = "passthrough"
model = "m-good"
cache = { ttl = "1h" }
"#;

fn gateway_toml(mock_v1: &str) -> String {
    let mut t = format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n[upstreams.up]\nkind = \"openai\"\nbase_url = \"{mock_v1}\"\ntimeout = \"10s\"\n\n"
    );
    for m in [
        "m-good", "m-twin", "m-pa", "m-pb", "m-syn", "m-down", "m-cut",
    ] {
        t.push_str(&format!("[models.{m}]\nupstream = \"up\"\n\n"));
    }
    t.push_str(
        "[[keys]]\nname = \"alice\"\nkey_env = \"SDK_ALICE\"\n\n[[keys]]\nname = \"bob\"\nkey_env = \"SDK_BOB\"\n",
    );
    t.push_str(ROUTES);
    t
}

struct World {
    mock: Proc,
    gw: Proc,
}

fn world() -> World {
    let mock = Proc::mock(&mock_toml());
    let gw = Proc::gateway_env(
        &gateway_toml(&mock.v1()),
        &[("SDK_ALICE", ALICE), ("SDK_BOB", BOB)],
    );
    World { mock, gw }
}

impl World {
    /// Runs `tests/sdk/SCRIPT` against `route`; its output, or why not.
    fn script(&self, script: &str, route: &str) -> Result<String, String> {
        let env = [
            ("OPENAI_BASE_URL", self.gw.v1()),
            ("OPENAI_API_KEY", ALICE.to_owned()),
            ("OTHER_API_KEY", BOB.to_owned()),
            ("MOCK_URL", self.mock.base.clone()),
            ("OPENAI_AGENTS_DISABLE_TRACING", "1".to_owned()),
        ];
        python_script(script, route, &env).map_err(|e| {
            format!(
                "{e}\n--- gateway log (tail)\n{}",
                tail(&self.gw.stderr(), 30)
            )
        })
    }
}

/// Every Responses script against `route`, each on a fresh world; all
/// failures reported together.
fn responses_on(route: &str) {
    let scripts = [
        "responses_text.py",
        "responses_tools.py",
        "responses_format.py",
        "responses_state.py",
    ];
    let fails: Vec<String> = scripts
        .iter()
        .filter_map(|s| world().script(s, route).err())
        .collect();
    assert!(
        fails.is_empty(),
        "{} of {} scripts failed on {route}:\n\n{}",
        fails.len(),
        scripts.len(),
        fails.join("\n\n")
    );
}

#[test]
fn the_openai_sdk_on_a_passthrough_route() {
    responses_on("pass");
}

#[test]
fn the_openai_sdk_on_a_chain() {
    responses_on("chain");
}

#[test]
fn the_openai_sdk_on_a_judge_panel() {
    responses_on("panel");
}

#[test]
fn the_openai_sdk_on_a_hedge() {
    responses_on("hedge");
}

#[test]
fn the_openai_sdk_sees_a_broken_stream_fail() {
    let w = world();
    if let Err(e) = w.script("responses_failure.py", "cut") {
        panic!("{e}");
    }
}

#[test]
fn the_sdks_share_a_cached_answer_across_dialects() {
    let w = world();
    if let Err(e) = w.script("cache_dialects.py", "cached") {
        panic!("{e}");
    }
}

#[test]
fn an_agents_sdk_agent_runs_its_function_tool_through_a_chain() {
    let w = world();
    if let Err(e) = w.script("agents_tool.py", "chain") {
        panic!("{e}");
    }
}

// ---------------------------------------------------------------------------
// Codex CLI: its recorded requests, then the CLI itself.
// ---------------------------------------------------------------------------

/// A Responses event stream: (event name, data) pairs.
fn events(text: &str) -> Vec<(String, Value)> {
    text.split("\n\n")
        .filter_map(|ev| {
            let name = ev.lines().find_map(|l| l.strip_prefix("event: "))?;
            let data: Vec<&str> = ev
                .lines()
                .filter_map(|l| l.strip_prefix("data: "))
                .collect();
            let data = serde_json::from_str(&data.join("\n"))
                .unwrap_or_else(|e| panic!("event {name} is not JSON ({e}): {text}"));
            Some((name.to_owned(), data))
        })
        .collect()
}

/// What Codex needs of a stream (found by running it against a logging
/// server): every `output_item.done` carrying the whole item (its text is
/// taken from there, not from the deltas), a `response.completed` whose
/// response has an `id`, and then the end of the body (after an `error` or
/// `response.failed` event Codex waits for the stream to close).
fn check_codex_stream(text: &str) -> Value {
    let evs = events(text);
    assert!(evs.len() >= 3, "{text}");
    assert_eq!(evs[0].0, "response.created", "{text}");
    let mut seq = -1;
    for (name, data) in &evs {
        assert_eq!(data["type"], name.as_str(), "{data}");
        let n = data["sequence_number"].as_i64().unwrap_or(-1);
        assert!(n > seq, "sequence_number {n} after {seq}: {text}");
        seq = n;
    }
    let (last, done) = evs.last().unwrap();
    assert_eq!(last, "response.completed", "{text}");
    let resp = done["response"].clone();
    assert!(resp["id"].as_str().unwrap().starts_with("resp_"), "{resp}");
    let deltas: String = evs
        .iter()
        .filter(|(n, _)| n == "response.output_text.delta")
        .map(|(_, d)| d["delta"].as_str().unwrap().to_owned())
        .collect();
    let items: String = evs
        .iter()
        .filter(|(n, d)| n == "response.output_item.done" && d["item"]["type"] == "message")
        .map(|(_, d)| d["item"]["content"][0]["text"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        items, deltas,
        "output_item.done must carry the text: {text}"
    );
    resp
}

#[tokio::test]
async fn recorded_codex_requests_are_answered_on_a_chain() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    let http = client();
    let cases = [
        (
            "codex_request.json",
            &["custom", "tool_search", "web_search"][..],
        ),
        (
            "codex_request_fallback.json",
            &["namespace", "web_search"][..],
        ),
    ];
    for (file, dropped) in cases {
        let path = root().join("tests/fixtures").join(file);
        let mut body: Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        body["model"] = json!("chain");
        for stream in [false, true] {
            body["stream"] = json!(stream);
            let tag = format!("{file} stream={stream}");
            let req = http
                .post(w.gw.url("/v1/responses"))
                .bearer_auth(ALICE)
                .header("accept", "text/event-stream")
                .json(&body);
            let r = tokio::time::timeout(Duration::from_secs(30), send(req))
                .await
                .unwrap_or_else(|_| panic!("{tag}: no whole answer within 30 s"));
            assert_eq!(r.status, 200, "{tag}: {}", r.text);
            let header = r.header("x-conclave-dropped-tools").unwrap_or_default();
            for t in dropped {
                assert!(
                    header.contains(t),
                    "{tag}: want {t} in x-conclave-dropped-tools: {header:?}"
                );
            }
            let resp = if stream {
                assert_eq!(r.header("content-type"), Some("text/event-stream"), "{tag}");
                check_codex_stream(&r.text)
            } else {
                r.json()
            };
            assert_eq!(resp["status"], "completed", "{tag}: {resp}");
            assert_eq!(resp["output_text"], CAPITAL, "{tag}: {resp}");
            assert_eq!(resp["store"], false, "{tag}: {resp}");
        }
        // Upstream: the function tools as chat tools, the history as chat
        // messages ending with the tool call and its output.
        let asked = w.mock.asked("m-good").await;
        let last = asked.last().unwrap();
        let names: Vec<&str> = last["tools"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["function"]["name"].as_str().unwrap())
            .collect();
        assert!(names.contains(&"exec_command"), "{names:?}");
        assert!(
            !names.contains(&"apply_patch") && !names.contains(&"web_search"),
            "{names:?}"
        );
        let msgs = last["messages"].as_array().unwrap();
        let n = msgs.len();
        assert_eq!(
            msgs[n - 2]["tool_calls"][0]["function"]["name"],
            "exec_command",
            "{last}"
        );
        assert_eq!(msgs[n - 1]["role"], "tool", "{last}");
        assert_eq!(msgs[n - 1]["tool_call_id"], "call_1", "{last}");
    }
}

/// Runs `codex exec PROMPT` against `route`; its stdout.
fn codex_exec(w: &World, route: &str, prompt: &str) -> String {
    let ran = codex_run(w, route, prompt);
    assert!(
        ran.ok(),
        "codex exec on {route}: {}\n--- gateway log (tail)\n{}",
        ran.show(),
        tail(&w.gw.stderr(), 30)
    );
    ran.stdout
}

/// Runs `codex exec PROMPT` against `route` (no retries), within 90 s.
fn codex_run(w: &World, route: &str, prompt: &str) -> Ran {
    let codex = codex();
    // Not under /tmp: Codex refuses to put its helper binaries there.
    let home = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let work = home.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    std::fs::write(
        home.path().join("config.toml"),
        format!(
            "model = \"{route}\"\nmodel_provider = \"conclave\"\n\n[model_providers.conclave]\nname = \"conclave\"\nbase_url = \"{}\"\nwire_api = \"responses\"\nenv_key = \"CONCLAVE_TEST_KEY\"\nstream_max_retries = 0\nrequest_max_retries = 0\n",
            w.gw.v1()
        ),
    )
    .unwrap();
    run_bounded(
        Command::new(codex)
            // The sandbox needs user namespaces, which CI containers may
            // not have; the only command run is the mock's `echo`.
            .args([
                "exec",
                "--skip-git-repo-check",
                "--sandbox",
                "danger-full-access",
            ])
            .arg(prompt)
            .current_dir(&work)
            .env("CODEX_HOME", home.path())
            .env("CONCLAVE_TEST_KEY", ALICE)
            .env("NO_PROXY", "127.0.0.1,localhost"),
        Duration::from_secs(90),
    )
    .unwrap_or_else(|e| panic!("{e}"))
}

#[test]
fn codex_exec_completes_a_turn_through_the_gateway() {
    let w = world();
    let out = codex_exec(&w, "pass", "What is the capital of France?");
    assert_eq!(out.trim(), CAPITAL, "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn codex_exec_runs_a_tool_through_a_chain() {
    let w = tokio::task::spawn_blocking(world).await.unwrap();
    let out = tokio::task::block_in_place(|| codex_exec(&w, "chain", "Run the codex echo."));
    assert_eq!(out.trim(), CODEX_TOOL_OK, "{out}");
    // The command ran and its output went back as a tool message.
    let asked = w.mock.asked("m-good").await;
    let last = asked.last().unwrap();
    let tool = last["messages"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(tool["role"], "tool", "{last}");
    assert!(
        tool["content"].as_str().unwrap().contains("CODEX-TOOL-OK"),
        "{tool}"
    );
}

/// A stream that breaks: Codex gets `error` and `response.failed`, reports
/// the gateway's message and exits 1 at once (it waits for the body to
/// close after `response.failed`, up to its 300 s idle timeout).
#[test]
fn codex_exec_reports_a_broken_stream_at_once() {
    let w = world();
    let t = Instant::now();
    let ran = codex_run(&w, "cut", "Count to ten.");
    let took = t.elapsed();
    assert_eq!(ran.code, Some(1), "{}", ran.show());
    // Without it: Codex's 300 s idle timeout. Generous, for a busy machine.
    assert!(
        took < Duration::from_secs(60),
        "took {took:?}: {}",
        ran.show()
    );
    let said = ran
        .stderr
        .lines()
        .find(|l| l.starts_with("ERROR:"))
        .unwrap_or_default();
    assert!(
        said.contains("stream disconnected before completion")
            && !said.contains("closed before response.completed"),
        "want the gateway's message, not a bare disconnect: {}",
        ran.show()
    );
}
