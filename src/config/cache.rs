//! The response cache's settings: `cache = { ttl, scope, max_temperature }`
//! on a route or a model (a [`CacheRule`]), and `[cache]`'s global bounds
//! (a [`CacheConfig`]). What the cache does with them lives in the cache
//! itself; this module only reads and checks them.

use std::time::Duration;

/// Who may be answered from an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum CacheScope {
    /// Only the API key whose request stored it (the default).
    #[default]
    Key,
    /// Every key that may use the route.
    Shared,
}

/// `cache = { ... }` on one route or model, validated.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct CacheRule {
    /// How long an entry answers.
    pub ttl: Duration,
    pub scope: CacheScope,
    /// Requests whose temperature is at most this (a request without one
    /// counts as 1), or that set a `seed`, are cached.
    pub max_temperature: f64,
}

/// `[cache]`: the bounds of every entry together, least recently used out
/// first (in memory; with `[state]`, on Redis under the cache's prefix).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheConfig {
    pub max_bytes: u64,
    pub max_entries: u64,
}

/// 256 MiB.
pub const DEFAULT_MAX_BYTES: u64 = 256 * 1024 * 1024;
pub const DEFAULT_MAX_ENTRIES: u64 = 100_000;

impl Default for CacheConfig {
    fn default() -> Self {
        CacheConfig {
            max_bytes: DEFAULT_MAX_BYTES,
            max_entries: DEFAULT_MAX_ENTRIES,
        }
    }
}
