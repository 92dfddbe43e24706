//! What one streamed answer is: cut, empty, capped or whole, read from a
//! router that plays each stream; and the sampling settings every body
//! carries.

use std::sync::Arc;

use parking_lot::Mutex;

use axum::Router;
use axum::body::Body;
use axum::extract::State;
use axum::routing::post;

use super::*;

type Seen = Arc<Mutex<Vec<Value>>>;

/// A router answering every chat request with `stream` (SSE text), and
/// the bodies it was sent.
fn playing(stream: String) -> (Router, Seen) {
    let seen: Seen = Arc::default();
    let router = Router::new()
        .route(
            "/v1/chat/completions",
            post(move |State(seen): State<Seen>, body: String| async move {
                if let Ok(v) = serde_json::from_str(&body) {
                    seen.lock().push(v);
                }
                axum::response::Response::builder()
                    .header("content-type", "text/event-stream")
                    .header("x-request-id", "req-1")
                    .body(Body::from(stream))
                    .unwrap()
            }),
        )
        .with_state(seen.clone());
    (router, seen)
}

fn sender(router: Router, sampling: Sampling) -> Sender {
    Sender {
        target: Target::Router(router),
        key: None,
        timeout: Duration::from_secs(5),
        sampling,
    }
}

async fn ask(stream: impl Into<String>) -> Asked {
    let (router, _) = playing(stream.into());
    sender(router, Sampling::default())
        .ask("m", &[json!({"role": "user", "content": "q"})], "u")
        .await
}

fn chunk(content: &str, finish: Option<&str>) -> String {
    let v =
        json!({"choices": [{"index": 0, "delta": {"content": content}, "finish_reason": finish}]});
    format!("data: {v}\n\n")
}

#[tokio::test]
async fn a_whole_answer_is_its_text_and_reason() {
    let s = chunk("Paris", None) + &chunk("", Some("stop")) + "data: [DONE]\n\n";
    let a = ask(s).await;
    assert_eq!(a.error, None);
    assert_eq!(a.answer, "Paris");
    assert_eq!(a.finish_reason.as_deref(), Some("stop"));
    assert_eq!(a.request_id, "req-1");
}

#[tokio::test]
async fn a_stream_without_a_finish_reason_was_cut() {
    // What llama-cpp-python sends when a second request interrupts it.
    let s = chunk("Le Marais is the capital of", None) + "data: [DONE]\n\n";
    let a = ask(s).await;
    let e = a.error.unwrap_or_default();
    assert!(e.contains("cut") && e.contains("finish_reason"), "{e}");
    // Nothing at all, then `[DONE]`: cut too.
    let a = ask("data: [DONE]\n\n").await;
    assert!(a.error.unwrap_or_default().contains("cut"));
}

#[tokio::test]
async fn an_empty_answer_is_an_error() {
    let s = chunk("", None) + &chunk(" \n", Some("stop")) + "data: [DONE]\n\n";
    let a = ask(s).await;
    let e = a.error.unwrap_or_default();
    assert!(e.contains("empty answer"), "{e}");
}

#[tokio::test]
async fn an_answer_capped_at_max_tokens_is_an_answer() {
    let s = chunk("The answer is 4", Some("length")) + "data: [DONE]\n\n";
    let a = ask(s).await;
    assert_eq!(a.error, None);
    assert_eq!(a.finish_reason.as_deref(), Some("length"));
    assert_eq!(a.answer, "The answer is 4");
}

#[tokio::test]
async fn an_error_event_after_text_is_an_error() {
    let s = chunk("half an", None)
        + "data: {\"error\": {\"message\": \"upstream broke\"}}\n\n"
        + "data: [DONE]\n\n";
    let a = ask(s).await;
    assert_eq!(a.error.as_deref(), Some("upstream broke"));
}

#[tokio::test]
async fn every_body_carries_the_sampling_settings() {
    let (router, seen) = playing(chunk("x", Some("stop")));
    let greedy = sender(router.clone(), Sampling::default());
    greedy.ask("m", &[], "u").await;
    let set = sender(
        router.clone(),
        Sampling {
            temperature: Some(0.7),
            seed: Some(42),
            max_tokens: Some(48),
        },
    );
    set.ask("m", &[], "u").await;
    let server = sender(
        router,
        Sampling {
            temperature: None,
            seed: None,
            max_tokens: None,
        },
    );
    server.ask("m", &[], "u").await;
    let seen = seen.lock().clone();
    assert_eq!(seen.len(), 3);
    assert_eq!(seen[0]["temperature"], json!(0.0));
    assert!(seen[0].get("seed").is_none() && seen[0].get("max_tokens").is_none());
    assert_eq!(seen[1]["temperature"], json!(0.7));
    assert_eq!(seen[1]["seed"], json!(42));
    assert_eq!(seen[1]["max_tokens"], json!(48));
    assert!(seen[2].get("temperature").is_none(), "{}", seen[2]);
}
