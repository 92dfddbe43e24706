//! An in-process harness for timing logic: fake [`ChatModel`]s whose
//! answers take scripted (tokio) time, run under `tokio::time::pause`, so
//! a test asserts exact elapsed times with no wall-clock sleeps that flake
//! on a loaded machine. Fakes honour a call's deadlines as real upstreams
//! do and record each call as an attempt.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use conclave::attempt::Attempt;
use conclave::context::RequestCtx;
use conclave::error::{ModelError, TimeoutPhase};
use conclave::model::{Call, ChatModel, Completion, Meta, Reply, ReplyBody};
use conclave::redact::Redactor;
use conclave::sink::Reporters;
use conclave::sink::{AttemptRecord, AttemptSink, ModelInfo};
use conclave::wire::{ChatRequest, Usage};
use parking_lot::Mutex;
use serde_json::json;
use tokio::time::{Instant, sleep, timeout_at};
use tokio_util::sync::CancellationToken;

/// What a fake does when called.
#[derive(Clone, Debug)]
pub enum Act {
    /// Answers `text` after `after`.
    Answer { after: Duration, text: String },
    /// Fails with a 503 after `after`.
    Fail { after: Duration },
}

pub fn answers(ms: u64, text: &str) -> Act {
    Act::Answer {
        after: Duration::from_millis(ms),
        text: text.to_owned(),
    }
}

pub fn fails(ms: u64) -> Act {
    Act::Fail {
        after: Duration::from_millis(ms),
    }
}

pub struct Fake {
    info: Arc<ModelInfo>,
    /// One act per call, in order; the last one repeats.
    acts: Vec<Act>,
    /// When each call started.
    pub calls: Mutex<Vec<Instant>>,
}

impl Fake {
    pub fn new(name: &str, acts: Vec<Act>) -> Arc<Fake> {
        Arc::new(Fake {
            info: Arc::new(ModelInfo {
                name: name.into(),
                upstream: "fake".into(),
                context_window: None,
                max_tokens: 4096,
                upstream_model: name.to_owned(),
                input_per_mtok: 0.0,
                output_per_mtok: 0.0,
                cached_input_per_mtok: 0.0,
                cache_write_per_mtok: 0.0,
                image_tokens: conclave::model::IMAGE_TOKENS,
                redactor: Arc::new(Redactor::default()),
            }),
            acts,
            calls: Mutex::new(Vec::new()),
        })
    }

    pub fn started(&self) -> Vec<Instant> {
        self.calls.lock().clone()
    }
}

#[async_trait]
impl ChatModel for Fake {
    async fn chat(&self, call: Call, _req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        let n = {
            let mut calls = self.calls.lock();
            calls.push(Instant::now());
            calls.len() - 1
        };
        let act = self.acts.get(n).or(self.acts.last()).cloned().unwrap();
        let attempt = Attempt::start(&call.ctx, &self.info, call.role, call.span);
        let deadline = call
            .deadline
            .unwrap_or(call.ctx.deadline)
            .min(call.ctx.deadline);
        let after = match &act {
            Act::Answer { after, .. } | Act::Fail { after } => *after,
        };
        let started = Instant::now();
        if timeout_at(deadline, sleep(after)).await.is_err() {
            let e = ModelError::Timeout {
                upstream: self.info.upstream.clone(),
                phase: TimeoutPhase::Total,
                after: deadline - started,
            };
            attempt.fail(&e);
            return Err(e);
        }
        match act {
            Act::Fail { .. } => {
                let e = ModelError::Status {
                    upstream: self.info.upstream.clone(),
                    status: 503,
                    message: "fake outage".into(),
                    code: None,
                    retry_after: None,
                };
                attempt.fail(&e);
                Err(e)
            }
            Act::Answer { text, .. } => {
                let body = json!({"choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}]});
                let usage = Usage {
                    prompt_tokens: 1,
                    completion_tokens: 1,
                    ..Usage::default()
                };
                attempt.set_usage(usage);
                attempt.finish();
                Ok(Reply {
                    body: ReplyBody::Whole(Completion {
                        body: Bytes::from(body.to_string()),
                        usage: Some(usage),
                    }),
                    meta: Meta::served_by(self.info.name.clone()),
                    attempt,
                })
            }
        }
    }
}

/// A request context with a `timeout` deadline, starting now.
pub fn ctx(timeout: Duration) -> Arc<RequestCtx> {
    Arc::new(bare_ctx(timeout))
}

/// The same, with a sink that keeps every finished attempt.
pub fn recorded_ctx(timeout: Duration) -> (Arc<RequestCtx>, Arc<Recorder>) {
    let rec = Arc::new(Recorder::default());
    (Arc::new(bare_ctx(timeout).with_sink(rec.clone())), rec)
}

fn bare_ctx(timeout: Duration) -> RequestCtx {
    RequestCtx::new(
        "test".into(),
        "route".into(),
        "chain",
        "anonymous".into(),
        timeout,
        Reporters::none(),
        CancellationToken::new(),
    )
}

/// An attempt sink that keeps (model, role, verdict) of each attempt.
#[derive(Default)]
pub struct Recorder(pub Mutex<Vec<(String, &'static str, &'static str)>>);

impl AttemptSink for Recorder {
    fn record(&self, a: &AttemptRecord) {
        self.0.lock().push((
            a.model.name.to_string(),
            a.role.as_str(),
            a.verdict.as_str(),
        ));
    }
}

/// A whole (non-streamed) chat request.
pub fn request(text: &str) -> Arc<ChatRequest> {
    Arc::new(
        serde_json::from_value(
            json!({"model": "route", "messages": [{"role": "user", "content": text}]}),
        )
        .unwrap(),
    )
}

/// The text of a whole reply.
pub fn text_of(reply: &Reply) -> String {
    match &reply.body {
        ReplyBody::Whole(c) => {
            let v: serde_json::Value = serde_json::from_slice(&c.body).unwrap();
            v["choices"][0]["message"]["content"]
                .as_str()
                .unwrap_or_default()
                .to_owned()
        }
        ReplyBody::Stream(_) => panic!("a streamed reply"),
    }
}
