//! Stored answers of the response cache: complete answers by their
//! request's canonical key, each with the route it answered for and what
//! it cost, bounded by `[cache]` (`max_bytes`, `max_entries`, least
//! recently used out first) and each entry's TTL. In this process's
//! memory, or on the shared Redis (`[state]`) where every replica sees
//! them. A store that fails is a miss to the caller, never an error.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;

use super::StoreError;

pub mod local;
pub mod redis;

/// One stored answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    /// The whole chat completion as it was answered (JSON).
    pub body: Bytes,
    /// Unix seconds it was stored.
    pub stored_at: u64,
    /// The route (or model) it answered for, for `DELETE /v1/cache?route=`.
    pub route: String,
    /// What the answer cost when it was made: its tokens and dollars.
    pub tokens: u64,
    pub cost_usd: f64,
}

/// How much the cache holds now.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Stats {
    pub entries: u64,
    pub bytes: u64,
}

/// Where entries live. `key` is the canonical request's digest (opaque
/// here).
#[async_trait]
pub trait Answers: Send + Sync {
    /// The entry under `key`, if one is there and not expired (it becomes
    /// the most recently used).
    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError>;
    /// Stores `entry` under `key` for `ttl`, making room within the bounds.
    async fn put(&self, key: &str, entry: Entry, ttl: Duration) -> Result<(), StoreError>;
    /// Deletes every entry, or those of `route`; how many.
    async fn clear(&self, route: Option<&str>) -> Result<u64, StoreError>;
    /// Entries and bytes held now (this instance's view).
    fn stats(&self) -> Stats;
}
