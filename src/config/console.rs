//! `[console]`: the web console at `/console` (`enabled`, `open`,
//! `grafana_url`) and what the APIs behind it keep: the bounded ring of
//! recent request records behind `GET /v1/requests` (`recent_requests`;
//! 0 turns the ring and its endpoints off).

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
/// The longest `console.grafana_url` (it is written into the page).
const MAX_URL: usize = 2048;

/// `[console]`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsoleConfig {
    /// Whether `/console` is served at all (`false`: a 404).
    pub enabled: bool,
    /// Whether a gateway without `[[keys]]` serves the console to clients
    /// other than loopback ones.
    pub open: bool,
    /// Where the keys page links for history (an `http(s)://` URL).
    pub grafana_url: Option<String>,
    /// How many finished requests the ring keeps (0: no ring, and
    /// `/v1/requests` answers 404).
    pub recent_requests: usize,
}

impl Default for ConsoleConfig {
    fn default() -> Self {
        ConsoleConfig {
            enabled: true,
            open: false,
            grafana_url: None,
            recent_requests: DEFAULT_RECENT_REQUESTS,
        }
    }
}

/// `[console]` as the file writes it.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[serde(default = "yes")]
    enabled: bool,
    #[serde(default)]
    open: bool,
    #[serde(default)]
    grafana_url: Option<String>,
    #[serde(default = "default_recent_requests")]
    recent_requests: i64,
}

fn yes() -> bool {
    true
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
    let recent_requests = match usize::try_from(raw.recent_requests) {
        Ok(n) if n <= MAX_RECENT_REQUESTS => n,
        _ => {
            errs.push(
                "console.recent_requests",
                format!(
                    "must be between 0 (no ring of recent requests) and {MAX_RECENT_REQUESTS}, \
                     not {}",
                    raw.recent_requests
                ),
            );
            DEFAULT_RECENT_REQUESTS
        }
    };
    let grafana_url = raw.grafana_url.filter(|u| {
        let ok = (u.starts_with("http://") || u.starts_with("https://"))
            && u.len() <= MAX_URL
            && !u.chars().any(|c| c.is_whitespace() || c.is_control());
        if !ok {
            errs.push(
                "console.grafana_url",
                format!(
                    "must be an http:// or https:// URL without spaces, at most {MAX_URL} \
                     characters (the keys page links to it)"
                ),
            );
        }
        ok
    });
    ConsoleConfig {
        enabled: raw.enabled,
        open: raw.open,
        grafana_url,
        recent_requests,
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    fn read(text: &str) -> (ConsoleConfig, Vec<String>) {
        let mut errs = Errors::default();
        let v: toml::Value = toml::from_str(text).unwrap();
        let c = console(Some(v), &mut errs);
        (
            c,
            errs.0
                .iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect(),
        )
    }

    #[test]
    fn defaults_then_each_key() {
        let (c, e) = read("");
        assert!(e.is_empty(), "{e:?}");
        assert_eq!(c, ConsoleConfig::default());
        assert!(c.enabled && !c.open && c.grafana_url.is_none());
        let (c, e) = read(
            "enabled = false\nopen = true\ngrafana_url = \"https://grafana.example/d/conclave\"\n\
             recent_requests = 10",
        );
        assert!(e.is_empty(), "{e:?}");
        assert!(!c.enabled && c.open);
        assert_eq!(
            c.grafana_url.as_deref(),
            Some("https://grafana.example/d/conclave")
        );
        assert_eq!(c.recent_requests, 10);
    }

    #[test]
    fn a_bad_grafana_url_or_an_unknown_key_is_named() {
        for bad in ["javascript:alert(1)", "ftp://x", "https://a b", ""] {
            let (c, e) = read(&format!("grafana_url = {bad:?}"));
            assert!(c.grafana_url.is_none());
            assert!(
                e.iter().any(|m| m.contains("console.grafana_url")),
                "{bad}: {e:?}"
            );
        }
        let (_, e) = read("opne = true");
        assert!(e.iter().any(|m| m.contains("opne")), "{e:?}");
    }
}
