//! A chat answer in the Messages API's shape: the `message` object of a
//! whole answer ([`whole`]), and what both renderings share: usage,
//! `stop_reason`, content blocks from a chat message. The event stream
//! is `super::events`.

use serde_json::{Value, json};

use crate::api::error::ApiError;
use crate::api::render::other_choices;
use crate::sink::Totals;
use crate::wire::content_text;

/// What every rendering of one answer knows before it exists.
#[derive(Debug, Clone)]
pub struct Head {
    /// `msg_` and 32 hex digits.
    pub id: String,
    /// The model the client named.
    pub model: String,
    /// conclave's estimate of the request's input tokens, for
    /// `message_start` (the real count follows in `message_delta`).
    pub input_estimate: u64,
}

/// The Messages `usage` of a chat `usage` (else of the request's
/// totals): chat's `prompt_tokens` include cached and cache-written
/// tokens, Anthropic's `input_tokens` do not.
pub fn usage(chat: Option<&Value>, totals: Totals) -> Value {
    let n = |path: &str| {
        chat.and_then(|u| u.pointer(path))
            .and_then(Value::as_u64)
            .unwrap_or(0)
    };
    let (prompt, output) = match chat {
        Some(_) => (n("/prompt_tokens"), n("/completion_tokens")),
        None => (totals.input_tokens, totals.output_tokens),
    };
    let read = n("/prompt_tokens_details/cached_tokens").max(n("/cache_read_input_tokens"));
    let written = n("/cache_creation_input_tokens");
    json!({
        "input_tokens": prompt.saturating_sub(read).saturating_sub(written),
        "cache_creation_input_tokens": written,
        "cache_read_input_tokens": read,
        "output_tokens": output,
    })
}

/// Anthropic's `stop_reason` for a chat `finish_reason`.
pub fn stop_reason(finish: Option<&str>) -> &'static str {
    match finish {
        Some("length") => "max_tokens",
        Some("tool_calls" | "function_call") => "tool_use",
        Some("content_filter") => "refusal",
        _ => "end_turn",
    }
}

/// A tool call's arguments as a `tool_use` `input` object (arguments
/// that are not a JSON object are kept as a string under `arguments`).
pub fn tool_input(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ if arguments.trim().is_empty() => json!({}),
        _ => json!({"arguments": arguments}),
    }
}

/// The thinking blocks of a chat message: its `thinking_blocks` when
/// they hold the thinking, else its reasoning text as one block, signed
/// with the last signature among its `thinking_blocks` (a stream put
/// together carries the text in `reasoning_content` and the signature
/// in a block of its own).
pub fn thinking_blocks(m: &Value) -> Vec<Value> {
    let blocks: Vec<&Value> = match m.get("thinking_blocks") {
        Some(Value::Array(b)) => b
            .iter()
            .filter(|b| {
                matches!(
                    b.get("type").and_then(Value::as_str),
                    Some("thinking" | "redacted_thinking")
                )
            })
            .collect(),
        _ => Vec::new(),
    };
    let whole = |b: &&Value| {
        b.get("type").and_then(Value::as_str) == Some("redacted_thinking")
            || b.get("thinking")
                .and_then(Value::as_str)
                .is_some_and(|t| !t.is_empty())
    };
    if blocks.iter().any(whole) {
        return blocks.into_iter().cloned().collect();
    }
    let signature = blocks
        .iter()
        .rev()
        .find_map(|b| b.get("signature").and_then(Value::as_str))
        .unwrap_or_default();
    match reasoning_of(m) {
        Some(t) if !t.is_empty() => {
            vec![json!({"type": "thinking", "thinking": t, "signature": signature})]
        }
        _ => Vec::new(),
    }
}

/// A message's or delta's reasoning text (`reasoning_content`, or
/// `reasoning` as some servers write it).
pub fn reasoning_of(m: &Value) -> Option<&str> {
    m.get("reasoning_content")
        .or_else(|| m.get("reasoning"))
        .and_then(Value::as_str)
}

/// The `message` object of a whole chat completion.
pub fn whole(head: &Head, completion: &[u8], totals: Totals) -> Result<Value, ApiError> {
    let body: Value = serde_json::from_slice(completion)
        .map_err(|e| ApiError::Internal(format!("the answer is not JSON: {e}")))?;
    let choices = body
        .get("choices")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let choice = choices
        .iter()
        .find(|c| c.get("index").and_then(Value::as_u64).unwrap_or(0) == 0);
    let empty = json!({});
    let message = choice.and_then(|c| c.get("message")).unwrap_or(&empty);
    let mut content = thinking_blocks(message);
    let text = content_text(message.get("content"));
    if !text.is_empty() {
        content.push(json!({"type": "text", "text": text}));
    }
    let calls = message.get("tool_calls").and_then(Value::as_array);
    for (n, call) in calls.into_iter().flatten().enumerate() {
        let f = call.get("function").unwrap_or(&empty);
        let arguments = f.get("arguments").and_then(Value::as_str).unwrap_or("");
        content.push(json!({
            "type": "tool_use",
            "id": call.get("id").and_then(Value::as_str).map_or_else(|| tool_id(&head.id, n), str::to_owned),
            "name": f.get("name").and_then(Value::as_str).unwrap_or_default(),
            "input": tool_input(arguments),
        }));
    }
    content.extend(
        other_choices(choices)
            .into_iter()
            .map(|(t, _)| json!({"type": "text", "text": t})),
    );
    let finish = choice
        .and_then(|c| c.get("finish_reason"))
        .and_then(Value::as_str);
    let mut out = json!({
        "id": head.id,
        "type": "message",
        "role": "assistant",
        "model": body.get("model").and_then(Value::as_str).unwrap_or(&head.model),
        "content": content,
        "stop_reason": stop_reason(finish),
        "stop_sequence": null,
        "usage": usage(body.get("usage").filter(|u| u.is_object()), totals),
    });
    if let (Some(id @ Value::String(_)), Value::Object(m)) = (body.get("arena_id"), &mut out) {
        m.insert("arena_id".into(), id.clone());
    }
    Ok(out)
}

/// The id of the `n`th tool call of message `id` that came without one.
pub fn tool_id(id: &str, n: usize) -> String {
    format!("toolu_{}_{n}", id.trim_start_matches("msg_"))
}
