//! How a strategy route becomes a node: its builder ([`BuildFn`], in its
//! strategy-table entry), what a builder sees of the graph being built
//! ([`Resolve`]: the nodes it names, where records and kept state live)
//! and what it returns ([`Built`]: the node, its keep-alive need and its
//! pin targets). The config only describes a route ([`RouteSpec`]);
//! building it is the graph's business, so the config never reaches up
//! into runtime types.

use std::sync::Arc;
use std::time::Duration;

use super::BuildError;
use super::kept::Kept;
use super::pin::Pins;
use crate::config::{Config, RouteSpec};
use crate::model::ChatModel;
use crate::store::records::Records;

/// A built strategy node, its keep-alive need (see [`super::Node`]) and
/// what `x-conclave-pin` may name on it (see [`super::pin`]).
pub struct Built {
    pub model: Arc<dyn ChatModel>,
    pub keepalive: Option<Duration>,
    pub pins: Pins,
}

/// How a strategy reaches the nodes it names while the graph is built.
pub trait Resolve {
    /// The node for `name`, built first if it is a route.
    fn model(&mut self, name: &str) -> Result<Arc<dyn ChatModel>, BuildError>;
    /// The keep-alive need of an already built node.
    fn keepalive(&self, name: &str) -> Option<Duration>;
    /// Where strategies keep records (arenas, oracle spend).
    fn records(&self) -> Records;
    /// Where strategies keep state across reloads (see [`super::kept`]).
    fn kept_state(&self) -> &Kept;
}

impl dyn Resolve + '_ {
    /// The `T` kept for `member` of `route` (`""` for the whole route):
    /// the one the running gateway has, across reloads, or a new default
    /// (see [`super::kept`]).
    pub fn kept<T: Default + Send + Sync + 'static>(&self, route: &str, member: &str) -> Arc<T> {
        self.kept_state().get(route, member)
    }
}

/// A name the graph does not have: the config was not validated.
#[derive(Debug, thiserror::Error)]
#[error("`{0}` refers to a name that is not defined (the config was not validated)")]
pub struct Unresolved(pub String);

/// Builds one strategy route (`name`) from its validated spec.
pub type BuildFn = fn(&dyn RouteSpec, &str, &Config, &mut dyn Resolve) -> Result<Built, BuildError>;

/// The spec of route `route` as its strategy's own type: a builder's
/// first step. A spec of another type (a table that hands a builder
/// another strategy's route) is a [`BuildError::NoBuilder`] too: the route
/// has no builder of its own type.
pub fn spec<'s, T: 'static>(spec: &'s dyn RouteSpec, route: &str) -> Result<&'s T, BuildError> {
    spec.as_any()
        .downcast_ref::<T>()
        .ok_or_else(|| BuildError::NoBuilder {
            route: route.to_owned(),
            strategy: spec.strategy(),
        })
}
