use serde_json::json;

use super::*;

fn event(v: Value) -> ChunkInfo {
    inspect_event(v.to_string().as_bytes(), true, true).unwrap_or_else(|e| unreachable!("{e}"))
}

#[test]
fn usage_is_read_in_either_dialect() {
    let responses: Usage = serde_json::from_value(json!({
        "input_tokens": 36, "input_tokens_details": {"cached_tokens": 12},
        "output_tokens": 87, "output_tokens_details": {"reasoning_tokens": 40},
        "total_tokens": 123
    }))
    .unwrap_or_default();
    assert_eq!(
        (responses.prompt_tokens, responses.completion_tokens),
        (36, 87)
    );
    assert_eq!(
        (responses.cached_tokens, responses.reasoning_tokens),
        (12, 40)
    );
    let chat: Usage = serde_json::from_value(json!({
        "prompt_tokens": 5, "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 2, "audio_tokens": null},
        "completion_tokens_details": {"reasoning_tokens": "many"}
    }))
    .unwrap_or_default();
    assert_eq!(
        (
            chat.prompt_tokens,
            chat.completion_tokens,
            chat.cached_tokens
        ),
        (5, 7, 2)
    );
    assert_eq!(chat.reasoning_tokens, 0, "a detail that is not a count");
    let nulls: Usage = serde_json::from_value(json!({
        "prompt_tokens": 1, "completion_tokens": 1, "prompt_tokens_details": null
    }))
    .unwrap_or_default();
    assert_eq!(nulls.prompt_tokens, 1);
}

#[test]
fn a_whole_response_is_an_answer_or_an_error() {
    let body = json!({
        "id": "resp_1", "object": "response", "status": "completed",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
            {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
        ],
        "error": null, "incomplete_details": null,
        "usage": {"input_tokens": 3, "output_tokens": 4}
    });
    match inspect_response(body.to_string().as_bytes()) {
        Ok(WholeBody::Answer {
            usage: Some(u),
            finish_reason,
            finished: true,
            ..
        }) => {
            assert_eq!((u.prompt_tokens, u.completion_tokens), (3, 4));
            assert_eq!(finish_reason.as_deref(), Some("tool_calls"));
        }
        other => panic!("{other:?}"),
    }
    let cut = json!({"status": "incomplete", "output": [],
        "incomplete_details": {"reason": "max_output_tokens"}});
    match inspect_response(cut.to_string().as_bytes()) {
        Ok(WholeBody::Answer { finish_reason, .. }) => {
            assert_eq!(finish_reason.as_deref(), Some("length"));
        }
        other => panic!("{other:?}"),
    }
    let failed = json!({"status": "failed", "output": [],
        "error": {"code": "server_error", "message": "boom"}});
    assert!(matches!(
        inspect_response(failed.to_string().as_bytes()),
        Ok(WholeBody::Error(m)) if m == "boom"
    ));
    let bare = json!({"status": "failed", "output": []});
    assert!(matches!(
        inspect_response(bare.to_string().as_bytes()),
        Ok(WholeBody::Error(m)) if m == FAILED
    ));
    for not in [&b"{}"[..], b"[]", b"{\"output\": 3}", b"\xff"] {
        assert!(inspect_response(not).is_err(), "{not:?}");
    }
}

#[test]
fn stream_events_say_when_the_answer_begins_and_ends() {
    let created = event(json!({"type": "response.created", "sequence_number": 0,
        "response": {"status": "in_progress", "output": [], "usage": null}}));
    assert!(!created.real && !created.finished && created.usage == UsageField::Absent);
    let added = event(json!({"type": "response.output_item.added",
        "item": {"type": "message", "content": []}}));
    assert!(added.real);
    let delta = event(json!({"type": "response.output_text.delta", "delta": "Hi there"}));
    assert!(delta.real);
    assert_eq!(delta.text_bytes, 8);
    assert_eq!(delta.text.as_deref(), Some("Hi there"));
    assert_eq!(delta.summary.as_deref(), Some("Hi there"));
    let args = event(json!({"type": "response.function_call_arguments.delta", "delta": "{\"a\""}));
    assert!(args.real && args.summary.is_none());
    assert_eq!(args.text.as_deref(), Some("{\"a\""));
    let call = event(json!({"type": "response.output_item.done",
        "item": {"type": "function_call", "name": "f", "arguments": "{\"a\":1}"}}));
    assert_eq!(call.summary.as_deref(), Some("tool call: f({\"a\":1})"));
    let done = event(json!({"type": "response.completed", "response": {
        "status": "completed", "output": [{"type": "message"}],
        "usage": {"input_tokens": 9, "output_tokens": 2}}}));
    assert!(done.finished);
    assert_eq!(done.finish_reason.as_deref(), Some("stop"));
    assert!(matches!(done.usage, UsageField::Present(u) if u.prompt_tokens == 9));
    let cut = event(json!({"type": "response.incomplete", "response": {
        "status": "incomplete", "incomplete_details": {"reason": "content_filter"}}}));
    assert!(cut.finished);
    assert_eq!(cut.finish_reason.as_deref(), Some("content_filter"));
}

#[test]
fn failures_inside_a_stream_are_errors() {
    let failed = event(json!({"type": "response.failed", "response": {
        "status": "failed", "error": {"code": "server_error", "message": "overloaded"}}}));
    assert_eq!(failed.error.as_deref(), Some("overloaded"));
    let bare = event(json!({"type": "response.failed"}));
    assert_eq!(bare.error.as_deref(), Some(FAILED));
    let error = event(json!({"type": "error", "code": "ERR", "message": "bad", "param": null}));
    assert_eq!(error.error.as_deref(), Some("bad"));
    let nested = event(json!({"type": "error", "error": {"message": "nested"}}));
    assert_eq!(nested.error.as_deref(), Some("nested"));
    assert!(inspect_event(br#"{"delta": "x"}"#, false, false).is_err());
    assert!(inspect_event(b"[1]", false, false).is_err());
    // A delta that is not text is read as none.
    assert!(!event(json!({"type": "response.x.delta", "delta": {"a": 1}})).real);
}

#[test]
fn a_whole_response_s_output_and_a_request_s_input_are_measured() {
    let body = json!({"output": [
        {"type": "message", "content": [{"type": "output_text", "text": "a"}, {"type": "refusal", "refusal": "b"}]},
        {"type": "function_call", "name": "f", "arguments": "{}"}
    ]});
    let out = AssistantOutput::from_response(body.to_string().as_bytes()).unwrap_or_default();
    assert_eq!(out.text, "ab");
    assert_eq!(out.tool_calls.len(), 1);
    let req = json!({"instructions": "1234", "input": [
        {"role": "user", "content": "12"},
        {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "123"}]},
        {"type": "function_call", "arguments": "1"},
        {"type": "function_call_output", "output": "12"},
        {"type": "reasoning", "encrypted_content": "not counted", "summary": [{"type": "summary_text", "text": "1"}]}
    ]});
    let Value::Object(req) = req else {
        unreachable!()
    };
    // The billing rule's tokens, in bytes: every turn counts, the
    // encrypted reasoning too.
    let tokens = crate::wire::billing::Billable::responses_input(&req).input;
    assert_eq!(input_len(&req) as u64, tokens * 4);
    assert!(tokens > (4 + 2 + 3 + 1 + 2 + 1) / 4 + crate::wire::billing::template_tokens(6));
    let mut more = req.clone();
    more["input"][4]["encrypted_content"] = json!("e".repeat(4_000));
    assert!(input_len(&more) >= input_len(&req) + 3_980);
    let mut s = Map::new();
    s.insert("input".into(), json!("hello"));
    assert_eq!(
        input_len(&s) as u64,
        (2 + crate::wire::billing::template_tokens(1)) * 4
    );
}
