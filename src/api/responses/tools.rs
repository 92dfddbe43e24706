//! A Responses request's `tools` and `tool_choice` in chat terms: flat
//! function tools become chat function tools; every other type (built-in
//! tools such as `web_search`, `file_search`, `computer_use_preview`,
//! `local_shell`, `image_generation`, `code_interpreter`, `mcp`, Codex's
//! freeform `custom` tools, `namespace`, and types yet to come) is dropped,
//! as a chat model cannot run it, and listed once by its type. A
//! `tool_choice` naming a dropped type becomes `auto`.

use serde_json::{Map, Value, json};

use super::items::clip;
use crate::api::error::ApiError;

/// The tools, read.
pub(super) struct Tools {
    /// The chat request's `tools`.
    pub chat: Vec<Value>,
    /// The tools kept, as the client sent them (for the response's echo).
    pub kept: Vec<Value>,
    /// The chat `tool_choice`, and what the response echoes.
    pub choice: Option<(Value, Value)>,
    /// The types dropped, each once.
    pub dropped: Vec<String>,
}

pub(super) fn read(tools: Option<&Value>, choice: Option<&Value>) -> Result<Tools, ApiError> {
    let mut t = Tools {
        chat: Vec::new(),
        kept: Vec::new(),
        choice: None,
        dropped: Vec::new(),
    };
    match tools {
        None | Some(Value::Null) => {}
        Some(Value::Array(list)) => {
            for (i, tool) in list.iter().enumerate() {
                match tool.get("type").and_then(Value::as_str) {
                    Some("function") => {
                        t.chat.push(function_tool(i, tool)?);
                        t.kept.push(tool.clone());
                    }
                    Some(other) => drop_tool(&mut t.dropped, other),
                    None => {
                        return Err(ApiError::field(
                            &format!("tools[{i}].type"),
                            "missing_required_parameter",
                            format!("Tool {i} needs a `type`."),
                        ));
                    }
                }
            }
        }
        Some(_) => return Err(ApiError::wrong_type("tools", "a list of tools")),
    }
    t.choice = match choice {
        None | Some(Value::Null) => None,
        Some(c) => Some(tool_choice(c, &mut t.dropped)?),
    };
    Ok(t)
}

fn drop_tool(dropped: &mut Vec<String>, kind: &str) {
    let kind = clip(kind);
    if !dropped.contains(&kind) {
        dropped.push(kind);
    }
}

/// The chat `tool_choice`, and what the response echoes.
fn tool_choice(c: &Value, dropped: &mut Vec<String>) -> Result<(Value, Value), ApiError> {
    match c {
        Value::String(s) if matches!(s.as_str(), "auto" | "none" | "required") => {
            Ok((c.clone(), c.clone()))
        }
        Value::Object(o) => match o.get("type").and_then(Value::as_str) {
            Some("function") => match o.get("name") {
                Some(Value::String(name)) => Ok((
                    json!({"type": "function", "function": {"name": name}}),
                    c.clone(),
                )),
                _ => Err(ApiError::field(
                    "tool_choice.name",
                    "missing_required_parameter",
                    "A function `tool_choice` needs the function's `name`.".into(),
                )),
            },
            Some("allowed_tools") => match o.get("mode").and_then(Value::as_str) {
                Some(m @ ("auto" | "required")) => Ok((Value::from(m), c.clone())),
                _ => Err(ApiError::field(
                    "tool_choice.mode",
                    "invalid_value",
                    "`tool_choice.mode` must be `auto` or `required`.".into(),
                )),
            },
            Some(other) => {
                drop_tool(dropped, other);
                Ok((Value::from("auto"), Value::from("auto")))
            }
            None => Err(ApiError::field(
                "tool_choice.type",
                "missing_required_parameter",
                "An object `tool_choice` needs a `type`.".into(),
            )),
        },
        _ => Err(ApiError::field(
            "tool_choice",
            "invalid_value",
            "`tool_choice` must be `auto`, `none`, `required` or an object naming a tool.".into(),
        )),
    }
}

/// A flat function tool as a chat tool.
fn function_tool(i: usize, tool: &Value) -> Result<Value, ApiError> {
    let Some(name) = tool
        .get("name")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
    else {
        return Err(ApiError::field(
            &format!("tools[{i}].name"),
            "missing_required_parameter",
            format!("Function tool {i} needs a `name`."),
        ));
    };
    let mut f = Map::new();
    f.insert("name".into(), Value::from(name));
    for key in ["description", "parameters", "strict"] {
        if let Some(v) = tool.get(key).filter(|v| !v.is_null()) {
            f.insert(key.into(), v.clone());
        }
    }
    Ok(json!({"type": "function", "function": f}))
}
