//! [`ConcreteModel`]: a configured model on an upstream, and the single
//! place where upstream calls are made and recorded. Every call opens an
//! [`Attempt`] (probe warm state, send, decode, deadlines); a failed call is
//! sent again as the upstream's `retries` and the route's retry budget
//! allow ([`super::retry`]), each try its own attempt, until an answer
//! begins. Strategies built on top never do their own bookkeeping. A chat
//! request that does not fit the model's context window is refused before
//! that ([`super::fit`]), and a call to an ejected upstream is refused
//! before pacing and the lane, without an attempt; every try's outcome goes
//! to the health of its model and of its upstream, a call's retries
//! counting once ([`super::health::watch`]).
//! Completions, Embeddings and (to an upstream that speaks it,
//! [`ConcreteModel::speaks`]) Responses bodies are relayed by
//! [`ConcreteModel::forward`].

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use serde_json::{Map, Value};
use tokio::time::{Instant, timeout_at};

use std::time::Duration;

use super::decode;
use super::delivery::{self, Armed, StreamsTools, Wire};
use super::exchange::{Exchange, round_ms};
use super::health::{Health, Tenant, watch};
use super::lane::{LaneTimeout, Permit};
use super::limit::NoTurn;
use super::relay;
use super::retry;
use super::{CallIds, RawResponse, Upstream};
use crate::attempt::Attempt;
use crate::boxed::boxed;
use crate::config::Lane;
use crate::context::RequestCtx;
use crate::error::{ModelError, TimeoutPhase};
use crate::model::{Availability, Call, CallSize, ChatModel, Meta, Reply, ReplyBody, Spend};
use crate::retry::RetryReason;
use crate::sink::ModelInfo;
use crate::store::limits::rate::retry_after_secs;
use crate::store::limits::rejection::{Scope, record_rejection};
use crate::wire::{ChatRequest, Endpoint, Family, Usage, estimate_tokens};

pub struct ConcreteModel {
    pub info: Arc<ModelInfo>,
    pub upstream: Arc<Upstream>,
    /// Its model's health on its upstream (answers' failures).
    health: Arc<Health>,
    /// Whether its server takes tools on a stream (learned).
    pub(super) streams_tools: StreamsTools,
}

/// One request on its way upstream.
struct Outgoing {
    endpoint: Endpoint,
    body: Bytes,
    wire: Wire,
    /// The request's estimated input tokens, for a usage estimate.
    input_tokens: u64,
    /// A chat request with tools (a stream refused for them is asked
    /// whole, not retried).
    tools: bool,
}

impl ConcreteModel {
    pub fn new(info: Arc<ModelInfo>, upstream: Arc<Upstream>) -> Self {
        ConcreteModel {
            health: upstream.health.model(&info.name),
            info,
            upstream,
            streams_tools: StreamsTools::default(),
        }
    }

    /// Whether this model's upstream speaks `endpoint` natively, so a
    /// request for it can be [`forward`](Self::forward)ed verbatim: the
    /// Messages API's endpoints an Anthropic upstream (`kind =
    /// "anthropic"`, or a mock with `api = "anthropic"`), the Responses
    /// API one with `responses = true`, OpenAI's others any other.
    pub fn speaks(&self, endpoint: Endpoint) -> bool {
        match endpoint.family() {
            Family::Anthropic => self.upstream.messages,
            Family::OpenAi if endpoint == Endpoint::RESPONSES => self.upstream.responses,
            Family::OpenAi => !self.upstream.messages,
        }
    }

    /// Asks this model's upstream how many input tokens a Messages body
    /// holds (`POST /v1/messages/count_tokens`, with `model` rewritten and
    /// the fields a count does not take left out), within the upstream's
    /// timeout (at most 30 s); `None` when it cannot say (an error, a
    /// timeout, an answer without a count). Not an attempt: nothing is
    /// generated or billed.
    pub async fn count_tokens(
        &self,
        mut body: Map<String, Value>,
        request_id: &str,
        anthropic_beta: Option<&str>,
    ) -> Option<u64> {
        body.insert(
            "model".into(),
            Value::String(self.info.upstream_model.clone()),
        );
        for k in [
            "max_tokens",
            "stream",
            "stop_sequences",
            "temperature",
            "top_p",
            "top_k",
            "metadata",
        ] {
            body.remove(k);
        }
        let bytes = Bytes::from(serde_json::to_vec(&body).ok()?);
        let ids = CallIds {
            request_id,
            traceparent: None,
            anthropic_beta,
        };
        let by = Instant::now() + self.upstream.timeout.min(Duration::from_secs(30));
        let send = self
            .upstream
            .transport
            .send(Endpoint::COUNT_TOKENS, bytes, &ids);
        let resp = timeout_at(by, send).await.ok()?.ok()?;
        if resp.status != 200 {
            return None;
        }
        let body = decode::small_body(resp.body, 64 * 1024, by).await?;
        let v: Value = serde_json::from_slice(&body).ok()?;
        v.get("input_tokens").and_then(Value::as_u64)
    }

    /// Relays a Completions, Embeddings, Responses or Messages body (a
    /// JSON object) to this model: `model` becomes the upstream's name, a
    /// Completions stream asks for usage (a Responses or Messages body
    /// goes as it is otherwise: its streams always carry their usage),
    /// and the call is recorded as an attempt like any chat call. A
    /// streamed Responses or Messages answer comes back as its events, one
    /// [`crate::model::Chunk`] each, the event's JSON as the upstream
    /// wrote it (its `type` is the SSE event name).
    pub async fn forward(
        &self,
        call: Call,
        endpoint: Endpoint,
        mut body: Map<String, Value>,
    ) -> Result<Reply, ModelError> {
        body.insert(
            "model".into(),
            Value::String(self.info.upstream_model.clone()),
        );
        let stream = body.get("stream").and_then(Value::as_bool) == Some(true);
        if stream && !endpoint.typed_events() {
            let opts = body
                .entry("stream_options")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(o) = opts {
                o.insert("include_usage".into(), Value::Bool(true));
            }
        }
        let input_tokens = estimate_tokens(endpoint.input_len(&body));
        let out = Outgoing {
            endpoint,
            body: Bytes::from(serde_json::to_vec(&body)?),
            wire: if stream { Wire::Stream } else { Wire::Whole },
            input_tokens,
            tools: false,
        };
        self.call(&call, out).await
    }

    /// Makes the call, and sends it again after a failure as the
    /// upstream's `retries` and the route's retry budget allow (each try
    /// its own attempt), until an answer begins: a stream that broke after
    /// its first chunk is never retried here.
    async fn call(&self, call: &Call, out: Outgoing) -> Result<Reply, ModelError> {
        // A streamed call's first token is due `ttft_timeout` after the
        // call began, queueing and retries included: a chain's local tier
        // that cannot start in time moves the chain on, as a slow one does.
        let by = call.by();
        let first_due = match (out.wire == Wire::Stream, call.ttft_timeout) {
            (true, Some(t)) => by.min(Instant::now() + t),
            _ => by,
        };
        let up = &self.upstream;
        let who = Tenant::of(&call.ctx.key);
        let mut retry = None;
        let mut done = 0;
        let mut counted = watch::Counted::default();
        loop {
            // An ejected member is not called: no attempt, nothing sent.
            // A retry it refuses ends with the failure before it.
            let prev = retry.take();
            let ticket = match watch::admit(&up.health, &self.health, &who, &up.name) {
                Ok(t) => t,
                Err(e) => return Err(prev.map_or(e, |(_, last)| last)),
            };
            let attempt = Attempt::start(&call.ctx, &self.info, call.role, call.span);
            if let Some(tally) = &call.cancellable {
                tally.watch(&attempt);
            }
            if let Some((reason, _)) = prev {
                attempt.set_retry(reason);
            }
            let answer = self.exchange(call, &out, first_due, &attempt).await;
            let e = match watch::ended(ticket, &call.ctx, &mut counted, answer) {
                Ok(body) => {
                    return Ok(Reply {
                        body,
                        meta: Meta::served_by(self.info.name.clone()),
                        attempt,
                    });
                }
                Err(e) => e,
            };
            tracing::debug!(request_id = %call.ctx.id, model = %self.info.name, error = %e, "upstream call failed");
            self.heard(&e);
            attempt.fail(&e);
            drop(attempt);
            let Some((reason, wait)) = self.retry_after(call, &out, &e, done, first_due) else {
                return Err(e);
            };
            retry = Some((reason, e));
            done += 1;
            tokio::time::sleep(wait).await;
        }
    }

    /// Whether `e` is sent again, after how long (see [`super::retry`]):
    /// never when the caller tries another member instead, nor for a
    /// stream the server refused (the call is asked whole instead), and
    /// only when the route's retry budget allows it.
    fn retry_after(
        &self,
        call: &Call,
        out: &Outgoing,
        e: &ModelError,
        done: u32,
        due: Instant,
    ) -> Option<(RetryReason, Duration)> {
        if call.retry_elsewhere
            || (out.wire.streamed() && delivery::refusal(e, out.tools).is_some())
        {
            return None;
        }
        let left = due.saturating_duration_since(Instant::now());
        let now = call.ctx.clock.now();
        let (reason, wait) = retry::next(&self.upstream.retries, e, done, left, now)?;
        // An upstream this failure ejected takes no retry: the budget
        // keeps it.
        if self.availability() != Availability::Serving {
            return None;
        }
        call.ctx.retry(reason).then_some((reason, wait))
    }

    async fn exchange(
        &self,
        call: &Call,
        out: &Outgoing,
        first_due: Instant,
        attempt: &Attempt,
    ) -> Result<ReplyBody, ModelError> {
        let up = &self.upstream;
        let local = up.lane == Lane::Local;
        let paced = match &up.pace {
            None => Duration::ZERO,
            Some(p) => match p.turn(first_due).await {
                Ok(waited) => waited,
                Err(no) => {
                    // The whole attempt was a wait: none of it upstream time.
                    attempt.set_queued(attempt.elapsed(), local);
                    return Err(self.throttled(&call.ctx, no));
                }
            },
        };
        // Before a local lane's first call: how many its server takes.
        let _ = timeout_at(first_due, up.learn_lane()).await;
        let admitted = match up.gate.admit(&self.info.upstream_model, first_due).await {
            Ok(a) => a,
            Err(LaneTimeout) => {
                attempt.set_queued(attempt.elapsed(), local);
                return Err(ModelError::Timeout {
                    upstream: up.name.clone(),
                    phase: TimeoutPhase::Lane,
                    after: round_ms(attempt.elapsed()),
                });
            }
        };
        attempt.set_queued(paced + admitted.queued, local);
        if let Some(from) = &admitted.swapped_from {
            lane_swap(&call.ctx, &up.name, from, &self.info.upstream_model);
        }
        attempt.set_warm(up.warm(&self.info.upstream_model).await);
        // A whole call its caller may drop: from here on, the server works
        // on it until it ends.
        let armed = Armed::new(match out.wire {
            Wire::Whole => call.cancellable.clone(),
            _ => None,
        });
        let answer = self
            .answer(call, out, first_due, attempt, admitted.permit)
            .await;
        armed.disarm();
        answer
    }

    /// Sends the call and reads its answer as `out.wire` says.
    async fn answer(
        &self,
        call: &Call,
        out: &Outgoing,
        first_due: Instant,
        attempt: &Attempt,
        permit: Permit,
    ) -> Result<ReplyBody, ModelError> {
        let up = &self.upstream;
        let by = call.by();
        let started = Instant::now();
        let total = by.min(started + up.timeout);
        let first = total.min(first_due);
        let x = Exchange {
            upstream: up.name.clone(),
            endpoint: out.endpoint,
            started,
            first,
            total,
            idle: call.idle_timeout.unwrap_or(up.stream_idle_timeout),
            input_tokens: out.input_tokens,
            redactor: self.info.redactor.clone(),
        };
        let resp = self.send(&call.ctx, out, &x, attempt).await?;
        up.show_simulated();
        if !(200..300).contains(&resp.status) {
            return Err(decode::status_error(resp, &x).await);
        }
        let resp = if out.wire.streamed() {
            match decode::unstreamed(resp, &x, attempt, out.wire == Wire::Stream).await {
                Ok(answer) => return answer,
                Err(resp) => resp,
            }
        } else {
            resp
        };
        // A stream's relay is boxed: its future is the largest here, and
        // would make every call's, streamed or whole, that large.
        match out.wire {
            Wire::Stream => boxed(move || relay::stream(resp, x, attempt, permit))
                .await
                .map(ReplyBody::Stream),
            Wire::Assemble => {
                let s = boxed(move || relay::stream(resp, x, attempt, permit)).await?;
                let whole = delivery::collect(s, &up.name).await?;
                delivery::with_usage(whole, attempt.usage()).map(ReplyBody::Whole)
            }
            Wire::Whole => decode::whole(resp, &x, attempt).await.map(ReplyBody::Whole),
        }
    }

    /// One chat call of `input_tokens` (estimated), on the wire as `wire`
    /// says.
    pub(super) async fn chat_as(
        &self,
        call: &Call,
        (req, input_tokens): (&Arc<ChatRequest>, u64),
        wire: Wire,
    ) -> Result<Reply, ModelError> {
        let sent = wire.request(req);
        let out = Outgoing {
            endpoint: Endpoint::CHAT,
            body: call.ctx.upstream_body(&sent, &self.info.upstream_model)?,
            wire,
            input_tokens,
            tools: delivery::carries_tools(req),
        };
        self.call(call, out).await
    }
}

impl ConcreteModel {
    /// Sends the request and waits for the status line (a failed call is
    /// sent again by [`Self::call`], as a new attempt).
    async fn send(
        &self,
        ctx: &RequestCtx,
        out: &Outgoing,
        x: &Exchange,
        attempt: &Attempt,
    ) -> Result<RawResponse, ModelError> {
        let up = &self.upstream;
        attempt.sent(out.input_tokens);
        let ids = CallIds {
            request_id: &ctx.upstream_id,
            traceparent: attempt.traceparent(),
            // The client's betas go with a body it wrote itself.
            anthropic_beta: match out.endpoint.family() {
                Family::Anthropic => ctx.options.anthropic_beta.as_deref(),
                Family::OpenAi => None,
            },
        };
        let sent = up.transport.send(out.endpoint, out.body.clone(), &ids);
        match timeout_at(x.first, sent).await {
            Err(_) => Err(x.timeout(x.first_phase())),
            Ok(Err(e)) if e.connected => Err(x.cut(&e.reason)),
            Ok(Err(e)) => Err(ModelError::Connect {
                upstream: up.name.clone(),
                reason: x.redactor.clean(&e.reason),
                source: Some(Box::new(e)),
            }),
            Ok(Ok(r)) => Ok(r),
        }
    }

    /// The upstream's `rpm` has no turn for a call before its deadline.
    fn throttled(&self, ctx: &RequestCtx, no: NoTurn) -> ModelError {
        let retry_after = retry_after_secs(no.wait);
        let extra = [
            ("upstream", Value::from(&*self.upstream.name)),
            ("retry_after_s", Value::from(retry_after)),
        ];
        record_rejection(ctx, Scope::Upstream, f64::from(no.limit), 1.0, &extra);
        ModelError::Throttled {
            upstream: self.upstream.name.clone(),
            limit: no.limit,
            retry_after,
        }
    }
}

/// The `lane_swap` event: the local lane changed the model it serves.
pub(super) fn lane_swap(ctx: &RequestCtx, upstream: &Arc<str>, from: &str, to: &str) {
    if !ctx.events_enabled() {
        return;
    }
    let mut f = Map::new();
    f.insert("upstream".into(), Value::from(&**upstream));
    f.insert("from".into(), Value::from(from));
    f.insert("to".into(), Value::from(to));
    ctx.emit("lane_swap", f);
}

#[async_trait]
impl ChatModel for ConcreteModel {
    /// Ejected while it or its upstream is (see [`super::health`]): the
    /// longer wait of the two.
    fn availability(&self) -> Availability {
        let whole = self.upstream.health.whole.refused_for();
        match whole.max(self.health.refused_for()) {
            None => Availability::Serving,
            Some(retry_after) => Availability::Ejected { retry_after },
        }
    }

    async fn warm(&self) -> crate::labels::Warm {
        self.upstream.warm(&self.info.upstream_model).await
    }

    fn continues_prefill(&self) -> bool {
        self.upstream.prefill
    }

    /// [`Self::reply`] (`upstream/reply.rs`), its future built in its box
    /// ([`boxed`]).
    fn chat<'a, 'async_trait>(
        &'a self,
        call: Call,
        req: Arc<ChatRequest>,
    ) -> BoxFuture<'async_trait, Result<Reply, ModelError>>
    where
        'a: 'async_trait,
        Self: 'async_trait,
    {
        boxed(move || self.reply(call, req))
    }

    fn estimate(&self, size: CallSize) -> Spend {
        let usage = Usage {
            prompt_tokens: size.input_tokens(self.info.image_tokens),
            completion_tokens: size.output,
            estimated: true,
            ..Usage::default()
        };
        Spend {
            tokens: size.tokens(self.info.image_tokens),
            cost_usd: self.info.cost(&usage),
        }
    }
}
