//! `POST /v1/responses` for a mock upstream with `responses = true`: the
//! same simulated answer as chat (text or one function call, usage,
//! timing, failure modes), in the Responses API's shape.
//!
//! - Whole: a `response` object as OpenAI writes it, echoing the request's
//!   settings (`instructions`, `tools` built-in ones included, `reasoning`,
//!   `text`, `tool_choice`, `metadata`, …) as OpenAI does. With `include`
//!   asking for `reasoning.encrypted_content` the output starts with a
//!   `reasoning` item carrying some.
//! - Streamed: the event sequence the SDKs consume, each as
//!   `event: <type>` and `data: {…, "sequence_number": n}`:
//!   `response.created`, `response.in_progress`, per item
//!   `response.output_item.added`, (`response.content_part.added`,
//!   `response.output_text.delta`…, `response.output_text.done`,
//!   `response.content_part.done` | `response.function_call_arguments.delta`…,
//!   `response.function_call_arguments.done`), `response.output_item.done`,
//!   then `response.completed` (`response.incomplete` when the answer was
//!   cut by `max_output_tokens` or its finish reason is `length`). No
//!   `[DONE]`, as OpenAI. The response is announced at once
//!   (`response.created`, `response.in_progress`); `ttft` is the wait
//!   after that for the first output item.
//! - Failures: `error_event` is a `response.failed` event in a stream (a
//!   500 whole), `garbage` and `cut` as for chat.
//!
//! [`chat_view`] reads the request as chat messages, so behaviour rules
//! and the echo see the same text either way.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{Map, Value, json};

use super::answer::{Answer, event_stream, garbage, json_body, split_tokens};
use super::{CUT_GRACE, FailMode, Finish, MockCut, MockResponse, Resolved, error_response, pause};

/// The request as chat messages: `instructions` as a system message, then
/// each input item that has a role (a string `input` is one user message).
pub(super) fn chat_view(req: &Value) -> Value {
    let mut messages = Vec::new();
    if let Some(i) = req.get("instructions").filter(|i| i.is_string()) {
        messages.push(json!({"role": "system", "content": i}));
    }
    match req.get("input") {
        Some(Value::String(s)) => messages.push(json!({"role": "user", "content": s})),
        Some(Value::Array(items)) => {
            for item in items {
                if let Some(role) = item.get("role") {
                    let content = item.get("content").cloned().unwrap_or(Value::Null);
                    messages.push(json!({"role": role, "content": content}));
                }
            }
        }
        _ => {}
    }
    json!({"messages": messages})
}

/// Answers a Responses request with behaviour `b` (`view`: [`chat_view`]).
pub(super) async fn respond(
    b: Resolved,
    req: &Value,
    view: &Value,
    model: &str,
    n: u64,
    guard: Finish,
) -> MockResponse {
    let mut a = Answer::new(&b, view, model, n);
    let cap = req.get("max_output_tokens").and_then(Value::as_u64);
    let mut incomplete = a.finish_reason == "length";
    if let Some(cap) = cap.and_then(|c| usize::try_from(c).ok())
        && a.tool_call.is_none()
        && a.tokens.len() > cap
    {
        a.tokens.truncate(cap);
        a.usage.completion_tokens = cap as u64;
        incomplete = true;
    }
    let r = Shape {
        b,
        a,
        n,
        req: req.clone(),
        model: model.to_owned(),
        incomplete,
    };
    if req.get("stream").and_then(Value::as_bool) == Some(true) {
        return r.stream(guard);
    }
    pause(r.b.ttft + r.a.generation_time(&r.b)).await;
    r.whole(guard)
}

/// One answer and what it is written with.
struct Shape {
    b: Resolved,
    a: Answer,
    n: u64,
    req: Value,
    model: String,
    incomplete: bool,
}

impl Shape {
    fn usage(&self) -> Value {
        if self.b.omit_usage {
            return Value::Null;
        }
        let u = self.a.usage;
        json!({
            "input_tokens": u.prompt_tokens,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": u.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": u.prompt_tokens + u.completion_tokens,
        })
    }

    /// The `response` object: `status` and `output` as given, the
    /// request's settings echoed.
    fn response(&self, status: &str, output: Vec<Value>, usage: Value) -> Value {
        let echo = |k: &str, default: Value| self.req.get(k).cloned().unwrap_or(default);
        let mut m = Map::new();
        m.insert("id".into(), json!(format!("resp_mock_{}", self.n)));
        m.insert("object".into(), json!("response"));
        m.insert("created_at".into(), json!(self.a.created));
        m.insert("status".into(), json!(status));
        m.insert("error".into(), Value::Null);
        let details = (status == "incomplete").then(|| json!({"reason": "max_output_tokens"}));
        m.insert("incomplete_details".into(), details.unwrap_or(Value::Null));
        m.insert("model".into(), json!(self.model));
        m.insert("output".into(), Value::Array(output));
        for (k, default) in [
            ("instructions", Value::Null),
            ("max_output_tokens", Value::Null),
            ("metadata", json!({})),
            ("parallel_tool_calls", json!(true)),
            ("previous_response_id", Value::Null),
            ("reasoning", json!({"effort": null, "summary": null})),
            ("store", json!(true)),
            ("temperature", json!(1.0)),
            ("text", json!({"format": {"type": "text"}})),
            ("tool_choice", json!("auto")),
            ("tools", json!([])),
            ("top_p", json!(1.0)),
            ("truncation", json!("disabled")),
            ("user", Value::Null),
        ] {
            m.insert(k.into(), echo(k, default));
        }
        m.insert("usage".into(), usage);
        for (k, v) in &self.b.extra {
            m.insert(k.clone(), v.clone());
        }
        Value::Object(m)
    }

    fn status(&self) -> &'static str {
        if self.incomplete {
            "incomplete"
        } else {
            "completed"
        }
    }

    /// A `reasoning` item, when `include` asks for encrypted reasoning.
    fn reasoning(&self) -> Option<Value> {
        let include = self.req.get("include").and_then(Value::as_array)?;
        let asked = include
            .iter()
            .any(|i| i.as_str() == Some("reasoning.encrypted_content"));
        asked.then(|| {
            json!({"type": "reasoning", "id": format!("rs_mock_{}", self.n), "summary": [],
                "encrypted_content": format!("mock-encrypted-reasoning-{}", self.n)})
        })
    }

    /// The answer's item, whole (`done`) or as first announced.
    fn item(&self, done: bool) -> Value {
        let status = if done { "completed" } else { "in_progress" };
        match &self.a.tool_call {
            Some((name, args)) => json!({
                "type": "function_call", "id": format!("fc_mock_{}", self.n),
                "call_id": "call_mock_1", "name": name,
                "arguments": if done { args.as_str() } else { "" }, "status": status,
            }),
            None => {
                let content = match done {
                    true => vec![self.part(&self.a.tokens.concat())],
                    false => Vec::new(),
                };
                json!({"type": "message", "id": format!("msg_mock_{}", self.n),
                    "status": status, "role": "assistant", "content": content})
            }
        }
    }

    fn part(&self, text: &str) -> Value {
        json!({"type": "output_text", "text": text, "annotations": [], "logprobs": []})
    }

    fn output(&self) -> Vec<Value> {
        self.reasoning()
            .into_iter()
            .chain(std::iter::once(self.item(true)))
            .collect()
    }

    fn whole(&self, guard: Finish) -> MockResponse {
        match self.b.fail {
            Some(FailMode::Garbage) => return garbage(guard),
            Some(FailMode::ErrorEvent) => {
                let message = self.b.error_message.as_deref();
                let message = message.unwrap_or("mock: simulated server error");
                return guard.done(error_response(500, message, None));
            }
            _ => {}
        }
        let body = self.response(self.status(), self.output(), self.usage());
        json_body(Bytes::from(body.to_string()), self.b.fail, guard)
    }

    /// The events of the answer's item after `response.output_item.added`
    /// and before `response.output_item.done`: (type, fields) each, its
    /// deltas marked.
    fn item_events(&self, index: usize) -> Vec<(bool, &'static str, Value)> {
        let id = match &self.a.tool_call {
            Some(_) => format!("fc_mock_{}", self.n),
            None => format!("msg_mock_{}", self.n),
        };
        let at = json!({"item_id": id, "output_index": index});
        let with = |extra: Value| {
            let mut m = at.clone();
            if let (Value::Object(m), Value::Object(x)) = (&mut m, extra) {
                m.extend(x);
            }
            m
        };
        let mut out = Vec::new();
        match &self.a.tool_call {
            Some((name, args)) => {
                for piece in split_tokens(args) {
                    let delta = with(json!({"delta": piece}));
                    out.push((true, "response.function_call_arguments.delta", delta));
                }
                let done = with(json!({"name": name, "arguments": args}));
                out.push((false, "response.function_call_arguments.done", done));
            }
            None => {
                let part = |text: &str| with(json!({"content_index": 0, "part": self.part(text)}));
                out.push((false, "response.content_part.added", part("")));
                for t in &self.a.tokens {
                    let delta = with(json!({"content_index": 0, "delta": t, "logprobs": []}));
                    out.push((true, "response.output_text.delta", delta));
                }
                let text = self.a.tokens.concat();
                let done = with(json!({"content_index": 0, "text": text, "logprobs": []}));
                out.push((false, "response.output_text.done", done));
                out.push((false, "response.content_part.done", part(&text)));
            }
        }
        out
    }

    fn stream(self, mut guard: Finish) -> MockResponse {
        let body = async_stream::stream! {
            let mut seq = 0u64;
            let mut ev = |kind: &str, fields: Value| {
                let mut m = Map::new();
                m.insert("type".into(), json!(kind));
                if let Value::Object(f) = fields {
                    m.extend(f);
                }
                m.insert("sequence_number".into(), json!(seq));
                seq += 1;
                Bytes::from(format!("event: {kind}\ndata: {}\n\n", Value::Object(m)))
            };
            if self.b.fail == Some(FailMode::Garbage) {
                yield Ok(Bytes::from_static(b"event: response.created\ndata: <html>this is not json</html>\n\n"));
                guard.complete();
                return;
            }
            let open = self.response("in_progress", Vec::new(), Value::Null);
            yield Ok(ev("response.created", json!({"response": open})));
            yield Ok(ev("response.in_progress", json!({"response": open})));
            // Announced at once, as OpenAI does; the first token takes `ttft`.
            pause(self.b.ttft).await;
            if self.b.fail == Some(FailMode::ErrorEvent) {
                let message = self.b.error_message.as_deref().unwrap_or("mock: simulated error event");
                let mut failed = self.response("failed", Vec::new(), Value::Null);
                failed["error"] = json!({"code": "server_error", "message": message});
                yield Ok(ev("response.failed", json!({"response": failed})));
                guard.complete();
                return;
            }
            let mut index = 0;
            if let Some(r) = self.reasoning() {
                yield Ok(ev("response.output_item.added", json!({"output_index": 0, "item": r})));
                yield Ok(ev("response.output_item.done", json!({"output_index": 0, "item": r})));
                index = 1;
            }
            yield Ok(ev("response.output_item.added", json!({"output_index": index, "item": self.item(false)})));
            let gap = (self.b.tokens_per_second > 0.0)
                .then(|| Duration::from_secs_f64(1.0 / self.b.tokens_per_second));
            let events = self.item_events(index);
            let deltas = events.iter().filter(|e| e.0).count();
            let cut_at = (self.b.fail == Some(FailMode::Cut)).then_some(deltas / 2);
            let mut sent = 0;
            for (delta, kind, fields) in events {
                if delta {
                    if cut_at == Some(sent) {
                        guard.complete();
                        tokio::time::sleep(CUT_GRACE).await;
                        yield Err(MockCut);
                        return;
                    }
                    if sent > 0 && let Some(gap) = gap {
                        tokio::time::sleep(gap).await;
                    }
                    sent += 1;
                }
                yield Ok(ev(kind, fields));
            }
            if cut_at.is_some() {
                guard.complete();
                tokio::time::sleep(CUT_GRACE).await;
                yield Err(MockCut);
                return;
            }
            yield Ok(ev("response.output_item.done", json!({"output_index": index, "item": self.item(true)})));
            let status = self.status();
            let end = self.response(status, self.output(), self.usage());
            yield Ok(ev(&format!("response.{status}"), json!({"response": end})));
            guard.complete();
        };
        event_stream(Box::pin(body))
    }
}

#[cfg(test)]
mod tests;
