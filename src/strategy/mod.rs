//! Strategies: models made of models. Each lives in a folder of its own
//! (`chain/`) that owns its config keys, their validation, the names it
//! refers to, how `check` shows it, its warnings and its graph build
//! ([`RouteSpec`]); adding one means adding a folder and one line in
//! [`REGISTRY`]. Each implements [`crate::model::ChatModel`] over the
//! nodes it names, so strategies nest. Attempts are recorded by the
//! concrete models underneath; a strategy only sets verdicts.
//!
//! `passthrough` is the one built into the config: an alias of its model's
//! node, or a thin node when it sets options (see `graph`).

pub mod chain;
pub mod passthrough;

use std::any::Any;
use std::fmt::Debug;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, Errors};
use crate::graph::BuildError;
use crate::model::ChatModel;

/// A strategy route's validated config.
pub trait RouteSpec: Debug + Send + Sync {
    /// The strategy's name (`strategy = "…"`, a bounded label).
    fn strategy(&self) -> &'static str;
    /// The names it refers to, each with its key path inside the route
    /// table (`tiers[0]`, `verifier`).
    fn references(&self) -> Vec<(String, String)>;
    /// One line for `conclave check`.
    fn describe(&self, config: &Config) -> String;
    /// Valid but likely not what the user meant.
    fn warnings(&self, _name: &str, _config: &Config) -> Vec<String> {
        Vec::new()
    }
    /// The route's node, from the nodes it names.
    fn build(
        &self,
        name: &str,
        config: &Config,
        nodes: &mut dyn Resolve,
    ) -> Result<Built, BuildError>;
    fn as_any(&self) -> &dyn Any;
}

/// A built strategy node and its keep-alive need (see `graph::Node`).
pub struct Built {
    pub model: Arc<dyn ChatModel>,
    pub keepalive: Option<Duration>,
}

/// How a strategy reaches the nodes it names while the graph is built.
pub trait Resolve {
    /// The node for `name`, built first if it is a route.
    fn model(&mut self, name: &str) -> Result<Arc<dyn ChatModel>, BuildError>;
    /// The keep-alive need of an already built node.
    fn keepalive(&self, name: &str) -> Option<Duration>;
}

/// Reads one route table of a strategy.
pub(crate) type Parse = fn(toml::Value, &str, &mut Errors) -> Option<Box<dyn RouteSpec>>;

/// Every strategy, by name.
pub(crate) const REGISTRY: &[(&str, Parse)] = &[("chain", chain::config::parse)];

/// Strategies the design names that this build does not have yet.
pub const LATER: &[&str] = &["judge", "race", "arena", "oracle"];
