use std::time::{Duration, UNIX_EPOCH};

use serde_json::json;

use super::*;
use crate::clock::Clock;

struct Kept(ResponseStore, Duration);

impl std::ops::Deref for Kept {
    type Target = ResponseStore;
    fn deref(&self) -> &ResponseStore {
        &self.0
    }
}

impl Kept {
    fn put(&self, r: StoredResponse) {
        self.0.put(r, self.1);
    }
}

fn store(retention: Duration) -> Kept {
    let clock = Clock::starting_at(UNIX_EPOCH + Duration::from_secs(1_800_000_000));
    Kept(
        ResponseStore::new(Arc::new(Store::in_memory(clock).unwrap())),
        retention,
    )
}

fn response(id: &str, key: &str, previous: Option<&str>, said: &str) -> StoredResponse {
    StoredResponse {
        id: id.into(),
        key: key.into(),
        previous: previous.map(str::to_owned),
        input: vec![json!({"type": "message", "role": "user", "content": said})],
        response: json!({"id": id, "output": [{"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": format!("re {said}")}]}]}),
    }
}

async fn settled(s: &Kept) {
    for _ in 0..1000 {
        if s.pending.is_empty() {
            return;
        }
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    panic!("writes never settled");
}

#[tokio::test]
async fn kept_per_key_read_before_and_after_the_write_and_deleted() {
    let s = store(Duration::from_secs(3600));
    s.put(response("resp_1", "alice", None, "hi"));
    // Readable at once, before the write lands.
    assert_eq!(
        s.get("resp_1", "alice").await.unwrap().unwrap().id,
        "resp_1"
    );
    settled(&s).await;
    let got = s.get("resp_1", "alice").await.unwrap().unwrap();
    assert_eq!(got, response("resp_1", "alice", None, "hi"));
    assert!(s.get("resp_1", "bob").await.unwrap().is_none());
    assert!(!s.delete("resp_1", "bob").await.unwrap());
    assert!(s.delete("resp_1", "alice").await.unwrap());
    assert!(s.get("resp_1", "alice").await.unwrap().is_none());
    assert!(!s.delete("resp_1", "alice").await.unwrap());
}

#[tokio::test]
async fn a_delete_racing_the_write_leaves_nothing() {
    let s = store(Duration::from_secs(3600));
    for i in 0..50 {
        let id = format!("resp_{i}");
        s.put(response(&id, "k", None, "x"));
        assert!(s.delete(&id, "k").await.unwrap());
    }
    settled(&s).await;
    for i in 0..50 {
        assert!(
            s.get(&format!("resp_{i}"), "k").await.unwrap().is_none(),
            "{i}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn expired_responses_are_gone_and_zero_keeps_none() {
    let s = store(Duration::from_secs(60));
    s.put(response("resp_1", "k", None, "x"));
    settled(&s).await;
    tokio::time::advance(Duration::from_secs(59)).await;
    assert!(s.get("resp_1", "k").await.unwrap().is_some());
    tokio::time::advance(Duration::from_secs(1)).await;
    assert!(s.get("resp_1", "k").await.unwrap().is_none());
    // The next write sweeps it out of the file.
    s.put(response("resp_2", "k", None, "y"));
    settled(&s).await;
    let n: i64 = s
        .store
        .conn
        .lock()
        .query_row("SELECT COUNT(*) FROM response", [], |r| r.get(0))
        .unwrap();
    assert_eq!(n, 1);

    let none = store(Duration::ZERO);
    none.put(response("resp_1", "k", None, "x"));
    assert!(none.get("resp_1", "k").await.unwrap().is_none());
}

#[tokio::test]
async fn a_conversation_is_gathered_oldest_first() {
    let s = store(Duration::from_secs(3600));
    s.put(response("resp_a", "k", None, "one"));
    s.put(response("resp_b", "k", Some("resp_a"), "two"));
    settled(&s).await;
    s.put(response("resp_c", "k", Some("resp_b"), "three"));
    let items = s.conversation("resp_c", "k").await.unwrap().unwrap();
    let said: Vec<String> = items
        .iter()
        .map(|i| match &i["content"] {
            Value::String(t) => t.clone(),
            c => c[0]["text"].as_str().unwrap().to_owned(),
        })
        .collect();
    assert_eq!(
        said,
        ["one", "re one", "two", "re two", "three", "re three"]
    );
    assert!(s.conversation("resp_c", "other").await.unwrap().is_none());
    // A gap further back ends the conversation there.
    s.delete("resp_a", "k").await.unwrap();
    assert_eq!(
        s.conversation("resp_c", "k").await.unwrap().unwrap().len(),
        4
    );
}

#[tokio::test]
async fn a_conversation_past_its_bounds_is_refused() {
    let s = store(Duration::from_secs(3600));
    let mut previous: Option<String> = None;
    for i in 0..=MAX_HOPS {
        let id = format!("resp_{i}");
        s.put(response(&id, "k", previous.as_deref(), "x"));
        previous = Some(id);
    }
    settled(&s).await;
    let last = format!("resp_{MAX_HOPS}");
    assert!(matches!(
        s.conversation(&last, "k").await,
        Err(ConversationError::TooLong)
    ));
    assert!(s.conversation("resp_10", "k").await.unwrap().is_some());
}
