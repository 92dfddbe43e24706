//! The bounds on what the store keeps: rows waiting to be written while
//! the store is stuck, and each key's answers by count and bytes and all
//! keys' together, evicting the writer's own oldest only.

use super::*;

#[tokio::test(start_paused = true)]
async fn pending_rows_are_bounded_while_the_store_is_stuck() {
    let (store, r) = service(DAY);
    let held = store.conn.lock();
    for i in 0..=MAX_PENDING {
        r.put(answer(&format!("resp_{i}"), "team", None, "u", "a"));
    }
    assert_eq!(r.inner.pending.lock().rows.len(), MAX_PENDING);
    drop(held);
    settle(&r).await;
    assert_eq!(rows(&store), MAX_PENDING as i64);
    assert!(r.get("resp_0", "team").await.unwrap().is_some());
    assert!(
        r.get(&format!("resp_{MAX_PENDING}"), "team")
            .await
            .unwrap()
            .is_none()
    );
}

/// The size [`Row::size`] gives `a` once put (its items all have ids).
fn size(a: &StoredResponse) -> u64 {
    (a.id.len()
        + a.key.len()
        + a.previous.as_ref().map_or(0, String::len)
        + serde_json::to_string(&a.input).unwrap().len()
        + serde_json::to_string(&a.response).unwrap().len()) as u64
}

#[tokio::test(start_paused = true)]
async fn the_count_bound_evicts_the_keys_own_oldest_only() {
    let (store, _) = service(DAY);
    let bounds = ResponseBounds {
        max_per_key: 3,
        ..ResponseBounds::default()
    };
    let r = bounded(&store, DAY, bounds);
    r.put(same_size("resp_o1", "crew"));
    for i in 1..=3 {
        r.put(same_size(&format!("resp_t{i}"), "team"));
    }
    settle(&r).await;
    r.put(same_size("resp_t4", "team"));
    r.put(same_size("resp_t5", "team"));
    settle(&r).await;
    assert_eq!(stored(&store, "team"), ["resp_t3", "resp_t4", "resp_t5"]);
    assert_eq!(stored(&store, "crew"), ["resp_o1"]);
    assert_eq!(r.get("resp_t1", "team").await.unwrap(), None);
    assert!(r.get("resp_o1", "crew").await.unwrap().is_some());
    // Deleting makes room without evicting.
    assert!(r.delete("resp_t3", "team").await.unwrap());
    r.put(same_size("resp_t6", "team"));
    settle(&r).await;
    assert_eq!(stored(&store, "team"), ["resp_t4", "resp_t5", "resp_t6"]);
}

#[tokio::test(start_paused = true)]
async fn the_bytes_bound_of_a_key_evicts_its_oldest_and_refuses_what_alone_exceeds_it() {
    let (store, _) = service(DAY);
    let one = size(&same_size("resp_t1", "team"));
    let bounds = ResponseBounds {
        max_per_key: 100,
        max_bytes_per_key: 2 * one + one / 2,
        max_bytes: 100 * one,
    };
    let r = bounded(&store, DAY, bounds);
    for i in 1..=4 {
        r.put(same_size(&format!("resp_t{i}"), "team"));
    }
    r.put(same_size("resp_o1", "crew"));
    settle(&r).await;
    assert_eq!(stored(&store, "team"), ["resp_t3", "resp_t4"]);
    // Two of the size of the others: both older ones go.
    let big = answer("resp_tb", "team", None, &"x".repeat(one as usize), "reply");
    assert!(size(&big) <= bounds.max_bytes_per_key);
    r.put(big);
    settle(&r).await;
    assert_eq!(stored(&store, "team"), ["resp_tb"]);
    // Larger than the key may hold at all: not stored, nothing evicted.
    let huge = answer(
        "resp_th",
        "team",
        None,
        &"x".repeat(3 * one as usize),
        "reply",
    );
    r.put(huge);
    assert_eq!(r.get("resp_th", "team").await.unwrap(), None);
    settle(&r).await;
    assert_eq!(stored(&store, "team"), ["resp_tb"]);
    assert_eq!(stored(&store, "crew"), ["resp_o1"]);
}

#[tokio::test(start_paused = true)]
async fn the_total_bound_evicts_the_writers_oldest_and_never_another_keys() {
    let (store, _) = service(DAY);
    let one = size(&same_size("resp_t1", "team"));
    let bounds = ResponseBounds {
        max_per_key: 100,
        max_bytes_per_key: 3 * one,
        max_bytes: 4 * one,
    };
    let r = bounded(&store, DAY, bounds);
    for i in 1..=3 {
        r.put(same_size(&format!("resp_o{i}"), "crew"));
    }
    r.put(same_size("resp_t1", "team"));
    settle(&r).await;
    // The total is reached: team's own oldest goes, other's stay.
    r.put(same_size("resp_t2", "team"));
    settle(&r).await;
    assert_eq!(stored(&store, "team"), ["resp_t2"]);
    assert_eq!(stored(&store, "crew"), ["resp_o1", "resp_o2", "resp_o3"]);
    // One that would need other's room is not stored, and team's stays.
    let big = answer("resp_tb", "team", None, &"x".repeat(one as usize), "reply");
    assert!(size(&big) <= bounds.max_bytes_per_key);
    r.put(big);
    settle(&r).await;
    assert_eq!(stored(&store, "team"), ["resp_t2"]);
    assert_eq!(stored(&store, "crew"), ["resp_o1", "resp_o2", "resp_o3"]);
    // The other key at its total evicts its own.
    r.put(same_size("resp_o4", "crew"));
    settle(&r).await;
    assert_eq!(stored(&store, "crew"), ["resp_o2", "resp_o3", "resp_o4"]);
    assert_eq!(stored(&store, "team"), ["resp_t2"]);
}

#[tokio::test(start_paused = true)]
async fn a_reload_bounds_the_answers_stored_from_then_on() {
    let (store, r) = service(DAY);
    for i in 1..=5 {
        r.put(same_size(&format!("resp_t{i}"), "team"));
    }
    settle(&r).await;
    let tighter = r.configured(
        DAY,
        ResponseBounds {
            max_per_key: 2,
            ..ResponseBounds::default()
        },
    );
    tighter.put(same_size("resp_t6", "team"));
    settle(&r).await;
    assert_eq!(stored(&store, "team"), ["resp_t5", "resp_t6"]);
}
