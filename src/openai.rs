//! OpenAI Chat Completions wire types: the few fields conclave reads, with
//! every other field kept verbatim (`#[serde(flatten)]`) so it reaches the
//! upstream, and the client, unchanged.
//!
//! Responses are not modelled as structs that get re-serialised: a whole
//! response body and each stream chunk travel as the upstream's own bytes.
//! This module only *inspects* them (usage, errors, the assistant's text).

use std::borrow::Cow;

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

/// A `POST /v1/chat/completions` body as the client sent it.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct ChatRequest {
    pub model: String,
    pub messages: Vec<Message>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stream_options: Option<StreamOptions>,
    /// Every field conclave does not read (sampling, tools, response_format,
    /// vendor extensions): passed through untouched, in the client's order.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ChatRequest {
    pub fn is_stream(&self) -> bool {
        self.stream == Some(true)
    }

    /// Whether the client asked for the usage chunk at the end of a stream.
    pub fn wants_stream_usage(&self) -> bool {
        self.stream_options
            .as_ref()
            .and_then(|o| o.include_usage)
            .unwrap_or(false)
    }

    /// Bytes of text in the messages (content and tool-call arguments),
    /// for estimating input tokens when an upstream reports none.
    pub fn text_bytes(&self) -> usize {
        self.messages
            .iter()
            .map(|m| {
                let calls: usize = m
                    .rest
                    .get("tool_calls")
                    .and_then(Value::as_array)
                    .into_iter()
                    .flatten()
                    .filter_map(|c| c.pointer("/function/arguments")?.as_str())
                    .map(str::len)
                    .sum();
                let text = match m.content() {
                    Some(Value::String(s)) => s.len(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .map(str::len)
                        .sum(),
                    _ => 0,
                };
                text + calls
            })
            .sum()
    }

    /// The body sent to an upstream: the same request under the upstream's
    /// model name, always asking for usage when streaming so accounting
    /// works even when the client did not ask for it.
    pub fn to_upstream_body(&self, upstream_model: &str) -> Result<Bytes, serde_json::Error> {
        let mut out = self.clone();
        out.model = upstream_model.to_owned();
        if out.is_stream() {
            let opts = out
                .stream_options
                .get_or_insert_with(StreamOptions::default);
            opts.include_usage = Some(true);
        }
        serde_json::to_vec(&out).map(Bytes::from)
    }
}

/// One chat message; only `role` is read, the rest (content, name,
/// tool_calls, tool_call_id, …) is kept exactly as sent, `null`s included.
#[derive(Debug, Clone, Deserialize, Serialize)]
pub struct Message {
    pub role: String,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        let mut rest = Map::new();
        rest.insert("content".into(), Value::String(content.into()));
        Message {
            role: role.to_owned(),
            rest,
        }
    }

    pub fn content(&self) -> Option<&Value> {
        self.rest.get("content")
    }

    /// The message's text: a string content, or its text parts joined.
    pub fn text(&self) -> String {
        content_text(self.content())
    }

    /// Appends a paragraph of text to this message's content, keeping its
    /// shape (string content stays a string, parts get one more text part).
    pub fn append_text(&mut self, note: &str) {
        match self.rest.get_mut("content") {
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    s.push_str("\n\n");
                }
                s.push_str(note);
            }
            Some(Value::Array(parts)) => {
                parts.push(serde_json::json!({"type": "text", "text": note}));
            }
            _ => {
                self.rest
                    .insert("content".into(), Value::String(note.to_owned()));
            }
        }
    }
}

/// The text inside a `content` value: a string, or the `text` of its parts.
pub fn content_text(content: Option<&Value>) -> String {
    match content {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct StreamOptions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub include_usage: Option<bool>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// Token usage as upstreams report it; missing counts read as zero.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: u64,
    #[serde(default)]
    pub completion_tokens: u64,
    /// conclave estimated it: the upstream reported none.
    #[serde(skip)]
    pub estimated: bool,
}

/// The one rule for estimating tokens when an upstream reports no usage:
/// UTF-8 bytes of text divided by 4, rounded up.
pub fn estimate_tokens(bytes: usize) -> u64 {
    (bytes as u64).div_ceil(4)
}

impl Usage {
    /// An estimate from the request's text and the answer's text.
    pub fn estimate(input_bytes: usize, output_bytes: usize) -> Self {
        Usage {
            prompt_tokens: estimate_tokens(input_bytes),
            completion_tokens: estimate_tokens(output_bytes),
            estimated: true,
        }
    }
}

/// What a stream chunk's `usage` field held.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UsageField {
    Absent,
    Null,
    Present(Usage),
}

/// At most this many `choices` in one answer or chunk (OpenAI caps `n` at 128).
pub const MAX_CHOICES: usize = 128;
/// At most this many tool calls in one assembled answer (`tool_calls[].index`).
pub const MAX_TOOL_CALLS: usize = 256;

/// Why an upstream payload is not an answer.
#[derive(Debug, thiserror::Error)]
pub enum NotAnAnswer {
    #[error("it is not valid UTF-8")]
    Utf8,
    #[error("it is not a JSON object")]
    NotObject,
    #[error("it is not valid JSON ({0})")]
    Json(#[from] serde_json::Error),
    #[error("it has no `choices`")]
    NoChoices,
    #[error("it has {0} choices (at most {MAX_CHOICES} are accepted)")]
    TooManyChoices(usize),
    #[error("a tool call index of {0} is out of range (at most {MAX_TOOL_CALLS} tool calls)")]
    ToolCallIndex(u64),
}

/// A payload must be a UTF-8 JSON object before it is read further
/// (serde would read `[]` as a struct with every field defaulted).
fn object_bytes(data: &[u8]) -> Result<(), NotAnAnswer> {
    std::str::from_utf8(data).map_err(|_| NotAnAnswer::Utf8)?;
    match data.iter().find(|b| !b.is_ascii_whitespace()) {
        Some(b'{') => Ok(()),
        _ => Err(NotAnAnswer::NotObject),
    }
}

/// The result of inspecting one SSE `data:` payload.
#[derive(Debug)]
pub struct ChunkInfo {
    pub usage: UsageField,
    /// Number of entries in `choices` (0 for a usage-only chunk).
    pub choices: usize,
    /// The first choice carries a `finish_reason`.
    pub finished: bool,
    /// Bytes of answer text in the first choice's delta (content and
    /// tool-call arguments), for estimating usage.
    pub text_bytes: usize,
    /// The upstream reported an error in the stream (`{"error": …}`).
    pub error: Option<String>,
}

#[derive(Deserialize)]
struct ChunkProbe<'a> {
    /// Outer `None`: no `usage` key; `Some(None)`: `"usage": null`.
    #[serde(default, deserialize_with = "present")]
    usage: Option<Option<Usage>>,
    #[serde(default, borrow)]
    choices: Option<Vec<ChoiceProbe<'a>>>,
    #[serde(default)]
    error: Option<Value>,
}

#[derive(Deserialize)]
struct ChoiceProbe<'a> {
    #[serde(default)]
    finish_reason: Option<serde::de::IgnoredAny>,
    #[serde(default, borrow)]
    delta: Option<DeltaProbe<'a>>,
}

#[derive(Deserialize)]
struct DeltaProbe<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    tool_calls: Option<Vec<ToolDeltaProbe<'a>>>,
}

#[derive(Deserialize)]
struct ToolDeltaProbe<'a> {
    #[serde(default, borrow)]
    function: Option<FunctionProbe<'a>>,
}

#[derive(Deserialize)]
struct FunctionProbe<'a> {
    #[serde(default, borrow)]
    arguments: Option<Cow<'a, str>>,
}

impl DeltaProbe<'_> {
    fn text_bytes(&self) -> usize {
        let args: usize = self
            .tool_calls
            .iter()
            .flatten()
            .filter_map(|t| t.function.as_ref()?.arguments.as_ref())
            .map(|a| a.len())
            .sum();
        self.content.as_ref().map_or(0, |c| c.len()) + args
    }
}

fn present<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Option<Usage>>, D::Error> {
    Option::<Usage>::deserialize(d).map(Some)
}

/// Inspects one stream chunk without keeping a parsed copy of it. A chunk
/// is a JSON object with a `choices` array (possibly empty, for the usage
/// chunk), a usage-only object, or an error object; anything else is not
/// part of an answer.
pub fn inspect_chunk(data: &[u8]) -> Result<ChunkInfo, NotAnAnswer> {
    object_bytes(data)?;
    let probe: ChunkProbe = serde_json::from_slice(data)?;
    let usage = match probe.usage {
        None => UsageField::Absent,
        Some(None) => UsageField::Null,
        Some(Some(u)) => UsageField::Present(u),
    };
    if let Some(e) = probe.error.filter(|e| !e.is_null()) {
        return Ok(ChunkInfo {
            usage,
            choices: 0,
            finished: false,
            text_bytes: 0,
            error: Some(error_message(&e)),
        });
    }
    let choices = match probe.choices {
        Some(c) => c,
        None if matches!(usage, UsageField::Present(_)) => Vec::new(),
        None => return Err(NotAnAnswer::NoChoices),
    };
    if choices.len() > MAX_CHOICES {
        return Err(NotAnAnswer::TooManyChoices(choices.len()));
    }
    Ok(ChunkInfo {
        usage,
        choices: choices.len(),
        finished: choices.first().is_some_and(|c| c.finish_reason.is_some()),
        text_bytes: choices
            .first()
            .and_then(|c| c.delta.as_ref())
            .map_or(0, DeltaProbe::text_bytes),
        error: None,
    })
}

/// The human message inside an OpenAI-style error value (object or string).
pub fn error_message(err: &Value) -> String {
    match err {
        Value::String(s) => s.clone(),
        Value::Object(o) => o
            .get("message")
            .and_then(Value::as_str)
            .map(str::to_owned)
            .unwrap_or_else(|| err.to_string()),
        other => other.to_string(),
    }
}

/// Removes `usage` from a chunk that also carries choices (for a client that
/// did not ask for usage). Only such chunks are re-serialised.
pub fn strip_usage(data: &[u8]) -> Result<Bytes, serde_json::Error> {
    let mut obj: Map<String, Value> = serde_json::from_slice(data)?;
    obj.remove("usage");
    serde_json::to_vec(&obj).map(Bytes::from)
}

/// Removes `"usage": null` from a chunk (upstreams add it to every chunk
/// once usage is requested). Compact JSON is edited in place: in it,
/// `,"usage":null` can only be a key, since a quote inside a string is
/// escaped. Other layouts are re-serialised.
pub fn strip_null_usage(data: &Bytes) -> Bytes {
    const KEY: &[u8] = b"\"usage\":null";
    if let Some(at) = memchr::memmem::find(data, KEY) {
        let end = at + KEY.len();
        let cut = |from: usize, to: usize| {
            let mut out = Vec::with_capacity(data.len());
            out.extend_from_slice(&data[..from]);
            out.extend_from_slice(&data[to..]);
            Bytes::from(out)
        };
        match (at.checked_sub(1).and_then(|i| data.get(i)), data.get(end)) {
            (Some(b','), _) => return cut(at - 1, end),
            (Some(b'{'), Some(b',')) => return cut(at, end + 1),
            _ => {}
        }
    }
    strip_usage(data).unwrap_or_else(|_| data.clone())
}

#[derive(Deserialize)]
struct CompletionProbe {
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    choices: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    error: Option<Value>,
}

/// What a whole (non-streamed) 200 response turned out to be.
#[derive(Debug)]
pub enum WholeBody {
    /// A completion with at least one choice, and its usage if reported.
    Answer(Option<Usage>),
    /// An `{"error": …}` object sent with a success status.
    Error(String),
}

/// Validates a whole response body and reads its usage.
pub fn inspect_completion(body: &[u8]) -> Result<WholeBody, NotAnAnswer> {
    object_bytes(body)?;
    let probe: CompletionProbe = serde_json::from_slice(body)?;
    if let Some(e) = probe.error.filter(|e| !e.is_null()) {
        return Ok(WholeBody::Error(error_message(&e)));
    }
    match probe.choices {
        None => Err(NotAnAnswer::NoChoices),
        Some(c) if c.is_empty() => Err(NotAnAnswer::NoChoices),
        Some(c) if c.len() > MAX_CHOICES => Err(NotAnAnswer::TooManyChoices(c.len())),
        Some(_) => Ok(WholeBody::Answer(probe.usage)),
    }
}

/// One tool call the assistant made, flattened for verifiers and summaries.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ToolCall {
    pub name: String,
    pub arguments: String,
}

/// What the assistant said: its text and any tool calls.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct AssistantOutput {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub finish_reason: Option<String>,
}

impl AssistantOutput {
    /// Reads `choices[0].message` of a whole response body.
    pub fn from_completion(body: &[u8]) -> Result<Self, NotAnAnswer> {
        let v: Value = serde_json::from_slice(body)?;
        let choice = v.get("choices").and_then(|c| c.get(0));
        let msg = choice.and_then(|c| c.get("message"));
        let mut out = AssistantOutput {
            text: content_text(msg.and_then(|m| m.get("content"))),
            finish_reason: choice
                .and_then(|c| c.get("finish_reason"))
                .and_then(Value::as_str)
                .map(str::to_owned),
            ..Default::default()
        };
        if let Some(calls) = msg
            .and_then(|m| m.get("tool_calls"))
            .and_then(Value::as_array)
        {
            for call in calls {
                let f = call.get("function");
                if out.tool_calls.len() >= MAX_TOOL_CALLS {
                    return Err(NotAnAnswer::ToolCallIndex(out.tool_calls.len() as u64));
                }
                out.tool_calls.push(ToolCall {
                    name: str_at(f, "name"),
                    arguments: str_at(f, "arguments"),
                });
            }
        }
        Ok(out)
    }

    /// Adds one stream chunk's `choices[0].delta` to the text so far.
    /// A tool call index past [`MAX_TOOL_CALLS`] is refused, so an
    /// upstream cannot make the answer reserve memory it never sends.
    pub fn absorb_chunk(&mut self, data: &[u8]) -> Result<(), NotAnAnswer> {
        let Ok(v) = serde_json::from_slice::<Value>(data) else {
            return Ok(());
        };
        let Some(choice) = v.get("choices").and_then(|c| c.get(0)) else {
            return Ok(());
        };
        if let Some(reason) = choice.get("finish_reason").and_then(Value::as_str) {
            self.finish_reason = Some(reason.to_owned());
        }
        let Some(delta) = choice.get("delta") else {
            return Ok(());
        };
        if let Some(text) = delta.get("content").and_then(Value::as_str) {
            self.text.push_str(text);
        }
        if let Some(calls) = delta.get("tool_calls").and_then(Value::as_array) {
            for call in calls {
                let idx = match call.get("index").and_then(Value::as_u64) {
                    Some(i) if i >= MAX_TOOL_CALLS as u64 => {
                        return Err(NotAnAnswer::ToolCallIndex(i));
                    }
                    Some(i) => i as usize,
                    None => self.tool_calls.len().saturating_sub(1),
                };
                while self.tool_calls.len() <= idx {
                    self.tool_calls.push(ToolCall::default());
                }
                let f = call.get("function");
                if let Some(slot) = self.tool_calls.get_mut(idx) {
                    slot.name.push_str(&str_at(f, "name"));
                    slot.arguments.push_str(&str_at(f, "arguments"));
                }
            }
        }
        Ok(())
    }

    /// A one-line rendering: the text, then `name(arguments)` per tool call.
    pub fn render(&self) -> String {
        let mut out = self.text.clone();
        for call in &self.tool_calls {
            if !out.is_empty() {
                out.push('\n');
            }
            out.push_str(&format!("tool call: {}({})", call.name, call.arguments));
        }
        out
    }
}

fn str_at(v: Option<&Value>, key: &str) -> String {
    v.and_then(|v| v.get(key))
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unknown_fields_round_trip_in_order() {
        let raw = r#"{"model":"m","zeta":1,"messages":[{"role":"user","content":null,"x_weird":[1,2]}],"alpha":{"b":true},"stream":true}"#;
        let req: ChatRequest = serde_json::from_str(raw).unwrap_or_else(|e| unreachable!("{e}"));
        let v: Value = serde_json::to_value(&req).unwrap_or_default();
        assert_eq!(v["zeta"], 1);
        assert_eq!(v["alpha"]["b"], true);
        assert_eq!(v["messages"][0]["content"], Value::Null);
        assert_eq!(v["messages"][0]["x_weird"][1], 2);
        let body = req.to_upstream_body("real").unwrap_or_default();
        let up: Value = serde_json::from_slice(&body).unwrap_or_default();
        assert_eq!(up["model"], "real");
        assert_eq!(up["stream_options"]["include_usage"], true);
    }

    /// Found by `tests/fuzz.rs`: without serde_json's `float_roundtrip`,
    /// some floats a client sends reached the upstream changed in their
    /// last digit.
    #[test]
    fn floats_reach_the_upstream_exactly() {
        let raw = r#"{"model":"m","messages":[{"role":"user","content":[2.0860424783616484e-234]}],"x":0.1}"#;
        let req: ChatRequest = serde_json::from_str(raw).unwrap_or_else(|e| unreachable!("{e}"));
        let body = req.to_upstream_body("m").unwrap_or_default();
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("2.0860424783616484e-234"), "{text}");
        assert!(text.contains("\"x\":0.1"), "{text}");
    }

    #[test]
    fn chunk_inspection_reads_usage_and_errors() {
        let c =
            inspect_chunk(br#"{"choices":[],"usage":{"prompt_tokens":3,"completion_tokens":4}}"#)
                .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(
            c.usage,
            UsageField::Present(Usage {
                prompt_tokens: 3,
                completion_tokens: 4,
                estimated: false,
            })
        );
        assert_eq!(c.choices, 0);
        let c = inspect_chunk(br#"{"choices":[{}],"usage":null}"#)
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(c.usage, UsageField::Null);
        let c = inspect_chunk(br#"{"error":{"message":"boom"}}"#)
            .unwrap_or_else(|e| unreachable!("{e}"));
        assert_eq!(c.error.as_deref(), Some("boom"));
        assert!(inspect_chunk(b"not json").is_err());
    }

    #[test]
    fn null_usage_is_removed_exactly() {
        let cases = [
            (
                r#"{"id":"x","choices":[],"usage":null}"#,
                r#"{"id":"x","choices":[]}"#,
            ),
            (r#"{"usage":null,"id":"x"}"#, r#"{"id":"x"}"#),
            (
                r#"{"c":"a\",\"usage\":null","usage":null}"#,
                r#"{"c":"a\",\"usage\":null"}"#,
            ),
            (r#"{"id": "x", "usage": null}"#, r#"{"id":"x"}"#),
        ];
        for (input, want) in cases {
            let got = strip_null_usage(&Bytes::from(input));
            assert_eq!(std::str::from_utf8(&got).unwrap(), want, "{input}");
        }
    }

    #[test]
    fn assistant_output_from_chunks() {
        let mut out = AssistantOutput::default();
        out.absorb_chunk(br#"{"choices":[{"delta":{"content":"Hel"}}]}"#)
            .unwrap();
        out.absorb_chunk(br#"{"choices":[{"delta":{"content":"lo"}}]}"#)
            .unwrap();
        out.absorb_chunk(br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"name":"f","arguments":"{\"a\""}}]}}]}"#).unwrap();
        out.absorb_chunk(br#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":":1}"}}]},"finish_reason":"tool_calls"}]}"#).unwrap();
        assert_eq!(out.text, "Hello");
        assert_eq!(out.tool_calls[0].name, "f");
        assert_eq!(out.tool_calls[0].arguments, "{\"a\":1}");
        assert_eq!(out.finish_reason.as_deref(), Some("tool_calls"));
        let huge = br#"{"choices":[{"delta":{"tool_calls":[{"index":4000000000,"function":{"name":"f"}}]}}]}"#;
        assert!(matches!(
            out.absorb_chunk(huge),
            Err(NotAnAnswer::ToolCallIndex(4000000000))
        ));
        assert_eq!(out.tool_calls.len(), 1);
    }

    #[test]
    fn a_success_status_is_not_an_answer_by_itself() {
        for body in [
            &b"{}"[..],
            b"[]",
            b"{\"choices\":[]}",
            b"\"x\"",
            b"{\"choices\":[{\"message\":{\"content\":\"\xff\"}}]}",
        ] {
            assert!(
                inspect_completion(body).is_err(),
                "{}",
                String::from_utf8_lossy(body)
            );
        }
        assert!(matches!(
            inspect_completion(br#"{"error":{"message":"nope"}}"#),
            Ok(WholeBody::Error(m)) if m == "nope"
        ));
        assert!(matches!(
            inspect_completion(br#"{"choices":[{"message":{}}]}"#),
            Ok(WholeBody::Answer(None))
        ));
        for chunk in [&b"{}"[..], b"[]", b"[{\"choices\":[]}]", b"{\"id\":\"x\"}"] {
            assert!(
                inspect_chunk(chunk).is_err(),
                "{}",
                String::from_utf8_lossy(chunk)
            );
        }
        assert!(inspect_chunk(br#"{"choices":[],"usage":{"prompt_tokens":1}}"#).is_ok());
        assert!(inspect_chunk(br#"{"usage":{"prompt_tokens":1}}"#).is_ok());
    }
}
