//! What review found at the cache's edges: an arena behind another
//! route's cache is never stored (each arena is its own comparison, with
//! its own vote), and a member's cache inside a strategy says nothing to
//! the client (the route's header is the only one it gets).

use conclave::config::CacheScope;

use super::{ALPHA, ask, cache_hdr, calls, gw};

#[tokio::test(start_paused = true)]
async fn an_arena_behind_a_cached_alias_is_never_stored() {
    let gw = gw(&[("alias", CacheScope::Key, 0.0)]);
    let first = gw.chat_with(&ask("alias", "q"), &[ALPHA]).await;
    assert_eq!(first.status, 200, "{}", first.text);
    let again = gw.chat_with(&ask("alias", "q"), &[ALPHA]).await;
    assert_eq!(again.status, 200, "{}", again.text);
    assert_eq!(cache_hdr(&again), Some("miss"), "{}", again.text);
    let id = |r: &crate::common::Resp| r.json()["arena_id"].as_str().map(str::to_owned);
    assert!(id(&first).is_some());
    assert_ne!(
        id(&first),
        id(&again),
        "each arena is its own, with its own vote"
    );
    assert_eq!(calls(&gw, "p1") + calls(&gw, "p2"), 4);
}

#[tokio::test(start_paused = true)]
async fn a_members_cache_says_nothing_to_the_client() {
    // p1's entry answers inside the panel; the client asked for the panel,
    // which has no rule of its own.
    let gw = gw(&[("p1", CacheScope::Shared, 0.0)]);
    for _ in 0..2 {
        let r = gw.chat_with(&ask("panel2", "q"), &[ALPHA]).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert!(
            r.headers.get("x-conclave-cache").is_none(),
            "{:?}",
            r.headers
        );
        assert!(r.headers.get("age").is_none(), "{:?}", r.headers);
    }
    assert_eq!(calls(&gw, "p1"), 1, "the member's entry did answer");
    // Asked for directly, the model's cache speaks.
    let r = gw.chat_with(&ask("p1", "q"), &[ALPHA]).await;
    assert_eq!(cache_hdr(&r), Some("hit"));
}
