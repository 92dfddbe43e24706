//! Stored answers' rows on the shared Redis (`[state]`): one hash per
//! answer, `{<prefix>:response}:<id>` (fields `key`, `previous`,
//! `created`, `expires`, `input`, `output`), expiring with its retention.
//! Beside them, in the same hash tag (one Cluster slot), what keeps the
//! bounds, changed only by the scripts below, so each write, delete and
//! sweep is atomic:
//! - `…:#by:<key name>` (zset): the key's answers, scored by the order
//!   they were stored (`seq`), oldest first;
//! - `…:#meta` (hash): each answer's `<size>:<key name>`;
//! - `…:#exp` (zset): each answer scored by its expiry (Unix seconds);
//! - `…:#usage` (hash): `n:<key name>` and `b:<key name>` (a key's answers
//!   and bytes), `total` (all keys' bytes), `seq`.
//!
//! `#` is in no answer id ([`valid_id`](super::valid_id)), so these never
//! meet an answer's key. The writer writes a batch as one pipeline of
//! `PUT` scripts. `PUT` is a flagged script (`#!lua`): a Redis over its
//! `maxmemory` refuses it whole (the answer is not stored, logged), never
//! half of it. `DELETE` and `SWEEP` only free memory
//! (`flags=allow-oom`), so they run on a full Redis too. The sweep also
//! forgets answers whose key Redis already expired.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock};

use async_trait::async_trait;

use super::SWEEP_ROWS;
use super::rows::{ResponseRows, Row, Written};
use crate::config::ResponseBounds;
use crate::store::StoreError;
use crate::store::redis::Redis;

/// What the scripts share. KEYS[1] `#usage`, KEYS[2] `#meta`, KEYS[3]
/// `#exp`; ARGV[1] the prefix of answers' keys (`{<prefix>:response}:`).
/// `forget(id)` deletes an answer and takes it out of the figures.
const HEAD: &str = r"
local pre = ARGV[1]
local function num(x) return string.format('%.0f', x) end
local function by(name) return pre .. '#by:' .. name end
local function owner(m)
  local s, name = string.match(m, '^(%d+):(.*)$')
  return tonumber(s) or 0, name or ''
end
local function forget(rid)
  redis.call('DEL', pre .. rid)
  redis.call('ZREM', KEYS[3], rid)
  local m = redis.call('HGET', KEYS[2], rid)
  if not m then return end
  local s, name = owner(m)
  redis.call('HDEL', KEYS[2], rid)
  redis.call('ZREM', by(name), rid)
  local n = redis.call('HINCRBY', KEYS[1], 'n:' .. name, -1)
  local b = redis.call('HINCRBY', KEYS[1], 'b:' .. name, num(-s))
  if n <= 0 or b <= 0 then redis.call('HDEL', KEYS[1], 'n:' .. name, 'b:' .. name) end
  local t = redis.call('HINCRBY', KEYS[1], 'total', num(-s))
  if t <= 0 then redis.call('HDEL', KEYS[1], 'total') end
end
";

/// Stores one answer within the bounds, its key's oldest evicted first.
/// KEYS[4] the answer's key, KEYS[5] its key's `#by:` zset. ARGV: 2 id,
/// 3 key name, 4 size, 5 created, 6 expires, 7 ttl (s), 8 input,
/// 9 output, 10 previous, 11 has a previous (1/0), 12 answers per key,
/// 13 bytes per key, 14 bytes in all.
/// Returns `{stored (1/0), evicted}`.
const PUT: &str = r"
local id, name, size = ARGV[2], ARGV[3], tonumber(ARGV[4])
local max_n, max_kb, max_b = tonumber(ARGV[12]), tonumber(ARGV[13]), tonumber(ARGV[14])
local function figures()
  local v = redis.call('HMGET', KEYS[1], 'n:' .. name, 'b:' .. name, 'total')
  return tonumber(v[1] or '0') or 0, tonumber(v[2] or '0') or 0, tonumber(v[3] or '0') or 0
end
forget(id)
local n, kb, total = figures()
if size > max_kb or total - kb + size > max_b then return {0, 0} end
local evicted = 0
while n + 1 > max_n or kb + size > max_kb or total + size > max_b do
  local oldest = redis.call('ZRANGE', KEYS[5], 0, 0)[1]
  if not oldest then return {0, evicted} end
  local m = redis.call('HGET', KEYS[2], oldest)
  if m and select(2, owner(m)) == name then
    forget(oldest)
    evicted = evicted + 1
  else
    redis.call('ZREM', KEYS[5], oldest)
  end
  n, kb, total = figures()
end
local seq = redis.call('HINCRBY', KEYS[1], 'seq', 1)
redis.call('HSET', KEYS[4], 'key', name, 'created', ARGV[5], 'expires', ARGV[6],
  'input', ARGV[8], 'output', ARGV[9])
if ARGV[11] == '1' then redis.call('HSET', KEYS[4], 'previous', ARGV[10]) end
redis.call('EXPIRE', KEYS[4], ARGV[7])
redis.call('ZADD', KEYS[5], seq, id)
redis.call('HSET', KEYS[2], id, num(size) .. ':' .. name)
redis.call('ZADD', KEYS[3], ARGV[6], id)
redis.call('HINCRBY', KEYS[1], 'n:' .. name, 1)
redis.call('HINCRBY', KEYS[1], 'b:' .. name, num(size))
redis.call('HINCRBY', KEYS[1], 'total', num(size))
return {1, evicted}
";

/// Deletes an answer if the key named `ARGV[3]` stored it, answering its
/// `expires` (nil when it was not there, or another key's).
/// KEYS[4] the answer's key. ARGV[2] its id.
const DELETE: &str = r"
local k = redis.call('HGET', KEYS[4], 'key')
if k ~= ARGV[3] then return false end
local e = redis.call('HGET', KEYS[4], 'expires')
forget(ARGV[2])
return e
";

/// Forgets up to `ARGV[3]` answers expired at `ARGV[2]` (Unix seconds):
/// how many.
const SWEEP: &str = r"
local gone = redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', ARGV[2], 'LIMIT', 0, tonumber(ARGV[3]))
for _, rid in ipairs(gone) do forget(rid) end
return #gone
";

struct Scripts {
    put: redis::Script,
    /// `put`'s text, to load it where a pipeline of `EVALSHA`s finds the
    /// server without it.
    put_text: String,
    delete: redis::Script,
    sweep: redis::Script,
}

static SCRIPTS: LazyLock<Scripts> = LazyLock::new(|| {
    // A flagged script without `allow-oom` is refused whole by a full Redis.
    let put_text = format!("#!lua\n{HEAD}{PUT}");
    Scripts {
        put: redis::Script::new(&put_text),
        put_text,
        delete: redis::Script::new(&format!("#!lua flags=allow-oom\n{HEAD}{DELETE}")),
        sweep: redis::Script::new(&format!("#!lua flags=allow-oom\n{HEAD}{SWEEP}")),
    }
});

pub struct RedisRows(Arc<Redis>);

impl RedisRows {
    pub fn new(redis: Arc<Redis>) -> Self {
        RedisRows(redis)
    }

    fn key(&self, id: &str) -> String {
        self.0.key("response", id)
    }

    /// The keys every script gets first, and the prefix of answers' keys.
    fn head(&self) -> ([String; 3], String) {
        (
            [self.key("#usage"), self.key("#meta"), self.key("#exp")],
            self.key(""),
        )
    }

    fn by(&self, name: &str) -> String {
        self.key(&format!("#by:{name}"))
    }
}

fn bad(what: &str) -> StoreError {
    StoreError::Redis {
        op: "response_get",
        message: format!("a stored response lacks {what}"),
    }
}

#[async_trait]
impl ResponseRows for RedisRows {
    async fn write(
        &self,
        batch: &[(String, Arc<Row>)],
        b: ResponseBounds,
    ) -> Result<Written, StoreError> {
        let ([usage, meta, exp], pre) = self.head();
        let mut p = redis::pipe();
        for (id, r) in batch {
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(SCRIPTS.put.get_hash())
                .arg(5)
                .arg(&usage)
                .arg(&meta)
                .arg(&exp)
                .arg(self.key(id))
                .arg(self.by(&r.key))
                .arg(&pre)
                .arg(id)
                .arg(&r.key)
                .arg(r.size(id))
                .arg(r.created)
                .arg(r.expires)
                .arg(r.expires.saturating_sub(r.created).max(1))
                .arg(&r.input)
                .arg(&r.output)
                .arg(r.previous.as_deref().unwrap_or_default())
                .arg(u8::from(r.previous.is_some()))
                .arg(b.max_per_key)
                .arg(b.max_bytes_per_key)
                .arg(b.max_bytes);
            p.add_command(cmd);
        }
        let got: Vec<(i64, i64)> = self
            .0
            .pipe_script("response_put", &p, &SCRIPTS.put_text)
            .await?;
        let mut w = Written::default();
        for ((id, _), (stored, evicted)) in batch.iter().zip(got) {
            w.evicted += usize::try_from(evicted).unwrap_or(0);
            if stored == 1 {
                w.stored += 1;
            } else {
                w.refused.push(id.clone());
            }
        }
        Ok(w)
    }

    async fn sweep(&self, now: i64) -> Result<usize, StoreError> {
        let ([usage, meta, exp], pre) = self.head();
        let mut call = SCRIPTS.sweep.prepare_invoke();
        call.key(usage)
            .key(meta)
            .key(exp)
            .arg(pre)
            .arg(now)
            .arg(SWEEP_ROWS);
        let n: i64 = self.0.script("response_sweep", &call).await?;
        Ok(usize::try_from(n).unwrap_or(0))
    }

    async fn read(&self, id: &str, key: &str, now: i64) -> Result<Option<Row>, StoreError> {
        let mut got: HashMap<String, String> = self
            .0
            .run("response_get", redis::cmd("HGETALL").arg(self.key(id)))
            .await?;
        if got.get("key").is_none_or(|k| k != key) {
            return Ok(None);
        }
        let mut take = |f: &'static str| got.remove(f).ok_or_else(|| bad(f));
        let num = |s: String, f: &'static str| s.parse::<i64>().map_err(|_| bad(f));
        let row = Row {
            key: take("key")?,
            created: num(take("created")?, "created")?,
            expires: num(take("expires")?, "expires")?,
            input: take("input")?,
            output: take("output")?,
            previous: got.remove("previous"),
        };
        Ok((row.expires > now).then_some(row))
    }

    async fn delete(&self, id: &str, key: &str) -> Result<Option<i64>, StoreError> {
        let ([usage, meta, exp], pre) = self.head();
        let mut call = SCRIPTS.delete.prepare_invoke();
        call.key(usage)
            .key(meta)
            .key(exp)
            .key(self.key(id))
            .arg(pre)
            .arg(id)
            .arg(key);
        let got: Option<String> = self.0.script("response_delete", &call).await?;
        Ok(got.and_then(|e| e.parse().ok()))
    }

    fn shown(&self) -> String {
        format!("Redis {}", self.0.shown())
    }
}
