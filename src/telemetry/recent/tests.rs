use serde_json::json;

use super::*;

fn record(id: &str, key: &str, route: &str, status: &str, started_at: u64) -> Record {
    let request = match json!({
        "request_id": id, "route": route, "event": "request", "status": status,
        "key": key, "strategy": "chain", "duration_ms": 12.5, "cost_usd": 0.25,
    }) {
        Value::Object(m) => m,
        _ => unreachable!(),
    };
    Record {
        id: id.into(),
        route: route.into(),
        key: key.into(),
        status: status.into(),
        started_at,
        request,
        gathered: Arc::default(),
    }
}

fn ids(v: &[Arc<Record>]) -> Vec<&str> {
    v.iter().map(|r| r.id.as_str()).collect()
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
        ring.push(record(&format!("r{i}"), "k", "a", "200", i));
    }
    assert_eq!(ids(&ring.list(&all())), ["r4", "r3", "r2"]);
    assert!(ring.get("r1", None).is_none());
    ring.resize(1);
    assert_eq!(ids(&ring.list(&all())), ["r4"]);
    ring.resize(0);
    assert!(!ring.enabled() && ring.is_empty());
    ring.push(record("r5", "k", "a", "200", 5));
    assert!(ring.is_empty());
}

#[test]
fn filters_match_route_key_status_and_time() {
    let ring = Recent::new(10);
    ring.push(record("a", "alice", "review", "200", 100));
    ring.push(record("b", "bob", "review", "502", 200));
    ring.push(record("c", "alice", "council", "stream_error", 300));
    ring.push(record("d", "bob", "council", "429", 400));
    let with = |f: Filter| ids(&ring.list(&f)).join(",");
    assert_eq!(
        with(Filter {
            route: Some("review".into()),
            ..all()
        }),
        "b,a"
    );
    assert_eq!(
        with(Filter {
            key: Some("alice".into()),
            ..all()
        }),
        "c,a"
    );
    assert_eq!(
        with(Filter {
            status: Some("5xx".into()),
            ..all()
        }),
        "b"
    );
    assert_eq!(
        with(Filter {
            status: Some("stream_error".into()),
            ..all()
        }),
        "c"
    );
    assert_eq!(
        with(Filter {
            since: Some(200),
            until: Some(300),
            ..all()
        }),
        "c,b"
    );
    assert_eq!(with(Filter { limit: 2, ..all() }), "d,c");
}

#[test]
fn a_shared_id_finds_the_newest_of_the_keys_own() {
    let ring = Recent::new(10);
    ring.push(record("same", "alice", "a", "200", 1));
    ring.push(record("same", "bob", "b", "200", 2));
    assert_eq!(&*ring.get("same", None).unwrap().key, "bob");
    assert_eq!(&*ring.get("same", Some("alice")).unwrap().key, "alice");
    assert!(ring.get("same", Some("carol")).is_none());
}

#[test]
fn the_summary_has_the_contracts_fields_from_the_request_line() {
    let r = record("x", "k", "review", "200", 7);
    let s = r.summary();
    let keys: Vec<&str> = s.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, SUMMARY);
    assert_eq!(s["duration_ms"], 12.5);
    assert_eq!(s["cost_usd"], 0.25);
    assert_eq!(s["started_at"], 7);
    r.gathered.lock().attempt(json!({"attempt": 2}));
    r.gathered.lock().attempt(json!({"attempt": 1}));
    let d = r.detail();
    assert_eq!(d["attempts"], json!([{"attempt": 1}, {"attempt": 2}]));
    assert_eq!(d["events"], json!([]));
    assert_eq!(d["request"]["event"], "request");
}
