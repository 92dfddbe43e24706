//! A simulated model's context window (`context_window = N`): a chat
//! prompt of N tokens or more (counted as llama.cpp-family servers count
//! it, chat template included: [`prompt_tokens`]) is refused as
//! llama-cpp-python refuses it, a 400 `context_length_exceeded` in its
//! words, or, with the `empty_stream_on_overflow` quirk, an empty 200
//! event stream when streamed (llama-cpp-python sends its stream's 200
//! before it reads the prompt, and ends the stream when that fails).
//! `conclave mock` reports the window on llama.cpp's `/props` ([`props`]),
//! and counts tokens on the endpoints of the server kind it plays
//! ([`Tokenizer`]; all of them by default) by its own rule
//! ([`text_tokens`]), which is not conclave's estimate: prose counts fewer
//! tokens than estimated, markdown more.

use bytes::Bytes;
use serde_json::{Value, json};

use std::sync::Arc;
use std::sync::atomic::Ordering;

use super::{MockResponse, Quirk, Quirks, Simulator, once};
use crate::wire::content_text;

/// SmolLM2's default system prompt, added when a request has none.
pub const DEFAULT_SYSTEM: &str =
    "You are a helpful AI assistant named SmolLM, trained by Hugging Face";

/// The token-counting endpoints a simulated server serves (all by
/// default; a test picks one server's to play it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Tokenizer {
    /// Every one below.
    #[default]
    All,
    /// llama.cpp's `POST /apply-template` and `POST /tokenize`
    /// (`content`).
    LlamaCpp,
    /// vLLM's `POST /tokenize` (`messages` → `count`, `max_model_len`).
    Vllm,
    /// llama-cpp-python's `POST /extras/tokenize` and
    /// `/extras/tokenize/count` (`input`).
    LlamaCppPython,
    /// None (Ollama, a cloud API).
    None,
}

impl Tokenizer {
    fn serves(self, t: Tokenizer) -> bool {
        self == Tokenizer::All || self == t
    }
}

/// Tokens in `text` by the simulated tokenizer, a rule unlike conclave's
/// bytes / 4 estimate: each run of letters and digits is one token, each
/// other visible character one, a special marker (`<|im_start|>`) one, and
/// whitespace none. English prose counts fewer tokens than the estimate
/// (`alpha bravo ` is 2, estimated 3), markdown tables and code more
/// (`|---|---|` is 9, estimated 3), as real tokenizers do.
pub fn text_tokens(text: &str) -> u64 {
    let mut n = 0u64;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        if let Some(after) = rest.strip_prefix("<|")
            && let Some(end) = after.find("|>")
            && end <= 32
            && !after[..end].contains(char::is_whitespace)
        {
            n += 1;
            rest = &after[end + 2..];
            continue;
        }
        let len = if c.is_alphanumeric() {
            n += 1;
            rest.find(|c: char| !c.is_alphanumeric())
                .unwrap_or(rest.len())
        } else {
            n += u64::from(!c.is_whitespace());
            c.len_utf8()
        };
        rest = &rest[len..];
    }
    n
}

/// The chat prompt a ChatML template (SmolLM2's, Qwen's) renders for
/// `req`: its messages, SmolLM2's default system message first when it has
/// none, and the answer's opening (what llama.cpp's `/apply-template`
/// answers).
pub fn render(req: &Value) -> String {
    let messages = req
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let system = messages
        .iter()
        .any(|m| m.get("role").and_then(Value::as_str) == Some("system"));
    let mut out = String::new();
    if !system {
        out.push_str(&format!("<|im_start|>system\n{DEFAULT_SYSTEM}<|im_end|>\n"));
    }
    for m in messages {
        let role = m.get("role").and_then(Value::as_str).unwrap_or("user");
        let text = content_text(m.get("content"));
        out.push_str(&format!("<|im_start|>{role}\n{text}<|im_end|>\n"));
    }
    out.push_str("<|im_start|>assistant\n");
    out
}

/// The prompt's tokens as the simulated server counts them: its rendered
/// chat prompt ([`render`]) by [`text_tokens`]. One `hello` is 22.
pub fn prompt_tokens(req: &Value) -> u64 {
    text_tokens(&render(req))
}

/// The answer of a server whose window `window` the chat request `req`
/// overflows, if it does.
pub(super) fn overflow(
    window: Option<u64>,
    req: &Value,
    stream: bool,
    quirks: &Quirks,
) -> Option<MockResponse> {
    let window = window?;
    let prompt = prompt_tokens(req);
    if prompt < window {
        return None;
    }
    if stream && quirks.has(Quirk::EmptyStreamOnOverflow) {
        return Some(super::answer::empty_stream());
    }
    // llama-cpp-python's words, `None` for an unset max_tokens included.
    let cap = req.get("max_tokens").and_then(Value::as_u64);
    let message = format!(
        "This model's maximum context length is {window} tokens. However, you requested {} \
         tokens ({prompt} in the messages, {} in the completion). Please reduce the length of \
         the messages or completion.",
        prompt + cap.unwrap_or(0),
        cap.map_or_else(|| "None".to_owned(), |c| c.to_string()),
    );
    let body = json!({"error": {"message": message, "type": "invalid_request_error",
                                "param": "messages", "code": "context_length_exceeded"}});
    Some(MockResponse {
        status: 400,
        content_type: "application/json",
        retry_after: None,
        body: once(Bytes::from(body.to_string())),
    })
}

impl Simulator {
    /// The same simulator, serving `t`'s counting endpoints only.
    pub fn with_tokenizer(mut self, t: Tokenizer) -> Self {
        self.tokenizer = t;
        self
    }

    /// Whether it serves `t`'s counting endpoints.
    pub fn counts_as(&self, t: Tokenizer) -> bool {
        self.tokenizer.serves(t)
    }

    /// A chat request's prompt tokens, as a server that counts chats
    /// (llama.cpp, vLLM) answers; `None` when it serves neither.
    pub fn count_prompt(&self, req: &Value) -> Option<u64> {
        if !self.counts_as(Tokenizer::LlamaCpp) && !self.counts_as(Tokenizer::Vllm) {
            return None;
        }
        self.stats.counts.fetch_add(1, Ordering::Relaxed);
        Some(prompt_tokens(req))
    }

    /// Plain text's tokens, as llama-cpp-python's `/extras/tokenize`
    /// answers; `None` when it does not serve it.
    pub fn count_text(&self, text: &str) -> Option<u64> {
        if !self.counts_as(Tokenizer::LlamaCppPython) {
            return None;
        }
        self.stats.counts.fetch_add(1, Ordering::Relaxed);
        Some(text_tokens(text))
    }

    /// `model`'s configured context window.
    pub fn context_window(&self, model: &str) -> Option<u64> {
        self.models.get(model)?.context_window
    }

    /// The first model with a context window, and its window (what a
    /// llama-server without `?model=` reports on `/props`).
    pub fn first_window(&self) -> Option<(String, u64)> {
        self.models
            .iter()
            .find_map(|(m, b)| Some((m.clone(), b.context_window?)))
    }

    /// Loads `model` as llama-swap would for any request naming it (its
    /// `/upstream/<model>/…` passthrough included).
    pub async fn load(self: &Arc<Self>, model: &str) {
        self.swap_to(model).await;
    }
}

/// llama.cpp's `GET /props` for a model with window `n_ctx`.
pub fn props(model: &str, n_ctx: u64) -> Value {
    json!({
        "default_generation_settings": {"id": 0, "n_ctx": n_ctx, "is_processing": false,
                                        "params": {"n_predict": -1, "temperature": 0.8}},
        // It answers any number at once; a local lane takes this many.
        "total_slots": 4,
        "model_path": format!("/models/{model}.gguf"),
        "model_alias": model,
        "chat_template": "{% for message in messages %}<|im_start|>{{ message['role'] }}\n{{ message['content'] }}<|im_end|>\n{% endfor %}",
        "build_info": "conclave-mock",
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::ChatRequest;

    #[test]
    fn the_mock_counts_unlike_conclaves_estimate() {
        assert_eq!(text_tokens("alpha bravo "), 2);
        assert_eq!(text_tokens("|---|---|"), 9);
        assert_eq!(text_tokens("<|im_start|>user\nhi<|im_end|>"), 4);
        assert_eq!(text_tokens("<| not special |>"), 6);
        assert_eq!(text_tokens("héllo wörld, 42!"), 5);
        assert_eq!(text_tokens(""), 0);
        let one = json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]});
        assert_eq!(prompt_tokens(&one), 22);
        let estimate = |v: &Value| {
            let r: ChatRequest = serde_json::from_value(v.clone()).unwrap();
            r.billable().input
        };
        // Prose: the estimate is well over the count.
        let prose = json!({"model": "m", "messages": [{"role": "user", "content": "alpha bravo ".repeat(700)}]});
        assert!(
            estimate(&prose) * 10 > prompt_tokens(&prose) * 14,
            "{} {}",
            estimate(&prose),
            prompt_tokens(&prose)
        );
        // A markdown table: under it.
        let table =
            json!({"model": "m", "messages": [{"role": "user", "content": "|-|-|\n".repeat(700)}]});
        assert!(
            estimate(&table) * 10 < prompt_tokens(&table) * 7,
            "{} {}",
            estimate(&table),
            prompt_tokens(&table)
        );
        // The rendered prompt is what is counted.
        assert_eq!(prompt_tokens(&prose), text_tokens(&render(&prose)));
        let sys = json!({"model": "m", "messages": [{"role": "system", "content": "be brief"},
                         {"role": "user", "content": [{"type": "text", "text": "a b"}]}]});
        assert_eq!(
            render(&sys),
            "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\na b<|im_end|>\n<|im_start|>assistant\n"
        );
    }

    #[test]
    fn overflow_is_a_400_or_an_empty_stream() {
        let long = json!({"model": "m", "max_tokens": 16,
                          "messages": [{"role": "user", "content": "x ".repeat(4000)}]});
        let q = Quirks::new(&[Quirk::EmptyStreamOnOverflow]);
        assert!(overflow(None, &long, false, &q).is_none());
        assert!(overflow(Some(100_000), &long, false, &q).is_none());
        let whole = overflow(Some(512), &long, false, &q).unwrap();
        assert_eq!(whole.status, 400);
        let streamed = overflow(Some(512), &long, true, &q).unwrap();
        assert_eq!(
            (streamed.status, streamed.content_type),
            (200, "text/event-stream")
        );
        let plain = overflow(Some(512), &long, true, &Quirks::default()).unwrap();
        assert_eq!(plain.status, 400);
        // Exactly at the window is too long (the server needs room for a token).
        let at = prompt_tokens(&long);
        assert!(overflow(Some(at), &long, false, &q).is_some());
        assert!(overflow(Some(at + 1), &long, false, &q).is_none());
    }
}
