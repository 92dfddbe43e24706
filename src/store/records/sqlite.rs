//! Arenas and oracle spend in the embedded SQLite [`Store`] (see
//! [`crate::store::arena`] and [`crate::store::oracle`] for the tables):
//! the store's blocking calls run on `spawn_blocking`.

use std::sync::Arc;

use async_trait::async_trait;

use super::{Arenas, OracleSpend};
use crate::store::arena::{Arena, Closed, Vote};
use crate::store::oracle::{OracleLedgers, Reserved};
use crate::store::{Store, StoreError};

/// The embedded store's side of the traits.
pub struct Sqlite(pub Arc<Store>);

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
