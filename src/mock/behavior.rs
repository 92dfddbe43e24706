//! How a simulated model behaves: its reply, timing, usage and failure
//! mode, configured per model under `[upstreams.NAME.models.MODEL]`, with
//! `rules` that change the behaviour for requests containing some text or
//! for the Nth call (a verifier that rejects drafts, a flaky upstream).

use std::time::Duration;

use serde::Deserialize;
use serde_json::{Map, Value};

/// One model's behaviour. Every field is optional; a rule's `then` table
/// overrides only the fields it sets.
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Behavior {
    /// What the model answers (default: an echo of the last user message).
    pub reply: Option<ReplySpec>,
    /// Delay before the first token (streamed) or part of the total delay.
    #[serde(default, with = "humantime_serde")]
    pub ttft: Option<Duration>,
    /// Generation speed; 0 or absent sends all tokens at once.
    pub tokens_per_second: Option<f64>,
    /// Usage figures to report (default: estimated from the text).
    pub usage: Option<UsageSpec>,
    /// Answer with this HTTP status and an OpenAI-shaped error body.
    pub status: Option<u16>,
    pub error_message: Option<String>,
    /// `Retry-After` seconds sent with an error status.
    pub retry_after: Option<u64>,
    pub fail: Option<FailMode>,
    /// Streamed chat answers: `fail` (default `cut`; `hang` stalls,
    /// `error_event` sends an SSE error) happens only after this many
    /// characters of the answer (its text, or a tool call's arguments)
    /// went out, splitting a token if need be.
    pub fail_after_chars: Option<usize>,
    /// Continues a partial answer: when the conversation ends with an
    /// assistant message (a prefill), or with one and a user message
    /// after it (asked to continue), whose text begins the reply, the
    /// model answers the rest of the reply, repeating the word the
    /// partial text stops in and this many words before it, as real
    /// models do.
    pub continue_repeats: Option<usize>,
    /// Default `stop` (`tool_calls` for a tool call reply).
    pub finish_reason: Option<String>,
    /// Put usage on the last chunk that has choices (as llama.cpp and vLLM
    /// do) instead of a separate usage-only chunk.
    pub usage_in_final_chunk: Option<bool>,
    /// Ignore `stream_options.include_usage` and never report usage in a
    /// stream, as llama-cpp-python and several other servers do.
    pub omit_usage: Option<bool>,
    /// Extra top-level fields added to every response and chunk.
    pub extra: Option<Map<String, Value>>,
    /// The model's context window in tokens: a longer chat prompt is
    /// refused as llama-cpp-python refuses it (see `mock::context`), and
    /// `GET /props` reports it.
    pub context_window: Option<u64>,
    /// Behaviour overrides, first match wins.
    #[serde(default)]
    pub rules: Vec<Rule>,
}

impl Behavior {
    /// Calls `f` with each file it names (a `solve` reply's task file, in
    /// its rules too) and that file's key path.
    pub fn each_file(&mut self, f: &mut dyn FnMut(&str, &mut std::path::PathBuf)) {
        if let Some(ReplySpec::Solve(s)) = &mut self.reply {
            f("reply.solve.tasks", &mut s.tasks);
        }
        for (i, r) in self.rules.iter_mut().enumerate() {
            r.then
                .each_file(&mut |key, p| f(&format!("rules[{i}].then.{key}"), p));
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Rule {
    /// Applies when any message's text contains this string.
    pub when_contains: Option<String>,
    /// Applies to these calls of the model (1-based, counted per model).
    pub when_call: Option<Vec<u64>>,
    pub then: Behavior,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "snake_case", deny_unknown_fields)]
pub enum ReplySpec {
    /// The last user message, verbatim.
    Echo,
    /// Fixed text; `{last_user}` and `{model}` are filled in.
    Text(String),
    /// A JSON value, serialised as the message content.
    Json(Value),
    /// A single tool call instead of text.
    ToolCall(ToolCallSpec),
    /// Answers the tasks of a `conclave eval` task file, right with a set
    /// probability (see `mock::solve`).
    Solve(super::solve::SolveSpec),
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ToolCallSpec {
    pub name: String,
    /// An object (serialised) or a string sent as is.
    #[serde(default)]
    pub arguments: Option<Value>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UsageSpec {
    /// Every input token, cached ones included (as OpenAI counts them).
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, read from the prompt cache (OpenAI's
    /// `cached_tokens`, Anthropic's `cache_read_input_tokens`).
    #[serde(default)]
    pub cached_tokens: u64,
    /// Of `prompt_tokens`, written to the prompt cache (Anthropic's
    /// `cache_creation_input_tokens`; an OpenAI answer does not say).
    #[serde(default)]
    pub cache_write_tokens: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailMode {
    /// Never answer: no status line, no body.
    Hang,
    /// Answer 200 with a body that is neither JSON nor an event stream.
    Garbage,
    /// Drop the connection halfway through the body.
    Cut,
    /// Streamed: an SSE `{"error": …}` event first. Whole: HTTP 500.
    ErrorEvent,
}

/// A behaviour with every default filled in.
#[derive(Debug, Clone)]
pub struct Resolved {
    pub reply: ReplySpec,
    pub ttft: Duration,
    pub tokens_per_second: f64,
    pub usage: Option<UsageSpec>,
    pub status: Option<u16>,
    pub error_message: Option<String>,
    pub retry_after: Option<u64>,
    pub fail: Option<FailMode>,
    pub fail_after_chars: Option<usize>,
    pub continue_repeats: Option<usize>,
    pub finish_reason: Option<String>,
    pub usage_in_final_chunk: bool,
    pub omit_usage: bool,
    pub extra: Map<String, Value>,
    pub context_window: Option<u64>,
}

impl Resolved {
    /// It fails with `mode` before answering (not after some characters).
    pub fn fails_at_once(&self, mode: FailMode) -> bool {
        self.fail == Some(mode) && self.fail_after_chars.is_none()
    }
}

impl Behavior {
    /// The behaviour for one call: the first matching rule over the base.
    pub fn resolve(&self, request_text: &str, call: u64) -> Resolved {
        let rule = self.rules.iter().find(|r| {
            r.when_contains
                .as_deref()
                .is_none_or(|needle| request_text.contains(needle))
                && r.when_call
                    .as_ref()
                    .is_none_or(|calls| calls.contains(&call))
        });
        let over = rule.map(|r| &r.then);
        macro_rules! pick {
            ($f:ident) => {
                over.and_then(|o| o.$f.clone()).or_else(|| self.$f.clone())
            };
        }
        Resolved {
            reply: pick!(reply).unwrap_or(ReplySpec::Echo),
            ttft: pick!(ttft).unwrap_or_default(),
            tokens_per_second: pick!(tokens_per_second).unwrap_or(0.0),
            usage: pick!(usage),
            status: pick!(status),
            error_message: pick!(error_message),
            retry_after: pick!(retry_after),
            fail: pick!(fail),
            fail_after_chars: pick!(fail_after_chars),
            continue_repeats: pick!(continue_repeats),
            finish_reason: pick!(finish_reason),
            usage_in_final_chunk: pick!(usage_in_final_chunk).unwrap_or(false),
            omit_usage: pick!(omit_usage).unwrap_or(false),
            extra: pick!(extra).unwrap_or_default(),
            context_window: pick!(context_window),
        }
    }

    /// Problems a TOML parse cannot see, as (key path, message).
    pub fn check(&self) -> Vec<(String, String)> {
        let mut errs = Vec::new();
        self.check_fields("", &mut errs);
        for (i, rule) in self.rules.iter().enumerate() {
            let at = format!("rules[{i}]");
            if rule.when_contains.is_none() && rule.when_call.is_none() {
                errs.push((
                    at.clone(),
                    "a rule needs `when_contains` or `when_call`".into(),
                ));
            }
            if !rule.then.rules.is_empty() {
                errs.push((format!("{at}.then.rules"), "rules cannot be nested".into()));
            }
            rule.then.check_fields(&format!("{at}.then."), &mut errs);
        }
        errs
    }

    fn check_fields(&self, at: &str, errs: &mut Vec<(String, String)>) {
        if let Some(tps) = self.tokens_per_second
            && !(tps.is_finite() && tps >= 0.0)
        {
            errs.push((
                format!("{at}tokens_per_second"),
                "must be a number >= 0".into(),
            ));
        }
        if self.context_window == Some(0) {
            errs.push((
                format!("{at}context_window"),
                "must be a positive number of tokens".into(),
            ));
        }
        if let Some(s) = self.status
            && !(200..=599).contains(&s)
        {
            errs.push((format!("{at}status"), format!("{s} is not an HTTP status")));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rules_override_only_what_they_set() {
        let b: Behavior = toml::from_str(
            r#"
            reply = { text = "yes" }
            ttft = "20ms"
            [[rules]]
            when_contains = "draft"
            then = { reply = { text = "no" } }
            [[rules]]
            when_call = [2]
            then = { status = 503 }
            "#,
        )
        .unwrap();
        assert!(b.check().is_empty());
        let r = b.resolve("a draft answer", 1);
        assert!(matches!(r.reply, ReplySpec::Text(ref t) if t == "no"));
        assert_eq!(r.ttft, Duration::from_millis(20));
        let r = b.resolve("fine", 2);
        assert_eq!(r.status, Some(503));
        let r = b.resolve("fine", 3);
        assert!(matches!(r.reply, ReplySpec::Text(ref t) if t == "yes"));
        assert_eq!(r.status, None);
    }

    #[test]
    fn rule_without_condition_is_an_error() {
        let b: Behavior = toml::from_str("[[rules]]\nthen = { status = 500 }").unwrap();
        assert_eq!(b.check()[0].0, "rules[0]");
    }
}
