//! `kind = "anthropic"` upstreams: Anthropic's Messages API, read from
//! their table into an [`Upstream`] (the base URL, the key's env var and
//! the `anthropic-version` header, plus the lane, timeout and rate keys
//! every upstream has). Chat requests to their models are translated to
//! the Messages API and back (`upstream::translate`).

use std::time::Duration;

use serde::Deserialize;

use super::fields::{DEFAULT_UPSTREAM_TIMEOUT, lane_limits, secret, upstream_rpm, url};
use super::{Errors, Lane, Secret, Upstream, UpstreamKind, positive};
use crate::mock::Api as MockApi;

/// Where Anthropic's API is, without `/v1`.
pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";
/// The `anthropic-version` header sent unless the config says otherwise.
pub const DEFAULT_VERSION: &str = "2023-06-01";

const DEFAULT_STREAM_IDLE: Duration = Duration::from_secs(60);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[allow(dead_code)]
    kind: String,
    base_url: Option<String>,
    api_key_env: Option<String>,
    anthropic_version: Option<String>,
    lane: Option<Lane>,
    max_concurrency: Option<u32>,
    max_models: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    max_wait_swap: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    stream_idle_timeout: Option<Duration>,
    rpm: Option<u32>,
    /// Accepted to say why it cannot be true.
    #[serde(default)]
    responses: bool,
}

/// The Anthropic connection an upstream (or a mock playing one) has.
#[derive(Debug)]
pub struct Anthropic {
    /// Without a trailing `/`; `/v1/messages` is appended.
    pub base_url: String,
    pub api_key: Option<Secret>,
    /// The `anthropic-version` header.
    pub version: String,
}

/// Reads `[upstreams.NAME]` with `kind = "anthropic"` at `path`.
pub(super) fn upstream(
    item: toml::Value,
    path: &str,
    env: &dyn Fn(&str) -> Option<String>,
    errs: &mut Errors,
) -> Option<Upstream> {
    let u = errs.parse::<Raw>(path, item)?;
    let base_url = u
        .base_url
        .as_deref()
        .unwrap_or(DEFAULT_BASE_URL)
        .trim_end_matches('/')
        .to_owned();
    url(&base_url, &format!("{path}.base_url"), errs);
    if base_url.ends_with("/v1") {
        errs.push(
            format!("{path}.base_url"),
            "is the server's root (\"https://api.anthropic.com\"): /v1/messages is appended",
        );
    }
    let api_key = u
        .api_key_env
        .as_deref()
        .and_then(|var| secret(env, var, &format!("{path}.api_key_env"), errs));
    let version = u
        .anthropic_version
        .unwrap_or_else(|| DEFAULT_VERSION.to_owned());
    let valid = |c: char| c.is_ascii_alphanumeric() || c == '-';
    if version.is_empty() || version.len() > 64 || !version.chars().all(valid) {
        errs.push(
            format!("{path}.anthropic_version"),
            "must be a version like \"2023-06-01\"",
        );
    }
    if u.responses {
        errs.push(
            format!("{path}.responses"),
            "an Anthropic upstream does not speak the Responses API (Responses requests to its \
             models are translated through chat); remove it",
        );
    }
    positive(
        u.stream_idle_timeout,
        &format!("{path}.stream_idle_timeout"),
        errs,
    );
    let lane = u.lane.unwrap_or(Lane::Cloud);
    let (c, m, w) = (u.max_concurrency, u.max_models, u.max_wait_swap);
    Some(Upstream {
        lane,
        limits: lane_limits(lane, c, m, w, path, errs),
        rpm: upstream_rpm(u.rpm, path, errs),
        timeout: u.timeout.unwrap_or(DEFAULT_UPSTREAM_TIMEOUT),
        stream_idle_timeout: u.stream_idle_timeout.unwrap_or(DEFAULT_STREAM_IDLE),
        responses: false,
        resilience: super::Resilience::default(),
        kind: UpstreamKind::Anthropic(Anthropic {
            base_url,
            api_key,
            version,
        }),
    })
}

/// A mock upstream's `api`; a mock speaking the Messages API cannot
/// also serve the Responses API natively.
pub(super) fn mock_api(u: &super::raw::MockUpstream, path: &str, errs: &mut Errors) -> MockApi {
    if u.api == MockApi::Anthropic && u.responses {
        errs.push(
            format!("{path}.responses"),
            "a mock with api = \"anthropic\" speaks the Messages API only; remove responses",
        );
    }
    u.api
}
