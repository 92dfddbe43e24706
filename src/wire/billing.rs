//! What a request may be billed for, estimated before it is sent (for key
//! budgets, `tpm` and a race's gates), and the output caps that estimate
//! rests on, checked when the request is read.
//!
//! - **Input**: the text of every message by the one rule
//!   [`estimate_tokens`] (bytes / 4), its other fields (tool calls, names,
//!   tool results) by their JSON size, and every request field that reaches
//!   the model's prompt (`tools`, `functions`, `response_format` schemas,
//!   `tool_choice`, vendor fields such as `prediction`) by its JSON size, so
//!   32 KB of tool definitions count as the 8,000 tokens they are. Only the
//!   sampling parameters in [`NOT_PROMPT`] are left out: an unknown field
//!   is counted. Images are counted apart ([`Billable::images`]): each
//!   model prices one at its `image_tokens`. Audio counts its decoded size
//!   at [`AUDIO_BYTES_PER_TOKEN`] bytes a token, files their data as text.
//!   The chat template's own tokens come on top: [`TEMPLATE_PER_MESSAGE`]
//!   for each message's role markers and [`TEMPLATE_PER_REQUEST`] for the
//!   assistant turn's opening and the default system prompt some templates
//!   add ([`template_tokens`]).
//! - **Native bodies**: a Responses or Messages body forwarded verbatim
//!   is measured by the same rule, turn by turn and field by field
//!   (`dialects`: [`Billable::responses`], [`Billable::messages`]).
//! - **Output**: the cap the client set (`max_completion_tokens`, else
//!   `max_tokens`) times the answers it asked for (`n`, or `best_of` where
//!   larger). A cap or count that is not a positive integer is refused
//!   ([`check_caps`], by the one rule [`cap`] every dialect's caps
//!   follow); a cap beyond [`MAX_CAP`] counts as [`MAX_CAP`].

use serde_json::{Map, Value};

use super::{ChatRequest, estimate_tokens};

mod dialects;

/// The largest output cap an estimate takes a client at: more than any
/// model's context, so such a request never fits a limit it should not.
pub const MAX_CAP: u64 = u32::MAX as u64;

/// Decoded audio bytes per token: compressed speech at ~8 kbit/s billed at
/// 32 tokens a second (the most any provider documents) stays under it.
pub const AUDIO_BYTES_PER_TOKEN: u64 = 16;

/// Tokens a chat template wraps each message in: its role markers
/// (ChatML's `<|im_start|>user\n … <|im_end|>\n` and Llama 3's
/// `<|start_header_id|>user<|end_header_id|>\n\n … <|eot_id|>` are 5;
/// OpenAI bills 3, 4 with a `name`), and 2 for the text of a short message,
/// which bytes / 4 undercounts. llama-cpp-python with SmolLM2 counted 88
/// tokens for 7 short turns of 52 bytes, which this covers (94).
pub const TEMPLATE_PER_MESSAGE: u64 = 7;

/// Tokens a chat template adds once a request: the assistant turn it opens
/// for the answer (3 to 5, with a BOS token) and the default system prompt
/// some templates add when the request has none (SmolLM2's "You are a
/// helpful AI assistant named SmolLM, trained by Hugging Face" is 21 with
/// its markers, Qwen 2.5's about 25, Llama 3.1's knowledge-date preamble
/// about 25). OpenAI bills 3. llama-cpp-python with SmolLM2 counted 31
/// tokens for one `hello` (estimated at 41).
pub const TEMPLATE_PER_REQUEST: u64 = 32;

/// The tokens a chat template adds to a request of `messages` messages.
pub fn template_tokens(messages: usize) -> u64 {
    TEMPLATE_PER_REQUEST.saturating_add(TEMPLATE_PER_MESSAGE.saturating_mul(messages as u64))
}

/// Request fields that are parameters, not prompt text.
const NOT_PROMPT: &[&str] = &[
    "model",
    "messages",
    "stream",
    "stream_options",
    "max_tokens",
    "max_completion_tokens",
    "n",
    "best_of",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "seed",
    "stop",
    "user",
    "metadata",
    "store",
    "service_tier",
    "parallel_tool_calls",
    "reasoning_effort",
    "verbosity",
    "modalities",
    "safety_identifier",
    "prompt_cache_key",
];

/// The fields that cap one answer's output, in the order they are read.
pub const CAP_FIELDS: [&str; 2] = ["max_completion_tokens", "max_tokens"];

/// The fields that ask for several answers.
const COUNT_FIELDS: [&str; 2] = ["n", "best_of"];

/// What one call of a request may be billed for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Billable {
    /// Input tokens, images left out.
    pub input: u64,
    /// Images in the messages.
    pub images: u64,
    /// The output cap the client set, times the answers it asked for
    /// (`None`: no cap set).
    pub output: Option<u64>,
}

/// A cap or count field that is not a positive integer: a 400.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("Invalid '{param}': {got}; expected a positive integer.")]
pub struct BadCap {
    pub param: &'static str,
    pub got: String,
}

/// Checks `max_completion_tokens`, `max_tokens`, `n` and `best_of`: each
/// absent, `null`, or a positive integer (one too large for 64 bits
/// included: it is clamped in estimates).
pub fn check_caps(fields: &Map<String, Value>) -> Result<(), BadCap> {
    for param in CAP_FIELDS.into_iter().chain(COUNT_FIELDS) {
        cap(fields, param)?;
    }
    Ok(())
}

/// The one rule for a cap or count field, whatever the dialect
/// (`max_tokens`, `max_output_tokens`, `n`…): absent or `null` is `None`,
/// a positive integer is its value (clamped to [`MAX_CAP`]), anything
/// else (`5000.0`, `"5000"`, `-1`, `0`, `true`) is a [`BadCap`].
pub fn cap(fields: &Map<String, Value>, param: &'static str) -> Result<Option<u64>, BadCap> {
    match fields.get(param) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match positive_int(v) {
            Some(n) => Ok(Some(n)),
            None => {
                let mut got = v.to_string();
                got.truncate(40);
                Err(BadCap { param, got })
            }
        },
    }
}

/// A JSON number that is a positive integer, clamped to [`MAX_CAP`].
/// serde_json reads an integer beyond 64 bits as a float: a whole float
/// that large counts as such an integer, a smaller one (`5000.0`) was
/// written as a decimal and is not.
fn positive_int(v: &Value) -> Option<u64> {
    let n = v.as_number()?;
    if let Some(u) = n.as_u64() {
        return (u > 0).then_some(u.min(MAX_CAP));
    }
    let f = n.as_f64()?;
    (f >= u64::MAX as f64 && f.fract() == 0.0).then_some(MAX_CAP)
}

/// The cap a request's fields set (after [`check_caps`]), clamped.
pub fn output_cap(fields: &Map<String, Value>) -> Option<u64> {
    CAP_FIELDS
        .iter()
        .find_map(|k| fields.get(*k).and_then(positive_int))
}

/// How many answers a request's fields ask the model to write.
pub fn answers(fields: &Map<String, Value>) -> u64 {
    COUNT_FIELDS
        .iter()
        .filter_map(|k| fields.get(*k).and_then(positive_int))
        .max()
        .unwrap_or(1)
}

impl ChatRequest {
    /// What one call of this request may be billed for.
    pub fn billable(&self) -> Billable {
        let mut size = Size::default();
        for m in &self.messages {
            match &m.content {
                Some(Value::Array(parts)) => parts.iter().for_each(|p| size.part(p)),
                Some(Value::String(s)) => size.text += s.len() as u64,
                Some(other) => size.json += json_len(other),
                None => {}
            }
            size.json += m.rest.values().map(json_len).sum::<u64>();
        }
        size.json += prompt_fields(&self.extra, &[]);
        Billable {
            input: size
                .tokens()
                .saturating_add(template_tokens(self.messages.len())),
            images: size.images,
            output: output_cap(&self.extra).map(|cap| cap.saturating_mul(answers(&self.extra))),
        }
    }
}

/// JSON bytes of the request fields that reach the prompt, but those
/// named in `counted` (measured apart by the caller).
pub fn prompt_fields(fields: &Map<String, Value>, counted: &[&str]) -> u64 {
    fields
        .iter()
        .filter(|(k, _)| !NOT_PROMPT.contains(&k.as_str()) && !counted.contains(&k.as_str()))
        .map(|(k, v)| k.len() as u64 + json_len(v))
        .sum()
}

/// JSON bytes of an object's fields but those named in `left_out`.
fn fields_but(fields: &Map<String, Value>, left_out: &[&str]) -> u64 {
    fields
        .iter()
        .filter(|(k, _)| !left_out.contains(&k.as_str()))
        .map(|(k, v)| k.len() as u64 + 4 + json_len(v))
        .sum()
}

#[derive(Default)]
struct Size {
    /// Bytes of text.
    text: u64,
    /// Bytes of JSON counted as text.
    json: u64,
    /// Decoded bytes of audio.
    audio: u64,
    images: u64,
}

impl Size {
    /// One content part (chat), content block (Messages) or content item
    /// (Responses): an image counts as one, audio by its decoded size,
    /// text by its bytes, a tool result by what it holds ([`Size::item`]),
    /// anything else (files and documents with their data, tool calls,
    /// thinking and its signature) by its JSON.
    fn part(&mut self, p: &Value) {
        let kind = p.get("type").and_then(Value::as_str).unwrap_or_default();
        match kind {
            "image_url" | "image" | "input_image" => self.images += 1,
            "input_audio" => {
                let data = p.pointer("/input_audio/data").and_then(Value::as_str);
                let b64 = data.map_or(0, str::len) as u64;
                self.audio += b64 / 4 * 3;
            }
            "text" | "input_text" | "output_text" => match p.get("text") {
                Some(Value::String(s)) => self.text += s.len() as u64,
                other => self.json += other.map_or(0, json_len),
            },
            "tool_result" | "function_call_output" => self.item(p),
            _ => self.json += json_len(p),
        }
    }

    /// One turn (a Messages message, a Responses input item, a tool
    /// result): its `content` or `output` part by part when it is a list,
    /// its text fields (`content`, `output`, `text`, `arguments`) by their
    /// bytes, its other fields (role, ids, `encrypted_content`, a
    /// reasoning summary) by their JSON.
    fn item(&mut self, item: &Value) {
        let Value::Object(fields) = item else {
            match item {
                Value::String(s) => self.text += s.len() as u64,
                other => self.json += json_len(other),
            }
            return;
        };
        for (k, v) in fields {
            match (k.as_str(), v) {
                ("content" | "output", Value::Array(parts)) => {
                    parts.iter().for_each(|p| self.part(p));
                }
                ("content" | "output" | "text" | "arguments", Value::String(s)) => {
                    self.text += s.len() as u64;
                }
                _ => self.json += k.len() as u64 + 4 + json_len(v),
            }
        }
    }

    fn tokens(&self) -> u64 {
        let text = usize::try_from(self.text.saturating_add(self.json)).unwrap_or(usize::MAX);
        estimate_tokens(text).saturating_add(self.audio.div_ceil(AUDIO_BYTES_PER_TOKEN))
    }
}

/// About how many bytes `v` takes as JSON, without writing it out.
pub fn json_len(v: &Value) -> u64 {
    match v {
        Value::Null | Value::Bool(_) => 5,
        Value::Number(_) => 8,
        Value::String(s) => s.len() as u64 + 2,
        Value::Array(items) => items.iter().map(|i| json_len(i) + 1).sum::<u64>() + 2,
        Value::Object(o) => {
            o.iter()
                .map(|(k, v)| k.len() as u64 + 4 + json_len(v))
                .sum::<u64>()
                + 2
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn plain_text_counts_as_before() {
        let r = req(
            json!({"model": "m", "messages": [{"role": "user", "content": "hello there"}],
                           "max_tokens": 100, "temperature": 0.2}),
        );
        assert_eq!(
            r.billable(),
            Billable {
                input: 3 + TEMPLATE_PER_REQUEST + TEMPLATE_PER_MESSAGE,
                images: 0,
                output: Some(100)
            }
        );
        assert_eq!(
            r.billable().input,
            estimate_tokens(r.text_bytes()) + template_tokens(1)
        );
    }

    #[test]
    fn tools_schemas_images_audio_and_answers_count() {
        let tool = json!({"type": "function", "function": {"name": "f", "description": "x".repeat(4000),
                          "parameters": {"type": "object"}}});
        let r = req(
            json!({"model": "m", "messages": [{"role": "user", "content": [
                {"type": "text", "text": "hi"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
                {"type": "image_url", "image_url": {"url": "https://x/y.png", "detail": "low"}},
                {"type": "input_audio", "input_audio": {"data": "A".repeat(6400), "format": "mp3"}}]}],
            "tools": [tool], "response_format": {"type": "json_schema", "json_schema": {"schema": {"d": "y".repeat(400)}}},
            "n": 3, "max_completion_tokens": 50}),
        );
        let b = r.billable();
        assert_eq!(b.images, 2);
        assert_eq!(b.output, Some(150));
        // 4,000 bytes of tool description, 400 of schema, 4,800 of audio.
        let template = template_tokens(1);
        assert!(b.input > 1000 + 100 + 300 + template, "{b:?}");
        assert!(b.input < 1000 + 100 + 300 + 100 + template, "{b:?}");
    }

    #[test]
    fn caps_must_be_positive_integers_and_huge_ones_are_clamped() {
        let fields = |v: Value| v.as_object().unwrap().clone();
        for bad in [
            json!({"max_tokens": -1}),
            json!({"max_tokens": 5000.0}),
            json!({"max_tokens": "5000"}),
            json!({"max_tokens": 0}),
            json!({"max_completion_tokens": 1.5}),
            json!({"n": 0}),
            json!({"n": "2"}),
            json!({"best_of": -3}),
            json!({"max_tokens": -18446744073709551616.0}),
        ] {
            assert!(check_caps(&fields(bad.clone())).is_err(), "{bad}");
        }
        let huge: Value = serde_json::from_str(r#"{"max_tokens": 18446744073709551616}"#).unwrap();
        let huge = fields(huge);
        assert_eq!(check_caps(&huge), Ok(()));
        assert_eq!(output_cap(&huge), Some(MAX_CAP));
        let ok =
            fields(json!({"max_tokens": 10, "max_completion_tokens": null, "n": 2, "best_of": 5}));
        assert_eq!(check_caps(&ok), Ok(()));
        assert_eq!(output_cap(&ok), Some(10));
        assert_eq!(answers(&ok), 5);
    }
}
