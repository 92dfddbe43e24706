//! A Responses request body, read and checked field by field, and the
//! chat request it becomes. Every field the API defines is honoured,
//! accepted and left out of the chat request (`store`, `include`, cache
//! keys: the gateway's business, not the model's), or refused with a 400
//! that names it; a field the API does not define is refused too, as
//! OpenAI does. Built-in tool types a chat model cannot run are dropped
//! and listed in [`Translated::dropped_tools`].

use serde_json::{Map, Value, json};

use super::items::{self, Piece, Source, clip};
use super::{Echo, tools};
use crate::api::error::ApiError;
use crate::wire::billing::BadCap;
use crate::wire::{ChatRequest, Message, StreamOptions};

/// Fields the API defines that conclave accepts and does not send to a
/// chat model.
const ACCEPTED: &[&str] = &[
    "include",
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "truncation",
    "stream_options",
    "client_metadata",
    "max_tool_calls",
];

/// The accepted fields a `response` object repeats.
const ECHOED: &[&str] = &[
    "prompt_cache_key",
    "prompt_cache_retention",
    "safety_identifier",
    "truncation",
    "max_tool_calls",
];

/// Fields the API defines that conclave refuses when set.
const UNSUPPORTED: &[&str] = &["background", "conversation", "prompt"];

/// Chat fields passed as the client set them.
const PASSED: &[&str] = &["temperature", "top_p", "user", "service_tier"];

/// The most `metadata` keys, and their keys' and values' lengths (OpenAI's).
const METADATA_KEYS: usize = 16;
const METADATA_KEY_LEN: usize = 64;
const METADATA_VALUE_LEN: usize = 512;

/// A Responses request, checked.
#[derive(Debug, Clone)]
pub struct ResponsesRequest {
    model: String,
    stream: bool,
    store: bool,
    previous_response_id: Option<String>,
    instructions: Option<String>,
    /// The input as items, each with an id.
    items: Vec<Value>,
    /// The input in chat terms.
    pieces: Vec<Piece>,
    /// The chat request's fields besides model, messages and stream.
    chat: Map<String, Value>,
    dropped_tools: Vec<String>,
    echo: Echo,
}

/// A Responses request as a chat request.
#[derive(Debug, Clone)]
pub struct Translated {
    pub chat: ChatRequest,
    /// The types of the tools left out (`web_search`, `custom`, …), each once.
    pub dropped_tools: Vec<String>,
    /// What the response repeats of the request.
    pub echo: Echo,
}

/// Reads a Responses body.
#[cfg(test)]
pub fn parse(body: &[u8]) -> Result<ResponsesRequest, ApiError> {
    let value: Value = serde_json::from_slice(body).map_err(|e| ApiError::invalid_json(&e))?;
    let Value::Object(fields) = value else {
        return Err(ApiError::BadRequest {
            message: "The request body must be a JSON object.".into(),
            param: None,
            code: Some("invalid_request_body"),
        });
    };
    from_object(&fields)
}

/// Reads a Responses body already parsed as a JSON object.
pub fn from_object(fields: &Map<String, Value>) -> Result<ResponsesRequest, ApiError> {
    let mut req = ResponsesRequest {
        model: String::new(),
        stream: false,
        store: true,
        previous_response_id: None,
        instructions: None,
        items: Vec::new(),
        pieces: Vec::new(),
        chat: Map::new(),
        dropped_tools: Vec::new(),
        echo: Echo::default(),
    };
    let mut input = None;
    for (key, v) in fields {
        req.field(key, v, &mut input)?;
    }
    if req.model.is_empty() {
        return Err(ApiError::field(
            "model",
            "missing_required_parameter",
            "`model` is required: the name of a route or model on this gateway.".into(),
        ));
    }
    let Some(input) = input else {
        return Err(ApiError::field(
            "input",
            "missing_required_parameter",
            "`input` is required: a string, or a list of input items.".into(),
        ));
    };
    req.items = items::normalize(input)?;
    req.pieces = items::pieces(&req.items, Source::Input)?;
    let t = tools::read(fields.get("tools"), fields.get("tool_choice"))?;
    req.dropped_tools = t.dropped;
    let echo = &mut req.echo.fields;
    echo.insert("tools".into(), Value::Array(t.kept));
    if let Some((_, echoed)) = &t.choice {
        echo.insert("tool_choice".into(), echoed.clone());
    }
    if t.chat.is_empty() {
        req.chat.remove("parallel_tool_calls");
        return Ok(req);
    }
    req.chat.insert("tools".into(), Value::Array(t.chat));
    if let Some((chat, _)) = t.choice {
        req.chat.insert("tool_choice".into(), chat);
    }
    Ok(req)
}

impl ResponsesRequest {
    /// Reads one top-level field (`tools` and `tool_choice` are read
    /// together afterwards).
    fn field<'a>(
        &mut self,
        key: &str,
        v: &'a Value,
        input: &mut Option<&'a Value>,
    ) -> Result<(), ApiError> {
        let echo = &mut self.echo.fields;
        match key {
            "model" => match v {
                Value::String(m) if !m.is_empty() => self.model = m.clone(),
                _ => return Err(ApiError::wrong_type("model", "a non-empty string")),
            },
            "input" => *input = Some(v),
            "tools" | "tool_choice" => {}
            "instructions" => match v {
                Value::String(s) => {
                    self.instructions = Some(s.clone());
                    echo.insert(key.into(), v.clone());
                }
                Value::Null => {}
                _ => return Err(ApiError::wrong_type(key, "a string")),
            },
            "stream" => self.stream = flag(key, v, false)?,
            "store" => {
                self.store = flag(key, v, true)?;
                echo.insert(key.into(), Value::from(self.store));
            }
            "parallel_tool_calls" => {
                let on = flag(key, v, true)?;
                echo.insert(key.into(), Value::from(on));
                self.chat.insert(key.into(), Value::from(on));
            }
            "previous_response_id" => match v {
                Value::String(s) if !s.is_empty() => {
                    self.previous_response_id = Some(s.clone());
                    echo.insert(key.into(), v.clone());
                }
                Value::Null => {}
                _ => return Err(ApiError::wrong_type(key, "a response id (`resp_…`)")),
            },
            "max_output_tokens" => match v.as_u64() {
                Some(n) if n > 0 => {
                    echo.insert(key.into(), v.clone());
                    self.chat.insert("max_tokens".into(), v.clone());
                }
                _ if v.is_null() => {}
                _ => {
                    let mut got = v.to_string();
                    got.truncate(40);
                    return Err(ApiError::bad_cap(BadCap {
                        param: "max_output_tokens",
                        got,
                    }));
                }
            },
            "top_logprobs" => match v.as_u64() {
                Some(n) if n <= 20 => {
                    echo.insert(key.into(), v.clone());
                    self.chat.insert("logprobs".into(), Value::from(true));
                    self.chat.insert(key.into(), v.clone());
                }
                _ if v.is_null() => {}
                _ => {
                    return Err(ApiError::field(
                        key,
                        "invalid_value",
                        "`top_logprobs` must be an integer from 0 to 20.".into(),
                    ));
                }
            },
            "text" => self.text(v)?,
            "reasoning" => match v {
                Value::Object(r) => {
                    echo.insert(key.into(), v.clone());
                    match r.get("effort") {
                        Some(Value::String(e)) => {
                            self.chat
                                .insert("reasoning_effort".into(), Value::from(e.as_str()));
                        }
                        None | Some(Value::Null) => {}
                        Some(_) => {
                            return Err(ApiError::wrong_type("reasoning.effort", "a string"));
                        }
                    }
                }
                Value::Null => {}
                _ => return Err(ApiError::wrong_type(key, "an object")),
            },
            "metadata" => {
                metadata(v)?;
                if !v.is_null() {
                    echo.insert(key.into(), v.clone());
                }
            }
            k if PASSED.contains(&k) => {
                if !v.is_null() {
                    echo.insert(key.into(), v.clone());
                    self.chat.insert(key.into(), v.clone());
                }
            }
            k if ACCEPTED.contains(&k) => {
                if !v.is_null() && ECHOED.contains(&k) {
                    echo.insert(key.into(), v.clone());
                }
            }
            k if UNSUPPORTED.contains(&k) => {
                if !matches!(v, Value::Null | Value::Bool(false)) {
                    return Err(ApiError::field(
                        k,
                        "unsupported_parameter",
                        format!(
                            "`{k}` is not supported by this gateway's Responses API; leave it out \
                             (use `previous_response_id` to continue a conversation)."
                        ),
                    ));
                }
            }
            other => {
                return Err(ApiError::field(
                    other,
                    "unknown_parameter",
                    format!(
                        "Unknown parameter: `{}`. The Responses API does not define it; remove \
                         it (chat-only fields such as `max_tokens` have Responses names: \
                         `max_output_tokens`).",
                        clip(other)
                    ),
                ));
            }
        }
        Ok(())
    }

    /// `text.format` becomes `response_format`; `text.verbosity` is dropped.
    fn text(&mut self, v: &Value) -> Result<(), ApiError> {
        let text = match v {
            Value::Null => return Ok(()),
            Value::Object(t) => t,
            _ => return Err(ApiError::wrong_type("text", "an object")),
        };
        self.echo.fields.insert("text".into(), v.clone());
        let format = match text.get("format") {
            None | Some(Value::Null) => return Ok(()),
            Some(Value::Object(f)) => f,
            Some(_) => return Err(ApiError::wrong_type("text.format", "an object")),
        };
        match format.get("type").and_then(Value::as_str) {
            Some("text") => {}
            Some("json_object") => {
                self.chat
                    .insert("response_format".into(), json!({"type": "json_object"}));
            }
            Some("json_schema") => {
                let Some(schema) = format.get("schema").filter(|s| s.is_object()) else {
                    return Err(ApiError::field(
                        "text.format.schema",
                        "missing_required_parameter",
                        "A `json_schema` format needs its `schema` (a JSON Schema object).".into(),
                    ));
                };
                let mut spec = Map::new();
                let name = format.get("name").and_then(Value::as_str);
                spec.insert("name".into(), Value::from(name.unwrap_or("response")));
                for key in ["description", "strict"] {
                    if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                        spec.insert(key.into(), v.clone());
                    }
                }
                spec.insert("schema".into(), schema.clone());
                self.chat.insert(
                    "response_format".into(),
                    json!({"type": "json_schema", "json_schema": spec}),
                );
            }
            _ => {
                return Err(ApiError::field(
                    "text.format.type",
                    "invalid_value",
                    "`text.format.type` must be `text`, `json_object` or `json_schema`.".into(),
                ));
            }
        }
        Ok(())
    }

    #[cfg(test)]
    pub fn model(&self) -> &str {
        &self.model
    }

    pub fn is_stream(&self) -> bool {
        self.stream
    }

    /// Whether the client wants the response kept (the API's default).
    pub fn store(&self) -> bool {
        self.store
    }

    pub fn previous_response_id(&self) -> Option<&str> {
        self.previous_response_id.as_deref()
    }

    /// This request's own input as Responses items (a string input is one
    /// user message item); every item has an `id` (`msg_…`, `fc_…`,
    /// `fco_…`, `rs_…`), its own when it came with one.
    pub fn input_items(&self) -> Vec<Value> {
        self.items.clone()
    }

    /// The chat request for conclave's strategies. `history` is the items
    /// of the stored conversation this one continues (earlier inputs and
    /// outputs, in order; empty without `previous_response_id`).
    pub fn to_chat(&self, history: &[Value]) -> Result<Translated, ApiError> {
        let earlier = items::pieces(history, Source::History)?;
        let mut messages = Vec::with_capacity(earlier.len() + self.pieces.len() + 1);
        if let Some(i) = &self.instructions {
            messages.push(Message::new("system", i.as_str()));
        }
        messages.extend(items::merge(earlier.into_iter().chain(self.pieces.clone())));
        if messages.is_empty() {
            return Err(ApiError::field(
                "input",
                "invalid_value",
                "There is nothing to answer: `input` holds no message.".into(),
            ));
        }
        let stream_options = self.stream.then(|| StreamOptions {
            include_usage: Some(true),
            extra: Map::new(),
        });
        Ok(Translated {
            chat: ChatRequest {
                model: self.model.clone(),
                messages,
                stream: self.stream.then_some(true),
                stream_options,
                extra: self.chat.clone(),
            },
            dropped_tools: self.dropped_tools.clone(),
            echo: self.echo.clone(),
        })
    }
}

/// A boolean field (`null` is its default).
fn flag(key: &str, v: &Value, default: bool) -> Result<bool, ApiError> {
    match v {
        Value::Bool(b) => Ok(*b),
        Value::Null => Ok(default),
        _ => Err(ApiError::wrong_type(key, "a boolean")),
    }
}

/// `metadata`: at most 16 string values under short keys.
fn metadata(v: &Value) -> Result<(), ApiError> {
    let m = match v {
        Value::Null => return Ok(()),
        Value::Object(m) => m,
        _ => return Err(ApiError::wrong_type("metadata", "an object of strings")),
    };
    if m.len() > METADATA_KEYS {
        return Err(ApiError::field(
            "metadata",
            "invalid_value",
            format!("`metadata` may hold at most {METADATA_KEYS} keys."),
        ));
    }
    for (k, v) in m {
        let fits = k.chars().count() <= METADATA_KEY_LEN
            && v.as_str()
                .is_some_and(|s| s.chars().count() <= METADATA_VALUE_LEN);
        if !fits {
            return Err(ApiError::field(
                "metadata",
                "invalid_value",
                format!(
                    "`metadata` values must be strings of at most {METADATA_VALUE_LEN} \
                     characters, under keys of at most {METADATA_KEY_LEN}."
                ),
            ));
        }
    }
    Ok(())
}

/// The echoed fields of a request that set none of them.
pub(super) fn default_echo() -> Map<String, Value> {
    let mut m = Map::new();
    m.insert("metadata".into(), json!({}));
    m.insert("parallel_tool_calls".into(), Value::from(true));
    m.insert("reasoning".into(), json!({"effort": null, "summary": null}));
    m.insert("store".into(), Value::from(true));
    m.insert("text".into(), json!({"format": {"type": "text"}}));
    m.insert("tool_choice".into(), Value::from("auto"));
    m.insert("tools".into(), json!([]));
    m.insert("truncation".into(), Value::from("disabled"));
    m
}
