//! A key's limits where they must be shared: the trait the governor calls
//! ([`KeyLimiter`]) to admit a request against `rpm`, the daily budget
//! and `tpm` all or nothing, to settle what it spent, and to read where
//! its budget stands. Two implementations: [`local`], in this process
//! ([`rate`]'s GCRA on tokio's clock, [`budget`]'s ledger under one lock;
//! spend written to the SQLite store by the governor's flusher), and
//! [`redis`], in a shared Redis, one Lua script per admission and one per
//! settlement, so several replicas together keep one set of limits.

pub mod budget;
pub mod local;
pub mod rate;
pub mod redis;
mod scripts;

use std::time::Duration;

use async_trait::async_trait;

use self::budget::{Daily, Over};
use self::rate::Standing;
use super::StoreError;
use crate::model::Spend;

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
    /// Where the daily budget stands on `day`.
    async fn standing(&self, day: i64) -> Result<budget::Standing, StoreError>;
}
