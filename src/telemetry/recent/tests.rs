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
