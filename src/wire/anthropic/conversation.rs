//! Chat `messages` → Messages' top-level `system` and a strictly
//! alternating, user-first `messages` list.
//!
//! - `system` and `developer` messages, wherever they are, fold in order
//!   into `system`, an array of text blocks.
//! - `tool` messages become `tool_result` blocks of a user turn.
//! - Consecutive turns of one role merge (their blocks concatenated; in a
//!   user turn `tool_result` blocks go first, in an assistant turn
//!   `thinking` blocks do, as Anthropic requires).
//! - A conversation that does not start with a user turn (or has none)
//!   gets a user turn of [`PLACEHOLDER`] first.
//! - Empty text is dropped (Anthropic rejects it), and a final assistant
//!   turn (a prefill) loses its trailing whitespace (Anthropic rejects it).
//! - A turn that is one plain text block is sent as a string.

use serde_json::{Map, Value, json};

use super::Untranslatable;

/// The user turn put first when a conversation does not start with one.
pub const PLACEHOLDER: &str = ".";

#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    User,
    Assistant,
}

struct Turn {
    role: Role,
    blocks: Vec<Value>,
}

/// The conversation being built, message by message.
#[derive(Default)]
pub(super) struct Conversation {
    system: Vec<Value>,
    turns: Vec<Turn>,
}

impl Conversation {
    /// Reads the chat request's `messages`.
    pub(super) fn read(messages: &Value) -> Result<Self, Untranslatable> {
        let Some(list) = messages.as_array() else {
            return Err(Untranslatable::new("messages", "is not an array"));
        };
        let mut c = Conversation::default();
        for (i, m) in list.iter().enumerate() {
            c.message(i, m)?;
        }
        Ok(c)
    }

    /// Appends a system instruction after every other.
    pub(super) fn add_system(&mut self, text: &str) {
        self.system.push(json!({"type": "text", "text": text}));
    }

    fn message(&mut self, i: usize, m: &Value) -> Result<(), Untranslatable> {
        let at = |f: &str| format!("messages[{i}]{f}");
        let Some(m) = m.as_object() else {
            return Err(Untranslatable::new(at(""), "is not an object"));
        };
        let content = m.get("content").filter(|c| !c.is_null());
        match m.get("role").and_then(Value::as_str) {
            Some("system" | "developer") => {
                let blocks = parts(content, &at(".content"), Only::Text)?;
                self.system.extend(blocks);
            }
            Some("user") => {
                let blocks = parts(content, &at(".content"), Only::Any)?;
                self.push(Role::User, blocks);
            }
            Some("assistant") => self.assistant(m, content, &at)?,
            Some("tool") => {
                let id = match m.get("tool_call_id").and_then(Value::as_str) {
                    Some(id) => tool_id(id, &at(".tool_call_id"))?,
                    None => return Err(Untranslatable::new(at(".tool_call_id"), "is missing")),
                };
                let mut result = Map::new();
                result.insert("type".into(), "tool_result".into());
                result.insert("tool_use_id".into(), id.into());
                match content {
                    Some(Value::String(s)) if !s.is_empty() => {
                        result.insert("content".into(), s.as_str().into());
                    }
                    c => {
                        let blocks = parts(c, &at(".content"), Only::Any)?;
                        if !blocks.is_empty() {
                            result.insert("content".into(), blocks.into());
                        }
                    }
                }
                self.push(Role::User, vec![result.into()]);
            }
            Some("function") => {
                return Err(Untranslatable::new(
                    at(".role"),
                    "`function` messages are deprecated: use `tool`",
                ));
            }
            _ => return Err(Untranslatable::new(at(".role"), "is not a chat role")),
        }
        Ok(())
    }

    fn assistant(
        &mut self,
        m: &Map<String, Value>,
        content: Option<&Value>,
        at: &dyn Fn(&str) -> String,
    ) -> Result<(), Untranslatable> {
        // Thinking first; only signed blocks can be sent back, so
        // `reasoning_content` alone is dropped.
        let mut blocks: Vec<Value> = m
            .get("thinking_blocks")
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .filter_map(thinking_block)
            .collect();
        blocks.extend(parts(content, &at(".content"), Only::Text)?);
        if m.get("function_call").is_some_and(|f| !f.is_null()) {
            return Err(Untranslatable::new(
                at(".function_call"),
                "is deprecated: use `tool_calls`",
            ));
        }
        let calls = m.get("tool_calls").filter(|c| !c.is_null());
        for (j, call) in calls
            .and_then(Value::as_array)
            .into_iter()
            .flatten()
            .enumerate()
        {
            blocks.push(tool_use(call, &at(&format!(".tool_calls[{j}]")))?);
        }
        if calls.is_some_and(|c| !c.is_array()) {
            return Err(Untranslatable::new(at(".tool_calls"), "is not an array"));
        }
        self.push(Role::Assistant, blocks);
        Ok(())
    }

    fn push(&mut self, role: Role, blocks: Vec<Value>) {
        if blocks.is_empty() {
            return;
        }
        match self.turns.last_mut() {
            Some(t) if t.role == role => t.blocks.extend(blocks),
            _ => self.turns.push(Turn { role, blocks }),
        }
    }

    /// The `system` blocks (none when empty) and the `messages` list.
    pub(super) fn finish(mut self) -> (Option<Value>, Vec<Value>) {
        for t in &mut self.turns {
            let first: &[&str] = match t.role {
                Role::User => &["tool_result"],
                Role::Assistant => &["thinking", "redacted_thinking"],
            };
            // Stable: the blocks that must lead keep their order.
            t.blocks.sort_by_key(|b| !first.contains(&kind(b)));
        }
        // After the order is settled: the prefill's end is its last block.
        if let Some(last) = self.turns.last_mut().filter(|t| t.role == Role::Assistant) {
            trim_prefill(&mut last.blocks);
            if last.blocks.is_empty() {
                self.turns.pop();
            }
        }
        if self.turns.first().is_none_or(|t| t.role != Role::User) {
            let placeholder = json!({"type": "text", "text": PLACEHOLDER});
            self.turns.insert(
                0,
                Turn {
                    role: Role::User,
                    blocks: vec![placeholder],
                },
            );
        }
        let messages = self
            .turns
            .into_iter()
            .map(|t| {
                let role = match t.role {
                    Role::User => "user",
                    Role::Assistant => "assistant",
                };
                json!({"role": role, "content": content_value(t.blocks)})
            })
            .collect();
        let system = (!self.system.is_empty()).then(|| Value::Array(self.system));
        (system, messages)
    }
}

fn kind(block: &Value) -> &str {
    block.get("type").and_then(Value::as_str).unwrap_or("")
}

/// One plain text block is sent as a string; anything else as blocks.
fn content_value(mut blocks: Vec<Value>) -> Value {
    if let [only] = blocks.as_mut_slice()
        && let Some(b) = only.as_object_mut()
        && b.len() == 2
        && kind(only) == "text"
        && let Some(text) = only.get_mut("text").map(Value::take)
    {
        return text;
    }
    blocks.into()
}

/// Removes a prefill's trailing whitespace (and the text blocks it empties).
fn trim_prefill(blocks: &mut Vec<Value>) {
    while let Some(last) = blocks.last_mut() {
        if kind(last) != "text" {
            return;
        }
        if let Some(Value::String(s)) = last.get_mut("text") {
            s.truncate(s.trim_end().len());
            if !s.is_empty() {
                return;
            }
        }
        blocks.pop();
    }
}

/// Which content parts a role may carry.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Only {
    Text,
    Any,
}

/// A message's `content` (a string or parts) as Messages content blocks.
fn parts(content: Option<&Value>, at: &str, only: Only) -> Result<Vec<Value>, Untranslatable> {
    match content {
        None => Ok(Vec::new()),
        Some(Value::String(s)) => Ok(text_block(s, None).into_iter().collect()),
        Some(Value::Array(list)) => {
            let mut blocks = Vec::with_capacity(list.len());
            for (j, p) in list.iter().enumerate() {
                blocks.extend(part(p, &format!("{at}[{j}]"), only)?);
            }
            Ok(blocks)
        }
        Some(_) => Err(Untranslatable::new(
            at,
            "is neither a string nor an array of parts",
        )),
    }
}

fn text_block(text: &str, cache_control: Option<&Value>) -> Option<Value> {
    if text.is_empty() {
        return None;
    }
    let mut b = Map::new();
    b.insert("type".into(), "text".into());
    b.insert("text".into(), text.into());
    if let Some(c) = cache_control.filter(|c| !c.is_null()) {
        b.insert("cache_control".into(), c.clone());
    }
    Some(b.into())
}

/// One content part (`None`: an empty text, dropped).
fn part(p: &Value, at: &str, only: Only) -> Result<Option<Value>, Untranslatable> {
    let cache = p.get("cache_control");
    let text = |field: &str| match p.get(field) {
        Some(Value::String(s)) => Ok(text_block(s, cache)),
        _ => Err(Untranslatable::new(
            format!("{at}.{field}"),
            "is not a string",
        )),
    };
    match p.get("type").and_then(Value::as_str) {
        Some("text") => text("text"),
        Some("refusal") => text("refusal"),
        Some("image_url") if only == Only::Any => image(p, at, cache).map(Some),
        Some(kind @ ("image_url" | "input_audio" | "file")) if only == Only::Text => {
            Err(Untranslatable::new(
                at,
                format!("a `{kind}` part where Anthropic takes only text"),
            ))
        }
        Some("input_audio") => Err(Untranslatable::new(at, "Anthropic models take no audio")),
        Some("file") => Err(Untranslatable::new(at, "file parts are not translated")),
        _ => Err(Untranslatable::new(
            format!("{at}.type"),
            "is not a known content part",
        )),
    }
}

/// An `image_url` part: a `data:` URL as base64, anything else as a URL.
fn image(p: &Value, at: &str, cache: Option<&Value>) -> Result<Value, Untranslatable> {
    let field = format!("{at}.image_url.url");
    let url = match p.get("image_url") {
        Some(Value::String(u)) => u.as_str(),
        Some(o) => match o.get("url").and_then(Value::as_str) {
            Some(u) => u,
            None => return Err(Untranslatable::new(field, "is not a string")),
        },
        None => return Err(Untranslatable::new(field, "is missing")),
    };
    let source = if let Some(rest) = url.strip_prefix("data:") {
        let Some((media, data)) = rest.split_once(',') else {
            return Err(Untranslatable::new(field, "is a `data:` URL without data"));
        };
        let Some(media_type) = media.strip_suffix(";base64") else {
            return Err(Untranslatable::new(
                field,
                "is a `data:` URL that is not base64",
            ));
        };
        json!({"type": "base64", "media_type": media_type, "data": data})
    } else if url.starts_with("https://") || url.starts_with("http://") {
        json!({"type": "url", "url": url})
    } else {
        return Err(Untranslatable::new(
            field,
            "is neither a `data:` nor an http(s) URL",
        ));
    };
    let mut b = json!({"type": "image", "source": source});
    if let (Some(c), Some(o)) = (cache.filter(|c| !c.is_null()), b.as_object_mut()) {
        o.insert("cache_control".into(), c.clone());
    }
    Ok(b)
}

/// A LiteLLM `thinking_blocks` entry that can be sent back (signed, or
/// redacted).
fn thinking_block(b: &Value) -> Option<Value> {
    match kind(b) {
        "thinking" => {
            let signature = b.get("signature")?.as_str().filter(|s| !s.is_empty())?;
            let thinking = b.get("thinking").and_then(Value::as_str).unwrap_or("");
            Some(json!({"type": "thinking", "thinking": thinking, "signature": signature}))
        }
        "redacted_thinking" => {
            let data = b.get("data")?.as_str()?;
            Some(json!({"type": "redacted_thinking", "data": data}))
        }
        _ => None,
    }
}

/// An assistant's tool call as a `tool_use` block.
fn tool_use(call: &Value, at: &str) -> Result<Value, Untranslatable> {
    let id = match call.get("id").and_then(Value::as_str) {
        Some(id) => tool_id(id, &format!("{at}.id"))?,
        None => return Err(Untranslatable::new(format!("{at}.id"), "is missing")),
    };
    if call
        .get("type")
        .and_then(Value::as_str)
        .is_some_and(|t| t != "function")
    {
        return Err(Untranslatable::new(
            format!("{at}.type"),
            "only `function` calls translate",
        ));
    }
    let Some(name) = call.pointer("/function/name").and_then(Value::as_str) else {
        return Err(Untranslatable::new(
            format!("{at}.function.name"),
            "is not a string",
        ));
    };
    let field = format!("{at}.function.arguments");
    let input = match call.pointer("/function/arguments") {
        None | Some(Value::Null) => Value::Object(Map::new()),
        Some(Value::String(s)) if s.trim().is_empty() => Value::Object(Map::new()),
        Some(Value::String(s)) => match serde_json::from_str::<Value>(s) {
            Ok(v @ Value::Object(_)) => v,
            _ => return Err(Untranslatable::new(field, "is not a JSON object")),
        },
        Some(_) => return Err(Untranslatable::new(field, "is not a string")),
    };
    Ok(json!({"type": "tool_use", "id": id, "name": name, "input": input}))
}

/// A tool call id as Anthropic accepts it (`[A-Za-z0-9_-]+`): other
/// characters become `_`, the same way in the call and in its result, so
/// they still match.
pub(super) fn tool_id(id: &str, at: &str) -> Result<String, Untranslatable> {
    if id.is_empty() {
        return Err(Untranslatable::new(at, "is empty"));
    }
    Ok(id
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '_' || c == '-' {
                c
            } else {
                '_'
            }
        })
        .collect())
}
