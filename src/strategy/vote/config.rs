//! The vote's own config: the `[routes.NAME]` keys of `strategy = "vote"`
//! (raw and validated), the names it refers to, how `check` shows it and
//! warns about it, and how it is built into a [`Vote`] node.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::extract::Extract;
use super::tally::TieBreak;
use super::{MAX_SAMPLES, Member, Vote};
use crate::config::{Config, Errors, RouteSpec, positive};
use crate::graph::{self, BuildError, Built, Pins, Resolve};
use crate::labels::Role;
use crate::strategy::{member_refs, members};

/// Default gap between SSE keep-alive comments while the samples run.
const VOTE_KEEPALIVE: Duration = Duration::from_secs(5);
/// Samples of a vote over one member, when the route does not say.
const ONE_MEMBER_SAMPLES: usize = 5;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    #[allow(dead_code)]
    strategy: String,
    members: Option<Vec<String>>,
    /// One member, sampled `samples` times (`members = [model]`).
    model: Option<String>,
    samples: Option<usize>,
    extract: Option<String>,
    tie_break: Option<String>,
    #[serde(default = "yes")]
    early_stop: bool,
    temperature: Option<f64>,
    #[serde(default, with = "humantime_serde")]
    keepalive: Option<Duration>,
}

fn yes() -> bool {
    true
}

/// A validated vote route.
#[derive(Debug)]
pub struct VoteSpec {
    members: Vec<String>,
    /// Whether the members were given as `model`.
    one_model: bool,
    samples: usize,
    extract: Extract,
    /// As written, for `check`.
    extract_text: String,
    tie_break: Option<String>,
    early_stop: bool,
    temperature: Option<f64>,
    keepalive: Duration,
}

/// Reads and validates one vote route table at `path`.
pub(crate) fn parse(
    item: toml::Value,
    path: &str,
    errs: &mut Errors,
) -> Option<Box<dyn RouteSpec>> {
    let c = errs.parse::<Raw>(path, item)?;
    let one_model = c.model.is_some();
    let list = match (c.members, c.model) {
        (Some(_), Some(_)) => {
            errs.push(
                format!("{path}.model"),
                "set `model` (one model sampled `samples` times) or `members`, not both",
            );
            return None;
        }
        (None, None) => {
            errs.push(
                format!("{path}.members"),
                "a vote needs `members` (or one `model` to sample)",
            );
            return None;
        }
        (Some(list), None) => list,
        (None, Some(m)) => vec![m],
    };
    members(
        &list,
        path,
        "members",
        "a vote needs at least one member",
        "is already a member",
        errs,
    );
    let samples = c.samples.unwrap_or(if list.len() == 1 {
        ONE_MEMBER_SAMPLES
    } else {
        list.len()
    });
    if !(1..=MAX_SAMPLES).contains(&samples) {
        errs.push(
            format!("{path}.samples"),
            format!("must be from 1 to {MAX_SAMPLES}"),
        );
    } else if samples < list.len() {
        errs.push(
            format!("{path}.samples"),
            format!(
                "is {samples} but there are {} members: members[{samples}..] would never be asked",
                list.len()
            ),
        );
    }
    let extract_text = c.extract.unwrap_or_else(|| "text".to_owned());
    let extract = Extract::parse(&extract_text)
        .map_err(|why| errs.push(format!("{path}.extract"), why))
        .ok();
    if let Some(t) = &c.tie_break
        && t != "first"
        && !list.contains(t)
    {
        errs.push(
            format!("{path}.tie_break"),
            format!(
                "\"{t}\" is not a member (expected \"first\" or one of: {})",
                list.join(", ")
            ),
        );
    }
    if c.temperature
        .is_some_and(|t| !t.is_finite() || !(0.0..=2.0).contains(&t))
    {
        errs.push(
            format!("{path}.temperature"),
            "must be a number from 0 to 2",
        );
    }
    positive(c.keepalive, &format!("{path}.keepalive"), errs);
    Some(Box::new(VoteSpec {
        members: list,
        one_model,
        samples,
        extract: extract?,
        extract_text,
        tie_break: c.tie_break.filter(|t| t != "first"),
        early_stop: c.early_stop,
        temperature: c.temperature,
        keepalive: c.keepalive.unwrap_or(VOTE_KEEPALIVE),
    }))
}

impl RouteSpec for VoteSpec {
    fn strategy(&self) -> &'static str {
        "vote"
    }

    fn references(&self) -> Vec<(String, String)> {
        if self.one_model {
            return self
                .members
                .iter()
                .map(|m| ("model".to_owned(), m.clone()))
                .collect();
        }
        member_refs("members", &self.members)
    }

    fn describe(&self, _config: &Config) -> String {
        format!(
            "vote of {} sample(s) over [{}] extract {} ; ties to {} ; early_stop {}{}",
            self.samples,
            self.members.join(", "),
            self.extract_text,
            self.tie_break.as_deref().unwrap_or("the first answer"),
            if self.early_stop { "on" } else { "off" },
            self.temperature
                .map_or(String::new(), |t| format!(" ; temperature {t}")),
        )
    }

    fn warnings(&self, name: &str, _config: &Config) -> Vec<String> {
        let mut out = Vec::new();
        if self.samples == 1 {
            out.push(format!(
                "routes.{name}.samples: one sample has nothing to vote with; the vote is its member alone"
            ));
        }
        if self.members.len() == 1 && self.temperature == Some(0.0) {
            out.push(format!(
                "routes.{name}.temperature: one model sampled at temperature 0 tends to give the same \
                 answer every time, which makes the vote a costly single sample; use a temperature \
                 above 0 (0.5 to 1 is usual for self-consistency)"
            ));
        }
        out
    }

    fn as_any(&self) -> &dyn std::any::Any {
        self
    }
}

/// Builds a `strategy = "vote"` route (the `build` of its [`super::STRATEGY`]).
pub fn build(
    spec: &dyn RouteSpec,
    name: &str,
    _config: &Config,
    nodes: &mut dyn Resolve,
) -> Result<Built, BuildError> {
    let spec: &VoteSpec = graph::spec(spec, name)?;
    let members = Member::all(&spec.members, nodes)?;
    let pins = Pins {
        noun: "member",
        role: Role::Candidate,
        targets: Member::targets(&members),
    };
    let tie_break = match &spec.tie_break {
        Some(t) => match spec.members.iter().position(|m| m == t) {
            Some(i) => TieBreak::Member(i),
            None => return Err(graph::Unresolved(t.clone()).into()),
        },
        None => TieBreak::First,
    };
    // The vote holds the answer back while its samples run; a member may
    // hold its own longer.
    let keepalive = spec
        .members
        .iter()
        .filter_map(|m| nodes.keepalive(m))
        .chain(Some(spec.keepalive))
        .min();
    Ok(Built {
        model: Arc::new(Vote {
            name: name.into(),
            members,
            samples: spec.samples,
            extract: spec.extract.clone(),
            tie_break,
            early_stop: spec.early_stop,
            temperature: spec.temperature,
        }),
        keepalive,
        pins,
    })
}
