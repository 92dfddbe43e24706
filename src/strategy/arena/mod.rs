//! `strategy = "arena"`: a blind A/B comparison. Two contestants answer at
//! once (through the lanes); the client gets both answers as choices 0
//! (A) and 1 (B) in a shuffled order, with no model name anywhere, and an
//! arena id to vote on later (`POST /v1/arena/{id}/vote`, in `api`).
//! Streamed, the two answers arrive interleaved as OpenAI streams several
//! choices. The arena and its vote live in the store, so a restart loses
//! neither; the leaderboard is computed from the votes ([`board`]).

pub mod board;
pub mod config;
pub mod pick;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::StreamExt;
use rand::Rng;
use rand::seq::IndexedRandom;
use serde::Deserialize;
use serde_json::{Map, Value, json};

use crate::clock::{unix_secs, unix_secs_i64};
use crate::error::{AttemptSummary, ModelError};
use crate::labels::{Role, Verdict};
use crate::model::Call;
use crate::model::{CallSize, ChatModel, ChunkStream, Completion, Meta, Reply, ReplyBody, Spend};
use crate::store::Store;
use crate::store::arena::Arena as Opened;
use crate::strategy::{event, pinned};
use crate::stream;
use crate::wire::{ChatRequest, Usage, content_text};

/// The header that carries the arena id.
pub const ARENA_ID: &str = "x-conclave-arena-id";
/// Stands in for the upstreams' `system_fingerprint`.
const FINGERPRINT: &str = "conclave-arena";
/// The top-level fields of a contestant's answer that reach the client.
const KEPT: &[&str] = &["object", "created", "choices"];
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
    pub store: Arc<Store>,
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
        let (store, route) = (self.store.clone(), self.name.to_string());
        let counts = tokio::task::spawn_blocking(move || store.pair_counts(&route)).await;
        let Ok(Ok(counts)) = counts else {
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
        let now = unix_secs_i64();
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
        let store = self.store.clone();
        let row = arena.clone();
        match tokio::task::spawn_blocking(move || store.open_arena(&row)).await {
            Ok(Ok(())) => {}
            Ok(Err(e)) => {
                tracing::error!("cannot record an arena: {e}");
                return None;
            }
            Err(e) => {
                tracing::error!("cannot record an arena: {e}");
                return None;
            }
        }
        let mut f = Map::new();
        f.insert("arena_id".into(), Value::from(arena.id.as_str()));
        f.insert("a".into(), Value::from(arena.model_a));
        f.insert("b".into(), Value::from(arena.model_b));
        event(&call.ctx, "arena_started", f);
        Some(arena.id)
    }
}

/// Makes a contestant's chunk or answer anonymous: the route's name, the
/// arena's id and fingerprint, and its choices at `index`.
fn disguise(obj: &mut Map<String, Value>, route: &str, id: &str, index: usize) {
    // Only OpenAI's own fields: anything else an upstream adds (a
    // provider's name, a service tier) could tell the models apart.
    obj.retain(|k, _| KEPT.contains(&k.as_str()));
    obj.insert("model".into(), Value::from(route));
    obj.insert("id".into(), Value::from(id));
    obj.insert("system_fingerprint".into(), Value::from(FINGERPRINT));
    obj.remove("usage");
    stream::set_choice_index(obj, index);
}

fn usage_json(ctx_totals: crate::context::Totals) -> Value {
    json!({
        "prompt_tokens": ctx_totals.input_tokens,
        "completion_tokens": ctx_totals.output_tokens,
        "total_tokens": ctx_totals.input_tokens.saturating_add(ctx_totals.output_tokens),
    })
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
        if let Some(pin) = call.pin.clone() {
            let members = Contestant::targets(&self.contestants);
            let asked = (call.without_pin(), req, pin.as_ref());
            return pinned(
                ("arena", &self.name),
                "contestant",
                &members,
                Role::Contestant,
                asked,
            )
            .await;
        }
        if let Some(n) = req.extra.get("n").filter(|n| n.as_u64() != Some(1)) {
            return Err(ModelError::BadRequest {
                message: format!(
                    "An arena answers with exactly two choices; `n` must be 1 (got {n})."
                ),
                param: Some("n"),
            });
        }
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
        let (ra, rb) = match (ra, rb) {
            (Ok(ra), Ok(rb)) => (ra, rb),
            (Ok(one), Err(e)) | (Err(e), Ok(one)) => {
                tracing::debug!(route = %route, error = %e, "an arena contestant failed");
                one.attempt.set_verdict(Verdict::Ok, None);
                let id = format!("chatcmpl-{}", uuid::Uuid::new_v4().simple());
                let mut reply = anonymous(one, &route, &id, 0, &call)?;
                reply.meta.add_header("x-conclave-arena", "incomplete");
                return Ok(reply);
            }
            (Err(ea), Err(eb)) => {
                return Err(ModelError::Exhausted {
                    strategy: "arena",
                    members: "contestants",
                    route,
                    attempts: vec![
                        AttemptSummary::failed(&self.contestants[a].name, &ea),
                        AttemptSummary::failed(&self.contestants[b].name, &eb),
                    ],
                });
            }
        };
        ra.attempt.set_verdict(Verdict::Ok, None);
        rb.attempt.set_verdict(Verdict::Ok, None);
        let arena_id = self.open(&call, &req, a, b).await;
        let id = arena_id
            .clone()
            .unwrap_or_else(|| format!("chatcmpl-{}", uuid::Uuid::new_v4().simple()));
        let mut reply = both(ra, rb, &route, &id, arena_id.as_deref(), &call)?;
        match &arena_id {
            Some(aid) => reply.meta.add_header(ARENA_ID, aid),
            None => reply.meta.add_header("x-conclave-arena", "unrecorded"),
        }
        Ok(reply)
    }
}

/// One contestant's answer alone, as choice `index`, anonymous.
fn anonymous(
    one: Reply,
    route: &str,
    id: &str,
    index: usize,
    call: &Call,
) -> Result<Reply, ModelError> {
    let (route, id) = (route.to_owned(), id.to_owned());
    let body = match one.body {
        ReplyBody::Whole(c) => {
            let mut v: Value = serde_json::from_slice(&c.body)?;
            if let Some(obj) = v.as_object_mut() {
                disguise(obj, &route, &id, index);
                obj.insert("usage".into(), usage_json(call.ctx.totals()));
            }
            ReplyBody::Whole(Completion {
                body: Bytes::from(serde_json::to_vec(&v)?),
                usage: c.usage,
            })
        }
        ReplyBody::Stream(s) => ReplyBody::Stream(with_usage_last(
            relabel(s, route.clone(), id.clone(), None, index),
            call,
            &route,
            &id,
        )),
    };
    Ok(Reply {
        body,
        meta: Meta::default(),
        attempt: one.attempt,
    })
}

/// A contestant's stream as choice `index`: usage-only chunks dropped,
/// every other chunk anonymous (and carrying the arena id).
fn relabel(
    s: ChunkStream,
    route: String,
    id: String,
    arena: Option<String>,
    index: usize,
) -> ChunkStream {
    let anonymous_route = route.clone();
    let real = ChunkStream::new(
        s.filter(|c| {
            let keep = c.as_ref().map_or(true, |c| c.choices > 0);
            async move { keep }
        })
        .map(move |c| {
            // An error names no upstream: it would say who answered.
            c.map_err(|e| {
                tracing::debug!(error = %e, "an arena contestant's stream failed");
                ModelError::Invalid {
                    upstream: anonymous_route.as_str().into(),
                    detail: format!("choice {index} broke off"),
                }
            })
        }),
    );
    stream::rewrite(real, move |obj| {
        disguise(obj, &route, &id, index);
        if let Some(a) = &arena {
            obj.insert("arena_id".into(), Value::from(a.as_str()));
        }
        true
    })
}

/// `s`, then one usage chunk with every call of the request.
fn with_usage_last(s: ChunkStream, call: &Call, route: &str, id: &str) -> ChunkStream {
    let ctx = call.ctx.clone();
    let (route, id) = (route.to_owned(), id.to_owned());
    let last = futures::stream::once(async move {
        let created = unix_secs();
        stream::chunk_of(&json!({
            "id": id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": route,
            "system_fingerprint": FINGERPRINT,
            "choices": [],
            "usage": usage_json(ctx.totals()),
        }))
    });
    ChunkStream::new(s.chain(last))
}

/// Both answers as one: A as choice 0, B as choice 1.
fn both(
    ra: Reply,
    rb: Reply,
    route: &str,
    id: &str,
    arena: Option<&str>,
    call: &Call,
) -> Result<Reply, ModelError> {
    let body = match (ra.body, rb.body) {
        (ReplyBody::Whole(a), ReplyBody::Whole(b)) => {
            let (va, vb): (Value, Value) = (
                serde_json::from_slice(&a.body)?,
                serde_json::from_slice(&b.body)?,
            );
            let choice = |v: &Value, index: usize| {
                let mut c = v
                    .pointer("/choices/0")
                    .cloned()
                    .unwrap_or_else(|| json!({}));
                if let Some(o) = c.as_object_mut() {
                    o.insert("index".into(), json!(index));
                }
                c
            };
            let t = call.ctx.totals();
            let mut out = json!({
                "id": id,
                "object": "chat.completion",
                "created": va.get("created").cloned().unwrap_or(json!(0)),
                "model": route,
                "system_fingerprint": FINGERPRINT,
                "choices": [choice(&va, 0), choice(&vb, 1)],
                "usage": usage_json(t),
            });
            if let (Some(aid), Some(o)) = (arena, out.as_object_mut()) {
                o.insert("arena_id".into(), Value::from(aid));
            }
            ReplyBody::Whole(Completion {
                body: Bytes::from(serde_json::to_vec(&out)?),
                usage: Some(Usage {
                    prompt_tokens: t.input_tokens,
                    completion_tokens: t.output_tokens,
                    estimated: t.estimated,
                }),
            })
        }
        (a, b) => {
            let s = |r: ReplyBody| match r {
                ReplyBody::Stream(s) => Ok(s),
                ReplyBody::Whole(c) => stream::whole_to_stream(&c),
            };
            let arena = arena.map(str::to_owned);
            let merged = stream::merge(vec![
                relabel(s(a)?, route.to_owned(), id.to_owned(), arena.clone(), 0),
                relabel(s(b)?, route.to_owned(), id.to_owned(), arena, 1),
            ]);
            ReplyBody::Stream(with_usage_last(merged, call, route, id))
        }
    };
    Ok(Reply {
        body,
        meta: Meta::default(),
        attempt: ra.attempt,
    })
}
