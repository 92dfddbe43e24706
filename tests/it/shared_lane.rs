//! The local lane shared across replicas: two gateways on one real
//! `redis-server` in front of one llama-swap (the mock server playing it,
//! one model loaded at a time, 300 ms a swap) group their calls by model
//! as one gateway does, and a replica killed while holding the lease
//! blocks the other no longer than `lease_ttl`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use tokio::time::Instant;

use common::redis::RedisServer;
use common::*;

fn llama_swap() -> Srv {
    Srv::mock(
        r#"
[upstreams.sim]
kind = "mock"
swap_delay = "300ms"

[upstreams.sim.models.a]
reply = { text = "from a" }
ttft = "1s"

[upstreams.sim.models.b]
reply = { text = "from b" }
ttft = "1s"

[upstreams.sim.models.slow]
reply = { text = "from slow" }
ttft = "20s"
"#,
    )
}

/// A gateway in front of `mock`, sharing its lane on `redis` if given.
fn replica(mock: &Srv, redis: Option<&RedisServer>) -> Srv {
    Srv::gateway(&replica_toml(mock, redis))
}

/// The config of [`replica`].
fn replica_toml(mock: &Srv, redis: Option<&RedisServer>) -> String {
    let state = redis
        .map(|r| {
            format!(
                "[state]\nurl = \"{}\"\ntimeout = \"500ms\"\nlease_ttl = \"2s\"\n",
                r.url()
            )
        })
        .unwrap_or_default();
    format!(
        r#"
{state}
[upstreams.local]
kind = "openai"
base_url = "{v1}"
llama_swap = "{base}"
probe_cache = "50ms"
timeout = "30s"

[models.a]
upstream = "local"

[models.b]
upstream = "local"

[models.slow]
upstream = "local"
"#,
        v1 = mock.v1(),
        base = mock.base,
    )
}

async fn loads(mock: &Srv) -> u64 {
    mock.stats().await["loads"].as_u64().unwrap()
}

/// Loads `a`, then sends `A B A B A` in that order (each once the one
/// before is in flight), call `i` to `replicas[i % len]`; the models
/// llama-swap loaded meanwhile. Each answer takes 1 s, so all five are in
/// flight or queued together unless the machine stalls the test for most
/// of a second.
async fn swaps_of(mock: &Srv, replicas: &[&Srv]) -> u64 {
    assert_eq!(
        post(&replicas[0].base, &chat("a", "warm")).await.status,
        200
    );
    let before = loads(mock).await;
    let mut calls = Vec::new();
    for (i, m) in ["a", "b", "a", "b", "a"].iter().enumerate() {
        let base = replicas[i % replicas.len()].base.clone();
        let body = chat(m, &format!("call {i}"));
        calls.push(tokio::spawn(async move { post(&base, &body).await }));
        let in_flight = || async {
            let mut n = 0.0;
            for r in replicas {
                n += samples(&r.metrics().await, "conclave_inflight_requests", &[])
                    .iter()
                    .sum::<f64>();
            }
            n
        };
        let sent = eventually(10, || async { in_flight().await > i as f64 }).await;
        assert!(sent, "call {i} never arrived");
    }
    for c in calls {
        let r = c.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text);
    }
    loads(mock).await - before
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn interleaved_calls_on_two_replicas_swap_no_more_than_on_one() {
    let redis = RedisServer::start();
    let mock = llama_swap();
    let one = replica(&mock, None);
    let alone = swaps_of(&mock, &[&one]).await;
    let (r1, r2) = (replica(&mock, Some(&redis)), replica(&mock, Some(&redis)));
    let shared = swaps_of(&mock, &[&r1, &r2]).await;
    eprintln!("A B A B A: {alone} swap(s) on one replica, {shared} on two sharing the lane");
    assert_eq!(alone, 1, "one replica: a a a, then b b");
    assert!(shared <= alone, "two replicas swapped {shared} times");
    // Nothing is held once the calls are done; what the lease wrote expires.
    let holds = redis.cli(&["HLEN", "{conclave:lane:local}:holds"]);
    assert_eq!(holds.trim(), "0", "{holds}");
    let ttl: i64 = redis
        .cli(&["PTTL", "{conclave:lane:local}:fence"])
        .trim()
        .parse()
        .unwrap();
    assert!(ttl > 0, "the fence counter expires: {ttl}");
}

#[tokio::test]
async fn a_killed_replica_holds_the_lane_no_longer_than_lease_ttl() {
    let redis = RedisServer::start();
    let mock = llama_swap();
    // Replica 1 is killed: a process.
    let r1 = Proc::gateway(&replica_toml(&mock, Some(&redis)));
    let r2 = replica(&mock, Some(&redis));
    // Replica 1 serves slow (20 s) and holds the lease for it.
    let base = r1.base.clone();
    let _held = tokio::spawn(async move { post(&base, &chat("slow", "x")).await });
    let holds = "{conclave:lane:local}:holds";
    assert!(
        eventually(5, || async { redis.cli(&["HLEN", holds]).trim() == "1" }).await,
        "replica 1 never took the lease"
    );
    drop(r1);
    let killed = Instant::now();
    let r = post(&r2.base, &chat("b", "after the kill")).await;
    let waited = killed.elapsed();
    assert_eq!(r.status, 200, "{}", r.text);
    eprintln!("replica 2 waited {waited:?} for a lease whose holder was killed (lease_ttl 2s)");
    // The dead hold lasts until its expiry (renewed up to the kill), then
    // b loads (300 ms) and answers (1 s). The upper bound is generous: a
    // hold that never expired would keep b waiting for its 30 s timeout.
    assert!(waited >= Duration::from_millis(1200), "{waited:?}");
    assert!(waited <= Duration::from_secs(15), "{waited:?}");
}

#[tokio::test]
async fn with_redis_down_each_replica_serves_its_lane_alone_and_counts_it() {
    let mut redis = RedisServer::start();
    let mock = llama_swap();
    let r1 = replica(&mock, Some(&redis));
    assert_eq!(post(&r1.base, &chat("a", "up")).await.status, 200);
    redis.stop();
    let started = Instant::now();
    for m in ["b", "a"] {
        let r = post(&r1.base, &chat(m, "down")).await;
        assert_eq!(r.status, 200, "{}", r.text);
    }
    // Each call: one bounded ask (500 ms at most), a swap, an answer (1 s):
    // far under the 30 s an unbounded wait would take.
    assert!(
        started.elapsed() < Duration::from_secs(15),
        "{:?}",
        started.elapsed()
    );
    let m = r1.metrics().await;
    assert!(
        m.contains(r#"conclave_state_errors_total{op="lane_acquire"}"#),
        "{m}"
    );
    redis.restart();
    let r = post(&r1.base, &chat("b", "back")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    let holds = "{conclave:lane:local}:holds";
    let base = r1.base.clone();
    let _held = tokio::spawn(async move { post(&base, &chat("slow", "x")).await });
    assert!(
        eventually(5, || async { redis.cli(&["HLEN", holds]).trim() == "1" }).await,
        "the lease is used again once Redis is back"
    );
}
