//! One admission point, path by path: every endpoint × every route kind
//! (a concrete model, a passthrough route, a route of each strategy) ×
//! every upstream dialect (one that speaks the Responses API natively,
//! an Anthropic one, a plain OpenAI one). On each path a key whose budget
//! is too small, or whose `rpm` is spent, is refused before any upstream
//! is reached, and a cap that is not a positive integer is a 400 naming
//! it, in the dialect's own shape, with no upstream call. A path that is
//! not served (completions or embeddings on a strategy route) is a 400
//! with no upstream call too. In-process, on paused time.
//!
//! Then, black-box against an upstream that bills like a real provider
//! (tests/it/common/billing.rs), bodies forwarded verbatim hold their
//! budget: 100 concurrent requests carrying ~30 KB of tools, of a
//! `text.format` schema or of encrypted reasoning spend at most 1.5× a
//! 2,000-token daily budget.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::atomic::Ordering;
use std::time::Duration;

use common::*;
use conclave::wire::Endpoint as Wire;
use serde_json::{Value, json};

/// The upstreams: one per dialect, each with three models.
const FLAVOURS: [&str; 3] = ["resp", "anth", "plain"];

/// The gateway's endpoints that reach a model, as this test names them
/// (the gateway's own are values, [`Wire`]). The match in [`anthropic`]
/// has no wildcard, and [`every_endpoint_is_covered`] fails for an
/// endpoint added to the gateway until this table covers it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Endpoint {
    Chat,
    Completions,
    Embeddings,
    Responses,
    Messages,
    CountTokens,
}

impl Endpoint {
    fn wire(self) -> Wire {
        match self {
            Endpoint::Chat => Wire::CHAT,
            Endpoint::Completions => Wire::COMPLETIONS,
            Endpoint::Embeddings => Wire::EMBEDDINGS,
            Endpoint::Responses => Wire::RESPONSES,
            Endpoint::Messages => Wire::MESSAGES,
            Endpoint::CountTokens => Wire::COUNT_TOKENS,
        }
    }

    fn path(self) -> &'static str {
        self.wire().path()
    }
}

#[test]
fn every_endpoint_is_covered() {
    for w in Wire::ALL {
        assert!(ENDPOINTS.iter().any(|e| e.wire() == w), "{w:?}");
    }
}

const ENDPOINTS: [Endpoint; 6] = [
    Endpoint::Chat,
    Endpoint::Completions,
    Endpoint::Embeddings,
    Endpoint::Responses,
    Endpoint::Messages,
    Endpoint::CountTokens,
];

/// Whether the endpoint answers in Anthropic's shape.
fn anthropic(e: Endpoint) -> bool {
    match e {
        Endpoint::Chat | Endpoint::Completions | Endpoint::Embeddings | Endpoint::Responses => {
            false
        }
        Endpoint::Messages | Endpoint::CountTokens => true,
    }
}

/// The field that caps an answer's output on `e` (none: a count or an
/// embedding writes no answer).
fn cap_field(e: Endpoint) -> Option<&'static str> {
    match e {
        Endpoint::Chat | Endpoint::Completions | Endpoint::Messages => Some("max_tokens"),
        Endpoint::Responses => Some("max_output_tokens"),
        Endpoint::Embeddings | Endpoint::CountTokens => None,
    }
}

/// One route kind: its strategy, and the route's table for flavour `f`
/// (`None`: the concrete model `f-1` itself).
struct Kind {
    name: &'static str,
    strategy: &'static str,
    route: Option<fn(&str) -> String>,
}

fn kinds() -> Vec<Kind> {
    vec![
        Kind {
            name: "concrete",
            strategy: "passthrough",
            route: None,
        },
        Kind {
            name: "passthrough",
            strategy: "passthrough",
            route: Some(|f| format!("strategy = \"passthrough\"\nmodel = \"{f}-1\"")),
        },
        Kind {
            name: "chain",
            strategy: "chain",
            route: Some(|f| format!("strategy = \"chain\"\ntiers = [\"{f}-1\", \"{f}-2\"]")),
        },
        Kind {
            name: "failover",
            strategy: "chain",
            route: Some(|f| {
                format!(
                    "strategy = \"chain\"\ntiers = [\"{f}-1\", \"{f}-2\"]\nmidstream_failover = true"
                )
            }),
        },
        Kind {
            name: "judge",
            strategy: "judge",
            route: Some(|f| {
                format!(
                    "strategy = \"judge\"\npanel = [\"{f}-1\", \"{f}-2\"]\nsynthesis = \"{f}-3\"\n\
                     default = \"{f}-3\""
                )
            }),
        },
        Kind {
            name: "race",
            strategy: "race",
            route: Some(|f| format!("strategy = \"race\"\ncandidates = [\"{f}-1\", \"{f}-2\"]")),
        },
        Kind {
            name: "arena",
            strategy: "arena",
            route: Some(|f| format!("strategy = \"arena\"\ncontestants = [\"{f}-1\", \"{f}-2\"]")),
        },
        Kind {
            name: "oracle",
            strategy: "oracle",
            route: Some(|f| format!("strategy = \"oracle\"\nbase = \"{f}-1\"\noracle = \"{f}-2\"")),
        },
        Kind {
            name: "balance",
            strategy: "balance",
            route: Some(|f| format!("strategy = \"balance\"\nmembers = [\"{f}-1\", \"{f}-2\"]")),
        },
        Kind {
            name: "vote",
            strategy: "vote",
            route: Some(|f| format!("strategy = \"vote\"\nmembers = [\"{f}-1\", \"{f}-2\"]")),
        },
    ]
}

/// The name a client asks for: the concrete model or the route.
fn model_name(f: &str, k: &Kind) -> String {
    match k.route {
        None => format!("{f}-1"),
        Some(_) => format!("{f}-{}", k.name),
    }
}

fn config() -> String {
    let mut t = String::new();
    for f in FLAVOURS {
        let dialect = match f {
            "resp" => "responses = true",
            "anth" => "api = \"anthropic\"",
            _ => "",
        };
        t.push_str(&format!("[upstreams.{f}]\nkind = \"mock\"\n{dialect}\n\n"));
        for i in 1..=3 {
            t.push_str(&format!(
                "[upstreams.{f}.models.{f}-{i}]\nreply = {{ text = \"answer from {f}-{i}\" }}\n\n\
                 [models.{f}-{i}]\nupstream = \"{f}\"\n\n"
            ));
        }
        for k in kinds() {
            if let Some(route) = k.route {
                t.push_str(&format!("[routes.{f}-{}]\n{}\n\n", k.name, route(f)));
            }
        }
    }
    // `tiny`: no body of ~8,000 tokens fits; `slow`: one request a
    // minute; `free`: no limits.
    t.push_str(
        "[[keys]]\nname = \"tiny\"\nkey_env = \"K_TINY\"\ndaily_tokens = 4000\n\n\
         [[keys]]\nname = \"slow\"\nkey_env = \"K_SLOW\"\nrpm = 1\n\n\
         [[keys]]\nname = \"free\"\nkey_env = \"K_FREE\"\n",
    );
    t
}

const ENV: [(&str, &str); 3] = [
    ("K_TINY", "sk-tiny"),
    ("K_SLOW", "sk-slow"),
    ("K_FREE", "sk-free"),
];

/// `n` function tools of ~1,000 bytes each, in `e`'s shape.
fn tools(e: Endpoint, n: usize) -> Value {
    let schema = json!({"type": "object", "properties": {"x": {"type": "string"}}});
    let tools: Vec<Value> = (0..n)
        .map(|i| {
            let (name, description) = (format!("tool_{i}"), "d".repeat(900));
            match e {
                Endpoint::Responses => json!({"type": "function", "name": name,
                    "description": description, "parameters": schema}),
                Endpoint::Messages | Endpoint::CountTokens => {
                    json!({"name": name, "description": description, "input_schema": schema})
                }
                _ => json!({"type": "function", "function": {"name": name,
                    "description": description, "parameters": schema}}),
            }
        })
        .collect();
    Value::Array(tools)
}

/// A small valid body for `e` on `model`; with `big`, ~32 KB of tools
/// (of prompt, where the endpoint has no tools) that no 4,000-token
/// budget holds.
fn body(e: Endpoint, model: &str, big: bool) -> Value {
    let text = if big && matches!(e, Endpoint::Completions | Endpoint::Embeddings) {
        "lorem ipsum ".repeat(2_700)
    } else {
        "hi".to_owned()
    };
    let mut b = match e {
        Endpoint::Chat => json!({"model": model, "messages": [{"role": "user", "content": text}],
                                 "max_tokens": 16}),
        Endpoint::Completions => json!({"model": model, "prompt": text, "max_tokens": 16}),
        Endpoint::Embeddings => json!({"model": model, "input": text}),
        Endpoint::Responses => json!({"model": model, "input": text, "max_output_tokens": 16}),
        // `top_k` reaches only a native upstream (translation drops it).
        Endpoint::Messages => json!({"model": model, "max_tokens": 16, "top_k": 5,
                                     "messages": [{"role": "user", "content": text}]}),
        Endpoint::CountTokens => {
            json!({"model": model, "messages": [{"role": "user", "content": text}]})
        }
    };
    if big && !matches!(e, Endpoint::Completions | Endpoint::Embeddings) {
        b["tools"] = tools(e, 32);
    }
    b
}

/// Every request any upstream has received.
fn calls(gw: &inproc::Gw) -> u64 {
    FLAVOURS
        .iter()
        .map(|f| gw.sim(f).stats.requests.load(Ordering::SeqCst))
        .sum()
}

async fn post(gw: &inproc::Gw, e: Endpoint, body: &Value, key: &str) -> Resp {
    let auth = format!("Bearer {key}");
    let h = [
        ("authorization", auth.as_str()),
        ("x-conclave-confirm", "yes"),
    ];
    gw.post_with(&format!("/v1{}", e.path()), body, &h).await
}

/// The error of `r`, in `e`'s shape: (type or code, param, message).
fn error_of(e: Endpoint, r: &Resp) -> (String, String, String) {
    let v: Value = serde_json::from_str(&r.text).unwrap_or(Value::Null);
    let s = |v: &Value| v.as_str().unwrap_or_default().to_owned();
    if anthropic(e) {
        let kind = if v["type"] == "error" {
            s(&v["error"]["type"])
        } else {
            format!("not Anthropic's shape: {}", r.text)
        };
        (kind, String::new(), s(&v["error"]["message"]))
    } else {
        let err = &v["error"];
        (s(&err["code"]), s(&err["param"]), s(&err["message"]))
    }
}

#[tokio::test(start_paused = true)]
async fn every_path_to_an_upstream_passes_one_admission_point() {
    // Every strategy this build has is a route kind here.
    let ks = kinds();
    for strategy in conclave::strategy::STRATEGIES.iter().map(|s| s.name) {
        assert!(
            ks.iter().any(|k| k.strategy == strategy),
            "no route kind of strategy `{strategy}` in this table"
        );
    }
    let gw = inproc::Gw::start_with(&config(), &ENV, std::time::UNIX_EPOCH + inproc::START);
    let mut failures: Vec<String> = Vec::new();
    let mut paths = 0;
    for f in FLAVOURS {
        for k in &ks {
            let model = model_name(f, k);
            for e in ENDPOINTS {
                paths += 1;
                let at = format!("{} {f}/{} ({model})", e.path(), k.name);
                let mut fail = |what: String| failures.push(format!("{at}: {what}"));
                let served = k.route.is_none()
                    || k.strategy == "passthrough"
                    || !matches!(e, Endpoint::Completions | Endpoint::Embeddings);

                // A body no 4,000-token budget holds: refused before any
                // upstream call (a count spends no tokens: let through).
                let before = calls(&gw);
                let r = post(&gw, e, &body(e, &model, true), "sk-tiny").await;
                let reached = calls(&gw) - before;
                let (code, param, message) = error_of(e, &r);
                match (served, e) {
                    (false, _) => {
                        if (r.status, code.as_str(), param.as_str())
                            != (400, "unsupported_model", "model")
                        {
                            fail(format!(
                                "not served: want 400 unsupported_model, got {} {}",
                                r.status, r.text
                            ));
                        }
                    }
                    (true, Endpoint::CountTokens) => {
                        if r.status != 200 {
                            fail(format!(
                                "a count spends no tokens: got {} {}",
                                r.status, r.text
                            ));
                        }
                    }
                    (true, _) => {
                        let refused = if anthropic(e) {
                            code == "rate_limit_error" && message.contains("daily tokens")
                        } else {
                            code == "budget_exceeded"
                        };
                        if r.status != 429 || !refused {
                            fail(format!(
                                "over budget: want 429, got {} {}",
                                r.status, r.text
                            ));
                        }
                    }
                }
                let native_count = e == Endpoint::CountTokens
                    && f == "anth"
                    && served
                    && k.strategy == "passthrough";
                if reached != u64::from(native_count) {
                    fail(format!("over budget: {reached} upstream calls"));
                }

                // A cap that is not a positive integer: a 400 naming it,
                // no upstream call.
                if let Some(field) = cap_field(e) {
                    for bad in [json!(100_000.0), json!("5000"), json!(-1), json!(true)] {
                        let mut b = body(e, &model, false);
                        b[field] = bad.clone();
                        let before = calls(&gw);
                        let r = post(&gw, e, &b, "sk-free").await;
                        if calls(&gw) != before {
                            fail(format!("{field} = {bad}: reached an upstream"));
                        }
                        let (code, param, message) = error_of(e, &r);
                        let named = match (served, anthropic(e)) {
                            (false, _) => code == "unsupported_model",
                            (true, true) => {
                                code == "invalid_request_error" && message.contains(field)
                            }
                            (true, false) => code == "invalid_value" && param == field,
                        };
                        if r.status != 400 || !named {
                            fail(format!(
                                "{field} = {bad}: want a 400 naming it, got {} {}",
                                r.status, r.text
                            ));
                        }
                    }
                }

                // `rpm = 1`: the first request of the minute is let in
                // (whatever its answer), the second refused before any
                // upstream call.
                tokio::time::sleep(Duration::from_secs(61)).await;
                let small = body(e, &model, false);
                let first = post(&gw, e, &small, "sk-slow").await;
                if served && first.status == 429 {
                    fail(format!(
                        "the minute's first request refused: {}",
                        first.text
                    ));
                }
                if !served && first.status != 400 {
                    fail(format!(
                        "not served: want 400, got {} {}",
                        first.status, first.text
                    ));
                }
                // A native path was taken where it should be.
                let native = served && k.strategy == "passthrough";
                if native && f == "resp" && e == Endpoint::Responses {
                    let sent = gw.sim(f).recorded().last().map(|r| r.body.clone());
                    if sent.as_ref().and_then(|b| b.get("input")).is_none() {
                        fail(format!("not forwarded verbatim: {sent:?}"));
                    }
                }
                if native && f == "anth" && e == Endpoint::Messages {
                    let sent = gw.sim(f).recorded().last().map(|r| r.body.clone());
                    if sent.as_ref().and_then(|b| b.get("top_k")).is_none() {
                        fail(format!("not forwarded verbatim: {sent:?}"));
                    }
                }
                // What the first request started has ended.
                tokio::time::sleep(Duration::from_secs(1)).await;
                let before = calls(&gw);
                let r = post(&gw, e, &small, "sk-slow").await;
                if calls(&gw) != before {
                    fail("over rpm: reached an upstream".to_owned());
                }
                let (code, _, message) = error_of(e, &r);
                let limited = match (served, anthropic(e)) {
                    (false, _) => r.status == 400 && code == "unsupported_model",
                    (true, true) => {
                        r.status == 429
                            && code == "rate_limit_error"
                            && message.contains("requests per minute")
                    }
                    (true, false) => r.status == 429 && code == "rate_limit_exceeded",
                };
                if !limited {
                    fail(format!("over rpm: want 429, got {} {}", r.status, r.text));
                }
            }
        }
    }
    assert_eq!(paths, FLAVOURS.len() * ks.len() * ENDPOINTS.len());
    assert!(
        failures.is_empty(),
        "{} of {paths} paths failed:\n{}",
        failures.len(),
        failures.join("\n")
    );
}

/// What 100 concurrent bodies of one kind do to a key's daily budget.
struct Load {
    name: &'static str,
    path: &'static str,
    budget: u64,
    body: Value,
    /// What every request answers when none may be let in.
    refused: u16,
}

fn responses_tools(bytes: usize) -> Value {
    tools(Endpoint::Responses, bytes / 1_000)
}

fn schema(bytes: usize) -> Value {
    json!({"format": {"type": "json_schema", "name": "answer", "strict": true,
                      "schema": {"type": "object", "description": "s".repeat(bytes)}}})
}

fn reasoning(bytes: usize) -> Value {
    json!([
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "e".repeat(bytes)},
        {"role": "user", "content": "go on"}
    ])
}

fn loads() -> Vec<Load> {
    let responses = |extra: Value| {
        let mut b =
            json!({"model": "native-resp", "input": "hello there", "max_output_tokens": 100});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let messages = |extra: Value| {
        let mut b = json!({"model": "native-anth", "max_tokens": 100,
                           "messages": [{"role": "user", "content": "hello there"}]});
        for (k, v) in extra.as_object().unwrap() {
            b[k] = v.clone();
        }
        b
    };
    let load = |name, path, budget, body, refused| Load {
        name,
        path,
        budget,
        body,
        refused,
    };
    vec![
        // The probe's bodies against a 2,000-token budget.
        load(
            "tools-30k",
            "/v1/responses",
            2_000,
            responses(json!({"tools": responses_tools(30_000)})),
            429,
        ),
        load(
            "schema-30k",
            "/v1/responses",
            2_000,
            responses(json!({"text": schema(30_000)})),
            429,
        ),
        load(
            "reasoning-30k",
            "/v1/responses",
            2_000,
            responses(json!({"input": reasoning(30_000)})),
            429,
        ),
        load(
            "anth-tools-30k",
            "/v1/messages",
            2_000,
            messages(json!({"tools": tools(Endpoint::Messages, 30)})),
            429,
        ),
        load(
            "anth-float-cap",
            "/v1/messages",
            2_000,
            messages(json!({"max_tokens": 100_000.0})),
            400,
        ),
        load(
            "float-cap",
            "/v1/responses",
            2_000,
            responses(json!({"max_output_tokens": 100_000.0})),
            400,
        ),
        // Bodies of which some fit.
        load(
            "tools-8k",
            "/v1/responses",
            50_000,
            responses(json!({"tools": responses_tools(8_000)})),
            0,
        ),
        load(
            "schema-8k",
            "/v1/responses",
            50_000,
            responses(json!({"text": schema(8_000)})),
            0,
        ),
        load(
            "reasoning-8k",
            "/v1/responses",
            50_000,
            responses(json!({"input": reasoning(8_000)})),
            0,
        ),
        load(
            "anth-tools-8k",
            "/v1/messages",
            50_000,
            messages(json!({"tools": tools(Endpoint::Messages, 8)})),
            0,
        ),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn native_bodies_hold_a_budget_under_concurrency() {
    let (billing_v1, bill) = billing::start().await;
    let billing_root = billing_v1.trim_end_matches("/v1");
    let loads = loads();
    let mut toml = format!(
        "[upstreams.resp]\nkind = \"openai\"\nbase_url = \"{billing_v1}\"\nresponses = true\n\n\
         [upstreams.anth]\nkind = \"anthropic\"\nbase_url = \"{billing_root}\"\n\n\
         [models.native-resp]\nupstream = \"resp\"\n\n\
         [models.native-anth]\nupstream = \"anth\"\n\n\
         [[keys]]\nname = \"ops\"\nkey_env = \"K_OPS\"\nadmin = true\n\n"
    );
    let mut env = vec![("K_OPS".to_owned(), "k-ops".to_owned())];
    for (i, l) in loads.iter().enumerate() {
        toml.push_str(&format!(
            "[[keys]]\nname = \"{}\"\nkey_env = \"KEY_{i}\"\ndaily_tokens = {}\n\n",
            l.name, l.budget
        ));
        env.push((format!("KEY_{i}"), format!("k-{}", l.name)));
    }
    let env: Vec<(&str, &str)> = env.iter().map(|(a, b)| (a.as_str(), b.as_str())).collect();
    let gw = Srv::gateway_env(&toml, &env);
    let http = client();
    let mut report = Vec::new();
    for l in &loads {
        let before = bill.tokens.load(Ordering::SeqCst);
        let auth = format!("Bearer k-{}", l.name);
        let all = futures::future::join_all((0..100).map(|_| {
            let req = http
                .post(gw.url(l.path))
                .header("authorization", &auth)
                .json(&l.body);
            send(req)
        }))
        .await;
        let billed = bill.tokens.load(Ordering::SeqCst) - before;
        let ok = all.iter().filter(|r| r.status == 200).count();
        for r in all.iter().filter(|r| r.status != 200) {
            let want = if l.refused == 0 { 429 } else { l.refused };
            assert_eq!(r.status, want, "{}: {}", l.name, r.text);
        }
        // What the governor recorded: what the provider billed, once
        // every request has settled.
        let recorded =
            || async { key_usage(&gw, "k-ops", l.name).await["today"]["tokens"].as_u64() };
        let settled = eventually(10, || async { recorded().await == Some(billed) }).await;
        let spent = recorded().await.unwrap_or_default();
        assert!(settled, "{}: recorded {spent}, billed {billed}", l.name);
        let ratio = billed as f64 / l.budget as f64;
        report.push(format!(
            "{}: {ok} of 100 admitted, spent {spent} of {} ({ratio:.2}x)",
            l.name, l.budget
        ));
        assert!(ratio <= 1.5, "{}", report.join("\n"));
        if l.refused != 0 {
            assert_eq!(ok, 0, "{}", report.join("\n"));
        } else {
            // The estimate is not a wall: some fit.
            assert!(ok > 0, "{}", report.join("\n"));
        }
    }
    eprintln!("{}", report.join("\n"));
}
