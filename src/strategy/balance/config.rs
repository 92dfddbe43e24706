//! The balance's own config: the `[routes.NAME]` keys of
//! `strategy = "balance"` (raw and validated), the names it refers to,
//! how `check` shows it, its warnings, and how it is built into a
//! [`Balance`] node (its members' states kept by the graph, so they
//! outlive a reload).

use std::sync::Arc;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;

use super::pick::Policy;
use super::state::MemberState;
use super::{Balance, BalanceMember};
use crate::config::{Config, Errors, RouteSpec, positive};
use crate::graph::{self, BuildError, Built, Passthrough, Pins, Resolve};
use crate::labels::Role;
use crate::strategy::{member_refs, members};

/// Default tries on another member after a failure.
pub const DEFAULT_RETRIES: u32 = 2;

/// The largest weight (weights are relative; this keeps sums small).
pub const MAX_WEIGHT: u32 = 1_000_000;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[allow(dead_code)]
    strategy: String,
    members: Vec<String>,
    #[serde(default)]
    policy: Policy,
    #[serde(default)]
    weights: IndexMap<String, u32>,
    #[serde(default)]
    max_concurrency: IndexMap<String, u32>,
    #[serde(default = "default_retries")]
    retries: u32,
    #[serde(default)]
    midstream_failover: bool,
    #[serde(default, with = "humantime_serde")]
    ttft_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    stream_idle_timeout: Option<Duration>,
}

fn default_retries() -> u32 {
    DEFAULT_RETRIES
}

/// A validated balance route.
#[derive(Debug)]
pub struct BalanceSpec {
    pub members: Vec<String>,
    pub policy: Policy,
    /// By member; a member not listed weighs 1.
    pub weights: IndexMap<String, u32>,
    pub max_concurrency: IndexMap<String, u32>,
    pub retries: u32,
    pub midstream_failover: bool,
    pub ttft_timeout: Option<Duration>,
    pub stream_idle_timeout: Option<Duration>,
}

impl BalanceSpec {
    pub fn weight(&self, member: &str) -> u32 {
        self.weights.get(member).copied().unwrap_or(1)
    }
}

/// Reads and validates one balance route table at `path`.
pub(crate) fn parse(
    item: toml::Value,
    path: &str,
    errs: &mut Errors,
) -> Option<Box<dyn RouteSpec>> {
    let c = errs.parse::<Raw>(path, item)?;
    members(
        &c.members,
        path,
        "members",
        "a balance needs at least one member",
        "is already a member of this balance",
        errs,
    );
    for (key, map) in [
        ("weights", &c.weights),
        ("max_concurrency", &c.max_concurrency),
    ] {
        for (m, n) in map {
            if !c.members.contains(m) {
                errs.push(
                    format!("{path}.{key}.{m}"),
                    format!("\"{m}\" is not a member of this balance"),
                );
            }
            if key == "max_concurrency" && *n == 0 {
                errs.push(format!("{path}.{key}.{m}"), "must be greater than 0");
            }
            if key == "weights" && *n > MAX_WEIGHT {
                errs.push(
                    format!("{path}.{key}.{m}"),
                    format!("must be at most {MAX_WEIGHT}"),
                );
            }
        }
    }
    if !c.members.is_empty() && c.members.iter().all(|m| c.weights.get(m) == Some(&0)) {
        errs.push(
            format!("{path}.weights"),
            "every member has weight 0: at least one must be greater than 0 (0 marks a standby)",
        );
    }
    positive(c.ttft_timeout, &format!("{path}.ttft_timeout"), errs);
    positive(
        c.stream_idle_timeout,
        &format!("{path}.stream_idle_timeout"),
        errs,
    );
    Some(Box::new(BalanceSpec {
        members: c.members,
        policy: c.policy,
        weights: c.weights,
        max_concurrency: c.max_concurrency,
        retries: c.retries,
        midstream_failover: c.midstream_failover,
        ttft_timeout: c.ttft_timeout,
        stream_idle_timeout: c.stream_idle_timeout,
    }))
}

impl RouteSpec for BalanceSpec {
    fn strategy(&self) -> &'static str {
        "balance"
    }

    fn references(&self) -> Vec<(String, String)> {
        member_refs("members", &self.members)
    }

    fn describe(&self, _config: &Config) -> String {
        let members: Vec<String> = self
            .members
            .iter()
            .map(|m| {
                let mut s = m.clone();
                let w = self.weight(m);
                let cap = self.max_concurrency.get(m);
                if w != 1 || cap.is_some() {
                    let mut parts = vec![if w == 0 {
                        "standby".to_owned()
                    } else {
                        format!("weight {w}")
                    }];
                    parts.extend(cap.map(|n| format!("max {n} in flight")));
                    s.push_str(&format!(" ({})", parts.join(", ")));
                }
                s
            })
            .collect();
        format!(
            "balance {} ; policy {} ; {} on another member{}",
            members.join(", "),
            self.policy.as_str(),
            crate::config::counted(self.retries, "retry"),
            if self.midstream_failover {
                " ; mid-stream failover"
            } else {
                ""
            }
        )
    }

    fn warnings(&self, name: &str, _config: &Config) -> Vec<String> {
        let mut out = Vec::new();
        let others = self.members.len().saturating_sub(1);
        if (self.retries as usize) > others {
            out.push(format!(
                "routes.{name}.retries: {} retries but only {others} other member(s): a request \
                 tries each member at most once, so at most {others} retries happen",
                self.retries
            ));
        }
        if self.members.len() == 1 {
            out.push(format!(
                "routes.{name}.members: a balance of one member has nothing to balance or retry on"
            ));
        }
        if self.policy == Policy::Latency && self.weights.values().any(|w| *w > 1) {
            out.push(format!(
                "routes.{name}.weights: with policy = \"latency\" weights only bias which two \
                 members are compared; the faster one wins regardless"
            ));
        }
        out
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Builds a `strategy = "balance"` route (the `build` of its [`super::STRATEGY`]).
pub fn build(
    spec: &dyn RouteSpec,
    name: &str,
    config: &Config,
    nodes: &mut dyn Resolve,
) -> Result<Built, BuildError> {
    let spec: &BalanceSpec = graph::spec(spec, name)?;
    let mut list = Vec::new();
    for m in &spec.members {
        list.push(BalanceMember {
            name: m.as_str().into(),
            model: nodes.model(m)?,
            weight: spec.weight(m),
            max_concurrency: spec.max_concurrency.get(m).copied(),
            local: config.is_local(m),
            state: nodes.kept::<MemberState>(name, m),
        });
    }
    // A pin names a member, which answers alone under the balance's own
    // `stream_idle_timeout`.
    let pins = Pins {
        noun: "member",
        role: Role::Member,
        targets: list
            .iter()
            .map(|m| {
                let model = Passthrough::with_idle(&m.model, spec.stream_idle_timeout);
                (m.name.clone(), model)
            })
            .collect(),
    };
    let keepalive = spec.members.iter().filter_map(|m| nodes.keepalive(m)).min();
    Ok(Built {
        model: Arc::new(Balance {
            name: name.into(),
            members: list,
            policy: spec.policy,
            retries: spec.retries,
            midstream_failover: spec.midstream_failover,
            ttft_timeout: spec.ttft_timeout,
            stream_idle_timeout: spec.stream_idle_timeout,
        }),
        keepalive,
        pins,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use crate::config::parse;

    const BASE: &str = "[upstreams.sim]\nkind = \"mock\"\n\n[models.a]\nupstream = \"sim\"\n\n\
        [models.b]\nupstream = \"sim\"\n\n[routes.r]\nstrategy = \"balance\"\n";

    fn errors(route: &str) -> Vec<String> {
        match parse(
            &format!("{BASE}{route}"),
            "t.toml",
            &|_| None,
            &crate::strategy::ALL,
        ) {
            Ok(_) => Vec::new(),
            Err(e) => e
                .errors
                .iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect(),
        }
    }

    #[test]
    fn a_balance_reads_its_keys_and_says_what_it_does() {
        let c = parse(
            &format!(
                "{BASE}members = [\"a\", \"b\"]\npolicy = \"latency\"\nweights = {{ a = 2, b = 0 }}\n\
                 max_concurrency = {{ a = 4 }}\nretries = 1\nmidstream_failover = true\n"
            ),
            "t.toml",
            &|_| None,
            &crate::strategy::ALL,
        )
        .unwrap();
        let crate::config::Route::Strategy(spec) = &c.routes["r"] else {
            panic!("not a strategy route");
        };
        assert_eq!(
            spec.describe(&c),
            "balance a (weight 2, max 4 in flight), b (standby) ; policy latency ; 1 retry on \
             another member ; mid-stream failover"
        );
        assert!(
            c.warnings.iter().any(|w| w.contains("routes.r.weights")),
            "{:?}",
            c.warnings
        );
    }

    #[test]
    fn mistakes_are_named_with_their_keys() {
        let errs = errors(
            "members = [\"a\", \"a\", \"b\"]\nweights = { c = 1 }\nmax_concurrency = { a = 0 }\n",
        );
        for want in [
            "routes.r.members[1]: \"a\" is already a member of this balance",
            "routes.r.weights.c: \"c\" is not a member of this balance",
            "routes.r.max_concurrency.a: must be greater than 0",
        ] {
            assert!(errs.iter().any(|e| e == want), "{want} not in {errs:?}");
        }
        let errs = errors("members = [\"a\", \"b\"]\nweights = { a = 0, b = 0 }\n");
        assert!(
            errs.iter().any(|e| e.contains("every member has weight 0")),
            "{errs:?}"
        );
        let errs = errors("members = [\"a\"]\nweights = { a = -1 }\n");
        assert!(errs.iter().any(|e| e.starts_with("routes.r")), "{errs:?}");
        let errs = errors("members = [\"a\", \"zz\"]\n");
        assert!(errs.iter().any(|e| e.contains("zz")), "{errs:?}");
        let errs = errors("members = []\n");
        assert!(
            errs.iter().any(|e| e.contains("at least one member")),
            "{errs:?}"
        );
        let errs = errors("members = [\"a\"]\npolicy = \"fastest\"\n");
        assert!(errs.iter().any(|e| e.contains("least_busy")), "{errs:?}");
        let errs = errors("members = [\"a\", \"b\"]\nttft_timeout = \"0s\"\n");
        assert!(errs.iter().any(|e| e.contains("ttft_timeout")), "{errs:?}");
    }
}
