//! A shared lane's lease in Redis (see the parent module for its rules).
//!
//! Redis keys (tag `lane:<upstream>`, so one Cluster slot), each with a TTL:
//! - `{<prefix>:lane:<upstream>}:holds`: hash, field `<replica> <model>`,
//!   value `<token> <expiry ms>` (Redis server time); the key lives as
//!   long as its longest hold (`lease_ttl`).
//! - `{<prefix>:lane:<upstream>}:fence`: the token counter (a day, or
//!   twice `lease_ttl` if longer).
//! - `{<prefix>:lane:<upstream>}:starving`: `<replica> <model>` of a
//!   starving replica, renewed while it waits ([`STARVING_TTL`]).

use std::sync::Arc;

use async_trait::async_trait;
use redis::Script;

use super::{Lease, Renewed, STARVING_TTL};
use crate::store::StoreError;
use crate::store::redis::Redis;

/// Purges expired holds; grants a model the lease serves already, else
/// the first candidate if there is room; while another replica starves,
/// only its model. Refused and starving: records the starving entry.
/// KEYS: holds, fence, starving. ARGV: replica, max_models, ttl ms,
/// starving (0/1), starving ttl ms, fence ttl ms, candidates...
/// Returns {model, token} or {}.
const ACQUIRE: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local replica, max_models, ttl = ARGV[1], tonumber(ARGV[2]), tonumber(ARGV[3])
local models, count = {}, 0
local flat = redis.call('HGETALL', KEYS[1])
for i = 1, #flat, 2 do
  local exp = string.match(flat[i + 1], '^%d+ (%d+)$')
  if exp == nil or tonumber(exp) <= now then
    redis.call('HDEL', KEYS[1], flat[i])
  else
    local m = string.match(flat[i], '^[^ ]* (.*)$')
    if m ~= nil and not models[m] then
      models[m] = true
      count = count + 1
    end
  end
end
local s_replica, s_model = nil, nil
local s = redis.call('GET', KEYS[3])
if s then s_replica, s_model = string.match(s, '^([^ ]*) (.*)$') end
local pick = nil
for i = 7, #ARGV do
  if models[ARGV[i]] and (s_model == nil or s_model == ARGV[i]) then
    pick = ARGV[i]
    break
  end
end
if pick == nil and count < max_models then
  for i = 7, #ARGV do
    if s_model == nil or s_model == ARGV[i] then
      pick = ARGV[i]
      break
    end
  end
end
if pick == nil then
  if ARGV[4] == '1' and ARGV[7] ~= nil and (s_replica == nil or s_replica == replica) then
    redis.call('SET', KEYS[3], replica .. ' ' .. ARGV[7], 'PX', ARGV[5])
  end
  return {}
end
if s_model == pick then redis.call('DEL', KEYS[3]) end
local token = redis.call('INCR', KEYS[2])
redis.call('PEXPIRE', KEYS[2], ARGV[6])
redis.call('HSET', KEYS[1], replica .. ' ' .. pick, token .. ' ' .. (now + ttl))
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return {pick, tostring(token)}
";

/// Extends each (model, token) hold of the replica whose token is still
/// current and unexpired. KEYS: holds, starving. ARGV: replica, ttl ms,
/// then model, token pairs. Returns {drain (0/1), lost models...}: drain
/// when another replica starves.
const RENEW: &str = r"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
local replica, ttl = ARGV[1], tonumber(ARGV[2])
local out = {'0'}
for i = 3, #ARGV - 1, 2 do
  local f = replica .. ' ' .. ARGV[i]
  local v = redis.call('HGET', KEYS[1], f)
  local token, exp = nil, nil
  if v then token, exp = string.match(v, '^(%d+) (%d+)$') end
  if token ~= nil and token == ARGV[i + 1] and tonumber(exp) > now then
    redis.call('HSET', KEYS[1], f, token .. ' ' .. (now + ttl))
  else
    table.insert(out, ARGV[i])
  end
end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
local s = redis.call('GET', KEYS[2])
if s and string.match(s, '^([^ ]*) ') ~= replica then out[1] = '1' end
return out
";

/// Ends the replica's hold of a model if its token is current. KEYS:
/// holds. ARGV: replica, model, token. Returns 1 when it ended one.
const RELEASE: &str = r"
local f = ARGV[1] .. ' ' .. ARGV[2]
local v = redis.call('HGET', KEYS[1], f)
if v and string.match(v, '^(%d+) ') == ARGV[3] then
  redis.call('HDEL', KEYS[1], f)
  return 1
end
return 0
";

/// The lease in Redis, as one replica (a random id) sees it.
pub struct RedisLease {
    redis: Arc<Redis>,
    replica: String,
    holds: String,
    fence: String,
    starving: String,
    acquire: Script,
    renew: Script,
    release: Script,
}

impl RedisLease {
    pub fn new(redis: Arc<Redis>, upstream: &str) -> RedisLease {
        let tag = format!("lane:{upstream}");
        RedisLease {
            holds: redis.key(&tag, "holds"),
            fence: redis.key(&tag, "fence"),
            starving: redis.key(&tag, "starving"),
            replica: uuid::Uuid::new_v4().simple().to_string(),
            redis,
            acquire: Script::new(ACQUIRE),
            renew: Script::new(RENEW),
            release: Script::new(RELEASE),
        }
    }

    fn ttl_ms(&self) -> u128 {
        self.redis.lease_ttl.as_millis().max(1)
    }
}

#[async_trait]
impl Lease for RedisLease {
    async fn acquire(
        &self,
        candidates: &[Arc<str>],
        max_models: usize,
        starving: bool,
    ) -> Result<Option<(Arc<str>, u64)>, StoreError> {
        let fence_ms = (self.ttl_ms() * 2).max(86_400_000);
        let mut call = self.acquire.key(&self.holds);
        call.key(&self.fence)
            .key(&self.starving)
            .arg(&self.replica)
            .arg(max_models)
            .arg(self.ttl_ms().to_string())
            .arg(u8::from(starving))
            .arg(STARVING_TTL.as_millis().to_string())
            .arg(fence_ms.to_string());
        for c in candidates {
            call.arg(&**c);
        }
        let got: Vec<String> = self.redis.script("lane_acquire", &call).await?;
        Ok(match got.as_slice() {
            [model, token] => {
                let token = token.parse().unwrap_or(0);
                let model = candidates.iter().find(|c| ***c == **model).cloned();
                model.map(|m| (m, token))
            }
            _ => None,
        })
    }

    async fn renew(&self, holds: &[(Arc<str>, u64)]) -> Result<Renewed, StoreError> {
        let mut call = self.renew.key(&self.holds);
        call.key(&self.starving)
            .arg(&self.replica)
            .arg(self.ttl_ms().to_string());
        for (m, t) in holds {
            call.arg(&**m).arg(t.to_string());
        }
        let got: Vec<String> = self.redis.script("lane_renew", &call).await?;
        let mut got = got.into_iter();
        let drain = got.next().is_some_and(|d| d == "1");
        let lost = got
            .filter_map(|l| {
                holds
                    .iter()
                    .find(|(m, _)| **m == *l)
                    .map(|(m, _)| m.clone())
            })
            .collect();
        Ok(Renewed { lost, drain })
    }

    async fn release(&self, model: &str, token: u64) -> Result<bool, StoreError> {
        let mut call = self.release.key(&self.holds);
        call.arg(&self.replica).arg(model).arg(token.to_string());
        let n: i64 = self.redis.script("lane_release", &call).await?;
        Ok(n == 1)
    }
}
