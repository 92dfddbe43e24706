//! One simulated answer: its text or tool call, usage and timing, sent
//! whole or as SSE chunks (Chat Completions, or legacy Completions with
//! `text` choices), with the behaviour's failure modes.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use crate::wire::{content_text, without_feedback};

use super::continuation::continued;

use super::{
    CUT_GRACE, FailMode, Finish, Interrupt, MockBody, MockCut, MockResponse, ReplySpec, Resolved,
    UsageSpec, error_response, once, pause,
};

/// How an answer is written: legacy `text` choices, streamed, with a
/// usage chunk, ended early by the next request (a quirk).
pub(super) struct How {
    pub legacy: bool,
    pub stream: bool,
    pub include_usage: bool,
    pub interrupt: Option<Interrupt>,
}

/// Answers a chat or legacy completion request with behaviour `b`.
pub(super) async fn respond(
    b: Resolved,
    req: &Value,
    model: &str,
    n: u64,
    how: How,
    guard: Finish,
) -> MockResponse {
    let mut answer = Answer::new(&b, req, model, n);
    answer.legacy = how.legacy;
    if how.stream {
        stream_response(b, answer, how.include_usage, how.interrupt, guard)
    } else {
        pause(b.ttft + answer.generation_time(&b)).await;
        whole_response(&b, &answer, guard)
    }
}

/// All text of a request (messages, or a Completions `prompt`, or an
/// Embeddings `input`), for `when_contains` rules.
pub(super) fn request_text(req: &Value) -> String {
    if let Some(ms) = req.get("messages").and_then(Value::as_array) {
        return ms
            .iter()
            .map(|m| content_text(m.get("content")))
            .collect::<Vec<_>>()
            .join("\n");
    }
    match req.get("prompt").or_else(|| req.get("input")) {
        Some(Value::String(s)) => s.clone(),
        Some(Value::Array(items)) => items
            .iter()
            .filter_map(Value::as_str)
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    }
}

/// The last user message (or the whole prompt of a Completions request),
/// without the rejection notes a chain appends for its next tier: a
/// simulated model echoes what the client wrote, never conclave's
/// feedback (a message that is only notes is passed over).
fn last_user(req: &Value) -> String {
    req.get("messages")
        .and_then(Value::as_array)
        .map(|ms| {
            ms.iter()
                .rev()
                .filter(|m| m.get("role").and_then(Value::as_str) == Some("user"))
                .map(|m| content_text(m.get("content")))
                .find(|t| t.is_empty() || !without_feedback(t).is_empty())
                .map(|t| without_feedback(&t).to_owned())
                .unwrap_or_default()
        })
        .unwrap_or_else(|| without_feedback(&request_text(req)).to_owned())
}

/// How many tokens the answer to `req` has (what a server generates).
pub(super) fn token_count(b: &Resolved, req: &Value, model: &str) -> u64 {
    let a = Answer::new(b, req, model, 0);
    let args = a.tool_call.as_ref().map_or(0, |t| split_tokens(&t.1).len());
    a.tokens.len().max(args) as u64
}

/// The content of one simulated answer (a Responses answer is made of
/// it too, see `super::responses`).
pub(super) struct Answer {
    /// A legacy Completions answer (`text` choices) rather than chat.
    legacy: bool,
    id: String,
    model: String,
    pub(super) created: u64,
    /// Text split into tokens (each word with its leading whitespace).
    pub(super) tokens: Vec<String>,
    /// (name, arguments).
    pub(super) tool_call: Option<(String, String)>,
    pub(super) finish_reason: String,
    pub(super) usage: UsageSpec,
}

impl Answer {
    pub(super) fn new(b: &Resolved, req: &Value, model: &str, n: u64) -> Self {
        let fill = |t: &str| {
            t.replace("{last_user}", &last_user(req))
                .replace("{model}", model)
        };
        let (text, tool_call) = match &b.reply {
            ReplySpec::Echo => (last_user(req), None),
            ReplySpec::Text(t) => (fill(t), None),
            ReplySpec::Json(v) => (v.to_string(), None),
            ReplySpec::Solve(spec) => (super::solve::reply(spec, req, model), None),
            ReplySpec::ToolCall(tc) => {
                let args = match &tc.arguments {
                    Some(Value::String(s)) => s.clone(),
                    Some(v) => v.to_string(),
                    None => "{}".into(),
                };
                (String::new(), Some((tc.name.clone(), args)))
            }
        };
        let text = match b.continue_repeats {
            Some(repeats) if tool_call.is_none() => continued(&text, req, repeats),
            _ => text,
        };
        let tokens = split_tokens(&text);
        let default_finish = if tool_call.is_some() {
            "tool_calls"
        } else {
            "stop"
        };
        let completion = tokens
            .len()
            .max(tool_call.as_ref().map_or(0, |t| split_tokens(&t.1).len()))
            as u64;
        let usage = b.usage.unwrap_or(UsageSpec {
            prompt_tokens: (request_text(req).len() as u64).div_ceil(4),
            completion_tokens: completion,
            cached_tokens: 0,
            cache_write_tokens: 0,
        });
        Answer {
            legacy: false,
            id: format!("chatcmpl-mock-{n}"),
            model: model.to_owned(),
            created: crate::clock::Clock::system().unix_secs(),
            tokens,
            tool_call,
            finish_reason: b
                .finish_reason
                .clone()
                .unwrap_or_else(|| default_finish.to_owned()),
            usage,
        }
    }

    fn object(&self, chunk: bool) -> &'static str {
        match (self.legacy, chunk) {
            (true, _) => "text_completion",
            (false, false) => "chat.completion",
            (false, true) => "chat.completion.chunk",
        }
    }

    pub(super) fn generation_time(&self, b: &Resolved) -> Duration {
        if b.tokens_per_second > 0.0 {
            Duration::from_secs_f64(
                self.tokens.len().saturating_sub(1) as f64 / b.tokens_per_second,
            )
        } else {
            Duration::ZERO
        }
    }

    fn usage_json(&self) -> Value {
        let mut u = json!({
            "prompt_tokens": self.usage.prompt_tokens,
            "completion_tokens": self.usage.completion_tokens,
            "total_tokens": self.usage.prompt_tokens + self.usage.completion_tokens,
        });
        if self.usage.cached_tokens > 0 {
            u["prompt_tokens_details"] = json!({"cached_tokens": self.usage.cached_tokens});
        }
        u
    }

    fn envelope(&self, object: &str, extra: &Map<String, Value>) -> Map<String, Value> {
        let mut m = Map::new();
        m.insert("id".into(), json!(self.id));
        m.insert("object".into(), json!(object));
        m.insert("created".into(), json!(self.created));
        m.insert("model".into(), json!(self.model));
        m.insert("system_fingerprint".into(), json!("fp_conclave_mock"));
        for (k, v) in extra {
            m.insert(k.clone(), v.clone());
        }
        m
    }
}

pub(super) fn split_tokens(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut cur = String::new();
    for c in text.chars() {
        if c.is_whitespace() && !cur.trim().is_empty() {
            out.push(std::mem::take(&mut cur));
        }
        cur.push(c);
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

/// A 200 event stream of `body`.
pub(super) fn event_stream(body: MockBody) -> MockResponse {
    MockResponse {
        status: 200,
        content_type: "text/event-stream",
        retry_after: None,
        body,
    }
}

/// A 200 event stream with nothing in it: llama-cpp-python's answer when
/// the handler fails after the response began (streamed automatic tool
/// choice, a prompt longer than the context).
pub(super) fn empty_stream() -> MockResponse {
    event_stream(Box::pin(futures::stream::empty()))
}

/// A 200 that is not an answer: a proxy's HTML error page.
pub(super) fn garbage(mut guard: Finish) -> MockResponse {
    guard.complete();
    MockResponse {
        status: 200,
        content_type: "text/html",
        retry_after: None,
        body: once(Bytes::from_static(
            b"<html><body>502 Bad Gateway</body></html>",
        )),
    }
}

fn whole_response(b: &Resolved, a: &Answer, guard: Finish) -> MockResponse {
    match b.fail {
        Some(FailMode::Garbage) => return garbage(guard),
        Some(FailMode::ErrorEvent) => {
            let message = b
                .error_message
                .as_deref()
                .unwrap_or("mock: simulated server error");
            return guard.done(error_response(500, message, None));
        }
        _ => {}
    }
    let mut message = Map::new();
    message.insert("role".into(), json!("assistant"));
    match &a.tool_call {
        Some((name, args)) => {
            message.insert("content".into(), Value::Null);
            message.insert(
                "tool_calls".into(),
                json!([{"id": "call_mock_1", "type": "function", "function": {"name": name, "arguments": args}}]),
            );
        }
        None => {
            message.insert("content".into(), json!(a.tokens.concat()));
        }
    }
    let mut m = a.envelope(a.object(false), &b.extra);
    let choice = if a.legacy {
        json!({"index": 0, "text": a.tokens.concat(), "logprobs": null, "finish_reason": a.finish_reason})
    } else {
        json!({"index": 0, "message": message, "logprobs": null, "finish_reason": a.finish_reason})
    };
    m.insert("choices".into(), json!([choice]));
    m.insert("usage".into(), a.usage_json());
    json_body(Bytes::from(Value::Object(m).to_string()), b.fail, guard)
}

/// A whole JSON answer, or its first half and a cut (`fail = "cut"`).
pub(super) fn json_body(body: Bytes, fail: Option<FailMode>, mut guard: Finish) -> MockResponse {
    if fail == Some(FailMode::Cut) {
        let half = body.slice(..body.len() / 2);
        let s = async_stream::stream! {
            yield Ok(half);
            guard.complete();
            tokio::time::sleep(CUT_GRACE).await;
            yield Err(MockCut);
        };
        return MockResponse {
            status: 200,
            content_type: "application/json",
            retry_after: None,
            body: Box::pin(s),
        };
    }
    guard.complete();
    MockResponse {
        status: 200,
        content_type: "application/json",
        retry_after: None,
        body: once(body),
    }
}

fn sse(v: &Value) -> Bytes {
    Bytes::from(format!("data: {v}\n\n"))
}

/// The pieces sent before the behaviour's failure, and whether it fails:
/// `fail = "cut"` halfway through, or anything after `fail_after_chars`
/// characters (the piece it falls in split there).
fn break_after(pieces: Vec<(String, bool)>, b: &Resolved) -> (Vec<(String, bool)>, bool) {
    let Some(limit) = b.fail_after_chars else {
        if b.fail == Some(FailMode::Cut) {
            let half = pieces.len() / 2;
            return (pieces.into_iter().take(half).collect(), true);
        }
        return (pieces, false);
    };
    let mut out = Vec::new();
    let mut left = limit;
    for (text, args) in pieces {
        let n = text.chars().count();
        if n > left {
            let head: String = text.chars().take(left).collect();
            if !head.is_empty() {
                out.push((head, args));
            }
            return (out, true);
        }
        left -= n;
        out.push((text, args));
    }
    // The answer is no longer than the limit: it still breaks, at its end.
    (out, true)
}

fn stream_response(
    b: Resolved,
    a: Answer,
    include_usage: bool,
    interrupt: Option<Interrupt>,
    mut guard: Finish,
) -> MockResponse {
    // Another request arrived: `[DONE]` at once, no finish_reason.
    let cut_short = move || interrupt.as_ref().is_some_and(Interrupt::interrupted);
    let body = async_stream::stream! {
        pause(b.ttft).await;
        match b.fail.filter(|_| b.fail_after_chars.is_none()) {
            Some(FailMode::Garbage) => {
                yield Ok(Bytes::from_static(b"data: <html>this is not json</html>\n\n"));
                guard.complete();
                return;
            }
            Some(FailMode::ErrorEvent) => {
                let message = b.error_message.as_deref().unwrap_or("mock: simulated error event");
                yield Ok(sse(&json!({"error": {"message": message, "type": "server_error"}})));
                guard.complete();
                return;
            }
            _ => {}
        }
        let chunk = |delta: Value, finish: Value, usage: Option<Value>| {
            let mut m = a.envelope(a.object(true), &b.extra);
            let choice = if a.legacy {
                let text = delta.get("content").cloned().unwrap_or(json!(""));
                json!({"index": 0, "text": text, "logprobs": null, "finish_reason": finish})
            } else {
                json!({"index": 0, "delta": delta, "logprobs": null, "finish_reason": finish})
            };
            m.insert("choices".into(), json!([choice]));
            if include_usage {
                m.insert("usage".into(), usage.unwrap_or(Value::Null));
            }
            sse(&Value::Object(m))
        };
        let gap = if b.tokens_per_second > 0.0 {
            Some(Duration::from_secs_f64(1.0 / b.tokens_per_second))
        } else {
            None
        };
        if !a.legacy {
            yield Ok(chunk(json!({"role": "assistant", "content": ""}), Value::Null, None));
        }
        // (text, is it tool-call arguments) after a tool call's header.
        let (header, pieces): (Option<Value>, Vec<(String, bool)>) = match &a.tool_call {
            Some((name, args)) => (
                Some(json!({"tool_calls": [{"index": 0, "id": "call_mock_1", "type": "function", "function": {"name": name, "arguments": ""}}]})),
                split_tokens(args).into_iter().map(|p| (p, true)).collect(),
            ),
            None => (None, a.tokens.iter().map(|t| (t.clone(), false)).collect()),
        };
        let delta = |text: &str, args: bool| if args {
            json!({"tool_calls": [{"index": 0, "function": {"arguments": text}}]})
        } else {
            json!({"content": text})
        };
        let (pieces, broke) = break_after(pieces, &b);
        if let Some(h) = header {
            yield Ok(chunk(h, Value::Null, None));
        }
        for (i, (text, args)) in pieces.into_iter().enumerate() {
            if i > 0 && let Some(gap) = gap {
                tokio::time::sleep(gap).await;
            }
            if cut_short() {
                yield Ok(Bytes::from_static(b"data: [DONE]\n\n"));
                guard.complete();
                return;
            }
            yield Ok(chunk(delta(&text, args), Value::Null, None));
        }
        if broke {
            match b.fail.unwrap_or(FailMode::Cut) {
                FailMode::ErrorEvent => {
                    let message = b.error_message.as_deref().unwrap_or("mock: simulated error event");
                    yield Ok(sse(&json!({"error": {"message": message, "type": "server_error"}})));
                    guard.complete();
                }
                FailMode::Hang => std::future::pending::<()>().await,
                FailMode::Garbage => {
                    yield Ok(Bytes::from_static(b"data: <html>this is not json</html>\n\n"));
                    guard.complete();
                }
                FailMode::Cut => {
                    guard.complete();
                    tokio::time::sleep(CUT_GRACE).await;
                    yield Err(MockCut);
                }
            }
            return;
        }
        let usage_here = include_usage && b.usage_in_final_chunk;
        yield Ok(chunk(json!({}), json!(a.finish_reason), usage_here.then(|| a.usage_json())));
        if include_usage && !b.usage_in_final_chunk {
            let mut m = a.envelope(a.object(true), &b.extra);
            m.insert("choices".into(), json!([]));
            m.insert("usage".into(), a.usage_json());
            yield Ok(sse(&Value::Object(m)));
        }
        yield Ok(Bytes::from_static(b"data: [DONE]\n\n"));
        guard.complete();
    };
    event_stream(Box::pin(body))
}

#[cfg(test)]
mod tests;
