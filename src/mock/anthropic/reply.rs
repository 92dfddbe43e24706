//! One simulated answer in Anthropic's shapes, built from its documented
//! examples. Whole: a `message` object (`content` blocks: a `thinking`
//! block with its `signature` when the request enables thinking, then
//! `text` or one `tool_use`; `stop_reason`; `usage` with
//! `cache_creation_input_tokens` and `cache_read_input_tokens`).
//! Streamed: `message_start`, per block `content_block_start`,
//! `content_block_delta`s (`thinking_delta` then `signature_delta`,
//! `text_delta`, `input_json_delta`) and `content_block_stop`, a `ping`
//! after the first block starts and every [`PING`] while tokens are
//! slower than that, `message_delta` (`stop_reason`, cumulative usage),
//! `message_stop`; each as `event: TYPE` and `data: {…}`.
//!
//! Failures: `error_event` is an `error` event (`overloaded_error`) in
//! place of the answer (a 500 `api_error` whole), `garbage` a 200 HTML
//! page, `cut` a body that breaks off halfway. A request's `max_tokens`
//! below the answer's length cuts it there (`stop_reason: "max_tokens"`).

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Value, json};

use super::super::answer::{Answer, event_stream, garbage, json_body, split_tokens};
use super::super::{CUT_GRACE, FailMode, Finish, MockCut, MockResponse, Resolved, pause};
use super::error;

/// How often a stream sends `ping` while the next token is slower.
pub const PING: Duration = Duration::from_millis(200);

/// What a thinking block says.
const THOUGHT: &str = "Let me think this through step by step.";

/// Answers a Messages request with behaviour `b` (`view`: the request as
/// chat messages).
pub(super) async fn respond(
    b: Resolved,
    req: &Value,
    view: &Value,
    model: &str,
    n: u64,
    guard: Finish,
) -> MockResponse {
    let mut a = Answer::new(&b, view, model, n);
    let mut stop = stop_reason(&a.finish_reason);
    let cap = req.get("max_tokens").and_then(Value::as_u64);
    if let Some(cap) = cap.and_then(|c| usize::try_from(c).ok())
        && a.tool_call.is_none()
        && a.tokens.len() > cap
    {
        a.tokens.truncate(cap);
        a.usage.completion_tokens = cap as u64;
        stop = "max_tokens".into();
    }
    let thinking = req.pointer("/thinking/type").and_then(Value::as_str) == Some("enabled");
    let r = Shape {
        id: format!("msg_mock_{n}"),
        model: model.to_owned(),
        thinking: thinking.then(|| format!("mock-signature-{n}")),
        stop,
        b,
        a,
    };
    if req.get("stream").and_then(Value::as_bool) == Some(true) {
        return r.stream(guard);
    }
    pause(r.b.ttft + r.a.generation_time(&r.b)).await;
    r.whole(guard)
}

/// Anthropic's `stop_reason` for a chat `finish_reason`.
fn stop_reason(finish: &str) -> String {
    match finish {
        "stop" => "end_turn",
        "length" => "max_tokens",
        "tool_calls" | "function_call" => "tool_use",
        "content_filter" => "refusal",
        other => other,
    }
    .to_owned()
}

struct Shape {
    id: String,
    model: String,
    /// The thinking block's signature, when thinking is on.
    thinking: Option<String>,
    stop: String,
    b: Resolved,
    a: Answer,
}

impl Shape {
    /// Usage as Anthropic counts it: `input_tokens` without the cached
    /// ones, which are counted apart.
    fn usage(&self, output: u64) -> Value {
        let u = self.a.usage;
        let input = u
            .prompt_tokens
            .saturating_sub(u.cached_tokens)
            .saturating_sub(u.cache_write_tokens);
        json!({
            "input_tokens": input,
            "cache_creation_input_tokens": u.cache_write_tokens,
            "cache_read_input_tokens": u.cached_tokens,
            "output_tokens": output,
        })
    }

    fn tool_input(&self) -> Option<(&str, Value, &str)> {
        let (name, args) = self.a.tool_call.as_ref()?;
        let input = serde_json::from_str(args).unwrap_or_else(|_| json!({}));
        Some((name, input, args))
    }

    fn whole(self, guard: Finish) -> MockResponse {
        match self.b.fail {
            Some(FailMode::Garbage) => return garbage(guard),
            Some(FailMode::ErrorEvent) => {
                let msg = self
                    .b
                    .error_message
                    .as_deref()
                    .unwrap_or("Internal server error");
                return guard.done(error(500, msg, None));
            }
            _ => {}
        }
        let mut content = Vec::new();
        if let Some(sig) = &self.thinking {
            content.push(json!({"type": "thinking", "thinking": THOUGHT, "signature": sig}));
        }
        match self.tool_input() {
            Some((name, input, _)) => content.push(
                json!({"type": "tool_use", "id": "toolu_mock_1", "name": name, "input": input}),
            ),
            None => content.push(json!({"type": "text", "text": self.a.tokens.concat()})),
        }
        let body = json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": content,
            "stop_reason": self.stop,
            "stop_sequence": null,
            "usage": self.usage(self.a.usage.completion_tokens),
        });
        json_body(Bytes::from(body.to_string()), self.b.fail, guard)
    }

    fn stream(self, mut guard: Finish) -> MockResponse {
        let body = async_stream::stream! {
            let b = &self.b;
            pause(b.ttft).await;
            match b.fail {
                Some(FailMode::Garbage) => {
                    yield Ok(Bytes::from_static(b"event: message_start\ndata: <html>this is not json</html>\n\n"));
                    guard.complete();
                    return;
                }
                Some(FailMode::ErrorEvent) => {
                    let msg = b.error_message.as_deref().unwrap_or("Overloaded");
                    yield Ok(event("error", &super::error_body(529, msg)));
                    guard.complete();
                    return;
                }
                _ => {}
            }
            let mut start = json!({
                "id": self.id, "type": "message", "role": "assistant", "model": self.model,
                "content": [], "stop_reason": null, "stop_sequence": null, "usage": self.usage(1),
            });
            if b.omit_usage {
                start["usage"] = json!({"input_tokens": 0, "output_tokens": 0});
            }
            yield Ok(event("message_start", &json!({"type": "message_start", "message": start})));
            let gap = (b.tokens_per_second > 0.0)
                .then(|| Duration::from_secs_f64(1.0 / b.tokens_per_second));
            // (block start, deltas) in order.
            let mut blocks: Vec<(Value, Vec<Value>)> = Vec::new();
            if let Some(sig) = &self.thinking {
                let mut d: Vec<Value> = split_tokens(THOUGHT).into_iter()
                    .map(|t| json!({"type": "thinking_delta", "thinking": t})).collect();
                d.push(json!({"type": "signature_delta", "signature": sig}));
                blocks.push((json!({"type": "thinking", "thinking": ""}), d));
            }
            match self.tool_input() {
                Some((name, _, args)) => blocks.push((
                    json!({"type": "tool_use", "id": "toolu_mock_1", "name": name, "input": {}}),
                    split_tokens(args).into_iter()
                        .map(|p| json!({"type": "input_json_delta", "partial_json": p})).collect(),
                )),
                None => blocks.push((
                    json!({"type": "text", "text": ""}),
                    self.a.tokens.iter().map(|t| json!({"type": "text_delta", "text": t})).collect(),
                )),
            }
            let total: usize = blocks.iter().map(|(_, d)| d.len()).sum();
            let cut_at = (b.fail == Some(FailMode::Cut)).then_some(total / 2);
            let mut sent = 0;
            for (index, (block, deltas)) in blocks.into_iter().enumerate() {
                yield Ok(event("content_block_start", &json!({"type": "content_block_start", "index": index, "content_block": block})));
                if index == 0 {
                    yield Ok(event("ping", &json!({"type": "ping"})));
                }
                for delta in deltas {
                    if cut_at == Some(sent) {
                        guard.complete();
                        tokio::time::sleep(CUT_GRACE).await;
                        yield Err(MockCut);
                        return;
                    }
                    if sent > 0 && let Some(mut left) = gap {
                        while left > PING {
                            tokio::time::sleep(PING).await;
                            left -= PING;
                            yield Ok(event("ping", &json!({"type": "ping"})));
                        }
                        tokio::time::sleep(left).await;
                    }
                    sent += 1;
                    yield Ok(event("content_block_delta", &json!({"type": "content_block_delta", "index": index, "delta": delta})));
                }
                yield Ok(event("content_block_stop", &json!({"type": "content_block_stop", "index": index})));
            }
            if cut_at.is_some() {
                guard.complete();
                tokio::time::sleep(CUT_GRACE).await;
                yield Err(MockCut);
                return;
            }
            let mut delta = json!({
                "type": "message_delta",
                "delta": {"stop_reason": self.stop, "stop_sequence": null},
                "usage": self.usage(self.a.usage.completion_tokens),
            });
            if b.omit_usage {
                delta["usage"] = json!({"output_tokens": 0});
            }
            yield Ok(event("message_delta", &delta));
            yield Ok(event("message_stop", &json!({"type": "message_stop"})));
            guard.complete();
        };
        event_stream(Box::pin(body))
    }
}

/// One SSE event as Anthropic writes it.
fn event(kind: &str, data: &Value) -> Bytes {
    Bytes::from(format!("event: {kind}\ndata: {data}\n\n"))
}
