//! Arena battles of 2 to 6 contestants a request names, over HTTP: the
//! `contestants` field and its 400s, N answers streamed blind, ranked and
//! picked votes and what they reveal, the leaderboard's pairwise counts,
//! time filters and pooled routes, partial failures, budgets reserving
//! for every named contestant, and the demo's three-model battle.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.alpha]
reply = { text = "First answer." }
ttft = "20ms"
tokens_per_second = 40

[upstreams.sim.models.beta]
reply = { text = "Second answer, a longer one." }
ttft = "10ms"
tokens_per_second = 40

[upstreams.sim.models.gamma]
reply = { text = "Third answer." }
tokens_per_second = 40

[upstreams.sim.models.delta]
reply = { text = "Fourth answer." }

[upstreams.sim.models.broken]
status = 500
error_message = "it broke"

[upstreams.sim.models.gone]
status = 500
error_message = "it is gone"
"#;

const MODELS: &[&str] = &["alpha", "beta", "gamma", "delta", "broken", "gone"];
const TEXTS: &[(&str, &str)] = &[
    ("alpha", "First answer."),
    ("beta", "Second answer, a longer one."),
    ("gamma", "Third answer."),
    ("delta", "Fourth answer."),
];

fn routes() -> String {
    "[routes.pool]\nstrategy = \"arena\"\n\
     contestants = [\"alpha\", \"beta\", \"gamma\", \"delta\", \"broken\", \"gone\"]\n\n\
     [routes.duo]\nstrategy = \"arena\"\ncontestants = [\"alpha\", \"gamma\"]\n\n"
        .to_owned()
}

fn world() -> (Srv, Srv) {
    let mock = Srv::mock(MOCK);
    let gw = Srv::gateway(&front_of(&mock.v1(), MODELS, &routes()));
    (mock, gw)
}

fn battle(route: &str, text: &str, contestants: &[&str], stream: bool) -> Value {
    let mut b = if stream {
        chat_stream(route, text)
    } else {
        chat(route, text)
    };
    b["contestants"] = json!(contestants);
    b
}

async fn vote(gw: &impl Served, id: &str, body: Value) -> Resp {
    send(
        client()
            .post(gw.url(&format!("/v1/arena/{id}/vote")))
            .json(&body),
    )
    .await
}

async fn board(gw: &impl Served, query: &str) -> Value {
    let r = send(client().get(gw.url(&format!("/v1/arena/leaderboard?{query}")))).await;
    assert_eq!(r.status, 200, "{query}: {}", r.text);
    r.json()
}

/// `(wins, losses, ties, votes)` of `model` on `board`.
fn standing(board: &Value, model: &str) -> (u64, u64, u64, u64) {
    let row = board["data"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["model"] == model)
        .unwrap_or_else(|| panic!("no {model} in {board}"));
    let n = |k: &str| row[k].as_u64().unwrap();
    (n("wins"), n("losses"), n("ties"), n("votes"))
}

/// Each choice's text of a streamed answer, by index.
fn streamed_texts(r: &Resp) -> Vec<String> {
    let mut texts: Vec<String> = Vec::new();
    for e in r.data_events() {
        let Ok(v) = serde_json::from_str::<Value>(&e) else {
            continue;
        };
        for c in v["choices"].as_array().into_iter().flatten() {
            let i = c["index"].as_u64().unwrap() as usize;
            if texts.len() <= i {
                texts.resize(i + 1, String::new());
            }
            texts[i].push_str(c["delta"]["content"].as_str().unwrap_or(""));
        }
    }
    texts
}

fn model_of(text: &str) -> &'static str {
    TEXTS
        .iter()
        .find(|(_, t)| *t == text)
        .map(|(m, _)| *m)
        .unwrap_or_else(|| panic!("no model wrote {text:?}"))
}

#[tokio::test]
async fn three_named_contestants_stream_blind_and_a_ranking_reveals_and_ranks_them() {
    let (mock, gw) = world();
    let r = post(
        &gw.base,
        &battle("pool", "compare three", &["gamma", "alpha", "beta"], true),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    for name in ["alpha", "beta", "gamma", "chatcmpl-mock"] {
        assert!(!r.text.contains(name), "{name} in {}", r.text);
    }
    let texts = streamed_texts(&r);
    assert_eq!(texts.len(), 3, "{texts:?}");
    let shown: Vec<&str> = texts.iter().map(|t| model_of(t)).collect();
    let mut sorted = shown.clone();
    sorted.sort();
    assert_eq!(sorted, ["alpha", "beta", "gamma"]);
    // The contestants never see the field.
    let got = mock.received().await;
    assert_eq!(got.len(), 3);
    assert!(
        got.iter().all(|q| q["body"].get("contestants").is_none()),
        "{got:?}"
    );
    let id = r.header("x-conclave-arena-id").unwrap().to_owned();
    let started = gw.events_of(&["arena_started"], 1).await;
    assert_eq!(started[0]["models"], json!(shown));
    assert_eq!(started[0]["a"], shown[0]);

    // C first, then A, then B.
    let v = vote(&gw, &id, json!({"ranking": ["C", "a", " B "]})).await;
    assert_eq!(v.status, 200, "{}", v.text);
    let body = v.json();
    assert_eq!(
        body["models"],
        json!({"A": shown[0], "B": shown[1], "C": shown[2]})
    );
    assert_eq!(body["ranking"], json!(["C", "A", "B"]));
    assert_eq!(body["pick"], "ranking");
    assert_eq!(body["winner"], shown[2]);
    assert_eq!(
        (body["a"].as_str(), body["b"].as_str()),
        (Some(shown[0]), Some(shown[1]))
    );
    assert_eq!(body["recorded"], true);
    let again = vote(&gw, &id, json!({"pick": "A"})).await;
    assert_eq!(again.status, 409, "{}", again.text);

    let b = board(&gw, "route=pool").await;
    assert_eq!(
        (b["votes"].as_u64(), b["comparisons"].as_u64()),
        (Some(1), Some(3))
    );
    assert_eq!(standing(&b, shown[2]), (2, 0, 0, 2));
    assert_eq!(standing(&b, shown[0]), (1, 1, 0, 2));
    assert_eq!(standing(&b, shown[1]), (0, 2, 0, 2));
    assert_eq!(standing(&b, "delta"), (0, 0, 0, 0));
    assert_eq!(b["data"][0]["model"], shown[2]);
    let m = gw.metrics().await;
    let count = |model: &str, outcome: &str| {
        samples(
            &m,
            "conclave_arena_votes_total",
            &[("route", "pool"), ("model", model), ("outcome", outcome)],
        )
    };
    assert_eq!(count(shown[2], "win"), vec![2.0]);
    assert_eq!(count(shown[0], "win"), vec![1.0]);
    assert_eq!(count(shown[0], "loss"), vec![1.0]);
    assert_eq!(count(shown[1], "loss"), vec![2.0]);
    let ev = gw.events_of(&["arena_vote"], 1).await;
    assert_eq!(ev[0]["models"], json!(shown));
    assert_eq!(ev[0]["ranking"], json!(["C", "A", "B"]));
}

#[tokio::test]
async fn picks_of_n_all_bad_misfits_time_filters_and_pooled_routes() {
    let (_mock, gw) = world();
    let open = |names: &'static [&'static str]| {
        let gw = &gw;
        async move {
            let r = post(&gw.base, &battle("pool", "pick one", names, false)).await;
            assert_eq!(r.status, 200, "{}", r.text);
            let v = r.json();
            assert_eq!(v["choices"].as_array().unwrap().len(), names.len());
            let shown: Vec<String> = v["choices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| model_of(c["message"]["content"].as_str().unwrap()).to_owned())
                .collect();
            (v["arena_id"].as_str().unwrap().to_owned(), shown)
        }
    };
    // A pick of one of four beats the three others; they are not compared.
    let (id, four) = open(&["alpha", "beta", "gamma", "delta"]).await;
    for (body, param) in [
        (json!({"pick": "E"}), "pick"),
        (json!({"ranking": ["A", "B", "C"]}), "ranking"),
        (json!({"ranking": ["A", "B", "C", "C"]}), "ranking"),
        (json!({"ranking": "ABCD"}), "ranking"),
        (json!({"pick": "A", "ranking": ["A", "B"]}), "ranking"),
        (json!({"pick": "G"}), "pick"),
    ] {
        let r = vote(&gw, &id, body.clone()).await;
        assert_eq!(r.status, 400, "{body}: {}", r.text);
        let e = &r.json()["error"];
        assert_eq!(
            (e["code"].as_str(), e["param"].as_str()),
            (Some("invalid_vote"), Some(param)),
            "{body}: {e}"
        );
    }
    let misfit = vote(&gw, &id, json!({"pick": "E"})).await;
    assert!(
        misfit.text.contains("4 contestants (A to D)"),
        "{}",
        misfit.text
    );
    // The refused votes left it open.
    let r = vote(&gw, &id, json!({"pick": "pick c"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["winner"], four[2]);
    assert_eq!(r.json()["models"]["D"], four[3]);
    // All bad: every pair ties.
    let (id, three) = open(&["alpha", "beta", "gamma"]).await;
    let r = vote(&gw, &id, json!({"pick": "both bad"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(
        (r.json()["pick"].as_str(), r.json()["winner"].is_null()),
        (Some("bad"), true)
    );
    let b = board(&gw, "route=pool").await;
    assert_eq!(
        (b["votes"].as_u64(), b["comparisons"].as_u64()),
        (Some(2), Some(6))
    );
    let winner = &four[2];
    let w = standing(&b, winner);
    let also = if three.contains(winner) {
        (0, 0, 2, 2)
    } else {
        (0, 0, 0, 0)
    };
    assert_eq!(w, (3 + also.0, also.1, also.2, 3 + also.3), "{b}");
    if let Some(loser) = four.iter().find(|m| *m != winner && !three.contains(m)) {
        assert_eq!(standing(&b, loser), (0, 1, 0, 1));
    }
    let in_both = four
        .iter()
        .find(|m| *m != winner && three.contains(m))
        .unwrap();
    assert_eq!(standing(&b, in_both), (0, 1, 2, 3));

    // Votes are dated: a window after them is empty, one around them not.
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let later = board(&gw, &format!("route=pool&since={}", now + 60)).await;
    assert_eq!(
        (
            later["votes"].as_u64(),
            later["data"]
                .as_array()
                .unwrap()
                .iter()
                .all(|r| r["votes"] == 0)
        ),
        (Some(0), true)
    );
    let around = board(
        &gw,
        &format!("route=pool&since={}&until={}", now - 60, now + 60),
    )
    .await;
    assert_eq!(around["votes"], 2);
    assert_eq!(
        board(&gw, &format!("route=pool&until={}", now - 60)).await["votes"],
        0
    );

    // Pooled: both routes' votes over the union of their contestants.
    let r = post(&gw.base, &chat("duo", "a pair as before")).await;
    let id = r.json()["arena_id"].as_str().unwrap().to_owned();
    let r = vote(&gw, &id, json!({"pick": "A"})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let pair_winner = r.json()["winner"].as_str().unwrap().to_owned();
    let all = board(&gw, "route=*").await;
    assert_eq!(
        (all["route"].as_str(), all["routes"].clone()),
        (Some("*"), json!(["duo", "pool"]))
    );
    assert_eq!(all["votes"], 3);
    assert_eq!(all["data"].as_array().unwrap().len(), 6);
    let before = standing(&b, &pair_winner);
    let after = standing(&all, &pair_winner);
    assert_eq!((after.0, after.3), (before.0 + 1, before.3 + 1));
    assert_eq!(board(&gw, "route=duo").await["votes"], 1);
    let md = send(client().get(gw.url("/v1/arena/leaderboard?route=*&format=markdown"))).await;
    assert!(md.text.contains("| # | model |"), "{}", md.text);

    // Unknown parameters are named; times must be numbers; no route with
    // several is still a 400.
    let r = send(client().get(gw.url("/v1/arena/leaderboard?route=pool&from=1&zz=2"))).await;
    assert_eq!(r.status, 400, "{}", r.text);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("'from'") && msg.contains("'zz'") && msg.contains("since"),
        "{msg}"
    );
    let r = send(client().get(gw.url("/v1/arena/leaderboard?route=pool&since=yesterday"))).await;
    assert_eq!(
        (r.status, r.json()["error"]["param"].as_str()),
        (400, Some("since"))
    );
    let r = send(client().get(gw.url("/v1/arena/leaderboard"))).await;
    assert_eq!(
        (r.status, r.json()["error"]["param"].as_str()),
        (400, Some("route"))
    );
}

#[tokio::test]
async fn a_bad_contestants_field_is_a_400_that_says_what_is_allowed() {
    let (mock, gw) = world();
    for (value, says) in [
        (json!("alpha"), "must be a list"),
        (json!(["alpha"]), "names 1 model"),
        (
            json!(["alpha", "beta", "gamma", "delta", "broken", "gone", "alpha"]),
            "names 7 models",
        ),
        (json!(["alpha", "alpha"]), "\"alpha\" twice"),
        (json!(["alpha", 3]), "must list model names"),
        (
            json!(["alpha", "opus"]),
            "\"opus\" is not a contestant of arena \"pool\"",
        ),
    ] {
        let mut b = chat("pool", "hi");
        b["contestants"] = value.clone();
        let r = post(&gw.base, &b).await;
        assert_eq!(r.status, 400, "{value}: {}", r.text);
        let e = &r.json()["error"];
        assert_eq!(
            (e["param"].as_str(), e["type"].as_str()),
            (Some("contestants"), Some("invalid_request_error")),
            "{e}"
        );
        let msg = e["message"].as_str().unwrap();
        assert!(msg.contains(says), "{value}: {msg}");
        if says.contains("opus") {
            assert!(
                msg.contains("\"alpha\", \"beta\", \"gamma\", \"delta\""),
                "{msg}"
            );
        }
    }
    // A contestant of another arena is not in this one's pool.
    let r = post(&gw.base, &battle("duo", "hi", &["alpha", "beta"], false)).await;
    assert_eq!(
        (r.status, r.json()["error"]["param"].as_str()),
        (400, Some("contestants"))
    );
    let mut n = battle("pool", "hi", &["alpha", "beta", "gamma"], false);
    n["n"] = json!(3);
    let r = post(&gw.base, &n).await;
    assert_eq!(
        (r.status, r.json()["error"]["param"].as_str()),
        (400, Some("n"))
    );
    assert!(mock.received().await.is_empty(), "an upstream was called");
    // null is no choice: a pair as before.
    let mut b = chat("duo", "hi");
    b["contestants"] = Value::Null;
    let r = post(&gw.base, &b).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"].as_array().unwrap().len(), 2);
}

#[tokio::test]
async fn the_contestants_that_answer_are_the_battle() {
    let (_mock, gw) = world();
    // Two of three answer: a battle of two, recorded as such.
    for stream in [false, true] {
        let r = post(
            &gw.base,
            &battle("pool", "hi", &["alpha", "broken", "beta"], stream),
        )
        .await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(!r.text.contains("broke"), "{}", r.text);
        let id = r.header("x-conclave-arena-id").unwrap().to_owned();
        let texts: Vec<String> = if stream {
            streamed_texts(&r)
        } else {
            r.json()["choices"]
                .as_array()
                .unwrap()
                .iter()
                .map(|c| c["message"]["content"].as_str().unwrap().to_owned())
                .collect()
        };
        assert_eq!(texts.len(), 2, "{texts:?}");
        let v = vote(&gw, &id, json!({"pick": "C"})).await;
        assert_eq!(v.status, 400, "{}", v.text);
        let v = vote(&gw, &id, json!({"ranking": ["B", "A"]})).await;
        assert_eq!(v.status, 200, "{}", v.text);
        let models = v.json()["models"].clone();
        assert_eq!(
            models,
            json!({"A": model_of(&texts[0]), "B": model_of(&texts[1])})
        );
    }
    // One answer alone: nothing to vote on.
    let r = post(
        &gw.base,
        &battle("pool", "hi", &["gone", "broken", "gamma"], false),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-arena"), Some("incomplete"));
    assert!(r.json().get("arena_id").is_none());
    assert_eq!(r.json()["choices"].as_array().unwrap().len(), 1);
    // None: the route is exhausted.
    let r = post(&gw.base, &battle("pool", "hi", &["gone", "broken"], false)).await;
    assert!(r.status >= 500, "{}", r.text);
    assert!(!r.text.contains("arena_id"), "{}", r.text);
}

/// Three contestants that all answer: a plain request is a pair of them.
const TRIO: &str =
    "[routes.trio]\nstrategy = \"arena\"\ncontestants = [\"alpha\", \"beta\", \"gamma\"]\n\n";

#[tokio::test]
async fn a_budget_that_holds_two_contestants_refuses_three_before_any_call() {
    let mock = Srv::mock(MOCK);
    // "hi" with its chat template is 40 input tokens; with 100 output,
    // 140 a contestant: two fit 350, three (420) do not.
    let keys = "[[keys]]\nname = \"team\"\nkey_env = \"K\"\ndaily_tokens = 350\n\n";
    let gw = Srv::gateway_env(
        &format!(
            "{keys}{}",
            front_of(&mock.v1(), MODELS, &format!("{}{TRIO}", routes()))
        ),
        &[("K", "k-team")],
    );
    let h = [("authorization", "Bearer k-team")];
    let mut three = battle("trio", "hi", &["alpha", "beta", "gamma"], false);
    three["max_tokens"] = json!(100);
    let r = post_with(&gw.base, &three, &h).await;
    assert_eq!(r.status, 429, "{}", r.text);
    assert_eq!(r.json()["error"]["code"], "budget_exceeded", "{}", r.text);
    assert!(mock.received().await.is_empty(), "an upstream was called");
    // A pair, named or not, fits: a plain request reserves for two.
    let mut plain = chat("trio", "hi");
    plain["max_tokens"] = json!(100);
    let r = post_with(&gw.base, &plain, &h).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["choices"].as_array().unwrap().len(), 2);
    let mut two = battle("trio", "hi", &["alpha", "beta"], false);
    two["max_tokens"] = json!(100);
    let r = post_with(&gw.base, &two, &h).await;
    assert_eq!(r.status, 200, "{}", r.text);
}

/// The demo's arena (`config/demo.toml`: two cloud models and a local
/// one on its lane), in-process on paused time: all three battle
/// streamed, a ranking reveals them and ranks them.
#[tokio::test(start_paused = true)]
async fn the_demo_battles_its_three_models() {
    let gw = inproc::Gw::demo();
    let body = battle(
        "ab",
        "Which sort is stable?",
        &["frontier", "second-opinion", "gemma-large"],
        true,
    );
    let r = gw.chat(&body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let texts = streamed_texts(&r);
    assert_eq!(texts.len(), 3, "{}", r.text);
    assert!(texts.iter().all(|t| !t.is_empty()), "{texts:?}");
    let id = r.header("x-conclave-arena-id").unwrap().to_owned();
    let v = gw
        .post_with(
            &format!("/v1/arena/{id}/vote"),
            &json!({"ranking": ["B", "C", "A"]}),
            &[],
        )
        .await;
    assert_eq!(v.status, 200, "{}", v.text);
    let m = v.json()["models"].clone();
    let mut names: Vec<&str> = ["A", "B", "C"]
        .iter()
        .map(|l| m[*l].as_str().unwrap())
        .collect();
    let (a, b, c) = (
        names[0].to_owned(),
        names[1].to_owned(),
        names[2].to_owned(),
    );
    names.sort();
    assert_eq!(names, ["frontier", "gemma-large", "second-opinion"]);
    let board = gw.get("/v1/arena/leaderboard?route=ab").await.json();
    assert_eq!(standing(&board, &b), (2, 0, 0, 2));
    assert_eq!(standing(&board, &c), (1, 1, 0, 2));
    assert_eq!(standing(&board, &a), (0, 2, 0, 2));
    assert_eq!(board["data"][0]["model"], b.as_str());
}
