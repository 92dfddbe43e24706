//! What keeps a deployment up, as configured: an upstream's `retries`,
//! `eject` (passive outlier detection) and `health` (an active check),
//! and a route's `retry_budget`. Every upstream kind and every route
//! takes these keys, so they are taken out of the table here before the
//! kind's or the strategy's own (`deny_unknown_fields`) parser sees it.

use std::time::Duration;

use serde::Deserialize;

use super::{Errors, positive};

/// An upstream's `retries`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Retries {
    /// Retries after the first try (0: none).
    pub max: u32,
    /// The first backoff's ceiling; each retry doubles it (full jitter:
    /// the wait is drawn from zero to the ceiling).
    pub backoff: Duration,
    /// The ceiling never grows past this.
    pub max_backoff: Duration,
    /// A `Retry-After` up to this long is waited out; a longer one is
    /// not retried (the error goes to the caller).
    pub max_retry_after: Duration,
}

impl Default for Retries {
    fn default() -> Self {
        Retries {
            max: 1,
            backoff: Duration::from_millis(200),
            max_backoff: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(60),
        }
    }
}

/// An upstream's `eject`: when its failures take it out of service.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Eject {
    /// Consecutive failures that eject it.
    pub after: u32,
    /// The first ejection's length; each ejection in a row doubles it.
    pub cooldown: Duration,
    /// Ejections never last longer than this.
    pub max_cooldown: Duration,
    /// Also eject when this fraction of the calls over `window` failed
    /// (with at least `min_requests` of them); `None`: only consecutive
    /// failures count.
    pub error_rate: Option<f64>,
    pub window: Duration,
    pub min_requests: u32,
}

impl Default for Eject {
    fn default() -> Self {
        Eject {
            after: 5,
            cooldown: Duration::from_secs(30),
            max_cooldown: Duration::from_secs(300),
            error_rate: None,
            window: Duration::from_secs(60),
            min_requests: 20,
        }
    }
}

/// An upstream's `health`: an active check.
#[derive(Debug, Clone, PartialEq)]
pub struct HealthCheck {
    /// `GET` this path under the upstream's base URL.
    pub path: String,
    pub interval: Duration,
    pub timeout: Duration,
}

/// What [`take_upstream`] read of an upstream table.
#[derive(Debug, Clone, PartialEq)]
pub struct Resilience {
    pub retries: Retries,
    /// `None`: never ejected (`eject = false`).
    pub eject: Option<Eject>,
    pub health: Option<HealthCheck>,
}

impl Default for Resilience {
    fn default() -> Self {
        Resilience {
            retries: Retries::default(),
            eject: Some(Eject::default()),
            health: None,
        }
    }
}

/// A route's `retry_budget`: the retries made for the route's requests
/// (its members' upstream retries included) are at most `ratio` of its
/// requests over `window`, and at least `min` per window are allowed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryBudget {
    pub ratio: f64,
    pub min: u32,
    pub window: Duration,
}

impl Default for RetryBudget {
    fn default() -> Self {
        RetryBudget {
            ratio: 0.2,
            min: 3,
            window: Duration::from_secs(10),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRetries {
    max: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    backoff: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    max_backoff: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    max_retry_after: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawEject {
    Off(bool),
    On(RawEjectTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawEjectTable {
    after: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    cooldown: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    max_cooldown: Option<Duration>,
    error_rate: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    window: Option<Duration>,
    min_requests: Option<u32>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawHealth {
    path: String,
    #[serde(default, with = "humantime_serde")]
    interval: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    timeout: Option<Duration>,
}

#[derive(Deserialize)]
#[serde(untagged)]
enum RawBudget {
    Ratio(f64),
    Table(RawBudgetTable),
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawBudgetTable {
    ratio: Option<f64>,
    min: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    window: Option<Duration>,
}

/// Default gap between two active checks.
const DEFAULT_HEALTH_INTERVAL: Duration = Duration::from_secs(10);
/// An active check's longest wait (never longer than its interval).
const DEFAULT_HEALTH_TIMEOUT: Duration = Duration::from_secs(5);

/// Removes `key` from a table item.
fn take(item: &mut toml::Value, key: &str) -> Option<toml::Value> {
    item.as_table_mut().and_then(|t| t.remove(key))
}

/// Takes `retries`, `eject` and `health` out of the upstream table at
/// `path` and reads them (the defaults for those it lacks).
pub(crate) fn take_upstream(item: &mut toml::Value, path: &str, errs: &mut Errors) -> Resilience {
    let mut out = Resilience::default();
    if let Some(v) = take(item, "retries") {
        let at = format!("{path}.retries");
        if let Some(r) = errs.parse::<RawRetries>(&at, v) {
            let d = Retries::default();
            out.retries = Retries {
                max: r.max.unwrap_or(d.max),
                backoff: r.backoff.unwrap_or(d.backoff),
                max_backoff: r.max_backoff.unwrap_or(d.max_backoff),
                max_retry_after: r.max_retry_after.unwrap_or(d.max_retry_after),
            };
            if out.retries.max > 10 {
                errs.push(format!("{at}.max"), "must be at most 10");
            }
            positive(r.backoff, &format!("{at}.backoff"), errs);
            if out.retries.max_backoff < out.retries.backoff {
                errs.push(format!("{at}.max_backoff"), "must not be less than backoff");
            }
        }
    }
    if let Some(v) = take(item, "eject") {
        let at = format!("{path}.eject");
        out.eject = match errs.parse::<RawEject>(&at, v) {
            Some(RawEject::Off(false)) => None,
            Some(RawEject::Off(true)) => Some(Eject::default()),
            Some(RawEject::On(e)) => Some(eject(e, &at, errs)),
            None => out.eject,
        };
    }
    if let Some(v) = take(item, "health") {
        let at = format!("{path}.health");
        out.health = errs.parse::<RawHealth>(&at, v).map(|h| {
            if !h.path.starts_with('/') {
                errs.push(format!("{at}.path"), "must start with \"/\"");
            }
            positive(h.interval, &format!("{at}.interval"), errs);
            positive(h.timeout, &format!("{at}.timeout"), errs);
            let interval = h.interval.unwrap_or(DEFAULT_HEALTH_INTERVAL);
            HealthCheck {
                path: h.path,
                interval,
                timeout: h.timeout.unwrap_or(DEFAULT_HEALTH_TIMEOUT.min(interval)),
            }
        });
    }
    out
}

fn eject(e: RawEjectTable, at: &str, errs: &mut Errors) -> Eject {
    let d = Eject::default();
    let out = Eject {
        after: e.after.unwrap_or(d.after),
        cooldown: e.cooldown.unwrap_or(d.cooldown),
        max_cooldown: e
            .max_cooldown
            .unwrap_or(d.max_cooldown.max(e.cooldown.unwrap_or_default())),
        error_rate: e.error_rate,
        window: e.window.unwrap_or(d.window),
        min_requests: e.min_requests.unwrap_or(d.min_requests),
    };
    if out.after == 0 {
        errs.push(
            format!("{at}.after"),
            "must be at least 1 (eject = false turns ejection off)",
        );
    }
    positive(e.cooldown, &format!("{at}.cooldown"), errs);
    positive(e.window, &format!("{at}.window"), errs);
    if out.max_cooldown < out.cooldown {
        errs.push(
            format!("{at}.max_cooldown"),
            "must not be less than cooldown",
        );
    }
    if let Some(r) = out.error_rate
        && !(r > 0.0 && r <= 1.0)
    {
        errs.push(
            format!("{at}.error_rate"),
            "must be greater than 0 and at most 1",
        );
    }
    let alone = [
        ("window", e.window.is_some()),
        ("min_requests", e.min_requests.is_some()),
    ];
    for (key, _) in alone
        .iter()
        .filter(|(_, set)| *set && e.error_rate.is_none())
    {
        errs.push(format!("{at}.{key}"), "applies only with error_rate");
    }
    out
}

/// Takes `retry_budget` out of the route table at `path` and reads it
/// (the default when it has none).
pub(crate) fn take_route(item: &mut toml::Value, path: &str, errs: &mut Errors) -> RetryBudget {
    let d = RetryBudget::default();
    let Some(v) = take(item, "retry_budget") else {
        return d;
    };
    let at = format!("{path}.retry_budget");
    let out = match errs.parse::<RawBudget>(&at, v) {
        Some(RawBudget::Ratio(ratio)) => RetryBudget { ratio, ..d },
        Some(RawBudget::Table(t)) => {
            positive(t.window, &format!("{at}.window"), errs);
            RetryBudget {
                ratio: t.ratio.unwrap_or(d.ratio),
                min: t.min.unwrap_or(d.min),
                window: t.window.unwrap_or(d.window),
            }
        }
        None => d,
    };
    if !(0.0..=1.0).contains(&out.ratio) {
        errs.push(
            at,
            "the ratio must be between 0 and 1 (0: only the floor of `min` retries per window)",
        );
    }
    out
}
