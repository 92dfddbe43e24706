//! [`ConcreteModel`]: a configured model on an upstream, and the single
//! place where upstream calls are made and recorded. Every call opens an
//! [`Attempt`] (probe warm state, send, decode, deadlines); strategies built
//! on top never do their own bookkeeping.

use std::sync::Arc;

use async_trait::async_trait;
use bytes::Bytes;
use serde_json::{Map, Value};
use tokio::time::{Instant, timeout_at};

use super::Upstream;
use super::decode::{self, Exchange};
use crate::attempt::{Attempt, ModelInfo};
use crate::error::ModelError;
use crate::model::{Call, ChatModel, Meta, Reply, ReplyBody};
use crate::wire::{ChatRequest, Endpoint, text_len};

pub struct ConcreteModel {
    pub info: Arc<ModelInfo>,
    pub upstream: Arc<Upstream>,
}

/// One request on its way upstream.
struct Outgoing {
    endpoint: Endpoint,
    body: Bytes,
    stream: bool,
    /// Bytes of text in the request, for a usage estimate.
    input_bytes: usize,
}

impl ConcreteModel {
    /// Relays a Completions or Embeddings body (a JSON object) to this
    /// model: `model` becomes the upstream's name, a stream asks for usage,
    /// and the call is recorded as an attempt like any chat call.
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
        if stream {
            let opts = body
                .entry("stream_options")
                .or_insert_with(|| Value::Object(Map::new()));
            if let Value::Object(o) = opts {
                o.insert("include_usage".into(), Value::Bool(true));
            }
        }
        let input_bytes = ["prompt", "input"]
            .iter()
            .filter_map(|k| body.get(*k))
            .map(text_len)
            .sum();
        let out = Outgoing {
            endpoint,
            body: Bytes::from(serde_json::to_vec(&body)?),
            stream,
            input_bytes,
        };
        self.call(call, out).await
    }

    async fn call(&self, call: Call, out: Outgoing) -> Result<Reply, ModelError> {
        let attempt = Attempt::start(&call.ctx, &self.info, call.role);
        match self.exchange(&call, out, &attempt).await {
            Ok(body) => Ok(Reply {
                body,
                meta: Meta::served_by(self.info.name.clone()),
                attempt,
            }),
            Err(e) => {
                tracing::debug!(request_id = %call.ctx.id, model = %self.info.name, error = %e, "upstream call failed");
                attempt.fail(&e);
                Err(e)
            }
        }
    }

    async fn exchange(
        &self,
        call: &Call,
        out: Outgoing,
        attempt: &Attempt,
    ) -> Result<ReplyBody, ModelError> {
        let up = &self.upstream;
        attempt.set_warm(up.transport.warm(&self.info.upstream_model).await);
        let started = Instant::now();
        let total = call
            .ctx
            .deadline
            .min(started + up.timeout)
            .min(call.deadline.unwrap_or(call.ctx.deadline));
        let first = match (out.stream, call.ttft_timeout) {
            (true, Some(t)) => total.min(started + t),
            _ => total,
        };
        let x = Exchange {
            upstream: up.name.clone(),
            started,
            first,
            total,
            idle: call.idle_timeout.unwrap_or(up.stream_idle_timeout),
            input_bytes: out.input_bytes,
            redactor: self.info.redactor.clone(),
        };
        let resp = match timeout_at(
            first,
            up.transport
                .send(out.endpoint, out.body, &call.ctx.upstream_id),
        )
        .await
        {
            Err(_) => return Err(x.timeout(x.first_phase())),
            Ok(Err(e)) if e.connected => return Err(x.cut(&e.reason)),
            Ok(Err(e)) => {
                return Err(ModelError::Connect {
                    upstream: up.name.clone(),
                    reason: x.redactor.clean(&e.reason),
                    source: Some(Box::new(e)),
                });
            }
            Ok(Ok(r)) => r,
        };
        if !(200..300).contains(&resp.status) {
            return Err(decode::status_error(resp, &x).await);
        }
        if out.stream {
            decode::stream(resp, x, attempt)
                .await
                .map(ReplyBody::Stream)
        } else {
            decode::whole(resp, &x, out.endpoint, attempt)
                .await
                .map(ReplyBody::Whole)
        }
    }
}

#[async_trait]
impl ChatModel for ConcreteModel {
    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        let out = Outgoing {
            endpoint: Endpoint::Chat,
            body: req.to_upstream_body(&self.info.upstream_model)?,
            stream: req.is_stream(),
            input_bytes: req.text_bytes(),
        };
        self.call(call, out).await
    }
}
