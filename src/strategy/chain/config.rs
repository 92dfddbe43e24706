//! The chain's own config: the `[routes.NAME]` keys of `strategy = "chain"`
//! (raw and validated), the names it refers to, how `check` shows it, the
//! warnings it deserves, and how it is built into a [`Chain`] node.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::verifier::Verifier;
use super::{Chain, Tier};
use crate::config::{Config, Errors, Route, RouteSpec, positive};
use crate::graph::{self, BuildError, Built, Passthrough, Pins, Resolve};
use crate::labels::Role;
use crate::strategy::{member_refs, members};

/// Default gap between SSE keep-alive comments while a chain verifies.
pub const CHAIN_KEEPALIVE: Duration = Duration::from_secs(5);

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnExhausted {
    #[default]
    Error,
    BestAttempt,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[allow(dead_code)]
    strategy: String,
    tiers: Vec<String>,
    verifier: Option<String>,
    #[serde(default)]
    self_certify: Vec<String>,
    #[serde(default)]
    verify: Vec<String>,
    #[serde(default)]
    on_exhausted: OnExhausted,
    #[serde(default, with = "humantime_serde")]
    ttft_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    keepalive: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    stream_idle_timeout: Option<Duration>,
    /// Output cap of each verifier call (`max_tokens`).
    #[serde(default = "default_verifier_max_tokens")]
    verifier_max_tokens: u32,
    /// Time limit of each verifier call.
    #[serde(default = "default_verifier_timeout", with = "humantime_serde")]
    verifier_timeout: Duration,
    /// A live stream cut after its first token goes on at the next tiers.
    #[serde(default)]
    midstream_failover: bool,
}

fn default_verifier_max_tokens() -> u32 {
    256
}
fn default_verifier_timeout() -> Duration {
    Duration::from_secs(30)
}

/// A validated chain route.
#[derive(Debug)]
pub struct ChainSpec {
    pub tiers: Vec<String>,
    pub verifier: Option<String>,
    pub self_certify: Vec<String>,
    pub verify: Vec<String>,
    pub on_exhausted: OnExhausted,
    pub ttft_timeout: Option<Duration>,
    pub keepalive: Duration,
    pub stream_idle_timeout: Option<Duration>,
    pub verifier_max_tokens: u32,
    pub verifier_timeout: Duration,
    pub midstream_failover: bool,
}

/// Reads and validates one chain route table at `path`.
pub(crate) fn parse(
    item: toml::Value,
    path: &str,
    errs: &mut Errors,
) -> Option<Box<dyn RouteSpec>> {
    let c = errs.parse::<Raw>(path, item)?;
    members(
        &c.tiers,
        path,
        "tiers",
        "a chain needs at least one tier",
        "is already a tier of this chain",
        errs,
    );
    for (field, list) in [("self_certify", &c.self_certify), ("verify", &c.verify)] {
        for (i, t) in list.iter().enumerate() {
            if !c.tiers.contains(t) {
                errs.push(
                    format!("{path}.{field}[{i}]"),
                    format!("\"{t}\" is not a tier of this chain"),
                );
            }
            if field == "verify" && c.self_certify.contains(t) {
                errs.push(
                    format!("{path}.{field}[{i}]"),
                    format!("\"{t}\" cannot be in both verify and self_certify"),
                );
            }
        }
        if !list.is_empty() && c.verifier.is_none() {
            errs.push(
                format!("{path}.{field}"),
                "has no effect without a verifier",
            );
        }
    }
    positive(c.ttft_timeout, &format!("{path}.ttft_timeout"), errs);
    positive(c.keepalive, &format!("{path}.keepalive"), errs);
    positive(
        c.stream_idle_timeout,
        &format!("{path}.stream_idle_timeout"),
        errs,
    );
    positive(
        Some(c.verifier_timeout),
        &format!("{path}.verifier_timeout"),
        errs,
    );
    if c.verifier_max_tokens == 0 {
        errs.push(
            format!("{path}.verifier_max_tokens"),
            "must be greater than 0",
        );
    }
    Some(Box::new(ChainSpec {
        tiers: c.tiers,
        verifier: c.verifier,
        self_certify: c.self_certify,
        verify: c.verify,
        on_exhausted: c.on_exhausted,
        ttft_timeout: c.ttft_timeout,
        keepalive: c.keepalive.unwrap_or(CHAIN_KEEPALIVE),
        stream_idle_timeout: c.stream_idle_timeout,
        verifier_max_tokens: c.verifier_max_tokens,
        verifier_timeout: c.verifier_timeout,
        midstream_failover: c.midstream_failover,
    }))
}

impl ChainSpec {
    /// Whether the verifier checks this tier: local tiers are verified and
    /// cloud tiers self-certify, unless the route says otherwise.
    pub fn tier_is_verified(&self, config: &Config, tier: &str) -> bool {
        if self.verifier.is_none() || self.self_certify.iter().any(|t| t == tier) {
            return false;
        }
        if self.verify.iter().any(|t| t == tier) {
            return true;
        }
        config.is_local(tier)
    }
}

impl RouteSpec for ChainSpec {
    fn strategy(&self) -> &'static str {
        "chain"
    }

    fn references(&self) -> Vec<(String, String)> {
        let mut refs = member_refs("tiers", &self.tiers);
        if let Some(v) = &self.verifier {
            refs.push(("verifier".into(), v.clone()));
        }
        refs
    }

    fn describe(&self, config: &Config) -> String {
        let tiers: Vec<String> = self
            .tiers
            .iter()
            .map(|t| {
                let how = if self.verifier.is_none() {
                    "fallback"
                } else if self.tier_is_verified(config, t) {
                    "verified"
                } else {
                    "self-certifies"
                };
                format!("{t} ({how})")
            })
            .collect();
        let verifier = self
            .verifier
            .as_deref()
            .unwrap_or("none: plain fallback chain");
        let failover = if self.midstream_failover {
            " ; mid-stream failover"
        } else {
            ""
        };
        format!(
            "chain {} ; verifier {verifier}{failover}",
            tiers.join(" -> ")
        )
    }

    fn warnings(&self, name: &str, config: &Config) -> Vec<String> {
        let mut out = Vec::new();
        // A verifier whose tiers all self-certify is never called.
        if let Some(v) = &self.verifier
            && !self.tiers.iter().any(|t| self.tier_is_verified(config, t))
        {
            out.push(format!(
                "routes.{name}.verifier: every tier self-certifies (cloud upstreams, or listed in \
                 self_certify), so \"{v}\" is never called; list tiers in verify = [...] or drop the verifier"
            ));
        }
        // A tier that is not the last, on an upstream whose timeout is not
        // shorter than the request's: one hung call there spends the whole
        // request's time and the later tiers never get a turn.
        let Some((_, earlier)) = self.tiers.split_last() else {
            return out;
        };
        for (i, tier) in earlier.iter().enumerate() {
            let upstream = config
                .models
                .get(config.resolve_alias(tier))
                .and_then(|m| config.upstreams.get_key_value(&m.upstream));
            if let Some((up, u)) = upstream
                && u.timeout >= config.server.request_timeout
            {
                out.push(format!(
                    "routes.{name}.tiers[{i}]: upstream \"{up}\" has timeout = {} but \
                     server.request_timeout is {}: a hung call to \"{tier}\" uses up the whole \
                     request and the later tiers never run; set upstreams.{up}.timeout shorter",
                    crate::config::duration_text(u.timeout),
                    crate::config::duration_text(config.server.request_timeout),
                ));
            }
        }
        out
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Builds a `strategy = "chain"` route (the `build` of its [`super::STRATEGY`]).
pub fn build(
    spec: &dyn RouteSpec,
    name: &str,
    config: &Config,
    nodes: &mut dyn Resolve,
) -> Result<Built, BuildError> {
    let spec: &ChainSpec = graph::spec(spec, name)?;
    let mut tiers = Vec::new();
    for t in &spec.tiers {
        tiers.push(Tier {
            name: t.as_str().into(),
            model: nodes.model(t)?,
            verified: spec.tier_is_verified(config, t),
        });
    }
    let verifier = match &spec.verifier {
        Some(v) => Some(Verifier {
            name: v.as_str().into(),
            model: nodes.model(v)?,
            json_mode: config
                .models
                .get(config.resolve_alias(v))
                .is_some_and(|m| m.json_mode),
            max_tokens: spec.verifier_max_tokens,
            timeout: spec.verifier_timeout,
        }),
        None => None,
    };
    // A pin names a tier, which answers alone under the chain's own
    // `stream_idle_timeout`.
    let pins = Pins {
        noun: "tier",
        role: Role::Tier,
        targets: tiers
            .iter()
            .map(|t| {
                let model = Passthrough::with_idle(&t.model, spec.stream_idle_timeout);
                (t.name.clone(), model)
            })
            .collect(),
    };
    // A verifying chain holds answers back; so may any of its tiers.
    let own = (verifier.is_some() && tiers.iter().any(|t| t.verified)).then_some(spec.keepalive);
    let keepalive = spec
        .tiers
        .iter()
        .filter_map(|t| nodes.keepalive(t))
        .chain(own)
        .min();
    Ok(Built {
        model: Arc::new(Chain {
            name: name.into(),
            tiers,
            verifier,
            on_exhausted: spec.on_exhausted,
            ttft_timeout: spec.ttft_timeout,
            stream_idle_timeout: spec.stream_idle_timeout,
            midstream_failover: spec.midstream_failover,
        }),
        keepalive,
        pins,
    })
}

/// The chain spec of a route, if it is a chain.
pub fn as_chain(route: &Route) -> Option<&ChainSpec> {
    match route {
        Route::Strategy(s) => s.as_any().downcast_ref::<ChainSpec>(),
        Route::Passthrough { .. } => None,
    }
}
