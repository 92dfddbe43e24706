//! `strategy = "chain"`: escalation chains (verified local tiers,
//! self-certifying cloud tiers), plain fallback chains, pins, nesting,
//! streaming (keep-alives, verbatim replay, commit on the first chunk) and
//! the telemetry of an escalating request.
//!
//! Most behaviour is table-driven: each case builds its own standalone mock
//! and gateway, runs the same request whole and streamed (unless the case
//! is about one of them), and checks the status, who answered, the
//! `x-conclave-*` headers, the exhausted trail and which models the mock
//! was asked, in order.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

mod common;

use common::*;
use futures::StreamExt;
use serde_json::{Value, json};
use std::time::Duration;
use tokio::time::Instant;

// ---------------------------------------------------------------------------
// The simulated world: one standalone mock, reached through a local and a
// cloud upstream, plus upstreams with a tight timeout and a refused port.
// ---------------------------------------------------------------------------

/// Tier behaviours; each becomes two mock models, `l-NAME` (reached through
/// the local upstream) and `c-NAME` (through the cloud upstream). `{model}`
/// makes every answer say who wrote it; no answer echoes the request, so a
/// client seeing the verifier's feedback would be a leak.
const BEHAVIOURS: &[(&str, &str)] = &[
    (
        "good",
        r#"reply = { text = "GOOD answer from {model}" }
extra = { id = "chatcmpl-fixed", created = 1700000000 }"#,
    ),
    (
        "bad",
        r#"reply = { text = "BAD draft from {model}" }
extra = { id = "chatcmpl-fixed", created = 1700000000 }"#,
    ),
    (
        "meh",
        r#"reply = { text = "BAD draft, take two, from {model}" }"#,
    ),
    (
        "down",
        r#"status = 503
error_message = "simulated outage""#,
    ),
    ("err500", "status = 500"),
    (
        "limited",
        r#"status = 429
error_message = "slow down"
retry_after = 1"#,
    ),
    (
        "plain400",
        r#"status = 400
error_message = "invalid tool schema""#,
    ),
    (
        "ctxlen",
        r#"status = 400
error_message = "This model's maximum context length exceeded""#,
    ),
    ("garbage", r#"fail = "garbage""#),
    ("errevent", r#"fail = "error_event""#),
    (
        "cut",
        r#"reply = { text = "one two three four five six seven eight" }
tokens_per_second = 50
fail = "cut""#,
    ),
    (
        "slow",
        r#"reply = { text = "SLOW answer from {model}" }
ttft = "1s""#,
    ),
    ("hang", r#"fail = "hang""#),
    (
        "trickle",
        r#"reply = { text = "one two three four five six from {model}" }
tokens_per_second = 20"#,
    ),
];

/// The verifier: accepts unless the candidate is a draft.
const VERIFIER_RULES: &str = r#"
[[MODEL.rules]]
when_contains = "take two"
then = { reply = { json = { accept = false, feedback = "still too vague" } } }

[[MODEL.rules]]
when_contains = "BAD draft"
then = { reply = { json = { accept = false, feedback = "needs more detail" } } }
"#;

fn mock_toml() -> String {
    let mut t = String::from("[upstreams.sim]\nkind = \"mock\"\n\n");
    for (b, body) in BEHAVIOURS {
        for p in ["l", "c"] {
            t.push_str(&format!("[upstreams.sim.models.{p}-{b}]\n{body}\n\n"));
        }
    }
    let verifier = |name: &str, extra: &str| {
        format!(
            "[upstreams.sim.models.{name}]\nreply = {{ json = {{ accept = true, feedback = \"\" }} }}\n{extra}\n{}\n",
            VERIFIER_RULES.replace("MODEL", &format!("upstreams.sim.models.{name}"))
        )
    };
    t.push_str(&verifier("v", ""));
    t.push_str(&verifier("v-slow", "ttft = \"300ms\""));
    // Verdicts wrapped in prose and code fences, `accept` as a string.
    t.push_str(
        r#"
[upstreams.sim.models.v-prose]
reply = { text = "I checked it.\n```json\n{\"accept\": true, \"feedback\": \"\"}\n```\nLooks fine." }

[[upstreams.sim.models.v-prose.rules]]
when_contains = "BAD draft"
then = { reply = { text = "Verdict follows: {\"accept\": \"no\", \"feedback\": \"too vague\"} -- end" } }

[upstreams.sim.models.v-garbage]
reply = { text = "Looks good to me, ship it!" }

[upstreams.sim.models.v-caps]
reply = { text = "{\"Accept\": \"YES\"}" }

[upstreams.sim.models.v-down]
status = 503
error_message = "verifier overloaded"
"#,
    );
    t
}

/// A port nothing listens on (bound, noted, released).
fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

fn gateway_toml(mock_v1: &str, routes: &str) -> String {
    let dead = format!("http://127.0.0.1:{}/v1", closed_port());
    // (name, upstream, extra keys) of every model a route may name.
    let mut models: Vec<(String, &str, &str)> = Vec::new();
    for (b, _) in BEHAVIOURS {
        let (l, c) = if *b == "hang" {
            ("tightloc", "tight")
        } else {
            ("loc", "cld")
        };
        models.push((format!("l-{b}"), l, ""));
        models.push((format!("c-{b}"), c, ""));
    }
    if let Some(m) = models.iter_mut().find(|m| m.0 == "c-good") {
        m.2 = "price = { input_per_mtok = 3.0, output_per_mtok = 15.0 }\n";
    }
    models.push(("l-refused".into(), "deadloc", ""));
    models.push(("c-refused".into(), "dead", ""));
    for v in ["v", "v-slow", "v-prose", "v-garbage", "v-down", "v-caps"] {
        models.push((v.into(), "cld", ""));
    }
    models.push(("v-refused".into(), "dead", ""));
    models.push((
        "v-nojson".into(),
        "cld",
        "model = \"v\"\njson_mode = false\n",
    ));
    // Only what the routes use: every upstream costs the gateway an HTTP
    // client at start-up.
    models.retain(|(name, _, _)| routes.contains(&format!("\"{name}\"")));
    let upstreams = [
        ("loc", mock_v1, "lane = \"local\"\ntimeout = \"3s\""),
        ("cld", mock_v1, "timeout = \"3s\""),
        ("tightloc", mock_v1, "lane = \"local\"\ntimeout = \"300ms\""),
        ("tight", mock_v1, "timeout = \"300ms\""),
        ("deadloc", &dead, "lane = \"local\""),
        ("dead", &dead, ""),
    ];
    let mut t = String::from("[server]\nevent_log = \"{dir}/events.jsonl\"\n\n");
    for (name, url, extra) in upstreams {
        if models.iter().any(|m| m.1 == name) {
            t.push_str(&format!(
                "[upstreams.{name}]\nkind = \"openai\"\nbase_url = \"{url}\"\n{extra}\n\n"
            ));
        }
    }
    for (name, upstream, extra) in &models {
        t.push_str(&format!(
            "[models.{name}]\nupstream = \"{upstream}\"\n{extra}\n"
        ));
    }
    t.push_str(routes);
    t
}

/// `[routes.NAME]`, a chain over `tiers` with `verifier`, plus `extra` keys.
fn route(name: &str, tiers: &[&str], verifier: Option<&str>, extra: &str) -> String {
    let tiers: Vec<String> = tiers.iter().map(|t| format!("\"{t}\"")).collect();
    let mut t = format!(
        "[routes.{name}]\nstrategy = \"chain\"\ntiers = [{}]\n",
        tiers.join(", ")
    );
    if let Some(v) = verifier {
        t.push_str(&format!("verifier = \"{v}\"\n"));
    }
    t.push_str(extra);
    t.push_str("\n\n");
    t
}

/// The route `r` every table case asks for.
fn r(tiers: &[&str], verifier: Option<&str>, extra: &str) -> String {
    route("r", tiers, verifier, extra)
}

const BEST: &str = "on_exhausted = \"best_attempt\"";
const Q: &str = "What is the capital of France?";

/// A mock, a gateway in front of it, and one HTTP client for both (an
/// HTTP client costs tens of milliseconds to build in a debug build).
struct World {
    mock: Proc,
    gw: Proc,
    http: reqwest::Client,
}

async fn world(routes: &str) -> World {
    world_with(routes, client()).await
}

async fn world_with(routes: &str, http: reqwest::Client) -> World {
    let routes = routes.to_owned();
    tokio::task::spawn_blocking(move || {
        let mock = Proc::mock(&mock_toml());
        let gw = Proc::gateway(&gateway_toml(&mock.v1(), &routes));
        World { mock, gw, http }
    })
    .await
    .unwrap()
}

impl World {
    async fn send(&self, base: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
        post_via(&self.http, base, body.to_string(), headers).await
    }

    /// Asks the gateway.
    async fn ask(&self, body: &Value) -> Resp {
        self.send(&self.gw.base, body, &[]).await
    }

    /// Asks the mock directly.
    async fn direct(&self, body: &Value) -> Resp {
        self.send(&self.mock.base, body, &[]).await
    }

    /// What the mock received.
    async fn received(&self) -> Vec<Value> {
        let v = get_json(&self.http, &self.mock.url("/mock/requests")).await;
        v["requests"].as_array().cloned().unwrap_or_default()
    }

    /// The models the mock was asked for, in order.
    async fn calls(&self) -> Vec<String> {
        self.received()
            .await
            .iter()
            .map(|r| r["model"].as_str().unwrap_or("?").to_owned())
            .collect()
    }

    async fn clear(&self) {
        self.http
            .delete(self.mock.url("/mock/requests"))
            .send()
            .await
            .unwrap();
    }
}

/// The text a streamed answer spells out.
fn streamed_text(events: &[String]) -> String {
    events
        .iter()
        .filter(|e| e.as_str() != "[DONE]")
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| {
            v.pointer("/choices/0/delta/content")
                .and_then(Value::as_str)
                .map(str::to_owned)
        })
        .collect()
}

// ---------------------------------------------------------------------------
// The table runner.
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, PartialEq, Eq)]
enum Mode {
    Both,
    Whole,
    Stream,
}

enum Want {
    /// 200 answered by this concrete model, with `x-conclave-attempts` and
    /// whether `x-conclave-exhausted: true` is set.
    Served {
        by: &'static str,
        attempts: u32,
        exhausted: bool,
    },
    /// 502 `chain_exhausted` with this trail: (model, verdict, a substring
    /// of its feedback or error, "" for no check).
    Exhausted(Vec<(&'static str, &'static str, &'static str)>),
    /// An error answer before any output.
    Error { status: u16, code: &'static str },
    /// A stream that started (200) and ended in one SSE error event with
    /// this code, without `[DONE]`.
    Broke { code: &'static str },
}

struct Case {
    name: &'static str,
    routes: String,
    mode: Mode,
    pin: Option<&'static str>,
    calls: Vec<&'static str>,
    want: Want,
}

fn case(name: &'static str, routes: String, calls: &[&'static str], want: Want) -> Case {
    Case {
        name,
        routes,
        mode: Mode::Both,
        pin: None,
        calls: calls.to_vec(),
        want,
    }
}

impl Case {
    fn only(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    fn pin(mut self, model: &'static str) -> Self {
        self.pin = Some(model);
        self
    }
}

fn served(by: &'static str, attempts: u32) -> Want {
    Want::Served {
        by,
        attempts,
        exhausted: false,
    }
}

fn best(by: &'static str, attempts: u32) -> Want {
    Want::Served {
        by,
        attempts,
        exhausted: true,
    }
}

fn exhausted(trail: &[(&'static str, &'static str, &'static str)]) -> Want {
    Want::Exhausted(trail.to_vec())
}

const ESC: &str = "escalate";
const ERR: &str = "error";
const NEEDS: &str = "needs more detail";
const VAGUE: &str = "still too vague";

/// Runs one case in each of its modes; returns what did not match.
async fn run_case(c: &Case, http: reqwest::Client) -> Vec<String> {
    let w = world_with(&c.routes, http).await;
    let mut errs = Vec::new();
    let modes: &[bool] = match c.mode {
        Mode::Both => &[false, true],
        Mode::Whole => &[false],
        Mode::Stream => &[true],
    };
    for &stream in modes {
        let tag = format!("{} [{}]", c.name, if stream { "stream" } else { "whole" });
        w.clear().await;
        let body = if stream {
            chat_stream("r", Q)
        } else {
            chat("r", Q)
        };
        let headers: Vec<(&str, &str)> = c.pin.map(|p| ("x-conclave-pin", p)).into_iter().collect();
        let resp = w.send(&w.gw.base, &body, &headers).await;
        let mut fail = |what: String| {
            errs.push(format!(
                "{tag}: {what}\n    status {} headers {:?}\n    body {}",
                resp.status,
                resp.headers
                    .iter()
                    .filter(|(k, _)| k.as_str().starts_with("x-conclave"))
                    .collect::<Vec<_>>(),
                resp.text
            ))
        };
        match &c.want {
            Want::Served {
                by,
                attempts,
                exhausted,
            } => {
                if resp.status != 200 {
                    fail(format!("want 200 from {by}"));
                } else {
                    let text = if stream {
                        let ev = resp.data_events();
                        if ev.last().map(String::as_str) != Some("[DONE]") {
                            fail("the stream does not end with [DONE]".into());
                        }
                        if ev.iter().any(|e| e.contains("\"error\"")) {
                            fail("the stream carries an error event".into());
                        }
                        streamed_text(&ev)
                    } else {
                        resp.json()["choices"][0]["message"]["content"]
                            .as_str()
                            .unwrap_or_default()
                            .to_owned()
                    };
                    if !text.ends_with(&format!("from {by}")) {
                        fail(format!("want the answer of {by}, got {text:?}"));
                    }
                    if text.contains("rejected") || text.contains(NEEDS) {
                        fail("the verifier's feedback reached the client".into());
                    }
                    if resp.header("x-conclave-served-by") != Some(*by) {
                        fail(format!("want x-conclave-served-by: {by}"));
                    }
                    if resp.header("x-conclave-attempts") != Some(&attempts.to_string()) {
                        fail(format!("want x-conclave-attempts: {attempts}"));
                    }
                    let ex = resp.header("x-conclave-exhausted");
                    if *exhausted && ex != Some("true") {
                        fail("want x-conclave-exhausted: true".into());
                    }
                    if !*exhausted && ex.is_some() {
                        fail("want no x-conclave-exhausted".into());
                    }
                    if resp.header("x-conclave-strategy") != Some("chain") {
                        fail("want x-conclave-strategy: chain".into());
                    }
                    if resp.header("x-conclave-route") != Some("r") {
                        fail("want x-conclave-route: r".into());
                    }
                }
            }
            Want::Exhausted(trail) => {
                let v: Value = serde_json::from_str(&resp.text).unwrap_or(Value::Null);
                if resp.status != 502 || v["error"]["code"] != "chain_exhausted" {
                    fail("want 502 chain_exhausted".into());
                } else {
                    let got = v["error"]["attempts"]
                        .as_array()
                        .cloned()
                        .unwrap_or_default();
                    let got_short: Vec<(String, String)> = got
                        .iter()
                        .map(|a| {
                            (
                                a["model"].as_str().unwrap_or("?").to_owned(),
                                a["verdict"].as_str().unwrap_or("?").to_owned(),
                            )
                        })
                        .collect();
                    let want_short: Vec<(String, String)> = trail
                        .iter()
                        .map(|(m, v, _)| ((*m).to_owned(), (*v).to_owned()))
                        .collect();
                    if got_short != want_short {
                        fail(format!("want the trail {want_short:?}"));
                    } else {
                        for ((_, verdict, text), a) in trail.iter().zip(&got) {
                            let (key, absent) = if *verdict == ESC {
                                ("feedback", "error")
                            } else {
                                ("error", "feedback")
                            };
                            let s = a[key].as_str();
                            if s.is_none_or(|s| !s.contains(text)) {
                                fail(format!("want {key} containing {text:?} in {a}"));
                            }
                            if a.get(absent).is_some_and(|x| !x.is_null()) {
                                fail(format!("want no {absent} in {a}"));
                            }
                        }
                    }
                    if resp.text.contains("127.0.0.1") {
                        fail("the error leaks an internal URL".into());
                    }
                }
            }
            Want::Error { status, code } => {
                let v: Value = serde_json::from_str(&resp.text).unwrap_or(Value::Null);
                if resp.status != *status || v["error"]["code"] != *code {
                    fail(format!("want {status} with code {code}"));
                }
            }
            Want::Broke { code } => {
                let ev = resp.data_events();
                let last: Value = ev
                    .last()
                    .and_then(|e| serde_json::from_str(e).ok())
                    .unwrap_or(Value::Null);
                if resp.status != 200 {
                    fail("want 200 (the stream had started)".into());
                } else if ev.len() < 2 || last["error"]["code"] != *code {
                    fail(format!(
                        "want chunks and then one error event with code {code}"
                    ));
                } else if ev.iter().filter(|e| e.contains("\"error\"")).count() != 1
                    || resp.text.contains("[DONE]")
                {
                    fail("want exactly one error event and no [DONE]".into());
                }
            }
        }
        let got = w.calls().await;
        if got != c.calls {
            errs.push(format!(
                "{tag}: the mock was asked for {got:?}, want {:?}",
                c.calls
            ));
        }
    }
    errs
}

async fn run_table(cases: Vec<Case>) {
    let n = cases.len();
    let http = client();
    let errs: Vec<String> = futures::stream::iter(cases.iter())
        .map(|c| run_case(c, http.clone()))
        .buffer_unordered(8)
        .collect::<Vec<_>>()
        .await
        .into_iter()
        .flatten()
        .collect();
    assert!(
        errs.is_empty(),
        "{} of {n} cases failed:\n\n{}",
        errs.len(),
        errs.join("\n\n")
    );
}

// ---------------------------------------------------------------------------
// Tables.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn escalation_chains_of_one_tier() {
    let v = Some("v");
    run_table(vec![
        case(
            "1: local accepted",
            r(&["l-good"], v, ""),
            &["l-good", "v"],
            served("l-good", 2),
        ),
        case(
            "1: local rejected",
            r(&["l-bad"], v, ""),
            &["l-bad", "v"],
            exhausted(&[("l-bad", ESC, NEEDS)]),
        ),
        case(
            "1: local rejected, on_exhausted = error",
            r(&["l-bad"], v, "on_exhausted = \"error\""),
            &["l-bad", "v"],
            exhausted(&[("l-bad", ESC, NEEDS)]),
        ),
        case(
            "1: local rejected, best_attempt",
            r(&["l-bad"], v, BEST),
            &["l-bad", "v"],
            best("l-bad", 2),
        ),
        case(
            "1: local error",
            r(&["l-down"], v, ""),
            &["l-down"],
            exhausted(&[("l-down", ERR, "503")]),
        ),
        case(
            "1: local error, best_attempt has nothing to return",
            r(&["l-down"], v, BEST),
            &["l-down"],
            exhausted(&[("l-down", ERR, "simulated outage")]),
        ),
        case(
            "1: cloud self-certifies",
            r(&["c-bad"], v, ""),
            &["c-bad"],
            served("c-bad", 1),
        ),
        case(
            "1: cloud error",
            r(&["c-down"], v, ""),
            &["c-down"],
            exhausted(&[("c-down", ERR, "503")]),
        ),
        case(
            "1: self_certify overrides a local tier",
            r(&["l-bad"], v, "self_certify = [\"l-bad\"]"),
            &["l-bad"],
            served("l-bad", 1),
        ),
        case(
            "1: verify overrides a cloud tier",
            r(&["c-bad"], v, "verify = [\"c-bad\"]"),
            &["c-bad", "v"],
            exhausted(&[("c-bad", ESC, NEEDS)]),
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn escalation_chains_of_two_tiers() {
    let v = Some("v");
    run_table(vec![
        case(
            "2: accepted at once",
            r(&["l-good", "c-good"], v, ""),
            &["l-good", "v"],
            served("l-good", 2),
        ),
        case(
            "2: escalate, then cloud self-certifies",
            r(&["l-bad", "c-good"], v, ""),
            &["l-bad", "v", "c-good"],
            served("c-good", 3),
        ),
        case(
            "2: escalate, then accepted",
            r(&["l-bad", "l-good"], v, ""),
            &["l-bad", "v", "l-good", "v"],
            served("l-good", 4),
        ),
        case(
            "2: error, then accepted",
            r(&["l-down", "l-good"], v, ""),
            &["l-down", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: error, then cloud",
            r(&["l-down", "c-good"], v, ""),
            &["l-down", "c-good"],
            served("c-good", 2),
        ),
        case(
            "2: cloud first answers",
            r(&["c-good", "l-good"], v, ""),
            &["c-good"],
            served("c-good", 1),
        ),
        case(
            "2: escalate, escalate",
            r(&["l-bad", "l-meh"], v, ""),
            &["l-bad", "v", "l-meh", "v"],
            exhausted(&[("l-bad", ESC, NEEDS), ("l-meh", ESC, VAGUE)]),
        ),
        case(
            "2: escalate, escalate, best_attempt is the last",
            r(&["l-bad", "l-meh"], v, BEST),
            &["l-bad", "v", "l-meh", "v"],
            best("l-meh", 4),
        ),
        case(
            "2: escalate, error",
            r(&["l-bad", "l-down"], v, ""),
            &["l-bad", "v", "l-down"],
            exhausted(&[("l-bad", ESC, NEEDS), ("l-down", ERR, "503")]),
        ),
        case(
            "2: escalate, error, best_attempt is the rejected one",
            r(&["l-bad", "l-down"], v, BEST),
            &["l-bad", "v", "l-down"],
            best("l-bad", 3),
        ),
        case(
            "2: error, escalate, best_attempt",
            r(&["l-down", "l-bad"], v, BEST),
            &["l-down", "l-bad", "v"],
            best("l-bad", 3),
        ),
        case(
            "2: error, error",
            r(&["l-down", "c-down"], v, ""),
            &["l-down", "c-down"],
            exhausted(&[("l-down", ERR, "503"), ("c-down", ERR, "503")]),
        ),
        case(
            "2: escalate, then verified cloud tier rejected",
            r(&["l-bad", "c-bad"], v, "verify = [\"c-bad\"]"),
            &["l-bad", "v", "c-bad", "v"],
            exhausted(&[("l-bad", ESC, NEEDS), ("c-bad", ESC, NEEDS)]),
        ),
    ])
    .await;
}

/// Every kind of tier failure escalates at once, without a verifier call.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn tier_errors_escalate_without_asking_the_verifier() {
    let v = Some("v");
    run_table(vec![
        case(
            "2: refused connection, then accepted",
            r(&["l-refused", "l-good"], v, ""),
            &["l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: HTTP 500, then accepted",
            r(&["l-err500", "l-good"], v, ""),
            &["l-err500", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: HTTP 429, then accepted",
            r(&["l-limited", "l-good"], v, ""),
            &["l-limited", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: timeout, then accepted",
            r(&["l-hang", "l-good"], v, ""),
            &["l-hang", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: garbage, then accepted",
            r(&["l-garbage", "l-good"], v, ""),
            &["l-garbage", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: error event / 500, then accepted",
            r(&["l-errevent", "l-good"], v, ""),
            &["l-errevent", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "2: verified tier cut off, then cloud",
            r(&["l-cut", "c-good"], v, ""),
            &["l-cut", "c-good"],
            served("c-good", 2),
        ),
        case(
            "2: timeout trail",
            r(&["l-hang", "c-refused"], v, ""),
            &["l-hang"],
            exhausted(&[
                ("l-hang", ERR, "timed out"),
                ("c-refused", ERR, "unreachable"),
            ]),
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn escalation_chains_of_three_tiers() {
    let v = Some("v");
    run_table(vec![
        case(
            "3: escalate, accepted (the demo's review route)",
            r(&["l-bad", "l-good", "c-good"], v, ""),
            &["l-bad", "v", "l-good", "v"],
            served("l-good", 4),
        ),
        case(
            "3: escalate, escalate, cloud",
            r(&["l-bad", "l-meh", "c-good"], v, ""),
            &["l-bad", "v", "l-meh", "v", "c-good"],
            served("c-good", 5),
        ),
        case(
            "3: escalate, error, cloud",
            r(&["l-bad", "l-down", "c-good"], v, ""),
            &["l-bad", "v", "l-down", "c-good"],
            served("c-good", 4),
        ),
        case(
            "3: error, escalate, accepted",
            r(&["l-down", "l-bad", "l-good"], v, ""),
            &["l-down", "l-bad", "v", "l-good", "v"],
            served("l-good", 5),
        ),
        case(
            "3: accepted first, the rest untouched",
            r(&["l-good", "l-down", "c-good"], v, ""),
            &["l-good", "v"],
            served("l-good", 2),
        ),
        case(
            "3: error, cloud self-certifies before a local tier",
            r(&["c-down", "c-bad", "l-good"], v, ""),
            &["c-down", "c-bad"],
            served("c-bad", 2),
        ),
        case(
            "3: all rejected",
            r(&["l-bad", "l-meh", "c-bad"], v, "verify = [\"c-bad\"]"),
            &["l-bad", "v", "l-meh", "v", "c-bad", "v"],
            exhausted(&[
                ("l-bad", ESC, NEEDS),
                ("l-meh", ESC, VAGUE),
                ("c-bad", ESC, NEEDS),
            ]),
        ),
        case(
            "3: all rejected, best_attempt",
            r(
                &["l-bad", "l-meh", "c-bad"],
                v,
                "verify = [\"c-bad\"]\non_exhausted = \"best_attempt\"",
            ),
            &["l-bad", "v", "l-meh", "v", "c-bad", "v"],
            best("c-bad", 6),
        ),
        case(
            "3: all errors",
            r(&["l-down", "c-down", "c-refused"], v, ""),
            &["l-down", "c-down"],
            exhausted(&[
                ("l-down", ERR, "503"),
                ("c-down", ERR, "503"),
                ("c-refused", ERR, "refused"),
            ]),
        ),
        case(
            "3: escalate, error, escalate, best_attempt",
            r(&["l-bad", "c-down", "l-meh"], v, BEST),
            &["l-bad", "v", "c-down", "l-meh", "v"],
            best("l-meh", 5),
        ),
        case(
            "3: escalate, escalate, error, best_attempt",
            r(&["l-bad", "l-meh", "l-down"], v, BEST),
            &["l-bad", "v", "l-meh", "v", "l-down"],
            best("l-meh", 5),
        ),
        case(
            "3: escalate, escalate, error",
            r(&["l-bad", "l-meh", "l-down"], v, ""),
            &["l-bad", "v", "l-meh", "v", "l-down"],
            exhausted(&[
                ("l-bad", ESC, NEEDS),
                ("l-meh", ESC, VAGUE),
                ("l-down", ERR, "503"),
            ]),
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verifier_garbage_down_and_lenient_verdicts() {
    run_table(vec![
        case(
            "garbage verdict escalates",
            r(&["l-good", "c-good"], Some("v-garbage"), ""),
            &["l-good", "v-garbage", "c-good"],
            served("c-good", 3),
        ),
        case(
            "garbage verdict, exhausted",
            r(&["l-good"], Some("v-garbage"), ""),
            &["l-good", "v-garbage"],
            exhausted(&[("l-good", ESC, "could not be read")]),
        ),
        case(
            "garbage verdict, best_attempt",
            r(&["l-good"], Some("v-garbage"), BEST),
            &["l-good", "v-garbage"],
            best("l-good", 2),
        ),
        case(
            "verifier 503 escalates",
            r(&["l-good", "c-good"], Some("v-down"), ""),
            &["l-good", "v-down", "c-good"],
            served("c-good", 3),
        ),
        case(
            "verifier 503, exhausted",
            r(&["l-good"], Some("v-down"), ""),
            &["l-good", "v-down"],
            exhausted(&[("l-good", ESC, "verifier")]),
        ),
        case(
            "verifier refused escalates",
            r(&["l-good", "c-good"], Some("v-refused"), ""),
            &["l-good", "c-good"],
            served("c-good", 3),
        ),
        case(
            "verifier refused, two verified tiers",
            r(&["l-good", "l-bad"], Some("v-refused"), ""),
            &["l-good", "l-bad"],
            exhausted(&[("l-good", ESC, "verifier"), ("l-bad", ESC, "verifier")]),
        ),
        case(
            "fenced verdict in prose accepts",
            r(&["l-good", "c-good"], Some("v-prose"), ""),
            &["l-good", "v-prose"],
            served("l-good", 2),
        ),
        case(
            "string verdict \"no\" in prose rejects with its feedback",
            r(&["l-bad"], Some("v-prose"), ""),
            &["l-bad", "v-prose"],
            exhausted(&[("l-bad", ESC, "too vague")]),
        ),
        case(
            "string verdict \"no\", then cloud",
            r(&["l-bad", "c-good"], Some("v-prose"), ""),
            &["l-bad", "v-prose", "c-good"],
            served("c-good", 3),
        ),
        case(
            "verifier without json_mode still judges",
            r(&["l-bad", "l-good"], Some("v-nojson"), ""),
            &["l-bad", "v", "l-good", "v"],
            served("l-good", 4),
        ),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fallback_chains_fail_over_on_provider_errors_only() {
    run_table(vec![
        case(
            "503 falls over",
            r(&["c-down", "c-good"], None, ""),
            &["c-down", "c-good"],
            served("c-good", 2),
        ),
        case(
            "500 falls over",
            r(&["c-err500", "c-good"], None, ""),
            &["c-err500", "c-good"],
            served("c-good", 2),
        ),
        case(
            "429 falls over",
            r(&["c-limited", "c-good"], None, ""),
            &["c-limited", "c-good"],
            served("c-good", 2),
        ),
        case(
            "refused connection falls over",
            r(&["c-refused", "c-good"], None, ""),
            &["c-good"],
            served("c-good", 2),
        ),
        case(
            "timeout falls over",
            r(&["c-hang", "c-good"], None, ""),
            &["c-hang", "c-good"],
            served("c-good", 2),
        ),
        case(
            "context-length 400 falls over",
            r(&["c-ctxlen", "c-good"], None, ""),
            &["c-ctxlen", "c-good"],
            served("c-good", 2),
        ),
        case(
            "garbage falls over",
            r(&["c-garbage", "c-good"], None, ""),
            &["c-garbage", "c-good"],
            served("c-good", 2),
        ),
        case(
            "error event first (500 whole) falls over",
            r(&["c-errevent", "c-good"], None, ""),
            &["c-errevent", "c-good"],
            served("c-good", 2),
        ),
        case(
            "plain 400 is the client's",
            r(&["c-plain400", "c-good"], None, ""),
            &["c-plain400"],
            Want::Error {
                status: 400,
                code: "upstream_rejected_request",
            },
        ),
        case(
            "plain 400 after a 503 is the client's",
            r(&["c-down", "c-plain400", "c-good"], None, ""),
            &["c-down", "c-plain400"],
            Want::Error {
                status: 400,
                code: "upstream_rejected_request",
            },
        ),
        case(
            "1 tier, plain 400",
            r(&["c-plain400"], None, ""),
            &["c-plain400"],
            Want::Error {
                status: 400,
                code: "upstream_rejected_request",
            },
        ),
        case(
            "any answer is accepted",
            r(&["c-bad", "c-good"], None, ""),
            &["c-bad"],
            served("c-bad", 1),
        ),
        case(
            "local tiers are not verified without a verifier",
            r(&["l-bad", "c-good"], None, ""),
            &["l-bad"],
            served("l-bad", 1),
        ),
        case(
            "1 tier",
            r(&["c-good"], None, ""),
            &["c-good"],
            served("c-good", 1),
        ),
        case(
            "three errors",
            r(&["c-down", "c-limited", "c-refused"], None, ""),
            &["c-down", "c-limited"],
            exhausted(&[
                ("c-down", ERR, "503"),
                ("c-limited", ERR, "429"),
                ("c-refused", ERR, "refused"),
            ]),
        ),
        case(
            "three errors, best_attempt has nothing to return",
            r(&["c-err500", "c-hang", "c-ctxlen"], None, BEST),
            &["c-err500", "c-hang", "c-ctxlen"],
            exhausted(&[
                ("c-err500", ERR, "500"),
                ("c-hang", ERR, "timed out"),
                ("c-ctxlen", ERR, "context length"),
            ]),
        ),
    ])
    .await;
}

/// Streaming: a tier is committed only by its first chunk.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_fallback_commits_on_the_first_chunk() {
    let ttft = "ttft_timeout = \"150ms\"";
    run_table(vec![
        case(
            "stream: ttft_timeout falls over",
            r(&["c-slow", "c-good"], None, ttft),
            &["c-slow", "c-good"],
            served("c-good", 2),
        )
        .only(Mode::Stream),
        case(
            "stream: error event first, then ttft_timeout, fall over",
            r(&["c-errevent", "c-slow", "c-good"], None, ttft),
            &["c-errevent", "c-slow", "c-good"],
            served("c-good", 3),
        )
        .only(Mode::Stream),
        case(
            "stream: ttft_timeout of a self-certifying tier in a verified chain",
            r(&["c-slow", "c-good"], Some("v"), ttft),
            &["c-slow", "c-good"],
            served("c-good", 2),
        )
        .only(Mode::Stream),
        case(
            "stream: ttft_timeout on every tier",
            r(&["c-slow", "l-slow"], None, ttft),
            &["c-slow", "l-slow"],
            exhausted(&[("c-slow", ERR, "timed out"), ("l-slow", ERR, "timed out")]),
        )
        .only(Mode::Stream),
        case(
            "stream: cut after the first chunk is not undone",
            r(&["c-cut", "c-good"], None, ""),
            &["c-cut"],
            Want::Broke {
                code: "upstream_stream_cut",
            },
        )
        .only(Mode::Stream),
        case(
            "stream: cut of a self-certifying tier in a verified chain",
            r(&["c-cut", "c-good"], Some("v"), ""),
            &["c-cut"],
            Want::Broke {
                code: "upstream_stream_cut",
            },
        )
        .only(Mode::Stream),
        case(
            "whole: a cut-off body falls over",
            r(&["c-cut", "c-good"], None, ""),
            &["c-cut", "c-good"],
            served("c-good", 2),
        )
        .only(Mode::Whole),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pins_choose_one_tier_or_are_refused() {
    let v = Some("v");
    run_table(vec![
        case(
            "pin a rejected local tier: no verifier",
            r(&["l-bad", "c-good"], v, ""),
            &["l-bad"],
            served("l-bad", 1),
        )
        .pin("l-bad"),
        case(
            "pin the cloud tier",
            r(&["l-bad", "c-good"], v, ""),
            &["c-good"],
            served("c-good", 1),
        )
        .pin("c-good"),
        case(
            "pin the second local tier",
            r(&["l-bad", "l-good"], v, ""),
            &["l-good"],
            served("l-good", 1),
        )
        .pin("l-good"),
        case(
            "pin a failing tier: no escalation",
            r(&["l-down", "c-good"], v, ""),
            &["l-down"],
            Want::Error {
                status: 502,
                code: "upstream_error",
            },
        )
        .pin("l-down"),
        case(
            "pin a failing tier of a fallback chain",
            r(&["c-down", "c-good"], None, ""),
            &["c-down"],
            Want::Error {
                status: 502,
                code: "upstream_error",
            },
        )
        .pin("c-down"),
        case(
            "pin an unknown name",
            r(&["l-bad", "c-good"], v, ""),
            &[],
            Want::Error {
                status: 400,
                code: "invalid_request",
            },
        )
        .pin("nope"),
        case(
            "pin a model that is not a tier (the verifier)",
            r(&["l-bad", "c-good"], v, ""),
            &[],
            Want::Error {
                status: 400,
                code: "invalid_request",
            },
        )
        .pin("v"),
        case(
            "pin a tier of a nested chain, not of the route",
            r(&["inner", "c-good"], None, "") + &route("inner", &["l-bad", "l-good"], v, ""),
            &[],
            Want::Error {
                status: 400,
                code: "invalid_request",
            },
        )
        .pin("l-good"),
        case(
            "pin through a passthrough alias of the chain",
            "[routes.r]\nstrategy = \"passthrough\"\nmodel = \"inner\"\n\n".to_owned()
                + &route("inner", &["l-bad", "l-good"], v, ""),
            &["l-good"],
            served("l-good", 1),
        )
        .pin("l-good"),
    ])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_tier_that_aliases_a_local_model_is_verified() {
    run_table(vec![case(
        "alias of a local draft: verified, rejected, escalated",
        r(&["alias"], Some("v"), BEST)
            + "[routes.alias]\nstrategy = \"passthrough\"\nmodel = \"l-bad\"\n\n",
        &["l-bad", "v"],
        best("l-bad", 2),
    )])
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nested_chains_work_as_tiers() {
    let v = Some("v");
    run_table(vec![
        case(
            "inner escalation chain accepts",
            r(&["inner", "c-good"], None, "") + &route("inner", &["l-bad", "l-good"], v, ""),
            &["l-bad", "v", "l-good", "v"],
            served("l-good", 4),
        ),
        case(
            "inner chain exhausted: the outer chain falls over",
            r(&["inner", "c-good"], None, "") + &route("inner", &["l-bad"], v, ""),
            &["l-bad", "v", "c-good"],
            served("c-good", 3),
        ),
        case(
            "inner fallback chain exhausted: the outer chain falls over",
            r(&["inner", "c-good"], None, "") + &route("inner", &["l-down", "c-down"], None, ""),
            &["l-down", "c-down", "c-good"],
            served("c-good", 3),
        ),
        case(
            "outer verifier checks a nested chain listed in verify",
            r(&["inner", "c-good"], v, "verify = [\"inner\"]")
                + &route("inner", &["c-bad"], None, ""),
            &["c-bad", "v", "c-good"],
            served("c-good", 3),
        ),
        case(
            "a nested chain self-certifies in the outer chain",
            r(&["inner", "c-good"], v, "") + &route("inner", &["c-down", "l-bad"], None, ""),
            &["c-down", "l-bad"],
            served("l-bad", 2),
        ),
        case(
            "nested in nested",
            r(&["mid", "c-good"], None, "")
                + &route("mid", &["inner", "l-good"], v, "")
                + &route("inner", &["l-down"], None, ""),
            &["l-down", "l-good", "v"],
            served("l-good", 3),
        ),
        case(
            "everything exhausted",
            r(&["inner", "c-down"], None, "") + &route("inner", &["l-bad"], v, ""),
            &["l-bad", "v", "c-down"],
            exhausted(&[("inner", ERR, "inner"), ("c-down", ERR, "503")]),
        ),
    ])
    .await;
}

// ---------------------------------------------------------------------------
// What each tier and the verifier receive.
// ---------------------------------------------------------------------------

fn last_content(req: &Value) -> Value {
    req["body"]["messages"]
        .as_array()
        .and_then(|m| m.last())
        .map(|m| m["content"].clone())
        .unwrap_or(Value::Null)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn feedback_reaches_the_next_tier_and_never_the_client() {
    let w = world(
        &(r(&["l-bad", "l-meh", "c-good"], Some("v"), "")
            + &route("plain", &["l-good"], Some("v-nojson"), "")
            + &route("errfirst", &["l-down", "c-good"], Some("v"), "")
            + &route("unreadable", &["l-bad", "c-good"], Some("v-garbage"), "")
            + &route("vdown", &["l-bad", "c-good"], Some("v-down"), "")
            + &route("caps", &["l-bad", "c-good"], Some("v-caps"), "")
            + &route(
                "hasty",
                &["l-good", "c-good"],
                Some("v-slow"),
                "verifier_timeout = \"100ms\"",
            )),
    )
    .await;
    let original = json!([
        {"role": "system", "content": "Answer in French."},
        {"role": "user", "content": "Name a colour."}
    ]);
    for stream in [false, true] {
        w.clear().await;
        let body = json!({"model": "r", "messages": original, "stream": stream});
        let resp = w.ask(&body).await;
        assert_eq!(resp.status, 200, "{}", resp.text);
        assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
        assert!(!resp.text.contains("rejected"), "{}", resp.text);
        assert!(!resp.text.contains(NEEDS), "{}", resp.text);
        assert!(!resp.text.contains(VAGUE), "{}", resp.text);

        let got = w.received().await;
        let models: Vec<&str> = got.iter().map(|g| g["model"].as_str().unwrap()).collect();
        assert_eq!(models, ["l-bad", "v", "l-meh", "v", "c-good"]);

        // The first tier gets the conversation unchanged.
        assert_eq!(got[0]["body"]["messages"], original);
        assert_eq!(got[0]["body"]["stream"], json!(stream));
        // Later tiers: the notes so far, on the last user message.
        let note1 = format!("A previous attempt was rejected: {NEEDS}");
        let note2 = format!("A previous attempt was rejected: {VAGUE}");
        assert_eq!(
            got[2]["body"]["messages"],
            json!([
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": format!("Name a colour.\n\n{note1}")}
            ])
        );
        assert_eq!(
            got[4]["body"]["messages"],
            json!([
                {"role": "system", "content": "Answer in French."},
                {"role": "user", "content": format!("Name a colour.\n\n{note1}\n{note2}")}
            ])
        );
        // The verifier: the original conversation (system prompt included,
        // no notes), the candidate, JSON mode, not streamed.
        for (i, candidate) in [
            (1, "BAD draft from l-bad"),
            (3, "BAD draft, take two, from l-meh"),
        ] {
            let vb = &got[i]["body"];
            assert_eq!(vb["response_format"], json!({"type": "json_object"}));
            assert_eq!(vb["max_tokens"], 256, "the verifier call is capped");
            assert!(vb.get("stream").is_none_or(|s| s != true), "{vb}");
            let msgs = vb["messages"].as_array().unwrap();
            assert_eq!(msgs[0]["role"], "system");
            let text = msgs
                .iter()
                .map(|m| m["content"].as_str().unwrap_or_default())
                .collect::<Vec<_>>()
                .join("\n");
            assert!(text.contains("Answer in French."), "{text}");
            assert!(text.contains("Name a colour."), "{text}");
            assert!(text.contains(candidate), "{text}");
            assert!(!text.contains("previous attempt"), "{text}");
        }
    }

    // A tier that failed leaves no note: there is no feedback to pass on.
    w.clear().await;
    let body = json!({"model": "errfirst", "messages": original});
    let resp = w.ask(&body).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    let got = w.received().await;
    assert_eq!(got[1]["model"], "c-good");
    assert_eq!(got[1]["body"]["messages"], original);

    // json_mode = false: no response_format for the verifier.
    // (Below.) First: a verifier that fails or cannot be read leaves no
    // note either: conclave's own words never reach a model.
    for route in ["unreadable", "vdown"] {
        w.clear().await;
        let resp = w.ask(&json!({"model": route, "messages": original})).await;
        assert_eq!(resp.status, 200, "{}", resp.text);
        assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
        let got = w.received().await;
        assert_eq!(got[2]["model"], "c-good", "{got:?}");
        assert_eq!(got[2]["body"]["messages"], original, "{route}");
    }

    // A verdict in another case and wording is still read.
    w.clear().await;
    let resp = w.ask(&chat("caps", "hi")).await;
    assert_eq!(
        resp.header("x-conclave-served-by"),
        Some("l-bad"),
        "{}",
        resp.text
    );

    // A verifier slower than verifier_timeout counts as failed: escalate.
    let resp = w.ask(&chat("hasty", "hi")).await;
    assert_eq!(
        resp.header("x-conclave-served-by"),
        Some("c-good"),
        "{}",
        resp.text
    );

    w.clear().await;
    let resp = w.ask(&chat("plain", "hi")).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    let got = w.received().await;
    assert_eq!(got[1]["model"], "v");
    assert!(
        got[1]["body"].get("response_format").is_none(),
        "{}",
        got[1]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn feedback_after_a_tool_message_or_content_parts() {
    let w = world(&r(&["l-bad", "c-good"], Some("v"), "")).await;
    let note = format!("A previous attempt was rejected: {NEEDS}");

    // The last message is a tool result: the note is a new user message.
    let convo = json!([
        {"role": "user", "content": "What is 6*7?"},
        {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function", "function": {"name": "calc", "arguments": "{\"x\":\"6*7\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "42"}
    ]);
    let resp = w.ask(&json!({"model": "r", "messages": convo})).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    let got = w.received().await;
    assert_eq!(got[0]["body"]["messages"], convo);
    let verifier_text = got[1]["body"]["messages"][1]["content"]
        .as_str()
        .unwrap_or_default();
    assert!(verifier_text.contains("calc"), "{verifier_text}");
    assert!(verifier_text.contains("42"), "{verifier_text}");
    let mut want = convo.as_array().unwrap().clone();
    want.push(json!({"role": "user", "content": note}));
    assert_eq!(got[2]["body"]["messages"], Value::Array(want));

    // Content parts: the note is one more text part.
    w.clear().await;
    let parts = json!([{"role": "user", "content": [{"type": "text", "text": "Hi"}]}]);
    let resp = w.ask(&json!({"model": "r", "messages": parts})).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    let got = w.received().await;
    assert_eq!(
        last_content(&got[2]),
        json!([{"type": "text", "text": "Hi"}, {"type": "text", "text": note}])
    );
}

// ---------------------------------------------------------------------------
// Streaming a verified chain: keep-alives, then a verbatim replay.
// ---------------------------------------------------------------------------

/// The keep-alive comments before the first `data:` event, and whether any
/// come after it.
fn keepalives(text: &str) -> (usize, bool) {
    let first = text.find("data:").unwrap_or(text.len());
    (
        text[..first].matches(": keep-alive\n\n").count(),
        text[first..].contains("keep-alive"),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_verified_answer_is_replayed_verbatim_after_keepalives() {
    let ka = "keepalive = \"100ms\"";
    let w = world(
        &(r(&["l-good"], Some("v-slow"), ka)
            + &route("esc", &["l-bad", "c-good"], Some("v-slow"), ka)),
    )
    .await;

    for include_usage in [true, false] {
        w.clear().await;
        let mut body = chat_stream("r", "tell me a story about a quiet harbour");
        if include_usage {
            body["stream_options"] = json!({"include_usage": true});
        }
        let started = Instant::now();
        let resp = w.ask(&body).await;
        assert!(started.elapsed() < Duration::from_secs(2));
        assert_eq!(resp.status, 200, "{}", resp.text);
        assert_eq!(resp.header("content-type"), Some("text/event-stream"));
        assert_eq!(resp.header("x-conclave-strategy"), Some("chain"));
        let (before, after) = keepalives(&resp.text);
        assert!(
            before >= 2,
            "want keep-alives while the verifier works:\n{}",
            resp.text
        );
        assert!(
            !after,
            "keep-alive after the replay started:\n{}",
            resp.text
        );

        // The replay is the tier's own stream, event for event: ask the mock
        // again with exactly what the tier was asked.
        let got = w.received().await;
        assert_eq!(w.calls().await, ["l-good", "v-slow"]);
        let mut tier_req = got[0]["body"].clone();
        assert_eq!(tier_req["stream_options"]["include_usage"], true);
        if !include_usage {
            tier_req.as_object_mut().unwrap().remove("stream_options");
        }
        let direct = w.direct(&tier_req).await;
        assert_eq!(resp.data_events(), direct.data_events());
        assert!(resp.data_events().len() >= 5, "{}", resp.text);
        assert_eq!(
            streamed_text(&resp.data_events()),
            "GOOD answer from l-good"
        );
        assert_eq!(resp.text.contains("\"usage\""), include_usage);
        // The headers went out before anyone answered: who did comes as
        // a comment just before [DONE].
        assert!(resp.header("x-conclave-served-by").is_none());
        assert!(
            resp.text.ends_with(
                ": x-conclave-served-by: l-good\n: x-conclave-attempts: 2\n\ndata: [DONE]\n\n"
            ),
            "{}",
            resp.text
        );
    }

    // Escalated past the verified tier: keep-alives while judging, then the
    // self-certifying cloud tier streams live, its own events unchanged.
    w.clear().await;
    let mut body = chat_stream("esc", "hello");
    body["stream_options"] = json!({"include_usage": true});
    let resp = w.ask(&body).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert!(keepalives(&resp.text).0 >= 2, "{}", resp.text);
    assert_eq!(w.calls().await, ["l-bad", "v-slow", "c-good"]);
    let tier_req = w.received().await[2]["body"].clone();
    let direct = w.direct(&tier_req).await;
    assert_eq!(resp.data_events(), direct.data_events());
    assert!(!resp.text.contains(NEEDS), "{}", resp.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn streamed_chain_exhausted_after_keepalives_ends_in_one_error_event() {
    let ka = "keepalive = \"100ms\"";
    let w = world(
        &(r(&["l-bad"], Some("v-slow"), ka)
            + &route("best", &["l-bad"], Some("v-slow"), &format!("{ka}\n{BEST}"))),
    )
    .await;

    let resp = w.ask(&chat_stream("r", "hi")).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert!(keepalives(&resp.text).0 >= 2, "{}", resp.text);
    let events = resp.data_events();
    assert_eq!(events.len(), 1, "{}", resp.text);
    let err: Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(err["error"]["code"], "chain_exhausted");
    assert_eq!(err["error"]["attempts"][0]["model"], "l-bad");
    assert_eq!(err["error"]["attempts"][0]["verdict"], "escalate");
    assert_eq!(err["error"]["attempts"][0]["feedback"], NEEDS);
    assert!(!resp.text.contains("[DONE]"));

    // best_attempt: the rejected answer is replayed after the keep-alives.
    w.clear().await;
    let mut body = chat_stream("best", "hi");
    body["stream_options"] = json!({"include_usage": true});
    let resp = w.ask(&body).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert!(keepalives(&resp.text).0 >= 2, "{}", resp.text);
    let tier_req = w.received().await[0]["body"].clone();
    let direct = w.direct(&tier_req).await;
    assert_eq!(resp.data_events(), direct.data_events());
    assert!(
        resp.text.contains(": x-conclave-exhausted: true\n"),
        "{}",
        resp.text
    );
}

/// When, after the request was sent, the first `data:` event and the
/// `[DONE]` arrived, reading the body as it comes.
async fn data_timing(w: &World, body: &Value) -> (u16, Duration, Duration, String) {
    let started = Instant::now();
    let mut r = w
        .http
        .post(w.gw.url("/v1/chat/completions"))
        .json(body)
        .send()
        .await
        .unwrap();
    let status = r.status().as_u16();
    let mut text = String::new();
    let (mut first, mut done) = (None, None);
    while let Some(chunk) = r.chunk().await.unwrap() {
        text.push_str(&String::from_utf8_lossy(&chunk));
        if first.is_none() && text.contains("data: ") {
            first = Some(started.elapsed());
        }
        if done.is_none() && text.contains("data: [DONE]") {
            done = Some(started.elapsed());
        }
    }
    let end = started.elapsed();
    (status, first.unwrap_or(end), done.unwrap_or(end), text)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn verified_streams_are_held_back_and_self_certified_streams_are_live() {
    // c-trickle / l-trickle: 8 tokens at 20 per second, about 350 ms.
    let w = world(
        &(route("held", &["l-trickle"], Some("v"), "")
            + &route("esc", &["l-bad", "c-trickle"], Some("v"), "")
            + &route("fb", &["c-down", "c-trickle"], None, "")),
    )
    .await;

    // Verified: nothing until the whole answer is in and accepted, then the
    // replay at once.
    let (status, first, done, text) = data_timing(&w, &chat_stream("held", "hi")).await;
    assert_eq!(status, 200, "{text}");
    assert_eq!(
        streamed_text(&sse_data(&text)),
        "one two three four five six from l-trickle"
    );
    assert!(
        first >= Duration::from_millis(300),
        "first data after {first:?}"
    );
    assert!(
        done - first < Duration::from_millis(200),
        "the replay took {:?}",
        done - first
    );

    // Self-certifying after an escalation, and a fallback tier: live.
    for route in ["esc", "fb"] {
        let (status, first, done, text) = data_timing(&w, &chat_stream(route, "hi")).await;
        assert_eq!(status, 200, "{text}");
        assert_eq!(
            streamed_text(&sse_data(&text)),
            "one two three four five six from c-trickle"
        );
        assert!(
            done - first >= Duration::from_millis(250),
            "{route}: the answer was not streamed live (first data {first:?}, [DONE] {done:?})"
        );
    }
}

/// A chain nested as a tier verifies its own tiers; a streamed request
/// waiting on that verification gets keep-alives like any other.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn nested_verifying_chain_sends_keepalives_while_it_verifies() {
    let w = world(
        &(r(&["inner", "c-good"], None, "")
            + &route(
                "inner",
                &["l-good"],
                Some("v-slow"),
                "keepalive = \"100ms\"",
            )),
    )
    .await;
    let resp = w.ask(&chat_stream("r", "hi")).await;
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert_eq!(
        streamed_text(&resp.data_events()),
        "GOOD answer from l-good"
    );
    assert_eq!(w.calls().await, ["l-good", "v-slow"]);
    let (before, after) = keepalives(&resp.text);
    assert!(
        before >= 2,
        "no keep-alives while the nested chain's verifier (300 ms) worked:\n{}",
        resp.text
    );
    assert!(!after, "{}", resp.text);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn ttft_timeout_abandons_the_slow_tier() {
    let w = world(&r(&["c-slow", "c-good"], None, "ttft_timeout = \"150ms\"")).await;
    let started = Instant::now();
    let resp = w.ask(&chat_stream("r", "hi")).await;
    let took = started.elapsed();
    assert_eq!(resp.status, 200, "{}", resp.text);
    assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
    assert!(
        took < Duration::from_millis(800),
        "took {took:?}: the slow tier was waited for"
    );
    // The slow tier's answer was abandoned, not left running.
    let mock = &w.mock;
    assert!(
        eventually(2, || async { mock.stats().await["cancelled"] == 1 }).await,
        "{}",
        mock.stats().await
    );
}

// ---------------------------------------------------------------------------
// Telemetry of an escalating request.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn event_log_and_metrics_record_every_tier_and_verifier_call() {
    let w = world(
        &(route("review", &["l-down", "l-bad", "c-good"], Some("v"), "")
            + &route("streamed", &["l-down", "l-bad", "c-good"], Some("v"), "")
            + &route("unsure", &["l-good", "c-good"], Some("v-garbage"), "")
            + &route("novote", &["l-good", "c-good"], Some("v-down"), "")),
    )
    .await;
    let gw = &w.gw;

    let resp = w.ask(&chat("review", Q)).await;
    assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
    assert_eq!(resp.header("x-conclave-attempts"), Some("4"));
    let id = resp.header("x-request-id").unwrap().to_owned();
    let unsure = w.ask(&chat("unsure", Q)).await;
    let novote = w.ask(&chat("novote", Q)).await;
    let streamed = w.ask(&chat_stream("streamed", Q)).await;
    assert_eq!(streamed.header("x-conclave-attempts"), Some("4"));

    let events = gw.events(14).await;
    let of = |rid: &str| {
        let mut v: Vec<Value> = events
            .iter()
            .filter(|e| e["request_id"] == rid)
            .cloned()
            .collect();
        v.sort_by_key(|e| e["attempt"].as_u64());
        v
    };
    let review = of(&id);
    assert_eq!(review.len(), 4, "{review:#?}");
    let fields = [
        "attempt",
        "model",
        "upstream",
        "role",
        "duration_ms",
        "ttft_ms",
        "warm_start",
        "verdict",
        "feedback",
        "error",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "output_summary",
    ];
    for e in &review {
        assert_eq!(e["event"], "attempt", "{e}");
        assert_eq!(e["route"], "review", "{e}");
        for f in fields {
            assert!(e.get(f).is_some(), "no {f} in {e}");
        }
        assert!(e["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{e}");
    }
    let short: Vec<(u64, &str, &str, &str, &str)> = review
        .iter()
        .map(|e| {
            (
                e["attempt"].as_u64().unwrap(),
                e["model"].as_str().unwrap(),
                e["upstream"].as_str().unwrap(),
                e["role"].as_str().unwrap(),
                e["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        short,
        [
            (1, "l-down", "loc", "tier", "error"),
            (2, "l-bad", "loc", "tier", "escalate"),
            (3, "v", "cld", "verifier", "escalate"),
            (4, "c-good", "cld", "tier", "accept"),
        ]
    );
    assert!(
        review[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("503")),
        "{}",
        review[0]
    );
    assert_eq!(review[1]["feedback"], NEEDS);
    assert_eq!(review[1]["output_summary"], "BAD draft from l-bad");
    assert!(
        review[1]["input_tokens"].as_u64().is_some(),
        "{}",
        review[1]
    );
    assert_eq!(review[1]["output_tokens"], 4);
    assert_eq!(review[2]["feedback"], NEEDS);
    assert!(
        review[2]["output_summary"]
            .as_str()
            .is_some_and(|s| s.contains("accept")),
        "{}",
        review[2]
    );
    assert_eq!(review[3]["feedback"], Value::Null);
    assert_eq!(review[3]["error"], Value::Null);
    assert_eq!(review[3]["output_summary"], "GOOD answer from c-good");
    // c-good is priced at $3 / $15 per million tokens.
    let (inp, out) = (
        review[3]["input_tokens"].as_f64().unwrap(),
        review[3]["output_tokens"].as_f64().unwrap(),
    );
    assert_eq!(out, 4.0);
    let cost = review[3]["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (inp * 3.0 + out * 15.0) / 1e6).abs() < 1e-12,
        "{}",
        review[3]
    );
    // Whole answers have no first token; streamed tiers do.
    assert!(review.iter().all(|e| e["ttft_ms"].is_null()), "{review:#?}");
    let streamed = of(streamed.header("x-request-id").unwrap());
    let short: Vec<(&str, &str, &str, bool)> = streamed
        .iter()
        .map(|e| {
            (
                e["model"].as_str().unwrap(),
                e["role"].as_str().unwrap(),
                e["verdict"].as_str().unwrap(),
                e["ttft_ms"].as_f64().is_some(),
            )
        })
        .collect();
    assert_eq!(
        short,
        [
            ("l-down", "tier", "error", false),
            ("l-bad", "tier", "escalate", true),
            ("v", "verifier", "escalate", false),
            ("c-good", "tier", "accept", true),
        ],
        "{streamed:#?}"
    );
    assert_eq!(streamed[1]["output_summary"], "BAD draft from l-bad");
    assert_eq!(streamed[3]["output_tokens"], 4);

    // An unreadable verdict and a failed verifier: the tier escalates, the
    // verifier's own attempt is an error.
    for (resp, verifier) in [(&unsure, "v-garbage"), (&novote, "v-down")] {
        assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
        let rid = resp.header("x-request-id").unwrap();
        let evs = of(rid);
        let short: Vec<(&str, &str, &str)> = evs
            .iter()
            .map(|e| {
                (
                    e["model"].as_str().unwrap(),
                    e["role"].as_str().unwrap(),
                    e["verdict"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            short,
            [
                ("l-good", "tier", "escalate"),
                (verifier, "verifier", "error"),
                ("c-good", "tier", "accept"),
            ],
            "{evs:#?}"
        );
        assert!(evs[0]["feedback"].as_str().is_some(), "{}", evs[0]);
    }

    // Metrics: one counter per call, labelled with what happened.
    let want = [
        ("review", "l-down", "loc", "tier", "error"),
        ("review", "l-bad", "loc", "tier", "escalate"),
        ("review", "v", "cld", "verifier", "escalate"),
        ("review", "c-good", "cld", "tier", "accept"),
        ("unsure", "l-good", "loc", "tier", "escalate"),
        ("unsure", "v-garbage", "cld", "verifier", "error"),
        ("novote", "v-down", "cld", "verifier", "error"),
        ("novote", "c-good", "cld", "tier", "accept"),
    ];
    let lines: Vec<String> = want
        .iter()
        .map(|(route, model, up, role, verdict)| {
            format!(
                "conclave_attempts_total{{route=\"{route}\",strategy=\"chain\",model=\"{model}\",upstream=\"{up}\",role=\"{role}\",verdict=\"{verdict}\",warm=\"unknown\"}} 1"
            )
        })
        .collect();
    let ok = eventually(2, || async {
        let m = gw.metrics().await;
        lines.iter().all(|l| m.lines().any(|x| x == l))
    })
    .await;
    let m = gw.metrics().await;
    let missing: Vec<&String> = lines
        .iter()
        .filter(|l| !m.lines().any(|x| x == l.as_str()))
        .collect();
    assert!(
        ok,
        "missing {missing:#?} in\n{}",
        m.lines()
            .filter(|l| l.starts_with("conclave_attempts_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        m.contains(r#"conclave_requests_total{route="review",strategy="chain",status="200"} 1"#),
        "{m}"
    );
}
