//! The oracle route's own config: the `[routes.NAME]` keys of `strategy =
//! "oracle"`, the names it refers to, how `check` shows it, and how it is
//! built.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{Caps, Oracle, OracleCall};
use crate::config::{Config, Errors, RouteSpec, positive};
use crate::graph::{self, BuildError, Built, Pins, Resolve};
use crate::labels::Role;
use crate::strategy::Member;

const DEFAULT_KEEPALIVE: Duration = Duration::from_secs(5);
/// Consults a request may be allowed at most.
const MAX_CALLS: u32 = 16;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[allow(dead_code)]
    strategy: String,
    base: String,
    oracle: String,
    #[serde(default = "default_context_messages")]
    context_messages: usize,
    #[serde(default = "default_max_calls")]
    max_calls_per_request: u32,
    #[serde(default = "default_session_cost")]
    max_session_cost_usd: f64,
    #[serde(default = "default_key_daily_cost")]
    max_key_daily_cost_usd: f64,
    #[serde(default = "default_temperature")]
    oracle_temperature: f64,
    #[serde(default = "default_oracle_max_tokens")]
    oracle_max_tokens: u32,
    oracle_reasoning_effort: Option<String>,
    #[serde(default = "default_oracle_timeout", with = "humantime_serde")]
    oracle_timeout: Duration,
    #[serde(default, with = "humantime_serde")]
    keepalive: Option<Duration>,
}

fn default_context_messages() -> usize {
    4
}
fn default_max_calls() -> u32 {
    1
}
fn default_session_cost() -> f64 {
    2.0
}
fn default_key_daily_cost() -> f64 {
    10.0
}
fn default_temperature() -> f64 {
    0.2
}
fn default_oracle_max_tokens() -> u32 {
    4096
}
fn default_oracle_timeout() -> Duration {
    Duration::from_secs(120)
}

/// A validated oracle route.
#[derive(Debug)]
pub struct OracleSpec {
    base: String,
    oracle: String,
    context_messages: usize,
    caps: Caps,
    temperature: f64,
    max_tokens: u32,
    reasoning_effort: Option<String>,
    timeout: Duration,
    keepalive: Duration,
}

/// Reads and validates one oracle route table at `path`.
pub(crate) fn parse(
    item: toml::Value,
    path: &str,
    errs: &mut Errors,
) -> Option<Box<dyn RouteSpec>> {
    let c = errs.parse::<Raw>(path, item)?;
    if c.base == c.oracle {
        errs.push(
            format!("{path}.oracle"),
            "is the base model itself; an oracle is a stronger model to ask",
        );
    }
    for (key, usd) in [
        ("max_session_cost_usd", c.max_session_cost_usd),
        ("max_key_daily_cost_usd", c.max_key_daily_cost_usd),
    ] {
        if !(usd.is_finite() && usd >= 0.0) {
            errs.push(format!("{path}.{key}"), "must be a number >= 0");
        }
    }
    if !(c.oracle_temperature.is_finite() && (0.0..=2.0).contains(&c.oracle_temperature)) {
        errs.push(
            format!("{path}.oracle_temperature"),
            "must be between 0 and 2",
        );
    }
    if c.max_calls_per_request > MAX_CALLS {
        errs.push(
            format!("{path}.max_calls_per_request"),
            format!("must be at most {MAX_CALLS}"),
        );
    }
    if c.oracle_max_tokens == 0 {
        errs.push(format!("{path}.oracle_max_tokens"), "must be at least 1");
    }
    positive(
        Some(c.oracle_timeout),
        &format!("{path}.oracle_timeout"),
        errs,
    );
    positive(c.keepalive, &format!("{path}.keepalive"), errs);
    Some(Box::new(OracleSpec {
        base: c.base,
        oracle: c.oracle,
        context_messages: c.context_messages,
        caps: Caps {
            calls_per_request: c.max_calls_per_request,
            session_cost_usd: c.max_session_cost_usd,
            key_daily_cost_usd: c.max_key_daily_cost_usd,
        },
        temperature: c.oracle_temperature,
        max_tokens: c.oracle_max_tokens,
        reasoning_effort: c.oracle_reasoning_effort,
        timeout: c.oracle_timeout,
        keepalive: c.keepalive.unwrap_or(DEFAULT_KEEPALIVE),
    }))
}

impl RouteSpec for OracleSpec {
    fn strategy(&self) -> &'static str {
        "oracle"
    }

    fn references(&self) -> Vec<(String, String)> {
        vec![
            ("base".into(), self.base.clone()),
            ("oracle".into(), self.oracle.clone()),
        ]
    }

    fn describe(&self, _config: &Config) -> String {
        format!(
            "oracle: {} asks {} (up to {} consult(s) a request, ${:.2} a session, ${:.2} a key a day)",
            self.base,
            self.oracle,
            self.caps.calls_per_request,
            self.caps.session_cost_usd,
            self.caps.key_daily_cost_usd
        )
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Builds a `strategy = "oracle"` route (the `build` of its [`super::STRATEGY`]).
pub fn build(
    spec: &dyn RouteSpec,
    name: &str,
    _config: &Config,
    nodes: &mut dyn Resolve,
) -> Result<Built, BuildError> {
    let spec: &OracleSpec = graph::spec(spec, name)?;
    let keepalive = nodes
        .keepalive(&spec.base)
        .into_iter()
        .chain(Some(spec.keepalive))
        .min();
    let base = Member::of(&spec.base, nodes)?;
    let pins = Pins {
        noun: "base",
        role: Role::Base,
        targets: Member::targets(std::slice::from_ref(&base)),
    };
    Ok(Built {
        model: Arc::new(Oracle {
            name: name.into(),
            base,
            oracle: OracleCall {
                member: Member::of(&spec.oracle, nodes)?,
                context_messages: spec.context_messages,
                temperature: spec.temperature,
                max_tokens: spec.max_tokens,
                reasoning_effort: spec.reasoning_effort.clone(),
                timeout: spec.timeout,
            },
            caps: spec.caps,
            store: nodes.records().oracle,
            clock: nodes.records().clock,
        }),
        keepalive,
        pins,
    })
}
