//! The arena's own config: the `[routes.NAME]` keys of `strategy =
//! "arena"`, the names it refers to, the error of two contestants that are
//! the same model, how `check` shows it, and how it is built.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::{Arena, Contestant, Pairs};
use crate::config::{Config, Errors, RouteSpec, positive};
use crate::graph::{self, BuildError, Built, Pins, Resolve};
use crate::labels::Role;
use crate::strategy::{member_refs, members};

/// Longest answer of each contestant unless the client asks for less.
const DEFAULT_MAX_TOKENS: u32 = 2000;
/// How long an arena can be voted on.
const DEFAULT_VOTE_TTL: Duration = Duration::from_secs(7 * 24 * 3600);

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[allow(dead_code)]
    strategy: String,
    contestants: Vec<String>,
    #[serde(default)]
    pairs: Pairs,
    #[serde(default = "default_max_tokens")]
    max_tokens: u32,
    #[serde(default = "default_vote_ttl", with = "humantime_serde")]
    vote_ttl: Duration,
}

fn default_max_tokens() -> u32 {
    DEFAULT_MAX_TOKENS
}
fn default_vote_ttl() -> Duration {
    DEFAULT_VOTE_TTL
}

/// A validated arena route.
#[derive(Debug)]
pub struct ArenaSpec {
    pub contestants: Vec<String>,
    pub pairs: Pairs,
    pub max_tokens: u32,
    pub vote_ttl: Duration,
}

/// Reads and validates one arena route table at `path`.
pub(crate) fn parse(
    item: toml::Value,
    path: &str,
    errs: &mut Errors,
) -> Option<Box<dyn RouteSpec>> {
    let c = errs.parse::<Raw>(path, item)?;
    members(
        &c.contestants,
        path,
        "contestants",
        "an arena needs two contestants or more",
        "is already a contestant",
        errs,
    );
    if c.contestants.len() == 1 {
        errs.push(
            format!("{path}.contestants"),
            "an arena needs two contestants or more (one has nothing to be compared with)",
        );
    }
    if c.max_tokens == 0 {
        errs.push(format!("{path}.max_tokens"), "must be at least 1");
    }
    positive(Some(c.vote_ttl), &format!("{path}.vote_ttl"), errs);
    Some(Box::new(ArenaSpec {
        contestants: c.contestants,
        pairs: c.pairs,
        max_tokens: c.max_tokens,
        vote_ttl: c.vote_ttl,
    }))
}

impl RouteSpec for ArenaSpec {
    fn strategy(&self) -> &'static str {
        "arena"
    }

    fn references(&self) -> Vec<(String, String)> {
        member_refs("contestants", &self.contestants)
    }

    fn describe(&self, _config: &Config) -> String {
        let pairs = match self.pairs {
            Pairs::Random => "random",
            Pairs::Balanced => "balanced",
        };
        format!(
            "arena [{}] ({pairs} pairs, answers up to {} tokens, votes for {})",
            self.contestants.join(", "),
            self.max_tokens,
            crate::config::duration_text(self.vote_ttl)
        )
    }

    /// Two contestants that are the same model on the same upstream: a
    /// blind comparison of a model with itself tells nothing.
    fn errors(&self, name: &str, config: &Config) -> Vec<(String, String)> {
        let target = |n: &str| {
            let m = config.models.get(config.resolve_alias(n))?;
            Some((m.upstream.clone(), m.upstream_model.clone()))
        };
        let mut out = Vec::new();
        for (i, c) in self.contestants.iter().enumerate() {
            let Some(t) = target(c) else { continue };
            if let Some(first) = self.contestants[..i]
                .iter()
                .find(|o| target(o).as_ref() == Some(&t))
            {
                out.push((
                    format!("routes.{name}.contestants[{i}]"),
                    format!(
                        "\"{c}\" is the same model as \"{first}\" ({} on upstream {}); a blind \
                         comparison of a model with itself tells nothing",
                        t.1, t.0
                    ),
                ));
            }
        }
        out
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Builds a `strategy = "arena"` route (the `build` of its [`super::STRATEGY`]).
pub fn build(
    spec: &dyn RouteSpec,
    name: &str,
    _config: &Config,
    nodes: &mut dyn Resolve,
) -> Result<Built, BuildError> {
    let spec: &ArenaSpec = graph::spec(spec, name)?;
    let contestants = Contestant::all(&spec.contestants, nodes)?;
    let pins = Pins {
        noun: "contestant",
        role: Role::Contestant,
        targets: Contestant::targets(&contestants),
    };
    Ok(Built {
        model: Arc::new(Arena {
            name: name.into(),
            contestants,
            pairs: spec.pairs,
            max_tokens: spec.max_tokens,
            vote_ttl: spec.vote_ttl,
            store: nodes.records().arenas,
            clock: nodes.records().clock,
        }),
        keepalive: None,
        pins,
    })
}
