//! A simulated model's context window (`context_window = N`): a chat
//! prompt of N tokens or more (counted as llama.cpp-family servers count
//! it, chat template included: [`prompt_tokens`]) is refused as
//! llama-cpp-python refuses it, a 400 `context_length_exceeded` in its
//! words, or, with the `empty_stream_on_overflow` quirk, an empty 200
//! event stream when streamed (llama-cpp-python sends its stream's 200
//! before it reads the prompt, and ends the stream when that fails).
//! `conclave mock` reports the window on llama.cpp's `/props` ([`props`]).

use bytes::Bytes;
use serde_json::{Value, json};

use std::sync::Arc;

use super::{MockResponse, Quirk, Quirks, Simulator, once};
use crate::wire::content_text;

/// Tokens a ChatML template (SmolLM2's, Qwen's) wraps each message in:
/// `<|im_start|>`, the role, a newline, `<|im_end|>`, a newline.
pub const PER_MESSAGE: u64 = 5;

/// `<|im_start|>assistant\n`, which opens the answer.
pub const ANSWER_OPENING: u64 = 3;

/// SmolLM2's default system prompt, added when a request has none:
/// `You are a helpful AI assistant named SmolLM, trained by Hugging Face`.
pub const DEFAULT_SYSTEM: u64 = 16;

/// The prompt's tokens as the simulated server counts them: the messages'
/// text at 4 bytes a token, each message's role markers, the answer's
/// opening, and the default system message (with its markers) when the
/// request has none. Deterministic; llama-cpp-python with SmolLM2 counted
/// 31 tokens for one `hello` (this: 31), 21 with a short system message
/// (22), 30 for an empty message (29).
pub fn prompt_tokens(req: &Value) -> u64 {
    let messages = req
        .get("messages")
        .and_then(Value::as_array)
        .map(Vec::as_slice)
        .unwrap_or_default();
    let text: usize = messages
        .iter()
        .map(|m| content_text(m.get("content")).len())
        .sum();
    let system = messages
        .iter()
        .any(|m| m.get("role").and_then(Value::as_str) == Some("system"));
    let default_system = if system {
        0
    } else {
        DEFAULT_SYSTEM + PER_MESSAGE
    };
    (text as u64).div_ceil(4)
        + PER_MESSAGE * messages.len() as u64
        + ANSWER_OPENING
        + default_system
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
        return Some(super::quirks::empty_stream());
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
    fn conclave_estimates_at_least_what_the_server_counts() {
        let shapes = [
            json!({"model": "m", "messages": [{"role": "user", "content": "hello"}]}),
            json!({"model": "m", "messages": [{"role": "user", "content": ""}]}),
            json!({"model": "m", "messages": [
                {"role": "system", "content": "You are a helpful assistant."},
                {"role": "user", "content": "hello"}]}),
            json!({"model": "m", "messages": [
                {"role": "user", "content": "hello"}, {"role": "assistant", "content": "Hi! How can I help?"},
                {"role": "user", "content": "what is 2+2?"}, {"role": "assistant", "content": "4"},
                {"role": "user", "content": "and 3+3?"}, {"role": "assistant", "content": "6"},
                {"role": "user", "content": "thanks"}]}),
            json!({"model": "m", "messages": [{"role": "user", "content": "alpha bravo ".repeat(700)}]}),
            json!({"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "a b"}]},
                {"role": "assistant", "content": null, "tool_calls": [{"id": "c", "type": "function",
                 "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c", "content": "42"}]}),
        ];
        for v in shapes {
            let served = prompt_tokens(&v);
            let r: ChatRequest = serde_json::from_value(v.clone()).unwrap();
            let estimate = r.billable().input;
            assert!(estimate >= served, "{estimate} < {served}: {v}");
        }
    }

    #[test]
    fn overflow_is_a_400_or_an_empty_stream() {
        let long = json!({"model": "m", "max_tokens": 16,
                          "messages": [{"role": "user", "content": "x".repeat(4000)}]});
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
