//! OpenAI wire types: the few request fields conclave reads, with every
//! other field kept verbatim (`#[serde(flatten)]`; for the chat request
//! and its messages, read on every call, by `flat` in one pass) so it
//! reaches the upstream, and the client, unchanged.
//!
//! Responses are not modelled as structs that get re-serialised: a whole
//! response body and each stream chunk travel as the upstream's own bytes.
//! [`inspect`] only reads what conclave needs from them (usage, errors,
//! validity); [`output`] assembles the assistant's text when a strategy
//! must judge it. [`responses`] reads the same of the Responses API's
//! bodies and stream events, for upstreams that speak it natively.
//! [`anthropic`] translates chat requests to Anthropic's Messages API and
//! its answers and event streams back, for Anthropic upstreams.

pub mod anthropic;
pub mod assemble;
pub mod billing;
mod finish;
mod flat;
mod inspect;
pub mod messages;
mod output;
mod request;
pub mod responses;

pub use inspect::*;
pub use output::*;
pub use request::*;

/// The OpenAI endpoints conclave relays.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
    Embeddings,
    /// The Responses API, relayed verbatim to an upstream that speaks it
    /// natively (`responses = true`).
    Responses,
    /// Anthropic's Messages API (`POST /v1/messages`), to an upstream of
    /// `kind = "anthropic"` (or a mock with `api = "anthropic"`).
    Messages,
    /// Anthropic's `POST /v1/messages/count_tokens`.
    CountTokens,
}

impl Endpoint {
    /// Its streams are typed events that end at their own last event
    /// (`response.completed`, `message_stop`), not at `[DONE]`.
    pub fn typed_events(self) -> bool {
        matches!(self, Endpoint::Responses | Endpoint::Messages)
    }

    /// The path under an OpenAI base URL (`…/v1`); Anthropic's paths
    /// under its `…/v1` likewise.
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/chat/completions",
            Endpoint::Completions => "/completions",
            Endpoint::Embeddings => "/embeddings",
            Endpoint::Responses => "/responses",
            Endpoint::Messages => "/messages",
            Endpoint::CountTokens => "/messages/count_tokens",
        }
    }
}

/// `serde_json::from_slice`, with the UTF-8 checked once for the whole
/// input instead of string by string (the same values and errors, in
/// about half the instructions on a stream chunk).
pub fn from_json<'a, T: serde::Deserialize<'a>>(data: &'a [u8]) -> serde_json::Result<T> {
    match std::str::from_utf8(data) {
        Ok(s) => serde_json::from_str(s),
        Err(_) => serde_json::from_slice(data),
    }
}
