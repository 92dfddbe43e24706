use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;

use super::*;

fn entry(route: &str, body: &str) -> Entry {
    Entry {
        body: Bytes::from(body.to_owned()),
        stored_at: 1,
        route: route.to_owned(),
        tokens: 7,
        cost_usd: 0.5,
    }
}

fn store(max_entries: u64, max_bytes: u64) -> LocalAnswers {
    let clock = Clock::starting_at(UNIX_EPOCH + Duration::from_secs(1_000_000));
    LocalAnswers::new(
        CacheConfig {
            max_bytes,
            max_entries,
        },
        clock,
    )
}

const HOUR: Duration = Duration::from_secs(3600);

async fn keys(s: &LocalAnswers, all: &[&str]) -> Vec<String> {
    let mut out = Vec::new();
    for k in all {
        if s.get(k).await.unwrap().is_some() {
            out.push((*k).to_owned());
        }
    }
    out
}

#[tokio::test(start_paused = true)]
async fn an_entry_comes_back_as_stored() {
    let s = store(10, 1 << 20);
    assert_eq!(s.get("k").await.unwrap(), None);
    s.put("k", entry("r", "body"), HOUR).await.unwrap();
    assert_eq!(s.get("k").await.unwrap(), Some(entry("r", "body")));
    assert_eq!(
        s.stats(),
        Stats {
            entries: 1,
            bytes: 4 + 1 + 1
        }
    );
    // A second put under the key replaces the first.
    s.put("k", entry("r", "other body"), HOUR).await.unwrap();
    assert_eq!(s.get("k").await.unwrap(), Some(entry("r", "other body")));
    assert_eq!(
        s.stats(),
        Stats {
            entries: 1,
            bytes: 10 + 1 + 1
        }
    );
}

#[tokio::test(start_paused = true)]
async fn the_least_recently_used_goes_first_at_max_entries() {
    let s = store(3, 1 << 20);
    for k in ["a", "b", "c"] {
        s.put(k, entry("r", k), HOUR).await.unwrap();
    }
    // `a` is used, so `b` is now the least recently used.
    assert!(s.get("a").await.unwrap().is_some());
    s.put("d", entry("r", "d"), HOUR).await.unwrap();
    assert_eq!(s.stats().entries, 3);
    // (the gets below touch in order, so check `b` is gone without
    // disturbing the rest: it is simply not there)
    assert_eq!(s.get("b").await.unwrap(), None);
    s.put("e", entry("r", "e"), HOUR).await.unwrap();
    // Order of use now, oldest first: c, a, d (b gone), then e: c goes.
    assert_eq!(keys(&s, &["a", "c", "d", "e"]).await, ["a", "d", "e"]);
}

#[tokio::test(start_paused = true)]
async fn max_bytes_evicts_until_the_new_entry_fits() {
    // Each entry: 10 body + 1 route + 1 key = 12 bytes.
    let s = store(100, 40);
    for k in ["a", "b", "c"] {
        s.put(k, entry("r", "0123456789"), HOUR).await.unwrap();
    }
    assert_eq!(
        s.stats(),
        Stats {
            entries: 3,
            bytes: 36
        }
    );
    assert!(s.get("a").await.unwrap().is_some());
    // 20 + 1 + 1 = 22 bytes: b and c (the least recently used) make room.
    s.put("d", entry("r", "01234567890123456789"), HOUR)
        .await
        .unwrap();
    assert_eq!(
        s.stats(),
        Stats {
            entries: 2,
            bytes: 34
        }
    );
    assert_eq!(keys(&s, &["a", "b", "c", "d"]).await, ["a", "d"]);
}

#[tokio::test(start_paused = true)]
async fn an_entry_larger_than_the_bound_is_not_stored() {
    let s = store(100, 20);
    s.put("a", entry("r", "small"), HOUR).await.unwrap();
    s.put("big", entry("r", &"x".repeat(40)), HOUR)
        .await
        .unwrap();
    assert_eq!(s.get("big").await.unwrap(), None);
    // Nothing was evicted for it.
    assert!(s.get("a").await.unwrap().is_some());
    assert_eq!(
        s.stats(),
        Stats {
            entries: 1,
            bytes: 7
        }
    );
}

#[tokio::test(start_paused = true)]
async fn an_entry_expires_with_its_ttl_on_the_clock() {
    let s = store(10, 1 << 20);
    s.put("short", entry("r", "s"), Duration::from_secs(10))
        .await
        .unwrap();
    s.put("long", entry("r", "l"), HOUR).await.unwrap();
    tokio::time::advance(Duration::from_secs(9)).await;
    assert!(s.get("short").await.unwrap().is_some());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert_eq!(s.get("short").await.unwrap(), None);
    assert!(s.get("long").await.unwrap().is_some());
    // The expired entry was dropped on that get.
    assert_eq!(
        s.stats(),
        Stats {
            entries: 1,
            bytes: 6
        }
    );
}

#[tokio::test(start_paused = true)]
async fn clear_takes_one_route_or_all() {
    let s = store(100_000, 1 << 30);
    // More than one chunk of slots, so the chunked scan is crossed.
    let n = CLEAR_CHUNK + 10;
    for i in 0..n {
        let route = if i % 2 == 0 { "even" } else { "odd" };
        s.put(&format!("k{i}"), entry(route, "b"), HOUR)
            .await
            .unwrap();
    }
    assert_eq!(s.clear(Some("odd")).await.unwrap(), (n / 2) as u64);
    assert_eq!(s.clear(Some("odd")).await.unwrap(), 0);
    assert_eq!(s.clear(Some("none")).await.unwrap(), 0);
    assert_eq!(s.stats().entries, (n / 2) as u64);
    assert!(s.get("k0").await.unwrap().is_some());
    assert_eq!(s.get("k1").await.unwrap(), None);
    // Freed slots are used again, and the order still holds.
    s.put("new", entry("odd", "b"), HOUR).await.unwrap();
    assert!(s.get("new").await.unwrap().is_some());
    assert_eq!(s.clear(None).await.unwrap(), (n / 2 + 1) as u64);
    assert_eq!(s.stats(), Stats::default());
    assert_eq!(s.get("k0").await.unwrap(), None);
}

#[tokio::test(start_paused = true)]
async fn the_order_survives_many_moves() {
    let s = store(4, 1 << 20);
    for k in ["a", "b", "c", "d"] {
        s.put(k, entry("r", k), HOUR).await.unwrap();
    }
    // Use them in the order d, b, a, c: d is now the least recently used,
    // then b.
    for k in ["d", "b", "a", "c"] {
        assert!(s.get(k).await.unwrap().is_some());
    }
    s.put("e", entry("r", "e"), HOUR).await.unwrap();
    s.put("f", entry("r", "f"), HOUR).await.unwrap();
    let mut left = Vec::new();
    for k in ["a", "b", "c", "d", "e", "f"] {
        if s.lru.lock().map.contains_key(k) {
            left.push(k);
        }
    }
    assert_eq!(left, ["a", "c", "e", "f"]);
}
