//! The records strategies keep, behind traits so they never name a
//! backend: [`Arenas`] (opened arenas, their votes and the leaderboard's
//! inputs) and [`OracleSpend`] (what oracle consults spent per session
//! and per key, route and day). [`Records`] holds one of each, handed
//! out by the [`Backend`](crate::store::Backend): the embedded SQLite
//! [`Store`] by default ([`sqlite`]), the shared Redis (`[state]`) when
//! there is one ([`redis`]).

pub mod redis;
pub mod sqlite;

use std::sync::Arc;

use async_trait::async_trait;

use super::arena::{Arena, Closed, Vote};
use super::oracle::{OracleLedgers, Reserved};
use super::redis::Redis;
use super::{Store, StoreError};
use crate::clock::Clock;

/// Arenas and their votes.
#[async_trait]
pub trait Arenas: Send + Sync {
    /// Records a newly opened arena.
    async fn open(&self, a: &Arena) -> Result<(), StoreError>;
    /// Closes arena `id` with `outcome` (`a`..`f`, `tie`, `bad`,
    /// `rank:…`, `skip`: [`crate::store::arena`]) at `now` for the key
    /// named `key` (`None`: any key may); an outcome that does not fit
    /// the arena's size leaves it open ([`Closed::Misfit`]).
    async fn close(
        &self,
        id: &str,
        outcome: &str,
        key: Option<&str>,
        now: i64,
    ) -> Result<Closed, StoreError>;
    /// How many times each pair of `route`'s models was compared by votes
    /// (the pairwise results they stand for).
    async fn pair_counts(&self, route: &str) -> Result<Vec<(String, String, u64)>, StoreError>;
    /// Every vote (not skips) of `route`, oldest first.
    async fn votes(&self, route: &str) -> Result<Vec<Vote>, StoreError>;
}

/// Oracle consults' spend.
#[async_trait]
pub trait OracleSpend: Send + Sync {
    /// Reserves `worst_usd` for one consult in its session and its key's
    /// day, all or nothing: refused when either would pass its cap.
    async fn reserve(
        &self,
        at: &OracleLedgers,
        worst_usd: f64,
        now: i64,
    ) -> Result<Reserved, StoreError>;
    /// Settles a reservation of `reserved_usd` to the real `cost_usd`.
    async fn settle(
        &self,
        at: &OracleLedgers,
        reserved_usd: f64,
        cost_usd: f64,
        now: i64,
    ) -> Result<(), StoreError>;
}

/// Where strategies keep their records, and the clock that dates them.
#[derive(Clone)]
pub struct Records {
    pub arenas: Arc<dyn Arenas>,
    pub oracle: Arc<dyn OracleSpend>,
    pub clock: Clock,
}

impl Records {
    /// In the embedded `store`.
    pub fn sqlite(store: &Arc<Store>) -> Records {
        Records {
            arenas: Arc::new(sqlite::Sqlite(store.clone())),
            oracle: Arc::new(sqlite::Sqlite(store.clone())),
            clock: store.clock(),
        }
    }

    /// In the shared `redis` (`[state]`), dated by `clock`.
    pub(crate) fn redis(redis: &Arc<Redis>, clock: Clock) -> Records {
        Records {
            arenas: Arc::new(redis::RedisArenas(redis.clone())),
            oracle: Arc::new(redis::RedisOracle(redis.clone())),
            clock,
        }
    }
}
