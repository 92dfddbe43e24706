//! A Messages turn's content blocks, and its tools, in chat form:
//! `text`, `image` and `document` blocks become content parts;
//! `tool_result` blocks become `tool` messages (before the rest of their
//! user turn); an assistant's `tool_use` blocks become its `tool_calls`
//! and its signed `thinking` / `redacted_thinking` blocks its
//! `thinking_blocks`, which an Anthropic member sends back (unsigned
//! thinking is dropped). `system` text (top-level or between turns) is
//! read here too.

use serde_json::{Map, Value, json};

use crate::api::error::ApiError;
use crate::wire::Message;

/// Reads turn `i` into chat messages (one, or a user turn's tool
/// results and then the rest of it).
pub fn turn(i: usize, turn: &Value, out: &mut Vec<Message>) -> Result<(), ApiError> {
    let at = |rest: &str| format!("messages.{i}{rest}");
    let role = match turn.get("role").and_then(Value::as_str) {
        Some(r @ ("user" | "assistant")) => r,
        // Newer clients (Claude Code) put system text between turns.
        Some("system") => {
            let text = system_text(turn.get("content").unwrap_or(&Value::Null)).map_err(|_| {
                ApiError::wrong_type(&at(".content"), "a string or an array of text blocks")
            })?;
            out.push(Message::new("system", text));
            return Ok(());
        }
        _ => {
            return Err(ApiError::field(
                &at(".role"),
                "invalid_value",
                format!("`{}` must be `user`, `assistant` or `system`.", at(".role")),
            ));
        }
    };
    let blocks = match turn.get("content") {
        Some(Value::String(s)) => {
            out.push(Message::new(role, s.as_str()));
            return Ok(());
        }
        Some(Value::Array(b)) => b,
        _ => {
            return Err(ApiError::wrong_type(
                &at(".content"),
                "a string or an array of content blocks",
            ));
        }
    };
    match role {
        "user" => user(blocks, &at, out),
        _ => assistant(blocks, &at, out),
    }
}

fn kind_of(b: &Value) -> &str {
    b.get("type").and_then(Value::as_str).unwrap_or_default()
}

fn str_field<'a>(b: &'a Value, key: &str, at: &str) -> Result<&'a str, ApiError> {
    b.get(key)
        .and_then(Value::as_str)
        .ok_or_else(|| ApiError::wrong_type(&format!("{at}.{key}"), "a string"))
}

fn user(
    blocks: &[Value],
    at: &dyn Fn(&str) -> String,
    out: &mut Vec<Message>,
) -> Result<(), ApiError> {
    let mut parts = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let here = at(&format!(".content.{j}"));
        match kind_of(b) {
            "tool_result" => {
                let id = str_field(b, "tool_use_id", &here)?;
                let (text, images) = tool_result(b.get("content"), &here)?;
                let text = match b.get("is_error").and_then(Value::as_bool) {
                    Some(true) => format!("Error: {text}"),
                    _ => text,
                };
                out.push(Message::from_value(
                    json!({"role": "tool", "tool_call_id": id, "content": text}),
                ));
                parts.extend(images);
            }
            _ => parts.push(part(b, &here)?),
        }
    }
    if parts.is_empty() {
        return Ok(());
    }
    let content = match parts.iter().all(|p| kind_of(p) == "text") {
        true => Value::from(
            parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n\n"),
        ),
        false => Value::Array(parts),
    };
    out.push(Message::from_value(
        json!({"role": "user", "content": content}),
    ));
    Ok(())
}

/// A user content block as a chat content part.
fn part(b: &Value, at: &str) -> Result<Value, ApiError> {
    match kind_of(b) {
        "text" => Ok(json!({"type": "text", "text": str_field(b, "text", at)?})),
        "image" => Ok(json!({"type": "image_url", "image_url": {"url": source_url(b, at)?}})),
        "document" => document(b, at),
        other => Err(ApiError::field(
            &format!("{at}.type"),
            "invalid_value",
            format!("Content blocks of type `{other}` cannot be sent here (`{at}`)."),
        )),
    }
}

/// An image's `source` as a URL: its own, or a `data:` URL.
fn source_url(b: &Value, at: &str) -> Result<String, ApiError> {
    let src = b.get("source").unwrap_or(&Value::Null);
    let here = format!("{at}.source");
    match kind_of(src) {
        "base64" => Ok(format!(
            "data:{};base64,{}",
            str_field(src, "media_type", &here)?,
            str_field(src, "data", &here)?
        )),
        "url" => Ok(str_field(src, "url", &here)?.to_owned()),
        _ => Err(ApiError::field(
            &format!("{here}.type"),
            "invalid_value",
            format!("`{here}.type` must be `base64` or `url`."),
        )),
    }
}

/// A `document`: plain text (or text blocks) as text, a base64 PDF as a
/// chat `file` part; a PDF by URL cannot be translated.
fn document(b: &Value, at: &str) -> Result<Value, ApiError> {
    let src = b.get("source").unwrap_or(&Value::Null);
    let here = format!("{at}.source");
    let title = b.get("title").and_then(Value::as_str);
    let text = match kind_of(src) {
        "text" => str_field(src, "data", &here)?.to_owned(),
        "content" => match src.get("content") {
            Some(Value::String(s)) => s.clone(),
            Some(Value::Array(parts)) => parts
                .iter()
                .filter_map(|p| p.get("text").and_then(Value::as_str))
                .collect::<Vec<_>>()
                .join("\n"),
            _ => return Err(ApiError::wrong_type(&format!("{here}.content"), "content")),
        },
        "base64" => {
            let media = str_field(src, "media_type", &here)?;
            let data = str_field(src, "data", &here)?;
            let mut file = Map::new();
            file.insert(
                "file_data".into(),
                format!("data:{media};base64,{data}").into(),
            );
            if let Some(t) = title {
                file.insert("filename".into(), t.into());
            }
            return Ok(json!({"type": "file", "file": file}));
        }
        _ => {
            return Err(ApiError::field(
                &format!("{here}.type"),
                "invalid_value",
                format!(
                    "Only `text`, `content` and `base64` documents can be translated (`{here}`)."
                ),
            ));
        }
    };
    let text = match title {
        Some(t) => format!("{t}\n\n{text}"),
        None => text,
    };
    Ok(json!({"type": "text", "text": text}))
}

/// A `tool_result`'s content: its text, and its images as parts of the
/// user message after the tool messages.
fn tool_result(content: Option<&Value>, at: &str) -> Result<(String, Vec<Value>), ApiError> {
    match content {
        None | Some(Value::Null) => Ok((String::new(), Vec::new())),
        Some(Value::String(s)) => Ok((s.clone(), Vec::new())),
        Some(Value::Array(blocks)) => {
            let mut texts = Vec::new();
            let mut images = Vec::new();
            for (k, b) in blocks.iter().enumerate() {
                let here = format!("{at}.content.{k}");
                match kind_of(b) {
                    "text" => texts.push(str_field(b, "text", &here)?.to_owned()),
                    _ => images.push(part(b, &here)?),
                }
            }
            Ok((texts.join("\n"), images))
        }
        Some(_) => Err(ApiError::wrong_type(
            &format!("{at}.content"),
            "a string or an array of content blocks",
        )),
    }
}

fn assistant(
    blocks: &[Value],
    at: &dyn Fn(&str) -> String,
    out: &mut Vec<Message>,
) -> Result<(), ApiError> {
    let mut text = String::new();
    let mut thinking = Vec::new();
    let mut calls = Vec::new();
    for (j, b) in blocks.iter().enumerate() {
        let here = at(&format!(".content.{j}"));
        match kind_of(b) {
            "text" => text.push_str(str_field(b, "text", &here)?),
            "tool_use" => {
                let input = b.get("input").cloned().unwrap_or_else(|| json!({}));
                calls.push(json!({
                    "id": str_field(b, "id", &here)?,
                    "type": "function",
                    "function": {"name": str_field(b, "name", &here)?, "arguments": input.to_string()},
                }));
            }
            // Only a signed block can go back to Anthropic; an unsigned
            // one (a translated answer of another model's reasoning) is
            // dropped, as chat templates drop earlier reasoning anyway
            // and some servers refuse it in the input.
            "thinking" => {
                str_field(b, "thinking", &here)?;
                if b.get("signature")
                    .and_then(Value::as_str)
                    .is_some_and(|s| !s.is_empty())
                {
                    thinking.push(b.clone());
                }
            }
            "redacted_thinking" => thinking.push(b.clone()),
            // Blocks of Anthropic's own tools, which conclave leaves out.
            "server_tool_use" | "web_search_tool_result" | "web_fetch_tool_result" => {}
            other => {
                return Err(ApiError::field(
                    &format!("{here}.type"),
                    "invalid_value",
                    format!("An assistant turn cannot hold a `{other}` block (`{here}`)."),
                ));
            }
        }
    }
    let mut m = Map::new();
    m.insert("role".into(), "assistant".into());
    let empty = text.is_empty() && !calls.is_empty();
    m.insert(
        "content".into(),
        if empty { Value::Null } else { text.into() },
    );
    if !calls.is_empty() {
        m.insert("tool_calls".into(), Value::Array(calls));
    }
    if !thinking.is_empty() {
        m.insert("thinking_blocks".into(), Value::Array(thinking));
    }
    out.push(Message::from_value(Value::Object(m)));
    Ok(())
}

/// `tools` as chat function tools, and the names of Anthropic-defined
/// tools (a `type` such as `web_search_20250305`, no `input_schema`)
/// left out.
pub fn tools(v: &Value) -> Result<(Vec<Value>, Vec<String>), ApiError> {
    let Value::Array(list) = v else {
        return Err(ApiError::wrong_type("tools", "an array"));
    };
    let mut kept = Vec::with_capacity(list.len());
    let mut dropped = Vec::new();
    for (i, t) in list.iter().enumerate() {
        let here = format!("tools.{i}");
        let kind = kind_of(t);
        let schema = t.get("input_schema");
        if schema.is_none() && !kind.is_empty() && kind != "custom" {
            dropped.push(kind.to_owned());
            continue;
        }
        let name = str_field(t, "name", &here)?;
        let mut f = Map::new();
        f.insert("name".into(), name.into());
        if let Some(d) = t.get("description").filter(|d| d.is_string()) {
            f.insert("description".into(), d.clone());
        }
        f.insert(
            "parameters".into(),
            schema.cloned().unwrap_or_else(|| json!({"type": "object"})),
        );
        kept.push(json!({"type": "function", "function": f}));
    }
    Ok((kept, dropped))
}

/// `system` as one text: a string, or text blocks joined by blank lines
/// (`cache_control` and citations left out).
pub(super) fn system_text(v: &Value) -> Result<String, ApiError> {
    match v {
        Value::String(s) => Ok(s.clone()),
        Value::Null => Ok(String::new()),
        Value::Array(blocks) => {
            let mut texts = Vec::with_capacity(blocks.len());
            for (i, b) in blocks.iter().enumerate() {
                match (b.get("type").and_then(Value::as_str), b.get("text")) {
                    (Some("text"), Some(Value::String(t))) => texts.push(t.as_str()),
                    _ => {
                        return Err(ApiError::wrong_type(
                            &format!("system.{i}"),
                            "a text block (`{\"type\": \"text\", \"text\": …}`)",
                        ));
                    }
                }
            }
            Ok(texts.join("\n\n"))
        }
        _ => Err(ApiError::wrong_type(
            "system",
            "a string or an array of text blocks",
        )),
    }
}
