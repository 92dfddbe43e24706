//! The response cache on the shared Redis (`[state]`), seen by every
//! replica: one hash per entry, `{<prefix>:cache}:e:<key>` (fields `body`,
//! `stored_at`, `route`, `tokens`, `cost`), expiring with its TTL
//! (`PEXPIRE`). Beside them, in the same hash tag (one Cluster slot),
//! what keeps the bounds, changed only by the scripts below, so each
//! put, get and clear is atomic across replicas:
//! - `…:#lru` (zset): every entry, scored by its last use (`seq`), least
//!   recently used first;
//! - `…:#exp` (zset): every entry, scored by its expiry (Unix ms);
//! - `…:#size` (hash): each entry's `<size>:<route>`;
//! - `…:#route:<route>` (set): a route's entries, for a clear by route;
//! - `…:#meta` (hash): `n` and `bytes` (all entries), `seq`.
//!
//! An entry's size is counted as in memory
//! ([`size_of`](super::local::size_of)). A put first forgets up to
//! [`SWEEP`] entries past their expiry (on the Redis server's clock),
//! then evicts the least recently used until `max_entries` and
//! `max_bytes` hold with the new one (at most [`EVICT_MAX`]); one larger
//! than `max_bytes` alone is not stored. A get that finds its
//! entry makes it the most recently used; one whose entry Redis already
//! expired forgets it. A clear forgets at most [`CLEAR_BATCH`] entries per
//! script, called again until none is left.
//!
//! `PUT` is a flagged script (`#!lua`): a Redis over its `maxmemory`
//! refuses it whole (an `Err`: the caller's miss). `GET` and `CLEAR` grow
//! nothing (`flags=allow-oom`). Every call is bounded by `state.timeout`;
//! a failing Redis is an `Err`, never a wait.
//!
//! [`Answers::stats`] cannot ask Redis: it is the figures the latest
//! script answered this replica (every replica's entries together, as of
//! this replica's last put, get or clear).

use std::sync::Arc;
use std::sync::LazyLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::local::size_of;
use super::{Answers, Entry, Stats};
use crate::config::CacheConfig;
use crate::store::StoreError;
use crate::store::redis::Redis;

/// Expired entries a put forgets first, at most.
pub const SWEEP: u32 = 32;
/// Entries one clear script forgets, at most.
pub const CLEAR_BATCH: u32 = 1000;
/// Entries one put evicts, at most.
pub const EVICT_MAX: u32 = 1000;

/// What the scripts share. KEYS[1] `#meta`, KEYS[2] `#lru`, KEYS[3]
/// `#exp`, KEYS[4] `#size`; ARGV[1] the tag's prefix (`{<prefix>:cache}:`).
/// `forget(k)` deletes an entry and takes it out of the figures; 1 if its
/// hash was still there.
const HEAD: &str = r"
local pre = ARGV[1]
local function num(x) return string.format('%.0f', x) end
local function forget(k)
  local had = redis.call('DEL', pre .. 'e:' .. k)
  redis.call('ZREM', KEYS[2], k)
  redis.call('ZREM', KEYS[3], k)
  local m = redis.call('HGET', KEYS[4], k)
  if m then
    redis.call('HDEL', KEYS[4], k)
    local s, route = string.match(m, '^(%d+):(.*)$')
    redis.call('SREM', pre .. '#route:' .. (route or ''), k)
    redis.call('HINCRBY', KEYS[1], 'n', -1)
    redis.call('HINCRBY', KEYS[1], 'bytes', num(-(tonumber(s) or 0)))
  end
  return had
end
local function figures()
  local v = redis.call('HMGET', KEYS[1], 'n', 'bytes')
  local n, b = tonumber(v[1] or '0') or 0, tonumber(v[2] or '0') or 0
  if redis.call('ZCARD', KEYS[2]) == 0 and (n ~= 0 or b ~= 0) then
    redis.call('HDEL', KEYS[1], 'n', 'bytes')
    return 0, 0
  end
  return n, b
end
";

/// Stores one entry within the bounds, on the Redis server's clock (so
/// replicas whose clocks disagree agree on expiry). ARGV: 2 key, 3 route,
/// 4 size, 5 body, 6 stored_at, 7 tokens, 8 cost, 9 ttl (ms), 10 max
/// entries, 11 max bytes, 12 sweep, 13 evictions at most. An entry that
/// would need more evictions is not stored (the next puts go on making
/// room: bounds lowered by a reload shrink the cache a batch at a time).
/// Returns `{stored (1/0), evicted, entries, bytes}`.
const PUT: &str = r"
local k, route, size = ARGV[2], ARGV[3], tonumber(ARGV[4])
local max_n, max_b = tonumber(ARGV[10]), tonumber(ARGV[11])
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
for _, old in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', num(now), 'LIMIT', 0, tonumber(ARGV[12]))) do
  forget(old)
end
forget(k)
local n, b = figures()
if size > max_b then return {0, 0, n, b} end
local evicted, most = 0, tonumber(ARGV[13])
while n + 1 > max_n or b + size > max_b do
  local oldest = redis.call('ZRANGE', KEYS[2], 0, 0)[1]
  if not oldest then break end
  if evicted >= most then return {0, evicted, n, b} end
  forget(oldest)
  evicted = evicted + 1
  n, b = figures()
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
local e = pre .. 'e:' .. k
redis.call('HSET', e, 'body', ARGV[5], 'stored_at', ARGV[6], 'route', route,
  'tokens', ARGV[7], 'cost', ARGV[8])
redis.call('PEXPIRE', e, ARGV[9])
redis.call('ZADD', KEYS[2], seq, k)
redis.call('ZADD', KEYS[3], num(now + tonumber(ARGV[9])), k)
redis.call('HSET', KEYS[4], k, num(size) .. ':' .. route)
redis.call('SADD', pre .. '#route:' .. route, k)
n = redis.call('HINCRBY', KEYS[1], 'n', 1)
b = redis.call('HINCRBY', KEYS[1], 'bytes', num(size))
return {1, evicted, n, b}
";

/// The entry under ARGV[2], made the most recently used (forgotten if
/// Redis expired it). Returns `{found (1/0), entries, bytes, body,
/// stored_at, route, tokens, cost}` (empty strings on a miss).
const GET: &str = r"
local k = ARGV[2]
local v = redis.call('HMGET', pre .. 'e:' .. k, 'body', 'stored_at', 'route', 'tokens', 'cost')
if not v[1] then
  if redis.call('ZSCORE', KEYS[2], k) then forget(k) end
  local n, b = figures()
  return {0, n, b, '', '', '', '', ''}
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('ZADD', KEYS[2], 'XX', seq, k)
local n, b = figures()
return {1, n, b, v[1], v[2] or '', v[3] or '', v[4] or '', v[5] or ''}
";

/// Forgets up to ARGV[2] entries: of the route ARGV[3] if ARGV[4] is 1,
/// else any. Returns `{forgotten, entries held before each was forgotten
/// that still had its hash, entries, bytes}`.
const CLEAR: &str = r"
local limit = tonumber(ARGV[2])
local ks
if ARGV[4] == '1' then
  ks = redis.call('SRANDMEMBER', pre .. '#route:' .. ARGV[3], limit)
else
  ks = redis.call('ZRANGE', KEYS[2], 0, limit - 1)
end
local had = 0
for _, k in ipairs(ks) do
  if ARGV[4] == '1' then redis.call('SREM', pre .. '#route:' .. ARGV[3], k) end
  had = had + forget(k)
end
local n, b = figures()
return {#ks, had, n, b}
";

struct Scripts {
    put: redis::Script,
    get: redis::Script,
    clear: redis::Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| Scripts {
    // A flagged script without `allow-oom` is refused whole by a full Redis.
    put: redis::Script::new(&format!("#!lua\n{HEAD}{PUT}")),
    get: redis::Script::new(&format!("#!lua flags=allow-oom\n{HEAD}{GET}")),
    clear: redis::Script::new(&format!("#!lua flags=allow-oom\n{HEAD}{CLEAR}")),
});

/// Answers kept on the shared Redis, within `bounds` across replicas.
pub struct RedisAnswers {
    redis: Arc<Redis>,
    bounds: CacheConfig,
    /// The figures the latest script answered.
    entries: AtomicU64,
    bytes: AtomicU64,
}

impl RedisAnswers {
    pub fn new(redis: Arc<Redis>, bounds: CacheConfig) -> Self {
        RedisAnswers {
            redis,
            bounds,
            entries: AtomicU64::new(0),
            bytes: AtomicU64::new(0),
        }
    }

    fn key(&self, rest: &str) -> String {
        self.redis.key("cache", rest)
    }

    /// A script's call with the keys and prefix every script takes first.
    fn invoke<'s>(&self, script: &'s redis::Script) -> redis::ScriptInvocation<'s> {
        let mut call = script.prepare_invoke();
        call.key(self.key("#meta"))
            .key(self.key("#lru"))
            .key(self.key("#exp"))
            .key(self.key("#size"))
            .arg(self.key(""));
        call
    }

    fn seen(&self, entries: i64, bytes: i64) {
        self.entries
            .store(u64::try_from(entries).unwrap_or(0), Ordering::Relaxed);
        self.bytes
            .store(u64::try_from(bytes).unwrap_or(0), Ordering::Relaxed);
    }
}

fn bad(what: &str) -> StoreError {
    StoreError::Redis {
        op: "cache_get",
        message: format!("a cached answer has a bad {what}"),
    }
}

type Got = (i64, i64, i64, Vec<u8>, String, String, String, String);

#[async_trait]
impl Answers for RedisAnswers {
    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let mut call = self.invoke(&SCRIPTS.get);
        call.arg(key);
        let (found, n, b, body, stored_at, route, tokens, cost): Got =
            self.redis.script("cache_get", &call).await?;
        self.seen(n, b);
        if found != 1 {
            return Ok(None);
        }
        Ok(Some(Entry {
            body: Bytes::from(body),
            stored_at: stored_at.parse().map_err(|_| bad("stored_at"))?,
            route,
            tokens: tokens.parse().map_err(|_| bad("tokens"))?,
            cost_usd: cost.parse().map_err(|_| bad("cost"))?,
        }))
    }

    async fn put(&self, key: &str, entry: Entry, ttl: Duration) -> Result<(), StoreError> {
        let size = size_of(key, &entry);
        let ttl_ms = u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1);
        let mut call = self.invoke(&SCRIPTS.put);
        call.arg(key)
            .arg(&entry.route)
            .arg(size)
            .arg(entry.body.as_ref())
            .arg(entry.stored_at)
            .arg(entry.tokens)
            .arg(entry.cost_usd.to_string())
            .arg(ttl_ms)
            .arg(self.bounds.max_entries)
            .arg(self.bounds.max_bytes)
            .arg(SWEEP)
            .arg(EVICT_MAX);
        let (_stored, _evicted, n, b): (i64, i64, i64, i64) =
            self.redis.script("cache_put", &call).await?;
        self.seen(n, b);
        Ok(())
    }

    async fn clear(&self, route: Option<&str>) -> Result<u64, StoreError> {
        let mut deleted = 0u64;
        // Each round forgets a full batch or ends; puts made meanwhile
        // cannot keep it going past every entry the bound allows, twice.
        let rounds = 2 * self.bounds.max_entries / u64::from(CLEAR_BATCH) + 2;
        for _ in 0..rounds {
            let mut call = self.invoke(&SCRIPTS.clear);
            call.arg(CLEAR_BATCH)
                .arg(route.unwrap_or_default())
                .arg(u8::from(route.is_some()));
            let (seen, had, n, b): (i64, i64, i64, i64) =
                self.redis.script("cache_clear", &call).await?;
            self.seen(n, b);
            deleted += u64::try_from(had).unwrap_or(0);
            if seen < i64::from(CLEAR_BATCH) {
                break;
            }
        }
        Ok(deleted)
    }

    fn stats(&self) -> Stats {
        Stats {
            entries: self.entries.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
        }
    }
}
