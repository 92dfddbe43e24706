//! The `rejects_null_content` quirk: llama-cpp-python (0.3.x) validates
//! every message with pydantic and answers a `"content": null` (an
//! assistant turn beside its `tool_calls`, whole or streamed) with HTTP 500
//! and the validation errors' dump followed by a Python traceback line with
//! the server's file path, as measured against the real server. `""`
//! passes.

use bytes::Bytes;
use serde_json::{Value, json};

use super::{MockResponse, Quirk, Quirks, once};

/// Where the traceback says the error was raised.
const TRACEBACK: &str = "  File \"/usr/lib/python3.11/site-packages/llama_cpp/server/app.py\", \
line 376, in create_chat_completion\n    POST /v1/chat/completions";

/// The message classes pydantic tries for each message, with the field
/// besides `role` and `content` each requires.
const CLASSES: &[(&str, &str, Option<&str>)] = &[
    ("system", "ChatCompletionRequestSystemMessage", None),
    ("user", "ChatCompletionRequestUserMessage", None),
    ("assistant", "ChatCompletionRequestAssistantMessage", None),
    (
        "tool",
        "ChatCompletionRequestToolMessage",
        Some("tool_call_id"),
    ),
    (
        "function",
        "ChatCompletionRequestFunctionMessage",
        Some("name"),
    ),
];

/// The 500 a request with a `"content": null` message gets, if the
/// simulator plays this quirk.
pub(super) fn refusal(quirks: &Quirks, req: &Value) -> Option<MockResponse> {
    if !quirks.has(Quirk::RejectsNullContent) {
        return None;
    }
    let messages = req.get("messages").and_then(Value::as_array)?;
    let mut errors = Vec::new();
    for (i, m) in messages.iter().enumerate() {
        if !m.get("content").is_some_and(Value::is_null) {
            continue;
        }
        let role = m.get("role").and_then(Value::as_str).unwrap_or_default();
        for (class_role, class, needs) in CLASSES {
            let loc = |field: &str| format!("('body', 'messages', {i}, '{class}', '{field}')");
            if *class_role == role {
                errors.push(format!(
                    "{{'type': 'string_type', 'loc': {}, 'msg': 'Input should be a valid string', 'input': None}}",
                    loc("content")
                ));
            } else {
                let want = format!("'{class_role}'");
                errors.push(format!(
                    "{{'type': 'literal_error', 'loc': {}, 'msg': {}, 'input': {}, 'ctx': {{'expected': {}}}}}",
                    loc("role"),
                    py(&json!(format!("Input should be {want}"))),
                    py(&json!(role)),
                    py(&json!(want)),
                ));
            }
            if let Some(field) = needs.filter(|f| m.get(*f).is_none()) {
                errors.push(format!(
                    "{{'type': 'missing', 'loc': {}, 'msg': 'Field required', 'input': {}}}",
                    loc(field),
                    py(m)
                ));
            }
        }
    }
    if errors.is_empty() {
        return None;
    }
    let message = format!(
        "{} validation errors:\n  {}\n\n{TRACEBACK}",
        errors.len(),
        errors.join("\n  ")
    );
    Some(validation_500(&message))
}

/// llama-cpp-python's answer to a request its pydantic models refuse: a
/// 500 whose error message is the dump `message` (and a traceback).
pub(super) fn validation_500(message: &str) -> MockResponse {
    let body = json!({"error": {"message": message, "type": "internal_server_error", "param": null, "code": null}});
    MockResponse {
        status: 500,
        content_type: "application/json",
        retry_after: None,
        body: once(Bytes::from(body.to_string())),
    }
}

/// A JSON value as Python's `repr` writes the dict pydantic quotes.
pub(super) fn py(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(true) => "True".into(),
        Value::Bool(false) => "False".into(),
        Value::Number(n) => n.to_string(),
        Value::String(s) => {
            let q = if s.contains('\'') && !s.contains('"') {
                '"'
            } else {
                '\''
            };
            let mut out = String::from(q);
            for c in s.chars() {
                match c {
                    '\\' => out.push_str("\\\\"),
                    '\n' => out.push_str("\\n"),
                    c if c == q => {
                        out.push('\\');
                        out.push(c);
                    }
                    c => out.push(c),
                }
            }
            out.push(q);
            out
        }
        Value::Array(items) => format!("[{}]", items.iter().map(py).collect::<Vec<_>>().join(", ")),
        Value::Object(o) => format!(
            "{{{}}}",
            o.iter()
                .map(|(k, v)| format!("{}: {}", py(&json!(k)), py(v)))
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use futures::StreamExt;

    #[tokio::test]
    async fn a_null_content_gets_llama_cpp_pythons_500() {
        let quirks = Quirks::new(&[Quirk::RejectsNullContent]);
        let tc = json!([{"id": "call_1", "type": "function", "function": {"name": "get_weather", "arguments": "{\"city\":\"Paris\"}"}}]);
        let req = json!({"model": "m", "messages": [
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": null, "tool_calls": tc},
            {"role": "tool", "tool_call_id": "call_1", "content": "18"}
        ]});
        let resp = refusal(&quirks, &req).unwrap();
        assert_eq!(resp.status, 500);
        let mut body = resp.body;
        let bytes = body.next().await.unwrap().unwrap();
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        let msg = v["error"]["message"].as_str().unwrap();
        // As the real server wrote it (measured, issue 23).
        assert!(msg.starts_with("7 validation errors:\n  {'type': 'literal_error', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestSystemMessage', 'role'), 'msg': \"Input should be 'system'\", 'input': 'assistant', 'ctx': {'expected': \"'system'\"}}\n"), "{msg}");
        assert!(msg.contains("{'type': 'string_type', 'loc': ('body', 'messages', 1, 'ChatCompletionRequestAssistantMessage', 'content'), 'msg': 'Input should be a valid string', 'input': None}"), "{msg}");
        assert!(msg.contains("'msg': 'Field required', 'input': {'role': 'assistant', 'content': None, 'tool_calls': [{'id': 'call_1', 'type': 'function', 'function': {'name': 'get_weather', 'arguments': '{\"city\":\"Paris\"}'}}]}}"), "{msg}");
        assert!(msg.ends_with(TRACEBACK), "{msg}");
        assert_eq!(v["error"]["type"], "internal_server_error");

        // "" passes, and so does everything without the quirk.
        let mut ok = req.clone();
        ok["messages"][1]["content"] = json!("");
        assert!(refusal(&quirks, &ok).is_none());
        assert!(refusal(&Quirks::default(), &req).is_none());
    }
}
