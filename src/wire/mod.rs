//! OpenAI wire types: the few request fields conclave reads, with every
//! other field kept verbatim (`#[serde(flatten)]`; for the chat request
//! and its messages, read on every call, by `flat` in one pass) so it
//! reaches the upstream, and the client, unchanged.
//!
//! Responses are not modelled as structs that get re-serialised: a whole
//! response body and each stream chunk travel as the upstream's own bytes.
//! [`inspect`] only reads what conclave needs from them (usage, errors,
//! validity), a whole answer (`quick`) and a stream chunk (`chunk`)
//! first by one pass of a strict scanner (`scan`) and by serde_json
//! where the scanner declines;
//! [`output`] assembles the assistant's text when a strategy
//! must judge it. [`responses`] reads the same of the Responses API's
//! bodies and stream events, for upstreams that speak it natively.
//! [`anthropic`] translates chat requests to Anthropic's Messages API and
//! its answers and event streams back, for Anthropic upstreams. [`Usage`]
//! reads the token counts both dialects report (`usage`).
//!
//! An [`Endpoint`] is a protocol value: its path, its API [`Family`], how
//! its stream ends and how its bodies, events and requests are read.
//! Each dialect defines its own beside its reader ([`messages`],
//! [`responses`]; OpenAI's chat, completions and embeddings in `openai`),
//! so transports and relays never match on a dialect.

pub mod anthropic;
pub mod assemble;
pub mod billing;
pub mod borrowed;
mod chunk;
mod endpoint;
mod finish;
pub use finish::TEXT_KEPT;
mod flat;
pub use flat::ReadRequest;
mod client_body;
pub use client_body::ClientBody;
mod inspect;
pub mod messages;
pub mod numbers;
mod openai;
mod output;
mod quick;
mod request;
pub mod responses;
mod scan;
mod usage;

pub use chunk::{inspect_chunk, inspect_chunk_text};
pub use endpoint::*;
pub use inspect::*;
pub use output::*;
pub use request::*;
pub use scan::{escape_marks, is_plain};
pub use usage::*;

impl Endpoint {
    /// Every endpoint conclave relays, for transports that precompute
    /// the URLs of the ones their [`Family`] serves.
    pub const ALL: [Endpoint; 6] = [
        Endpoint::CHAT,
        Endpoint::COMPLETIONS,
        Endpoint::EMBEDDINGS,
        Endpoint::RESPONSES,
        Endpoint::MESSAGES,
        Endpoint::COUNT_TOKENS,
    ];
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
