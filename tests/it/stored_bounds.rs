//! Stored responses stay within `server.responses_max_per_key`,
//! `…_max_bytes_per_key` and `…_max_bytes` in every backend: the
//! in-memory store (no `state_path`), the SQLite file, and a real
//! `redis-server` (`[state]`). At a bound the writing key's oldest answers
//! are evicted, never another key's; an answer that alone cannot fit is
//! not stored. The Redis sweep forgets expired answers and their figures.
//! And a Redis full at its `maxmemory` refuses a budgeted `fail_closed`
//! key's requests with 503 `state_unavailable` before any upstream call:
//! its spend never passes its budget.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::{Duration, UNIX_EPOCH};

use common::eventually;
use common::inproc;
use common::redis::RedisServer;
use conclave::store::responses::StoredResponse;
use serde_json::{Value, json};

const ONE: &[(&str, &str)] = &[("authorization", "Bearer k-one")];
const TWO: &[(&str, &str)] = &[("authorization", "Bearer k-two")];
const ENV: &[(&str, &str)] = &[("K1", "k-one"), ("K2", "k-two"), ("K3", "k-fill")];

/// A gateway config: `server` lines, then `extra` tables (`[state]`).
fn config(server: &str, extra: &str) -> String {
    format!(
        r#"
[server]
{server}

{extra}

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.alpha]
reply = {{ text = "hi" }}
usage = {{ prompt_tokens = 10, completion_tokens = 50 }}

[models.alpha]
upstream = "sim"

[[keys]]
name = "one"
key_env = "K1"

[[keys]]
name = "two"
key_env = "K2"
daily_tokens = 2000

[[keys]]
name = "fill"
key_env = "K3"
"#
    )
}

/// An answer of `key` whose input says `said`.
fn answer(id: &str, key: &str, said: &str) -> StoredResponse {
    StoredResponse {
        id: id.into(),
        key: key.into(),
        previous: None,
        input: vec![json!({"id": "msg_1", "type": "message", "role": "user", "content": said})],
        response: json!({"id": id, "object": "response", "status": "completed", "model": "alpha",
                         "output": [], "output_text": "hello"}),
    }
}

/// The bytes an answer counts for (its stored text).
fn size(a: &StoredResponse) -> u64 {
    (a.id.len()
        + a.key.len()
        + serde_json::to_string(&a.input).unwrap().len()
        + serde_json::to_string(&a.response).unwrap().len()) as u64
}

/// The bounds the tests use, in units of one small answer: 3 answers and
/// 3.5 units per key, 5.5 units in all.
fn bounds_lines() -> (String, u64) {
    let unit = size(&answer("resp_t1", "one", "question"));
    (
        format!(
            "responses_max_per_key = 3\nresponses_max_bytes_per_key = {}\nresponses_max_bytes = {}\n",
            unit * 7 / 2,
            unit * 11 / 2
        ),
        unit,
    )
}

async fn put(gw: &inproc::Gw, answers: Vec<StoredResponse>) {
    let r = gw.responses();
    for a in answers {
        r.put(a);
    }
    r.flush(Duration::from_secs(10)).await;
}

/// Which of `ids` the key behind `auth` reads back (200), in order.
async fn kept<'a>(gw: &inproc::Gw, auth: &[(&str, &str)], ids: &[&'a str]) -> Vec<&'a str> {
    let mut out = Vec::new();
    for id in ids {
        let r = gw.get_with(&format!("/v1/responses/{id}"), auth).await;
        match r.status {
            200 => out.push(*id),
            404 => {}
            s => panic!("{id}: {s} {}", r.text),
        }
    }
    out
}

const ONES: &[&str] = &[
    "resp_t1", "resp_t2", "resp_t3", "resp_t4", "resp_t5", "resp_tb", "resp_th", "resp_tc",
];
const TWOS: &[&str] = &["resp_o1", "resp_o2", "resp_o3", "resp_o4"];

/// The same story on every backend (see the steps).
async fn bounds_hold(gw: &inproc::Gw, unit: u64) {
    let small = |id: &str, key: &str| answer(id, key, "question");
    put(
        gw,
        vec![
            small("resp_o1", "two"),
            small("resp_o2", "two"),
            small("resp_o3", "two"),
            small("resp_t1", "one"),
            small("resp_t2", "one"),
        ],
    )
    .await;
    assert_eq!(kept(gw, TWO, TWOS).await, ["resp_o1", "resp_o2", "resp_o3"]);
    assert_eq!(kept(gw, ONE, ONES).await, ["resp_t1", "resp_t2"]);

    // The total (5.5 units) is reached: one's own oldest goes, two's stay.
    put(gw, vec![small("resp_t3", "one")]).await;
    assert_eq!(kept(gw, ONE, ONES).await, ["resp_t2", "resp_t3"]);
    assert_eq!(kept(gw, TWO, TWOS).await, ["resp_o1", "resp_o2", "resp_o3"]);
    put(gw, vec![small("resp_t4", "one"), small("resp_t5", "one")]).await;
    assert_eq!(kept(gw, ONE, ONES).await, ["resp_t4", "resp_t5"]);

    // Three answers per key: two's oldest goes.
    put(gw, vec![small("resp_o4", "two")]).await;
    assert_eq!(kept(gw, TWO, TWOS).await, ["resp_o2", "resp_o3", "resp_o4"]);

    // Two units: one's bytes, then the total, evict both of one's.
    let big = answer("resp_tb", "one", &"x".repeat(unit as usize));
    assert!((2 * unit - 20..=2 * unit).contains(&size(&big)));
    put(gw, vec![big]).await;
    assert_eq!(kept(gw, ONE, ONES).await, ["resp_tb"]);
    assert_eq!(kept(gw, TWO, TWOS).await, ["resp_o2", "resp_o3", "resp_o4"]);

    // Over a key's bytes alone: not stored, nothing evicted.
    let huge = answer("resp_th", "one", &"x".repeat(3 * unit as usize));
    put(gw, vec![huge]).await;
    // Would fit one's bytes but only with two's room: not stored either.
    let third = answer("resp_tc", "one", &"x".repeat(2 * unit as usize));
    assert!(size(&third) <= unit * 7 / 2);
    put(gw, vec![third]).await;
    assert_eq!(kept(gw, ONE, ONES).await, ["resp_tb"]);
    assert_eq!(kept(gw, TWO, TWOS).await, ["resp_o2", "resp_o3", "resp_o4"]);

    // Deleting frees room: one stores again without touching two's.
    let r = gw
        .send(
            axum::http::Request::builder()
                .method("DELETE")
                .uri("/v1/responses/resp_tb")
                .header(ONE[0].0, ONE[0].1)
                .body(axum::body::Body::empty())
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, 200, "{}", r.text);
    put(gw, vec![small("resp_t1", "one"), small("resp_t2", "one")]).await;
    assert_eq!(kept(gw, ONE, ONES).await, ["resp_t1", "resp_t2"]);
    assert_eq!(kept(gw, TWO, TWOS).await, ["resp_o2", "resp_o3", "resp_o4"]);
}

#[tokio::test]
async fn the_in_memory_store_is_bounded() {
    let (lines, unit) = bounds_lines();
    let gw = inproc::Gw::start_with(&config(&lines, ""), ENV, UNIX_EPOCH + inproc::START);
    bounds_hold(&gw, unit).await;
}

#[tokio::test]
async fn the_sqlite_file_is_bounded() {
    let (lines, unit) = bounds_lines();
    let server = format!("{lines}state_path = \"{{dir}}/state.db\"\n");
    let gw = inproc::Gw::start_with(&config(&server, ""), ENV, UNIX_EPOCH + inproc::START);
    bounds_hold(&gw, unit).await;
}

fn state(redis: &RedisServer) -> String {
    format!("[state]\nurl = \"{}\"\ntimeout = \"2s\"\n", redis.url())
}

/// The figures the Redis store keeps (`n:<key>`, `b:<key>`, `total`).
fn usage(redis: &RedisServer) -> Vec<String> {
    let all = redis.cli(&["HGETALL", "{conclave:response}:#usage"]);
    let mut lines: Vec<String> = all.lines().map(str::to_owned).collect();
    let mut pairs: Vec<String> = lines
        .chunks_mut(2)
        .filter(|p| p.len() == 2 && p[0] != "seq")
        .map(|p| format!("{}={}", p[0], p[1]))
        .collect();
    pairs.sort();
    pairs
}

#[tokio::test]
async fn redis_is_bounded_and_its_figures_follow_the_answers() {
    let redis = RedisServer::start();
    let (lines, unit) = bounds_lines();
    let gw = inproc::Gw::start_with(
        &config(&lines, &state(&redis)),
        ENV,
        UNIX_EPOCH + inproc::START,
    );
    bounds_hold(&gw, unit).await;
    let sizes = |ids: &[&str], key: &str| -> u64 {
        ids.iter()
            .map(|id| size(&answer(id, key, "question")))
            .sum()
    };
    let (one, two) = (
        sizes(&["resp_t1", "resp_t2"], "one"),
        sizes(&["resp_o2", "resp_o3", "resp_o4"], "two"),
    );
    assert_eq!(
        usage(&redis),
        [
            format!("b:one={one}"),
            format!("b:two={two}"),
            "n:one=2".into(),
            "n:two=3".into(),
            format!("total={}", one + two),
        ]
    );
    assert_eq!(redis.cli(&["HLEN", "{conclave:response}:#meta"]), "5");
    assert_eq!(redis.cli(&["ZCARD", "{conclave:response}:#by:one"]), "2");
}

#[tokio::test]
async fn the_redis_sweep_forgets_expired_answers_and_their_figures() {
    let redis = RedisServer::start();
    let toml = config("responses_retention = \"1h\"\n", &state(&redis));
    let gw = inproc::Gw::start_with(&toml, ENV, UNIX_EPOCH + inproc::START);
    put(
        &gw,
        vec![answer("resp_a1", "one", "q"), answer("resp_a2", "two", "q")],
    )
    .await;
    assert_eq!(usage(&redis).len(), 5, "{:?}", usage(&redis));
    assert_eq!(gw.responses().sweep().await, 0, "nothing expired yet");
    assert_eq!(redis.cli(&["EXISTS", "{conclave:response}:resp_a1"]), "1");
    // A replica whose clock reads two hours later sweeps them.
    let later = inproc::Gw::start_with(
        &toml,
        ENV,
        UNIX_EPOCH + inproc::START + Duration::from_secs(7200),
    );
    let gone = later.responses().sweep().await;
    // Its own first sweep (at start) may have taken them already.
    assert!(gone <= 2);
    let swept = eventually(10, || async { usage(&redis).is_empty() }).await;
    assert!(swept, "{:?}", usage(&redis));
    assert_eq!(redis.cli(&["HLEN", "{conclave:response}:#meta"]), "0");
    assert_eq!(redis.cli(&["ZCARD", "{conclave:response}:#exp"]), "0");
    assert_eq!(redis.cli(&["EXISTS", "{conclave:response}:resp_a1"]), "0");
    assert_eq!(kept(&gw, ONE, &["resp_a1"]).await, Vec::<&str>::new());
}

/// Bytes Redis uses, and its `maxmemory`.
fn memory(redis: &RedisServer) -> (u64, u64) {
    let info = redis.cli(&["INFO", "memory"]);
    let field = |name: &str| -> u64 {
        info.lines()
            .find_map(|l| l.strip_prefix(&format!("{name}:")))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {info}"))
    };
    (field("used_memory"), field("maxmemory"))
}

/// Tokens key `two` has spent in Redis, over every day.
fn spent(redis: &RedisServer) -> u64 {
    let keys = redis.cli(&["--scan", "--pattern", "{conclave:key:two}:spent:*"]);
    keys.lines()
        .filter(|k| !k.is_empty())
        .map(|k| redis.cli(&["HGET", k, "t"]).parse::<u64>().unwrap_or(0))
        .sum()
}

fn ask(said: &str) -> Value {
    json!({"model": "alpha", "input": said, "max_output_tokens": 100})
}

#[tokio::test]
async fn a_full_redis_refuses_a_fail_closed_key_before_its_request_is_admitted() {
    let redis = RedisServer::start();
    let gw = inproc::Gw::start_with(
        &config("", &state(&redis)),
        ENV,
        UNIX_EPOCH + inproc::START - Duration::from_secs(12 * 3600),
    );
    // Room for about 2 MB more: stored answers take what they can (a
    // write Redis refuses is not stored).
    let (used, _) = memory(&redis);
    let max = (used + (2 << 20)).to_string();
    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", &max]), "OK");
    assert_eq!(
        redis.cli(&["CONFIG", "GET", "maxmemory-policy"]),
        "maxmemory-policy\nnoeviction"
    );
    let fill: &[(&str, &str)] = &[("authorization", "Bearer k-fill")];
    let input = "y".repeat(400_000);
    for _ in 0..8 {
        let r = gw.post_with("/v1/responses", &ask(&input), fill).await;
        assert_eq!(r.status, 200, "{}", r.text);
        gw.responses().flush(Duration::from_secs(10)).await;
    }
    assert!(!usage(&redis).is_empty(), "answers were stored");
    // Redis refuses a write whose command would take it past
    // `maxmemory`, so at rest it stays just under; a Redis past it (one
    // big write let through, buffers, fragmentation) is one whose limit
    // is now below what it holds.
    // (After Redis's cron has given back the big requests' buffers: no
    // client holds more than a small buffer.)
    let small = |line: &str| {
        line.split(' ')
            .find_map(|f| f.strip_prefix("tot-mem="))
            .and_then(|m| m.parse::<u64>().ok())
            .is_some_and(|m| m < 64 << 10)
    };
    let given_back = eventually(10, || async {
        redis.cli(&["CLIENT", "LIST"]).lines().all(small)
    })
    .await;
    assert!(given_back, "{}", redis.cli(&["CLIENT", "LIST"]));
    let (used, _) = memory(&redis);
    let max = (used - (300 << 10)).to_string();
    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", &max]), "OK");
    let (used, max) = memory(&redis);
    assert!(used > max, "Redis is not full: {used} of {max}");

    let asked_before = gw.asked("sim", "alpha").len();
    for i in 0..30 {
        let r = gw
            .post_with("/v1/responses", &ask(&format!("hello {i}")), TWO)
            .await;
        assert_eq!(r.status, 503, "request {i}: {}", r.text);
        assert_eq!(r.json()["error"]["code"], "state_unavailable", "{}", r.text);
        assert_eq!(r.header("retry-after"), Some("1"));
    }
    assert_eq!(
        gw.asked("sim", "alpha").len(),
        asked_before,
        "no upstream call"
    );
    assert_eq!(spent(&redis), 0);

    // Room again: the key is served until its budget is spent, and no
    // further.
    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", "0"]), "OK");
    let (mut served, mut refused) = (0, 0);
    for i in 0..60 {
        let r = gw
            .post_with("/v1/responses", &ask(&format!("hello {i}")), TWO)
            .await;
        match r.status {
            200 => served += 1,
            429 => refused += 1,
            s => panic!("request {i}: {s} {}", r.text),
        }
    }
    assert!(
        served > 0 && refused > 0,
        "{served} served, {refused} refused"
    );
    // Settlements are written off the request path: give them a moment.
    let recorded = eventually(10, || async { spent(&redis) == served * 60 }).await;
    let total = spent(&redis);
    assert!(recorded, "every served request recorded: {total}");
    assert!(total <= 2000, "spent {total} of a 2000 budget");
}
