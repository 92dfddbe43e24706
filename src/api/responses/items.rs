//! Responses input items in chat terms: each item becomes a [`Piece`]
//! (a chat message, or one assistant tool call) and [`merge`] puts the
//! pieces together as chat messages (an assistant's text and the function
//! calls right after it are one assistant message). `reasoning` items
//! are dropped here: only a native Responses upstream reads them.
//! [`normalize`] gives items as the store keeps them: an `id` on each,
//! `type: "message"` spelled out, string content as one text part.

use serde_json::{Map, Value, json};

use super::new_id;
use crate::api::error::ApiError;
use crate::wire::Message;

/// One input item in chat terms, before its neighbours are merged.
#[derive(Debug, Clone)]
pub(super) enum Piece {
    /// A chat message as it is (user, system, tool, assistant text).
    Message(Message),
    /// An assistant's function call: one entry of a chat `tool_calls`.
    Call(Value),
}

/// Where the items being read came from, for naming the bad one.
#[derive(Debug, Clone, Copy)]
pub(super) enum Source {
    /// The request's `input`.
    Input,
    /// The stored conversation `previous_response_id` continues.
    History,
}

impl Source {
    fn param(self, i: usize, rest: &str) -> String {
        match self {
            Source::Input => format!("input[{i}]{rest}"),
            Source::History => "previous_response_id".into(),
        }
    }

    fn bad(self, i: usize, rest: &str, code: &'static str, message: String) -> ApiError {
        let message = match self {
            Source::Input => message,
            Source::History => format!("The stored conversation cannot be continued: {message}"),
        };
        ApiError::BadRequest {
            message,
            param: Some(self.param(i, rest)),
            code: Some(code),
        }
    }
}

/// The request's `input` as items: a string is one user message.
pub(super) fn normalize(input: &Value) -> Result<Vec<Value>, ApiError> {
    match input {
        Value::String(text) => Ok(vec![json!({
            "id": new_id("msg_"),
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": text}],
        })]),
        Value::Array(items) => items
            .iter()
            .enumerate()
            .map(|(i, item)| normalize_item(i, item))
            .collect(),
        _ => Err(ApiError::BadRequest {
            message: "`input` must be a string or an array of input items.".into(),
            param: Some("input".into()),
            code: Some("invalid_type"),
        }),
    }
}

fn normalize_item(i: usize, item: &Value) -> Result<Value, ApiError> {
    let Value::Object(obj) = item else {
        return Err(Source::Input.bad(
            i,
            "",
            "invalid_type",
            format!("Input item {i} must be an object."),
        ));
    };
    let kind = match obj.get("type") {
        None | Some(Value::Null) if obj.contains_key("role") => "message",
        Some(Value::String(t)) => t.as_str(),
        _ => {
            return Err(Source::Input.bad(
                i,
                ".type",
                "missing_required_parameter",
                format!("Input item {i} needs a `type` (or a `role`, for a message)."),
            ));
        }
    };
    let prefix = match kind {
        "message" => "msg_",
        "function_call" => "fc_",
        "function_call_output" => "fco_",
        "reasoning" => "rs_",
        _ => "item_",
    };
    let mut out = Map::new();
    let id = match obj.get("id") {
        Some(Value::String(id)) if !id.is_empty() => id.clone(),
        _ => new_id(prefix),
    };
    out.insert("id".into(), Value::from(id));
    out.insert("type".into(), Value::from(kind));
    for (k, v) in obj {
        if k != "id" && k != "type" {
            out.insert(k.clone(), v.clone());
        }
    }
    if kind == "message"
        && let Some(Value::String(text)) = out.get("content")
    {
        let part = match obj.get("role").and_then(Value::as_str) {
            Some("assistant") => "output_text",
            _ => "input_text",
        };
        let parts = json!([{"type": part, "text": text}]);
        out.insert("content".into(), parts);
    }
    Ok(Value::Object(out))
}

/// Each item in chat terms (`reasoning` items dropped), or a 400 naming
/// the first one conclave cannot translate.
pub(super) fn pieces(items: &[Value], from: Source) -> Result<Vec<Piece>, ApiError> {
    let mut out = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        if let Some(p) = piece(i, item, from)? {
            out.push(p);
        }
    }
    Ok(out)
}

fn piece(i: usize, item: &Value, from: Source) -> Result<Option<Piece>, ApiError> {
    let Value::Object(obj) = item else {
        let msg = format!("Input item {i} must be an object.");
        return Err(from.bad(i, "", "invalid_type", msg));
    };
    let kind = match obj.get("type") {
        None | Some(Value::Null) if obj.contains_key("role") => "message",
        Some(Value::String(t)) => t.as_str(),
        _ => {
            let msg = format!("Input item {i} needs a `type` (or a `role`, for a message).");
            return Err(from.bad(i, ".type", "missing_required_parameter", msg));
        }
    };
    match kind {
        "message" => message(i, obj, from).map(|m| Some(Piece::Message(m))),
        "function_call" => call(i, obj, from).map(|c| Some(Piece::Call(c))),
        "function_call_output" => call_output(i, obj, from).map(|m| Some(Piece::Message(m))),
        "reasoning" => Ok(None),
        "item_reference" => Err(from.bad(
            i,
            "",
            "unsupported_value",
            "Input items by reference (`item_reference`) are not supported: send the item \
             itself, or continue a stored response with `previous_response_id`."
                .into(),
        )),
        other => Err(from.bad(
            i,
            ".type",
            "unsupported_value",
            format!(
                "Input items of type `{}` are not supported on this route: it translates \
                 `message`, `function_call`, `function_call_output` and `reasoning` items.",
                clip(other)
            ),
        )),
    }
}

/// A string field an item must have.
fn required<'a>(
    i: usize,
    obj: &'a Map<String, Value>,
    key: &str,
    from: Source,
) -> Result<&'a str, ApiError> {
    match obj.get(key) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(from.bad(
            i,
            &format!(".{key}"),
            "missing_required_parameter",
            format!("Input item {i} is missing its `{key}`."),
        )),
        Some(_) => Err(from.bad(
            i,
            &format!(".{key}"),
            "invalid_type",
            format!("Input item {i}'s `{key}` must be a string."),
        )),
    }
}

fn message(i: usize, obj: &Map<String, Value>, from: Source) -> Result<Message, ApiError> {
    let role = match required(i, obj, "role", from)? {
        "developer" | "system" => "system",
        r @ ("user" | "assistant") => r,
        other => {
            let msg = format!(
                "Input item {i} has role `{}`; expected `user`, `assistant`, `system` or `developer`.",
                clip(other)
            );
            return Err(from.bad(i, ".role", "invalid_value", msg));
        }
    };
    let parts = match obj.get("content") {
        Some(Value::String(s)) => vec![ChatPart::Text(s.clone())],
        Some(Value::Array(parts)) => parts
            .iter()
            .enumerate()
            .map(|(j, p)| content_part(i, j, p, from))
            .collect::<Result<Vec<_>, _>>()?,
        None | Some(Value::Null) => Vec::new(),
        Some(_) => {
            let msg = format!("Input item {i}'s `content` must be a string or a list of parts.");
            return Err(from.bad(i, ".content", "invalid_type", msg));
        }
    };
    if role != "user"
        && let Some(j) = parts.iter().position(|p| matches!(p, ChatPart::Image(_)))
    {
        let msg = format!("Only a user message may carry images (input item {i} is {role}).");
        return Err(from.bad(i, &format!(".content[{j}]"), "invalid_value", msg));
    }
    let content = match role {
        "user" => chat_content(parts, false),
        _ => chat_content(parts, true),
    };
    Ok(Message::with_content(role, content))
}

/// A content part in chat terms.
enum ChatPart {
    Text(String),
    /// A chat `image_url` part, whole.
    Image(Value),
}

fn content_part(i: usize, j: usize, part: &Value, from: Source) -> Result<ChatPart, ApiError> {
    let at = format!(".content[{j}]");
    let bad = |code, msg: String| from.bad(i, &at, code, msg);
    let kind = part.get("type").and_then(Value::as_str);
    let text = |key: &str| match part.get(key) {
        Some(Value::String(s)) => Ok(ChatPart::Text(s.clone())),
        _ => Err(bad(
            "invalid_type",
            format!("Content part {j} of input item {i} needs a string `{key}`."),
        )),
    };
    match kind {
        Some("input_text" | "output_text" | "text") => text("text"),
        Some("refusal") => text("refusal"),
        Some("input_image") => match part.get("image_url") {
            Some(Value::String(url)) => {
                let mut image = Map::new();
                image.insert("url".into(), Value::from(url.as_str()));
                if let Some(d) = part.get("detail").filter(|d| d.is_string()) {
                    image.insert("detail".into(), d.clone());
                }
                Ok(ChatPart::Image(
                    json!({"type": "image_url", "image_url": image}),
                ))
            }
            _ => Err(bad(
                "unsupported_value",
                "Images by `file_id` are not supported: send the image as `image_url` \
                 (an https URL or a data: URL)."
                    .into(),
            )),
        },
        Some("input_file") => Err(bad(
            "unsupported_value",
            "File inputs (`input_file`) are not supported on this route: send the file's \
             text as `input_text`."
                .into(),
        )),
        Some(other) => Err(bad(
            "unsupported_value",
            format!(
                "Content parts of type `{}` are not supported: use `input_text`, \
                 `output_text` or `input_image`.",
                clip(other)
            ),
        )),
        None => Err(bad(
            "missing_required_parameter",
            format!("Content part {j} of input item {i} needs a `type`."),
        )),
    }
}

/// Chat `content` from parts: one string when `flat` (text joined by
/// newlines) or when the parts are a single text; else chat parts.
fn chat_content(parts: Vec<ChatPart>, flat: bool) -> Value {
    let all_text = parts.iter().all(|p| matches!(p, ChatPart::Text(_)));
    if flat || (all_text && parts.len() <= 1) {
        let texts: Vec<String> = parts
            .into_iter()
            .filter_map(|p| match p {
                ChatPart::Text(t) => Some(t),
                ChatPart::Image(_) => None,
            })
            .collect();
        return Value::from(texts.join("\n"));
    }
    let parts = parts
        .into_iter()
        .map(|p| match p {
            ChatPart::Text(t) => json!({"type": "text", "text": t}),
            ChatPart::Image(v) => v,
        })
        .collect();
    Value::Array(parts)
}

fn call(i: usize, obj: &Map<String, Value>, from: Source) -> Result<Value, ApiError> {
    let call_id = required(i, obj, "call_id", from)?;
    let name = required(i, obj, "name", from)?;
    let arguments = match obj.get("arguments") {
        Some(Value::String(s)) => s.clone(),
        None | Some(Value::Null) => {
            return Err(from.bad(
                i,
                ".arguments",
                "missing_required_parameter",
                format!("Input item {i} is missing its `arguments`."),
            ));
        }
        Some(other) => other.to_string(),
    };
    Ok(json!({
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": arguments},
    }))
}

fn call_output(i: usize, obj: &Map<String, Value>, from: Source) -> Result<Message, ApiError> {
    let call_id = required(i, obj, "call_id", from)?;
    let content = match obj.get("output") {
        Some(Value::String(s)) => Value::from(s.as_str()),
        Some(Value::Array(parts)) => {
            let parts = parts
                .iter()
                .enumerate()
                .map(|(j, p)| content_part(i, j, p, from))
                .collect::<Result<Vec<_>, _>>()
                .map_err(|e| match e {
                    ApiError::BadRequest { message, code, .. } => ApiError::BadRequest {
                        message,
                        param: Some(from.param(i, ".output")),
                        code,
                    },
                    e => e,
                })?;
            let all_text = parts.iter().all(|p| matches!(p, ChatPart::Text(_)));
            chat_content(parts, all_text)
        }
        _ => {
            let msg = format!("Input item {i} needs an `output`: a string or a list of parts.");
            return Err(from.bad(i, ".output", "invalid_type", msg));
        }
    };
    let mut m = Message::with_content("tool", content);
    m.rest.insert("tool_call_id".into(), Value::from(call_id));
    Ok(m)
}

/// Chat messages from pieces: function calls join the assistant message
/// right before them (its text, or the calls before), else open one with
/// empty text.
pub(super) fn merge(pieces: impl IntoIterator<Item = Piece>) -> Vec<Message> {
    let mut out: Vec<Message> = Vec::new();
    for piece in pieces {
        match piece {
            Piece::Message(m) => out.push(m),
            Piece::Call(c) => {
                let last = out.last_mut().filter(|m| m.role == "assistant");
                let target = match last {
                    Some(m) => m,
                    None => {
                        out.push(Message::new("assistant", ""));
                        let Some(m) = out.last_mut() else { continue };
                        m
                    }
                };
                if matches!(target.content, None | Some(Value::Null)) {
                    target.content = Some(Value::from(""));
                }
                match target.rest.get_mut("tool_calls") {
                    Some(Value::Array(calls)) => calls.push(c),
                    _ => {
                        target
                            .rest
                            .insert("tool_calls".into(), Value::Array(vec![c]));
                    }
                }
            }
        }
    }
    out
}

/// A client's string, short enough for an error message.
pub(super) fn clip(s: &str) -> String {
    s.chars().take(64).collect()
}
