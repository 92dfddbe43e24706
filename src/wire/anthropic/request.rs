//! Chat request → Messages request: the top-level fields (the messages
//! are [`super::conversation`]'s).
//!
//! Read: `messages`, `max_completion_tokens`/`max_tokens`, `stop`,
//! `temperature` (clamped to 0..1), `top_p`, `top_k` (a vendor field),
//! `user`, `stream`, `stream_options.include_usage`, `n` (only 1),
//! `tools`, `tool_choice`, `parallel_tool_calls`, `response_format`,
//! `reasoning_effort` (→ `thinking` with [`budget`]) and `thinking`
//! (Anthropic's own, as LiteLLM accepts it). Every other field is dropped.

use serde_json::{Map, Value, json};

use super::conversation::Conversation;
use super::{JSON_TOOL, Translation, Untranslatable};
use crate::wire::billing::output_cap;

/// The system instruction `response_format: {"type": "json_object"}` becomes.
pub const JSON_OBJECT_PROMPT: &str =
    "Respond with one JSON object and nothing else: no prose, no code fences.";

/// The system instruction added when thinking rules out forcing the JSON tool.
const JSON_TOOL_PROMPT: &str = "Give your final answer by calling the `json_response` tool.";

/// The thinking budget (tokens) a `reasoning_effort` asks for; `None`
/// for `none`, an error for a word that is not an effort.
pub fn budget(effort: &str) -> Result<Option<u64>, Untranslatable> {
    Ok(Some(match effort {
        "none" => return Ok(None),
        "minimal" => 1024,
        "low" => 2048,
        "medium" => 8192,
        "high" => 24576,
        "xhigh" => 32768,
        _ => {
            return Err(Untranslatable::new(
                "reasoning_effort",
                "is not a known effort",
            ));
        }
    }))
}

/// Translates a chat completions request body into a Messages request for
/// `upstream_model`; `default_max_tokens` when the request names none
/// (Messages requires one).
pub fn to_messages(
    chat: &Map<String, Value>,
    upstream_model: &str,
    default_max_tokens: u64,
) -> Result<(Value, Translation), Untranslatable> {
    let get = |k: &str| chat.get(k).filter(|v| !v.is_null());
    let mut conv = Conversation::read(get("messages").unwrap_or(&Value::Null))?;
    let mut out = Map::new();
    out.insert("model".into(), upstream_model.into());

    if let Some(n) = get("n")
        && n.as_u64() != Some(1)
    {
        return Err(Untranslatable::new(
            "n",
            "Anthropic models write one answer per request",
        ));
    }
    let mut max_tokens = output_cap(chat).unwrap_or(default_max_tokens).max(1);

    let thinking = match get("reasoning_effort") {
        Some(Value::String(e)) => {
            budget(e)?.map(|b| json!({"type": "enabled", "budget_tokens": b}))
        }
        Some(_) => return Err(Untranslatable::new("reasoning_effort", "is not a string")),
        None => match get("thinking") {
            Some(t @ Value::Object(_)) => Some(t.clone()),
            Some(_) => return Err(Untranslatable::new("thinking", "is not an object")),
            None => None,
        },
    };
    let thinks = thinking
        .as_ref()
        .is_some_and(|t| t.get("type").and_then(Value::as_str) != Some("disabled"));
    if let Some(t) = thinking {
        // max_tokens counts the thinking too: the answer keeps what it asked.
        if let Some(b) = t.get("budget_tokens").and_then(Value::as_u64)
            && max_tokens <= b
        {
            max_tokens = max_tokens.saturating_add(b);
        }
        out.insert("thinking".into(), t);
    }
    out.insert("max_tokens".into(), max_tokens.into());

    if !thinks {
        // Anthropic rejects sampling settings while thinking.
        if let Some(t) = get("temperature") {
            let Some(t) = t.as_f64() else {
                return Err(Untranslatable::new("temperature", "is not a number"));
            };
            out.insert("temperature".into(), t.clamp(0.0, 1.0).into());
        }
        for k in ["top_p", "top_k"] {
            if let Some(v) = get(k) {
                if !v.is_number() {
                    return Err(Untranslatable::new(k, "is not a number"));
                }
                out.insert(k.into(), v.clone());
            }
        }
    }

    if let Some(stop) = get("stop") {
        let stops = stop_sequences(stop)?;
        if !stops.is_empty() {
            out.insert("stop_sequences".into(), stops.into());
        }
    }
    if let Some(user) = get("user") {
        let Some(user) = user.as_str() else {
            return Err(Untranslatable::new("user", "is not a string"));
        };
        out.insert("metadata".into(), json!({"user_id": user}));
    }

    let json_tool = tools(chat, &mut out, &mut conv, thinks)?;

    let stream = get("stream").and_then(Value::as_bool).unwrap_or(false);
    if stream {
        out.insert("stream".into(), true.into());
    }
    let include_usage = stream
        && chat
            .get("stream_options")
            .and_then(|o| o.get("include_usage"))
            .and_then(Value::as_bool)
            .unwrap_or(false);

    let (system, messages) = conv.finish();
    if let Some(system) = system {
        out.insert("system".into(), system);
    }
    out.insert("messages".into(), messages.into());
    let t = Translation {
        stream,
        include_usage,
        json_tool,
    };
    Ok((out.into(), t))
}

/// `stop` (a string or a list) as `stop_sequences`, without the empty or
/// whitespace-only ones Anthropic rejects.
fn stop_sequences(stop: &Value) -> Result<Vec<Value>, Untranslatable> {
    let list: Vec<&Value> = match stop {
        Value::Array(l) => l.iter().collect(),
        one => vec![one],
    };
    let mut out = Vec::with_capacity(list.len());
    for (i, s) in list.into_iter().enumerate() {
        let Some(s) = s.as_str() else {
            return Err(Untranslatable::new(format!("stop[{i}]"), "is not a string"));
        };
        if !s.trim().is_empty() {
            out.push(s.into());
        }
    }
    Ok(out)
}

/// `tools`, `tool_choice`, `parallel_tool_calls` and `response_format`;
/// the forced JSON tool's name when `response_format` became one.
fn tools(
    chat: &Map<String, Value>,
    out: &mut Map<String, Value>,
    conv: &mut Conversation,
    thinks: bool,
) -> Result<Option<String>, Untranslatable> {
    let get = |k: &str| chat.get(k).filter(|v| !v.is_null());
    let mut tools = Vec::new();
    if let Some(list) = get("tools") {
        let Some(list) = list.as_array() else {
            return Err(Untranslatable::new("tools", "is not an array"));
        };
        for (i, t) in list.iter().enumerate() {
            tools.push(tool(t, i)?);
        }
    }
    let mut choice = match get("tool_choice") {
        None => None,
        Some(Value::String(s)) => Some(match s.as_str() {
            "auto" => json!({"type": "auto"}),
            "required" => json!({"type": "any"}),
            "none" => json!({"type": "none"}),
            _ => {
                return Err(Untranslatable::new(
                    "tool_choice",
                    "is not auto, required or none",
                ));
            }
        }),
        Some(c) => match (
            c.get("type").and_then(Value::as_str),
            c.pointer("/function/name"),
        ) {
            (Some("function"), Some(Value::String(name))) => {
                Some(json!({"type": "tool", "name": name}))
            }
            _ => {
                return Err(Untranslatable::new(
                    "tool_choice",
                    "only a named function translates",
                ));
            }
        },
    };

    let mut json_tool = None;
    match get("response_format").map(|f| (f.get("type").and_then(Value::as_str), f)) {
        None | Some((Some("text"), _)) => {}
        Some((Some("json_object"), _)) => conv.add_system(JSON_OBJECT_PROMPT),
        Some((Some("json_schema"), f)) => {
            if tools
                .iter()
                .any(|t| t.get("name").and_then(Value::as_str) == Some(JSON_TOOL))
            {
                return Err(Untranslatable::new(
                    "response_format",
                    format!("a tool is already named `{JSON_TOOL}`"),
                ));
            }
            let spec = f.get("json_schema");
            let schema = spec.and_then(|s| s.get("schema")).filter(|s| !s.is_null());
            let schema = schema.cloned().unwrap_or_else(|| json!({"type": "object"}));
            if schema.get("type").and_then(Value::as_str) != Some("object") {
                return Err(Untranslatable::new(
                    "response_format.json_schema.schema",
                    "Anthropic tools take only an object schema",
                ));
            }
            let mut description = "Respond with a JSON object that matches this schema.".to_owned();
            if let Some(d) = spec
                .and_then(|s| s.get("description"))
                .and_then(Value::as_str)
            {
                description.push(' ');
                description.push_str(d);
            }
            let user_tools = !tools.is_empty();
            tools.push(
                json!({"name": JSON_TOOL, "description": description, "input_schema": schema}),
            );
            let user_named = choice.as_ref().and_then(|c| c.get("name")).is_some();
            if thinks {
                // Thinking forbids a forced tool: the model is asked instead.
                conv.add_system(JSON_TOOL_PROMPT);
                if !user_named {
                    choice = Some(json!({"type": "auto"}));
                }
            } else if !user_named {
                let none = choice.as_ref().and_then(|c| c.get("type")) == Some(&json!("none"));
                choice = Some(if user_tools && !none {
                    json!({"type": "any"})
                } else {
                    json!({"type": "tool", "name": JSON_TOOL})
                });
            }
            json_tool = Some(JSON_TOOL.to_owned());
        }
        Some(_) => {
            return Err(Untranslatable::new(
                "response_format.type",
                "is not a known format",
            ));
        }
    }

    if tools.is_empty() {
        return Ok(json_tool);
    }
    if get("parallel_tool_calls").and_then(Value::as_bool) == Some(false) {
        let c = choice.get_or_insert_with(|| json!({"type": "auto"}));
        if let Some(c) = c
            .as_object_mut()
            .filter(|c| c.get("type") != Some(&json!("none")))
        {
            c.insert("disable_parallel_tool_use".into(), true.into());
        }
    }
    out.insert("tools".into(), tools.into());
    if let Some(c) = choice {
        out.insert("tool_choice".into(), c);
    }
    Ok(json_tool)
}

/// One chat tool (a `function`) as a Messages tool.
fn tool(t: &Value, i: usize) -> Result<Value, Untranslatable> {
    if t.get("type").and_then(Value::as_str) != Some("function") {
        return Err(Untranslatable::new(
            format!("tools[{i}].type"),
            "only `function` tools translate",
        ));
    }
    let f = t.get("function");
    let Some(name) = f.and_then(|f| f.get("name")).and_then(Value::as_str) else {
        return Err(Untranslatable::new(
            format!("tools[{i}].function.name"),
            "is not a string",
        ));
    };
    let mut out = Map::new();
    out.insert("name".into(), name.into());
    if let Some(d) = f.and_then(|f| f.get("description")).and_then(Value::as_str) {
        out.insert("description".into(), d.into());
    }
    let schema = f.and_then(|f| f.get("parameters")).filter(|p| !p.is_null());
    let schema = match schema {
        None => json!({"type": "object"}),
        Some(p @ Value::Object(_)) => p.clone(),
        Some(_) => {
            return Err(Untranslatable::new(
                format!("tools[{i}].function.parameters"),
                "is not an object",
            ));
        }
    };
    out.insert("input_schema".into(), schema);
    if let Some(c) = t.get("cache_control").filter(|c| !c.is_null()) {
        out.insert("cache_control".into(), c.clone());
    }
    Ok(out.into())
}
