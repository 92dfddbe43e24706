//! The checks that several tables' readers share: a secret read from an
//! environment variable, an http(s) URL, an upstream's `rpm` and lane
//! keys, and their defaults. Below the readers (`validate` and the
//! `anthropic`, `keys` and `state` tables), so none imports another.

use std::time::Duration;

use super::{Errors, Lane, LaneLimits, Secret, positive};

/// One call's whole time when an upstream does not set `timeout`: under
/// the default `server.request_timeout` (5 minutes), so that with both
/// defaults a hung call to a chain's earlier tier still leaves the later
/// tiers a minute of the request.
pub(super) const DEFAULT_UPSTREAM_TIMEOUT: Duration = Duration::from_secs(240);
const DEFAULT_MAX_WAIT_SWAP: Duration = Duration::from_secs(30);

pub(super) fn upstream_rpm(rpm: Option<u32>, path: &str, errs: &mut Errors) -> Option<u32> {
    if rpm == Some(0) {
        errs.push(
            format!("{path}.rpm"),
            "must be greater than 0 (omit it for no limit)",
        );
    }
    rpm.filter(|&r| r > 0)
}

/// Validates an upstream's lane keys, as read, into its lane's limits.
pub(super) fn lane_limits(
    lane: Lane,
    max_concurrency: Option<u32>,
    max_models: Option<u32>,
    max_wait_swap: Option<Duration>,
    path: &str,
    errs: &mut Errors,
) -> LaneLimits {
    for (key, v) in [
        ("max_concurrency", max_concurrency),
        ("max_models", max_models),
    ] {
        if v == Some(0) {
            errs.push(format!("{path}.{key}"), "must be at least 1");
        }
    }
    positive(max_wait_swap, &format!("{path}.max_wait_swap"), errs);
    if lane == Lane::Cloud {
        for (key, set) in [
            ("max_models", max_models.is_some()),
            ("max_wait_swap", max_wait_swap.is_some()),
        ] {
            if set {
                errs.push(
                    format!("{path}.{key}"),
                    "applies to a local lane only (set lane = \"local\" or llama_swap)",
                );
            }
        }
    }
    LaneLimits {
        // Unset on a local lane: as many as its server takes (learned).
        max_concurrency: max_concurrency.map(|n| n as usize),
        max_models: max_models.unwrap_or(1).max(1) as usize,
        max_wait_swap: max_wait_swap.unwrap_or(DEFAULT_MAX_WAIT_SWAP),
    }
}

pub(super) fn secret(
    env: &dyn Fn(&str) -> Option<String>,
    var: &str,
    path: &str,
    errs: &mut Errors,
) -> Option<Secret> {
    match env(var) {
        Some(s) if !s.trim().is_empty() => Some(Secret(s.trim().to_owned())),
        _ => {
            errs.push(path, format!("environment variable {var} is not set"));
            None
        }
    }
}

pub(super) fn url(s: &str, path: &str, errs: &mut Errors) {
    match reqwest::Url::parse(s) {
        Ok(u) if matches!(u.scheme(), "http" | "https") && u.has_host() => {}
        _ => errs.push(path, format!("\"{s}\" is not an http(s) URL")),
    }
}
