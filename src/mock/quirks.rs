//! Behaviours of real local servers the simulator can play
//! (`quirks = [...]` on a `kind = "mock"` upstream), each modelled on what
//! llama.cpp's server, llama-cpp-python, vLLM or Ollama do, so conclave's
//! own calls are tested against them without the servers.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;

use super::{MockResponse, ReplySpec, Resolved, Simulator, answer, context};

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
    /// A `response_format` whose `type` is neither `text` nor
    /// `json_object` (OpenAI's `json_schema`) gets HTTP 500 with pydantic's
    /// `literal_error` and a traceback, as llama-cpp-python answers.
    RejectsJsonSchema,
    /// A streamed request with tools and `tool_choice` `"auto"`,
    /// `"required"` or none gets a 200 with an empty event stream, as
    /// llama-cpp-python's `chatml-function-calling` answers (its log says
    /// "Automatic streaming tool choice is not supported").
    NoStreamToolChoice,
    /// Tools with `tool_choice` `"auto"`, `"required"` or none are
    /// ignored: the model answers in text (llama-cpp-python's default chat
    /// formats). A named `tool_choice` is still honoured.
    IgnoresToolChoiceAuto,
    /// Streams never carry `usage`, whatever `stream_options` asks.
    NoStreamUsage,
    /// A prompt longer than the model's `context_window` gets an empty
    /// 200 stream when streamed (a whole request still gets the 400).
    EmptyStreamOnOverflow,
    /// A streamed chat or completions answer in flight ends at once with
    /// `data: [DONE]` and no `finish_reason` when another request reaches
    /// the simulator, as llama-cpp-python does with `interrupt_requests`
    /// on (its default).
    InterruptsOnNewRequest,
}

impl Quirk {
    pub const ALL: [Quirk; 8] = [
        Quirk::GeneratesAfterDisconnect,
        Quirk::RejectsNullContent,
        Quirk::RejectsJsonSchema,
        Quirk::NoStreamToolChoice,
        Quirk::IgnoresToolChoiceAuto,
        Quirk::NoStreamUsage,
        Quirk::EmptyStreamOnOverflow,
        Quirk::InterruptsOnNewRequest,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            Quirk::GeneratesAfterDisconnect => "generates_after_disconnect",
            Quirk::RejectsNullContent => "rejects_null_content",
            Quirk::RejectsJsonSchema => "rejects_json_schema",
            Quirk::NoStreamToolChoice => "no_stream_tool_choice",
            Quirk::IgnoresToolChoiceAuto => "ignores_tool_choice_auto",
            Quirk::NoStreamUsage => "no_stream_usage",
            Quirk::EmptyStreamOnOverflow => "empty_stream_on_overflow",
            Quirk::InterruptsOnNewRequest => "interrupts_on_new_request",
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

impl Simulator {
    /// What a real server's quirks make of a chat request before its
    /// answer: an answer of their own (an overflow, a refused stream), or
    /// changes to how the answer is written.
    pub(super) async fn play_quirks(
        &self,
        b: &mut Resolved,
        req: &Value,
        model: &str,
        stream: bool,
    ) -> Option<MockResponse> {
        if let Some(r) = context::overflow(b.context_window, req, stream, &self.quirks) {
            return Some(r);
        }
        let ask = ToolAsk::of(req);
        if stream && ask == ToolAsk::Auto && self.quirks.has(Quirk::NoStreamToolChoice) {
            return Some(answer::empty_stream());
        }
        if ask == ToolAsk::Auto && self.quirks.has(Quirk::IgnoresToolChoiceAuto) {
            b.reply = ReplySpec::Echo;
        }
        if !stream && self.quirks.has(Quirk::GeneratesAfterDisconnect) {
            let tokens = answer::token_count(b, req, model);
            let wasted = self.stats.tokens_generated_after_disconnect.clone();
            generate_detached(b.ttft, tokens, b.tokens_per_second, wasted).await;
            (b.ttft, b.tokens_per_second) = (Duration::ZERO, 0.0);
        }
        None
    }
}

/// A stream's view of the requests that reach its simulator after it
/// began (quirk `interrupts_on_new_request`).
#[derive(Debug, Clone)]
pub struct Interrupt {
    arrivals: Arc<AtomicU64>,
    at: u64,
}

impl Interrupt {
    /// Watches `arrivals` for requests after the `at`-th, its own.
    pub fn after(arrivals: &Arc<AtomicU64>, at: u64) -> Self {
        Interrupt {
            at,
            arrivals: arrivals.clone(),
        }
    }

    /// Another request arrived since the stream began.
    pub fn interrupted(&self) -> bool {
        self.arrivals.load(Ordering::Acquire) != self.at
    }
}

/// What a request's tools ask of the model: nothing, a choice the
/// quirky servers treat alike (`tool_choice` `"auto"`, `"required"` or
/// absent), or a named function.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolAsk {
    None,
    Auto,
    Forced,
}

impl ToolAsk {
    pub fn of(req: &Value) -> Self {
        let has_tools = ["tools", "functions"].iter().any(|k| {
            req.get(k)
                .and_then(Value::as_array)
                .is_some_and(|a| !a.is_empty())
        });
        if !has_tools {
            return ToolAsk::None;
        }
        match req.get("tool_choice") {
            None | Some(Value::Null) => ToolAsk::Auto,
            Some(Value::String(s)) if s == "none" => ToolAsk::None,
            Some(Value::String(_)) => ToolAsk::Auto,
            Some(_) => ToolAsk::Forced,
        }
    }
}

/// Generates a whole answer's `tokens` on a task of its own, as a server
/// that does not notice its client leaving: when the caller stops
/// waiting, the task goes on and counts every token written after that
/// in `wasted`. Returns once the answer is written.
pub async fn generate_detached(
    ttft: Duration,
    tokens: u64,
    tokens_per_second: f64,
    wasted: Arc<AtomicU64>,
) {
    let gone = Arc::new(AtomicBool::new(false));
    let seen = gone.clone();
    let task = tokio::spawn(async move {
        if !ttft.is_zero() {
            tokio::time::sleep(ttft).await;
        }
        let gap =
            (tokens_per_second > 0.0).then(|| Duration::from_secs_f64(1.0 / tokens_per_second));
        for i in 0..tokens {
            if let (Some(gap), true) = (gap, i > 0) {
                tokio::time::sleep(gap).await;
            }
            if seen.load(Ordering::Acquire) {
                wasted.fetch_add(1, Ordering::Relaxed);
            }
        }
    });
    let mut left = Left(Some(gone));
    let _ = task.await;
    left.0 = None;
}

/// Marks the caller gone when dropped before the answer was written.
struct Left(Option<Arc<AtomicBool>>);

impl Drop for Left {
    fn drop(&mut self) {
        if let Some(gone) = &self.0 {
            gone.store(true, Ordering::Release);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn tool_asks() {
        assert_eq!(ToolAsk::of(&json!({})), ToolAsk::None);
        assert_eq!(ToolAsk::of(&json!({"tools": [{}]})), ToolAsk::Auto);
        assert_eq!(
            ToolAsk::of(&json!({"tools": [{}], "tool_choice": "auto"})),
            ToolAsk::Auto
        );
        assert_eq!(
            ToolAsk::of(&json!({"tools": [{}], "tool_choice": "none"})),
            ToolAsk::None
        );
        assert_eq!(
            ToolAsk::of(
                &json!({"tools": [{}], "tool_choice": {"type": "function", "function": {"name": "f"}}})
            ),
            ToolAsk::Forced
        );
        assert_eq!(ToolAsk::of(&json!({"tools": []})), ToolAsk::None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_leaves_wastes_the_rest() {
        let wasted = Arc::new(AtomicU64::new(0));
        let generating = generate_detached(Duration::from_millis(100), 10, 10.0, wasted.clone());
        // 100 ms to the first token, then one every 100 ms: leave after 4.
        let _ = tokio::time::timeout(Duration::from_millis(450), generating).await;
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(wasted.load(Ordering::Relaxed), 6);

        let all = Arc::new(AtomicU64::new(0));
        generate_detached(Duration::ZERO, 10, 10.0, all.clone()).await;
        assert_eq!(all.load(Ordering::Relaxed), 0);
    }
}
