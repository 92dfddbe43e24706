//! The Anthropic Messages API as an upstream speaks it, translated to and
//! from chat completions: pure functions and one state machine, no I/O.
//!
//! - [`to_messages`]: a chat request body → a Messages request body, and
//!   the [`Translation`] the answer's translation needs (streaming, usage
//!   wanted, the forced JSON tool). What cannot be said in Messages is an
//!   [`Untranslatable`] naming the field.
//! - [`to_completion`]: a whole `message` body → a `chat.completion` body.
//! - [`ChunkMaker`]: a Messages event stream, fed one event at a time →
//!   `chat.completion.chunk` objects; an `error` event or garbage is a
//!   [`StreamFault`]; [`ChunkMaker::ended`] says `message_stop` was seen.
//!
//! The mapping, field by field, is in `docs/anthropic.md`.

mod answer;
mod conversation;
mod request;
mod stream;
#[cfg(test)]
mod tests;

use serde_json::{Value, json};

pub use answer::to_completion;
pub use conversation::PLACEHOLDER;
pub use request::{JSON_OBJECT_PROMPT, budget, to_messages};
pub use stream::{ChunkMaker, MAX_BLOCKS, StreamFault};

/// The tool a `response_format` of type `json_schema` becomes: the model
/// is made to call it, and its input comes back as the answer's content.
pub const JSON_TOOL: &str = "json_response";

/// What the answer's translation must remember from the request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Translation {
    /// The request streams (`stream: true`).
    pub stream: bool,
    /// `stream_options.include_usage`: a last chunk with `choices: []` and
    /// the usage.
    pub include_usage: bool,
    /// The forced JSON tool's name, when `response_format` became one: its
    /// `tool_use` input is the answer's text, with `finish_reason` `stop`.
    pub json_tool: Option<String>,
}

/// A chat request field Messages cannot express (a 400 for the client).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{field}` cannot be sent to an Anthropic model: {why}")]
pub struct Untranslatable {
    /// The field's path in the chat request, e.g. `messages[2].content[0]`.
    pub field: String,
    /// Why, in a few words.
    pub why: String,
}

impl Untranslatable {
    pub(crate) fn new(field: impl Into<String>, why: impl Into<String>) -> Self {
        Untranslatable {
            field: field.into(),
            why: why.into(),
        }
    }
}

/// Anthropic's error `type` for an HTTP status (its 529 is
/// `overloaded_error`).
pub fn error_type(status: u16) -> &'static str {
    match status {
        401 => "authentication_error",
        402 => "billing_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        504 => "timeout_error",
        529 => "overloaded_error",
        s if s >= 500 => "api_error",
        _ => "invalid_request_error",
    }
}

/// A Messages `stop_reason` in chat's words (`None` while unknown).
pub fn finish_reason(stop_reason: &str) -> &'static str {
    match stop_reason {
        "max_tokens" | "model_context_window_exceeded" => "length",
        "tool_use" => "tool_calls",
        "refusal" => "content_filter",
        // end_turn, stop_sequence, pause_turn, and whatever comes next.
        _ => "stop",
    }
}

/// A Messages `usage` object as chat's: input counts every prompt token
/// (cache reads and writes included), `prompt_tokens_details.cached_tokens`
/// the cache reads, and both cache counts kept at the top (as LiteLLM
/// does) so pricing can charge cache writes.
pub fn usage(input: u64, output: u64, cache_read: u64, cache_creation: u64) -> Value {
    let prompt = input
        .saturating_add(cache_read)
        .saturating_add(cache_creation);
    json!({
        "prompt_tokens": prompt,
        "completion_tokens": output,
        "total_tokens": prompt.saturating_add(output),
        "prompt_tokens_details": {"cached_tokens": cache_read},
        "cache_read_input_tokens": cache_read,
        "cache_creation_input_tokens": cache_creation,
    })
}
