//! Arenas on the shared Redis (`[state]`), every key under the one hash
//! tag `{<prefix>:arena}` so the closing script touches one slot:
//!
//! - `…:open:<id>`: a hash per arena waiting for its vote (route, models,
//!   key, excerpt, created, expires), expiring when its vote would;
//! - `…:done:<id>`: a voted (or skipped) arena's key and outcome, so a
//!   second vote is told the first; kept [`DONE_TTL`];
//! - `…:votes:<route>`: the route's votes (not skips), oldest first, a
//!   list of `[model_a, model_b, outcome]`; no TTL (the leaderboard's
//!   inputs);
//! - `…:pairs:<route>`: votes per `[model_a, model_b]` pair; no TTL.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;

use super::StoreError;
use super::arena::{Arena, Closed, Vote};
use super::records::Arenas;
use super::redis::Redis;

/// How long a voted arena's outcome answers a second vote (30 days).
pub const DONE_TTL: u64 = 30 * 86_400;

/// Closes an arena in one step: unknown (never opened, or expired and
/// gone), not the caller's, already voted (its outcome), expired, or
/// closed now, when it moves from `open:` to `done:` and a vote (not a
/// skip) is appended to the route's votes and pair counts.
/// KEYS: open:<id>, done:<id>. ARGV: outcome, key ('' for any), now,
/// the tag's key prefix (`{p:arena}:`), the done record's TTL.
static CLOSE: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local a = redis.call('HGETALL', KEYS[1])
if #a == 0 then
  local d = redis.call('HMGET', KEYS[2], 'key', 'outcome')
  if not d[1] then return {'unknown'} end
  if ARGV[2] ~= '' and d[1] ~= ARGV[2] then return {'not_yours'} end
  return {'already', d[2]}
end
local f = {}
for i = 1, #a, 2 do f[a[i]] = a[i + 1] end
if ARGV[2] ~= '' and f.key ~= ARGV[2] then return {'not_yours'} end
if tonumber(f.expires) <= tonumber(ARGV[3]) then return {'unknown'} end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'key', f.key, 'outcome', ARGV[1], 'route', f.route,
  'model_a', f.model_a, 'model_b', f.model_b, 'voted_at', ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[5])
if ARGV[1] ~= 'skip' then
  redis.call('RPUSH', ARGV[4] .. 'votes:' .. f.route, cjson.encode({f.model_a, f.model_b, ARGV[1]}))
  redis.call('HINCRBY', ARGV[4] .. 'pairs:' .. f.route, cjson.encode({f.model_a, f.model_b}), 1)
end
return {'now', f.route, f.model_a, f.model_b, f.key, f.excerpt, f.created, f.expires}
",
    )
});

pub struct RedisArenas(pub Arc<Redis>);

const TAG: &str = "arena";

impl RedisArenas {
    fn key(&self, rest: &str) -> String {
        self.0.key(TAG, rest)
    }
}

fn bad(op: &'static str, what: &str) -> StoreError {
    StoreError::Redis {
        op,
        message: format!("unexpected answer: {what}"),
    }
}

#[async_trait]
impl Arenas for RedisArenas {
    async fn open(&self, a: &Arena) -> Result<(), StoreError> {
        let key = self.key(&format!("open:{}", a.id));
        let ttl = a.expires.saturating_sub(a.created).max(1);
        let mut p = redis::pipe();
        p.atomic()
            .hset_multiple(
                &key,
                &[
                    ("route", a.route.as_str()),
                    ("model_a", &a.model_a),
                    ("model_b", &a.model_b),
                    ("key", &a.key),
                    ("excerpt", &a.excerpt),
                    ("created", &a.created.to_string()),
                    ("expires", &a.expires.to_string()),
                ],
            )
            .ignore()
            .expire(&key, ttl)
            .ignore();
        self.0.pipe::<()>("arena_open", &p).await
    }

    async fn close(
        &self,
        id: &str,
        outcome: &str,
        key: Option<&str>,
        now: i64,
    ) -> Result<Closed, StoreError> {
        let mut call = CLOSE.prepare_invoke();
        call.key(self.key(&format!("open:{id}")))
            .key(self.key(&format!("done:{id}")))
            .arg(outcome)
            .arg(key.unwrap_or(""))
            .arg(now)
            .arg(self.key(""))
            .arg(DONE_TTL);
        let got: Vec<String> = self.0.script("arena_close", &call).await?;
        let num = |s: &str| s.parse::<i64>().map_err(|_| bad("arena_close", s));
        match got.as_slice() {
            [s] if s == "unknown" => Ok(Closed::Unknown),
            [s] if s == "not_yours" => Ok(Closed::NotYours),
            [s, outcome] if s == "already" => Ok(Closed::Already(outcome.clone())),
            [s, route, model_a, model_b, key, excerpt, created, expires] if s == "now" => {
                Ok(Closed::Now(Arena {
                    id: id.to_owned(),
                    route: route.clone(),
                    model_a: model_a.clone(),
                    model_b: model_b.clone(),
                    key: key.clone(),
                    excerpt: excerpt.clone(),
                    created: num(created)?,
                    expires: num(expires)?,
                }))
            }
            other => Err(bad("arena_close", &format!("{} fields", other.len()))),
        }
    }

    async fn pair_counts(&self, route: &str) -> Result<Vec<(String, String, u64)>, StoreError> {
        let key = self.key(&format!("pairs:{route}"));
        let got: HashMap<String, u64> = self
            .0
            .run("arena_pairs", redis::cmd("HGETALL").arg(&key))
            .await?;
        got.into_iter()
            .map(
                |(pair, n)| match serde_json::from_str::<(String, String)>(&pair) {
                    Ok((a, b)) => Ok((a, b, n)),
                    Err(e) => Err(bad("arena_pairs", &e.to_string())),
                },
            )
            .collect()
    }

    async fn votes(&self, route: &str) -> Result<Vec<Vote>, StoreError> {
        let key = self.key(&format!("votes:{route}"));
        let got: Vec<String> = self
            .0
            .run("arena_votes", redis::cmd("LRANGE").arg(&key).arg(0).arg(-1))
            .await?;
        got.iter()
            .map(
                |v| match serde_json::from_str::<(String, String, String)>(v) {
                    Ok((model_a, model_b, outcome)) => Ok(Vote {
                        model_a,
                        model_b,
                        outcome,
                    }),
                    Err(e) => Err(bad("arena_votes", &e.to_string())),
                },
            )
            .collect()
    }
}
