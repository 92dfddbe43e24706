//! Strategies: models made of models. Each lives in a folder of its own
//! (`chain/`) that owns its config keys, their validation, the names it
//! refers to, how `check` shows it and its warnings (a
//! [`crate::config::RouteSpec`]), its graph build (a `build` fn: the node,
//! its keep-alive need and its pin targets, see [`crate::graph::Built`]),
//! the state it keeps across reloads (asked of the graph while it is
//! built: `nodes.kept::<T>(route, member)`), its errors (a
//! [`crate::error::ModelError::Strategy`]: status, code, message), its
//! metrics and any HTTP endpoints of its own. The folder exports all of
//! that as one [`Strategy`] value, so adding a strategy means adding a
//! folder and one line in [`STRATEGIES`]:
//!
//! ```text
//! pub const STRATEGY: Strategy = Strategy::new("race", config::parse, config::build)
//!     .with_metrics(metrics::METRICS);      // optional: its own metrics
//!     // .with_endpoints(votes::ENDPOINTS)  // optional: its own HTTP endpoints
//! ```
//!
//! Each implements [`crate::model::ChatModel`] over the nodes it names, so
//! strategies nest. Attempts are recorded by the concrete models underneath; a strategy
//! only sets verdicts. `x-conclave-pin` is not a strategy's concern: the
//! graph wraps every strategy node in [`crate::graph::Pinned`].
//!
//! `passthrough` is the one built into the config: an alias of its model's
//! node, or a thin node when it sets options ([`crate::graph::Passthrough`]).
//! `failover` is not a strategy of its own: it is how a route's members
//! continue a broken stream.

pub mod arena;
pub mod balance;
pub mod chain;
pub mod failover;
pub mod judge;
pub mod oracle;
pub mod race;
pub mod vote;

#[cfg(test)]
mod tests;

use std::sync::{Arc, LazyLock};

use serde_json::{Map, Value};

use crate::config::{Errors, Strategies};
use crate::context::RequestCtx;
pub use crate::graph::Strategy;
use crate::graph::{BuildError, Resolve};
use crate::model::ChatModel;
use crate::telemetry::MetricSpec;

/// Every strategy of this build, one entry each: the one table the config
/// ([`ALL`]), the graph ([`crate::graph::Graph::build`]), telemetry
/// ([`metrics()`]) and the API (its endpoints) read.
pub const STRATEGIES: &[Strategy] = &[
    chain::STRATEGY,
    judge::STRATEGY,
    race::STRATEGY,
    arena::STRATEGY,
    oracle::STRATEGY,
    balance::STRATEGY,
    vote::STRATEGY,
];

/// Strategies the design names that this build does not have yet.
const LATER: &[&str] = &[];

/// The strategies of [`STRATEGIES`] as [`crate::config::load`] reads them.
pub static ALL: LazyLock<Strategies> =
    LazyLock::new(|| Strategies::new(STRATEGIES.iter().map(|s| (s.name, s.parse)), LATER));

/// The metrics every strategy of [`STRATEGIES`] records, for the recorder
/// ([`crate::telemetry::Telemetry::new`]).
pub fn metrics() -> Vec<MetricSpec> {
    STRATEGIES
        .iter()
        .flat_map(|s| s.metrics.iter().copied())
        .chain(crate::graph::cache::METRICS.iter().copied())
        .collect()
}

/// A model a strategy route calls (a panellist, a candidate, a
/// contestant), by its config name.
pub struct Member {
    pub name: Arc<str>,
    pub model: Arc<dyn ChatModel>,
}

impl Member {
    /// The member `name`, from the graph being built.
    pub(crate) fn of(name: &str, nodes: &mut dyn Resolve) -> Result<Member, BuildError> {
        Ok(Member {
            name: name.into(),
            model: nodes.model(name)?,
        })
    }

    /// Every member of a list, in order.
    pub(crate) fn all(
        names: &[String],
        nodes: &mut dyn Resolve,
    ) -> Result<Vec<Member>, BuildError> {
        names.iter().map(|n| Member::of(n, nodes)).collect()
    }

    /// A list of members as pin targets (see [`crate::graph::Pins`]).
    pub fn targets(members: &[Member]) -> Vec<(Arc<str>, Arc<dyn ChatModel>)> {
        members
            .iter()
            .map(|m| (m.name.clone(), m.model.clone()))
            .collect()
    }
}

/// Writes a strategy's own event (`judge_ranking`, `race_finished`, …) to
/// the event log, when there is one.
pub fn event(ctx: &RequestCtx, name: &'static str, fields: Map<String, Value>) {
    if ctx.events_enabled() {
        ctx.emit(name, fields);
    }
}

/// Checks a route's list of members (`tiers`, `panel`, `candidates`) at
/// `path.key`: at least one (else `empty`), none twice (`"x" {twice}`).
pub(crate) fn members(
    list: &[String],
    path: &str,
    key: &str,
    empty: &str,
    twice: &str,
    errs: &mut Errors,
) {
    if list.is_empty() {
        errs.push(format!("{path}.{key}"), empty);
    }
    for (i, m) in list.iter().enumerate() {
        if list[..i].contains(m) {
            errs.push(format!("{path}.{key}[{i}]"), format!("\"{m}\" {twice}"));
        }
    }
}

/// The references of a member list, named `key[i]`, for `RouteSpec::references`.
pub(crate) fn member_refs(key: &str, list: &[String]) -> Vec<(String, String)> {
    list.iter()
        .enumerate()
        .map(|(i, m)| (format!("{key}[{i}]"), m.clone()))
        .collect()
}
