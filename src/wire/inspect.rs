//! Reading upstream payloads without re-serialising them: whether a whole
//! body is an answer at all (bounded), and its usage, choices and errors;
//! what is read of a stream event ([`ChunkInfo`]: for chat and legacy
//! completions by `chunk`, for the other dialects by their own readers);
//! editing usage out of an event for clients that did not ask for it
//! where the event's reading did not say where it sits.

use std::ops::Range;

use bytes::Bytes;
use serde::Deserialize;
use serde_json::{Map, Value};

use super::finish::WholeChoices;
use super::usage::{Usage, UsageField};

/// At most this many `choices` in one answer or chunk (OpenAI caps `n` at 128).
pub const MAX_CHOICES: usize = 128;
/// Largest whole response body accepted from an upstream, and the most a
/// strategy buffers of a streamed answer.
pub const MAX_RESPONSE: usize = 64 * 1024 * 1024;
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
    #[error("it has no `data`")]
    NoData,
    #[error("it has no `output`")]
    NoOutput,
    #[error("it has no `type`")]
    NoType,
    #[error("its `type` is not an event name ([a-z_.], at most {MAX_EVENT_NAME} characters)")]
    BadType,
    #[error("it is not a Messages `message` object")]
    NotAMessage,
    #[error("it has no `content` array")]
    NoContent,
    #[error("it has {0} choices (at most {MAX_CHOICES} are accepted)")]
    TooManyChoices(usize),
    #[error("a tool call index of {0} is out of range (at most {MAX_TOOL_CALLS} tool calls)")]
    ToolCallIndex(u64),
}

/// Longest stream event `type` that is an event name.
pub const MAX_EVENT_NAME: usize = 64;

/// Whether a stream event's `type` is an event name: 1 to
/// [`MAX_EVENT_NAME`] of `a`-`z`, `_` and `.`, as every Responses and
/// Messages event type is. A native relay writes the type after `event: `,
/// so anything else (a line break, a secret spelt in escapes) is refused
/// before it is relayed.
pub fn is_event_name(kind: &str) -> bool {
    (1..=MAX_EVENT_NAME).contains(&kind.len())
        && kind
            .bytes()
            .all(|b| b.is_ascii_lowercase() || matches!(b, b'_' | b'.'))
}

/// A payload must be a UTF-8 JSON object before it is read further
/// (serde would read `[]` as a struct with every field defaulted); its
/// text, checked once.
pub(super) fn object_bytes(data: &[u8]) -> Result<&str, NotAnAnswer> {
    let text = std::str::from_utf8(data).map_err(|_| NotAnAnswer::Utf8)?;
    match text
        .trim_start_matches(|c: char| c.is_ascii_whitespace())
        .as_bytes()
        .first()
    {
        Some(b'{') => Ok(text),
        _ => Err(NotAnAnswer::NotObject),
    }
}

/// The result of inspecting one SSE `data:` payload.
#[derive(Debug)]
pub struct ChunkInfo {
    pub usage: UsageField,
    /// Where the `usage` member sits in the payload, with the comma that
    /// goes with it, when the scanner read the chunk: a relay leaves it
    /// out by copying around it (`scan`'s `Fields::cut`).
    pub usage_at: Option<Range<usize>>,
    /// Number of entries in `choices` (0 for a usage-only chunk).
    pub choices: usize,
    /// The first choice carries a `finish_reason`.
    pub finished: bool,
    /// That `finish_reason`, when it is a word.
    pub finish_reason: Option<String>,
    /// Bytes of answer text in the first choice's delta (content and
    /// tool-call arguments), for estimating usage.
    pub text_bytes: usize,
    /// Some choice's delta carries content or a tool call (or, on
    /// `/v1/completions`, text): the answer has really begun (a role-only
    /// first chunk, or llama-swap's loading `reasoning_content`, has not).
    pub real: bool,
    /// llama-swap's `sendLoadingState` banner: a chunk without `id` or
    /// `object` (llama-swap writes it, not the model) whose delta holds
    /// only `reasoning_content`. Not part of the answer.
    pub loading: bool,
    /// The upstream reported an error in the stream (`{"error": …}`).
    pub error: Option<String>,
    /// The first choice's delta as one line of text (content, then
    /// `tool call: name(arguments)` pieces), when asked for.
    pub summary: Option<String>,
    /// The first choice's answer text as a client puts it together
    /// (content, tool-call arguments, a completion's `text`), when asked
    /// for and not empty: redaction reads it across events.
    pub text: Option<String>,
}

impl ChunkInfo {
    /// What is known of a payload before its fields are read: its usage.
    pub(crate) fn with_usage(usage: UsageField) -> Self {
        ChunkInfo {
            usage,
            usage_at: None,
            choices: 0,
            finished: false,
            finish_reason: None,
            text_bytes: 0,
            real: false,
            loading: false,
            error: None,
            summary: None,
            text: None,
        }
    }
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
    let mut obj: Map<String, Value> = super::from_json(data)?;
    obj.remove("usage");
    serde_json::to_vec(&obj).map(Bytes::from)
}

/// Where `"usage":null` sits in a chunk, with the comma that goes with it,
/// so a relay can leave it out while copying (upstreams add it to every
/// chunk once usage is requested). Only compact JSON is read this way: in
/// it, `,"usage":null` can only be a key, since a quote inside a string is
/// escaped. `None` for other layouts, which [`strip_usage`] re-serialises.
pub fn null_usage_span(data: &[u8]) -> Option<Range<usize>> {
    const KEY: &[u8] = b"\"usage\":null";
    let at = memchr::memmem::find(data, KEY)?;
    let end = at + KEY.len();
    match (at.checked_sub(1).and_then(|i| data.get(i)), data.get(end)) {
        (Some(b','), _) => Some(at - 1..end),
        (Some(b'{'), Some(b',')) => Some(at..end + 1),
        _ => None,
    }
}

#[derive(Deserialize)]
struct CompletionProbe {
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    choices: Option<WholeChoices>,
    /// Embeddings answer with `data` instead of `choices`.
    #[serde(default)]
    data: Option<Vec<serde::de::IgnoredAny>>,
    #[serde(default)]
    error: Option<Value>,
}

/// What a whole (non-streamed) 200 response turned out to be.
#[derive(Debug)]
pub enum WholeBody {
    /// A completion with at least one choice, its usage if reported, and
    /// the first choice's `finish_reason`; `finished`: it says it ended
    /// (a chat choice's `finish_reason` not null, a Responses `status`
    /// `completed` or `incomplete`, a message's `stop_reason`; always for
    /// embeddings). One that does not was cut short: not an answer.
    /// `plain_text`: a chat answer's first text when it is plain
    /// ([`super::finish::WholeChoices::plain_text`]); `None` elsewhere.
    Answer {
        usage: Option<Usage>,
        finish_reason: Option<String>,
        finished: bool,
        plain_text: Option<String>,
    },
    /// An `{"error": …}` object sent with a success status.
    Error(String),
}

/// Validates a whole chat or legacy completions body and reads its
/// usage: it needs `choices`. (Each endpoint reads its own whole body:
/// [`super::Endpoint::inspect`].)
pub fn inspect_completion(body: &[u8]) -> Result<WholeBody, NotAnAnswer> {
    let text = object_bytes(body)?;
    match super::quick::completion(text) {
        Some(q) if (1..=MAX_CHOICES).contains(&q.choices.count) => Ok(answer(q.usage, q.choices)),
        _ => completion_by_serde(text),
    }
}

/// [`inspect_completion`] of `text` by serde_json alone: what the quick
/// read (`quick`) answers for the bodies it takes, and the only read of
/// the rest.
fn completion_by_serde(text: &str) -> Result<WholeBody, NotAnAnswer> {
    let probe: CompletionProbe = serde_json::from_str(text)?;
    if let Some(e) = probe.error.filter(|e| !e.is_null()) {
        return Ok(WholeBody::Error(error_message(&e)));
    }
    match probe.choices {
        None => Err(NotAnAnswer::NoChoices),
        Some(c) if c.count == 0 => Err(NotAnAnswer::NoChoices),
        Some(c) if c.count > MAX_CHOICES => Err(NotAnAnswer::TooManyChoices(c.count)),
        Some(c) => Ok(answer(probe.usage, c)),
    }
}

/// A chat or completions answer with `usage` and `choices` (at least
/// one, at most [`MAX_CHOICES`]).
fn answer(usage: Option<Usage>, c: WholeChoices) -> WholeBody {
    WholeBody::Answer {
        usage,
        finish_reason: c.finish_reason,
        finished: c.finished,
        plain_text: c.plain_text,
    }
}

/// Validates a whole embeddings body and reads its usage: it needs
/// `data`, and is always finished.
pub fn inspect_embeddings(body: &[u8]) -> Result<WholeBody, NotAnAnswer> {
    let probe = completion_probe(body)?;
    if let Some(e) = probe.error.filter(|e| !e.is_null()) {
        return Ok(WholeBody::Error(error_message(&e)));
    }
    match probe.data {
        Some(d) if !d.is_empty() => Ok(WholeBody::Answer {
            usage: probe.usage,
            finish_reason: None,
            finished: true,
            plain_text: None,
        }),
        _ => Err(NotAnAnswer::NoData),
    }
}

fn completion_probe(body: &[u8]) -> Result<CompletionProbe, NotAnAnswer> {
    Ok(serde_json::from_str(object_bytes(body)?)?)
}

#[cfg(test)]
pub(super) mod quick_tests;
#[cfg(test)]
mod tests;
