//! The simulated world of the chain tests, and their table runner: one
//! standalone mock reached through local, cloud, tight-timeout and refused
//! upstreams; a `Case` table that runs each request whole and streamed and
//! checks status, who answered, headers, the exhausted trail and the calls
//! the mock saw. Strategy suites after the chain reuse it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use futures::StreamExt;
use serde_json::Value;

use super::*;

// ---------------------------------------------------------------------------
// The simulated world: one standalone mock, reached through a local and a
// cloud upstream, plus upstreams with a tight timeout and a refused port.
// ---------------------------------------------------------------------------

/// Tier behaviours; each becomes two mock models, `l-NAME` (reached through
/// the local upstream) and `c-NAME` (through the cloud upstream). `{model}`
/// makes every answer say who wrote it; no answer echoes the request, so a
/// client seeing the verifier's feedback would be a leak.
pub const BEHAVIOURS: &[(&str, &str)] = &[
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
pub const VERIFIER_RULES: &str = r#"
[[MODEL.rules]]
when_contains = "take two"
then = { reply = { json = { accept = false, feedback = "still too vague" } } }

[[MODEL.rules]]
when_contains = "BAD draft"
then = { reply = { json = { accept = false, feedback = "needs more detail" } } }
"#;

pub fn mock_toml() -> String {
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
pub fn closed_port() -> u16 {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap().port()
}

pub fn gateway_toml(mock_v1: &str, routes: &str) -> String {
    world_toml(routes, &|name, extra| {
        format!("[upstreams.{name}]\nkind = \"openai\"\nbase_url = \"{mock_v1}\"\n{extra}\n\n")
    })
}

/// [`gateway_toml`] for an in-process gateway ([`inproc::Gw`]): each
/// upstream that reaches the mock is a `kind = "mock"` upstream with every
/// model of [`mock_toml`] (so its simulator's waits are tokio timers that
/// paused time drives exactly; `gw.sim(NAME)` is upstream NAME's), the
/// refused ones still a closed port.
pub fn inproc_toml(routes: &str) -> String {
    let sim = mock_toml();
    let models = sim
        .split_once('\n')
        .map_or("", |(_, rest)| rest)
        .trim_start_matches("kind = \"mock\"\n");
    world_toml(routes, &|name, extra| {
        format!(
            "[upstreams.{name}]\nkind = \"mock\"\n{extra}\n\n{}",
            models.replace("[upstreams.sim.", &format!("[upstreams.{name}."))
        )
    })
}

/// The world's config: `upstream(name, keys)` writes each upstream that
/// reaches the mock.
fn world_toml(routes: &str, upstream: &dyn Fn(&str, &str) -> String) -> String {
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
    // (name, reaches the mock, keys)
    let upstreams = [
        ("loc", true, "lane = \"local\"\ntimeout = \"3s\""),
        ("cld", true, "timeout = \"3s\""),
        ("tightloc", true, "lane = \"local\"\ntimeout = \"300ms\""),
        ("tight", true, "timeout = \"300ms\""),
        ("deadloc", false, "lane = \"local\""),
        ("dead", false, ""),
    ];
    let mut t = String::from("[server]\nevent_log = \"{dir}/events.jsonl\"\n\n");
    for (name, mock, extra) in upstreams {
        if models.iter().any(|m| m.1 == name) {
            // The tables count each tier's and verifier's calls: no
            // upstream retries here (tests/it/retries.rs has those).
            let extra = format!("retries = {{ max = 0 }}\n{extra}");
            t.push_str(&if mock {
                upstream(name, &extra)
            } else {
                format!("[upstreams.{name}]\nkind = \"openai\"\nbase_url = \"{dead}\"\n{extra}\n\n")
            });
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
pub fn route(name: &str, tiers: &[&str], verifier: Option<&str>, extra: &str) -> String {
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
pub fn r(tiers: &[&str], verifier: Option<&str>, extra: &str) -> String {
    route("r", tiers, verifier, extra)
}

pub const BEST: &str = "on_exhausted = \"best_attempt\"";
pub const Q: &str = "What is the capital of France?";

/// A mock, a gateway in front of it, and one HTTP client for both (an
/// HTTP client costs tens of milliseconds to build in a debug build).
pub struct World {
    pub mock: Srv,
    pub gw: Srv,
    pub http: reqwest::Client,
}

pub async fn world(routes: &str) -> World {
    world_with(routes, client()).await
}

pub async fn world_with(routes: &str, http: reqwest::Client) -> World {
    let routes = routes.to_owned();
    tokio::task::spawn_blocking(move || {
        let mock = Srv::mock(&mock_toml());
        let gw = Srv::gateway(&gateway_toml(&mock.v1(), &routes));
        World { mock, gw, http }
    })
    .await
    .unwrap()
}

impl World {
    pub async fn send(&self, base: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
        post_via(&self.http, base, body.to_string(), headers).await
    }

    /// Asks the gateway.
    pub async fn ask(&self, body: &Value) -> Resp {
        self.send(&self.gw.base, body, &[]).await
    }

    /// Asks the mock directly.
    pub async fn direct(&self, body: &Value) -> Resp {
        self.send(&self.mock.base, body, &[]).await
    }

    /// What the mock received.
    pub async fn received(&self) -> Vec<Value> {
        let v = get_json(&self.http, &self.mock.url("/mock/requests")).await;
        v["requests"].as_array().cloned().unwrap_or_default()
    }

    /// The models the mock was asked for, in order.
    pub async fn calls(&self) -> Vec<String> {
        self.received()
            .await
            .iter()
            .map(|r| r["model"].as_str().unwrap_or("?").to_owned())
            .collect()
    }

    pub async fn clear(&self) {
        self.http
            .delete(self.mock.url("/mock/requests"))
            .send()
            .await
            .unwrap();
    }
}

/// The text a streamed answer spells out.
pub fn streamed_text(events: &[String]) -> String {
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
pub enum Mode {
    Both,
    Whole,
    Stream,
}

pub enum Want {
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

pub struct Case {
    pub name: &'static str,
    pub routes: String,
    pub mode: Mode,
    pub pin: Option<&'static str>,
    pub calls: Vec<&'static str>,
    pub want: Want,
}

pub fn case(name: &'static str, routes: String, calls: &[&'static str], want: Want) -> Case {
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
    pub fn only(mut self, mode: Mode) -> Self {
        self.mode = mode;
        self
    }
    pub fn pin(mut self, model: &'static str) -> Self {
        self.pin = Some(model);
        self
    }
}

pub fn served(by: &'static str, attempts: u32) -> Want {
    Want::Served {
        by,
        attempts,
        exhausted: false,
    }
}

pub fn best(by: &'static str, attempts: u32) -> Want {
    Want::Served {
        by,
        attempts,
        exhausted: true,
    }
}

pub fn exhausted(trail: &[(&'static str, &'static str, &'static str)]) -> Want {
    Want::Exhausted(trail.to_vec())
}

pub const ESC: &str = "escalate";
pub const ERR: &str = "error";
pub const NEEDS: &str = "needs more detail";
pub const VAGUE: &str = "still too vague";

/// Runs one case in each of its modes; returns what did not match.
pub async fn run_case(c: &Case, http: reqwest::Client) -> Vec<String> {
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

pub async fn run_table(cases: Vec<Case>) {
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
