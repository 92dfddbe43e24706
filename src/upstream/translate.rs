//! [`Translate`]: a transport that speaks chat completions in front of one
//! that speaks Anthropic's Messages API (the HTTP one, or the simulator
//! with `api = "anthropic"`), using `wire::anthropic`'s translation.
//!
//! A chat body becomes a Messages body ([`to_messages`], with the model's
//! `max_tokens` when the request sets none) sent to
//! [`Endpoint::MESSAGES`]; what comes back is made to look exactly like an
//! OpenAI upstream's answer, so [`super::decode`] and [`super::relay`]
//! read it with every bound, deadline and redaction they apply:
//!
//! - a whole 200 `message` becomes a `chat.completion` body (one that is
//!   not a `message` goes on as it came, and decoding finds it is not an
//!   answer); a body past [`MAX_RESPONSE`] fails the read;
//! - a 200 event stream is parsed ([`SseParser`], bounded by
//!   [`MAX_EVENT`]) and fed to [`ChunkMaker`], each chunk re-framed as
//!   `data: {chunk}`, `data: [DONE]` after `message_stop`; an event that
//!   makes no chunk (`ping`, a block's start or stop) goes on as an empty
//!   `data:` event, which the relay skips but counts as the stream being
//!   alive (its idle timer restarts); an `error` event becomes an OpenAI
//!   `{"error": …}` event (the attempt fails as on an OpenAI stream), an
//!   event that is not Messages' an empty object (not a chunk: invalid);
//! - an error status keeps its status and `Retry-After`, its Anthropic
//!   body (`{"type":"error","error":{"type","message"}}`) rewritten as
//!   OpenAI's (`code` is Anthropic's error type).
//!
//! A chat request Messages cannot express answers 400 `untranslatable`
//! without a call; Completions, Embeddings and the Responses API are 400s
//! too (an Anthropic upstream has none of them). The bodies of Anthropic's
//! own endpoints (Messages, `count_tokens`: [`Family::Anthropic`]) pass
//! through verbatim (the native path).

use std::collections::HashMap;
use std::sync::Arc;

use async_trait::async_trait;
use bytes::{Bytes, BytesMut};
use futures::StreamExt;
use serde_json::{Map, Value, json};

use super::exchange::MAX_EVENT;
use super::served::{rejected, unsupported};
use super::sse::SseParser;
use super::{BodyStream, BoxError, CallIds, RawResponse, Transport, TransportError};
use crate::clock::Clock;
use crate::config::DEFAULT_MAX_TOKENS;
use crate::labels::Warm;
use crate::mock::Simulator;
use crate::wire::anthropic::{ChunkMaker, StreamFault, Translation, to_completion, to_messages};
use crate::wire::{Endpoint, Family, MAX_RESPONSE};

/// The largest error body rewritten (a longer one goes on as it came).
const MAX_ERROR_BODY: usize = 64 * 1024;

pub struct Translate {
    inner: Box<dyn Transport>,
    /// `max_tokens` by the model name sent upstream.
    max_tokens: HashMap<String, u32>,
    /// Dates a translated answer (`created`).
    clock: Clock,
}

impl Translate {
    pub fn new(inner: Box<dyn Transport>, max_tokens: HashMap<String, u32>, clock: Clock) -> Self {
        Translate {
            inner,
            max_tokens,
            clock,
        }
    }

    async fn chat(&self, body: &[u8], ids: &CallIds<'_>) -> Result<RawResponse, TransportError> {
        let Ok(chat) = serde_json::from_slice::<Map<String, Value>>(body) else {
            return Ok(rejected("the request is not a JSON object", None));
        };
        let model = chat
            .get("model")
            .and_then(Value::as_str)
            .unwrap_or_default();
        let max = self
            .max_tokens
            .get(model)
            .copied()
            .unwrap_or(DEFAULT_MAX_TOKENS);
        let (messages, t) = match to_messages(&chat, model, u64::from(max)) {
            Ok(m) => m,
            Err(u) => return Ok(rejected(&u.to_string(), Some(&u.field))),
        };
        let body = serde_json::to_vec(&messages)
            .map(Bytes::from)
            .map_err(|e| TransportError {
                reason: format!("the translated request could not be written: {e}"),
                connected: false,
                source: None,
            })?;
        let resp = self.inner.send(Endpoint::MESSAGES, body, ids).await?;
        let created = self.clock.unix_secs();
        let streamed = t.stream;
        let body = match (resp.status, t.stream) {
            (200..=299, true) => stream(resp.body, t, created),
            (200..=299, false) => whole(resp.body, t, created),
            _ => error(resp.body),
        };
        // The body is now what the call asked for, an OpenAI stream or
        // whole answer, whatever Anthropic's was.
        Ok(RawResponse {
            body,
            json: !streamed,
            ..resp
        })
    }
}

#[async_trait]
impl Transport for Translate {
    async fn send(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        ids: &CallIds<'_>,
    ) -> Result<RawResponse, TransportError> {
        if endpoint == Endpoint::CHAT {
            return self.chat(&body, ids).await;
        }
        match endpoint.family() {
            Family::Anthropic => self.inner.send(endpoint, body, ids).await,
            Family::OpenAi => Ok(unsupported(endpoint)),
        }
    }

    fn loaded(&self) -> Option<Vec<String>> {
        self.inner.loaded()
    }

    async fn context_window(
        &self,
        model: &str,
        warm: Warm,
        lane: &std::sync::Arc<super::lane::Gate>,
    ) -> Option<u64> {
        self.inner.context_window(model, warm, lane).await
    }

    fn known_window(&self, model: &str, warm: Warm) -> Option<Option<u64>> {
        self.inner.known_window(model, warm)
    }

    async fn server_kind(&self) -> super::server_kind::ServerKind {
        self.inner.server_kind().await
    }

    async fn ready(&self) -> Result<(), String> {
        self.inner.ready().await
    }

    async fn check(&self, path: &str) -> Result<(), String> {
        self.inner.check(path).await
    }

    fn simulator(&self) -> Option<Arc<Simulator>> {
        self.inner.simulator()
    }
}

fn fail(reason: String) -> BoxError {
    reason.into()
}

/// Reads up to `limit` bytes; `Err` past it.
async fn read(mut body: BodyStream, limit: usize) -> Result<BytesMut, BoxError> {
    let mut buf = BytesMut::new();
    while let Some(part) = body.next().await {
        let part = part?;
        if buf.len() + part.len() > limit {
            return Err(fail(format!(
                "the response body is larger than {limit} bytes"
            )));
        }
        buf.extend_from_slice(&part);
    }
    Ok(buf)
}

/// A whole `message` as a `chat.completion` body.
fn whole(body: BodyStream, t: Translation, created: u64) -> BodyStream {
    Box::pin(futures::stream::once(async move {
        let raw = read(body, MAX_RESPONSE).await?.freeze();
        Ok(match to_completion(&raw, &t, created) {
            Ok(v) => Bytes::from(v.to_string()),
            Err(e) => {
                tracing::debug!(error = %e, "an Anthropic answer did not translate");
                raw
            }
        })
    }))
}

/// An Anthropic error body as OpenAI's; anything else as it came.
fn error(body: BodyStream) -> BodyStream {
    Box::pin(futures::stream::once(async move {
        let raw = read(body, MAX_ERROR_BODY)
            .await
            .unwrap_or_default()
            .freeze();
        let parsed: Option<Value> = serde_json::from_slice(&raw).ok();
        let err = parsed
            .as_ref()
            .filter(|v| v.get("type").and_then(Value::as_str) == Some("error"))
            .and_then(|v| v.get("error"));
        Ok(match err {
            Some(e) => {
                let kind = e.get("type").cloned().unwrap_or(Value::Null);
                let message = e.get("message").cloned().unwrap_or(Value::Null);
                let body = json!({"error": {"message": message, "type": kind, "param": null, "code": kind}});
                Bytes::from(body.to_string())
            }
            None => raw,
        })
    }))
}

/// A Messages event stream as chat chunks (see the module's docs).
fn stream(mut body: BodyStream, t: Translation, created: u64) -> BodyStream {
    Box::pin(async_stream::stream! {
        let mut parser = SseParser::new(MAX_EVENT);
        let mut maker = ChunkMaker::new(&t, created);
        loop {
            loop {
                let data = match parser.next_event() {
                    Err(e) => {
                        yield Err(Box::new(e) as BoxError);
                        return;
                    }
                    Ok(None) => break,
                    Ok(Some(d)) => d,
                };
                match maker.event("", &data) {
                    Ok(chunks) => {
                        let mut out = BytesMut::new();
                        for c in &chunks {
                            out.extend_from_slice(format!("data: {c}\n\n").as_bytes());
                        }
                        if chunks.is_empty() {
                            out.extend_from_slice(b"data:\n\n");
                        }
                        if maker.ended() {
                            out.extend_from_slice(b"data: [DONE]\n\n");
                        }
                        yield Ok(out.freeze());
                        if maker.ended() {
                            return;
                        }
                    }
                    Err(StreamFault::Upstream { kind, message }) => {
                        let e = json!({"error": {"message": message, "type": kind, "code": kind}});
                        yield Ok(Bytes::from(format!("data: {e}\n\n")));
                        return;
                    }
                    Err(fault) => {
                        tracing::debug!(error = %fault, "an Anthropic stream event did not translate");
                        yield Ok(Bytes::from_static(b"data: {}\n\n"));
                        return;
                    }
                }
            }
            match body.next().await {
                Some(Ok(bytes)) => parser.push(bytes),
                Some(Err(e)) => {
                    yield Err(e);
                    return;
                }
                // Without `message_stop`: no `[DONE]`, the relay calls it cut.
                None => return,
            }
        }
    })
}
