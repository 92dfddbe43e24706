use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use super::*;
use crate::clock::Clock;
use crate::store::Store;

const DAY: Duration = Duration::from_secs(86_400);

fn service(retention: Duration) -> (Arc<Store>, Responses) {
    let clock = Clock::starting_at(UNIX_EPOCH + Duration::from_secs(1_772_409_540));
    let store = Arc::new(Store::in_memory(clock).unwrap());
    (store.clone(), sqlite(&store, retention))
}

fn sqlite(store: &Arc<Store>, retention: Duration) -> Responses {
    bounded(store, retention, ResponseBounds::default())
}

fn bounded(store: &Arc<Store>, retention: Duration, bounds: ResponseBounds) -> Responses {
    let rows = Arc::new(sqlite::SqliteRows::new(store.clone()));
    Responses::new(rows, store.clock(), retention, bounds)
}

fn answer(id: &str, key: &str, previous: Option<&str>, said: &str, reply: &str) -> StoredResponse {
    StoredResponse {
        id: id.into(),
        key: key.into(),
        previous: previous.map(str::to_owned),
        input: vec![
            json!({"id": format!("in_{id}"), "type": "message", "role": "user", "content": said}),
        ],
        response: json!({
            "id": id, "object": "response", "status": "completed",
            "output": [{"id": format!("out_{id}"), "type": "message", "role": "assistant",
                        "content": [{"type": "output_text", "text": reply}]}],
        }),
    }
}

/// Waits (on the wall clock, at most 10 s, without moving paused time)
/// until the writer has written every row.
#[allow(clippy::disallowed_types)] // the wall clock: paused time must not move
async fn settle(r: &Responses) {
    let start = std::time::Instant::now();
    while !r.inner.pending.lock().rows.is_empty() {
        assert!(
            start.elapsed() < Duration::from_secs(10),
            "the writer is stuck"
        );
        tokio::task::yield_now().await;
    }
}

/// Waits (on the wall clock, at most 10 s) until `f` holds.
#[allow(clippy::disallowed_types)] // the wall clock: paused time must not move
async fn until(what: &str, f: impl Fn() -> bool) {
    let start = std::time::Instant::now();
    while !f() {
        assert!(start.elapsed() < Duration::from_secs(10), "never: {what}");
        tokio::task::yield_now().await;
    }
}

fn rows(store: &Store) -> i64 {
    store
        .conn
        .lock()
        .query_row("SELECT COUNT(*) FROM response", [], |r| r.get(0))
        .unwrap()
}

#[tokio::test(start_paused = true)]
async fn put_is_read_back_at_once_and_after_it_is_written_by_its_own_key_only() {
    let (store, r) = service(DAY);
    let a = answer("resp_1", "team", None, "hi", "hello");
    r.put(a.clone());
    assert_eq!(r.get("resp_1", "team").await.unwrap(), Some(a.clone()));
    assert_eq!(r.get("resp_1", "other").await.unwrap(), None);
    settle(&r).await;
    assert_eq!(rows(&store), 1);
    assert_eq!(r.get("resp_1", "team").await.unwrap(), Some(a));
    assert_eq!(r.get("resp_1", "other").await.unwrap(), None);
    assert_eq!(r.get("resp_2", "team").await.unwrap(), None);
    assert!(!r.delete("resp_1", "other").await.unwrap());
    assert!(r.delete("resp_1", "team").await.unwrap());
    assert!(!r.delete("resp_1", "team").await.unwrap());
    assert_eq!(r.get("resp_1", "team").await.unwrap(), None);
    assert_eq!(rows(&store), 0);
}

#[tokio::test(start_paused = true)]
async fn an_answer_deleted_before_it_is_written_is_never_written() {
    let (store, r) = service(DAY);
    for i in 0..50 {
        let id = format!("resp_{i}");
        r.put(answer(&id, "team", None, "hi", "hello"));
        assert!(r.delete(&id, "team").await.unwrap(), "{id}");
    }
    settle(&r).await;
    assert_eq!(rows(&store), 0);
}

#[tokio::test(start_paused = true)]
async fn expired_answers_are_not_found_and_are_swept() {
    let (store, r) = service(Duration::from_secs(60));
    r.put(answer("resp_old", "team", None, "hi", "hello"));
    settle(&r).await;
    tokio::time::advance(Duration::from_secs(30)).await;
    r.put(answer("resp_new", "team", None, "hi", "hello"));
    settle(&r).await;
    assert!(r.get("resp_old", "team").await.unwrap().is_some());
    tokio::time::advance(Duration::from_secs(31)).await;
    assert_eq!(r.get("resp_old", "team").await.unwrap(), None);
    assert!(!r.delete("resp_old", "team").await.unwrap());
    assert!(r.get("resp_new", "team").await.unwrap().is_some());
    // The sweep (once a minute) deletes the expired rows.
    tokio::time::advance(Duration::from_secs(60)).await;
    assert_eq!(r.get("resp_new", "team").await.unwrap(), None);
    until("the sweep deleted both rows", || rows(&store) == 0).await;
}

#[tokio::test(start_paused = true)]
async fn expired_answers_are_deleted_when_the_store_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let at = UNIX_EPOCH + Duration::from_secs(1_772_409_540);
    let store = Arc::new(Store::open(&path, Clock::starting_at(at)).unwrap());
    let r = sqlite(&store, Duration::from_secs(60));
    r.put(answer("resp_1", "team", None, "hi", "hello"));
    settle(&r).await;
    drop((r, store));
    let store = Store::open(&path, Clock::starting_at(at + Duration::from_secs(59))).unwrap();
    assert_eq!(rows(&store), 1);
    drop(store);
    let store = Store::open(&path, Clock::starting_at(at + Duration::from_secs(60))).unwrap();
    assert_eq!(rows(&store), 0);
}

#[tokio::test(start_paused = true)]
async fn a_zero_retention_stores_nothing() {
    let (store, r) = service(Duration::ZERO);
    r.put(answer("resp_1", "team", None, "hi", "hello"));
    assert_eq!(r.get("resp_1", "team").await.unwrap(), None);
    settle(&r).await;
    assert_eq!(rows(&store), 0);
    // Another retention over the same store keeps it.
    let kept = r.configured(DAY, ResponseBounds::default());
    kept.put(answer("resp_1", "team", None, "hi", "hello"));
    assert!(r.get("resp_1", "team").await.unwrap().is_some());
}

fn texts(items: &[Value]) -> Vec<String> {
    items
        .iter()
        .map(|i| match &i["content"] {
            Value::String(s) => s.clone(),
            c => c[0]["text"].as_str().unwrap().to_owned(),
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_conversation_is_its_chain_oldest_first_and_starts_after_a_gap() {
    let (_, r) = service(DAY);
    r.put(answer("resp_1", "team", None, "u1", "a1"));
    r.put(answer("resp_2", "team", Some("resp_1"), "u2", "a2"));
    settle(&r).await;
    r.put(answer("resp_3", "team", Some("resp_2"), "u3", "a3"));
    let all = r.conversation("resp_3", "team").await.unwrap().unwrap();
    assert_eq!(texts(&all), ["u1", "a1", "u2", "a2", "u3", "a3"]);
    assert_eq!(all[0]["id"], "in_resp_1");
    assert_eq!(all[1]["id"], "out_resp_1");
    assert!(r.conversation("resp_3", "other").await.unwrap().is_none());
    assert!(r.conversation("resp_9", "team").await.unwrap().is_none());
    assert!(r.delete("resp_1", "team").await.unwrap());
    let rest = r.conversation("resp_3", "team").await.unwrap().unwrap();
    assert_eq!(texts(&rest), ["u2", "a2", "u3", "a3"]);
}

#[tokio::test(start_paused = true)]
async fn a_conversation_is_bounded_in_hops_and_bytes() {
    let (_, r) = service(DAY);
    let mut previous: Option<String> = None;
    for i in 0..=MAX_HOPS {
        let id = format!("resp_{i}");
        r.put(answer(&id, "team", previous.as_deref(), "u", "a"));
        previous = Some(id);
    }
    settle(&r).await;
    let last = format!("resp_{}", MAX_HOPS - 1);
    let ok = r.conversation(&last, "team").await.unwrap().unwrap();
    assert_eq!(ok.len(), 2 * MAX_HOPS);
    let over = r.conversation(&format!("resp_{MAX_HOPS}"), "team").await;
    assert!(
        matches!(over, Err(ConversationError::TooManyHops)),
        "{over:?}"
    );

    let big = "x".repeat(MAX_CONVERSATION_BYTES / 2);
    r.put(answer("resp_a", "team", None, &big, "a"));
    r.put(answer("resp_b", "team", Some("resp_a"), "u", "a"));
    assert!(r.conversation("resp_b", "team").await.unwrap().is_some());
    r.put(answer("resp_c", "team", Some("resp_b"), &big, "a"));
    let over = r.conversation("resp_c", "team").await;
    assert!(matches!(over, Err(ConversationError::TooLarge)), "{over:?}");
}

#[tokio::test(start_paused = true)]
async fn input_items_page_both_ways_and_items_without_an_id_get_one() {
    let (_, r) = service(DAY);
    let mut a = answer("resp_1", "team", None, "", "");
    a.input = (1..=5)
        .map(|i| json!({"id": format!("i{i}"), "type": "message", "role": "user", "content": "x"}))
        .collect();
    a.input
        .push(json!({"type": "function_call_output", "call_id": "c", "output": "4"}));
    r.put(a);
    let page = |after: Option<&'static str>, order| {
        let r = &r;
        async move {
            r.input_items("resp_1", "team", after, 2, order)
                .await
                .unwrap()
                .unwrap()
        }
    };
    let ids = |p: &ItemPage| -> Vec<String> {
        p.data
            .iter()
            .map(|i| i["id"].as_str().unwrap().to_owned())
            .collect()
    };
    let first = page(None, Order::Desc).await;
    let fco = ids(&first)[0].clone();
    assert!(fco.starts_with("fco_"), "{fco}");
    assert_eq!(ids(&first)[1], "i5");
    assert_eq!(
        (first.first_id.as_deref(), first.last_id.as_deref()),
        (Some(fco.as_str()), Some("i5"))
    );
    assert!(first.has_more);
    let second = page(Some("i5"), Order::Desc).await;
    assert_eq!(ids(&second), ["i4", "i3"]);
    let last = r
        .input_items("resp_1", "team", Some("i3"), 20, Order::Desc)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(ids(&last), ["i2", "i1"]);
    assert!(!last.has_more);
    let asc = page(None, Order::Asc).await;
    assert_eq!(ids(&asc), ["i1", "i2"]);
    assert!(asc.has_more);
    let end = page(Some("i4"), Order::Asc).await;
    assert_eq!(ids(&end), vec!["i5".to_owned(), fco.clone()]);
    assert!(!end.has_more);
    let none = page(Some(Box::leak(fco.into_boxed_str())), Order::Asc).await;
    assert!(none.data.is_empty() && none.first_id.is_none() && !none.has_more);
    let wire = serde_json::to_value(&end).unwrap();
    assert_eq!(wire["object"], "list");
    assert!(matches!(
        r.input_items("resp_1", "team", Some("nope"), 2, Order::Asc)
            .await,
        Err(PageError::UnknownAfter(_))
    ));
    assert!(
        r.input_items("resp_1", "other", None, 2, Order::Asc)
            .await
            .unwrap()
            .is_none()
    );
}

/// The ids stored for `key`, oldest first, and `response_usage` checked
/// against the rows themselves.
fn stored(store: &Store, key: &str) -> Vec<String> {
    let conn = store.conn.lock();
    let kept: Vec<(String, i64, i64)> = conn
        .prepare("SELECT key, count, bytes FROM response_usage ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    let real: Vec<(String, i64, i64)> = conn
        .prepare("SELECT key, COUNT(*), SUM(size) FROM response GROUP BY key ORDER BY key")
        .unwrap()
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
        .unwrap()
        .map(Result::unwrap)
        .collect();
    assert_eq!(kept, real, "the figures follow the rows");
    conn.prepare("SELECT id FROM response WHERE key = ?1 ORDER BY rowid")
        .unwrap()
        .query_map([key], |r| r.get(0))
        .unwrap()
        .map(Result::unwrap)
        .collect()
}

fn same_size(id: &str, key: &str) -> StoredResponse {
    // Ids of one length, so every answer has the same size.
    answer(id, key, None, "question", "reply")
}

#[tokio::test(start_paused = true)]
async fn the_retention_sweep_runs_by_itself_and_keeps_the_figures() {
    let (store, r) = service(Duration::from_secs(90));
    for i in 1..=3 {
        r.put(same_size(&format!("resp_t{i}"), "team"));
    }
    settle(&r).await;
    tokio::time::advance(Duration::from_secs(60)).await;
    r.put(same_size("resp_t4", "team"));
    settle(&r).await;
    // Nobody reads or writes: the sweep alone deletes the expired rows.
    tokio::time::advance(Duration::from_secs(61)).await;
    until("the first three are swept", || rows(&store) == 1).await;
    assert_eq!(stored(&store, "team"), ["resp_t4"]);
    tokio::time::advance(Duration::from_secs(60)).await;
    until("the last is swept", || rows(&store) == 0).await;
    assert!(stored(&store, "team").is_empty());
}

#[tokio::test(start_paused = true)]
async fn answers_with_ids_no_client_could_ask_for_are_not_stored() {
    let (store, r) = service(DAY);
    for id in ["", "resp_1/../2", "#usage", &"a".repeat(MAX_ID + 1)] {
        r.put(answer(id, "team", None, "hi", "hello"));
    }
    settle(&r).await;
    assert_eq!(rows(&store), 0);
}

#[tokio::test(start_paused = true)]
async fn the_figures_survive_a_reopening_and_an_older_schema_is_migrated() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("state.db");
    let at = UNIX_EPOCH + Duration::from_secs(1_772_409_540);
    // A store of the schema before sizes, holding two answers.
    {
        let conn = rusqlite::Connection::open(&path).unwrap();
        let tx = conn.unchecked_transaction().unwrap();
        for step in &crate::store::MIGRATIONS[..5] {
            tx.execute_batch(step).unwrap();
        }
        tx.pragma_update(None, "user_version", 5).unwrap();
        for id in ["resp_a", "resp_b"] {
            tx.execute(
                "INSERT INTO response (id, key, created, expires, previous, input, output)
                 VALUES (?1, 'team', 1, 9999999999, NULL, '[]', '{}')",
                [id],
            )
            .unwrap();
        }
        tx.commit().unwrap();
    }
    let store = Arc::new(Store::open(&path, Clock::starting_at(at)).unwrap());
    assert_eq!(stored(&store, "team"), ["resp_a", "resp_b"]);
    let r = bounded(
        &store,
        DAY,
        ResponseBounds {
            max_per_key: 2,
            ..ResponseBounds::default()
        },
    );
    r.put(same_size("resp_c", "team"));
    settle(&r).await;
    assert_eq!(stored(&store, "team"), ["resp_b", "resp_c"]);
}

mod bounds;
