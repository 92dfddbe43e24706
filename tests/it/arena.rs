//! Blind A/B arenas, over HTTP: a gateway in front of the mock server,
//! arena routes over simulated contestants, votes and the leaderboard.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::collections::HashSet;
use std::time::Duration;

use common::vendor;
use common::*;
use serde_json::{Value, json};

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.alpha]
reply = { text = "First answer." }
ttft = "30ms"
tokens_per_second = 20

[upstreams.sim.models.beta]
reply = { text = "Second answer, a longer one." }
ttft = "10ms"
tokens_per_second = 20

[upstreams.sim.models.gamma]
reply = { text = "Third answer." }

[upstreams.sim.models.broken]
status = 500
error_message = "it broke"
"#;

const MODELS: &[&str] = &["alpha", "beta", "gamma", "broken"];
/// What must never reach a client of an arena.
const NAMES: &[&str] = &[
    "alpha",
    "beta",
    "gamma",
    "chatcmpl-mock",
    "fp_conclave_mock",
];

fn arena(name: &str, contestants: &[&str], extra: &str) -> String {
    let c: Vec<String> = contestants.iter().map(|m| format!("\"{m}\"")).collect();
    format!(
        "[routes.{name}]\nstrategy = \"arena\"\ncontestants = [{}]\n{extra}\n\n",
        c.join(", ")
    )
}

fn world(routes: &str) -> (Srv, Srv) {
    let mock = Srv::mock(MOCK);
    let gw = Srv::gateway(&front_of(&mock.v1(), MODELS, routes));
    (mock, gw)
}

fn assert_anonymous(r: &Resp) {
    for name in NAMES {
        assert!(!r.text.contains(name), "{name} in the body: {}", r.text);
        for (h, v) in &r.headers {
            let v = v.to_str().unwrap_or_default();
            assert!(!v.contains(name), "{name} in header {h}: {v}");
        }
    }
}

async fn vote(gw: &impl Served, id: &str, pick: &str, headers: &[(&str, &str)]) -> Resp {
    let mut req = client()
        .post(gw.url(&format!("/v1/arena/{id}/vote")))
        .json(&json!({ "pick": pick }));
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    send(req).await
}

/// The models shown as A and B in arena `id`, from the event log.
async fn shown(gw: &impl Served, id: &str) -> (String, String) {
    let started = || async {
        let ev = gw.events_of(&["arena_started"], 1).await;
        ev.into_iter().find(|e| e["arena_id"] == id)
    };
    eventually(10, || async { started().await.is_some() }).await;
    let e = started()
        .await
        .unwrap_or_else(|| panic!("no arena_started for {id}"));
    (
        e["a"].as_str().unwrap().to_owned(),
        e["b"].as_str().unwrap().to_owned(),
    )
}

#[tokio::test]
async fn two_anonymous_choices_in_a_shuffled_order() {
    let (mock, gw) = world(&arena("ab", &["alpha", "beta"], ""));
    let mut orders = HashSet::new();
    for _ in 0..16 {
        let r = post(&gw.base, &chat("ab", "compare these")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_anonymous(&r);
        let v = r.json();
        let id = v["arena_id"].as_str().unwrap().to_owned();
        assert_eq!(r.header("x-conclave-arena-id"), Some(id.as_str()));
        assert_eq!(r.header("x-conclave-served-by"), None);
        assert_eq!(v["model"], "ab");
        let choices = v["choices"].as_array().unwrap();
        assert_eq!(choices.len(), 2);
        assert_eq!(
            (choices[0]["index"].as_u64(), choices[1]["index"].as_u64()),
            (Some(0), Some(1))
        );
        let (a, _) = shown(&gw, &id).await;
        let first = choices[0]["message"]["content"].as_str().unwrap();
        assert_eq!(first == "First answer.", a == "alpha", "choice 0 is A");
        orders.insert(a);
        // Usage covers both answers (the mock counts words): 2 + 5.
        assert_eq!(v["usage"]["completion_tokens"], 7);
    }
    assert_eq!(
        orders.len(),
        2,
        "16 requests always showed the same model as A"
    );
    // Each answer is capped at 2000 tokens unless the client asks for less.
    let got = mock.received().await;
    assert!(
        got.iter().all(|q| q["body"]["max_tokens"] == 2000),
        "{got:?}"
    );
    let mut less = chat("ab", "short please");
    less["max_tokens"] = json!(50);
    assert_eq!(post(&gw.base, &less).await.status, 200);
    let got = mock.received().await;
    assert_eq!(got.last().unwrap()["body"]["max_tokens"], 50);
    // n other than 1 is a 400.
    let mut n = chat("ab", "hi");
    n["n"] = json!(2);
    let r = post(&gw.base, &n).await;
    assert_eq!(r.status, 400, "{}", r.text);
    assert_eq!(r.json()["error"]["param"], "n");
}

#[tokio::test]
async fn streamed_answers_interleave_and_the_sdk_assembles_both() {
    use async_openai::Client;
    use async_openai::config::OpenAIConfig;
    use async_openai::types::chat::{
        ChatCompletionRequestUserMessageArgs, CreateChatCompletionRequestArgs,
    };
    use futures::StreamExt;

    let (_mock, gw) = world(&arena("ab", &["alpha", "beta"], ""));
    let r = post(&gw.base, &chat_stream("ab", "stream both")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_anonymous(&r);
    let events = r.data_events();
    let indices: Vec<u64> = events
        .iter()
        .filter_map(|e| serde_json::from_str::<Value>(e).ok())
        .filter_map(|v| v["choices"][0]["index"].as_u64())
        .collect();
    let switches = indices.windows(2).filter(|w| w[0] != w[1]).count();
    assert!(
        switches >= 2,
        "the two answers did not interleave: {indices:?}"
    );

    let client = Client::with_config(OpenAIConfig::new().with_api_base(gw.v1()).with_api_key("x"));
    let req = CreateChatCompletionRequestArgs::default()
        .model("ab")
        .stream(true)
        .messages([ChatCompletionRequestUserMessageArgs::default()
            .content("stream both")
            .build()
            .unwrap()
            .into()])
        .build()
        .unwrap();
    let mut s = client.chat().create_stream(req).await.unwrap();
    let mut texts = [String::new(), String::new()];
    while let Some(chunk) = s.next().await {
        for c in chunk.unwrap().choices {
            texts[c.index as usize].push_str(c.delta.content.as_deref().unwrap_or(""));
        }
    }
    let mut got = texts.to_vec();
    got.sort();
    assert_eq!(got, ["First answer.", "Second answer, a longer one."]);
}

#[tokio::test]
async fn votes_are_forgiving_counted_once_and_ranked() {
    let (_mock, gw) = world(&arena("ab", &["alpha", "beta"], ""));
    let words = [
        "A",
        "pick A",
        "left",
        "B",
        "pick b",
        "RIGHT",
        "tie",
        "equal",
        "both",
        "neither",
        "t",
        "skip",
        "cancel",
        "abort",
        " Never Mind ",
    ];
    let mut wins = (0, 0);
    for word in words {
        let r = post(&gw.base, &chat("ab", "vote on me")).await;
        let id = r.json()["arena_id"].as_str().unwrap().to_owned();
        let (a, b) = shown(&gw, &id).await;
        let v = vote(&gw, &id, word, &[]).await;
        assert_eq!(v.status, 200, "{word}: {}", v.text);
        let body = v.json();
        assert_eq!(
            (body["a"].as_str(), body["b"].as_str()),
            (Some(a.as_str()), Some(b.as_str()))
        );
        match body["pick"].as_str().unwrap() {
            "a" | "b" => {
                let w = body["winner"].as_str().unwrap();
                if w == "alpha" {
                    wins.0 += 1
                } else {
                    wins.1 += 1
                }
            }
            "tie" | "skip" => assert!(body["winner"].is_null()),
            p => panic!("{p}"),
        }
        // One vote per arena.
        let again = vote(&gw, &id, "A", &[]).await;
        assert_eq!(again.status, 409, "{}", again.text);
        assert_eq!(again.json()["error"]["code"], "arena_already_voted");
    }
    let r = post(&gw.base, &chat("ab", "one more")).await;
    let id = r.json()["arena_id"].as_str().unwrap().to_owned();
    let bad = vote(&gw, &id, "the second one", &[]).await;
    assert_eq!(bad.status, 400);
    let msg = bad.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("\"never mind\"") && msg.contains("\"pick A\""),
        "{msg}"
    );
    assert_eq!(vote(&gw, "arena-0000", "A", &[]).await.status, 404);

    let board = get_json(&client(), &gw.url("/v1/arena/leaderboard?route=ab")).await;
    let rows = board["data"].as_array().unwrap();
    let row = |m: &str| rows.iter().find(|r| r["model"] == m).unwrap().clone();
    let (alpha, beta) = (row("alpha"), row("beta"));
    // 6 wins between them, 5 ties, 4 skips not counted.
    assert_eq!(board["votes"], 11);
    assert_eq!(alpha["wins"], wins.0);
    assert_eq!(beta["wins"], wins.1);
    assert_eq!(alpha["losses"], wins.1);
    assert_eq!(
        (alpha["ties"].as_u64(), alpha["votes"].as_u64()),
        (Some(5), Some(11))
    );
    let md = send(client().get(gw.url("/v1/arena/leaderboard?route=ab&format=markdown"))).await;
    assert!(
        md.text.contains("| # | model | rating | 95% CI |"),
        "{}",
        md.text
    );
    let m = gw.metrics().await;
    let ties = samples(
        &m,
        "conclave_arena_votes_total",
        &[("model", "alpha"), ("outcome", "tie")],
    );
    assert_eq!(ties, vec![5.0]);
    let ev = gw.events_of(&["arena_vote"], 15).await;
    assert_eq!(ev.len(), 15);
}

#[tokio::test]
async fn votes_and_the_leaderboard_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Srv::mock(MOCK);
    let toml = front_of(&mock.v1(), MODELS, &arena("ab", &["alpha", "beta"], "")).replace(
        "[server]\n",
        &format!(
            "[server]\nstate_path = \"{}\"\n",
            dir.path().join("s.db").display()
        ),
    );
    let gw = Proc::gateway(&toml);
    // x beats y three times of four: the hand-computed example of
    // strategy::arena::board (ratings 1073.6 and 926.4, ±166.1).
    let mut open_id = String::new();
    for (i, winner) in ["alpha", "alpha", "alpha", "beta", "none"]
        .iter()
        .enumerate()
    {
        let r = post(&gw.base, &chat("ab", &format!("question {i}"))).await;
        let id = r.json()["arena_id"].as_str().unwrap().to_owned();
        if *winner == "none" {
            open_id = id;
            continue;
        }
        let (a, _) = shown(&gw, &id).await;
        let pick = if a == *winner { "A" } else { "B" };
        assert_eq!(vote(&gw, &id, pick, &[]).await.status, 200);
    }
    let before = get_json(&client(), &gw.url("/v1/arena/leaderboard")).await;
    gw.signal("KILL");
    drop(gw);
    let gw = Proc::gateway(&toml);
    let after = get_json(&client(), &gw.url("/v1/arena/leaderboard")).await;
    assert_eq!(before, after);
    let top = &after["data"][0];
    assert_eq!(
        (top["model"].as_str(), top["wins"].as_u64()),
        (Some("alpha"), Some(3))
    );
    assert_eq!(top["rating"], 1073.6);
    assert_eq!(top["ci_high"], 1239.7);
    assert_eq!(after["data"][1]["rating"], 926.4);
    // An arena opened before the restart can still be voted on.
    assert_eq!(vote(&gw, &open_id, "tie", &[]).await.status, 200);
}

/// In-process, on paused time: the vote window closes when the clock
/// passes `vote_ttl`, not a wall-clock wait.
#[tokio::test(start_paused = true)]
async fn only_the_asking_key_votes_and_arenas_expire() {
    let keys = "[[keys]]\nname = \"one\"\nkey_env = \"K1\"\n\n[[keys]]\nname = \"two\"\nkey_env = \"K2\"\n";
    let models: String = MODELS
        .iter()
        .map(|m| format!("[models.{m}]\nupstream = \"sim\"\n\n"))
        .collect();
    let toml = format!(
        "{MOCK}\n{models}{keys}\n{}",
        arena("ab", &["alpha", "beta"], "vote_ttl = \"2s\"")
    );
    let env = [("K1", "k-one"), ("K2", "k-two")];
    let gw = inproc::Gw::start_with(&toml, &env, std::time::UNIX_EPOCH + inproc::START);
    let vote = |id: &str, pick: &str, h: &'static [(&'static str, &'static str)]| {
        let path = format!("/v1/arena/{id}/vote");
        let body = json!({ "pick": pick });
        let gw = &gw;
        async move { gw.post_with(&path, &body, h).await }
    };
    const NONE: &[(&str, &str)] = &[];
    const ONE: &[(&str, &str)] = &[("authorization", "Bearer k-one")];
    const TWO: &[(&str, &str)] = &[("authorization", "Bearer k-two")];
    let r = gw.chat_with(&chat("ab", "mine"), ONE).await;
    let id = r.json()["arena_id"].as_str().unwrap().to_owned();
    assert_eq!(vote(&id, "A", NONE).await.status, 401);
    let other = vote(&id, "A", TWO).await;
    assert_eq!(other.status, 403, "{}", other.text);
    assert_eq!(other.json()["error"]["code"], "arena_not_yours");
    assert_eq!(vote(&id, "A", ONE).await.status, 200);
    // Another key learns nothing, not even that it was voted on.
    assert_eq!(vote(&id, "B", TWO).await.status, 403);
    // Whole seconds on the clock: one is inside the 2 s window, three past it.
    let r = gw.chat_with(&chat("ab", "in time"), TWO).await;
    let early = r.json()["arena_id"].as_str().unwrap().to_owned();
    tokio::time::advance(Duration::from_secs(1)).await;
    let v = vote(&early, "B", TWO).await;
    assert_eq!(v.status, 200, "{}", v.text);
    let r = gw.chat_with(&chat("ab", "too late"), ONE).await;
    let late = r.json()["arena_id"].as_str().unwrap().to_owned();
    tokio::time::advance(Duration::from_secs(3)).await;
    let v = vote(&late, "B", ONE).await;
    assert_eq!(v.status, 404, "{}", v.text);
}

#[tokio::test]
async fn one_contestant_failing_leaves_one_choice_and_nothing_to_vote_on() {
    let (_mock, gw) = world(&arena("ab", &["alpha", "broken"], ""));
    for body in [chat("ab", "hi"), chat_stream("ab", "hi")] {
        let r = post(&gw.base, &body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.header("x-conclave-arena"), Some("incomplete"));
        assert_eq!(r.header("x-conclave-arena-id"), None);
        assert!(!r.text.contains("arena_id"));
        assert_anonymous(&r);
        let text: String = if r.text.starts_with("data:") {
            r.data_events()
                .iter()
                .filter_map(|e| serde_json::from_str::<Value>(e).ok())
                .filter_map(|v| {
                    v["choices"][0]["delta"]["content"]
                        .as_str()
                        .map(str::to_owned)
                })
                .collect()
        } else {
            r.json()["choices"][0]["message"]["content"]
                .as_str()
                .unwrap()
                .to_owned()
        };
        assert_eq!(text, "First answer.");
        assert!(!r.text.contains("\"index\":1"), "{}", r.text);
    }
}

#[tokio::test]
async fn balanced_pairs_fill_in_the_pair_with_fewest_votes() {
    let (_mock, gw) = world(&arena(
        "three",
        &["alpha", "beta", "gamma"],
        "pairs = \"balanced\"",
    ));
    let mut seen = Vec::new();
    for _ in 0..3 {
        let r = post(&gw.base, &chat("three", "pair me")).await;
        let id = r.json()["arena_id"].as_str().unwrap().to_owned();
        let (a, b) = shown(&gw, &id).await;
        let mut pair = [a, b];
        pair.sort();
        seen.push(pair);
        assert_eq!(vote(&gw, &id, "tie", &[]).await.status, 200);
    }
    seen.sort();
    seen.dedup();
    assert_eq!(seen.len(), 3, "each of the three pairs once: {seen:?}");
}

#[test]
fn check_refuses_two_contestants_that_are_the_same_model() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.toml");
    std::fs::write(
        &path,
        "[upstreams.sim]\nkind = \"mock\"\n\n[models.x]\nupstream = \"sim\"\nmodel = \"m\"\n\n\
         [models.y]\nupstream = \"sim\"\nmodel = \"m\"\n\n[routes.ab]\nstrategy = \"arena\"\n\
         contestants = [\"x\", \"y\"]\n",
    )
    .unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("routes.ab.contestants[1]") && err.contains("same model as \"x\""),
        "{err}"
    );
}

/// Every field an arena's whole answer may carry, by path (`*`: any
/// element of an array).
const WHOLE_FIELDS: &[&str] = &[
    "id",
    "object",
    "created",
    "model",
    "arena_id",
    "usage",
    "usage.prompt_tokens",
    "usage.completion_tokens",
    "usage.total_tokens",
    "choices",
    "choices.*",
    "choices.*.index",
    "choices.*.finish_reason",
    "choices.*.message",
    "choices.*.message.role",
    "choices.*.message.content",
    "choices.*.message.tool_calls",
    "choices.*.message.tool_calls.*",
    "choices.*.message.tool_calls.*.id",
    "choices.*.message.tool_calls.*.type",
    "choices.*.message.tool_calls.*.function",
    "choices.*.message.tool_calls.*.function.name",
    "choices.*.message.tool_calls.*.function.arguments",
];

/// The same for a stream's chunks.
const CHUNK_FIELDS: &[&str] = &[
    "id",
    "object",
    "created",
    "model",
    "arena_id",
    "usage",
    "usage.prompt_tokens",
    "usage.completion_tokens",
    "usage.total_tokens",
    "choices",
    "choices.*",
    "choices.*.index",
    "choices.*.finish_reason",
    "choices.*.delta",
    "choices.*.delta.role",
    "choices.*.delta.content",
    "choices.*.delta.tool_calls",
    "choices.*.delta.tool_calls.*",
    "choices.*.delta.tool_calls.*.index",
    "choices.*.delta.tool_calls.*.id",
    "choices.*.delta.tool_calls.*.type",
    "choices.*.delta.tool_calls.*.function",
    "choices.*.delta.tool_calls.*.function.name",
    "choices.*.delta.tool_calls.*.function.arguments",
];

/// Every field path in `v` that is not in `allowed`.
fn unexpected(v: &Value, allowed: &[&str]) -> Vec<String> {
    fn walk(v: &Value, at: &str, out: &mut Vec<String>) {
        let join = |k: &str| {
            if at.is_empty() {
                k.to_owned()
            } else {
                format!("{at}.{k}")
            }
        };
        match v {
            Value::Object(m) => {
                for (k, x) in m {
                    out.push(join(k));
                    walk(x, &join(k), out);
                }
            }
            Value::Array(a) => {
                for x in a {
                    out.push(join("*"));
                    walk(x, &join("*"), out);
                }
            }
            _ => {}
        }
    }
    let mut all = Vec::new();
    walk(v, "", &mut all);
    all.retain(|p| !allowed.contains(&p.as_str()));
    all.dedup();
    all
}

/// `v` with what a model said (text, a tool call's name and arguments)
/// as `T`, and ids (a tool call's, after checking it is nine letters and
/// digits; the arena's) as `ID`: what must not differ by model.
fn blanked(v: &Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.iter()
                .map(|(k, x)| {
                    let x = match (k.as_str(), x) {
                        ("content" | "name" | "arguments", Value::String(s)) if !s.is_empty() => {
                            json!("T")
                        }
                        ("id" | "arena_id", Value::String(_)) => json!("ID"),
                        _ => blanked(x),
                    };
                    (k.clone(), x)
                })
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.iter().map(blanked).collect()),
        other => other.clone(),
    }
}

/// Checks what every arena answer must: one `created`, the arena's own
/// (not a contestant's, and from this request's time), tool-call ids in
/// conclave's format, none of the vendors' tells in the body or the
/// headers, and no field outside `allowed`.
fn assert_blind(r: &Resp, parts: &[Value], allowed: &[&str], t0: u64) {
    let t1 = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let created: HashSet<u64> = parts
        .iter()
        .map(|p| p["created"].as_u64().unwrap())
        .collect();
    assert_eq!(created.len(), 1, "several created: {created:?}\n{}", r.text);
    let created = *created.iter().next().unwrap();
    assert!(
        (t0..=t1).contains(&created),
        "created {created} not in {t0}..={t1}"
    );
    for p in parts {
        let odd = unexpected(p, allowed);
        assert!(
            odd.is_empty(),
            "fields outside the allow-list: {odd:?} in {p}"
        );
        for choice in p["choices"].as_array().unwrap() {
            let msg = choice.get("message").or(choice.get("delta")).unwrap();
            for call in msg["tool_calls"].as_array().into_iter().flatten() {
                if let Some(id) = call["id"].as_str() {
                    assert!(
                        id.len() == 9 && id.bytes().all(|b| b.is_ascii_alphanumeric()),
                        "tool call id {id}"
                    );
                }
            }
        }
        let text = blanked(p).to_string();
        for tell in vendor::TELLS {
            assert!(!text.contains(tell), "{tell} in {p}");
        }
    }
    for (h, v) in &r.headers {
        let v = v.to_str().unwrap_or_default();
        for tell in vendor::TELLS {
            assert!(!v.contains(tell), "{tell} in header {h}: {v}");
        }
    }
}

fn now_secs() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

async fn vendors() -> Srv {
    let v1 = vendor::start().await;
    let routes = arena("ab", &["vendor-a", "vendor-b"], "")
        + &arena("half", &["vendor-b", "vendor-down"], "");
    Srv::gateway(&front_of(
        &v1,
        &["vendor-a", "vendor-b", "vendor-down"],
        &routes,
    ))
}

#[tokio::test]
async fn a_whole_arena_answer_differs_by_model_only_in_what_it_says() {
    let gw = vendors().await;
    let (mut orders, mut shapes) = (HashSet::new(), HashSet::new());
    for _ in 0..24 {
        let t0 = now_secs();
        let r = post(&gw.base, &chat("ab", "which?")).await;
        assert_eq!(r.status, 200, "{}", r.text);
        let v = r.json();
        assert_blind(&r, std::slice::from_ref(&v), WHOLE_FIELDS, t0);
        let choices = v["choices"].as_array().unwrap();
        let texts: Vec<&str> = choices
            .iter()
            .map(|c| c["message"]["content"].as_str().unwrap())
            .collect();
        let mut sorted = texts.clone();
        sorted.sort();
        assert_eq!(sorted, [vendor::TEXT_A, vendor::TEXT_B]);
        for c in choices {
            assert_eq!(c["finish_reason"], "tool_calls");
            let call = &c["message"]["tool_calls"][0];
            assert_eq!(call["function"]["name"], "lookup");
            assert_eq!(call["function"]["arguments"], "{\"q\":\"x\"}");
        }
        // Both vendors' counts together, without their details.
        assert_eq!(
            v["usage"],
            json!({"prompt_tokens": 24, "completion_tokens": 16, "total_tokens": 40})
        );
        // A and B look alike but for the text...
        let mut one = blanked(&choices[0]);
        let mut two = blanked(&choices[1]);
        one["index"] = json!(0);
        two["index"] = json!(0);
        assert_eq!(one, two);
        // ...so swapping them changes nothing else.
        orders.insert(texts[0] == vendor::TEXT_A);
        let mut shape = blanked(&v);
        shape["created"] = json!(0);
        shapes.insert(shape.to_string());
        if orders.len() == 2 {
            break;
        }
    }
    assert_eq!(orders.len(), 2, "24 answers all showed one vendor as A");
    assert_eq!(shapes.len(), 1, "{shapes:#?}");
}

/// A stream's chunks, parsed (without `[DONE]`).
fn chunks_of(r: &Resp) -> Vec<Value> {
    r.data_events()
        .iter()
        .filter(|e| *e != "[DONE]")
        .map(|e| serde_json::from_str(e).unwrap())
        .collect()
}

#[tokio::test]
async fn a_streamed_arena_answer_differs_by_model_only_in_what_it_says() {
    let gw = vendors().await;
    for include_usage in [false, true] {
        let (mut orders, mut shapes) = (HashSet::new(), HashSet::new());
        for _ in 0..24 {
            let t0 = now_secs();
            let mut body = chat_stream("ab", "which?");
            body["stream_options"] = json!({"include_usage": include_usage});
            let r = post(&gw.base, &body).await;
            assert_eq!(r.status, 200, "{}", r.text);
            let chunks = chunks_of(&r);
            assert_blind(&r, &chunks, CHUNK_FIELDS, t0);
            // One id, model, object and arena id in every chunk.
            let heads: HashSet<String> = chunks
                .iter()
                .map(|c| json!([c["id"], c["object"], c["model"], c["arena_id"]]).to_string())
                .collect();
            assert_eq!(heads.len(), 1, "{heads:?}");
            let (usage, answers): (Vec<&Value>, Vec<&Value>) = chunks
                .iter()
                .partition(|c| c["choices"].as_array().unwrap().is_empty());
            if include_usage {
                assert_eq!(usage.len(), 1, "{}", r.text);
                assert_eq!(
                    usage[0]["usage"],
                    json!({"prompt_tokens": 24, "completion_tokens": 16, "total_tokens": 40})
                );
            } else {
                assert!(usage.is_empty(), "{}", r.text);
            }
            // Each choice: its text, and its chunks' shapes in order (a
            // run of alike chunks counts once: how a text is cut up is
            // the text's).
            let mut text = [String::new(), String::new()];
            let mut seq: [Vec<Value>; 2] = [Vec::new(), Vec::new()];
            for c in answers {
                assert!(c.get("usage").is_none(), "{c}");
                let choices = c["choices"].as_array().unwrap();
                assert_eq!(choices.len(), 1, "{c}");
                let i = choices[0]["index"].as_u64().unwrap() as usize;
                text[i].push_str(choices[0]["delta"]["content"].as_str().unwrap_or(""));
                let shape = blanked(&choices[0]["delta"]);
                let shape = json!([shape, choices[0]["finish_reason"]]);
                if seq[i].last() != Some(&shape) {
                    seq[i].push(shape);
                }
            }
            let mut sorted = text.to_vec();
            sorted.sort();
            assert_eq!(sorted, [vendor::TEXT_A, vendor::TEXT_B]);
            assert_eq!(seq[0], seq[1], "A and B stream differently");
            assert_eq!(seq[0].last().unwrap()[1], "tool_calls", "{:?}", seq[0]);
            orders.insert(text[0] == vendor::TEXT_A);
            shapes.insert(json!(seq[0]).to_string());
            if orders.len() == 2 {
                break;
            }
        }
        assert_eq!(orders.len(), 2, "24 answers all showed one vendor as A");
        assert_eq!(shapes.len(), 1, "{shapes:#?}");
    }
}

#[tokio::test]
async fn the_answer_left_when_a_contestant_fails_is_as_blind() {
    let gw = vendors().await;
    for stream in [false, true] {
        let t0 = now_secs();
        let body = if stream {
            chat_stream("half", "which?")
        } else {
            chat("half", "which?")
        };
        let r = post(&gw.base, &body).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(r.header("x-conclave-arena"), Some("incomplete"));
        let (parts, allowed) = if stream {
            (chunks_of(&r), CHUNK_FIELDS)
        } else {
            (vec![r.json()], WHOLE_FIELDS)
        };
        assert_blind(&r, &parts, allowed, t0);
        assert!(!r.text.contains("down"), "{}", r.text);
    }
}
