//! Wall-clock time as the wire and the store write it: Unix seconds. A
//! leaf: every layer may use it.

use std::time::{SystemTime, UNIX_EPOCH};

/// Seconds since the Unix epoch (0 for a clock set before it).
pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// [`unix_secs`] as SQLite stores it.
pub fn unix_secs_i64() -> i64 {
    i64::try_from(unix_secs()).unwrap_or(i64::MAX)
}
