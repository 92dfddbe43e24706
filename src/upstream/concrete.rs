//! [`ConcreteModel`]: a configured model on an upstream, and the single
//! place where upstream calls are made and recorded. Every call opens an
//! [`Attempt`] (probe warm state, send, decode, deadlines); strategies built
//! on top never do their own bookkeeping.

use std::sync::Arc;

use async_trait::async_trait;
use tokio::time::{Instant, timeout_at};

use super::Upstream;
use super::decode::{self, Exchange};
use crate::error::ModelError;
use crate::model::{Call, ChatModel, Reply, ReplyBody};
use crate::openai::ChatRequest;
use crate::telemetry::{Attempt, ModelInfo};

pub struct ConcreteModel {
    pub info: Arc<ModelInfo>,
    pub upstream: Arc<Upstream>,
}

impl ConcreteModel {
    async fn exchange(
        &self,
        call: &Call,
        req: &ChatRequest,
        attempt: &Attempt,
    ) -> Result<ReplyBody, ModelError> {
        let up = &self.upstream;
        attempt.set_warm(up.transport.warm(&self.info.upstream_model).await);
        let body = req.to_upstream_body(&self.info.upstream_model)?;
        let started = Instant::now();
        let total = call
            .ctx
            .deadline
            .min(started + up.timeout)
            .min(call.deadline.unwrap_or(call.ctx.deadline));
        let first = match (req.is_stream(), call.ttft_timeout) {
            (true, Some(t)) => total.min(started + t),
            _ => total,
        };
        let x = Exchange {
            upstream: up.name.clone(),
            started,
            first,
            total,
            idle: call.idle_timeout.unwrap_or(up.stream_idle_timeout),
            input_bytes: req.text_bytes(),
            redactor: self.info.redactor.clone(),
        };
        let resp = match timeout_at(first, up.transport.send(body, &call.ctx.upstream_id)).await {
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
        if req.is_stream() {
            decode::stream(resp, x, attempt)
                .await
                .map(ReplyBody::Stream)
        } else {
            decode::whole(resp, &x, attempt).await.map(ReplyBody::Whole)
        }
    }
}

#[async_trait]
impl ChatModel for ConcreteModel {
    async fn chat(&self, call: Call, req: ChatRequest) -> Result<Reply, ModelError> {
        let attempt = Attempt::start(&call.ctx, &self.info, call.role);
        match self.exchange(&call, &req, &attempt).await {
            Ok(body) => Ok(Reply {
                body,
                served_by: self.info.name.clone(),
                attempt,
                exhausted: false,
            }),
            Err(e) => {
                tracing::debug!(request_id = %call.ctx.id, model = %self.info.name, error = %e, "upstream call failed");
                attempt.fail(&e);
                Err(e)
            }
        }
    }
}
