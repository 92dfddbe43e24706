use serde_json::{Value, json};

use super::*;
use crate::wire::NotAnAnswer;

fn answer(message: Value, t: &Translation) -> Value {
    to_completion(message.to_string().as_bytes(), t, 1_700_000_000).unwrap()
}

fn message(content: Value, stop: &str) -> Value {
    json!({
        "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5-20250929",
        "content": content,
        "stop_reason": stop,
        "stop_sequence": null,
        "usage": {"input_tokens": 2095, "output_tokens": 503}
    })
}

#[test]
fn text_blocks_join_into_content() {
    let c = answer(
        message(
            json!([{"type": "text", "text": "Hi! "}, {"type": "text", "text": "My name is Claude."}]),
            "end_turn",
        ),
        &Translation::default(),
    );
    assert_eq!(
        c,
        json!({
            "id": "msg_013Zva2CMHLNnXjNJJKqJ2EF",
            "object": "chat.completion",
            "created": 1_700_000_000,
            "model": "claude-sonnet-4-5-20250929",
            "choices": [{
                "index": 0,
                "message": {"role": "assistant", "content": "Hi! My name is Claude."},
                "finish_reason": "stop",
                "logprobs": null,
            }],
            "usage": {
                "prompt_tokens": 2095, "completion_tokens": 503, "total_tokens": 2598,
                "prompt_tokens_details": {"cached_tokens": 0},
                "cache_read_input_tokens": 0, "cache_creation_input_tokens": 0,
            },
        })
    );
}

#[test]
fn tool_use_becomes_tool_calls_and_content_is_null_without_text() {
    let c = answer(
        message(
            json!([{"type": "tool_use", "id": "toolu_01A09q90qw90lq917835lq9", "name": "get_weather",
                    "input": {"location": "San Francisco, CA", "unit": "celsius"}}]),
            "tool_use",
        ),
        &Translation::default(),
    );
    let choice = &c["choices"][0];
    assert_eq!(choice["finish_reason"], "tool_calls");
    assert_eq!(choice["message"]["content"], Value::Null);
    let call = &choice["message"]["tool_calls"][0];
    assert_eq!(call["id"], "toolu_01A09q90qw90lq917835lq9");
    assert_eq!(call["type"], "function");
    assert_eq!(call["function"]["name"], "get_weather");
    let args: Value =
        serde_json::from_str(call["function"]["arguments"].as_str().unwrap()).unwrap();
    assert_eq!(
        args,
        json!({"location": "San Francisco, CA", "unit": "celsius"})
    );
}

#[test]
fn thinking_becomes_reasoning_content_and_thinking_blocks() {
    let c = answer(
        message(
            json!([
                {"type": "thinking", "thinking": "Let me analyze", "signature": "WaUjzkypQ2mUEVM36O2Txu"},
                {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
                {"type": "thinking", "thinking": " step by step.", "signature": "sig2"},
                {"type": "text", "text": "Yes."},
            ]),
            "end_turn",
        ),
        &Translation::default(),
    );
    let m = &c["choices"][0]["message"];
    assert_eq!(m["content"], "Yes.");
    assert_eq!(m["reasoning_content"], "Let me analyze step by step.");
    assert_eq!(
        m["thinking_blocks"],
        json!([
            {"type": "thinking", "thinking": "Let me analyze", "signature": "WaUjzkypQ2mUEVM36O2Txu"},
            {"type": "redacted_thinking", "data": "EmwKAhgBEgy3va3pzix"},
            {"type": "thinking", "thinking": " step by step.", "signature": "sig2"},
        ])
    );
}

#[test]
fn every_stop_reason_maps() {
    for (stop, finish) in [
        ("end_turn", "stop"),
        ("stop_sequence", "stop"),
        ("pause_turn", "stop"),
        ("max_tokens", "length"),
        ("model_context_window_exceeded", "length"),
        ("tool_use", "tool_calls"),
        ("refusal", "content_filter"),
        ("something_new", "stop"),
    ] {
        let c = answer(
            message(json!([{"type": "text", "text": "x"}]), stop),
            &Translation::default(),
        );
        assert_eq!(c["choices"][0]["finish_reason"], finish, "{stop}");
    }
}

#[test]
fn cache_tokens_count_as_prompt_and_are_kept_for_pricing() {
    let mut m = message(json!([{"type": "text", "text": "x"}]), "end_turn");
    m["usage"] = json!({"input_tokens": 10, "output_tokens": 5,
                        "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200,
                        "service_tier": "standard"});
    let c = answer(m, &Translation::default());
    assert_eq!(
        c["usage"],
        json!({
            "prompt_tokens": 1210, "completion_tokens": 5, "total_tokens": 1215,
            "prompt_tokens_details": {"cached_tokens": 1000},
            "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 200,
        })
    );
    // The crate's one usage reader reads it as any chat usage.
    let u: crate::wire::Usage = serde_json::from_value(c["usage"].clone()).unwrap();
    assert_eq!(
        (u.prompt_tokens, u.completion_tokens, u.cached_tokens),
        (1210, 5, 1000)
    );
}

#[test]
fn the_json_tool_input_is_the_content() {
    let t = Translation {
        json_tool: Some(JSON_TOOL.into()),
        ..Translation::default()
    };
    let c = answer(
        message(
            json!([{"type": "tool_use", "id": "toolu_1", "name": JSON_TOOL, "input": {"n": 42}}]),
            "tool_use",
        ),
        &t,
    );
    let choice = &c["choices"][0];
    assert_eq!(choice["finish_reason"], "stop");
    assert_eq!(choice["message"]["content"], "{\"n\":42}");
    assert!(choice["message"].get("tool_calls").is_none());
    // A client tool beside it stays a tool call.
    let c = answer(
        message(
            json!([{"type": "tool_use", "id": "toolu_2", "name": "f", "input": {}}]),
            "tool_use",
        ),
        &t,
    );
    assert_eq!(c["choices"][0]["finish_reason"], "tool_calls");
    assert_eq!(
        c["choices"][0]["message"]["tool_calls"][0]["function"]["arguments"],
        "{}"
    );
}

#[test]
fn what_is_not_a_message_is_not_an_answer() {
    let t = Translation::default();
    let err = |b: &[u8]| to_completion(b, &t, 0).unwrap_err();
    assert!(matches!(err(b"[]"), NotAnAnswer::NotObject));
    assert!(matches!(err(b"{\"type\":"), NotAnAnswer::Json(_)));
    assert!(matches!(err(b"\xff{}"), NotAnAnswer::Utf8));
    let error =
        json!({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}});
    assert!(matches!(
        err(error.to_string().as_bytes()),
        NotAnAnswer::NotAMessage
    ));
    let no_content = json!({"type": "message", "id": "m", "content": "text"});
    assert!(matches!(
        err(no_content.to_string().as_bytes()),
        NotAnAnswer::NoContent
    ));
    // Unknown blocks (server tools) are not text.
    let c = answer(
        message(
            json!([{"type": "server_tool_use", "id": "s", "name": "web_search", "input": {}}]),
            "end_turn",
        ),
        &t,
    );
    assert_eq!(c["choices"][0]["message"]["content"], Value::Null);
}

#[test]
fn too_many_tool_calls_are_not_an_answer() {
    let calls: Vec<Value> = (0..=crate::wire::MAX_TOOL_CALLS)
        .map(|i| json!({"type": "tool_use", "id": format!("t{i}"), "name": "f", "input": {}}))
        .collect();
    let m = message(Value::Array(calls), "tool_use");
    let r = to_completion(m.to_string().as_bytes(), &Translation::default(), 0);
    assert!(matches!(r, Err(NotAnAnswer::ToolCallIndex(_))));
}
