//! An endpoint conclave relays, as a protocol value: its path, the API
//! family that speaks it, how its streams end, and how its answers are
//! read (a whole body, one stream event, the assistant's output) and its
//! requests measured (input length, usage across events).
//!
//! Each dialect defines its own values beside its reader: OpenAI's chat,
//! completions and embeddings in [`super::openai`], the Responses API in
//! [`super::responses`], Anthropic's Messages API and `count_tokens` in
//! [`super::messages`] (as `Endpoint::CHAT`, `Endpoint::RESPONSES`, …).
//! Transports and relays call the value and never name a dialect, so a
//! new pass-through dialect is its reader module here (its `Protocol`,
//! its `Endpoint` const, and a line in [`Endpoint::ALL`] so the
//! transports of its [`Family`] have its URL), its API module (`api/NEW/`,
//! relaying through `api::native`) and its routes.

use std::fmt;

use serde_json::{Map, Value};

use super::inspect::{ChunkInfo, NotAnAnswer, WholeBody};
use super::output::AssistantOutput;
use super::usage::Usage;

/// The API an endpoint belongs to: which kind of upstream serves it
/// natively.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Family {
    /// OpenAI's API (any OpenAI-compatible server).
    OpenAi,
    /// Anthropic's Messages API (an upstream of `kind = "anthropic"`).
    Anthropic,
}

/// How an endpoint's stream is framed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Events {
    /// Untyped `data:` chunks ending at `[DONE]` (chat, completions).
    Done,
    /// Typed events (`event:` lines) that end at their own `last` event
    /// (`response.completed`, `message_stop`), not at `[DONE]`.
    Typed { last: &'static str },
}

/// What an endpoint's whole body reads as ([`Endpoint::inspect`]).
pub type InspectWhole = fn(&[u8]) -> Result<WholeBody, NotAnAnswer>;
/// One stream event, `(data, summarize, text)` ([`Endpoint::inspect_event`]).
pub type InspectEvent = fn(&[u8], bool, bool) -> Result<ChunkInfo, NotAnAnswer>;
/// The assistant's output in a whole body ([`Endpoint::output`]).
pub type ReadOutput = fn(&[u8]) -> Result<AssistantOutput, NotAnAnswer>;
/// A request's input, in bytes for [`super::estimate_tokens`].
pub type InputLen = fn(&Map<String, Value>) -> usize;
/// A stream's usage so far merged with an event's ([`Endpoint::merge_usage`]).
pub type MergeUsage = fn(Option<Usage>, Usage) -> Usage;

/// One endpoint conclave relays: a reference to its [`Protocol`], so it
/// is copied as one pointer. Compared by its path.
#[derive(Clone, Copy)]
pub struct Endpoint(pub(super) &'static Protocol);

/// What an [`Endpoint`] is: defined once per endpoint, beside its
/// dialect's reader.
pub struct Protocol {
    pub(super) name: &'static str,
    pub(super) title: &'static str,
    pub(super) path: &'static str,
    pub(super) family: Family,
    pub(super) events: Events,
    pub(super) whole: InspectWhole,
    pub(super) event: InspectEvent,
    pub(super) output: ReadOutput,
    pub(super) input_len: InputLen,
    pub(super) usage: MergeUsage,
}

impl Endpoint {
    /// A short name (`chat`, `responses`, `messages`, …).
    pub fn name(self) -> &'static str {
        self.0.name
    }

    /// What people call it, for messages (`Embeddings`, `the Messages
    /// API`).
    pub fn title(self) -> &'static str {
        self.0.title
    }

    /// The path under an OpenAI base URL (`…/v1`); Anthropic's paths
    /// under its `…/v1` likewise.
    pub fn path(self) -> &'static str {
        self.0.path
    }

    /// The API that speaks it natively.
    pub fn family(self) -> Family {
        self.0.family
    }

    /// Its streams are typed events that end at their own last event
    /// (`response.completed`, `message_stop`), not at `[DONE]`.
    pub fn typed_events(self) -> bool {
        matches!(self.0.events, Events::Typed { .. })
    }

    /// The event a typed stream ends at; `None` for `[DONE]` streams.
    pub fn last_event(self) -> Option<&'static str> {
        match self.0.events {
            Events::Typed { last } => Some(last),
            Events::Done => None,
        }
    }

    /// Validates a whole response body and reads its usage and end.
    pub fn inspect(self, body: &[u8]) -> Result<WholeBody, NotAnAnswer> {
        (self.0.whole)(body)
    }

    /// Inspects one stream event in one parse (its delta summarised when
    /// `summarize`, its answer text kept when `text`).
    pub fn inspect_event(
        self,
        data: &[u8],
        summarize: bool,
        text: bool,
    ) -> Result<ChunkInfo, NotAnAnswer> {
        (self.0.event)(data, summarize, text)
    }

    /// What the assistant said in a whole body.
    pub fn output(self, body: &[u8]) -> Result<AssistantOutput, NotAnAnswer> {
        (self.0.output)(body)
    }

    /// The bytes a request's input stands for, for a usage estimate
    /// ([`super::estimate_tokens`]) when the upstream reports none.
    pub fn input_len(self, body: &Map<String, Value>) -> usize {
        (self.0.input_len)(body)
    }

    /// The usage a stream has reported so far (`before`) with an event's
    /// `later` usage: the later one for most dialects; merged for
    /// Messages, whose `message_delta` may lack the input that
    /// `message_start` gave.
    pub fn merge_usage(self, before: Option<Usage>, later: Usage) -> Usage {
        (self.0.usage)(before, later)
    }
}

/// A usage that replaces what came before ([`Endpoint::merge_usage`]).
pub(super) fn latest_usage(_: Option<Usage>, later: Usage) -> Usage {
    later
}

impl PartialEq for Endpoint {
    fn eq(&self, other: &Self) -> bool {
        std::ptr::eq(self.0, other.0) || self.0.path == other.0.path
    }
}

impl Eq for Endpoint {}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.0.name)
    }
}

#[cfg(test)]
mod tests {
    use super::super::UsageField;
    use super::*;

    #[test]
    fn each_endpoint_has_its_own_path_and_says_how_its_stream_ends() {
        for (i, a) in Endpoint::ALL.iter().enumerate() {
            for b in &Endpoint::ALL[i + 1..] {
                assert_ne!(a.path(), b.path());
                assert_ne!(a, b);
            }
        }
        assert_eq!(Endpoint::RESPONSES.last_event(), Some("response.completed"));
        assert_eq!(Endpoint::MESSAGES.last_event(), Some("message_stop"));
        for e in [
            Endpoint::CHAT,
            Endpoint::COMPLETIONS,
            Endpoint::EMBEDDINGS,
            Endpoint::COUNT_TOKENS,
        ] {
            assert!(!e.typed_events(), "{e:?}");
        }
        assert_eq!(Endpoint::COUNT_TOKENS.family(), Family::Anthropic);
        assert_eq!(Endpoint::RESPONSES.family(), Family::OpenAi);
    }

    #[test]
    fn each_endpoint_reads_its_own_bodies() {
        let chat = br#"{"choices":[{"message":{"content":"hi"},"finish_reason":"stop"}]}"#;
        let embedding = br#"{"data":[{"embedding":[0.1]}]}"#;
        assert!(Endpoint::CHAT.inspect(chat).is_ok());
        assert!(Endpoint::CHAT.inspect(embedding).is_err());
        assert!(Endpoint::EMBEDDINGS.inspect(embedding).is_ok());
        assert!(Endpoint::MESSAGES.inspect(chat).is_err());
        assert_eq!(
            Endpoint::CHAT.output(chat).map(|o| o.text).ok().as_deref(),
            Some("hi")
        );
        let mut body = Map::new();
        body.insert("prompt".into(), Value::String("abcd".into()));
        assert_eq!(Endpoint::COMPLETIONS.input_len(&body), 4);
    }

    #[test]
    fn messages_usage_keeps_the_input_a_later_event_lacks() {
        let start = Usage {
            prompt_tokens: 25,
            completion_tokens: 1,
            ..Usage::default()
        };
        let delta = Usage {
            completion_tokens: 15,
            ..Usage::default()
        };
        let merged = Endpoint::MESSAGES.merge_usage(Some(start), delta);
        assert_eq!((merged.prompt_tokens, merged.completion_tokens), (25, 15));
        let replaced = Endpoint::RESPONSES.merge_usage(Some(start), delta);
        assert_eq!(replaced.prompt_tokens, 0);
        let event = br#"{"type":"message_delta","delta":{"stop_reason":"end_turn"},"usage":{"output_tokens":15}}"#;
        let info = Endpoint::MESSAGES.inspect_event(event, false, false);
        assert!(matches!(info.map(|i| i.usage), Ok(UsageField::Present(_))));
    }
}
