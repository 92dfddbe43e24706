//! Asking the gateway one streamed chat request and reading its answer:
//! in-process through its router, or over HTTP to a running gateway
//! (`--url`). Both read the same SSE stream with the gateway's own
//! bounded parser, so what an answer is does not depend on the target.
//!
//! What counts as an answer is decided here, once, for the graded answer
//! and a judge's verdict alike: a stream that ends without a
//! `finish_reason` was cut (a server that interrupts one request for the
//! next ends it with `[DONE]` and no reason), and an answer with no text
//! is no answer; both are errors. An answer capped at `max_tokens`
//! (`finish_reason` `length`) is a real answer and is graded as it is;
//! its reason is kept so the report can say how many were capped.

use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::header::AUTHORIZATION;
use axum::http::{HeaderMap, HeaderValue, Request};
use bytes::Bytes;
use futures::{Stream, StreamExt};
use serde_json::{Value, json};
use tokio::time::Instant;
use tower::ServiceExt;

use super::Sampling;
use crate::upstream::sse::SseParser;

/// The most of an answer kept (and graded), and of one stream event.
pub const MAX_ANSWER: usize = 1 << 20;

/// The most of an error body read.
const MAX_ERROR: usize = 64 << 10;

/// The most of a running gateway's model list or metrics read.
const MAX_GET: usize = 64 << 20;

/// Where the tasks go.
#[derive(Clone)]
pub enum Target {
    /// The gateway's router, in this process.
    Router(Router),
    /// A running gateway, by its base URL (without `/v1`).
    Remote {
        client: reqwest::Client,
        base: String,
    },
}

/// How every request is sent: the API key (as `Authorization: Bearer`),
/// the longest a request may take, end to end, and the sampling settings
/// (`temperature`, `seed`, `max_tokens`) every body carries.
#[derive(Clone)]
pub struct Sender {
    pub target: Target,
    pub key: Option<String>,
    pub timeout: Duration,
    pub sampling: Sampling,
}

/// What one streamed request got.
#[derive(Debug, Default)]
pub struct Asked {
    pub answer: String,
    pub error: Option<String>,
    pub status: u16,
    pub request_id: String,
    pub served_by: Option<String>,
    pub latency_ms: f64,
    /// Time to the first content of the streamed answer.
    pub ttft_ms: Option<f64>,
    /// The stream's usage chunk: prompt and completion tokens.
    pub usage: Option<(u64, u64)>,
    /// The answer's `finish_reason` (`stop`, `length`, …): none when the
    /// stream was cut.
    pub finish_reason: Option<String>,
}

type Chunks = std::pin::Pin<Box<dyn Stream<Item = Result<Bytes, String>> + Send>>;

impl Sender {
    /// Sends one streamed chat request and reads the answer's text and its
    /// time to first content. `user` names the run of the task (route,
    /// id, repeat), as OpenAI's `user` field.
    pub async fn ask(&self, route: &str, messages: &[Value], user: &str) -> Asked {
        let started = Instant::now();
        let mut asked = Asked::default();
        let read = tokio::time::timeout(
            self.timeout,
            self.exchange(route, messages, user, started, &mut asked),
        );
        if read.await.is_err() {
            asked.error = Some(format!(
                "no whole answer within {}",
                humantime::format_duration(self.timeout)
            ));
        }
        asked.latency_ms = started.elapsed().as_secs_f64() * 1000.0;
        asked
    }

    async fn exchange(
        &self,
        route: &str,
        messages: &[Value],
        user: &str,
        started: Instant,
        asked: &mut Asked,
    ) {
        let body = self.body(route, messages, user).to_string();
        let (status, headers, mut chunks) = match self.send(body).await {
            Ok(r) => r,
            Err(e) => {
                asked.error = Some(e);
                return;
            }
        };
        asked.status = status;
        let header = |n: &str| {
            headers
                .get(n)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        };
        asked.request_id = header("x-request-id").unwrap_or_default();
        asked.served_by = header("x-conclave-served-by");
        let ok = (200..300).contains(&status);
        let mut sse = SseParser::new(MAX_ANSWER);
        let mut raw = Vec::new();
        let mut events = 0usize;
        while let Some(chunk) = chunks.next().await {
            let bytes = match chunk {
                Ok(b) => b,
                Err(e) => {
                    asked.error = Some(format!("the answer was cut off: {e}"));
                    break;
                }
            };
            if !ok {
                raw.extend_from_slice(&bytes);
                if raw.len() >= MAX_ERROR {
                    break; // enough of an error body to say what it is
                }
                continue;
            }
            sse.push(bytes);
            loop {
                match sse.next_event() {
                    Ok(Some(data)) => {
                        events += 1;
                        read_event(&data, started, asked);
                    }
                    Ok(None) => break,
                    Err(e) => {
                        asked.error = Some(e.to_string());
                        return;
                    }
                }
            }
        }
        if !ok {
            let message = error_message(&String::from_utf8_lossy(&raw));
            asked.error = Some(format!("HTTP {status}: {message}"));
        } else if events == 0 && asked.error.is_none() {
            asked.error = Some("the answer was not an event stream".into());
        } else if asked.error.is_none() {
            asked.error = unanswered(asked);
        }
    }

    /// A streamed chat body: the route, the messages, the run's `user` and
    /// its sampling settings.
    fn body(&self, route: &str, messages: &[Value], user: &str) -> Value {
        let mut body = json!({"model": route, "messages": messages, "stream": true,
            "stream_options": {"include_usage": true}, "user": user});
        let s = &self.sampling;
        if let Some(t) = s.temperature {
            body["temperature"] = json!(t);
        }
        if let Some(seed) = s.seed {
            body["seed"] = json!(seed);
        }
        if let Some(n) = s.max_tokens {
            body["max_tokens"] = json!(n);
        }
        body
    }

    /// The `Authorization` value, marked sensitive so no debug output of
    /// a request shows it.
    fn bearer(&self) -> Result<Option<HeaderValue>, String> {
        let Some(k) = &self.key else {
            return Ok(None);
        };
        let mut v = HeaderValue::from_str(&format!("Bearer {k}"))
            .map_err(|_| "the key is not a valid header value".to_string())?;
        v.set_sensitive(true);
        Ok(Some(v))
    }

    /// Posts a chat body; the answer's status, headers and body chunks.
    async fn send(&self, body: String) -> Result<(u16, HeaderMap, Chunks), String> {
        let bearer = self.bearer()?;
        match &self.target {
            Target::Router(router) => {
                let mut req = Request::post("/v1/chat/completions")
                    .header("content-type", "application/json");
                if let Some(b) = bearer {
                    req = req.header(AUTHORIZATION, b);
                }
                let req = req.body(Body::from(body)).map_err(|e| e.to_string())?;
                let resp = match router.clone().oneshot(req).await {
                    Ok(r) => r,
                    Err(never) => match never {},
                };
                let (parts, body) = resp.into_parts();
                let chunks = body
                    .into_data_stream()
                    .map(|c| c.map_err(|e| e.to_string()));
                Ok((parts.status.as_u16(), parts.headers, Box::pin(chunks)))
            }
            Target::Remote { client, base } => {
                let mut req = client
                    .post(format!("{base}/v1/chat/completions"))
                    .header("content-type", "application/json")
                    .body(body);
                if let Some(b) = bearer {
                    req = req.header(AUTHORIZATION, b);
                }
                let resp = req.send().await.map_err(describe)?;
                let status = resp.status().as_u16();
                let headers = resp.headers().clone();
                let chunks = resp.bytes_stream().map(|c| c.map_err(describe));
                Ok((status, headers, Box::pin(chunks)))
            }
        }
    }

    /// A GET of the running gateway (`/v1/models`, `/metrics`) with the
    /// key: its body when it answers 2xx.
    pub async fn get(&self, path: &str) -> Result<String, String> {
        let Target::Remote { client, base } = &self.target else {
            return Err("not a running gateway".into());
        };
        let mut req = client
            .get(format!("{base}{path}"))
            .timeout(Duration::from_secs(30));
        if let Some(b) = self.bearer()? {
            req = req.header(AUTHORIZATION, b);
        }
        let resp = req.send().await.map_err(describe)?;
        let status = resp.status();
        let mut body = Vec::new();
        let mut chunks = resp.bytes_stream();
        while let Some(chunk) = chunks.next().await {
            let chunk = chunk.map_err(describe)?;
            if body.len() + chunk.len() > MAX_GET {
                return Err(format!("more than {} MiB", MAX_GET >> 20));
            }
            body.extend_from_slice(&chunk);
        }
        let text = String::from_utf8_lossy(&body);
        if status.is_success() {
            Ok(text.into_owned())
        } else {
            Err(format!(
                "HTTP {}: {}",
                status.as_u16(),
                error_message(&text)
            ))
        }
    }
}

/// An OpenAI-shaped error body's message, or the body's start.
fn error_message(text: &str) -> String {
    serde_json::from_str::<Value>(text)
        .ok()
        .and_then(|v| Some(v.get("error")?.get("message")?.as_str()?.to_string()))
        .unwrap_or_else(|| text.chars().take(200).collect())
}

/// A reqwest error with its cause (which names the refused connection),
/// without its URL (which may hold a password).
fn describe(e: reqwest::Error) -> String {
    let e = e.without_url();
    let mut s = e.to_string();
    let mut source = std::error::Error::source(&e);
    while let Some(cause) = source {
        s.push_str(": ");
        s.push_str(&cause.to_string());
        source = cause.source();
    }
    s
}

/// Why a whole, error-free stream is still no answer: it ended without a
/// `finish_reason` (cut), or it has no text.
fn unanswered(asked: &Asked) -> Option<String> {
    match &asked.finish_reason {
        None if asked.answer.is_empty() => {
            Some("the answer was cut: the stream ended with no text and no finish_reason".into())
        }
        None => Some(format!(
            "the answer was cut after {} bytes: the stream ended without a finish_reason",
            asked.answer.len()
        )),
        Some(why) if asked.answer.trim().is_empty() => {
            Some(format!("an empty answer (finish_reason {why})"))
        }
        Some(_) => None,
    }
}

/// One `data:` event of the gateway's stream: its content delta, its
/// finish reason, its usage, or its error.
fn read_event(data: &[u8], started: Instant, asked: &mut Asked) {
    let Ok(v) = serde_json::from_slice::<Value>(data) else {
        return; // `[DONE]`, or what is not a chunk
    };
    if let Some(err) = v.get("error") {
        let message = err.get("message").and_then(Value::as_str);
        asked.error = Some(message.unwrap_or("an error event").to_string());
    }
    if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
        let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0);
        asked.usage = Some((n("prompt_tokens"), n("completion_tokens")));
    }
    let choice = v
        .get("choices")
        .and_then(Value::as_array)
        .and_then(|c| c.first());
    if let Some(why) = choice
        .and_then(|c| c.get("finish_reason")?.as_str())
        .filter(|w| !w.is_empty())
    {
        // Bounded: a reason is a word, not an answer.
        asked.finish_reason = Some(why.chars().take(40).collect());
    }
    let text = choice.and_then(|c| c.get("delta")?.get("content")?.as_str());
    if let Some(text) = text.filter(|t| !t.is_empty()) {
        asked
            .ttft_ms
            .get_or_insert_with(|| started.elapsed().as_secs_f64() * 1000.0);
        if asked.error.is_none() {
            if asked.answer.len() + text.len() <= MAX_ANSWER {
                asked.answer.push_str(text);
            } else {
                asked.error = Some(format!("the answer is longer than {MAX_ANSWER} bytes"));
            }
        }
    }
}

#[cfg(test)]
mod tests;
