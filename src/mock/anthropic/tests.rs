//! The Messages API as the mock plays it.

use std::sync::Arc;

use futures::StreamExt;
use indexmap::IndexMap;
use serde_json::{Value, json};

use super::Api;
use crate::mock::{Behavior, MockResponse, Quirks, Simulator, SwapSim};
use crate::wire::Endpoint;

fn sim(models: &str) -> Arc<Simulator> {
    let models: IndexMap<String, Behavior> = toml::from_str(models).unwrap();
    let s = Simulator::new(models, SwapSim::default(), Quirks::default(), true);
    Arc::new(s.with_api(Api::Anthropic))
}

async fn collect(r: MockResponse) -> (u16, String) {
    let mut out = Vec::new();
    let mut body = r.body;
    while let Some(Ok(b)) = body.next().await {
        out.extend_from_slice(&b);
    }
    (r.status, String::from_utf8_lossy(&out).into_owned())
}

async fn ask(s: &Arc<Simulator>, endpoint: Endpoint, body: Value) -> (u16, String) {
    collect(
        s.respond(endpoint, body.to_string().as_bytes(), None, None)
            .await,
    )
    .await
}

#[tokio::test]
async fn a_whole_message_in_anthropics_shape() {
    let s = sim(
        "[m]\nusage = { prompt_tokens = 100, completion_tokens = 3, cached_tokens = 60, cache_write_tokens = 30 }",
    );
    let body = json!({"model": "m", "max_tokens": 100, "system": "be brief",
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hello big world"}]}]});
    let (status, text) = ask(&s, Endpoint::MESSAGES, body).await;
    assert_eq!(status, 200, "{text}");
    let v: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(v["type"], "message");
    assert_eq!(
        v["content"][0],
        json!({"type": "text", "text": "hello big world"})
    );
    assert_eq!(v["stop_reason"], "end_turn");
    assert_eq!(
        v["usage"],
        json!({"input_tokens": 10, "cache_creation_input_tokens": 30, "cache_read_input_tokens": 60, "output_tokens": 3})
    );
}

#[tokio::test]
async fn a_stream_with_thinking_and_a_tool_call() {
    let s = sim("[m]\nreply = { tool_call = { name = \"f\", arguments = { a = 1 } } }");
    let body = json!({"model": "m", "max_tokens": 2000, "stream": true,
        "thinking": {"type": "enabled", "budget_tokens": 1024},
        "messages": [{"role": "user", "content": "hi"}]});
    let (status, text) = ask(&s, Endpoint::MESSAGES, body).await;
    assert_eq!(status, 200);
    let kinds: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("event: "))
        .collect();
    assert_eq!(kinds.first(), Some(&"message_start"));
    assert_eq!(kinds.last(), Some(&"message_stop"));
    assert!(kinds.contains(&"ping"));
    for needle in [
        "\"thinking_delta\"",
        "\"signature_delta\"",
        "\"input_json_delta\"",
        "\"stop_reason\":\"tool_use\"",
        "\"name\":\"f\"",
    ] {
        assert!(text.contains(needle), "{needle} in {text}");
    }
}

#[tokio::test]
async fn refuses_what_anthropic_refuses() {
    let s = sim("");
    let user = json!({"role": "user", "content": "hi"});
    for (body, says) in [
        (
            json!({"model": "m", "messages": [user]}),
            "max_tokens: Field required",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}, user]}),
            "Input should be 'user' or 'assistant'",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "stream_options": {}, "messages": [user]}),
            "stream_options: Extra inputs",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}]}),
            "Input tag 'image_url'",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "4"}]}]}),
            "unexpected `tool_use_id`",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "tools": [{"type": "function", "function": {"name": "f"}}], "messages": [user]}),
            "tools.0",
        ),
        (
            json!({"model": "m", "max_tokens": 5, "temperature": 1.5, "messages": [user]}),
            "temperature",
        ),
    ] {
        let (status, text) = ask(&s, Endpoint::MESSAGES, body).await;
        assert_eq!(status, 400, "{text}");
        let v: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(v["type"], "error");
        assert_eq!(v["error"]["type"], "invalid_request_error");
        assert!(
            v["error"]["message"].as_str().unwrap().contains(says),
            "{text}"
        );
    }
    let (status, text) = ask(
        &s,
        Endpoint::CHAT,
        json!({"model": "m", "messages": [user]}),
    )
    .await;
    assert_eq!(status, 404, "{text}");
    assert!(text.contains("not_found_error"));
}

#[tokio::test]
async fn counts_tokens_and_fails_in_anthropics_shape() {
    let s = sim("[busy]\nstatus = 529\n[slow]\nstatus = 429\nretry_after = 7");
    let (status, text) = ask(
        &s,
        Endpoint::COUNT_TOKENS,
        json!({"model": "m", "messages": [{"role": "user", "content": "12345678"}]}),
    )
    .await;
    assert_eq!((status, text.as_str()), (200, "{\"input_tokens\":2}"));
    let user = json!([{"role": "user", "content": "hi"}]);
    let (status, text) = ask(
        &s,
        Endpoint::MESSAGES,
        json!({"model": "busy", "max_tokens": 5, "messages": user}),
    )
    .await;
    assert_eq!(status, 529);
    assert!(text.contains("overloaded_error"), "{text}");
    let r = s
        .respond(
            Endpoint::MESSAGES,
            json!({"model": "slow", "max_tokens": 5, "messages": user})
                .to_string()
                .as_bytes(),
            None,
            None,
        )
        .await;
    assert_eq!((r.status, r.retry_after), (429, Some(7)));
    assert!(collect(r).await.1.contains("rate_limit_error"));
}
