use serde_json::json;

use super::*;

#[test]
fn system_and_developer_messages_anywhere_fold_in_order() {
    let (m, _) = req(chat(
        json!([
            {"role": "system", "content": "A"},
            user("hi"),
            {"role": "developer", "content": [{"type": "text", "text": "B"}]},
            {"role": "assistant", "content": "yo"},
            {"role": "system", "content": "C"},
            user("q"),
        ]),
        json!({}),
    ));
    assert_eq!(
        m["system"],
        json!([
            {"type": "text", "text": "A"},
            {"type": "text", "text": "B"},
            {"type": "text", "text": "C"},
        ])
    );
    assert_eq!(
        m["messages"],
        json!([
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": "yo"},
            {"role": "user", "content": "q"},
        ])
    );
    assert_eq!(m["model"], "claude-test");
    assert_eq!(m["max_tokens"], 4096);
}

#[test]
fn consecutive_turns_of_one_role_merge() {
    let (m, _) = req(chat(
        json!([user("a"), user("b"), {"role": "assistant", "content": "c"}]),
        json!({}),
    ));
    assert_eq!(
        m["messages"],
        json!([
            {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
            {"role": "assistant", "content": "c"},
        ])
    );
}

#[test]
fn tool_messages_become_results_in_one_user_turn_before_its_text() {
    let (m, _) = req(chat(
        json!([
            user("weather?"),
            {"role": "assistant", "content": null, "tool_calls": [
                {"id": "call_1", "type": "function", "function": {"name": "w", "arguments": "{\"city\":\"Oslo\"}"}},
                {"id": "call.2", "type": "function", "function": {"name": "w", "arguments": ""}},
            ]},
            {"role": "tool", "tool_call_id": "call_1", "content": "rain"},
            {"role": "tool", "tool_call_id": "call.2", "content": [{"type": "text", "text": "sun"}]},
            user("thanks"),
        ]),
        json!({}),
    ));
    assert_eq!(
        m["messages"],
        json!([
            {"role": "user", "content": "weather?"},
            {"role": "assistant", "content": [
                {"type": "tool_use", "id": "call_1", "name": "w", "input": {"city": "Oslo"}},
                {"type": "tool_use", "id": "call_2", "name": "w", "input": {}},
            ]},
            {"role": "user", "content": [
                {"type": "tool_result", "tool_use_id": "call_1", "content": "rain"},
                {"type": "tool_result", "tool_use_id": "call_2", "content": [{"type": "text", "text": "sun"}]},
                {"type": "text", "text": "thanks"},
            ]},
        ])
    );
}

#[test]
fn a_conversation_that_does_not_start_with_a_user_gets_a_placeholder() {
    let (m, _) = req(chat(
        json!([{"role": "assistant", "content": "hello"}, user("hi")]),
        json!({}),
    ));
    assert_eq!(
        m["messages"][0],
        json!({"role": "user", "content": PLACEHOLDER})
    );
    assert_eq!(m["messages"][1]["role"], "assistant");
    let (m, _) = req(chat(
        json!([{"role": "system", "content": "only"}]),
        json!({}),
    ));
    assert_eq!(
        m["messages"],
        json!([{"role": "user", "content": PLACEHOLDER}])
    );
}

#[test]
fn a_final_assistant_prefill_loses_trailing_whitespace() {
    let (m, _) = req(chat(
        json!([user("q"), {"role": "assistant", "content": "The answer is \n"}]),
        json!({}),
    ));
    assert_eq!(m["messages"][1]["content"], "The answer is");
    let (m, _) = req(chat(
        json!([user("q"), {"role": "assistant", "content": "  "}]),
        json!({}),
    ));
    assert_eq!(m["messages"].as_array().map(Vec::len), Some(1));
}

#[test]
fn images_translate_and_audio_and_files_are_refused_by_name() {
    let (m, _) = req(chat(
        json!([{"role": "user", "content": [
            {"type": "text", "text": "what is this?", "cache_control": {"type": "ephemeral"}},
            {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0", "detail": "high"}},
            {"type": "image_url", "image_url": {"url": "https://example.com/cat.jpg"}},
        ]}]),
        json!({}),
    ));
    assert_eq!(
        m["messages"][0]["content"],
        json!([
            {"type": "text", "text": "what is this?", "cache_control": {"type": "ephemeral"}},
            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "iVBORw0"}},
            {"type": "image", "source": {"type": "url", "url": "https://example.com/cat.jpg"}},
        ])
    );
    let part = |p: serde_json::Value| {
        chat(
            json!([{"role": "user", "content": [{"type": "text", "text": "x"}, p]}]),
            json!({}),
        )
    };
    let audio = json!({"type": "input_audio", "input_audio": {"data": "AAA", "format": "wav"}});
    assert_eq!(refused(part(audio)), "messages[0].content[1]");
    assert_eq!(
        refused(part(json!({"type": "file", "file": {"file_id": "f"}}))),
        "messages[0].content[1]"
    );
    let bad = json!({"type": "image_url", "image_url": {"url": "data:image/png,rawbytes"}});
    assert_eq!(refused(part(bad)), "messages[0].content[1].image_url.url");
    let sys_image = json!([{"role": "system", "content": [{"type": "image_url", "image_url": {"url": "https://x/y.png"}}]}]);
    assert_eq!(
        refused(chat(sys_image, json!({}))),
        "messages[0].content[0]"
    );
}

#[test]
fn tool_call_arguments_must_be_a_json_object() {
    for args in ["[1,2]", "not json", "42"] {
        let body = chat(
            json!([user("q"), {"role": "assistant", "tool_calls": [
                {"id": "c", "type": "function", "function": {"name": "f", "arguments": args}},
            ]}]),
            json!({}),
        );
        assert_eq!(
            refused(body),
            "messages[1].tool_calls[0].function.arguments"
        );
    }
}

#[test]
fn signed_thinking_blocks_go_first_and_bare_reasoning_is_dropped() {
    let (m, _) = req(chat(
        json!([
            user("q"),
            {"role": "assistant", "content": "42", "reasoning_content": "hmm",
             "thinking_blocks": [
                {"type": "thinking", "thinking": "hmm", "signature": "sig1"},
                {"type": "thinking", "thinking": "unsigned"},
                {"type": "redacted_thinking", "data": "opaque"},
             ]},
            user("and?"),
            {"role": "assistant", "content": "no thinking here", "reasoning_content": "lost"},
        ]),
        json!({}),
    ));
    assert_eq!(
        m["messages"][1]["content"],
        json!([
            {"type": "thinking", "thinking": "hmm", "signature": "sig1"},
            {"type": "redacted_thinking", "data": "opaque"},
            {"type": "text", "text": "42"},
        ])
    );
    assert_eq!(m["messages"][3]["content"], "no thinking here");
}

#[test]
fn tools_and_every_tool_choice() {
    let tools = json!([
        {"type": "function", "function": {"name": "f", "description": "does f",
          "parameters": {"type": "object", "properties": {"a": {"type": "string"}}}}},
        {"type": "function", "function": {"name": "g"}},
    ]);
    let (m, _) = req(chat(json!([user("q")]), json!({"tools": tools})));
    assert_eq!(
        m["tools"],
        json!([
            {"name": "f", "description": "does f", "input_schema": {"type": "object", "properties": {"a": {"type": "string"}}}},
            {"name": "g", "input_schema": {"type": "object"}},
        ])
    );
    assert!(m.get("tool_choice").is_none());
    let cases = [
        (json!("auto"), json!({"type": "auto"})),
        (json!("required"), json!({"type": "any"})),
        (json!("none"), json!({"type": "none"})),
        (
            json!({"type": "function", "function": {"name": "g"}}),
            json!({"type": "tool", "name": "g"}),
        ),
    ];
    for (choice, want) in cases {
        let (m, _) = req(chat(
            json!([user("q")]),
            json!({"tools": tools, "tool_choice": choice}),
        ));
        assert_eq!(m["tool_choice"], want);
    }
    let (m, _) = req(chat(
        json!([user("q")]),
        json!({"tools": tools, "parallel_tool_calls": false}),
    ));
    assert_eq!(
        m["tool_choice"],
        json!({"type": "auto", "disable_parallel_tool_use": true})
    );
    let (m, _) = req(chat(
        json!([user("q")]),
        json!({"tools": tools, "tool_choice": "required", "parallel_tool_calls": false}),
    ));
    assert_eq!(
        m["tool_choice"],
        json!({"type": "any", "disable_parallel_tool_use": true})
    );
    // No tools: no tool_choice either (Anthropic rejects one alone).
    let (m, _) = req(chat(json!([user("q")]), json!({"tool_choice": "auto"})));
    assert!(m.get("tool_choice").is_none() && m.get("tools").is_none());
    let web = json!([{"type": "web_search_preview"}]);
    assert_eq!(
        refused(chat(json!([user("q")]), json!({"tools": web}))),
        "tools[0].type"
    );
}

#[test]
fn json_schema_becomes_a_forced_tool_and_json_object_a_prompt() {
    let schema =
        json!({"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]});
    let rf = json!({"type": "json_schema", "json_schema": {"name": "num", "schema": schema, "strict": true}});
    let (m, t) = req(chat(json!([user("q")]), json!({"response_format": rf})));
    assert_eq!(t.json_tool.as_deref(), Some(JSON_TOOL));
    assert_eq!(m["tools"][0]["name"], JSON_TOOL);
    assert_eq!(m["tools"][0]["input_schema"], schema);
    assert_eq!(m["tool_choice"], json!({"type": "tool", "name": JSON_TOOL}));

    // With the client's own tools the model must call one of them or answer.
    let tools = json!([{"type": "function", "function": {"name": "f"}}]);
    let (m, _) = req(chat(
        json!([user("q")]),
        json!({"response_format": rf, "tools": tools}),
    ));
    assert_eq!(m["tool_choice"], json!({"type": "any"}));
    assert_eq!(m["tools"].as_array().map(Vec::len), Some(2));

    // Thinking forbids forcing a tool: the model is asked to.
    let (m, t) = req(chat(
        json!([user("q")]),
        json!({"response_format": rf, "reasoning_effort": "low"}),
    ));
    assert_eq!(m["tool_choice"], json!({"type": "auto"}));
    assert!(m["system"].to_string().contains(JSON_TOOL));
    assert!(t.json_tool.is_some());

    let (m, t) = req(chat(
        json!([{"role": "system", "content": "S"}, user("q")]),
        json!({"response_format": {"type": "json_object"}}),
    ));
    assert_eq!(
        m["system"],
        json!([{"type": "text", "text": "S"}, {"type": "text", "text": JSON_OBJECT_PROMPT}])
    );
    assert!(t.json_tool.is_none() && m.get("tools").is_none());

    let (m, _) = req(chat(
        json!([user("q")]),
        json!({"response_format": {"type": "text"}}),
    ));
    assert!(m.get("system").is_none() && m.get("tools").is_none());

    let array =
        json!({"type": "json_schema", "json_schema": {"name": "a", "schema": {"type": "array"}}});
    assert_eq!(
        refused(chat(json!([user("q")]), json!({"response_format": array}))),
        "response_format.json_schema.schema"
    );
}

#[test]
fn sampling_limits_and_identity_fields() {
    let (m, t) = req(chat(
        json!([user("q")]),
        json!({"stop": ["END", "\n", " "], "max_completion_tokens": 300, "max_tokens": 9,
               "temperature": 1.7, "top_p": 0.9, "top_k": 40, "user": "u-1",
               "stream": true, "stream_options": {"include_usage": true}, "n": 1}),
    ));
    assert_eq!(m["stop_sequences"], json!(["END"]));
    assert_eq!(m["max_tokens"], 300);
    assert_eq!(m["temperature"], 1.0);
    assert_eq!(
        (m["top_p"].clone(), m["top_k"].clone()),
        (json!(0.9), json!(40))
    );
    assert_eq!(m["metadata"], json!({"user_id": "u-1"}));
    assert_eq!(m["stream"], true);
    assert_eq!(
        t,
        Translation {
            stream: true,
            include_usage: true,
            json_tool: None
        }
    );

    let (m, t) = req(chat(
        json!([user("q")]),
        json!({"stop": "STOP", "max_tokens": 9, "temperature": -1}),
    ));
    assert_eq!(m["stop_sequences"], json!(["STOP"]));
    assert_eq!(m["max_tokens"], 9);
    assert_eq!(m["temperature"], 0.0);
    assert!(m.get("stream").is_none() && !t.stream && !t.include_usage);

    assert_eq!(refused(chat(json!([user("q")]), json!({"n": 2}))), "n");
}

#[test]
fn reasoning_effort_becomes_a_thinking_budget_without_sampling() {
    for (effort, b) in [
        ("minimal", 1024),
        ("low", 2048),
        ("medium", 8192),
        ("high", 24576),
    ] {
        let (m, _) = req(chat(
            json!([user("q")]),
            json!({"reasoning_effort": effort, "max_tokens": 500, "temperature": 0.2, "top_p": 0.5, "top_k": 5}),
        ));
        assert_eq!(
            m["thinking"],
            json!({"type": "enabled", "budget_tokens": b})
        );
        assert_eq!(
            m["max_tokens"],
            500 + b,
            "{effort}: the answer keeps its 500 tokens"
        );
        for k in ["temperature", "top_p", "top_k"] {
            assert!(m.get(k).is_none(), "{effort}: {k} must go");
        }
    }
    let (m, _) = req(chat(
        json!([user("q")]),
        json!({"reasoning_effort": "low", "max_tokens": 30000}),
    ));
    assert_eq!(m["max_tokens"], 30000);
    let (m, _) = req(chat(
        json!([user("q")]),
        json!({"reasoning_effort": "none", "temperature": 0.5}),
    ));
    assert!(m.get("thinking").is_none());
    assert_eq!(m["temperature"], 0.5);
    assert_eq!(
        refused(chat(
            json!([user("q")]),
            json!({"reasoning_effort": "extreme"})
        )),
        "reasoning_effort"
    );
}

#[test]
fn fields_anthropic_has_no_use_for_are_dropped() {
    let (m, _) = req(chat(
        json!([user("q")]),
        json!({"frequency_penalty": 1, "presence_penalty": 1, "seed": 7, "logprobs": true,
               "top_logprobs": 2, "logit_bias": {"1": 2}, "stream_options": {"include_usage": true},
               "store": true, "metadata": {"a": "b"}, "service_tier": "auto", "modalities": ["text"],
               "prediction": {}, "audio": null, "web_search_options": {}, "safety_identifier": "s",
               "prompt_cache_key": "k", "verbosity": "low", "vendor_thing": 1}),
    ));
    let mut keys: Vec<&str> = m
        .as_object()
        .map(|o| o.keys().map(String::as_str).collect())
        .unwrap_or_default();
    keys.sort_unstable();
    assert_eq!(keys, ["max_tokens", "messages", "model"]);
}

#[test]
fn what_is_not_chat_is_refused_by_name() {
    assert_eq!(refused(json!({"model": "m"})), "messages");
    assert_eq!(
        refused(chat(json!([{"role": "wizard", "content": "x"}]), json!({}))),
        "messages[0].role"
    );
    assert_eq!(
        refused(chat(json!([{"role": "tool", "content": "x"}]), json!({}))),
        "messages[0].tool_call_id"
    );
    assert_eq!(
        refused(chat(json!([{"role": "user", "content": 5}]), json!({}))),
        "messages[0].content"
    );
}
