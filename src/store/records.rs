//! The records strategies keep, behind traits so they never name a
//! backend: [`Arenas`] (opened arenas, their votes and the leaderboard's
//! inputs) and [`OracleSpend`] (what oracle consults spent per session
//! and per key, route and day). [`Records`] holds one of each: the
//! embedded SQLite [`Store`] by default, the shared Redis (`[state]`)
//! when there is one (see [`super::arena_redis`], [`super::oracle_redis`]).
//! The SQLite side runs the store's blocking calls on `spawn_blocking`.

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
    /// Closes arena `id` with `outcome` (`a`, `b`, `tie`, `skip`) at `now`
    /// for the key named `key` (`None`: any key may).
    async fn close(
        &self,
        id: &str,
        outcome: &str,
        key: Option<&str>,
        now: i64,
    ) -> Result<Closed, StoreError>;
    /// Votes (not skips) of `route` per (A, B) pair of models.
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
            arenas: Arc::new(Sqlite(store.clone())),
            oracle: Arc::new(Sqlite(store.clone())),
            clock: store.clock(),
        }
    }

    /// In the shared `redis` when there is one, else in `store`.
    pub fn new(store: &Arc<Store>, redis: Option<&Arc<Redis>>) -> Records {
        match redis {
            Some(r) => Records {
                arenas: Arc::new(super::arena_redis::RedisArenas(r.clone())),
                oracle: Arc::new(super::oracle_redis::RedisOracle(r.clone())),
                clock: store.clock(),
            },
            None => Records::sqlite(store),
        }
    }
}

/// The embedded store's side of the traits.
struct Sqlite(Arc<Store>);

impl Sqlite {
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.0.clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(r) => r,
            Err(e) => Err(StoreError::Task(e.to_string())),
        }
    }
}

#[async_trait]
impl Arenas for Sqlite {
    async fn open(&self, a: &Arena) -> Result<(), StoreError> {
        let a = a.clone();
        self.run(move |s| s.open_arena(&a)).await
    }

    async fn close(
        &self,
        id: &str,
        outcome: &str,
        key: Option<&str>,
        now: i64,
    ) -> Result<Closed, StoreError> {
        let (id, outcome, key) = (id.to_owned(), outcome.to_owned(), key.map(str::to_owned));
        self.run(move |s| s.close_arena(&id, &outcome, key.as_deref(), now))
            .await
    }

    async fn pair_counts(&self, route: &str) -> Result<Vec<(String, String, u64)>, StoreError> {
        let route = route.to_owned();
        self.run(move |s| s.pair_counts(&route)).await
    }

    async fn votes(&self, route: &str) -> Result<Vec<Vote>, StoreError> {
        let route = route.to_owned();
        self.run(move |s| s.votes(&route)).await
    }
}

#[async_trait]
impl OracleSpend for Sqlite {
    async fn reserve(
        &self,
        at: &OracleLedgers,
        worst_usd: f64,
        now: i64,
    ) -> Result<Reserved, StoreError> {
        let at = at.clone();
        self.run(move |s| s.reserve_oracle(&at, worst_usd, now))
            .await
    }

    async fn settle(
        &self,
        at: &OracleLedgers,
        reserved_usd: f64,
        cost_usd: f64,
        now: i64,
    ) -> Result<(), StoreError> {
        let at = at.clone();
        self.run(move |s| s.settle_oracle(&at, reserved_usd, cost_usd, now))
            .await
    }
}
