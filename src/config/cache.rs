//! The response cache's settings: `cache = { ttl, scope, max_temperature }`
//! on a route or a model (a [`CacheRule`]), and `[cache]`'s global bounds
//! (a [`CacheConfig`]). What the cache does with them lives in the cache
//! itself; this module only reads and checks them. A route's or a
//! model's `cache` is taken out of its table here (every strategy and
//! passthrough alike) before its own parser sees it; an arena's is an
//! error.

use std::time::Duration;

use serde::Deserialize;

use super::Errors;

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

/// The longest `ttl` a rule may give (30 days): an answer older than that
/// is stale for any use a cache is for.
pub const MAX_TTL: Duration = Duration::from_secs(30 * 86_400);

/// The smallest and largest `[cache] max_bytes` (1 KiB, 1 TiB: the byte
/// sums stay far from the 2^53 a Redis script counts exactly).
pub const MIN_MAX_BYTES: u64 = 1024;
pub const MAX_MAX_BYTES: u64 = 1 << 40;
/// The largest `[cache] max_entries`.
pub const MAX_MAX_ENTRIES: u64 = 100_000_000;

/// The highest temperature OpenAI accepts: `max_temperature = 2` caches
/// every request.
const MAX_TEMPERATURE: f64 = 2.0;

/// Strategies whose routes may not be cached, and why.
const UNCACHED: &[(&str, &str)] = &[(
    "arena",
    "not allowed on an arena route: a blind comparison needs fresh answers",
)];

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    #[serde(with = "humantime_serde")]
    ttl: Duration,
    scope: Option<String>,
    max_temperature: Option<f64>,
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawBounds {
    max_bytes: Option<u64>,
    max_entries: Option<u64>,
}

/// Takes `cache` out of the route or model table at `path` and reads it;
/// `strategy` is the route's (`None` for a model). `None` when the table
/// has no `cache`, or a bad one (reported).
pub(super) fn take_rule(
    item: &mut toml::Value,
    path: &str,
    strategy: Option<&str>,
    errs: &mut Errors,
) -> Option<CacheRule> {
    let v = item.as_table_mut()?.remove("cache")?;
    let at = format!("{path}.cache");
    if let Some((_, why)) = UNCACHED.iter().find(|(s, _)| Some(*s) == strategy) {
        errs.push(at, *why);
        return None;
    }
    if !v.is_table() {
        errs.push(
            at,
            "must be a table like { ttl = \"1h\", scope = \"key\", max_temperature = 0.0 }",
        );
        return None;
    }
    let raw = errs.parse::<RawRule>(&at, v)?;
    let mut ok = true;
    if raw.ttl.is_zero() || raw.ttl > MAX_TTL {
        errs.push(
            format!("{at}.ttl"),
            "must be greater than 0 and at most 30 days",
        );
        ok = false;
    }
    let scope = match raw.scope.as_deref() {
        None | Some("key") => CacheScope::Key,
        Some("shared") => CacheScope::Shared,
        Some(other) => {
            errs.push(
                format!("{at}.scope"),
                format!("unknown scope \"{other}\" (expected \"key\" or \"shared\")"),
            );
            ok = false;
            CacheScope::Key
        }
    };
    let max_temperature = raw.max_temperature.unwrap_or(0.0);
    if !(0.0..=MAX_TEMPERATURE).contains(&max_temperature) {
        errs.push(
            format!("{at}.max_temperature"),
            "must be between 0 and 2 (2 caches every request)",
        );
        ok = false;
    }
    ok.then_some(CacheRule {
        ttl: raw.ttl,
        scope,
        max_temperature,
    })
}

/// Reads `[cache]` (the defaults without one).
pub(super) fn bounds(v: Option<toml::Value>, errs: &mut Errors) -> CacheConfig {
    let raw: RawBounds = match v {
        Some(v) => errs.parse("cache", v).unwrap_or_default(),
        None => RawBounds::default(),
    };
    let out = CacheConfig {
        max_bytes: raw.max_bytes.unwrap_or(DEFAULT_MAX_BYTES),
        max_entries: raw.max_entries.unwrap_or(DEFAULT_MAX_ENTRIES),
    };
    if !(MIN_MAX_BYTES..=MAX_MAX_BYTES).contains(&out.max_bytes) {
        errs.push(
            "cache.max_bytes",
            format!("must be between {MIN_MAX_BYTES} and {MAX_MAX_BYTES} (bytes)"),
        );
    }
    if !(1..=MAX_MAX_ENTRIES).contains(&out.max_entries) {
        errs.push(
            "cache.max_entries",
            format!("must be between 1 and {MAX_MAX_ENTRIES}"),
        );
    }
    out
}

/// A rule as `conclave check` shows it: "cached 1h, per key, temperature
/// at most 0".
pub(super) fn describe(rule: &CacheRule) -> String {
    let scope = match rule.scope {
        CacheScope::Key => "per key",
        CacheScope::Shared => "shared by keys",
    };
    format!(
        "cached {}, {scope}, temperature at most {}",
        super::duration_text(rule.ttl),
        rule.max_temperature
    )
}

#[cfg(test)]
mod tests;
