//! The strategy table's entry: everything a strategy's folder hands the
//! rest of the build, as one value ([`Strategy`]). The table itself
//! (`conclave::strategy::STRATEGIES`) is above the graph; each part takes
//! what it needs from it: the config its parsers, [`super::Graph::build`]
//! its builders, telemetry its metrics, the API its endpoints.

use super::build::BuildFn;
use super::endpoint::HttpEndpoint;
use crate::config::Parse;
use crate::telemetry::MetricSpec;

/// One strategy of a build: its name (`strategy = "…"`), how its route
/// table is read and how its route is built, the metrics it records and
/// the HTTP endpoints it serves besides the chat APIs.
#[derive(Clone, Copy)]
pub struct Strategy {
    pub name: &'static str,
    pub(crate) parse: Parse,
    pub build: BuildFn,
    pub metrics: &'static [MetricSpec],
    pub endpoints: &'static [HttpEndpoint],
}

impl Strategy {
    /// A strategy without metrics or endpoints of its own.
    pub(crate) const fn new(name: &'static str, parse: Parse, build: BuildFn) -> Strategy {
        Strategy {
            name,
            parse,
            build,
            metrics: &[],
            endpoints: &[],
        }
    }

    /// The strategy, recording `metrics` too.
    pub const fn with_metrics(self, metrics: &'static [MetricSpec]) -> Strategy {
        Strategy { metrics, ..self }
    }

    /// The strategy, serving `endpoints` too.
    pub const fn with_endpoints(self, endpoints: &'static [HttpEndpoint]) -> Strategy {
        Strategy { endpoints, ..self }
    }
}

/// The builder of `strategy` in `table`, if the table has it.
pub(super) fn builder(table: &[Strategy], strategy: &str) -> Option<BuildFn> {
    table.iter().find(|s| s.name == strategy).map(|s| s.build)
}
