//! Oracle spend on the shared Redis (`[state]`): both ledgers of one
//! consult live under the key name's hash tag `{<prefix>:oracle:<key>}`,
//! so one script reserves (or settles) in both at once:
//!
//! - `…:day:<route>:<YYYY-MM-DD>`: the key's consults and dollars on the
//!   route that UTC day, a hash (`calls`, `cost`), kept [`DAY_TTL`];
//! - `…:session:<key>/<session>`: the session's, kept [`SESSION_TTL`]
//!   from its last consult.
//!
//! Dollars are kept as text with 17 significant digits, so they read
//! back as the same `f64`.

use std::sync::{Arc, LazyLock};

use async_trait::async_trait;

use super::StoreError;
use super::oracle::{OracleLedgers, Reserved};
use super::records::OracleSpend;
use super::redis::Redis;

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

fn num(s: &str) -> Result<f64, StoreError> {
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
                key: num(key)?,
                session: match session.as_str() {
                    "" => None,
                    s => Some(num(s)?),
                },
            }),
            [s, spent] if s == "session_full" => Ok(Reserved::SessionFull { spent: num(spent)? }),
            [s, spent] if s == "key_full" => Ok(Reserved::KeyFull { spent: num(spent)? }),
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
