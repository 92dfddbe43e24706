//! The response cache's entries on a real `redis-server` (`[state]`),
//! through the store's own interface: two `Backend`s (two replicas) on
//! one Redis share an entry; the bounds hold for both together, least
//! recently used out first; a clear by route takes only that route's; an
//! entry expires with its TTL; and a Redis killed is an `Err` at once
//! (the caller's miss), never a hang.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use common::redis::RedisServer;
use conclave::clock::Clock;
use conclave::config::{CacheConfig, OnError, Secret, StateConfig};
use conclave::sink::Metrics;
use conclave::store::Backend;
use conclave::store::cache::{Answers, Entry, Stats};
use tokio::time::Instant;

const HOUR: Duration = Duration::from_secs(3600);

fn state(redis: &RedisServer) -> StateConfig {
    StateConfig {
        url: Secret(redis.url()),
        shown: redis.url(),
        on_error: OnError::FailClosed,
        timeout: Duration::from_millis(500),
        prefix: "cv".to_owned(),
        lease_ttl: Duration::from_secs(10),
    }
}

/// One replica's cache on `redis`, within `bounds`.
fn replica(redis: &RedisServer, bounds: CacheConfig) -> Arc<dyn Answers> {
    Backend::open(None, Some(&state(redis)), Clock::system(), Metrics::noop())
        .unwrap()
        .answers(bounds)
}

fn wide() -> CacheConfig {
    CacheConfig {
        max_bytes: 1 << 20,
        max_entries: 1000,
    }
}

fn entry(route: &str, body: &str) -> Entry {
    Entry {
        body: Bytes::from(body.to_owned()),
        stored_at: 1_700_000_000,
        route: route.to_owned(),
        tokens: 42,
        cost_usd: 0.001_25,
    }
}

async fn held(cache: &dyn Answers, keys: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for k in keys {
        if cache.get(k).await.unwrap().is_some() {
            out.push((*k).to_owned());
        }
    }
    out
}

#[tokio::test]
async fn two_replicas_share_an_entry() {
    let redis = RedisServer::start();
    let (one, two) = (replica(&redis, wide()), replica(&redis, wide()));
    assert_eq!(two.get("k1").await.unwrap(), None);
    let body = "{\"choices\":[{\"message\":{\"content\":\"héllo\\u0000\"}}]}";
    one.put("k1", entry("fast", body), HOUR).await.unwrap();
    assert_eq!(two.get("k1").await.unwrap(), Some(entry("fast", body)));
    let size = (body.len() + "fast".len() + "k1".len()) as u64;
    assert_eq!(
        two.stats(),
        Stats {
            entries: 1,
            bytes: size
        }
    );
    // Its TTL is on the entry itself, in Redis.
    let pttl: i64 = redis.cli(&["PTTL", "{cv:cache}:e:k1"]).parse().unwrap();
    assert!(pttl > 3_500_000 && pttl <= 3_600_000, "{pttl}");
    // Binary bodies come back byte for byte.
    let raw = Entry {
        body: Bytes::from_static(&[0, 159, 146, 150, 255]),
        ..entry("fast", "")
    };
    two.put("bin", raw.clone(), HOUR).await.unwrap();
    assert_eq!(one.get("bin").await.unwrap(), Some(raw));
}

#[tokio::test]
async fn the_bounds_hold_across_replicas_least_recently_used_first() {
    let redis = RedisServer::start();
    let bounds = CacheConfig {
        max_bytes: 1 << 20,
        max_entries: 3,
    };
    let (one, two) = (replica(&redis, bounds), replica(&redis, bounds));
    one.put("a", entry("r", "A"), HOUR).await.unwrap();
    two.put("b", entry("r", "B"), HOUR).await.unwrap();
    one.put("c", entry("r", "C"), HOUR).await.unwrap();
    // A get on the other replica makes `a` the most recently used.
    assert!(two.get("a").await.unwrap().is_some());
    two.put("d", entry("r", "D"), HOUR).await.unwrap();
    assert_eq!(two.stats().entries, 3);
    assert_eq!(held(&*one, &["a", "b", "c", "d"]).await, ["a", "c", "d"]);

    // Bytes: each entry 10 + 1 + 1 bytes; 30 bytes hold two.
    let redis = RedisServer::start();
    let bounds = CacheConfig {
        max_bytes: 30,
        max_entries: 100,
    };
    let (one, two) = (replica(&redis, bounds), replica(&redis, bounds));
    one.put("a", entry("r", "0123456789"), HOUR).await.unwrap();
    two.put("b", entry("r", "0123456789"), HOUR).await.unwrap();
    assert!(one.get("a").await.unwrap().is_some());
    two.put("c", entry("r", "0123456789"), HOUR).await.unwrap();
    assert_eq!(held(&*one, &["a", "b", "c"]).await, ["a", "c"]);
    assert_eq!(
        one.stats(),
        Stats {
            entries: 2,
            bytes: 24
        }
    );
    // One larger than the whole bound is not stored, and evicts nothing.
    one.put("big", entry("r", &"x".repeat(40)), HOUR)
        .await
        .unwrap();
    assert_eq!(held(&*two, &["a", "big", "c"]).await, ["a", "c"]);
}

#[tokio::test]
async fn a_clear_takes_one_route_or_all() {
    let redis = RedisServer::start();
    let (one, two) = (replica(&redis, wide()), replica(&redis, wide()));
    for i in 0..5 {
        one.put(&format!("f{i}"), entry("fast", "x"), HOUR)
            .await
            .unwrap();
    }
    two.put("p0", entry("panel", "y"), HOUR).await.unwrap();
    assert_eq!(two.clear(Some("fast")).await.unwrap(), 5);
    assert_eq!(one.get("f0").await.unwrap(), None);
    assert!(one.get("p0").await.unwrap().is_some());
    assert_eq!(one.stats().entries, 1);
    assert_eq!(two.clear(Some("fast")).await.unwrap(), 0);
    one.put("f9", entry("fast", "x"), HOUR).await.unwrap();
    assert_eq!(two.clear(None).await.unwrap(), 2);
    assert_eq!(two.stats(), Stats::default());
    assert_eq!(held(&*one, &["f9", "p0"]).await, Vec::<String>::new());
    // Nothing of the cache is left in Redis.
    assert_eq!(redis.cli(&["DBSIZE"]), "1", "{}", redis.cli(&["KEYS", "*"]));
}

#[tokio::test]
async fn an_entry_expires_with_its_ttl() {
    let redis = RedisServer::start();
    let (one, two) = (replica(&redis, wide()), replica(&redis, wide()));
    one.put("short", entry("r", "s"), Duration::from_millis(300))
        .await
        .unwrap();
    one.put("long", entry("r", "l"), HOUR).await.unwrap();
    assert!(two.get("short").await.unwrap().is_some());
    tokio::time::sleep(Duration::from_millis(400)).await;
    assert_eq!(two.get("short").await.unwrap(), None);
    // The expired entry left the figures too.
    assert_eq!(two.stats().entries, 1);
    assert!(two.get("long").await.unwrap().is_some());
    // A put forgets expired entries nobody asked for again.
    one.put("brief", entry("r", "b"), Duration::from_millis(200))
        .await
        .unwrap();
    assert_eq!(one.stats().entries, 2);
    tokio::time::sleep(Duration::from_millis(300)).await;
    two.put("next", entry("r", "n"), HOUR).await.unwrap();
    assert_eq!(two.stats().entries, 2);
    assert_eq!(redis.cli(&["ZCARD", "{cv:cache}:#exp"]), "2");
}

#[tokio::test]
async fn a_dead_redis_is_an_error_at_once() {
    let mut redis = RedisServer::start();
    let cache = replica(&redis, wide());
    cache.put("k", entry("r", "x"), HOUR).await.unwrap();
    redis.stop();
    let start = Instant::now();
    assert!(cache.get("k").await.is_err());
    assert!(cache.put("k2", entry("r", "x"), HOUR).await.is_err());
    assert!(cache.clear(None).await.is_err());
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    // Back again (empty: nothing was saved), it is a miss, then a hit.
    redis.restart();
    let mut answered = None;
    for _ in 0..50 {
        match cache.get("k").await {
            Ok(v) => {
                answered = Some(v);
                break;
            }
            Err(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    assert_eq!(answered, Some(None));
    cache.put("k", entry("r", "x"), HOUR).await.unwrap();
    assert!(cache.get("k").await.unwrap().is_some());
}

#[tokio::test]
async fn a_full_redis_refuses_a_put_and_still_answers_gets() {
    let redis = RedisServer::start();
    let cache = replica(&redis, wide());
    cache.put("k", entry("r", "x"), HOUR).await.unwrap();
    assert_eq!(redis.cli(&["CONFIG", "SET", "maxmemory", "1"]), "OK");
    let err = cache
        .put("k2", entry("r", "y"), HOUR)
        .await
        .expect_err("a full Redis stores nothing");
    assert!(err.to_string().contains("OOM"), "{err}");
    assert!(cache.get("k").await.unwrap().is_some());
    assert_eq!(cache.get("k2").await.unwrap(), None);
    assert_eq!(cache.clear(None).await.unwrap(), 1);
}

#[tokio::test]
async fn bounds_lowered_shrink_the_cache_a_batch_at_a_time() {
    let redis = RedisServer::start();
    let before = replica(&redis, wide().with_entries(1500));
    for i in 0..1200 {
        before
            .put(&format!("k{i}"), entry("r", "x"), HOUR)
            .await
            .unwrap();
    }
    // A replica with a bound of 1 (a reload lowered it): one put evicts
    // at most 1000 entries, so the first is not stored, the second is.
    let after = replica(&redis, wide().with_entries(1));
    after.put("new", entry("r", "n"), HOUR).await.unwrap();
    assert_eq!(after.stats().entries, 200);
    assert_eq!(after.get("new").await.unwrap(), None);
    // The least recently used went first: the last 200 stored are left.
    assert_eq!(after.get("k999").await.unwrap(), None);
    assert!(after.get("k1000").await.unwrap().is_some());
    after.put("new", entry("r", "n"), HOUR).await.unwrap();
    assert_eq!(after.stats().entries, 1);
    assert!(after.get("new").await.unwrap().is_some());
    assert_eq!(after.get("k1000").await.unwrap(), None);
}

trait Entries {
    fn with_entries(self, n: u64) -> Self;
}

impl Entries for CacheConfig {
    fn with_entries(self, n: u64) -> Self {
        CacheConfig {
            max_entries: n,
            ..self
        }
    }
}

/// Two gateways on one Redis, over HTTP: an answer cached by one is a hit
/// on the other (no upstream call); with Redis killed mid-load both still
/// answer, as misses that reach the upstream, and no request fails.
#[tokio::test]
async fn two_gateways_share_a_hit_and_a_dead_redis_is_a_miss() {
    use common::*;
    let mut redis = RedisServer::start();
    let mock = Srv::mock(
        "[upstreams.sim]\nkind = \"mock\"\n\n[upstreams.sim.models.m]\nreply = { text = \"the answer\" }\n",
    );
    let toml = front_of(&mock.v1(), &["m"], "").replace(
        "[upstreams.up]",
        &format!("[state]\nurl = \"{}\"\ntimeout = \"300ms\"\non_error = \"fail_open\"\n\n[upstreams.up]", redis.url()),
    ).replace("[models.m]\nupstream = \"up\"\n", "[models.m]\nupstream = \"up\"\ncache = { ttl = \"1h\", scope = \"shared\" }\n");
    let (a, b) = (Srv::gateway(&toml), Srv::gateway(&toml));
    let mut body = chat("m", "one shared question");
    body["temperature"] = serde_json::json!(0);
    let header = |r: &Resp| {
        r.headers
            .get("x-conclave-cache")
            .map(|v| v.to_str().unwrap().to_owned())
    };
    let r = post_with(&a.base, &body, &[]).await;
    assert_eq!(
        (r.status, header(&r).as_deref()),
        (200, Some("miss")),
        "{}",
        r.text
    );
    // The answer reaches the client before its entry reaches Redis.
    let stored = eventually(10, || async {
        !redis
            .cli(&["--scan", "--pattern", "*cache}:e:*"])
            .is_empty()
    })
    .await;
    assert!(stored, "the first replica never stored its answer");
    let r = post_with(&b.base, &body, &[]).await;
    assert_eq!(
        (r.status, header(&r).as_deref()),
        (200, Some("hit")),
        "{}",
        r.text
    );
    assert_eq!(r.json()["choices"][0]["message"]["content"], "the answer");
    assert_eq!(
        mock.asked("m").await.len(),
        1,
        "the second replica's hit made no call"
    );
    redis.stop();
    let start = Instant::now();
    for gw in [&a, &b, &a, &b] {
        let r = post_with(&gw.base, &body, &[]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            header(&r).as_deref(),
            Some("miss"),
            "a dead Redis is a miss"
        );
    }
    assert_eq!(mock.asked("m").await.len(), 5);
    assert!(
        start.elapsed() < Duration::from_secs(30),
        "{:?}",
        start.elapsed()
    );
}
