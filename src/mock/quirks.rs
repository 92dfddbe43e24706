//! Behaviours of real local servers the simulator can play
//! (`quirks = [...]` on a `kind = "mock"` upstream), each modelled on what
//! llama.cpp's server, llama-cpp-python, vLLM or Ollama do, so conclave's
//! own calls are tested against them without the servers.

use serde::Deserialize;

/// One behaviour of a real server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Quirk {
    /// A whole (unstreamed) answer goes on being generated after the
    /// client leaves (llama.cpp-family servers stop only a stream); the
    /// tokens written for nobody are counted in `/mock/stats` as
    /// `tokens_generated_after_disconnect`.
    GeneratesAfterDisconnect,
    /// A message with `"content": null` (an assistant turn beside its
    /// `tool_calls`) gets HTTP 500 with a Python traceback, as
    /// llama-cpp-python answers.
    RejectsNullContent,
    /// A streamed request with tools and `tool_choice` `"auto"` (or none)
    /// is refused with HTTP 500 "Automatic streaming tool choice is not
    /// supported", as llama-cpp-python does.
    NoStreamToolChoice,
    /// Tools with `tool_choice` `"auto"` (or none) are ignored: the model
    /// answers in text (llama-cpp-python's default chat formats). A named
    /// `tool_choice` is still honoured.
    IgnoresToolChoiceAuto,
    /// Streams never carry `usage`, whatever `stream_options` asks.
    NoStreamUsage,
    /// A prompt longer than the model's `context_window` gets an empty
    /// 200 stream when streamed (a whole request still gets the 400).
    EmptyStreamOnOverflow,
}

impl Quirk {
    pub const ALL: [Quirk; 6] = [
        Quirk::GeneratesAfterDisconnect,
        Quirk::RejectsNullContent,
        Quirk::NoStreamToolChoice,
        Quirk::IgnoresToolChoiceAuto,
        Quirk::NoStreamUsage,
        Quirk::EmptyStreamOnOverflow,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Quirk::GeneratesAfterDisconnect => "generates_after_disconnect",
            Quirk::RejectsNullContent => "rejects_null_content",
            Quirk::NoStreamToolChoice => "no_stream_tool_choice",
            Quirk::IgnoresToolChoiceAuto => "ignores_tool_choice_auto",
            Quirk::NoStreamUsage => "no_stream_usage",
            Quirk::EmptyStreamOnOverflow => "empty_stream_on_overflow",
        }
    }
}

/// The quirks one simulator plays.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Quirks(Vec<Quirk>);

impl Quirks {
    pub fn new(list: &[Quirk]) -> Self {
        let mut v = Vec::new();
        for q in list {
            if !v.contains(q) {
                v.push(*q);
            }
        }
        Quirks(v)
    }

    pub fn has(&self, q: Quirk) -> bool {
        self.0.contains(&q)
    }
}
