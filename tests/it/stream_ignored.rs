//! A chat server that ignores `stream` and answers whole
//! (`content-type: application/json`) is read as having answered: one
//! call, replayed as a stream to a client that asked for one, a race's
//! candidates each called once, and no failure against the server's
//! health (it was a cut stream, a second call, and under a race's load an
//! ejection of a server that answered every call). The label is checked
//! against the body: an event stream labelled JSON is relayed as one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use axum::response::IntoResponse;
use common::inproc::Gw;
use serde_json::{Value, json};

/// An event stream of one text delta and a finish.
fn labelled_stream() -> String {
    let chunk = |delta: Value, finish: Value| {
        let c = json!({"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "m",
                       "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]});
        format!("data: {c}\n\n")
    };
    chunk(
        json!({"role": "assistant", "content": "Lyon is not."}),
        Value::Null,
    ) + &chunk(json!({}), json!("stop"))
        + "data: [DONE]\n\n"
}

/// A server that answers every chat call whole, counting them; its model
/// `sse-labelled-json` sends an event stream labelled JSON instead.
async fn upstream() -> (String, Arc<AtomicUsize>) {
    let (chat, calls) = common::counted_chat(|req| {
        if req["model"] == "sse-labelled-json" {
            return ([("content-type", "application/json")], labelled_stream()).into_response();
        }
        let message = json!({"role": "assistant", "content": "Paris is the capital."});
        axum::Json(
            json!({"id": "c1", "object": "chat.completion", "created": 0, "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
            "usage": {"prompt_tokens": 5, "completion_tokens": 4, "total_tokens": 9}}),
        )
        .into_response()
    });
    let app = axum::Router::new().route("/v1/chat/completions", chat);
    (common::serve_app(app).await, calls)
}

#[tokio::test]
async fn a_whole_answer_to_a_stream_is_one_call_and_no_failure() {
    let (base, calls) = upstream().await;
    let gw = Gw::start(&format!(
        "[upstreams.plain]\nkind = \"openai\"\nbase_url = \"{base}/v1\"\n\
         [models.a]\nupstream = \"plain\"\nmodel = \"m\"\n\
         [models.b]\nupstream = \"plain\"\nmodel = \"m2\"\n\
         [models.odd]\nupstream = \"plain\"\nmodel = \"sse-labelled-json\"\n\
         [routes.best]\nstrategy = \"race\"\ncandidates = [\"a\", \"b\"]\n"
    ));
    let ask = |model: &str, stream: bool| {
        json!({"model": model, "stream": stream,
               "messages": [{"role": "user", "content": "Capital of France?"}]})
    };

    let r = gw.chat(&ask("a", true)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-attempts"), Some("1"), "{}", r.text);
    assert!(r.text.contains("Paris is the capital."), "{}", r.text);
    assert!(r.text.contains("\"finish_reason\":\"stop\""), "{}", r.text);
    assert!(r.text.trim_end().ends_with("data: [DONE]"), "{}", r.text);
    assert_eq!(calls.load(Ordering::SeqCst), 1);

    // An event stream labelled JSON is still relayed as one.
    let r = gw.chat(&ask("odd", true)).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-attempts"), Some("1"), "{}", r.text);
    assert!(r.text.contains("Lyon is not."), "{}", r.text);
    assert_eq!(calls.load(Ordering::SeqCst), 2);

    // A race's candidates are streamed from the server (cancellable calls):
    // each answers whole, none is called twice or fails, none is ejected.
    let rounds = 12;
    for _ in 0..rounds {
        let r = gw.chat(&ask("best", false)).await;
        assert_eq!(r.status, 200, "{}", r.text);
        assert_eq!(
            r.json()["choices"][0]["message"]["content"],
            "Paris is the capital."
        );
    }
    // At most one call a candidate (a race may cancel its slower one).
    let made = calls.load(Ordering::SeqCst);
    assert!(made <= 2 + 2 * rounds, "{made} calls");
    let metrics = gw.metrics();
    let failed: Vec<&str> = metrics
        .lines()
        .filter(|l| {
            (l.starts_with("conclave_attempts_total") && l.contains("verdict=\"error\""))
                || l.starts_with("conclave_ejections_total")
        })
        .collect();
    assert!(failed.is_empty(), "{failed:?}");
}
