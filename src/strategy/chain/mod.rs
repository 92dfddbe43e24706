//! `strategy = "chain"`: escalation. The cheapest tier answers first; a
//! verified tier's answer goes to the verifier, which accepts it or sends
//! the request on to the next tier with its feedback. Cloud tiers
//! self-certify. Without a verifier the chain is a plain fallback chain that
//! moves on only on provider failures. A tier the request does not fit
//! (its context window, checked by the concrete model before any call) is
//! skipped with its reason in the trail; when every tier is, the chain
//! answers 400 `context_length_exceeded` rather than `chain_exhausted`.
//! A failed tier is not retried on its own upstream: the next tier is its
//! retry (the last tier's upstream retries as its `retries` say).
//!
//! The answer's `usage` counts every call of the request (every tier and
//! verifier call, whole or streamed alike).
//!
//! Streaming: a self-certifying (or fallback) tier streams live, committed
//! only once its first chunk is in; a verified tier's stream is buffered,
//! judged, and then replayed verbatim. With `midstream_failover`, a
//! live-streamed tier's stream that breaks after text reached the client
//! is continued by the later tiers (`strategy::failover`).

pub mod config;
pub mod verdict;
pub mod verifier;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use crate::error::{AttemptSummary, ModelError};
use crate::labels::{Role, Verdict};
use crate::model::{Call, CallSize, ChatModel, Reply, Spend};
use crate::strategy::failover::{self, Failover, Member};
use crate::stream;
use crate::wire::{ChatRequest, FEEDBACK_NOTE, Message};
use config::OnExhausted;
use verifier::{Decision, Verifier};

/// `strategy = "chain"`: its entry in [`crate::strategy::STRATEGIES`].
pub const STRATEGY: crate::graph::Strategy =
    crate::graph::Strategy::new("chain", config::parse, config::build);

pub struct Tier {
    pub name: Arc<str>,
    pub model: Arc<dyn ChatModel>,
    /// The verifier checks this tier (a local tier, or listed in `verify`).
    pub verified: bool,
}

pub struct Chain {
    pub name: Arc<str>,
    pub tiers: Vec<Tier>,
    pub verifier: Option<Verifier>,
    pub on_exhausted: OnExhausted,
    pub ttft_timeout: Option<Duration>,
    pub stream_idle_timeout: Option<Duration>,
    /// A live stream cut after its first token goes on at the next tiers.
    pub midstream_failover: bool,
}

/// The request a later tier sees: the original plus the rejections so far,
/// appended to the last user message (strict chat templates reject two
/// user messages in a row) or as a new user message.
fn with_feedback(req: &Arc<ChatRequest>, notes: &[String]) -> Arc<ChatRequest> {
    if notes.is_empty() {
        return req.clone();
    }
    let mut out = ChatRequest::clone(req);
    let text = notes
        .iter()
        .map(|n| format!("{FEEDBACK_NOTE}{n}"))
        .collect::<Vec<_>>()
        .join("\n");
    match out.messages.last_mut() {
        Some(last) if last.role == "user" => last.append_text(&text),
        _ => out.messages.push(Message::new("user", text)),
    }
    Arc::new(out)
}

impl Chain {
    /// A live tier's reply, continued by the later tiers that are not
    /// verified should its stream break (with `midstream_failover`).
    fn failover(&self, reply: Reply, call: &Call, req: Arc<ChatRequest>, tier: usize) -> Reply {
        let rest: Vec<Member> = self
            .tiers
            .iter()
            .skip(tier + 1)
            // A continuation reaches the client live, unjudged: a tier
            // the verifier checks never writes one.
            .filter(|t| self.verifier.is_none() || !t.verified)
            .map(|t| Member {
                name: t.name.clone(),
                model: t.model.clone(),
            })
            .collect();
        if !self.midstream_failover || rest.is_empty() {
            return reply;
        }
        let from = reply
            .meta
            .served_by
            .clone()
            .or_else(|| self.tiers.get(tier).map(|t| t.name.clone()))
            .unwrap_or_else(|| self.name.clone());
        let f = Failover {
            route: self.name.clone(),
            call: call
                .with_role(Role::Tier)
                .with_ttft_timeout(self.ttft_timeout),
            req,
            from,
            rest,
        };
        failover::continue_on_failure(reply, f)
    }
}

#[async_trait]
impl ChatModel for Chain {
    /// Every tier, and the verifier on each verified tier's answer.
    fn estimate(&self, size: CallSize) -> Spend {
        self.tiers
            .iter()
            .map(|t| {
                let check = match (&self.verifier, t.verified) {
                    (Some(v), true) => v.model.estimate(size.reading(v.max_tokens)),
                    _ => Spend::default(),
                };
                t.model.estimate(size) + check
            })
            .sum()
    }

    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        // `x-conclave-pin` is taken by the graph's `Pinned` around this
        // node: a pin names a tier of the outermost strategy of the route
        // the client asked for, and no call down here carries one.
        let call = call.with_idle_timeout(self.stream_idle_timeout);
        let mut notes: Vec<String> = Vec::new();
        let mut trail: Vec<AttemptSummary> = Vec::new();
        let mut best: Option<Reply> = None;
        let last = self.tiers.len().saturating_sub(1);
        for (i, tier) in self.tiers.iter().enumerate() {
            // The next tier is a failed tier's retry; the last one's
            // upstream retries on its own (unless the caller retries
            // elsewhere).
            let tier_call = call
                .with_role(Role::Tier)
                .with_ttft_timeout(self.ttft_timeout)
                .with_retry_elsewhere(call.retry_elsewhere || i < last);
            let tier_req = with_feedback(&req, &notes);
            let answer = async {
                let reply = tier.model.chat(tier_call, tier_req.clone()).await?;
                // A tier still loading its model has not answered yet:
                // its first-token deadline may still move the chain on.
                stream::past_loading(reply).await
            };
            let reply = match answer.await {
                Ok(r) => r,
                Err(e) => {
                    trail.push(AttemptSummary::failed(&tier.name, &e));
                    if self.verifier.is_none() && !e.is_failover() {
                        return Err(e);
                    }
                    continue;
                }
            };
            let verifier = match &self.verifier {
                Some(v) if tier.verified => v,
                _ => {
                    reply.attempt.set_verdict(Verdict::Accept, None);
                    let reply = self.failover(reply, &call, tier_req, i);
                    return stream::with_request_usage(reply, call.ctx.clone());
                }
            };
            let served_by = reply
                .meta
                .served_by
                .as_deref()
                .unwrap_or(&tier.name)
                .to_owned();
            let (reply, output) = match reply.buffer().await {
                Ok(x) => x,
                Err(e) => {
                    trail.push(AttemptSummary::failed(&served_by, &e));
                    continue;
                }
            };
            match verifier.verify(&call, &req, &output).await {
                Decision::Accept => {
                    reply.attempt.set_verdict(Verdict::Accept, None);
                    return stream::with_request_usage(reply, call.ctx.clone());
                }
                Decision::Escalate(feedback) => {
                    reply
                        .attempt
                        .set_verdict(Verdict::Escalate, feedback.clone());
                    let said = feedback.as_deref().unwrap_or("rejected without feedback");
                    trail.push(AttemptSummary::rejected(&served_by, "escalate", said));
                    // Only the verifier's own words reach the next tier.
                    notes.extend(feedback);
                    best = Some(reply);
                }
                Decision::Failed(why) => {
                    // The event log says why; the next tier hears nothing.
                    reply
                        .attempt
                        .set_verdict(Verdict::Escalate, Some(why.clone()));
                    trail.push(AttemptSummary::rejected(&served_by, "escalate", &why));
                    best = Some(reply);
                }
            }
        }
        match (self.on_exhausted, best) {
            (OnExhausted::BestAttempt, Some(mut reply)) => {
                reply.meta.add_header("x-conclave-exhausted", "true");
                stream::with_request_usage(reply, call.ctx.clone())
            }
            _ => Err(ModelError::exhausted(
                "chain",
                "tiers",
                self.name.clone(),
                trail,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn feedback_joins_the_last_user_message() {
        let req: ChatRequest = serde_json::from_value(json!({
            "model": "m",
            "messages": [{"role": "user", "content": "Write a haiku"}]
        }))
        .unwrap();
        let out = with_feedback(&Arc::new(req), &["too long".into()]);
        assert_eq!(out.messages.len(), 1);
        assert_eq!(
            out.messages[0].text(),
            "Write a haiku\n\nA previous attempt was rejected: too long"
        );
        let req: ChatRequest = serde_json::from_value(json!({
            "model": "m",
            "messages": [{"role": "user", "content": "x"}, {"role": "tool", "content": "42", "tool_call_id": "c"}]
        }))
        .unwrap();
        let out = with_feedback(&Arc::new(req), &["a".into(), "b".into()]);
        assert_eq!(out.messages.len(), 3);
        assert_eq!(
            out.messages[2].text(),
            "A previous attempt was rejected: a\nA previous attempt was rejected: b"
        );
    }
}
