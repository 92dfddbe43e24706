//! Arenas and oracle spend on the shared Redis (`[state]`).
//!
//! Arenas live under the one hash tag `{<prefix>:arena}` so the closing
//! script touches one slot:
//!
//! - `…:open:<id>`: a hash per arena waiting for its vote (route, its
//!   models as a JSON array in letter order, the first two also as
//!   `model_a` and `model_b`, key, excerpt, created, expires), expiring
//!   when its vote would; a pair's hash from before has no `models`;
//! - `…:done:<id>`: a voted (or skipped) arena's key and outcome, so a
//!   second vote is told the first; kept [`DONE_TTL`];
//! - `…:votes:<route>`: the route's votes (not skips), oldest first, each
//!   `{"models": [...], "outcome": "...", "at": <unix seconds>}` (a vote
//!   from before N-way arenas: `[model_a, model_b, outcome]`, undated);
//!   no TTL (the leaderboard's inputs);
//! - `…:pairs:<route>`: comparisons per `[model, model]` pair (letter
//!   order), every pair a vote compares; no TTL.
//!
//! Both ledgers of one oracle consult live under the key name's hash tag
//! `{<prefix>:oracle:<key>}`, so one script reserves (or settles) in both
//! at once:
//!
//! - `…:day:<route>:<YYYY-MM-DD>`: the key's consults and dollars on the
//!   route that UTC day, a hash (`calls`, `cost`), kept [`DAY_TTL`];
//! - `…:session:<key>/<session>`: the session's, kept [`SESSION_TTL`]
//!   from its last consult.
//!
//! Dollars are kept as text with 17 significant digits, so they read
//! back as the same `f64`.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;

use super::{Arenas, OracleSpend};
use crate::store::StoreError;
use crate::store::arena::{Arena, Closed, Vote, sizes};
use crate::store::oracle::{OracleLedgers, Reserved};
use crate::store::redis::Redis;

/// How long a voted arena's outcome answers a second vote (30 days).
pub const DONE_TTL: u64 = 30 * 86_400;

/// Closes an arena in one step: unknown (never opened, or expired and
/// gone), not the caller's, already voted (its outcome), expired, a vote
/// that does not fit its size (`misfit`, left open), or closed now, when
/// it moves from `open:` to `done:` and a vote (not a skip) is appended
/// to the route's votes and counted in its pairs (a single letter
/// compares that letter with each other; anything else, every pair).
/// KEYS: open:<id>, done:<id>. ARGV: outcome, key ('' for any), now,
/// the tag's key prefix (`{p:arena}:`), the done record's TTL, the
/// fewest and most contestants the outcome fits.
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
local m
if f.models then m = cjson.decode(f.models) else m = {f.model_a, f.model_b} end
if #m < tonumber(ARGV[6]) or #m > tonumber(ARGV[7]) then return {'misfit', tostring(#m)} end
local models = cjson.encode(m)
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[2], 'key', f.key, 'outcome', ARGV[1], 'route', f.route,
  'models', models, 'voted_at', ARGV[3])
redis.call('EXPIRE', KEYS[2], ARGV[5])
if ARGV[1] ~= 'skip' then
  redis.call('RPUSH', ARGV[4] .. 'votes:' .. f.route,
    cjson.encode({models = m, outcome = ARGV[1], at = tonumber(ARGV[3])}))
  local w = nil
  if #ARGV[1] == 1 then w = string.byte(ARGV[1]) - 96 end
  for i = 1, #m do
    for j = i + 1, #m do
      if w == nil or i == w or j == w then
        redis.call('HINCRBY', ARGV[4] .. 'pairs:' .. f.route, cjson.encode({m[i], m[j]}), 1)
      end
    end
  end
end
return {'now', f.route, models, f.key, f.excerpt, f.created, f.expires}
",
    )
});

/// One stored vote, as written now or before N-way arenas.
#[derive(serde::Deserialize)]
#[serde(untagged)]
enum Stored {
    Dated {
        models: Vec<String>,
        outcome: String,
        at: i64,
    },
    Pair(String, String, String),
}

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
        let models = serde_json::to_string(&a.models).unwrap_or_default();
        let first = |i: usize| a.models.get(i).map_or("", String::as_str);
        let mut p = redis::pipe();
        p.atomic()
            .hset_multiple(
                &key,
                &[
                    ("route", a.route.as_str()),
                    ("models", &models),
                    ("model_a", first(0)),
                    ("model_b", first(1)),
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
        let (min, max) = sizes(outcome);
        let mut call = CLOSE.prepare_invoke();
        call.key(self.key(&format!("open:{id}")))
            .key(self.key(&format!("done:{id}")))
            .arg(outcome)
            .arg(key.unwrap_or(""))
            .arg(now)
            .arg(self.key(""))
            .arg(DONE_TTL)
            .arg(min)
            .arg(max);
        let got: Vec<String> = self.0.script("arena_close", &call).await?;
        let num = |s: &str| s.parse::<i64>().map_err(|_| bad("arena_close", s));
        match got.as_slice() {
            [s] if s == "unknown" => Ok(Closed::Unknown),
            [s] if s == "not_yours" => Ok(Closed::NotYours),
            [s, outcome] if s == "already" => Ok(Closed::Already(outcome.clone())),
            [s, n] if s == "misfit" => Ok(Closed::Misfit(
                n.parse().map_err(|_| bad("arena_close", n))?,
            )),
            [s, route, models, key, excerpt, created, expires] if s == "now" => {
                Ok(Closed::Now(Arena {
                    id: id.to_owned(),
                    route: route.clone(),
                    models: serde_json::from_str(models)
                        .map_err(|e| bad("arena_close", &e.to_string()))?,
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
            .map(|v| match serde_json::from_str::<Stored>(v) {
                Ok(Stored::Dated {
                    models,
                    outcome,
                    at,
                }) => Ok(Vote {
                    models,
                    outcome,
                    at,
                }),
                Ok(Stored::Pair(a, b, outcome)) => Ok(Vote {
                    models: vec![a, b],
                    outcome,
                    at: 0,
                }),
                Err(e) => Err(bad("arena_votes", &e.to_string())),
            })
            .collect()
    }
}

/// How long a day's ledger is kept: past the day, then it is of no use.
pub const DAY_TTL: u64 = 2 * 86_400;
/// How long a session's ledger is kept after its last consult (30 days).
pub const SESSION_TTL: u64 = 30 * 86_400;

/// Reserves (`ARGV[1]` = `reserve`) a consult's worst case in the day's
/// ledger and the session's, all or nothing, refusing when either would
/// pass its cap; or settles (`settle`) by adding the difference between
/// real and reserved cost (never below zero) to both.
/// KEYS: the day ledger, then the session ledger if any. ARGV: op,
/// amount (worst, or real minus reserved), key cap, session cap, day TTL,
/// session TTL. Answers `held, key, session|''`, `session_full, spent`,
/// `key_full, spent` or `settled`.
static LEDGER: LazyLock<redis::Script> = LazyLock::new(|| {
    redis::Script::new(
        r"
local function fmt(v) return string.format('%.17g', v) end
local function spent(k) return tonumber(redis.call('HGET', k, 'cost') or '0') end
local function add(k, calls, d, ttl)
  local v = spent(k) + d
  if v < 0 then v = 0 end
  redis.call('HSET', k, 'cost', fmt(v))
  redis.call('HINCRBY', k, 'calls', calls)
  redis.call('EXPIRE', k, ttl)
end
local amount = tonumber(ARGV[2])
if ARGV[1] == 'settle' then
  add(KEYS[1], 0, amount, ARGV[5])
  if KEYS[2] then add(KEYS[2], 0, amount, ARGV[6]) end
  return {'settled'}
end
local s = ''
if KEYS[2] then
  local ss = spent(KEYS[2])
  if ss + amount > tonumber(ARGV[4]) then return {'session_full', fmt(ss)} end
  s = fmt(ss + amount)
end
local k = spent(KEYS[1])
if k + amount > tonumber(ARGV[3]) then return {'key_full', fmt(k)} end
add(KEYS[1], 1, amount, ARGV[5])
if KEYS[2] then add(KEYS[2], 1, amount, ARGV[6]) end
return {'held', fmt(k + amount), s}
",
    )
});

pub struct RedisOracle(pub Arc<Redis>);

impl RedisOracle {
    fn call(&self, at: &OracleLedgers, op: &str, amount: f64) -> redis::ScriptInvocation<'static> {
        let tag = format!("oracle:{}", at.key);
        let mut call = LEDGER.prepare_invoke();
        call.key(self.0.key(&tag, &format!("day:{}:{}", at.route, at.day)));
        let session_cap = match &at.session {
            Some((s, cap)) => {
                call.key(self.0.key(&tag, &format!("session:{s}")));
                *cap
            }
            None => 0.0,
        };
        call.arg(op)
            .arg(format!("{amount:e}"))
            .arg(format!("{:e}", at.key_cap))
            .arg(format!("{session_cap:e}"))
            .arg(DAY_TTL)
            .arg(SESSION_TTL);
        call
    }
}

fn usd(s: &str) -> Result<f64, StoreError> {
    s.parse().map_err(|_| StoreError::Redis {
        op: "oracle_reserve",
        message: format!("unexpected answer: {s:?}"),
    })
}

#[async_trait]
impl OracleSpend for RedisOracle {
    async fn reserve(
        &self,
        at: &OracleLedgers,
        worst_usd: f64,
        _now: i64,
    ) -> Result<Reserved, StoreError> {
        let call = self.call(at, "reserve", worst_usd);
        let got: Vec<String> = self.0.script("oracle_reserve", &call).await?;
        match got.as_slice() {
            [s, key, session] if s == "held" => Ok(Reserved::Held {
                key: usd(key)?,
                session: match session.as_str() {
                    "" => None,
                    s => Some(usd(s)?),
                },
            }),
            [s, spent] if s == "session_full" => Ok(Reserved::SessionFull { spent: usd(spent)? }),
            [s, spent] if s == "key_full" => Ok(Reserved::KeyFull { spent: usd(spent)? }),
            other => Err(StoreError::Redis {
                op: "oracle_reserve",
                message: format!("unexpected answer of {} fields", other.len()),
            }),
        }
    }

    async fn settle(
        &self,
        at: &OracleLedgers,
        reserved_usd: f64,
        cost_usd: f64,
        _now: i64,
    ) -> Result<(), StoreError> {
        let call = self.call(at, "settle", cost_usd - reserved_usd);
        let _: Vec<String> = self.0.script("oracle_settle", &call).await?;
        Ok(())
    }
}
