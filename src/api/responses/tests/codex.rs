//! Codex CLI's requests: mixed tool types, `store: false`, `include`,
//! reasoning items with encrypted content, the whole history resent.

use serde_json::{Value, json};

use super::parse;

/// A request shaped as Codex CLI 0.154 sends it after one shell call.
fn codex_body() -> Value {
    json!({
        "model": "gpt-5-codex",
        "instructions": "You are Codex, based on GPT-5. You are running as a coding agent in the Codex CLI.",
        "input": [
            {"type": "message", "role": "developer", "content": [
                {"type": "input_text", "text": "<permissions instructions>approval_policy: never</permissions instructions>"}]},
            {"type": "message", "role": "user", "content": [
                {"type": "input_text", "text": "<environment_context>\n  <cwd>/tmp/w</cwd>\n</environment_context>"}]},
            {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "list the files"}]},
            {"type": "reasoning", "id": "rs_0a1b", "summary": [{"type": "summary_text", "text": "**Listing**"}],
             "content": null, "encrypted_content": "gAAAAABo-opaque"},
            {"type": "function_call", "name": "shell", "arguments": "{\"command\":[\"ls\",\"-la\"],\"workdir\":\"/tmp/w\"}",
             "call_id": "call_Xy1"},
            {"type": "function_call_output", "call_id": "call_Xy1", "output": "total 0\nREADME.md"},
        ],
        "tools": [
            {"type": "function", "name": "shell", "description": "Runs a shell command and returns its output.",
             "strict": false, "parameters": {"type": "object", "properties": {
                "command": {"type": "array", "items": {"type": "string"}},
                "workdir": {"type": "string"}, "timeout_ms": {"type": "number"}},
                "required": ["command"], "additionalProperties": false}},
            {"type": "local_shell"},
            {"type": "web_search"},
            {"type": "custom", "name": "apply_patch", "description": "Use the `apply_patch` tool to edit files.",
             "format": {"type": "grammar", "syntax": "lark",
                        "definition": "start: begin_patch hunk+ end_patch\nbegin_patch: \"*** Begin Patch\" LF"}},
        ],
        "tool_choice": "auto",
        "parallel_tool_calls": false,
        "reasoning": {"effort": "medium", "summary": "auto"},
        "store": false,
        "stream": true,
        "include": ["reasoning.encrypted_content"],
        "prompt_cache_key": "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b",
        "text": {"verbosity": "low"},
    })
}

fn check_codex(body: &Value) -> Value {
    let r = parse(body.to_string().as_bytes()).unwrap_or_else(|e| panic!("{e}"));
    assert!(r.is_stream());
    assert!(!r.store());
    let t = r.to_chat(&[]).unwrap_or_else(|e| panic!("{e}"));
    for kind in &t.dropped_tools {
        assert_ne!(kind, "function");
    }
    let c = serde_json::to_value(&t.chat).unwrap();
    assert_eq!(c["stream"], true);
    assert_eq!(c["stream_options"]["include_usage"], true);
    for m in c["messages"].as_array().unwrap() {
        assert_ne!(m["role"], "developer", "local servers refuse it");
    }
    c
}

#[test]
fn a_codex_request_translates_with_its_function_tools() {
    let body = codex_body();
    let r = parse(body.to_string().as_bytes()).unwrap();
    let t = r.to_chat(&[]).unwrap();
    assert_eq!(t.dropped_tools, ["local_shell", "web_search", "custom"]);
    let c = check_codex(&body);
    let messages = c["messages"].as_array().unwrap();
    let roles: Vec<&str> = messages
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(
        roles,
        ["system", "system", "user", "user", "assistant", "tool"]
    );
    assert!(
        messages[0]["content"]
            .as_str()
            .unwrap()
            .starts_with("You are Codex")
    );
    assert_eq!(
        messages[4],
        json!({"role": "assistant", "content": "", "tool_calls": [{"id": "call_Xy1", "type": "function",
            "function": {"name": "shell", "arguments": "{\"command\":[\"ls\",\"-la\"],\"workdir\":\"/tmp/w\"}"}}]})
    );
    assert_eq!(
        messages[5],
        json!({"role": "tool", "tool_call_id": "call_Xy1", "content": "total 0\nREADME.md"})
    );
    let tools = c["tools"].as_array().unwrap();
    assert_eq!(tools.len(), 1);
    assert_eq!(tools[0]["function"]["name"], "shell");
    assert_eq!(tools[0]["function"]["strict"], false);
    assert_eq!(c["tool_choice"], "auto");
    assert_eq!(c["parallel_tool_calls"], false);
    assert_eq!(c["reasoning_effort"], "medium");
    for absent in [
        "include",
        "store",
        "prompt_cache_key",
        "text",
        "reasoning",
        "instructions",
    ] {
        assert!(c.get(absent).is_none(), "{absent} reached the chat request");
    }
    let items = r.input_items();
    assert_eq!(items.len(), 6);
    assert_eq!(items[3]["encrypted_content"], "gAAAAABo-opaque");
    assert_eq!(t.echo.fields()["tools"].as_array().unwrap().len(), 1);
    assert_eq!(t.echo.fields()["text"], json!({"verbosity": "low"}));
}

/// The body another helper recorded from Codex CLI itself, when the
/// file is in the tree.
#[test]
fn the_recorded_codex_request_translates() {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/fixtures/codex_request.json"
    );
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    let body: Value = serde_json::from_str(&text).unwrap();
    check_codex(&body);
}
