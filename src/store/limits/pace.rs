//! An upstream's `rpm` booked in the shared Redis (`[state]`), so all
//! replicas together send the upstream its limit: the [`Turns`] the
//! state backend hands each upstream with `rpm` (`upstream::limit` paces
//! the calls, and falls back to its own pacing when this fails).

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::Turns;
use crate::store::StoreError;
use crate::store::redis::Redis;

/// Books an upstream's turns on the Redis server's clock: the GCRA of
/// [`PerMinute`](super::rate::PerMinute), where a call whose turn comes within its deadline books
/// it at once (and then waits for it), so waiting calls of every replica
/// queue in one order. KEYS: the limit's arrival time. ARGV: the limit,
/// the longest wait (µs). Returns `{1, wait ms}` (booked) or `{0, wait
/// ms}` (the turn comes too late; nothing booked).
const BOOK: &str = r#"
local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000000 + tonumber(t[2])
local MIN = 60000000
local cell = math.floor(MIN / tonumber(ARGV[1]))
local v = redis.call('GET', KEYS[1])
local tat = now
if v then tat = math.max(tonumber(v), now) end
local next = tat + cell
local wait = math.max(next - (now + MIN), 0)
if wait > tonumber(ARGV[2]) then return {0, math.ceil(wait / 1000)} end
redis.call('SET', KEYS[1], string.format('%.0f', next), 'PX', math.max(1, math.ceil((next - now) / 1000)))
return {1, math.ceil(wait / 1000)}
"#;

/// An upstream's `rpm` kept in the shared Redis.
pub struct RedisTurns {
    redis: Arc<Redis>,
    key: String,
    script: redis::Script,
}

impl RedisTurns {
    /// The turns of upstream `name`.
    pub fn new(redis: Arc<Redis>, name: &str) -> RedisTurns {
        RedisTurns {
            key: redis.key(&format!("upstream:{name}"), "rpm"),
            script: redis::Script::new(BOOK),
            redis,
        }
    }
}

#[async_trait]
impl Turns for RedisTurns {
    async fn book(
        &self,
        limit: u32,
        most: Duration,
    ) -> Result<Result<Duration, Duration>, StoreError> {
        let most_us = u64::try_from(most.as_micros()).unwrap_or(u64::MAX);
        let mut call = self.script.key(&self.key);
        call.arg(limit).arg(most_us);
        let (booked, ms) = self
            .redis
            .script::<(u8, u64)>("upstream_pace", &call)
            .await?;
        let wait = Duration::from_millis(ms);
        Ok(if booked == 1 { Ok(wait) } else { Err(wait) })
    }
}
