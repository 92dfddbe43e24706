//! `strategy = "arena"`: a blind comparison. Two contestants answer at
//! once (through the lanes), or the 2 to 6 of the route's pool a request
//! names in `contestants` ([`select`]); the client gets the answers as
//! choices 0 (A), 1 (B), … in a shuffled order, with no model name
//! anywhere, and an arena id to vote on later (`POST /v1/arena/{id}/vote`,
//! an endpoint of its own: [`votes`]). When some contestants fail, the
//! battle is the ones that answered (two or more); one answer alone is
//! sent with nothing to vote on (`x-conclave-arena: incomplete`).
//! Streamed, the answers arrive interleaved as OpenAI streams several
//! choices. What the client gets is built from scratch by allow-list, so
//! nothing in it differs by model except what each model said ([`shape`]
//! for whole answers, [`chunks`] for streams); the models' names stay in
//! the store and the events. The arena and its vote live in the store, so
//! a restart loses neither; the leaderboard is computed from the votes
//! ([`board`]) and served by [`leaderboard`].

pub mod board;
mod chunks;
pub mod config;
mod leaderboard;
pub mod pick;
mod select;
mod shape;
pub mod votes;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rand::seq::SliceRandom;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::error::{AttemptSummary, ModelError};
use crate::graph::endpoint::{HttpEndpoint, Method};
use crate::labels::{Role, Verdict};
use crate::model::Call;
use crate::model::{CallSize, ChatModel, Completion, Meta, Reply, ReplyBody, Spend};
use crate::store::arena::Arena as Opened;
use crate::store::records::Arenas;
use crate::strategy::event;
use crate::stream;
use crate::wire::{ChatRequest, Usage, content_text};
use shape::Face;

/// Served in the arena's strategy-table entry.
pub const ENDPOINTS: &[HttpEndpoint] = &[
    HttpEndpoint {
        method: Method::Post,
        path: "/arena/{id}/vote",
        handler: |call| Box::pin(votes::vote(call)),
    },
    HttpEndpoint {
        method: Method::Get,
        path: "/arena/leaderboard",
        handler: |call| Box::pin(leaderboard::answer(call)),
    },
];

/// `strategy = "arena"`: its entry in [`crate::strategy::STRATEGIES`].
pub const STRATEGY: crate::graph::Strategy =
    crate::graph::Strategy::new("arena", config::parse, config::build)
        .with_metrics(votes::METRICS)
        .with_endpoints(ENDPOINTS);

/// The header that carries the arena id.
pub const ARENA_ID: &str = "x-conclave-arena-id";
/// Characters of the prompt kept with a vote.
const EXCERPT: usize = 200;

/// How a request's two contestants are chosen.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Pairs {
    #[default]
    Random,
    /// The pair with the fewest votes so far.
    Balanced,
}

/// A model that competes.
pub type Contestant = crate::strategy::Member;

pub struct Arena {
    pub name: Arc<str>,
    pub contestants: Vec<Contestant>,
    pub pairs: Pairs,
    pub max_tokens: u32,
    pub vote_ttl: Duration,
    pub store: Arc<dyn Arenas>,
    pub clock: crate::clock::Clock,
}

impl Arena {
    /// The request each contestant gets: answers capped at `max_tokens`
    /// unless the client asked for less, without `contestants`.
    fn capped(&self, req: &ChatRequest) -> Arc<ChatRequest> {
        let mut r = req.clone();
        r.extra.remove(select::FIELD);
        let cap = u64::from(self.max_tokens);
        let asked = req.max_output_tokens().map_or(cap, |m| m.min(cap));
        let keys = ["max_completion_tokens", "max_tokens"];
        let present: Vec<&str> = keys
            .into_iter()
            .filter(|k| r.extra.contains_key(*k))
            .collect();
        for key in if present.is_empty() {
            vec!["max_tokens"]
        } else {
            present
        } {
            r.extra.insert(key.into(), json!(asked));
        }
        Arc::new(r)
    }

    /// Records the arena in the store; `None` (and a log line) when it
    /// cannot be, so the answer still goes out, with nothing to vote on.
    async fn open(&self, call: &Call, req: &ChatRequest, shown: &[usize]) -> Option<String> {
        let now = self.clock.unix_secs_i64();
        let prompt = req
            .messages
            .iter()
            .rev()
            .find(|m| m.role == "user")
            .map(|m| content_text(m.content()))
            .unwrap_or_default();
        let arena = Opened {
            id: format!("arena-{}", uuid::Uuid::new_v4().simple()),
            route: self.name.to_string(),
            models: shown
                .iter()
                .map(|&i| self.contestants[i].name.to_string())
                .collect(),
            key: call.ctx.key.to_string(),
            excerpt: prompt.chars().take(EXCERPT).collect(),
            created: now,
            expires: now.saturating_add(i64::try_from(self.vote_ttl.as_secs()).unwrap_or(i64::MAX)),
        };
        if let Err(e) = self.store.open(&arena).await {
            tracing::error!("cannot record an arena: {e}");
            return None;
        }
        let mut f = Map::new();
        f.insert("arena_id".into(), Value::from(arena.id.as_str()));
        let first = |i: usize| arena.models.get(i).map_or("", String::as_str);
        f.insert("a".into(), Value::from(first(0)));
        f.insert("b".into(), Value::from(first(1)));
        f.insert("models".into(), json!(arena.models));
        event(&call.ctx, "arena_started", f);
        Some(arena.id)
    }
}

impl Arena {
    /// What `chosen` contestants may spend on a request of `size`.
    fn spend_of(&self, chosen: impl Iterator<Item = usize>, size: CallSize) -> Vec<Spend> {
        let size = CallSize {
            output: size.output.min(u64::from(self.max_tokens)),
            ..size
        };
        chosen
            .filter_map(|i| self.contestants.get(i))
            .map(|c| c.model.estimate(size))
            .collect()
    }
}

#[async_trait]
impl ChatModel for Arena {
    /// Both contestants of the most expensive pair could answer: two calls.
    fn estimate(&self, size: CallSize) -> Spend {
        let mut each = self.spend_of(0..self.contestants.len(), size);
        each.sort_by(|a, b| {
            b.cost_usd
                .total_cmp(&a.cost_usd)
                .then(b.tokens.cmp(&a.tokens))
        });
        each.into_iter().take(2).sum()
    }

    /// A request that names its contestants may spend what each of them
    /// may; one that names none (or names them wrongly: refused before
    /// any call), what [`Self::estimate`] says.
    fn estimate_request(&self, req: &ChatRequest, size: CallSize) -> Spend {
        match self.named(req) {
            Ok(Some(chosen)) => self.spend_of(chosen.into_iter(), size).into_iter().sum(),
            _ => self.estimate(size),
        }
    }

    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        if let Some(n) = req.extra.get("n").filter(|n| n.as_u64() != Some(1)) {
            return Err(ModelError::BadRequest {
                message: format!(
                    "An arena answers with one choice per contestant; `n` must be 1 (got {n})."
                ),
                param: Some("n"),
            });
        }
        let named = self.named(&req)?;
        // The answer's one `created`: when the request reached the arena.
        let created = self.clock.unix_secs();
        let mut order = match named {
            Some(chosen) => chosen,
            None => {
                let (i, j) = self.pair().await;
                vec![i, j]
            }
        };
        order.shuffle(&mut rand::rng());
        let asked = self.capped(&req);
        // Fresh: no contestant, nor anything inside one, is answered
        // from a response cache.
        let call = call.with_role(Role::Contestant).fresh();
        let replies = futures::future::join_all(
            order
                .iter()
                .map(|&i| self.contestants[i].model.chat(call.clone(), asked.clone())),
        )
        .await;
        let route = self.name.clone();
        let face = |id: String, arena_id: Option<String>| Face {
            id,
            created,
            model: route.to_string(),
            arena_id,
        };
        let mut answered = Vec::new();
        let mut failed = Vec::new();
        for (&i, r) in order.iter().zip(replies) {
            match r {
                Ok(r) => {
                    r.attempt.set_verdict(Verdict::Ok, None);
                    answered.push((i, r));
                }
                Err(e) => {
                    tracing::debug!(route = %route, error = %e, "an arena contestant failed");
                    failed.push(AttemptSummary::failed(&self.contestants[i].name, &e));
                }
            }
        }
        match answered.len() {
            0 => return Err(ModelError::exhausted("arena", "contestants", route, failed)),
            1 => {
                let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
                let one = answered.into_iter().map(|(_, r)| r).collect();
                let mut reply = answer(one, face(id, None), &call)?;
                reply.meta.add_header("x-conclave-arena", "incomplete");
                return Ok(reply);
            }
            _ => {}
        }
        let shown: Vec<usize> = answered.iter().map(|(i, _)| *i).collect();
        let arena_id = self.open(&call, &req, &shown).await;
        let id = arena_id
            .clone()
            .unwrap_or_else(|| format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()));
        let replies = answered.into_iter().map(|(_, r)| r).collect();
        let mut reply = answer(replies, face(id, arena_id.clone()), &call)?;
        match &arena_id {
            Some(aid) => reply.meta.add_header(ARENA_ID, aid),
            None => reply.meta.add_header("x-conclave-arena", "unrecorded"),
        }
        Ok(reply)
    }
}

/// The answer the client gets: contestants' replies as choices 0, 1, …
/// of one anonymous answer ([`shape`], [`chunks`]), whole when every
/// reply is whole, streamed otherwise.
fn answer(replies: Vec<Reply>, face: Face, call: &Call) -> Result<Reply, ModelError> {
    let face = Arc::new(face);
    let mut attempt = None;
    let mut bodies = Vec::new();
    for r in replies {
        attempt.get_or_insert(r.attempt);
        bodies.push(r.body);
    }
    let attempt = attempt.ok_or_else(|| ModelError::Invalid {
        upstream: face.model.as_str().into(),
        detail: "no contestant answered".into(),
    })?;
    let body = if bodies.iter().all(|b| matches!(b, ReplyBody::Whole(_))) {
        let mut values = Vec::new();
        for b in &bodies {
            if let ReplyBody::Whole(c) = b {
                values.push(serde_json::from_slice::<Value>(&c.body)?);
            }
        }
        let t = call.ctx.totals();
        ReplyBody::Whole(Completion {
            body: Bytes::from(serde_json::to_vec(&shape::whole(&face, &values, t))?),
            usage: Some(Usage {
                prompt_tokens: t.input_tokens,
                completion_tokens: t.output_tokens,
                estimated: t.estimated,
                ..Usage::default()
            }),
        })
    } else {
        let mut streams = Vec::new();
        for (index, b) in bodies.into_iter().enumerate() {
            let s = match b {
                ReplyBody::Stream(s) => s,
                ReplyBody::Whole(c) => stream::whole_to_stream(&c)?,
            };
            streams.push(chunks::choice(s, face.clone(), index));
        }
        let merged = stream::merge(streams);
        ReplyBody::Stream(chunks::usage_last(merged, face, call.ctx.clone()))
    };
    Ok(Reply {
        body,
        meta: Meta::default(),
        attempt,
    })
}
