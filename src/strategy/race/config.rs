//! The race's own config: the `[routes.NAME]` keys of `strategy = "race"`
//! (raw and validated), the names it refers to, how `check` shows it, and
//! how it is built into a [`Race`] node.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::rubric::{Caps, Rubric};
use super::scorers::{Judge, Webhook};
use super::{Candidate, Gates, Mode, Race};
use crate::config::{Config, Errors, RouteSpec, positive};
use crate::graph::{self, BuildError, Built, Pins, Resolve};
use crate::labels::Role;
use crate::strategy::{member_refs, members};

const RACE_KEEPALIVE: Duration = Duration::from_secs(5);
const DEFAULT_CRITERIA: &str =
    "The reply is correct, complete and directly answers the last request.";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[allow(dead_code)]
    strategy: String,
    candidates: Vec<String>,
    #[serde(default)]
    mode: Mode,
    rubric: Option<BTreeMap<String, f64>>,
    judge: Option<String>,
    criteria: Option<String>,
    #[serde(default = "default_judge_max_tokens")]
    judge_max_tokens: u32,
    #[serde(default = "default_judge_timeout", with = "humantime_serde")]
    judge_timeout: Duration,
    webhook: Option<RawWebhook>,
    #[serde(default = "default_length_cap")]
    length_cap_tokens: u64,
    #[serde(default = "default_latency_cap", with = "humantime_serde")]
    latency_cap: Duration,
    #[serde(default = "default_max_candidates")]
    max_candidates: usize,
    #[serde(default = "default_budget")]
    budget_tokens: i64,
    #[serde(default = "default_confirm")]
    confirm_threshold_tokens: i64,
    #[serde(default = "default_baseline")]
    baseline_tokens_per_run: u64,
    #[serde(default = "yes")]
    cancel_on_perfect: bool,
    #[serde(default, with = "humantime_serde")]
    hedge_delay: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    keepalive: Option<Duration>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct RawWebhook {
    url: String,
    #[serde(default = "default_webhook_timeout", with = "humantime_serde")]
    timeout: Duration,
}

fn default_judge_max_tokens() -> u32 {
    256
}
fn default_judge_timeout() -> Duration {
    Duration::from_secs(30)
}
fn default_webhook_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_length_cap() -> u64 {
    2000
}
fn default_latency_cap() -> Duration {
    Duration::from_secs(60)
}
fn default_max_candidates() -> usize {
    3
}
fn default_budget() -> i64 {
    500_000
}
fn default_confirm() -> i64 {
    200_000
}
fn default_baseline() -> u64 {
    75_000
}
fn yes() -> bool {
    true
}

/// The rubric when a route sets none: the measurable signals only.
fn default_rubric() -> BTreeMap<String, f64> {
    BTreeMap::from([
        ("format".to_owned(), 0.5),
        ("finish".to_owned(), 0.3),
        ("length".to_owned(), 0.2),
    ])
}

/// A validated race route.
#[derive(Debug)]
pub struct RaceSpec {
    candidates: Vec<String>,
    mode: Mode,
    rubric: Rubric,
    judge: Option<String>,
    criteria: String,
    judge_max_tokens: u32,
    judge_timeout: Duration,
    webhook: Option<(reqwest::Url, Duration)>,
    caps: Caps,
    gates: Gates,
    cancel_on_perfect: bool,
    hedge_delay: Option<Duration>,
    keepalive: Duration,
}

/// Reads and validates one race route table at `path`.
pub(crate) fn parse(
    item: toml::Value,
    path: &str,
    errs: &mut Errors,
) -> Option<Box<dyn RouteSpec>> {
    let c = errs.parse::<Raw>(path, item)?;
    members(
        &c.candidates,
        path,
        "candidates",
        "a race needs at least one candidate",
        "is already a candidate",
        errs,
    );
    let rubric = match Rubric::new(&c.rubric.unwrap_or_else(default_rubric)) {
        Ok(r) => Some(r),
        Err(problems) => {
            for (key, msg) in problems {
                let at = if key.is_empty() {
                    format!("{path}.rubric")
                } else {
                    format!("{path}.rubric.{key}")
                };
                errs.push(at, msg);
            }
            None
        }
    };
    if let Some(r) = &rubric {
        if r.uses("judge") && c.judge.is_none() {
            errs.push(
                format!("{path}.judge"),
                "the rubric weighs `judge`: name a judge model",
            );
        }
        if r.uses("webhook") && c.webhook.is_none() {
            errs.push(
                format!("{path}.webhook"),
                "the rubric weighs `webhook`: set webhook = { url = \"...\" }",
            );
        }
    }
    let webhook = c
        .webhook
        .as_ref()
        .and_then(|w| match reqwest::Url::parse(&w.url) {
            Ok(u) if matches!(u.scheme(), "http" | "https") => Some((u, w.timeout)),
            _ => {
                errs.push(
                    format!("{path}.webhook.url"),
                    format!("\"{}\" is not an http(s) URL", w.url),
                );
                None
            }
        });
    if c.hedge_delay.is_some() && c.mode != Mode::First {
        errs.push(
            format!("{path}.hedge_delay"),
            "applies to mode = \"first\" only",
        );
    }
    for (key, d) in [
        ("judge_timeout", Some(c.judge_timeout)),
        ("latency_cap", Some(c.latency_cap)),
        ("keepalive", c.keepalive),
        ("webhook.timeout", c.webhook.as_ref().map(|w| w.timeout)),
    ] {
        positive(d, &format!("{path}.{key}"), errs);
    }
    for (key, n) in [
        ("judge_max_tokens", u64::from(c.judge_max_tokens)),
        ("length_cap_tokens", c.length_cap_tokens),
    ] {
        if n == 0 {
            errs.push(format!("{path}.{key}"), "must be greater than 0");
        }
    }
    Some(Box::new(RaceSpec {
        candidates: c.candidates,
        mode: c.mode,
        rubric: rubric?,
        judge: c.judge,
        criteria: c.criteria.unwrap_or_else(|| DEFAULT_CRITERIA.to_owned()),
        judge_max_tokens: c.judge_max_tokens,
        judge_timeout: c.judge_timeout,
        webhook,
        caps: Caps {
            length_tokens: c.length_cap_tokens,
            latency: c.latency_cap,
        },
        gates: Gates {
            max_candidates: c.max_candidates,
            budget_tokens: c.budget_tokens,
            confirm_threshold_tokens: c.confirm_threshold_tokens,
            baseline_tokens_per_run: c.baseline_tokens_per_run,
        },
        cancel_on_perfect: c.cancel_on_perfect,
        hedge_delay: c.hedge_delay,
        keepalive: c.keepalive.unwrap_or(RACE_KEEPALIVE),
    }))
}

impl RouteSpec for RaceSpec {
    fn strategy(&self) -> &'static str {
        "race"
    }

    fn references(&self) -> Vec<(String, String)> {
        let mut refs = member_refs("candidates", &self.candidates);
        refs.extend(self.judge.iter().map(|j| ("judge".to_owned(), j.clone())));
        refs
    }

    fn describe(&self, _config: &Config) -> String {
        let rubric: Vec<String> = self
            .rubric
            .0
            .iter()
            .map(|(s, w)| format!("{s}={w:.2}"))
            .collect();
        format!(
            "race ({}) [{}] (max {}) rubric {}{}",
            self.mode.as_str(),
            self.candidates.join(", "),
            self.gates.max_candidates,
            rubric.join(" "),
            self.judge
                .as_ref()
                .map_or(String::new(), |j| format!(" ; judge {j}")),
        )
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Builds a `strategy = "race"` route (the `build` of its [`super::STRATEGY`]).
pub fn build(
    spec: &dyn RouteSpec,
    name: &str,
    _config: &Config,
    nodes: &mut dyn Resolve,
) -> Result<Built, BuildError> {
    let spec: &RaceSpec = graph::spec(spec, name)?;
    let candidates = Candidate::all(&spec.candidates, nodes)?;
    let pins = Pins {
        noun: "candidate",
        role: Role::Candidate,
        targets: Candidate::targets(&candidates),
    };
    let judge = match &spec.judge {
        Some(j) => Some(Judge {
            name: j.as_str().into(),
            model: nodes.model(j)?,
            criteria: spec.criteria.clone(),
            max_tokens: spec.judge_max_tokens,
            timeout: spec.judge_timeout,
        }),
        None => None,
    };
    let webhook = spec.webhook.as_ref().map(|(url, timeout)| Webhook {
        url: url.clone(),
        timeout: *timeout,
        client: reqwest::Client::new(),
    });
    // Best-of holds the answer back while it races; a candidate may too.
    let own = (spec.mode == Mode::Best).then_some(spec.keepalive);
    let keepalive = spec
        .candidates
        .iter()
        .filter_map(|m| nodes.keepalive(m))
        .chain(own)
        .min();
    Ok(Built {
        model: Arc::new(Race {
            name: name.into(),
            candidates,
            mode: spec.mode,
            rubric: spec.rubric.clone(),
            judge: judge.map(Arc::new),
            webhook: webhook.map(Arc::new),
            caps: spec.caps,
            gates: spec.gates,
            cancel_on_perfect: spec.cancel_on_perfect,
            hedge_delay: spec.hedge_delay,
        }),
        keepalive,
        pins,
    })
}
