//! The state backend, built once by `prepare`: the one place that
//! decides between this process's state (the embedded SQLite [`Store`],
//! a file or memory) and the shared Redis of `[state]`, and hands every
//! part its side of it: the keys' limits ([`Keys`]), the strategies'
//! records ([`Records`]), the stored Responses answers
//! ([`ResponseRows`]), a local lane's lease ([`Lease`]) and an
//! upstream's `rpm` ([`Turns`]), and the response cache's entries
//! ([`Answers`]). Nothing above the store names the
//! backend it runs on; `/readyz` asks [`Backend::health`].

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use super::cache::Answers;
use super::cache::local::LocalAnswers;
use super::cache::redis::RedisAnswers;
use super::lanes::Lease;
use super::lanes::redis::RedisLease;
use super::limits::local::LocalKeys;
use super::limits::pace::RedisTurns;
use super::limits::redis::{Shared, SharedKeys};
use super::limits::{Keys, Turns};
use super::records::Records;
use super::redis::Redis;
use super::responses::ResponseRows;
use super::responses::redis::RedisRows;
use super::responses::sqlite::SqliteRows;
use super::{Store, StoreError};
use crate::clock::Clock;
use crate::config::{CacheConfig, OnError, StateConfig};
use crate::sink::Metrics;

/// Where the state lives: this process, or a shared server.
pub struct Backend {
    /// The embedded store (`server.state_path`, else in memory).
    store: Arc<Store>,
    /// Whether `store` is a file (spend is kept across restarts).
    persisted: bool,
    /// The shared state (`[state]`), if any.
    shared: Option<Arc<Redis>>,
}

/// How the shared state answered `/readyz`.
pub struct Health {
    /// What it is (`redis`).
    pub backend: &'static str,
    /// Where it is, without its password.
    pub url: String,
    /// What governors do while it does not answer (`[state] on_error`).
    pub on_error: OnError,
    pub answer: Result<(), StoreError>,
}

impl Backend {
    /// Opens the embedded store (at `path`, else in memory) and, with
    /// `shared` (`[state]`), a client for the shared state: it connects
    /// on first use, so a gateway starts while that is down.
    pub fn open(
        path: Option<&Path>,
        shared: Option<&StateConfig>,
        clock: Clock,
        metrics: Metrics,
    ) -> Result<Backend, StoreError> {
        let (store, persisted) = match path {
            Some(path) => (Store::open(path, clock)?, true),
            None => (Store::in_memory(clock)?, false),
        };
        let shared = match shared {
            Some(cfg) => Some(Arc::new(Redis::open(cfg, metrics)?)),
            None => None,
        };
        Ok(Backend {
            store: Arc::new(store),
            persisted,
            shared,
        })
    }

    /// Whether the shared state answers `cfg` (`conclave check --probe`).
    pub async fn ping_shared(cfg: &StateConfig) -> Result<(), StoreError> {
        Redis::open(cfg, Metrics::noop())?.ping().await
    }

    /// Every key's limits: on the shared state, where a request's
    /// reservation lasts `hold_ttl` unless settled (and spend owed while
    /// it was down is written by a task, started here); else in this
    /// process, the day's spend loaded from a persisted store now and
    /// flushed back by a task started here. Call it once, on a tokio
    /// runtime.
    pub fn keys(&self, hold_ttl: Duration) -> Result<Arc<dyn Keys>, StoreError> {
        if let Some(redis) = &self.shared {
            return Ok(Arc::new(SharedKeys(Shared::new(redis.clone(), hold_ttl))));
        }
        let store = self.persisted.then(|| self.store.clone());
        let keys = LocalKeys::open(store, self.store.clock())?;
        keys.start_flushing();
        Ok(keys)
    }

    /// Where strategies keep arenas and oracle spend.
    pub fn records(&self) -> Records {
        match &self.shared {
            Some(redis) => Records::redis(redis, self.store.clock()),
            None => Records::sqlite(&self.store),
        }
    }

    /// Where stored Responses answers are kept.
    pub fn response_rows(&self) -> Arc<dyn ResponseRows> {
        match &self.shared {
            Some(redis) => Arc::new(RedisRows::new(redis.clone())),
            None => Arc::new(SqliteRows::new(self.store.clone())),
        }
    }

    /// Where the response cache keeps its entries, within `bounds`: on
    /// the shared state, seen by every replica (its bounds hold for all of
    /// them together); else in this process's memory.
    pub fn answers(&self, bounds: CacheConfig) -> Arc<dyn Answers> {
        match &self.shared {
            Some(redis) => Arc::new(RedisAnswers::new(redis.clone(), bounds)),
            None => Arc::new(LocalAnswers::new(bounds, self.store.clock())),
        }
    }

    /// The lease through which upstream `name`'s local lane is shared with
    /// the other replicas; `None` without shared state (the lane is this
    /// process's alone).
    pub fn lane_lease(&self, name: &str) -> Option<Arc<dyn Lease>> {
        let redis = self.shared.as_ref()?;
        Some(Arc::new(RedisLease::new(redis.clone(), name)))
    }

    /// Where upstream `name`'s `rpm` turns are booked across replicas;
    /// `None` without shared state (each paces its own calls).
    pub fn upstream_turns(&self, name: &str) -> Option<Arc<dyn Turns>> {
        let redis = self.shared.as_ref()?;
        Some(Arc::new(RedisTurns::new(redis.clone(), name)))
    }

    /// Whether the shared state answers now; `None` without one (the
    /// embedded store is always there).
    pub async fn health(&self) -> Option<Health> {
        let redis = self.shared.as_ref()?;
        Some(Health {
            backend: "redis",
            url: redis.shown().to_owned(),
            on_error: redis.on_error,
            answer: redis.ping().await,
        })
    }
}
