use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use super::*;
use crate::telemetry::Event;

/// A record as a `Tap` would list it, not yet in the ring.
fn running(ring: &Recent, id: &str, key: &str, route: &str, started_at: u64) -> Arc<Record> {
    Arc::new(Record {
        id: id.into(),
        route: route.into(),
        key: key.into(),
        strategy: "chain",
        started_at,
        started: Instant::now(),
        seq: ring.seq.fetch_add(1, Ordering::Relaxed),
        status: OnceLock::new(),
        gathered: Mutex::default(),
    })
}

/// A finished record in the ring.
fn record(ring: &Recent, id: &str, key: &str, route: &str, status: &'static str, started_at: u64) {
    let r = running(ring, id, key, route, started_at);
    let _ = r.status.set(status);
    ring.push(r);
}

fn ids(v: &[Arc<Record>]) -> Vec<&str> {
    v.iter().map(|r| &*r.id).collect()
}

fn all() -> Filter {
    Filter {
        limit: 100,
        ..Filter::default()
    }
}

#[test]
fn the_ring_keeps_the_newest_and_lists_them_newest_first() {
    let ring = Recent::new(3);
    for i in 0..5 {
        record(&ring, &format!("r{i}"), "k", "a", "200", i);
    }
    assert_eq!(ids(&ring.list(&all())), ["r4", "r3", "r2"]);
    assert!(ring.get("r1", None).is_none());
    ring.resize(1);
    assert_eq!(ids(&ring.list(&all())), ["r4"]);
    ring.resize(0);
    assert!(!ring.enabled() && ring.is_empty());
    record(&ring, "r5", "k", "a", "200", 5);
    assert!(ring.is_empty());
}

#[test]
fn filters_match_route_key_status_and_time() {
    let ring = Recent::new(10);
    record(&ring, "a", "alice", "review", "200", 100);
    record(&ring, "b", "bob", "review", "502", 200);
    record(&ring, "c", "alice", "council", "stream_error", 300);
    record(&ring, "d", "bob", "council", "429", 400);
    let with = |f: Filter| ids(&ring.list(&f)).join(",");
    let route = Filter {
        route: Some("review".into()),
        ..all()
    };
    assert_eq!(with(route), "b,a");
    let key = Filter {
        key: Some("alice".into()),
        ..all()
    };
    assert_eq!(with(key), "c,a");
    let class = Filter {
        status: Some("5xx".into()),
        ..all()
    };
    assert_eq!(with(class), "b");
    let broken = Filter {
        status: Some("stream_error".into()),
        ..all()
    };
    assert_eq!(with(broken), "c");
    let window = Filter {
        since: Some(200),
        until: Some(300),
        ..all()
    };
    assert_eq!(with(window), "c,b");
    assert_eq!(with(Filter { limit: 2, ..all() }), "d,c");
}

#[test]
fn a_shared_id_finds_the_newest_of_the_keys_own() {
    let ring = Recent::new(10);
    record(&ring, "same", "alice", "a", "200", 1);
    record(&ring, "same", "bob", "b", "200", 2);
    assert_eq!(&*ring.get("same", None).unwrap().key, "bob");
    assert_eq!(&*ring.get("same", Some("alice")).unwrap().key, "alice");
    assert!(ring.get("same", Some("carol")).is_none());
}

#[tokio::test(start_paused = true)]
async fn running_records_come_first_and_leave_the_list_once() {
    let ring = Recent::new(10);
    record(&ring, "done", "k", "a", "200", 1);
    let slow = running(&ring, "slow", "k", "a", 2);
    let slot = ring.start(slow.clone());
    let fast = running(&ring, "fast", "k", "a", 3);
    let fast_slot = ring.start(fast.clone());
    tokio::time::advance(Duration::from_millis(250)).await;
    assert_eq!(ids(&ring.list(&all())), ["fast", "slow", "done"]);
    let finished_only = Filter {
        finished_only: true,
        ..all()
    };
    assert_eq!(ids(&ring.list(&finished_only)), ["done"]);
    let running_only = Filter {
        status: Some(RUNNING.into()),
        ..all()
    };
    assert_eq!(ids(&ring.list(&running_only)), ["fast", "slow"]);
    assert_eq!(ids(&ring.list(&Filter { limit: 1, ..all() })), ["fast"]);
    let s = slow.summary();
    assert_eq!(
        (s["status"].as_str(), s["duration_ms"].as_f64()),
        (Some("running"), Some(250.0))
    );
    assert_eq!(s["cost_usd"], Value::Null);
    assert_eq!(slow.detail()["request"], Value::Null);

    // Finished: in the ring, not listed twice; a slot is reused, and
    // freeing an old slot leaves its new tenant alone.
    let _ = fast.status.set("200");
    ring.push(fast.clone());
    ring.unlist(fast_slot, &fast);
    assert_eq!(ids(&ring.list(&all())), ["slow", "fast", "done"]);
    let next = running(&ring, "next", "k", "a", 4);
    assert_eq!(ring.start(next.clone()), fast_slot);
    ring.unlist(fast_slot, &fast);
    assert_eq!(ring.running(), 2);
    ring.unlist(slot, &slow);
    ring.unlist(fast_slot, &next);
    assert_eq!(ring.running(), 0);
    assert_eq!(ids(&ring.list(&all())), ["fast", "done"]);
}

#[test]
fn the_summary_has_the_contracts_fields() {
    let ring = Recent::new(10);
    let r = running(&ring, "x", "k", "review", 7);
    let s = r.summary();
    let keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, SUMMARY);
    assert_eq!(s["started_at"], 7);
    assert_eq!(s["strategy"], "chain");
    let event = |n: u64| {
        let f = match json!({"attempt": n}) {
            Value::Object(m) => m,
            _ => unreachable!(),
        };
        Arc::new(Event::of(
            "x".into(),
            "review".into(),
            "attempt",
            EventBody::Fields(f),
            UNIX_EPOCH,
        ))
    };
    let _ = r
        .gathered
        .lock()
        .attempt(bound::AttemptLine::Shared(event(2)), 0);
    let _ = r
        .gathered
        .lock()
        .attempt(bound::AttemptLine::Shared(event(1)), 0);
    let d = r.detail();
    let order: Vec<u64> = d["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["attempt"].as_u64().unwrap())
        .collect();
    assert_eq!(order, [1, 2]);
    assert_eq!(d["attempts"][0]["ts"], "1970-01-01T00:00:00.000Z");
    assert_eq!(d["events"], json!([]));
}

/// Records finished on `threads` threads at once, `each` apiece, into
/// `ring`; each thread's records are named `t{thread}-{n}`.
fn finish_on_threads(ring: &Arc<Recent>, threads: usize, each: usize) {
    std::thread::scope(|s| {
        for t in 0..threads {
            let ring = ring.clone();
            s.spawn(move || {
                for n in 0..each {
                    record(&ring, &format!("t{t}-{n}"), "k", "a", "200", n as u64);
                }
            });
        }
    });
}

#[test]
fn records_finished_on_many_threads_are_kept_newest_first_and_no_more() {
    let ring = Arc::new(Recent::new(50));
    finish_on_threads(&ring, 4, 100);
    let listed = ring.list(&Filter {
        limit: 1000,
        ..Filter::default()
    });
    assert_eq!((listed.len(), ring.len()), (50, 50));
    // Exactly the newest 50 the ring numbered, newest first, whichever
    // shard holds them.
    let newest = ring.finished.load(Ordering::Relaxed);
    let mut all = Vec::new();
    for s in &ring.shards {
        s.finished_into((newest, usize::MAX), &|_| true, &mut all);
    }
    all.sort_unstable_by_key(|(n, _)| Reverse(*n));
    let want: Vec<&str> = all.iter().take(50).map(|(_, r)| &*r.id).collect();
    assert_eq!(ids(&listed), want);
    // Each thread's own records, in the order it finished them.
    let of = |t: usize| -> Vec<u64> {
        let prefix = format!("t{t}-");
        listed
            .iter()
            .filter_map(|r| r.id.strip_prefix(&prefix)?.parse().ok())
            .collect()
    };
    for t in 0..4 {
        let mine = of(t);
        assert!(mine.windows(2).all(|w| w[0] > w[1]), "{mine:?}");
    }
}

#[test]
fn a_shard_whose_thread_stopped_is_swept_by_the_others() {
    let ring = Arc::new(Recent::new(10));
    // One thread fills the ring and stops.
    finish_on_threads(&ring, 1, 10);
    let held = |ring: &Recent| -> usize {
        ring.shards
            .iter()
            .map(|s| s.count_kept(0, usize::MAX))
            .sum()
    };
    assert_eq!(held(&ring), 10);
    // This thread's records push them out of what the ring keeps; the
    // stopped thread's shard lets them go once a sweep comes by.
    for n in 0..(shard::SHARDS as u64 + 1) * SWEEP {
        record(&ring, &format!("later-{n}"), "k", "a", "200", n);
    }
    assert_eq!(ring.len(), 10);
    assert!(ring.get("t0-9", None).is_none());
    assert!(held(&ring) <= 10 + cold::BATCH, "{}", held(&ring));
}

#[test]
fn a_resize_lets_go_at_once_of_what_it_no_longer_keeps() {
    let ring = Arc::new(Recent::new(100));
    finish_on_threads(&ring, 3, 40);
    assert_eq!(ring.len(), 100);
    ring.resize(5);
    assert_eq!(ring.len(), 5);
    let held: usize = ring
        .shards
        .iter()
        .map(|s| s.count_kept(0, usize::MAX))
        .sum();
    assert_eq!(held, 5);
    ring.resize(0);
    assert!(ring.is_empty() && !ring.enabled());
}
