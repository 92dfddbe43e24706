//! Built-in simulated models (`kind = "mock"`): deterministic OpenAI-style
//! answers with configurable timing, usage and failures, so the demo, the
//! tests and the benchmarks need no network and no keys.
//!
//! One [`Simulator`] produces an HTTP-like response (status + body bytes);
//! the in-process upstream feeds it to the same response handling as a real
//! upstream, and `conclave mock` ([`server`]) serves it over HTTP together
//! with llama-swap's `GET /running`. With a [`SwapSim`] it plays llama-swap:
//! one model loaded at a time, a load delay when another is asked for, and
//! optionally llama-swap's `sendLoadingState` banner on cold streams.
//! With `responses` it also answers the Responses API natively
//! ([`responses`]); without, `/v1/responses` is a 404, as on a chat-only
//! server. With [`Api::Anthropic`] it plays Anthropic's Messages API
//! instead ([`anthropic`]): `/v1/messages` and its `count_tokens`, and a
//! 404 for every OpenAI path.

mod answer;
mod anthropic;
mod behavior;
pub mod context;
mod continuation;
mod embeddings;
mod json_schema;
mod loading;
mod null_content;
mod quirks;
mod record;
mod responses;
pub mod server;
mod solve;

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use bytes::Bytes;
use futures::Stream;
use indexmap::IndexMap;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Value, json};

use answer::request_text;
pub use anthropic::Api;
pub use behavior::{Behavior, FailMode, ReplySpec, Resolved, Rule, ToolCallSpec, UsageSpec};
pub use quirks::{Interrupt, Quirk, Quirks};
use record::Log;
pub use record::{Heard, Recorded};
#[cfg(test)]
use record::{RECORDED, RECORDED_BYTES};

use crate::wire::{Endpoint, Family};

/// The body stream failed on purpose (a simulated dropped connection).
#[derive(Debug, thiserror::Error)]
#[error("mock upstream dropped the connection")]
pub struct MockCut;

pub type MockBody = Pin<Box<dyn Stream<Item = Result<Bytes, MockCut>> + Send>>;

pub struct MockResponse {
    pub status: u16,
    pub content_type: &'static str,
    pub retry_after: Option<u64>,
    pub body: MockBody,
}

/// Counters for `GET /mock/stats`: how many answers finished, how many
/// the client abandoned (its connection closed before the end), and how
/// many times llama-swap emulation loaded a model.
#[derive(Debug, Default, Serialize)]
pub struct Stats {
    pub requests: AtomicU64,
    pub completed: AtomicU64,
    pub cancelled: AtomicU64,
    pub loads: AtomicU64,
    /// Token counts asked (`/tokenize`, `/extras/tokenize…`, in-process).
    pub counts: AtomicU64,
    /// Tokens of whole answers generated after their client left (quirk
    /// `generates_after_disconnect`): work the server did for nobody.
    pub tokens_generated_after_disconnect: Arc<AtomicU64>,
}

/// How the simulator plays llama-swap.
#[derive(Debug, Clone, Copy, Default)]
pub struct SwapSim {
    /// Load time when another model is asked for; `None`: no emulation
    /// (any model answers at once, nothing is ever "loaded").
    pub delay: Option<Duration>,
    /// llama-swap's `sendLoadingState`: a streamed request that loads its
    /// model first gets the loading banner as `reasoning_content` chunks.
    pub loading_state: bool,
}

/// The process `/running` lists: a model and whether it is ready.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Process {
    pub model: String,
    pub ready: bool,
}

pub struct Simulator {
    models: IndexMap<String, Behavior>,
    swap: SwapSim,
    quirks: Quirks,
    /// The token-counting endpoints it serves.
    tokenizer: context::Tokenizer,
    /// Answer models it does not list (echo) instead of 404.
    echo_unknown: bool,
    /// Serve `POST /v1/responses` too.
    responses: bool,
    /// The wire format it speaks.
    api: Api,
    /// Per-model call counters for `when_call` rules.
    calls: Mutex<HashMap<String, u64>>,
    /// The loaded model (llama-swap emulation). An async mutex: a swap
    /// holds it across the simulated load, so swaps happen one at a time.
    loaded: tokio::sync::Mutex<Option<String>>,
    /// What `/running` shows, readable without waiting behind a swap:
    /// the model being loaded (not ready) during a swap.
    running: Mutex<Option<Process>>,
    /// The requests kept for `GET /mock/requests` (`record`).
    log: Mutex<Log>,
    pub stats: Arc<Stats>,
    next_id: AtomicU64,
    /// Requests answered so far, for streams that quirk
    /// `interrupts_on_new_request` ends when another arrives.
    arrivals: Arc<AtomicU64>,
}

impl Simulator {
    /// A simulator of `models`; with `echo_unknown` any other model name
    /// echoes, without it gets a 404 `model_not_found`.
    pub fn new(
        models: IndexMap<String, Behavior>,
        swap: SwapSim,
        quirks: Quirks,
        echo_unknown: bool,
    ) -> Self {
        Simulator {
            models,
            swap,
            quirks,
            tokenizer: context::Tokenizer::default(),
            echo_unknown,
            responses: false,
            api: Api::OpenAi,
            calls: Mutex::new(HashMap::new()),
            loaded: tokio::sync::Mutex::new(None),
            running: Mutex::new(None),
            log: Mutex::new(Log::default()),
            stats: Arc::new(Stats::default()),
            next_id: AtomicU64::new(1),
            arrivals: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The same simulator, serving the Responses API too when `on`.
    pub fn with_responses(mut self, on: bool) -> Self {
        self.responses = on;
        self
    }

    /// The same simulator, speaking `api`.
    pub fn with_api(mut self, api: Api) -> Self {
        self.api = api;
        self
    }

    /// The wire format it speaks.
    pub fn api(&self) -> Api {
        self.api
    }

    /// Whether it plays quirk `q`.
    pub fn plays(&self, q: Quirk) -> bool {
        self.quirks.has(q)
    }

    /// Who its `/v1/models` says owns its models: `"me"`, as
    /// llama-cpp-python says, when it plays `interrupts_on_new_request`.
    pub fn owner(&self) -> &'static str {
        if self.plays(Quirk::InterruptsOnNewRequest) {
            "me"
        } else {
            "conclave-mock"
        }
    }

    /// Whether it serves `POST /v1/responses`.
    pub fn speaks_responses(&self) -> bool {
        self.responses
    }

    pub fn model_names(&self) -> Vec<String> {
        self.models.keys().cloned().collect()
    }

    /// The model llama-swap would report as loaded (ready).
    pub fn running(&self) -> Option<String> {
        self.process().filter(|p| p.ready).map(|p| p.model)
    }

    /// The process `/running` lists, ready or still loading.
    pub fn process(&self) -> Option<Process> {
        self.running.lock().clone()
    }

    /// Whether a request for `model` would have to load it first.
    fn cold(&self, model: &str) -> bool {
        self.swap.delay.is_some() && self.running().as_deref() != Some(model)
    }

    pub fn recorded(&self) -> Vec<Recorded> {
        self.log.lock().all()
    }

    pub fn clear_recorded(&self) {
        self.log.lock().clear();
    }

    /// Answers one request body for `endpoint`.
    pub async fn respond(
        self: &Arc<Self>,
        endpoint: Endpoint,
        body: &[u8],
        authorization: Option<String>,
        request_id: Option<String>,
    ) -> MockResponse {
        let heard = Heard {
            authorization,
            request_id,
            ..Heard::default()
        };
        self.respond_to(endpoint, body, heard).await
    }

    /// Answers one request body for `endpoint`, with the headers it came
    /// with.
    pub async fn respond_to(
        self: &Arc<Self>,
        endpoint: Endpoint,
        body: &[u8],
        heard: Heard,
    ) -> MockResponse {
        self.stats.requests.fetch_add(1, Ordering::Relaxed);
        let arrival = self.arrivals.fetch_add(1, Ordering::AcqRel) + 1;
        let guard = Finish::new(self.stats.clone());
        if self.api == Api::Anthropic {
            return anthropic::respond(self, endpoint, body, heard, guard).await;
        }
        if endpoint.family() == Family::Anthropic {
            let msg = "mock: the Messages API is not served here (api = \"openai\")";
            return guard.done(error_response(404, msg, None));
        }
        if endpoint == Endpoint::RESPONSES && !self.responses {
            // What a chat-only server says.
            let msg = "mock: POST /v1/responses is not served here (responses = false)";
            return guard.done(error_response(404, msg, None));
        }
        let req: Value = match serde_json::from_slice(body) {
            Ok(v @ Value::Object(_)) => v,
            _ => {
                return guard.done(error_response(
                    400,
                    "mock: the request body is not a JSON object",
                    None,
                ));
            }
        };
        let Some(model) = req.get("model").and_then(Value::as_str).map(str::to_owned) else {
            return guard.done(error_response(400, "mock: missing `model`", None));
        };
        self.record(&model, heard, &req);
        if let Some(refused) = null_content::refusal(&self.quirks, &req)
            .or_else(|| json_schema::refusal(&self.quirks, &req))
        {
            return guard.done(refused);
        }
        let call = self.count_call(&model);
        let view = (endpoint == Endpoint::RESPONSES).then(|| responses::chat_view(&req));
        let text = request_text(view.as_ref().unwrap_or(&req));
        let mut b = match self.models.get(&model) {
            Some(b) => b.resolve(&text, call),
            None if self.echo_unknown => Behavior::default().resolve(&text, call),
            None => {
                let msg = format!("mock: the model `{model}` does not exist");
                let mut resp = error_response(404, &msg, None);
                resp.body = once(Bytes::from(
                    json!({"error": {"message": msg, "type": "invalid_request_error", "param": "model", "code": "model_not_found"}}).to_string(),
                ));
                return guard.done(resp);
            }
        };
        let stream = req.get("stream").and_then(Value::as_bool).unwrap_or(false);
        let include_usage = !b.omit_usage
            && !self.quirks.has(Quirk::NoStreamUsage)
            && req
                .pointer("/stream_options/include_usage")
                .and_then(Value::as_bool)
                .unwrap_or(false);
        let fails = b.fails_at_once(FailMode::Hang) || b.status.is_some_and(|s| s >= 300);
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        if self.swap.loading_state
            && stream
            && endpoint == Endpoint::CHAT
            && !fails
            && self.cold(&model)
        {
            return self.loading(b, req, model, n, include_usage, guard);
        }
        self.swap_to(&model).await;

        if b.fails_at_once(FailMode::Hang) {
            return std::future::pending().await;
        }
        if let Some(status) = b.status.filter(|s| *s >= 300) {
            let msg = b
                .error_message
                .clone()
                .unwrap_or_else(|| format!("mock: simulated HTTP {status}"));
            return guard.done(error_response(status, &msg, b.retry_after));
        }
        if endpoint == Endpoint::CHAT
            && let Some(r) = self.play_quirks(&mut b, &req, &model, stream).await
        {
            return guard.done(r);
        }
        if endpoint == Endpoint::EMBEDDINGS {
            pause(b.ttft).await;
            return guard.done(embeddings::respond(&req, &model));
        }
        if endpoint == Endpoint::RESPONSES {
            let view = view.unwrap_or_default();
            return responses::respond(b, &req, &view, &model, n, guard).await;
        }
        let legacy = endpoint == Endpoint::COMPLETIONS;
        let interrupt = self
            .quirks
            .has(Quirk::InterruptsOnNewRequest)
            .then(|| Interrupt::after(&self.arrivals, arrival));
        let how = answer::How {
            legacy,
            stream,
            include_usage,
            interrupt,
        };
        answer::respond(b, &req, &model, n, how, guard).await
    }

    /// Keeps the request for `GET /mock/requests`.
    fn record(&self, model: &str, heard: Heard, body: &Value) {
        self.log.lock().record(model, heard, body);
    }

    /// Counts a call of `model` and returns its number (from 1).
    fn count_call(&self, model: &str) -> u64 {
        let mut calls = self.calls.lock();
        let n = calls.entry(model.to_owned()).or_insert(0);
        *n += 1;
        *n
    }

    /// Loads `model` as llama-swap would. The swap runs as its own task,
    /// so a client that goes away mid-swap does not stop it (llama-swap
    /// finishes loading too), and `/running` always names what would
    /// answer warm.
    async fn swap_to(self: &Arc<Self>, model: &str) {
        if self.running().as_deref() == Some(model) {
            return;
        }
        let this = self.clone();
        let model = model.to_owned();
        // Detached on purpose: the swap outlives a cancelled request.
        let swap = tokio::spawn(async move {
            let mut loaded = this.loaded.lock().await;
            if loaded.as_deref() != Some(model.as_str()) {
                if let Some(delay) = this.swap.delay {
                    this.stats.loads.fetch_add(1, Ordering::Relaxed);
                    *this.running.lock() = Some(Process {
                        model: model.clone(),
                        ready: false,
                    });
                    tokio::time::sleep(delay).await;
                }
                *loaded = Some(model);
            }
            *this.running.lock() = loaded.clone().map(|model| Process { model, ready: true });
        });
        let _ = swap.await;
    }
}

/// Sleeps, unless there is nothing to wait for: a zero sleep still waits
/// for the timer's next millisecond tick.
async fn pause(d: Duration) {
    if !d.is_zero() {
        tokio::time::sleep(d).await;
    }
}

/// How long a dropped connection waits after its last bytes, so they are
/// flushed to the peer before the connection is cut.
const CUT_GRACE: Duration = Duration::from_millis(20);

/// Counts an answer as completed, or as cancelled if dropped unfinished.
struct Finish {
    stats: Arc<Stats>,
    done: bool,
}

impl Finish {
    fn new(stats: Arc<Stats>) -> Self {
        Finish { stats, done: false }
    }
    fn done(mut self, resp: MockResponse) -> MockResponse {
        self.complete();
        resp
    }
    fn complete(&mut self) {
        if !self.done {
            self.done = true;
            self.stats.completed.fetch_add(1, Ordering::Relaxed);
        }
    }
}

impl Drop for Finish {
    fn drop(&mut self) {
        if !self.done {
            self.stats.cancelled.fetch_add(1, Ordering::Relaxed);
        }
    }
}

fn error_response(status: u16, message: &str, retry_after: Option<u64>) -> MockResponse {
    let kind = if status < 500 {
        "invalid_request_error"
    } else {
        "server_error"
    };
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": null}});
    MockResponse {
        status,
        content_type: "application/json",
        retry_after,
        body: once(Bytes::from(body.to_string())),
    }
}

fn once(b: Bytes) -> MockBody {
    Box::pin(futures::stream::once(async move { Ok(b) }))
}

#[cfg(test)]
mod tests;
