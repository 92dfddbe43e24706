//! `kind = "anthropic"`: Anthropic's Messages API over one pooled reqwest
//! client per upstream with `TCP_NODELAY`. It sends the bodies of the
//! Messages API's endpoints ([`Family::Anthropic`]: Messages and
//! `count_tokens`) verbatim to `{base_url}/v1/messages` (and
//! `/v1/messages/count_tokens`) with `x-api-key` (marked sensitive, so it
//! is never printed), `anthropic-version`, `anthropic-beta` when the call
//! carries one, and the request id and `traceparent` as the OpenAI
//! transport sends them; chat reaches it through [`super::translate`].
//!
//! A 429 or 529 without `Retry-After` gets one from Anthropic's
//! `anthropic-ratelimit-*-reset` headers ([`retry_after`]), so its wait
//! feeds the same retry and rate handling as any upstream's.

use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use reqwest::header::{CONTENT_TYPE, HeaderMap, HeaderValue, RETRY_AFTER};

use super::http::{BuildError, describe, raw, send};
use super::served::{Served, unsupported};
use super::{CallIds, RawResponse, Transport, TransportError};
use crate::clock::Clock;
use crate::config::Anthropic;
use crate::wire::{Endpoint, Family};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READY_TIMEOUT: Duration = Duration::from_secs(3);

/// The limits whose reset a rate-limited answer's wait is read from.
const LIMITS: [&str; 4] = ["requests", "tokens", "input-tokens", "output-tokens"];

pub struct AnthropicTransport {
    client: reqwest::Client,
    /// The Messages API's URLs (`messages`, `count_tokens`).
    urls: Served<reqwest::Url>,
    models_url: reqwest::Url,
    /// Where active health check paths go (`{base_url}/v1`).
    base_url: String,
    key: Option<HeaderValue>,
    version: HeaderValue,
    /// The instance's wall clock, against which a limit's reset time is
    /// a wait.
    clock: Clock,
}

impl AnthropicTransport {
    pub fn new(cfg: &Anthropic, clock: Clock) -> Result<Self, BuildError> {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        let key = cfg.api_key.as_ref().and_then(|k| {
            let mut v = HeaderValue::from_str(&k.0).ok()?;
            v.set_sensitive(true);
            Some(v)
        });
        let url = |path: &str| {
            let s = format!("{}/v1{path}", cfg.base_url);
            reqwest::Url::parse(&s).map_err(|e| BuildError::Url(format!("{s}: {e}")))
        };
        Ok(AnthropicTransport {
            client,
            urls: Served::build(Family::Anthropic, url)?,
            models_url: url("/models")?,
            base_url: format!("{}/v1", cfg.base_url),
            key,
            version: HeaderValue::from_str(&cfg.version)
                .map_err(|_| BuildError::Url(format!("anthropic_version {}", cfg.version)))?,
            clock,
        })
    }
}

#[async_trait]
impl Transport for AnthropicTransport {
    async fn send(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        ids: &CallIds<'_>,
    ) -> Result<RawResponse, TransportError> {
        let Some(url) = self.urls.get(endpoint) else {
            return Ok(unsupported(endpoint));
        };
        let mut req = self
            .client
            .post(url.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .header("anthropic-version", self.version.clone())
            .body(body);
        if let Some(key) = &self.key {
            req = req.header("x-api-key", key.clone());
        }
        if let Some(beta) = ids
            .anthropic_beta
            .and_then(|b| HeaderValue::from_str(b).ok())
        {
            req = req.header("anthropic-beta", beta);
        }
        let resp = send(req, ids).await?;
        let status = resp.status().as_u16();
        let retry_after = match resp.headers().get(RETRY_AFTER) {
            Some(v) => v.to_str().ok().map(str::to_owned),
            None if matches!(status, 429 | 529) => retry_after(resp.headers(), self.clock.now()),
            None => None,
        };
        Ok(raw(resp, retry_after))
    }

    async fn ready(&self) -> Result<(), String> {
        let mut req = self
            .client
            .get(self.models_url.clone())
            .header("anthropic-version", self.version.clone())
            .timeout(READY_TIMEOUT);
        if let Some(key) = &self.key {
            req = req.header("x-api-key", key.clone());
        }
        // Any HTTP answer, even 401, means the server is there.
        req.send().await.map(|_| ()).map_err(|e| describe(&e))
    }

    async fn check(&self, path: &str) -> Result<(), String> {
        let s = format!("{}{path}", self.base_url);
        let url = reqwest::Url::parse(&s).map_err(|_| "an invalid health path".to_owned())?;
        let mut req = self
            .client
            .get(url)
            .header("anthropic-version", self.version.clone());
        if let Some(key) = &self.key {
            req = req.header("x-api-key", key.clone());
        }
        let resp = req.send().await.map_err(|e| describe(&e))?;
        match resp.status() {
            s if s.is_success() => Ok(()),
            s => Err(format!("HTTP {}", s.as_u16())),
        }
    }
}

/// A rate-limited answer's wait from Anthropic's headers, in whole
/// seconds (rounded up, at least 1): until the latest reset (RFC 3339)
/// of the limits it ran out of (`…-remaining: 0`), or of every limit it
/// names when none says so. `None` without a reset it can read.
pub fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<String> {
    let get = |limit: &str, what: &str| {
        headers
            .get(format!("anthropic-ratelimit-{limit}-{what}"))
            .and_then(|v| v.to_str().ok())
            .map(str::trim)
    };
    let resets: Vec<(bool, SystemTime)> = LIMITS
        .iter()
        .filter_map(|l| {
            let at = humantime::parse_rfc3339_weak(get(l, "reset")?).ok()?;
            Some((get(l, "remaining") == Some("0"), at))
        })
        .collect();
    let exhausted = resets.iter().any(|(out, _)| *out);
    let latest = resets
        .iter()
        .filter(|(out, _)| *out || !exhausted)
        .map(|(_, at)| *at)
        .max()?;
    let wait = latest.duration_since(now).unwrap_or_default();
    let secs = wait.as_secs() + u64::from(wait.subsec_nanos() > 0);
    Some(secs.max(1).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.insert(
                *k,
                HeaderValue::from_str(v).unwrap_or_else(|_| unreachable!()),
            );
        }
        h
    }

    #[test]
    fn the_wait_is_until_the_exhausted_limit_resets() {
        let now =
            humantime::parse_rfc3339("2026-01-01T00:00:00Z").unwrap_or(SystemTime::UNIX_EPOCH);
        let h = headers(&[
            ("anthropic-ratelimit-requests-remaining", "0"),
            (
                "anthropic-ratelimit-requests-reset",
                "2026-01-01T00:00:12.300Z",
            ),
            ("anthropic-ratelimit-tokens-remaining", "9000"),
            ("anthropic-ratelimit-tokens-reset", "2026-01-01T00:00:59Z"),
        ]);
        assert_eq!(retry_after(&h, now).as_deref(), Some("13"));
        let h = headers(&[
            (
                "anthropic-ratelimit-input-tokens-reset",
                "2026-01-01T00:00:05Z",
            ),
            (
                "anthropic-ratelimit-output-tokens-reset",
                "2026-01-01T00:00:08Z",
            ),
        ]);
        assert_eq!(retry_after(&h, now).as_deref(), Some("8"));
        let past = headers(&[("anthropic-ratelimit-requests-reset", "2025-12-31T23:00:00Z")]);
        assert_eq!(retry_after(&past, now).as_deref(), Some("1"));
        let junk = headers(&[("anthropic-ratelimit-requests-reset", "soon")]);
        assert_eq!(retry_after(&junk, now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }
}
