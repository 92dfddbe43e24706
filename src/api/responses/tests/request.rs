use serde_json::{Value, json};

use super::{chat, is_id, parse, refused, req};
use crate::api::error::ApiError;

#[test]
fn a_string_input_is_one_user_message() {
    let r = req(json!({"model": "fast", "input": "Hello"}));
    assert_eq!(r.model(), "fast");
    assert!(!r.is_stream());
    assert!(r.store(), "store defaults to true, as the API's");
    assert_eq!(r.previous_response_id(), None);
    let items = r.input_items();
    assert_eq!(items.len(), 1);
    assert!(is_id(items[0]["id"].as_str().unwrap(), "msg_"), "{items:?}");
    assert_eq!(items[0]["type"], "message");
    assert_eq!(items[0]["role"], "user");
    assert_eq!(
        items[0]["content"],
        json!([{"type": "input_text", "text": "Hello"}])
    );
    let c = chat(json!({"model": "fast", "input": "Hello"}));
    assert_eq!(
        c,
        json!({"model": "fast", "messages": [{"role": "user", "content": "Hello"}]})
    );
}

#[test]
fn instructions_come_first_and_developer_is_system() {
    let c = chat(json!({
        "model": "m", "instructions": "Be brief.",
        "input": [
            {"role": "developer", "content": "Use metric units."},
            {"type": "message", "role": "system", "content": [{"type": "input_text", "text": "a"}, {"type": "input_text", "text": "b"}]},
            {"role": "user", "content": "How far?"},
        ],
    }));
    assert_eq!(
        c["messages"],
        json!([
            {"role": "system", "content": "Be brief."},
            {"role": "system", "content": "Use metric units."},
            {"role": "system", "content": "a\nb"},
            {"role": "user", "content": "How far?"},
        ])
    );
}

#[test]
fn images_become_chat_image_parts() {
    let c = chat(json!({"model": "m", "input": [{"role": "user", "content": [
        {"type": "input_text", "text": "What is this?"},
        {"type": "input_image", "image_url": "data:image/png;base64,AAAA", "detail": "low"},
        {"type": "input_image", "image_url": "https://example.com/a.png"},
    ]}]}));
    assert_eq!(
        c["messages"][0]["content"],
        json!([
            {"type": "text", "text": "What is this?"},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/a.png"}},
        ])
    );
}

#[test]
fn function_calls_and_outputs_round_trip_as_one_assistant_turn() {
    let body = json!({"model": "m", "input": [
        {"type": "message", "role": "user", "content": "Weather in Paris and Rome?"},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "Checking."}]},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "function_call", "call_id": "call_a", "name": "weather", "arguments": "{\"city\":\"Paris\"}"},
        {"type": "function_call", "call_id": "call_b", "name": "weather", "arguments": "{\"city\":\"Rome\"}", "id": "fc_mine"},
        {"type": "function_call_output", "call_id": "call_a", "output": "18C"},
        {"type": "function_call_output", "call_id": "call_b", "output": [{"type": "input_text", "text": "21C"}, {"type": "input_text", "text": "sunny"}]},
        {"type": "function_call", "call_id": "call_c", "name": "clock", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_c", "output": "noon"},
        {"type": "function_call_output", "call_id": "call_orphan", "output": "?"},
    ]});
    let c = chat(body.clone());
    assert_eq!(
        c["messages"],
        json!([
            {"role": "user", "content": "Weather in Paris and Rome?"},
            {"role": "assistant", "content": "Checking.", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Paris\"}"}},
                {"id": "call_b", "type": "function", "function": {"name": "weather", "arguments": "{\"city\":\"Rome\"}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_a", "content": "18C"},
            {"role": "tool", "tool_call_id": "call_b", "content": "21C\nsunny"},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_c", "type": "function", "function": {"name": "clock", "arguments": "{}"}},
            ]},
            {"role": "tool", "tool_call_id": "call_c", "content": "noon"},
            {"role": "tool", "tool_call_id": "call_orphan", "content": "?"},
        ])
    );
    let items = req(body).input_items();
    let ids: Vec<&str> = items.iter().map(|i| i["id"].as_str().unwrap()).collect();
    assert!(is_id(ids[0], "msg_") && is_id(ids[1], "msg_"), "{ids:?}");
    assert_eq!(ids[2], "rs_1");
    assert!(is_id(ids[3], "fc_"), "{ids:?}");
    assert_eq!(ids[4], "fc_mine");
    assert!(is_id(ids[5], "fco_"), "{ids:?}");
    assert_eq!(items[0]["content"][0]["type"], "input_text");
    assert_eq!(items[1]["content"][0]["type"], "output_text");
    assert_eq!(items[2]["encrypted_content"], "gAAA", "kept for the store");
}

#[test]
fn history_comes_before_the_input_and_instructions_before_both() {
    let earlier = req(json!({"model": "m", "input": "Call clock."})).input_items();
    let output = vec![
        json!({"id": "rs_x", "type": "reasoning", "summary": [], "content": [{"type": "reasoning_text", "text": "hm"}]}),
        json!({"id": "fc_x", "type": "function_call", "status": "completed", "call_id": "call_1", "name": "clock", "arguments": "{}"}),
    ];
    let history: Vec<Value> = earlier.into_iter().chain(output).collect();
    let r = req(
        json!({"model": "m", "instructions": "Now.", "previous_response_id": "resp_1",
        "input": [{"type": "function_call_output", "call_id": "call_1", "output": "noon"}]}),
    );
    assert_eq!(r.previous_response_id(), Some("resp_1"));
    let t = r.to_chat(&history).unwrap();
    let c = serde_json::to_value(&t.chat).unwrap();
    assert_eq!(
        c["messages"],
        json!([
            {"role": "system", "content": "Now."},
            {"role": "user", "content": "Call clock."},
            {"role": "assistant", "content": "", "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "clock", "arguments": "{}"}}]},
            {"role": "tool", "tool_call_id": "call_1", "content": "noon"},
        ])
    );
    let bad = [json!({"type": "input_file"})];
    match r.to_chat(&bad) {
        Err(ApiError::BadRequest { param, .. }) => {
            assert_eq!(param.as_deref(), Some("previous_response_id"))
        }
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("a history that cannot be read was accepted"),
    }
}

#[test]
fn only_function_tools_go_upstream_and_the_rest_are_listed() {
    let r = req(
        json!({"model": "m", "input": "x", "parallel_tool_calls": false,
        "tools": [
            {"type": "web_search"},
            {"type": "function", "name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true},
            {"type": "web_search"},
            {"type": "mcp", "server_label": "s"},
            {"type": "custom", "name": "apply_patch"},
            {"type": "function", "name": "g", "strict": null},
        ],
        "tool_choice": {"type": "function", "name": "g"}}),
    );
    let t = r.to_chat(&[]).unwrap();
    assert_eq!(t.dropped_tools, ["web_search", "mcp", "custom"]);
    let c = serde_json::to_value(&t.chat).unwrap();
    assert_eq!(
        c["tools"],
        json!([
            {"type": "function", "function": {"name": "f", "description": "d", "parameters": {"type": "object"}, "strict": true}},
            {"type": "function", "function": {"name": "g"}},
        ])
    );
    assert_eq!(
        c["tool_choice"],
        json!({"type": "function", "function": {"name": "g"}})
    );
    assert_eq!(c["parallel_tool_calls"], false);
    let echoed = t.echo.fields()["tools"].as_array().unwrap().clone();
    assert_eq!(echoed.len(), 2);
    assert_eq!(echoed[0]["name"], "f");

    let t = req(json!({"model": "m", "input": "x", "tools": [{"type": "web_search_preview"}, {"type": "function", "name": "f"}],
        "tool_choice": {"type": "web_search_preview"}}))
    .to_chat(&[])
    .unwrap();
    let c = serde_json::to_value(&t.chat).unwrap();
    assert_eq!(c["tool_choice"], "auto", "a choice of a dropped tool");
    assert_eq!(t.dropped_tools, ["web_search_preview"]);

    let c = chat(
        json!({"model": "m", "input": "x", "tools": [{"type": "function", "name": "f"}],
        "tool_choice": {"type": "allowed_tools", "mode": "required", "tools": [{"type": "function", "name": "f"}]}}),
    );
    assert_eq!(c["tool_choice"], "required");

    let t = req(json!({"model": "m", "input": "x", "parallel_tool_calls": true, "tool_choice": "required",
        "tools": [{"type": "file_search"}, {"type": "computer_use_preview"}, {"type": "local_shell"},
                  {"type": "image_generation"}, {"type": "code_interpreter"}, {"type": "namespace"}, {"type": "future_tool"}]}))
    .to_chat(&[])
    .unwrap();
    let c = serde_json::to_value(&t.chat).unwrap();
    assert_eq!(
        c,
        json!({"model": "m", "messages": [{"role": "user", "content": "x"}]}),
        "no tool left: no tools, tool_choice or parallel_tool_calls"
    );
    assert_eq!(t.dropped_tools.len(), 7);
}

#[test]
fn fields_map_to_their_chat_names() {
    let r = req(json!({
        "model": "m", "input": "x", "stream": true, "store": false,
        "max_output_tokens": 64, "temperature": 0.2, "top_p": 0.9, "user": "u1", "service_tier": "auto",
        "top_logprobs": 3, "reasoning": {"effort": "low", "summary": "auto"},
        "text": {"format": {"type": "json_schema", "name": "pt", "strict": true, "schema": {"type": "object"}}, "verbosity": "low"},
        "metadata": {"k": "v"}, "include": ["reasoning.encrypted_content"], "prompt_cache_key": "pk",
        "safety_identifier": "s", "truncation": "disabled", "stream_options": {"include_obfuscation": false},
        "background": false, "conversation": null, "prompt": null, "client_metadata": {"a": "b"},
    }));
    assert!(r.is_stream());
    assert!(!r.store());
    let t = r.to_chat(&[]).unwrap();
    assert!(t.dropped_tools.is_empty());
    let c = serde_json::to_value(&t.chat).unwrap();
    assert_eq!(
        c,
        json!({
            "model": "m", "messages": [{"role": "user", "content": "x"}],
            "stream": true, "stream_options": {"include_usage": true},
            "max_tokens": 64, "temperature": 0.2, "top_p": 0.9, "user": "u1", "service_tier": "auto",
            "logprobs": true, "top_logprobs": 3, "reasoning_effort": "low",
            "response_format": {"type": "json_schema", "json_schema": {"name": "pt", "strict": true, "schema": {"type": "object"}}},
        })
    );
    let e = t.echo.fields();
    assert_eq!(e["metadata"], json!({"k": "v"}));
    assert_eq!(e["store"], false);
    assert_eq!(e["max_output_tokens"], 64);
    assert_eq!(e["reasoning"], json!({"effort": "low", "summary": "auto"}));
    assert_eq!(e["prompt_cache_key"], "pk");
    assert!(!e.contains_key("client_metadata"));

    let c = chat(json!({"model": "m", "input": "x", "text": {"format": {"type": "json_object"}}}));
    assert_eq!(c["response_format"], json!({"type": "json_object"}));
    let c = chat(json!({"model": "m", "input": "x", "text": {"format": {"type": "text"}}}));
    assert!(c.get("response_format").is_none());
    let c = chat(
        json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "schema": {}}}}),
    );
    assert_eq!(c["response_format"]["json_schema"]["name"], "response");
}

#[test]
fn each_refusal_names_its_field() {
    let cases: Vec<(Value, &str, &str)> = vec![
        (json!({"input": "x"}), "model", "missing_required_parameter"),
        (json!({"model": "", "input": "x"}), "model", "invalid_type"),
        (json!({"model": 5, "input": "x"}), "model", "invalid_type"),
        (json!({"model": "m"}), "input", "missing_required_parameter"),
        (json!({"model": "m", "input": 5}), "input", "invalid_type"),
        (
            json!({"model": "m", "input": [5]}),
            "input[0]",
            "invalid_type",
        ),
        (
            json!({"model": "m", "input": [{"content": "x"}]}),
            "input[0].type",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "input": [{"role": "bot", "content": "x"}]}),
            "input[0].role",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": 5}]}),
            "input[0].content",
            "invalid_type",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": "a"},
                {"role": "user", "content": [{"type": "input_text", "text": "a"}, {"type": "input_file", "file_id": "f"}]}]}),
            "input[1].content[1]",
            "unsupported_value",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_image", "file_id": "file_1"}]}]}),
            "input[0].content[0]",
            "unsupported_value",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"type": "input_audio"}]}]}),
            "input[0].content[0]",
            "unsupported_value",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": [{"text": "x"}]}]}),
            "input[0].content[0]",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "input": [{"role": "assistant", "content": [{"type": "input_image", "image_url": "u"}]}]}),
            "input[0].content[0]",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": [{"role": "user", "content": "a"}, {"type": "item_reference", "id": "msg_1"}]}),
            "input[1]",
            "unsupported_value",
        ),
        (
            json!({"model": "m", "input": [{"type": "web_search_call", "id": "ws_1"}]}),
            "input[0].type",
            "unsupported_value",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call", "name": "f", "arguments": "{}"}]}),
            "input[0].call_id",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call", "call_id": "c", "arguments": "{}"}]}),
            "input[0].name",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call", "call_id": "c", "name": "f"}]}),
            "input[0].arguments",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c"}]}),
            "input[0].output",
            "invalid_type",
        ),
        (
            json!({"model": "m", "input": [{"type": "function_call_output", "call_id": "c", "output": [{"type": "input_file"}]}]}),
            "input[0].output",
            "unsupported_value",
        ),
        (
            json!({"model": "m", "input": "x", "max_output_tokens": 0}),
            "max_output_tokens",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "max_output_tokens": -3}),
            "max_output_tokens",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "max_output_tokens": 1.5}),
            "max_output_tokens",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "max_output_tokens": "9"}),
            "max_output_tokens",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "top_logprobs": 21}),
            "top_logprobs",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "background": true}),
            "background",
            "unsupported_parameter",
        ),
        (
            json!({"model": "m", "input": "x", "conversation": "conv_1"}),
            "conversation",
            "unsupported_parameter",
        ),
        (
            json!({"model": "m", "input": "x", "prompt": {"id": "p"}}),
            "prompt",
            "unsupported_parameter",
        ),
        (
            json!({"model": "m", "input": "x", "max_tokens": 5}),
            "max_tokens",
            "unknown_parameter",
        ),
        (
            json!({"model": "m", "input": "x", "messages": []}),
            "messages",
            "unknown_parameter",
        ),
        (
            json!({"model": "m", "input": "x", "stream": "yes"}),
            "stream",
            "invalid_type",
        ),
        (
            json!({"model": "m", "input": "x", "metadata": {"n": 1}}),
            "metadata",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "metadata": (0..17).map(|i| (format!("k{i}"), json!("v"))).collect::<serde_json::Map<_, _>>()}),
            "metadata",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "metadata": {"k": "v".repeat(513)}}),
            "metadata",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "text": {"format": {"type": "xml"}}}),
            "text.format.type",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "text": {"format": {"type": "json_schema", "name": "n"}}}),
            "text.format.schema",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "input": "x", "reasoning": {"effort": 3}}),
            "reasoning.effort",
            "invalid_type",
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"type": "function"}]}),
            "tools[0].name",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "input": "x", "tools": [{"name": "f"}]}),
            "tools[0].type",
            "missing_required_parameter",
        ),
        (
            json!({"model": "m", "input": "x", "tools": {}}),
            "tools",
            "invalid_type",
        ),
        (
            json!({"model": "m", "input": "x", "tool_choice": "sometimes"}),
            "tool_choice",
            "invalid_value",
        ),
        (
            json!({"model": "m", "input": "x", "tool_choice": {"type": "function"}}),
            "tool_choice.name",
            "missing_required_parameter",
        ),
    ];
    for (body, param, code) in cases {
        let (got_param, got_code, message) = refused(&body);
        assert_eq!(got_param.as_deref(), Some(param), "{body}: {message}");
        assert_eq!(got_code, Some(code), "{body}: {message}");
        assert!(message.len() > 20, "{message}");
    }
    let (param, code, _) = match parse(b"{\"model\": ") {
        Err(ApiError::BadRequest {
            param,
            code,
            message,
        }) => (param, code, message),
        _ => panic!("broken JSON accepted"),
    };
    assert_eq!((param, code), (None, Some("invalid_json")));
    let (_, _, message) = refused(&json!({"model": "m", "input": "x", "max_tokens": 5}));
    assert!(message.contains("max_output_tokens"), "{message}");
}

#[test]
fn an_empty_conversation_is_refused_when_translated() {
    let r = req(json!({"model": "m", "input": [{"type": "reasoning", "summary": []}]}));
    match r.to_chat(&[]) {
        Err(ApiError::BadRequest { param, .. }) => assert_eq!(param.as_deref(), Some("input")),
        _ => panic!("nothing to answer was accepted"),
    }
}
