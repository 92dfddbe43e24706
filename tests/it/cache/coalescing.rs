//! Identical requests in flight at once make one upstream call, whole
//! or streamed; neither a waiter leaving nor the call's own client
//! leaving stops it for the others.

use std::time::Duration;

use futures::future::join_all;

use super::{ALPHA, ask, cache_hdr, calls, gw, stream_text, streamed};
use conclave::config::CacheScope;

#[tokio::test(start_paused = true)]
async fn a_hundred_identical_requests_make_one_upstream_call() {
    let gw = gw(&[("slow", CacheScope::Key, 0.0)]);
    let body = ask("slow", "same");
    let whole = join_all((0..100).map(|_| gw.chat_with(&body, &[ALPHA]))).await;
    assert_eq!(calls(&gw, "slow"), 1);
    for r in &whole {
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.json()["choices"][0]["message"]["content"],
            "slow answer to same"
        );
    }
    let misses = whole
        .iter()
        .filter(|r| cache_hdr(r) == Some("miss"))
        .count();
    assert_eq!(misses, 1);

    let body = streamed(ask("slow", "streamed"));
    let streams = join_all((0..100).map(|_| gw.chat_with(&body, &[ALPHA]))).await;
    assert_eq!(calls(&gw, "slow"), 2);
    for r in &streams {
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(stream_text(&r.text).0, "slow answer to streamed");
    }
}

#[tokio::test(start_paused = true)]
async fn waiters_and_the_first_client_leaving_do_not_stop_the_others() {
    let gw = std::sync::Arc::new(gw(&[("slow", CacheScope::Key, 0.0)]));
    let spawn = |text: &'static str| {
        let gw = gw.clone();
        tokio::spawn(async move { gw.chat_with(&ask("slow", text), &[ALPHA]).await })
    };
    // The first client (the call's own) and some waiters leave.
    let first = spawn("q");
    tokio::time::sleep(Duration::from_millis(100)).await;
    let leaving: Vec<_> = (0..5).map(|_| spawn("q")).collect();
    let staying: Vec<_> = (0..5).map(|_| spawn("q")).collect();
    tokio::time::sleep(Duration::from_millis(100)).await;
    first.abort();
    for l in &leaving {
        l.abort();
    }
    for s in staying {
        let r = s.await.unwrap();
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.json()["choices"][0]["message"]["content"],
            "slow answer to q"
        );
    }
    assert_eq!(calls(&gw, "slow"), 1);
    // Stored: the next one hits.
    let r = gw.chat_with(&ask("slow", "q"), &[ALPHA]).await;
    assert_eq!(cache_hdr(&r), Some("hit"));
}
