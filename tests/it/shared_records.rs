//! Arenas, oracle spend and stored Responses on a shared Redis, black-box:
//! two gateway replicas in front of one `conclave mock`, sharing one real
//! `redis-server`. What one replica records, the other sees; a replica
//! restarted keeps it; Redis down is a clear error, not a hang.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use tokio::time::Instant;

use common::redis::RedisServer;
use common::*;
use serde_json::{Value, json};

const MOCK: &str = r#"
[upstreams.sim]
kind = "mock"

[upstreams.sim.models.alpha]
reply = { text = "First answer." }

[upstreams.sim.models.beta]
reply = { text = "Second answer." }

[upstreams.sim.models.base]
reply = { text = "An easy answer." }

[[upstreams.sim.models.base.rules]]
when_contains = "oracle budget exhausted"
then = { reply = { text = "Answered on my own." } }

[[upstreams.sim.models.base.rules]]
when_contains = "SAGE-SAYS"
then = { reply = { text = "Final answer with the expert's help." } }

[[upstreams.sim.models.base.rules]]
when_contains = "hard"
then = { reply = { tool_call = { name = "oracle_consult", arguments = { question = "Is a spinlock sound here?" } } } }

[upstreams.sim.models.sage]
reply = { text = "SAGE-SAYS: no, use a mutex." }
usage = { prompt_tokens = 100, completion_tokens = 6 }
"#;

const KEYS: &str =
    "[[keys]]\nname = \"one\"\nkey_env = \"K1\"\n\n[[keys]]\nname = \"two\"\nkey_env = \"K2\"\n\n";
const ENV: &[(&str, &str)] = &[("K1", "k-one"), ("K2", "k-two")];
const ONE: (&str, &str) = ("authorization", "Bearer k-one");
const TWO: (&str, &str) = ("authorization", "Bearer k-two");

/// A replica's config: the mock's models, an arena and an oracle route,
/// two keys, and the shared state at `redis`.
fn config(mock: &Srv, redis: &str) -> String {
    let routes = "[routes.ab]\nstrategy = \"arena\"\ncontestants = [\"alpha\", \"beta\"]\n\n\
         [routes.wise]\nstrategy = \"oracle\"\nbase = \"base\"\noracle = \"sage\"\n\
         oracle_max_tokens = 25\nmax_session_cost_usd = 0.06\n\n\
         [models.sage]\nupstream = \"up\"\nprice = { input_per_mtok = 0.0, output_per_mtok = 2000.0 }\n\n";
    front_of(&mock.v1(), &["alpha", "beta", "base"], routes).replace(
        "[upstreams.up]",
        &format!("[state]\nurl = \"{redis}\"\ntimeout = \"500ms\"\n\n{KEYS}[upstreams.up]"),
    )
}

fn replica(toml: &str) -> Srv {
    Srv::gateway_env(toml, ENV)
}

async fn respond(gw: &impl Served, body: &Value) -> Resp {
    send(
        client()
            .post(gw.url("/v1/responses"))
            .header(ONE.0, ONE.1)
            .json(body),
    )
    .await
}

async fn get(gw: &impl Served, path: &str, key: (&str, &str)) -> Resp {
    send(client().get(gw.url(path)).header(key.0, key.1)).await
}

async fn vote(gw: &impl Served, id: &str, pick: &str) -> Resp {
    send(
        client()
            .post(gw.url(&format!("/v1/arena/{id}/vote")))
            .header(ONE.0, ONE.1)
            .json(&json!({ "pick": pick })),
    )
    .await
}

async fn board(gw: &impl Served) -> Value {
    let r = get(gw, "/v1/arena/leaderboard?route=ab", ONE).await;
    assert_eq!(r.status, 200, "{}", r.text);
    r.json()
}

fn wins(board: &Value) -> u64 {
    board["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["wins"].as_u64().unwrap())
        .sum()
}

#[tokio::test]
async fn an_arena_opened_on_one_replica_is_voted_on_the_other_and_survives_a_restart() {
    let redis = RedisServer::start();
    let mock = Srv::mock(MOCK);
    let toml = config(&mock, &redis.url());
    // `a` is killed: a process.
    let (a, b) = (Proc::gateway_env(&toml, ENV), replica(&toml));
    let r = post_with(&a.base, &chat("ab", "compare these"), &[ONE]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let id = r.json()["arena_id"].as_str().unwrap().to_owned();
    // Another key cannot vote on it, on either replica.
    let theirs = send(
        client()
            .post(b.url(&format!("/v1/arena/{id}/vote")))
            .header(TWO.0, TWO.1)
            .json(&json!({"pick": "A"})),
    )
    .await;
    assert_eq!(theirs.status, 403, "{}", theirs.text);
    let r = vote(&b, &id, "A").await;
    assert_eq!(r.status, 200, "{}", r.text);
    let v = r.json();
    assert_eq!(v["recorded"], true);
    assert_eq!(v["winner"], v["a"]);
    // Voting again, on either replica, is told the first vote.
    for again in [vote(&a, &id, "B").await, vote(&b, &id, "B").await] {
        assert_eq!(again.status, 409, "{}", again.text);
    }
    assert_eq!(vote(&a, "arena-unknown", "A").await.status, 404);
    let (on_a, on_b) = (board(&a).await, board(&b).await);
    assert_eq!(on_a, on_b);
    assert_eq!(on_a["votes"], 1, "{on_a}");
    assert_eq!(wins(&on_a), 1, "{on_a}");
    let winner = v["winner"].as_str().unwrap();
    let top = &on_a["data"][0];
    assert_eq!(
        (top["model"].as_str(), top["wins"].as_u64()),
        (Some(winner), Some(1))
    );

    // An arena opened before a restart is voted on after it.
    let r = post_with(&a.base, &chat("ab", "one more"), &[ONE]).await;
    let open = r.json()["arena_id"].as_str().unwrap().to_owned();
    a.signal("KILL");
    drop(a);
    let a = Proc::gateway_env(&toml, ENV);
    assert_eq!(board(&a).await, on_b);
    assert_eq!(vote(&a, &open, "tie").await.status, 200);
    assert_eq!(board(&b).await["votes"], 2);
}

/// Polls `path` on `gw` (for up to 5 s) until it answers `want`.
async fn answers(gw: &impl Served, path: &str, key: (&str, &str), want: u16) -> Resp {
    eventually(5, || async { get(gw, path, key).await.status == want }).await;
    get(gw, path, key).await
}

#[tokio::test]
async fn a_response_stored_on_one_replica_is_read_continued_and_deleted_on_the_other() {
    let redis = RedisServer::start();
    let mock = Srv::mock(MOCK);
    let toml = config(&mock, &redis.url());
    // `a` is killed: a process.
    let (a, b) = (Proc::gateway_env(&toml, ENV), replica(&toml));
    let body = json!({"model": "alpha", "input": "my name is Ada", "store": true});
    let r = respond(&a, &body).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let first = r.json();
    let id = first["id"].as_str().unwrap().to_owned();
    let path = format!("/v1/responses/{id}");

    let got = answers(&b, &path, ONE, 200).await;
    assert_eq!(got.status, 200, "{}", got.text);
    assert_eq!(got.json()["id"], first["id"]);
    assert_eq!(got.json()["output"], first["output"]);
    let items = get(&b, &format!("{path}/input_items"), ONE).await;
    assert_eq!(items.status, 200, "{}", items.text);
    assert!(items.text.contains("my name is Ada"), "{}", items.text);
    // Another key cannot read it, on either replica.
    for theirs in [get(&a, &path, TWO).await, get(&b, &path, TWO).await] {
        assert_eq!(theirs.status, 404, "{}", theirs.text);
    }

    // Continued on B: the model sees the first turn and its answer.
    let next = json!({"model": "alpha", "input": "what is my name?", "previous_response_id": id});
    let r = respond(&b, &next).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let asked = mock.asked("alpha").await;
    let said = asked.last().unwrap()["messages"].to_string();
    for part in ["my name is Ada", "First answer.", "what is my name?"] {
        assert!(said.contains(part), "{part} not in {said}");
    }
    let second = r.json()["id"].as_str().unwrap().to_owned();

    // A restarted replica still has both.
    a.signal("KILL");
    drop(a);
    let a = Proc::gateway_env(&toml, ENV);
    assert_eq!(get(&a, &path, ONE).await.status, 200);
    assert_eq!(
        answers(&a, &format!("/v1/responses/{second}"), ONE, 200)
            .await
            .status,
        200
    );

    // Deleted on B by another key: nothing; by its own: gone on A too.
    let del = |base: &str, key: (&str, &str)| {
        send(
            client()
                .delete(format!("{base}{path}"))
                .header(key.0, key.1),
        )
    };
    assert_eq!(del(&b.base, TWO).await.status, 404);
    let r = del(&b.base, ONE).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["deleted"], true);
    assert_eq!(get(&a, &path, ONE).await.status, 404);
    assert_eq!(del(&a.base, ONE).await.status, 404);
    // Each answer is one key with its retention as TTL (30 days by default).
    let ttl: i64 = redis
        .cli(&["TTL", &format!("{{conclave:response}}:{second}")])
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 29 * 86_400 && ttl <= 30 * 86_400, "{ttl}");
}

#[tokio::test]
async fn oracle_spend_on_one_replica_counts_against_the_cap_on_the_other() {
    let redis = RedisServer::start();
    let mock = Srv::mock(MOCK);
    let toml = config(&mock, &redis.url());
    let (a, b) = (replica(&toml), replica(&toml));
    // A consult reserves $0.05 of the session's $0.06 and costs $0.012; a
    // second would reserve $0.05 more: over the cap, on any replica.
    let session = [ONE, ("x-conclave-session", "s1")];
    let r = post_with(&a.base, &chat("wise", "hard one"), &session).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Final answer with the expert's help.",
        "{}",
        r.text
    );
    let r = post_with(&b.base, &chat("wise", "hard two"), &session).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Answered on my own.",
        "{}",
        r.text
    );
    let ev = b.events_of(&["oracle_consult"], 1).await;
    assert!(
        ev[0]["error"]
            .as_str()
            .unwrap()
            .contains("this session has spent $0.0120 of its $0.0600"),
        "{ev:?}"
    );
    // Another session has its own budget.
    let other = [ONE, ("x-conclave-session", "s2")];
    let r = post_with(&b.base, &chat("wise", "hard three"), &other).await;
    assert_eq!(
        r.json()["choices"][0]["message"]["content"],
        "Final answer with the expert's help."
    );
    assert_eq!(mock.asked("sage").await.len(), 2);
}

#[tokio::test]
async fn redis_down_is_a_clear_error_within_the_timeout_not_a_hang() {
    let mut redis = RedisServer::start();
    let mock = Srv::mock(MOCK);
    let toml = config(&mock, &redis.url());
    let a = replica(&toml);
    let r = post_with(&a.base, &chat("ab", "compare these"), &[ONE]).await;
    let id = r.json()["arena_id"].as_str().unwrap().to_owned();
    redis.stop();
    let start = Instant::now();
    let r = vote(&a, &id, "A").await;
    assert_eq!(r.status, 500, "{}", r.text);
    assert_eq!(r.json()["error"]["type"], "server_error", "{}", r.text);
    let r = get(&a, "/v1/arena/leaderboard?route=ab", ONE).await;
    assert_eq!(r.status, 500, "{}", r.text);
    let r = get(&a, "/v1/responses/resp_abc", ONE).await;
    assert_eq!(r.status, 500, "{}", r.text);
    assert!(r.text.contains("could not be read"), "{}", r.text);
    // An arena still answers, with nothing to vote on; an oracle consult
    // is refused and the base answers alone.
    let r = post_with(&a.base, &chat("ab", "again"), &[ONE]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert!(r.json().get("arena_id").is_none(), "{}", r.text);
    let r = post_with(&a.base, &chat("wise", "hard one"), &[ONE]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(mock.asked("sage").await.len(), 0);
    // Each ask is bounded by the 500 ms state timeout: a hang would never
    // end. Generous, for a busy machine.
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
    assert!(!a.metrics().await.is_empty());
}

/// A three-model battle on a shared Redis: opened on one replica, ranked
/// on the other, the same pairwise counts on both; a pick beyond its size
/// leaves it open there too; a vote and an open pair written before
/// N-way arenas (no `models`, undated) still read and close.
#[tokio::test]
async fn an_n_way_battle_is_voted_and_ranked_alike_on_either_replica() {
    let redis = RedisServer::start();
    let mock = Srv::mock(MOCK);
    let toml = config(&mock, &redis.url()).replace(
        "[routes.ab]\n",
        "[routes.trio]\nstrategy = \"arena\"\ncontestants = [\"alpha\", \"beta\", \"base\"]\n\n[routes.ab]\n",
    );
    let (a, b) = (replica(&toml), replica(&toml));
    let mut body = chat("trio", "compare three");
    body["contestants"] = json!(["base", "alpha", "beta"]);
    let r = post_with(&a.base, &body, &[ONE]).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let id = r.json()["arena_id"].as_str().unwrap().to_owned();
    let texts: Vec<String> = r.json()["choices"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["message"]["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(texts.len(), 3);
    let pick = |body: Value| {
        send(
            client()
                .post(b.url(&format!("/v1/arena/{id}/vote")))
                .header(ONE.0, ONE.1)
                .json(&body),
        )
    };
    let r = pick(json!({"pick": "D"})).await;
    assert_eq!(
        (r.status, r.json()["error"]["param"].as_str()),
        (400, Some("pick")),
        "{}",
        r.text
    );
    let r = pick(json!({"ranking": ["B", "A"]})).await;
    assert_eq!(
        (r.status, r.json()["error"]["param"].as_str()),
        (400, Some("ranking")),
        "{}",
        r.text
    );
    let r = pick(json!({"ranking": ["B", "C", "A"]})).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let m = r.json()["models"].clone();
    let by = |l: &str| m[l].as_str().unwrap().to_owned();
    let writes = |model: &str| match model {
        "alpha" => "First answer.",
        "beta" => "Second answer.",
        _ => "An easy answer.",
    };
    assert_eq!(
        texts,
        [writes(&by("A")), writes(&by("B")), writes(&by("C"))]
    );
    let board = |gw: &Srv| {
        let url = gw.url("/v1/arena/leaderboard?route=trio");
        async move {
            let r = send(client().get(url).header(ONE.0, ONE.1)).await;
            assert_eq!(r.status, 200, "{}", r.text);
            r.json()
        }
    };
    let (on_a, on_b) = (board(&a).await, board(&b).await);
    assert_eq!(on_a, on_b);
    let row = |v: &Value, model: &str| {
        let r = v["data"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["model"] == model)
            .unwrap()
            .clone();
        (
            r["wins"].as_u64().unwrap(),
            r["losses"].as_u64().unwrap(),
            r["ties"].as_u64().unwrap(),
        )
    };
    assert_eq!(row(&on_a, &by("B")), (2, 0, 0));
    assert_eq!(row(&on_a, &by("C")), (1, 1, 0));
    assert_eq!(row(&on_a, &by("A")), (0, 2, 0));
    assert_eq!(
        (on_a["votes"].as_u64(), on_a["comparisons"].as_u64()),
        (Some(1), Some(3))
    );

    // Written before N-way arenas: an undated pair's vote and an open pair.
    redis.cli(&[
        "RPUSH",
        "{conclave:arena}:votes:trio",
        r#"["alpha","beta","a"]"#,
    ]);
    redis.cli(&[
        "HSET",
        "{conclave:arena}:open:arena-old",
        "route",
        "trio",
        "model_a",
        "beta",
        "model_b",
        "base",
        "key",
        "one",
        "excerpt",
        "",
        "created",
        "1",
        "expires",
        "99999999999",
    ]);
    let r = send(
        client()
            .post(a.url("/v1/arena/arena-old/vote"))
            .header(ONE.0, ONE.1)
            .json(&json!({"pick": "all bad"})),
    )
    .await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.json()["models"], json!({"A": "beta", "B": "base"}));
    let after = board(&b).await;
    assert_eq!(after["votes"], 3);
    assert_eq!(row(&after, "alpha").0, row(&on_a, "alpha").0 + 1);
    assert_eq!(row(&after, "base").2, 1);
    // The undated vote is not in a window with a start.
    let r = send(
        client()
            .get(b.url("/v1/arena/leaderboard?route=trio&since=1000"))
            .header(ONE.0, ONE.1),
    )
    .await;
    assert_eq!(r.json()["votes"], 2, "{}", r.text);
}
