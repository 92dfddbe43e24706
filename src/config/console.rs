//! `[console]`: what the web console and the APIs behind it keep. For now
//! the bounded ring of recent request records behind `GET /v1/requests`
//! (`recent_requests`; 0 turns the ring and its endpoints off).

use serde::Deserialize;

use super::Errors;

/// Records the ring keeps unless `console.recent_requests` says otherwise
/// (DESIGN's default). Each record keeps its lines as built (serialized
/// only when read), so the ring costs a request 1 to 2 µs of CPU at 64
/// connections (`../shared/bench`: 24.7 µs a request off, 26.7 on).
pub const DEFAULT_RECENT_REQUESTS: usize = 1000;
/// The most `console.recent_requests` may be: with each record bounded
/// (`telemetry`'s per-record caps), the ring's memory stays bounded too.
pub const MAX_RECENT_REQUESTS: usize = 100_000;

/// `[console]`, validated.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// How many finished requests the ring keeps (0: no ring, and
    /// `/v1/requests` answers 404).
    pub recent_requests: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            recent_requests: DEFAULT_RECENT_REQUESTS,
        }
    }
}

/// `[console]` as the file writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default = "default_recent_requests")]
    recent_requests: i64,
}

fn default_recent_requests() -> i64 {
    DEFAULT_RECENT_REQUESTS as i64
}

/// Reads `[console]` (its defaults when absent or broken).
pub(super) fn console(v: Option<toml::Value>, errs: &mut Errors) -> ConsoleConfig {
    let Some(v) = v else {
        return ConsoleConfig::default();
    };
    let Some(raw) = errs.parse::<Raw>("console", v) else {
        return ConsoleConfig::default();
    };
    match usize::try_from(raw.recent_requests) {
        Ok(n) if n <= MAX_RECENT_REQUESTS => ConsoleConfig { recent_requests: n },
        _ => {
            errs.push(
                "console.recent_requests",
                format!(
                    "must be between 0 (no ring of recent requests) and {MAX_RECENT_REQUESTS}, \
                     not {}",
                    raw.recent_requests
                ),
            );
            ConsoleConfig::default()
        }
    }
}
