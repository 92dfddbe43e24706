//! A Messages request read into conclave's internal chat form: every
//! field checked (a 400 naming the one that is wrong), content blocks
//! mapped to chat content parts, `tool_use` / `tool_result` to tool calls
//! and tool messages, `thinking` to a reasoning effort. docs/anthropic.md
//! is the table, field by field.

use serde_json::{Map, Value, json};

use crate::api::error::ApiError;
use crate::wire::billing;
use crate::wire::{ChatRequest, Message, StreamOptions};

/// A Messages request, read.
#[derive(Debug)]
pub struct MessagesRequest {
    /// The model the client named (a route or a concrete model).
    pub model: String,
    pub stream: bool,
    /// The request in chat form.
    pub chat: ChatRequest,
    /// Anthropic-defined tools (`web_search_…`, `bash_…`) left out.
    pub dropped_tools: Vec<String>,
}

/// Top-level fields read and dropped: they have no chat equivalent.
const DROPPED: &[&str] = &[
    "top_k",
    "service_tier",
    "container",
    "context_management",
    "mcp_servers",
];

/// Reads a Messages body (a JSON object).
pub fn from_object(fields: &Map<String, Value>) -> Result<MessagesRequest, ApiError> {
    let model = match fields.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        Some(_) => return Err(ApiError::wrong_type("model", "a non-empty string")),
        None => return Err(missing("model")),
    };
    let stream = match fields.get("stream") {
        None | Some(Value::Null) => false,
        Some(Value::Bool(b)) => *b,
        Some(_) => return Err(ApiError::wrong_type("stream", "a boolean")),
    };
    let mut extra = Map::new();
    extra.insert("max_tokens".into(), max_tokens(fields)?.into());
    let mut messages = Vec::new();
    if let Some(system) = fields.get("system") {
        let text = super::blocks::system_text(system)?;
        if !text.is_empty() {
            messages.push(Message::new("system", text));
        }
    }
    let turns = match fields.get("messages") {
        Some(Value::Array(t)) => t,
        Some(_) => return Err(ApiError::wrong_type("messages", "an array")),
        None => return Err(missing("messages")),
    };
    if turns.is_empty() {
        return Err(ApiError::field(
            "messages",
            "invalid_value",
            "`messages` must hold at least one message.".into(),
        ));
    }
    for (i, turn) in turns.iter().enumerate() {
        super::blocks::turn(i, turn, &mut messages)?;
    }
    let mut dropped_tools = Vec::new();
    for (key, v) in fields {
        match key.as_str() {
            "model" | "stream" | "max_tokens" | "system" | "messages" => {}
            "temperature" | "top_p" => {
                if !v.is_number() && !v.is_null() {
                    return Err(ApiError::wrong_type(key, "a number"));
                }
                extra.insert(key.clone(), v.clone());
            }
            "stop_sequences" => {
                let stops = strings(key, v)?;
                if !stops.is_empty() {
                    extra.insert("stop".into(), stops.into());
                }
            }
            "metadata" => {
                if let Some(user) = v.get("user_id").and_then(Value::as_str) {
                    extra.insert("user".into(), user.into());
                }
            }
            "tools" => {
                let (tools, dropped) = super::blocks::tools(v)?;
                dropped_tools = dropped;
                if !tools.is_empty() {
                    extra.insert("tools".into(), Value::Array(tools));
                }
            }
            "tool_choice" => tool_choice(v, &mut extra)?,
            "thinking" => {
                if let Some(effort) = effort(v)? {
                    extra.entry("reasoning_effort").or_insert(effort.into());
                }
            }
            // The effort a client asks for outright wins over one
            // guessed from a thinking budget.
            "output_config" => match v.get("effort").and_then(Value::as_str) {
                Some(e @ ("low" | "medium" | "high")) => {
                    extra.insert("reasoning_effort".into(), e.into());
                }
                Some("max") => {
                    extra.insert("reasoning_effort".into(), "high".into());
                }
                _ => {}
            },
            k if DROPPED.contains(&k) => {}
            // Fields of later API versions, or betas: left out, as an
            // unknown field is by most OpenAI-compatible servers.
            _ => {}
        }
    }
    // A tool choice without tools means nothing to a chat server.
    if !extra.contains_key("tools") {
        extra.remove("tool_choice");
        extra.remove("parallel_tool_calls");
    }
    let stream_options = stream.then(|| StreamOptions {
        include_usage: Some(true),
        extra: Map::new(),
    });
    Ok(MessagesRequest {
        chat: ChatRequest {
            model: model.clone(),
            messages,
            stream: stream.then_some(true),
            stream_options,
            extra,
        },
        model,
        stream,
        dropped_tools,
    })
}

/// `max_tokens`, which a Messages request must set: a positive integer
/// by the one rule for caps (a 400 naming it otherwise), translated or
/// forwarded verbatim alike.
pub fn max_tokens(fields: &Map<String, Value>) -> Result<u64, ApiError> {
    billing::cap(fields, "max_tokens")
        .map_err(ApiError::bad_cap)?
        .ok_or_else(|| missing("max_tokens"))
}

fn missing(param: &str) -> ApiError {
    ApiError::field(
        param,
        "missing_required_parameter",
        format!("`{param}`: Field required."),
    )
}

fn strings(key: &str, v: &Value) -> Result<Vec<Value>, ApiError> {
    match v {
        Value::Null => Ok(Vec::new()),
        Value::Array(a) if a.iter().all(Value::is_string) => Ok(a.clone()),
        _ => Err(ApiError::wrong_type(key, "an array of strings")),
    }
}

/// `tool_choice` as chat's, and `disable_parallel_tool_use`.
fn tool_choice(v: &Value, extra: &mut Map<String, Value>) -> Result<(), ApiError> {
    let kind = v.get("type").and_then(Value::as_str);
    let choice = match kind {
        Some("auto") => json!("auto"),
        Some("any") => json!("required"),
        Some("none") => json!("none"),
        Some("tool") => match v.get("name").and_then(Value::as_str) {
            Some(name) => json!({"type": "function", "function": {"name": name}}),
            None => return Err(missing("tool_choice.name")),
        },
        _ => {
            return Err(ApiError::field(
                "tool_choice.type",
                "invalid_value",
                "`tool_choice.type` must be one of `auto`, `any`, `tool`, `none`.".into(),
            ));
        }
    };
    extra.insert("tool_choice".into(), choice);
    if v.get("disable_parallel_tool_use").and_then(Value::as_bool) == Some(true) {
        extra.insert("parallel_tool_calls".into(), false.into());
    }
    Ok(())
}

/// `thinking` as a chat `reasoning_effort`: a budget under 4096 tokens
/// is `low`, under 16384 `medium`, more `high`; `disabled` is none.
fn effort(v: &Value) -> Result<Option<&'static str>, ApiError> {
    match v.get("type").and_then(Value::as_str) {
        Some("disabled") => Ok(None),
        Some("enabled") => {
            let budget = v.get("budget_tokens").and_then(Value::as_u64);
            Ok(Some(match budget {
                Some(b) if b < 4096 => "low",
                Some(b) if b < 16384 => "medium",
                Some(_) => "high",
                None => return Err(missing("thinking.budget_tokens")),
            }))
        }
        Some("adaptive") => Ok(Some("medium")),
        _ => Err(ApiError::field(
            "thinking.type",
            "invalid_value",
            "`thinking.type` must be `enabled` or `disabled`.".into(),
        )),
    }
}
