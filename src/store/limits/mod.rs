//! Limits, wherever they are kept. A key's: the trait the governor calls
//! ([`KeyLimiter`]) to admit a request against `rpm`, the daily budget
//! and `tpm` all or nothing, to settle what it spent, and to read where
//! its budget and per-minute limits stand ([`Usage`]), and [`Keys`],
//! which hands out every key's limiter (the state backend makes one). Two implementations: [`local`], in
//! this process ([`rate`]'s GCRA on tokio's clock, [`budget`]'s ledger
//! under one lock; spend loaded from and written to the SQLite store),
//! and [`redis`], in a shared Redis, one Lua script per admission and
//! one per settlement, so several replicas together keep one set of
//! limits.
//!
//! An upstream's `rpm` shared by replicas is booked through [`Turns`]
//! ([`pace`] on Redis); every rejection, a key's or an upstream's, is
//! recorded by [`rejection::record_rejection`]. [`Spend`] (tokens and
//! dollars) is defined here, below the models that report it.

pub mod budget;
pub mod local;
pub mod pace;
pub mod rate;
pub mod redis;
pub mod rejection;
mod scripts;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use self::budget::{Daily, Over};
use self::rate::{InUse, Standing};
use super::StoreError;
use crate::config::{KeyLimits, OnError};

/// Tokens and dollars, spent or estimated.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Spend {
    pub tokens: u64,
    pub cost_usd: f64,
}

impl std::ops::Add for Spend {
    type Output = Spend;

    fn add(self, o: Spend) -> Spend {
        Spend {
            tokens: self.tokens.saturating_add(o.tokens),
            cost_usd: self.cost_usd + o.cost_usd,
        }
    }
}

impl std::iter::Sum for Spend {
    fn sum<I: Iterator<Item = Spend>>(iter: I) -> Spend {
        iter.fold(Spend::default(), |a, b| a + b)
    }
}

impl std::ops::Mul<u64> for Spend {
    type Output = Spend;

    fn mul(self, n: u64) -> Spend {
        Spend {
            tokens: self.tokens.saturating_mul(n),
            cost_usd: self.cost_usd * n as f64,
        }
    }
}

/// What a request asks of its key's limits.
#[derive(Debug, Clone, Copy)]
pub struct Ask {
    /// Reserved against the daily budget (nothing when the key has none).
    pub estimate: Spend,
    pub daily: Daily,
    /// Tokens `tpm` takes (more than its limit: refused as never fitting).
    pub tpm: u32,
    /// The UTC day (days since the epoch).
    pub day: i64,
}

/// An admitted request: where the per-minute limits stand after it, and
/// its hold on the daily budget.
#[derive(Debug, Clone, Copy, Default)]
pub struct Granted {
    pub requests: Option<Standing>,
    pub tokens: Option<Standing>,
    /// The reservation's id, where the implementation names them.
    pub hold: Option<u64>,
    /// What the key has spent today.
    pub spent: Spend,
}

/// Why a request was turned away.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Refusal {
    /// `rpm` has room again after this long.
    Rpm(Duration),
    /// `tpm` has room again after this long.
    Tpm(Duration),
    /// More tokens than `tpm` holds; it is whole again after this long.
    TpmNever(Duration),
    Budget(Over),
}

/// Where a key's limits stand now, for `GET /v1/keys/usage`: its daily
/// budget, and how much of `rpm` and `tpm` is in use as the limiter's own
/// state says (`None`: the key has no such limit, and nothing counts).
#[derive(Debug, Clone, Copy)]
pub struct Usage {
    pub budget: budget::Standing,
    pub requests: Option<InUse>,
    pub tokens: Option<InUse>,
}

/// What an attempt (or a request's end) settles.
#[derive(Debug, Clone, Copy, Default)]
pub struct Settlement {
    /// The reservation it releases from.
    pub hold: Option<u64>,
    /// How much of the reservation it releases.
    pub release: Spend,
    /// The request ended: what is left of its reservation goes.
    pub last: bool,
    /// What it spent, counted on `day`.
    pub spent: Spend,
    pub day: i64,
    /// Tokens `tpm` charges as debt (> 0) or refunds (< 0).
    pub tpm: i64,
}

/// Told what a key has spent today once a settlement is counted.
pub type OnSpent = Box<dyn FnOnce(Spend) + Send>;

/// One key's limits, wherever they live.
#[async_trait]
pub trait KeyLimiter: Send + Sync {
    /// Takes one request of `rpm`, reserves `ask.estimate` and takes
    /// `ask.tpm` tokens, all or nothing.
    async fn admit(&self, ask: Ask) -> Result<Result<Granted, Refusal>, StoreError>;
    /// Counts a settlement, now or (shared) soon; never blocks.
    fn settle(&self, s: Settlement, done: OnSpent);
    /// Where the daily budget stands on `day`, and `rpm` and `tpm` now
    /// (read, never taken).
    async fn usage(&self, day: i64) -> Result<Usage, StoreError>;
}

/// A key's limiter as [`Keys`] hands it out.
pub struct KeyLimit {
    pub limiter: Arc<dyn KeyLimiter>,
    /// What to do when the limiter's state does not answer (the key's
    /// `on_state_error`, else `[state] on_error`); `None`: it always
    /// answers (in this process).
    pub policy: Option<OnError>,
    /// What the key has spent today, when this process knows it (for
    /// the remaining-budget gauges).
    pub spent: Option<Spend>,
}

/// Every key's limits, in this process or on the shared state.
#[async_trait]
pub trait Keys: Send + Sync {
    /// The limiter of key `name` under `limits`, on UTC day `today`.
    fn key(&self, name: &str, limits: &KeyLimits, today: i64) -> KeyLimit;
    /// Writes the spend not yet saved; blocking (run it off the runtime's
    /// threads).
    fn flush_blocking(&self);
    /// At shutdown: settlements still on their way get `within` to land,
    /// and spend owed to the shared state one more try.
    async fn finish(&self, within: Duration);
}

/// An upstream's `rpm` shared by several replicas: its calls' turns.
#[async_trait]
pub trait Turns: Send + Sync {
    /// Books the next turn of a limit of `limit` calls a minute if it
    /// comes within `most`: `Ok(wait)`, booked, the call goes after
    /// `wait`; `Err(wait)`, it would come too late and nothing is booked,
    /// the limit has room again after `wait`.
    async fn book(
        &self,
        limit: u32,
        most: Duration,
    ) -> Result<Result<Duration, Duration>, StoreError>;
}
