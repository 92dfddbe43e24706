//! The request side: a chat request as the client sent it, its messages,
//! and usage as upstreams report it.

use bytes::Bytes;
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
/// Read by `wire::flat` (the unread fields kept without serde's
/// `flatten` buffering).
#[derive(Debug, Clone, Serialize)]
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
                m.content().map_or(0, text_len) + calls
            })
            .sum()
    }

    /// The text [`Self::text_bytes`] measures, written out: each message's
    /// text and tool-call arguments, one a line (what a server that
    /// tokenizes plain text is asked to count).
    pub fn prompt_text(&self) -> String {
        let mut out = String::new();
        for m in &self.messages {
            let calls = m.rest.get("tool_calls").and_then(Value::as_array);
            let args = calls
                .into_iter()
                .flatten()
                .filter_map(|c| c.pointer("/function/arguments")?.as_str());
            for t in std::iter::once(m.text().as_str()).chain(args) {
                if !out.is_empty() {
                    out.push('\n');
                }
                out.push_str(t);
            }
        }
        out
    }

    /// The output cap the client set (`max_completion_tokens`, else
    /// `max_tokens`), clamped (see [`super::billing`]).
    pub fn max_output_tokens(&self) -> Option<u64> {
        super::billing::output_cap(&self.extra)
    }

    /// The body sent to an upstream: the same request under the upstream's
    /// model name, always asking for usage when streaming so accounting
    /// works even when the client did not ask for it.
    /// It is serialised from a borrowed view, so a request shared by many
    /// calls is never copied to be sent.
    pub fn to_upstream_body(&self, upstream_model: &str) -> Result<Bytes, serde_json::Error> {
        let stream_options = match &self.stream_options {
            _ if !self.is_stream() => self.stream_options.as_ref().map(StreamOptionsView::from),
            Some(o) => Some(StreamOptionsView {
                include_usage: Some(true),
                extra: Some(&o.extra),
            }),
            None => Some(StreamOptionsView {
                include_usage: Some(true),
                extra: None,
            }),
        };
        let view = UpstreamView {
            model: upstream_model,
            messages: &self.messages,
            stream: self.stream,
            stream_options,
            extra: &self.extra,
        };
        serde_json::to_vec(&view).map(Bytes::from)
    }
}

/// A request as sent upstream, borrowing everything from the client's.
#[derive(Serialize)]
struct UpstreamView<'a> {
    model: &'a str,
    messages: &'a [Message],
    #[serde(skip_serializing_if = "Option::is_none")]
    stream: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    stream_options: Option<StreamOptionsView<'a>>,
    #[serde(flatten)]
    extra: &'a Map<String, Value>,
}

#[derive(Serialize)]
struct StreamOptionsView<'a> {
    #[serde(skip_serializing_if = "Option::is_none")]
    include_usage: Option<bool>,
    #[serde(flatten, skip_serializing_if = "Option::is_none")]
    extra: Option<&'a Map<String, Value>>,
}

impl<'a> From<&'a StreamOptions> for StreamOptionsView<'a> {
    fn from(o: &'a StreamOptions) -> Self {
        StreamOptionsView {
            include_usage: o.include_usage,
            extra: Some(&o.extra),
        }
    }
}

/// A conversation as plain text, for a model that reviews it.
#[derive(Debug, Default)]
pub struct Transcript {
    /// The system (and developer) messages' text.
    pub system: Vec<String>,
    /// Every other message as `[role] text`, one per line, tool calls
    /// included as `tool call: name(arguments)`.
    pub turns: String,
}

impl Transcript {
    /// The system prompt, fenced, for a reviewing model's message (empty
    /// when the conversation had none).
    pub fn system_block(&self) -> String {
        if self.system.is_empty() {
            return String::new();
        }
        format!(
            "Original system prompt:\n<<<\n{}\n>>>\n\n",
            self.system.join("\n")
        )
    }
}

impl ChatRequest {
    /// A request conclave makes on its own behalf: an instruction, one user
    /// message, and `extra` fields (`max_tokens`, tools, …), not streamed.
    pub fn internal(
        model: &str,
        instruction: &str,
        user: String,
        extra: Map<String, Value>,
    ) -> Self {
        ChatRequest {
            model: model.to_owned(),
            messages: vec![
                Message::new("system", instruction),
                Message::new("user", user),
            ],
            stream: None,
            stream_options: None,
            extra,
        }
    }

    /// The conversation as plain text (see [`Transcript`]).
    pub fn transcript(&self) -> Transcript {
        let mut out = Transcript::default();
        for m in &self.messages {
            let mut text = m.text();
            for c in m
                .rest
                .get("tool_calls")
                .and_then(Value::as_array)
                .into_iter()
                .flatten()
            {
                let f = c.get("function");
                let name = f.and_then(|f| f.get("name")).and_then(Value::as_str);
                let args = f.and_then(|f| f.get("arguments")).and_then(Value::as_str);
                text.push_str(&format!(
                    "\ntool call: {}({})",
                    name.unwrap_or("?"),
                    args.unwrap_or_default()
                ));
            }
            if m.role == "system" || m.role == "developer" {
                out.system.push(text);
            } else {
                out.turns
                    .push_str(&format!("[{}] {}\n", m.role, text.trim()));
            }
        }
        out
    }
}

/// One chat message; only `role` is read, `content` and the rest (name,
/// tool_calls, tool_call_id, …) are kept exactly as sent, `null`s included
/// (read by `wire::flat`). Written back as `role`, `content`, then the
/// rest in the client's order.
#[derive(Debug, Clone, Serialize)]
pub struct Message {
    pub role: String,
    /// `None`: the message has no `content`; `Some(Value::Null)`: it is
    /// `null`. Apart from `rest` since nearly every message has one: a
    /// message of a role and its content needs no map.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<Value>,
    #[serde(flatten)]
    pub rest: Map<String, Value>,
}

impl Message {
    pub fn new(role: &str, content: impl Into<String>) -> Self {
        Message::with_content(role, Value::String(content.into()))
    }

    /// A message of `role` with this `content` and nothing else.
    pub fn with_content(role: &str, content: Value) -> Self {
        Message {
            role: role.to_owned(),
            content: Some(content),
            rest: Map::new(),
        }
    }

    /// A message from its JSON (`role` and the rest as they are); a value
    /// that is not an object becomes an empty assistant message.
    pub fn from_value(v: Value) -> Self {
        let mut rest = match v {
            Value::Object(o) => o,
            _ => Map::new(),
        };
        let role = match rest.remove("role") {
            Some(Value::String(r)) => r,
            _ => "assistant".to_owned(),
        };
        let content = rest.shift_remove("content");
        Message {
            role,
            content,
            rest,
        }
    }

    pub fn content(&self) -> Option<&Value> {
        self.content.as_ref()
    }

    /// The message's text: a string content, or its text parts joined.
    pub fn text(&self) -> String {
        content_text(self.content())
    }

    /// Appends a paragraph of text to this message's content, keeping its
    /// shape (string content stays a string, parts get one more text part).
    pub fn append_text(&mut self, note: &str) {
        match &mut self.content {
            Some(Value::String(s)) => {
                if !s.is_empty() {
                    s.push_str("\n\n");
                }
                s.push_str(note);
            }
            Some(Value::Array(parts)) => {
                parts.push(serde_json::json!({"type": "text", "text": note}));
            }
            _ => self.content = Some(Value::String(note.to_owned())),
        }
    }
}

/// How a chain tells its next tier why the previous answer was rejected:
/// this, then the verifier's feedback, one line a rejection, appended to
/// the last user message (`strategy::chain`).
pub const FEEDBACK_NOTE: &str = "A previous attempt was rejected: ";

/// `text` without a chain's rejection notes: everything from the first
/// line that starts with [`FEEDBACK_NOTE`] on (the notes are always
/// appended last), with the whitespace before it. What the simulated
/// models echo, so a demo answer never repeats feedback to the client.
pub fn without_feedback(text: &str) -> &str {
    let at = if text.starts_with(FEEDBACK_NOTE) {
        Some(0)
    } else {
        text.match_indices(&format!("\n{FEEDBACK_NOTE}"))
            .next()
            .map(|(i, _)| i)
    };
    match at {
        Some(i) => text[..i].trim_end(),
        None => text,
    }
}

/// Bytes of text in a `content`, `prompt` or `input` value: a string, or
/// the strings and `text` parts of a list (token ids count nothing). The
/// one measure behind usage estimates.
pub fn text_len(v: &Value) -> usize {
    match v {
        Value::String(s) => s.len(),
        Value::Array(items) => items
            .iter()
            .map(|i| match i {
                Value::String(s) => s.len(),
                other => other
                    .get("text")
                    .and_then(Value::as_str)
                    .map_or(0, str::len),
            })
            .sum(),
        _ => 0,
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

#[cfg(test)]
mod tests;
