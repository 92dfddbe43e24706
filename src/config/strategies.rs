//! What the config knows of strategies: the validated config a strategy's
//! folder parses its route table into ([`RouteSpec`]), and the registry of
//! strategies ([`Strategies`]: the parsers of the strategy table) that the
//! caller hands to [`super::load`].
//! The config reads a strategy route through its registered parser without
//! knowing the strategy, so imports flow one way: strategies depend on the
//! config, never the reverse. A spec is data: building it into a node is
//! the graph's business (`crate::graph::build`), so nothing here knows a
//! runtime type.

use std::any::Any;
use std::collections::HashSet;
use std::fmt::Debug;

use indexmap::IndexMap;

use super::cache::take_rule;
use super::resilience::{RetryBudget, take_route};
use super::validate::table;
use super::{CacheRule, Config, Errors, Route, positive, raw};

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
    /// Errors only the whole config shows (key path, what is wrong),
    /// checked once every name resolves.
    fn errors(&self, _name: &str, _config: &Config) -> Vec<(String, String)> {
        Vec::new()
    }
    /// The spec as `Any`, for the strategy's own builder (and for callers
    /// that look for one strategy's routes) to downcast.
    fn as_any(&self) -> &dyn Any;
}

/// Reads one route table of a strategy.
pub(crate) type Parse = fn(toml::Value, &str, &mut Errors) -> Option<Box<dyn RouteSpec>>;

/// The strategies of a build, by name: the parsers of the strategy table
/// (`conclave::strategy::STRATEGIES`), as the config reads them.
pub struct Strategies {
    known: Vec<(&'static str, Parse)>,
    /// Strategies the design names that this build does not have yet.
    later: &'static [&'static str],
}

impl Strategies {
    /// The strategies `known` (name, parser), and those still to come.
    pub(crate) fn new(
        known: impl IntoIterator<Item = (&'static str, Parse)>,
        later: &'static [&'static str],
    ) -> Strategies {
        Strategies {
            known: known.into_iter().collect(),
            later,
        }
    }

    /// The parser of a registered strategy.
    fn registered(&self, name: &str) -> Option<Parse> {
        self.known
            .iter()
            .find(|(n, _)| *n == name)
            .map(|(_, parse)| *parse)
    }

    /// Every strategy this build has, `passthrough` first.
    fn available(&self) -> Vec<&'static str> {
        let mut out = vec!["passthrough"];
        out.extend(self.known.iter().map(|(n, _)| *n));
        out
    }

    /// Reads the `[routes]` tables; a route whose table fails goes into
    /// `broken` (still a defined name). Each route's `retry_budget` goes
    /// into `budgets`, and its `cache`, if any, into `rules`.
    pub(super) fn routes(
        &self,
        v: Option<toml::Value>,
        errs: &mut Errors,
        broken: &mut HashSet<String>,
        budgets: &mut IndexMap<String, RetryBudget>,
        rules: &mut IndexMap<String, CacheRule>,
    ) -> IndexMap<String, Route> {
        let mut out = IndexMap::new();
        for (name, mut item) in table(v, "routes", errs) {
            let path = format!("routes.{name}");
            budgets.insert(name.clone(), take_route(&mut item, &path, errs));
            let strategy = item
                .get("strategy")
                .and_then(|s| s.as_str())
                .map(str::to_owned);
            if let Some(rule) = take_rule(&mut item, &path, strategy.as_deref(), errs) {
                rules.insert(name.clone(), rule);
            }
            let route = match strategy.as_deref() {
                Some("passthrough") => errs.parse::<raw::Passthrough>(&path, item).map(|p| {
                    positive(
                        p.stream_idle_timeout,
                        &format!("{path}.stream_idle_timeout"),
                        errs,
                    );
                    Route::Passthrough {
                        model: p.model,
                        stream_idle_timeout: p.stream_idle_timeout,
                    }
                }),
                Some(s) if self.registered(s).is_some() => self.registered(s).and_then(|parse| {
                    parse(item, &path, errs).map(|spec| Route::Strategy(spec.into()))
                }),
                Some(s) if self.later.contains(&s) => {
                    errs.push(
                        format!("{path}.strategy"),
                        format!(
                            "strategy \"{s}\" is not available in this build yet (available: {})",
                            self.available().join(", ")
                        ),
                    );
                    None
                }
                Some(s) => {
                    let mut all = self.available();
                    all.extend(self.later);
                    errs.push(
                        format!("{path}.strategy"),
                        format!(
                            "unknown strategy \"{s}\" (expected one of {})",
                            all.join(", ")
                        ),
                    );
                    None
                }
                None => {
                    errs.push(
                        format!("{path}.strategy"),
                        format!("missing (expected one of {})", self.available().join(", ")),
                    );
                    None
                }
            };
            match route {
                Some(r) => {
                    out.insert(name, r);
                }
                None => {
                    broken.insert(name);
                }
            }
        }
        out
    }
}
