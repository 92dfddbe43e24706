//! Upstreams outlive a reload: a reload that leaves an upstream as it was
//! keeps it whole, and one that changes its settings (not its lane's)
//! builds it anew on the same lane, so a single-slot server never gets a
//! call from the old config and one from the new at once.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::extract::State;
use axum::routing::post;
use common::*;
use serde_json::json;

/// A single-slot server: it answers after 150 ms and records the most
/// calls it ever had at once.
async fn single_slot() -> (String, Arc<(AtomicUsize, AtomicUsize)>) {
    let seen = Arc::new((AtomicUsize::new(0), AtomicUsize::new(0)));
    let app = axum::Router::new()
        .route(
            "/v1/chat/completions",
            post(
                |State(s): State<Arc<(AtomicUsize, AtomicUsize)>>| async move {
                    let now = s.0.fetch_add(1, Ordering::SeqCst) + 1;
                    s.1.fetch_max(now, Ordering::SeqCst);
                    tokio::time::sleep(Duration::from_millis(150)).await;
                    s.0.fetch_sub(1, Ordering::SeqCst);
                    axum::Json(json!({
                        "id": "x", "object": "chat.completion", "created": 0, "model": "m",
                        "choices": [{"index": 0, "finish_reason": "stop",
                            "message": {"role": "assistant", "content": "ok"}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                    }))
                },
            ),
        )
        .with_state(seen.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (base, seen)
}

fn config(base: &str, timeout: &str) -> String {
    format!(
        "[upstreams.gpu]\nkind = \"openai\"\nbase_url = \"{base}/v1\"\nlane = \"local\"\n\
         max_concurrency = 1\ntimeout = \"{timeout}\"\n\n[models.m]\nupstream = \"gpu\"\n"
    )
}

async fn load_across_a_reload(new_timeout: &str) -> usize {
    let (base, seen) = single_slot().await;
    let gw = Proc::gateway(&config(&base, "30s"));
    let client = reqwest::Client::new();
    let ask = || {
        let (client, url) = (client.clone(), gw.url("/v1/chat/completions"));
        tokio::spawn(async move {
            client
                .post(url)
                .json(&json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]}))
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    let before: Vec<_> = (0..8).map(|_| ask()).collect();
    // All eight are in flight (on the lane or queued for it) at the reload.
    gw.wait_in_flight(8.0).await;
    std::fs::write(gw.path("conclave.toml"), config(&base, new_timeout)).unwrap();
    gw.signal("HUP");
    let reloaded = eventually(5, || async { gw.stderr().contains("reloaded") }).await;
    assert!(reloaded, "{}", gw.stderr());
    let after: Vec<_> = (0..8).map(|_| ask()).collect();
    for h in before.into_iter().chain(after) {
        assert_eq!(h.await.unwrap().unwrap(), 200);
    }
    seen.1.load(Ordering::SeqCst)
}

#[tokio::test]
async fn a_reload_that_changes_an_upstream_keeps_its_single_slot_lane() {
    assert_eq!(load_across_a_reload("31s").await, 1);
}

#[tokio::test]
async fn a_reload_that_leaves_an_upstream_be_keeps_it_whole() {
    assert_eq!(load_across_a_reload("30s").await, 1);
}
