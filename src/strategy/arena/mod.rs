//! `strategy = "arena"`: a blind A/B comparison. Two contestants answer at
//! once (through the lanes); the client gets both answers as choices 0
//! (A) and 1 (B) in a shuffled order, with no model name anywhere, and an
//! arena id to vote on later (`POST /v1/arena/{id}/vote`, an endpoint of
//! its own: [`votes`]).
//! Streamed, the two answers arrive interleaved as OpenAI streams several
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
mod shape;
pub mod votes;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use rand::Rng;
use rand::seq::IndexedRandom;
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
    /// The two contestants of this request (indices), in no order yet.
    async fn pair(&self) -> (usize, usize) {
        let k = self.contestants.len();
        let all: Vec<(usize, usize)> = (0..k)
            .flat_map(|i| (i + 1..k).map(move |j| (i, j)))
            .collect();
        let candidates = match self.pairs {
            Pairs::Random => all,
            Pairs::Balanced => self.least_voted(all).await,
        };
        candidates
            .choose(&mut rand::rng())
            .copied()
            .unwrap_or((0, 1.min(k.saturating_sub(1))))
    }

    /// The pairs with the fewest votes so far (all of them when the votes
    /// cannot be read).
    async fn least_voted(&self, all: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
        let Ok(counts) = self.store.pair_counts(&self.name).await else {
            return all;
        };
        let name = |i: usize| &*self.contestants[i].name;
        let count = |&(i, j): &(usize, usize)| -> u64 {
            counts
                .iter()
                .filter(|(a, b, _)| {
                    (a == name(i) && b == name(j)) || (a == name(j) && b == name(i))
                })
                .map(|(_, _, n)| n)
                .sum()
        };
        let fewest = all.iter().map(count).min().unwrap_or(0);
        all.into_iter().filter(|p| count(p) == fewest).collect()
    }

    /// The request each contestant gets: answers capped at `max_tokens`
    /// unless the client asked for less.
    fn capped(&self, req: &ChatRequest) -> Arc<ChatRequest> {
        let mut r = req.clone();
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
    async fn open(&self, call: &Call, req: &ChatRequest, a: usize, b: usize) -> Option<String> {
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
            model_a: self.contestants[a].name.to_string(),
            model_b: self.contestants[b].name.to_string(),
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
        f.insert("a".into(), Value::from(arena.model_a));
        f.insert("b".into(), Value::from(arena.model_b));
        event(&call.ctx, "arena_started", f);
        Some(arena.id)
    }
}

#[async_trait]
impl ChatModel for Arena {
    /// Both contestants of the most expensive pair could answer: two calls.
    fn estimate(&self, size: CallSize) -> Spend {
        let size = CallSize {
            output: size.output.min(u64::from(self.max_tokens)),
            ..size
        };
        let mut each: Vec<Spend> = self
            .contestants
            .iter()
            .map(|c| c.model.estimate(size))
            .collect();
        each.sort_by(|a, b| {
            b.cost_usd
                .total_cmp(&a.cost_usd)
                .then(b.tokens.cmp(&a.tokens))
        });
        each.into_iter().take(2).sum()
    }

    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        if let Some(n) = req.extra.get("n").filter(|n| n.as_u64() != Some(1)) {
            return Err(ModelError::BadRequest {
                message: format!(
                    "An arena answers with exactly two choices; `n` must be 1 (got {n})."
                ),
                param: Some("n"),
            });
        }
        // The answer's one `created`: when the request reached the arena.
        let created = self.clock.unix_secs();
        let (i, j) = self.pair().await;
        let (a, b) = if rand::rng().random_bool(0.5) {
            (i, j)
        } else {
            (j, i)
        };
        let asked = self.capped(&req);
        let call = call.with_role(Role::Contestant);
        let (ra, rb) = tokio::join!(
            self.contestants[a].model.chat(call.clone(), asked.clone()),
            self.contestants[b].model.chat(call.clone(), asked.clone()),
        );
        let route = self.name.clone();
        let face = |id: String, arena_id: Option<String>| Face {
            id,
            created,
            model: route.to_string(),
            arena_id,
        };
        let (ra, rb) = match (ra, rb) {
            (Ok(ra), Ok(rb)) => (ra, rb),
            (Ok(one), Err(e)) | (Err(e), Ok(one)) => {
                tracing::debug!(route = %route, error = %e, "an arena contestant failed");
                one.attempt.set_verdict(Verdict::Ok, None);
                let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
                let mut reply = answer(vec![one], face(id, None), &call)?;
                reply.meta.add_header("x-conclave-arena", "incomplete");
                return Ok(reply);
            }
            (Err(ea), Err(eb)) => {
                return Err(ModelError::exhausted(
                    "arena",
                    "contestants",
                    route,
                    vec![
                        AttemptSummary::failed(&self.contestants[a].name, &ea),
                        AttemptSummary::failed(&self.contestants[b].name, &eb),
                    ],
                ));
            }
        };
        ra.attempt.set_verdict(Verdict::Ok, None);
        rb.attempt.set_verdict(Verdict::Ok, None);
        let arena_id = self.open(&call, &req, a, b).await;
        let id = arena_id
            .clone()
            .unwrap_or_else(|| format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()));
        let mut reply = answer(vec![ra, rb], face(id, arena_id.clone()), &call)?;
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
