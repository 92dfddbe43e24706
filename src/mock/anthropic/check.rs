//! What Anthropic's API refuses with a 400 `invalid_request_error`, as the
//! mock checks it: a field the Messages API does not take (it rejects
//! extra inputs, so OpenAI-only fields such as `stream_options` or
//! `response_format` must not reach it), a missing `max_tokens`, roles
//! other than `user`/`assistant`/`system`,
//! content blocks of types it does not know (OpenAI's `image_url`),
//! OpenAI-shaped tools, a `tool_result` whose `tool_use` is not in the
//! message before, a `tool_use` whose result does not follow, a
//! `temperature` above 1, and a thinking budget under 1024 or not below
//! `max_tokens`. Each message says where, in Anthropic's words.

use std::collections::HashSet;

use serde_json::Value;

/// Top-level fields the Messages API takes.
const FIELDS: &[&str] = &[
    "model",
    "messages",
    "max_tokens",
    "system",
    "stop_sequences",
    "stream",
    "temperature",
    "top_p",
    "top_k",
    "tools",
    "tool_choice",
    "metadata",
    "thinking",
    "service_tier",
    "container",
    "mcp_servers",
    "context_management",
    "output_config",
];

/// Content block types a message may hold.
const BLOCKS: &[&str] = &[
    "text",
    "image",
    "document",
    "search_result",
    "tool_use",
    "tool_result",
    "thinking",
    "redacted_thinking",
    "server_tool_use",
    "web_search_tool_result",
    "container_upload",
];

/// `Err`: Anthropic's message for the first problem. `count`: a
/// `count_tokens` body (no `max_tokens`, no `stream`).
pub(super) fn request(req: &Value, count: bool) -> Result<(), String> {
    let Some(obj) = req.as_object() else {
        return Err("body: Input should be an object".into());
    };
    for key in obj.keys() {
        let allowed = FIELDS.contains(&key.as_str())
            && !(count && matches!(key.as_str(), "max_tokens" | "stream" | "stop_sequences"));
        if !allowed {
            return Err(format!("{key}: Extra inputs are not permitted"));
        }
    }
    let max_tokens = req.get("max_tokens");
    if !count {
        match max_tokens.and_then(Value::as_u64) {
            Some(n) if n >= 1 => {}
            Some(_) => return Err("max_tokens: Input should be greater than or equal to 1".into()),
            None => return Err("max_tokens: Field required".into()),
        }
    }
    if let Some(t) = req.get("temperature")
        && !t.as_f64().is_some_and(|t| (0.0..=1.0).contains(&t))
    {
        return Err("temperature: Input should be less than or equal to 1".into());
    }
    if let Some(s) = req.get("system") {
        blocks_or_text(s, "system")?;
    }
    if let Some(s) = req.get("stop_sequences")
        && !s.as_array().is_some_and(|a| a.iter().all(Value::is_string))
    {
        return Err("stop_sequences: Input should be a valid list of strings".into());
    }
    messages(req.get("messages"))?;
    tools(req.get("tools"))?;
    tool_choice(req.get("tool_choice"))?;
    thinking(req.get("thinking"), max_tokens.and_then(Value::as_u64))
}

fn blocks_or_text(v: &Value, at: &str) -> Result<(), String> {
    match v {
        Value::String(_) => Ok(()),
        Value::Array(blocks) => {
            for (j, b) in blocks.iter().enumerate() {
                let t = b.get("type").and_then(Value::as_str).unwrap_or("");
                if !BLOCKS.contains(&t) {
                    return Err(format!(
                        "{at}.{j}.type: Input tag '{t}' found using 'type' does not match any of \
                         the expected tags: {}",
                        BLOCKS.join(", ")
                    ));
                }
                if t == "image" && b.pointer("/source/type").and_then(Value::as_str).is_none() {
                    return Err(format!("{at}.{j}.image.source: Field required"));
                }
            }
            Ok(())
        }
        _ => Err(format!("{at}: Input should be a valid string or list")),
    }
}

/// The ids of blocks of `kind` in a message's content (`id` for
/// `tool_use`, `tool_use_id` for `tool_result`).
fn ids<'a>(m: &'a Value, kind: &str, field: &str) -> Vec<&'a str> {
    m.get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .filter(|b| b.get("type").and_then(Value::as_str) == Some(kind))
        .filter_map(|b| b.get(field).and_then(Value::as_str))
        .collect()
}

fn messages(v: Option<&Value>) -> Result<(), String> {
    let Some(ms) = v.and_then(Value::as_array) else {
        return Err("messages: Field required".into());
    };
    if ms.is_empty() {
        return Err("messages: at least one message is required".into());
    }
    for (i, m) in ms.iter().enumerate() {
        match m.get("role").and_then(Value::as_str) {
            // Later API versions take system turns between messages
            // (Claude Code sends them).
            Some("user" | "assistant" | "system") => {}
            _ => {
                return Err(format!(
                    "messages.{i}.role: Input should be 'user' or 'assistant'"
                ));
            }
        }
        let Some(content) = m.get("content") else {
            return Err(format!("messages.{i}.content: Field required"));
        };
        blocks_or_text(content, &format!("messages.{i}.content"))?;
        let results = ids(m, "tool_result", "tool_use_id");
        if !results.is_empty() {
            let before: HashSet<&str> = match i.checked_sub(1).and_then(|p| ms.get(p)) {
                Some(p) if p.get("role").and_then(Value::as_str) == Some("assistant") => {
                    ids(p, "tool_use", "id").into_iter().collect()
                }
                _ => HashSet::new(),
            };
            if let Some(id) = results.iter().find(|id| !before.contains(*id)) {
                return Err(format!(
                    "messages.{i}.content: unexpected `tool_use_id` found in `tool_result` \
                     blocks: {id}. Each `tool_result` block must have a corresponding \
                     `tool_use` block in the previous message."
                ));
            }
        }
        let uses = ids(m, "tool_use", "id");
        if let Some(next) = ms.get(i + 1)
            && !uses.is_empty()
        {
            let answered: HashSet<&str> = ids(next, "tool_result", "tool_use_id")
                .into_iter()
                .collect();
            if let Some(id) = uses.iter().find(|id| !answered.contains(*id)) {
                return Err(format!(
                    "messages.{i}: `tool_use` ids were found without `tool_result` blocks \
                     immediately after: {id}. Each `tool_use` block must have a corresponding \
                     `tool_result` block in the next message."
                ));
            }
        }
    }
    Ok(())
}

fn tools(v: Option<&Value>) -> Result<(), String> {
    let Some(v) = v else { return Ok(()) };
    let Some(tools) = v.as_array() else {
        return Err("tools: Input should be a valid list".into());
    };
    for (i, t) in tools.iter().enumerate() {
        match t.get("type").and_then(Value::as_str) {
            None | Some("custom") => {}
            // A server tool: `web_search_20250305`, `bash_20250124`, …
            Some(k)
                if k.rsplit_once('_').is_some_and(|(_, v)| {
                    v.len() == 8 && v.bytes().all(|b| b.is_ascii_digit())
                }) =>
            {
                continue;
            }
            Some(k) => {
                return Err(format!(
                    "tools.{i}: Input tag '{k}' found using 'type' does not match any of the \
                     expected tags: 'custom', or a server tool's versioned type"
                ));
            }
        }
        if t.get("name").and_then(Value::as_str).is_none() {
            return Err(format!("tools.{i}.custom.name: Field required"));
        }
        if !t.get("input_schema").is_some_and(Value::is_object) {
            return Err(format!("tools.{i}.custom.input_schema: Field required"));
        }
        if let Some(k) = t.as_object().and_then(|o| {
            // OpenAI's shape; other keys may belong to betas (Claude
            // Code sends `defer_loading`).
            o.keys()
                .find(|k| matches!(k.as_str(), "function" | "parameters"))
        }) {
            return Err(format!(
                "tools.{i}.custom.{k}: Extra inputs are not permitted"
            ));
        }
    }
    Ok(())
}

fn tool_choice(v: Option<&Value>) -> Result<(), String> {
    let Some(v) = v else { return Ok(()) };
    match v.get("type").and_then(Value::as_str) {
        Some("auto" | "any" | "none") => Ok(()),
        Some("tool") if v.get("name").is_some_and(Value::is_string) => Ok(()),
        Some("tool") => Err("tool_choice.tool.name: Field required".into()),
        _ => Err(
            "tool_choice: Input tag does not match any of the expected tags: 'auto', 'any', \
             'tool', 'none'"
                .into(),
        ),
    }
}

fn thinking(v: Option<&Value>, max_tokens: Option<u64>) -> Result<(), String> {
    let Some(v) = v else { return Ok(()) };
    match v.get("type").and_then(Value::as_str) {
        // `adaptive`: the model sets its own budget (Claude Code sends it).
        Some("disabled" | "adaptive") => Ok(()),
        Some("enabled") => {
            let Some(budget) = v.get("budget_tokens").and_then(Value::as_u64) else {
                return Err("thinking.enabled.budget_tokens: Field required".into());
            };
            if budget < 1024 {
                return Err(
                    "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
                        .into(),
                );
            }
            if max_tokens.is_some_and(|m| budget >= m) {
                return Err("`max_tokens` must be greater than `thinking.budget_tokens`".into());
            }
            Ok(())
        }
        _ => Err(
            "thinking: Input tag does not match any of the expected tags: 'enabled', 'disabled', 'adaptive'"
                .into(),
        ),
    }
}
