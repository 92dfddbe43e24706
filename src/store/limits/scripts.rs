//! The Lua scripts of the shared limits ([`super::redis`]). Every one
//! reads the Redis server's clock (`TIME`), so replicas with skewed
//! clocks agree, and touches only one key's Redis keys, which share one
//! hash tag (`{<prefix>:key:<name>}`), so it also runs on Redis Cluster.
//! Times are microseconds; numbers written with `%.0f`/`%.17g` (Lua's
//! `tostring` would write large ones as `1.7e+15`).
//!
//! The admission and settlement scripts are flagged (`#!lua`, Redis 7 or
//! Valkey): a Redis over its `maxmemory` (or refusing writes for any
//! reason) refuses them whole, before their first command. An unflagged
//! script would only be refused at its first write that needs memory, after
//! the writes that free some (an `HDEL`) went through, and then run to its
//! end. So a full Redis is an error of the admission, which the key's
//! `on_state_error` policy answers (`fail_closed`: a 503), never a
//! request admitted with none of its spend recorded. The standing script
//! only frees memory and stays unflagged.
//!
//! Keys and their lifetimes:
//! - `:rpm`, `:tpm`: a GCRA limit's theoretical arrival time; it expires
//!   when the limit is whole again.
//! - `:spent:<YYYY-MM-DD>`: hash `t` (tokens), `c` (USD) spent that UTC
//!   day; expires two days after its last write.
//! - `:holds` (zset: reservation id scored by its expiry, ms) and
//!   `:held` (hash: id to `tokens:usd`, and their sums in `_t` and `_c`,
//!   so an admission reads what is held in O(1)): the reservations of
//!   requests in flight. Every script drops expired ones (up to 256 at a
//!   time, taking them out of the sums), so a replica that dies holding
//!   some does not hold the budget for the rest of the day; the sums
//!   start again from zero whenever no reservation is left (no float
//!   drift survives), and both keys expire when their newest reservation
//!   would.

/// Common head: the server's clock and helpers.
const HEAD: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local now_ms = math.floor(now / 1000)
local MIN = 60000000
local function num(x) return string.format('%.0f', x) end
local function tat_of(k)
  local v = redis.call('GET', k)
  if v then return math.max(tonumber(v), now) end
  return now
end
local function set_tat(k, tat)
  if tat > now then
    redis.call('SET', k, num(tat), 'PX', math.max(1, math.ceil((tat - now) / 1000)))
  else
    redis.call('DEL', k)
  end
end
local function split(v)
  local a, b = string.match(v, '^([^:]+):(.+)$')
  return tonumber(a) or 0, tonumber(b) or 0
end
local function adjust(held, dt, dc)
  if dt ~= 0 then redis.call('HINCRBY', held, '_t', num(dt)) end
  if dc ~= 0 then redis.call('HINCRBYFLOAT', held, '_c', string.format('%.17g', dc)) end
end
local function prune(holds, held)
  local gone = redis.call('ZRANGEBYSCORE', holds, '-inf', now_ms, 'LIMIT', 0, 256)
  if #gone == 0 then return end
  local dt, dc = 0, 0
  for _, v in ipairs(redis.call('HMGET', held, unpack(gone))) do
    if v then
      local a, b = split(v)
      dt = dt + a
      dc = dc + b
    end
  end
  redis.call('HDEL', held, unpack(gone))
  redis.call('ZREM', holds, unpack(gone))
  adjust(held, -dt, -dc)
end
local function held_sum(holds, held)
  if redis.call('ZCARD', holds) == 0 then
    redis.call('HDEL', held, '_t', '_c')
    return 0, 0
  end
  local v = redis.call('HMGET', held, '_t', '_c')
  return math.max(tonumber(v[1] or '0') or 0, 0), math.max(tonumber(v[2] or '0') or 0, 0)
end
local function standing(tat, cell, limit)
  if limit <= 0 then return -1, -1 end
  local room = math.floor((now + MIN - tat) / cell)
  return math.max(0, math.min(room, limit)), math.max(0, math.floor((tat - now) / 1000))
end
"#;

/// Admits one request, all or nothing: `rpm` (GCRA), the daily budget
/// (today's spend plus the unexpired reservations), `tpm` (GCRA).
/// KEYS: rpm, tpm, spent:<day>, holds, held. ARGV: rpm limit (0: none),
/// tpm limit (0: none), tokens tpm takes, budgeted (1/0), daily tokens
/// (-1: none), daily USD (-1: none), estimate tokens, estimate USD,
/// reservation id, reservation ttl (ms).
/// Returns `{0, rpm left, rpm reset ms, tpm left, tpm reset ms, spent
/// tokens, spent USD}`, or a refusal: `{1, wait ms}` rpm, `{2, left,
/// held}` daily tokens, `{3, left, held}` daily USD, `{4, wait ms}` tpm,
/// `{5, whole in ms}` more than tpm holds.
const ADMIT: &str = r#"
local rpm_l, tpm_l, n = tonumber(ARGV[1]), tonumber(ARGV[2]), math.max(1, tonumber(ARGV[3]))
local rpm_cell = rpm_l > 0 and math.floor(MIN / rpm_l) or 0
local tpm_cell = tpm_l > 0 and math.floor(MIN / tpm_l) or 0
local rpm_next, tpm_next
if tpm_l > 0 and n > tpm_l then
  return {5, math.floor((tat_of(KEYS[2]) - now) / 1000)}
end
if rpm_l > 0 then
  rpm_next = tat_of(KEYS[1]) + rpm_cell
  local over = rpm_next - (now + MIN)
  if over > 0 then return {1, math.ceil(over / 1000)} end
end
local st = tonumber(redis.call('HGET', KEYS[3], 't') or '0')
local sc = tonumber(redis.call('HGET', KEYS[3], 'c') or '0')
local et, ec = tonumber(ARGV[7]), tonumber(ARGV[8])
if ARGV[4] == '1' then
  prune(KEYS[4], KEYS[5])
  local ht, hc = held_sum(KEYS[4], KEYS[5])
  local lt, lc = tonumber(ARGV[5]), tonumber(ARGV[6])
  if lt >= 0 then
    local left = math.max(lt - st - ht, 0)
    if et > left then return {2, left, ht} end
  end
  if lc >= 0 then
    local left = math.max(lc - sc - hc, 0)
    if ec > left then return {3, string.format('%.17g', left), string.format('%.17g', hc)} end
  end
end
if tpm_l > 0 then
  tpm_next = tat_of(KEYS[2]) + n * tpm_cell
  local over = tpm_next - (now + MIN)
  if over > 0 then return {4, math.ceil(over / 1000)} end
end
if rpm_l > 0 then set_tat(KEYS[1], rpm_next) end
if tpm_l > 0 then set_tat(KEYS[2], tpm_next) end
if ARGV[4] == '1' then
  local ttl = tonumber(ARGV[10])
  redis.call('ZADD', KEYS[4], now_ms + ttl, ARGV[9])
  redis.call('HSET', KEYS[5], ARGV[9], ARGV[7] .. ':' .. ARGV[8])
  adjust(KEYS[5], et, ec)
  redis.call('PEXPIRE', KEYS[4], ttl)
  redis.call('PEXPIRE', KEYS[5], ttl)
end
local rl, rr = standing(rpm_next or now, rpm_cell, rpm_l)
local tl, tr = standing(tpm_next or now, tpm_cell, tpm_l)
return {0, rl, rr, tl, tr, st, string.format('%.17g', sc)}
"#;

/// Settles an attempt or a request's end: releases from its reservation
/// (all of it when last), adds what it spent to the day, and corrects
/// `tpm` (a debt charged, or a refund).
/// KEYS: tpm, spent:<day>, holds, held. ARGV: reservation id ('' none),
/// release tokens, release USD, last (1/0), spent tokens, spent USD, tpm
/// correction (signed tokens), tpm limit (0: none), day ttl (s).
/// Returns `{spent tokens, spent USD}` of the day.
const SETTLE: &str = r#"
local id = ARGV[1]
if id ~= '' then
  local v = redis.call('HGET', KEYS[4], id)
  if v and ARGV[4] == '1' then
    local a, b = split(v)
    redis.call('HDEL', KEYS[4], id)
    redis.call('ZREM', KEYS[3], id)
    adjust(KEYS[4], -a, -b)
  elseif v then
    local a, b = split(v)
    local na = math.max(a - tonumber(ARGV[2]), 0)
    local nb = math.max(b - tonumber(ARGV[3]), 0)
    redis.call('HSET', KEYS[4], id, num(na) .. ':' .. string.format('%.17g', nb))
    adjust(KEYS[4], na - a, nb - b)
  end
end
prune(KEYS[3], KEYS[4])
if tonumber(ARGV[5]) > 0 then redis.call('HINCRBY', KEYS[2], 't', ARGV[5]) end
if tonumber(ARGV[6]) > 0 then redis.call('HINCRBYFLOAT', KEYS[2], 'c', ARGV[6]) end
if redis.call('EXISTS', KEYS[2]) == 1 then redis.call('EXPIRE', KEYS[2], ARGV[9]) end
local d, l = tonumber(ARGV[7]), tonumber(ARGV[8])
if l > 0 and d ~= 0 then
  local cell = math.floor(MIN / l)
  local v = redis.call('GET', KEYS[1])
  local tat = v and tonumber(v) or now
  if d > 0 then
    tat = math.min(math.max(tat, now) + d * cell, now + MIN + 86400000000)
  else
    tat = math.max(tat + d * cell, now)
  end
  set_tat(KEYS[1], tat)
end
local st = tonumber(redis.call('HGET', KEYS[2], 't') or '0')
local sc = tonumber(redis.call('HGET', KEYS[2], 'c') or '0')
return {st, string.format('%.17g', sc)}
"#;

/// Where a key's day stands: `{spent tokens, spent USD, held tokens,
/// held USD}` (expired reservations dropped first), then `rpm` and `tpm`
/// as the admission would see them now: each `used, remaining, reset ms`
/// (`-1`s for no limit). `used` is `limit - remaining`, plus the cells of
/// debt while the TAT is more than a minute ahead (as
/// [`super::rate::PerMinute::in_use`] counts them).
/// KEYS: spent:<day>, holds, held, rpm, tpm. ARGV: rpm limit (0: none),
/// tpm limit (0: none).
const STANDING: &str = r#"
local st = tonumber(redis.call('HGET', KEYS[1], 't') or '0')
local sc = tonumber(redis.call('HGET', KEYS[1], 'c') or '0')
prune(KEYS[2], KEYS[3])
local ht, hc = held_sum(KEYS[2], KEYS[3])
local function in_use(k, limit)
  if limit <= 0 then return -1, -1, -1 end
  local cell = math.floor(MIN / limit)
  local tat = tat_of(k)
  local left, reset = standing(tat, cell, limit)
  local used = limit - left
  if tat - now > MIN then used = limit + math.ceil((tat - now - MIN) / cell) end
  return used, left, reset
end
local ru, rl, rr = in_use(KEYS[4], tonumber(ARGV[1]) or 0)
local tu, tl, tr = in_use(KEYS[5], tonumber(ARGV[2]) or 0)
return {st, string.format('%.17g', sc), ht, string.format('%.17g', hc), ru, rl, rr, tu, tl, tr}
"#;

/// The three scripts, each with the common head.
pub struct Scripts {
    pub admit: redis::Script,
    pub settle: redis::Script,
    /// The settlement script's text, to load it where a pipeline of
    /// `EVALSHA`s finds the server without it.
    pub settle_text: String,
    pub standing: redis::Script,
}

impl Scripts {
    pub fn new() -> Self {
        let with_head = |body: &str| format!("{HEAD}{body}");
        // Flagged (Redis 7's `#!lua` without `allow-oom`): a Redis over
        // its `maxmemory` refuses the script whole, before any write.
        let flagged = |body: &str| format!("#!lua\n{HEAD}{body}");
        let settle_text = flagged(SETTLE);
        Scripts {
            admit: redis::Script::new(&flagged(ADMIT)),
            settle: redis::Script::new(&settle_text),
            settle_text,
            standing: redis::Script::new(&with_head(STANDING)),
        }
    }
}
