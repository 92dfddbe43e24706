//! `strategy = "balance"`: one model served by several members
//! (deployments, keys or regions), each request sent to one of them as
//! `policy` picks ([`pick`]): weighted random, fewest in flight, or power
//! of two choices over a latency EWMA. A member is a candidate while it
//! is serving (not ejected, see [`ChatModel::availability`]), below its
//! `max_concurrency`, and not yet tried for this request; among local
//! members, those that have the model warm (llama-swap) go first; weight
//! 0 marks a standby, used only when no other member is a candidate.
//!
//! A member that fails before its answer begins (any failure a fallback
//! chain moves on from: unreachable, timeout, 5xx, 429, refused key,
//! broken answer) is retried on another member, up to `retries` times,
//! each retry taken from the route's retry budget; a 400/413/422 goes
//! straight back. The member call is made with `retry_elsewhere`, so its
//! upstream does not retry on itself as well, unless it is the last try.
//! A stream is committed once its first chunk is in: later errors stay in
//! it, unless `midstream_failover` is on: then a stream that breaks after
//! text went out is continued by the other members ([`super::failover`]). No
//! member to call at all fails fast: every one ejected is a 503
//! `no_healthy_upstream`, some at their `max_concurrency` a 429
//! `members_busy` ([`ModelError::NoHealthy`], a [`ModelError::Strategy`]).
//!
//! The answer's `usage` counts every try (and continuation) of the
//! request, whole or streamed alike.
//!
//! Per-member state (calls in flight, latency) lives in [`state`] and
//! outlives reloads.

pub mod config;
pub mod pick;
pub mod state;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt;
use tokio::time::Instant;

use super::failover;
use crate::error::{AttemptSummary, ModelError};
use crate::labels::{Role, Verdict, Warm};
use crate::model::{Availability, Call, CallSize, ChatModel, ChunkStream, Reply, ReplyBody, Spend};
use crate::retry::RetryReason;
use crate::stream;
use crate::wire::ChatRequest;
use pick::{Candidate, Policy};
use state::{MemberState, Slot};

/// `strategy = "balance"`: its entry in [`crate::strategy::STRATEGIES`].
pub const STRATEGY: crate::graph::Strategy =
    crate::graph::Strategy::new("balance", config::parse, config::build);

/// The longest a pick waits for the members' warm states.
const WARM_WAIT: Duration = Duration::from_millis(50);

pub struct BalanceMember {
    pub name: Arc<str>,
    pub model: Arc<dyn ChatModel>,
    pub weight: u32,
    pub max_concurrency: Option<u32>,
    /// A model on a local lane: its warm state is asked.
    pub local: bool,
    pub state: Arc<MemberState>,
}

pub struct Balance {
    pub name: Arc<str>,
    pub members: Vec<BalanceMember>,
    pub policy: Policy,
    pub retries: u32,
    /// A stream that breaks after text went out is continued by the
    /// other members.
    pub midstream_failover: bool,
    pub ttft_timeout: Option<Duration>,
    pub stream_idle_timeout: Option<Duration>,
}

/// Why a balance retries after `e`: its retry reason, or, for a failure
/// only this member has (a refused key, a broken answer), a server fault.
fn reason_of(e: &ModelError) -> RetryReason {
    e.retry_reason().unwrap_or(RetryReason::ServerError)
}

/// What keeps members from being candidates.
#[derive(Default)]
struct Unserved {
    /// The soonest an ejected member is back.
    ejected: Option<Duration>,
    busy: bool,
}

impl Balance {
    /// The members that would take a call now, not in `tried`; warm
    /// local members first when any is known warm.
    async fn candidates(&self, tried: &[usize], why: &mut Unserved) -> Vec<Candidate> {
        let mut out = Vec::new();
        for (index, m) in self.members.iter().enumerate() {
            if tried.contains(&index) {
                continue;
            }
            if let Availability::Ejected { retry_after } = m.model.availability() {
                why.ejected = Some(why.ejected.map_or(retry_after, |d| d.min(retry_after)));
                continue;
            }
            let in_flight = m.state.in_flight();
            if m.max_concurrency.is_some_and(|max| in_flight >= max) {
                why.busy = true;
                continue;
            }
            out.push(Candidate {
                index,
                weight: m.weight,
                in_flight,
                latency: m.state.latency(),
            });
        }
        self.prefer_warm(out).await
    }

    /// Drops the local members known cold when another has the model
    /// warm; asks the local ones at once, for a moment at most.
    async fn prefer_warm(&self, cands: Vec<Candidate>) -> Vec<Candidate> {
        let local: Vec<usize> = cands
            .iter()
            .map(|c| c.index)
            .filter(|i| self.members.get(*i).is_some_and(|m| m.local))
            .collect();
        if local.is_empty() || cands.len() < 2 {
            return cands;
        }
        let asks = local.iter().map(|i| async move {
            let warm = match self.members.get(*i) {
                Some(m) => tokio::time::timeout(WARM_WAIT, m.model.warm())
                    .await
                    .unwrap_or(Warm::Unknown),
                None => Warm::Unknown,
            };
            (*i, warm)
        });
        let states = futures::future::join_all(asks).await;
        let cold: Vec<usize> = states
            .iter()
            .filter(|(_, w)| *w == Warm::No)
            .map(|(i, _)| *i)
            .collect();
        if cold.is_empty() || !states.iter().any(|(_, w)| *w == Warm::Yes) {
            return cands;
        }
        cands
            .into_iter()
            .filter(|c| !cold.contains(&c.index))
            .collect()
    }

    /// The next member to call and its slot; `None` when no member is a
    /// candidate.
    async fn next(&self, tried: &[usize], why: &mut Unserved) -> Option<(usize, Slot, bool)> {
        let mut cands = self.candidates(tried, why).await;
        loop {
            let i = pick::pick(self.policy, &cands, &mut rand::rng())?;
            let m = self.members.get(i)?;
            match m.state.try_acquire(m.max_concurrency) {
                Some(slot) => {
                    let more = cands.len() > 1;
                    return Some((i, slot, more));
                }
                // Taken by a call that raced this one.
                None => {
                    why.busy = true;
                    cands.retain(|c| c.index != i);
                }
            }
        }
    }

    /// `reply`, whose stream (should it break after text went out) the
    /// other members continue, in config order (`midstream_failover`).
    fn failover(
        &self,
        reply: Reply,
        call: &Call,
        req: Arc<ChatRequest>,
        from: &BalanceMember,
    ) -> Reply {
        let rest = self
            .members
            .iter()
            .filter(|o| o.name != from.name)
            .map(|o| failover::Member {
                name: o.name.clone(),
                model: o.model.clone(),
            })
            .collect();
        let f = failover::Failover {
            route: self.name.clone(),
            call: call
                .with_role(Role::Member)
                .with_ttft_timeout(self.ttft_timeout),
            req,
            from: from.name.clone(),
            rest,
        };
        failover::continue_on_failure(reply, f)
    }

    /// The error when no member could be called at all.
    fn unavailable(&self, why: Unserved) -> ModelError {
        match why.ejected.filter(|_| !why.busy) {
            Some(retry_after) => ModelError::NoHealthy {
                route: self.name.clone(),
                retry_after,
                attempts: Vec::new(),
            },
            // Back in a second: a call ends soon.
            None => ModelError::Strategy {
                status: 429,
                code: "members_busy",
                message: format!(
                    "every member of `{}` is ejected or at its max_concurrency; try again shortly",
                    self.name
                ),
                param: None,
                retry_after: Some(1),
            },
        }
    }
}

/// `reply` with `slot` held until its stream ends.
fn holding(mut reply: Reply, slot: Slot) -> Reply {
    if let ReplyBody::Stream(s) = reply.body {
        reply.body = ReplyBody::Stream(ChunkStream::new(s.map(move |c| {
            let _held = &slot;
            c
        })));
    }
    reply
}

#[async_trait]
impl ChatModel for Balance {
    /// The most expensive member, once per try.
    fn estimate(&self, size: CallSize) -> Spend {
        let tries = u64::from(
            self.retries
                .min(self.members.len().saturating_sub(1) as u32),
        ) + 1;
        let most =
            self.members
                .iter()
                .map(|m| m.model.estimate(size))
                .fold(Spend::default(), |a, b| Spend {
                    tokens: a.tokens.max(b.tokens),
                    cost_usd: a.cost_usd.max(b.cost_usd),
                });
        most * tries
    }

    /// Serving while any member is; else ejected until the soonest is back.
    fn availability(&self) -> Availability {
        let mut soonest: Option<Duration> = None;
        for m in &self.members {
            match m.model.availability() {
                Availability::Serving => return Availability::Serving,
                Availability::Ejected { retry_after } => {
                    soonest = Some(soonest.map_or(retry_after, |d| d.min(retry_after)));
                }
            }
        }
        match soonest {
            Some(retry_after) => Availability::Ejected { retry_after },
            None => Availability::Serving,
        }
    }

    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        let call = call.with_idle_timeout(self.stream_idle_timeout);
        let mut tried: Vec<usize> = Vec::new();
        let mut trail: Vec<AttemptSummary> = Vec::new();
        let mut last: Option<ModelError> = None;
        let mut retries_left = self.retries;
        let mut why = Unserved::default();
        let mut all_rate_limited = true;
        while let Some((i, slot, more)) = self.next(&tried, &mut why).await {
            tried.push(i);
            let Some(m) = self.members.get(i) else { break };
            let elsewhere = more && retries_left > 0;
            let member_call = call
                .with_role(Role::Member)
                .with_ttft_timeout(self.ttft_timeout)
                .with_retry_elsewhere(elsewhere);
            let started = Instant::now();
            let answer = async {
                let reply = m.model.chat(member_call, req.clone()).await?;
                // A member still loading its model has not answered yet.
                stream::past_loading(reply).await
            };
            match answer.await {
                Ok(mut reply) => {
                    m.state.record(started.elapsed());
                    reply.attempt.set_verdict(Verdict::Accept, None);
                    if reply.meta.served_by.is_none() {
                        reply.meta.served_by = Some(m.name.clone());
                    }
                    let mut reply = holding(reply, slot);
                    if self.midstream_failover {
                        reply = self.failover(reply, &call, req, m);
                    }
                    // Usage counts the tries that failed before it too.
                    return stream::with_request_usage(reply, call.ctx.clone());
                }
                Err(e) => {
                    drop(slot);
                    if matches!(e, ModelError::Timeout { .. }) {
                        m.state.record(started.elapsed());
                    }
                    trail.push(AttemptSummary::failed(&m.name, &e));
                    if !e.is_failover() {
                        return Err(e);
                    }
                    // A member that was never called (the request does not
                    // fit it, it was ejected on the way, or its upstream
                    // had no `rpm` turn in time): moving on is no retry.
                    let skipped =
                        e.skipped().is_some() || matches!(e, ModelError::Throttled { .. });
                    let reason = reason_of(&e);
                    all_rate_limited &= reason == RetryReason::RateLimited;
                    last = Some(e);
                    if skipped {
                        continue;
                    }
                    if !elsewhere || !call.ctx.retry(reason) {
                        break;
                    }
                    retries_left -= 1;
                }
            }
        }
        let Some(last) = last else {
            return Err(self.unavailable(why));
        };
        // One failure, or every one a 429: the member's own error says
        // it best (with its Retry-After).
        if trail.len() == 1 || all_rate_limited {
            return Err(last);
        }
        Err(ModelError::exhausted(
            "balance",
            "members",
            self.name.clone(),
            trail,
        ))
    }

    /// Warm when any member is; else cold when any is; else unknown.
    async fn warm(&self) -> Warm {
        let all = futures::future::join_all(self.members.iter().map(|m| m.model.warm())).await;
        if all.contains(&Warm::Yes) {
            Warm::Yes
        } else if all.contains(&Warm::No) {
            Warm::No
        } else {
            Warm::Unknown
        }
    }
}

#[cfg(test)]
mod tests;
