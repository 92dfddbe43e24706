//! Compiles a validated [`Config`] into the model graph: one
//! `Arc<dyn ChatModel>` node per concrete model and per route, built once
//! at start-up. Routes refer to their parts by `Arc`, so a request walks
//! the graph without name lookups. A strategy route is built by its
//! strategy's builder ([`build`]), from the strategy table the caller
//! hands in ([`table`]: the graph never names a strategy), and wrapped in
//! the one decorator that honours `x-conclave-pin` ([`pin`]). A
//! `passthrough` route is the node it names, or a thin [`Passthrough`]
//! node. A route or model with `cache = { ... }` is wrapped in the
//! response cache's decorator ([`cache`]), outside the pin decorator (a
//! pin is part of the cache key). State strategies keep across reloads
//! lives in [`kept`];
//! [`endpoint`] is how a strategy serves HTTP of its own.

pub mod build;
pub mod cache;
pub mod endpoint;
pub mod kept;
mod passthrough;
pub mod pin;
pub mod table;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

pub use build::{BuildFn, Built, Resolve, Unresolved, spec};
pub use cache::{Cache, Cached, Layer};
pub use kept::Kept;
pub use passthrough::Passthrough;
pub use pin::{Pinned, Pins};
pub use table::Strategy;

use crate::config::{Config, Route};
use crate::model::ChatModel;
use crate::redact::Redactor;
use crate::sink::{Metrics, ModelInfo};
use crate::store::records::Records;
use crate::upstream::registry::Registry;
use crate::upstream::{ConcreteModel, Upstream};

/// A name a client can ask for.
#[derive(Clone)]
pub struct Node {
    pub model: Arc<dyn ChatModel>,
    /// `passthrough` for concrete models.
    pub strategy: &'static str,
    /// The name is a route (not a concrete model).
    pub is_route: bool,
    /// The concrete model behind the name (itself, or what a passthrough
    /// route names): what `/v1/completions` and `/v1/embeddings` relay to.
    pub concrete: Option<Arc<ConcreteModel>>,
    /// How often a streamed client needs keep-alive comments while this
    /// node holds answers back (a chain verifying a tier, or any node
    /// nested in it that does); computed once, here.
    pub keepalive: Option<Duration>,
}

pub struct Graph {
    /// Names in config order: models first, then routes.
    pub names: Vec<Arc<str>>,
    /// foldhash (hashbrown's), not SipHash: its keys are the config's,
    /// and every request looks its model up here.
    nodes: hashbrown::HashMap<Arc<str>, Node>,
    /// In config order.
    pub upstreams: Vec<Arc<Upstream>>,
}

#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("upstream `{name}`: {source}")]
    Client {
        name: String,
        #[source]
        source: crate::upstream::openai::BuildError,
    },
    #[error(transparent)]
    Unresolved(#[from] Unresolved),
    /// A route of a strategy the table has no builder for (or whose
    /// builder reads another spec): the config and the table disagree.
    #[error("route `{route}`: strategy \"{strategy}\" has no builder in this build")]
    NoBuilder {
        route: String,
        strategy: &'static str,
    },
}

impl Graph {
    /// The graph of `config`, its strategy routes built by the builders
    /// of `strategies` (`conclave::strategy::STRATEGIES`); strategies that
    /// keep records (arenas) keep them in `store`, and their state in
    /// `kept` (the running gateway's, across reloads); upstreams come from
    /// `registry` (the running ones where a reload left them as they were)
    /// and record their metrics to `metrics`.
    pub fn build(
        config: &Config,
        store: &Records,
        registry: &Registry,
        kept: &Kept,
        metrics: &Metrics,
        strategies: &[Strategy],
    ) -> Result<Graph, BuildError> {
        Self::build_cached(config, store, registry, kept, metrics, strategies, None)
    }

    /// [`Self::build`], the routes and models with a cache rule wrapped
    /// in `cache`'s decorator (without one, the rules are not applied).
    pub fn build_cached(
        config: &Config,
        store: &Records,
        registry: &Registry,
        kept: &Kept,
        metrics: &Metrics,
        strategies: &[Strategy],
        cache: Option<&Arc<Cache>>,
    ) -> Result<Graph, BuildError> {
        let mut upstreams = HashMap::new();
        for (name, u) in &config.upstreams {
            let models = config
                .models
                .iter()
                .filter(|(_, m)| m.upstream == *name)
                .map(|(n, m)| (m.upstream_model.clone(), Arc::from(n.as_str())))
                .collect();
            let max_tokens = config
                .models
                .values()
                .filter(|m| m.upstream == *name)
                .map(|m| (m.upstream_model.clone(), m.max_tokens))
                .collect();
            let built = registry
                .upstream(name, u, models, max_tokens, metrics)
                .map_err(|source| BuildError::Client {
                    name: name.clone(),
                    source,
                })?;
            upstreams.insert(name.as_str(), built);
        }
        let redactor = Arc::new(Redactor::new(config.secrets()));
        let mut g = Graph {
            names: Vec::new(),
            nodes: hashbrown::HashMap::new(),
            upstreams: config
                .upstreams
                .keys()
                .filter_map(|n| upstreams.get(n.as_str()).cloned())
                .collect(),
        };
        for (name, m) in &config.models {
            let upstream = upstreams
                .get(m.upstream.as_str())
                .cloned()
                .ok_or_else(|| Unresolved(m.upstream.clone()))?;
            let info = Arc::new(ModelInfo {
                name: name.as_str().into(),
                upstream: upstream.name.clone(),
                upstream_model: m.upstream_model.clone(),
                input_per_mtok: m.price.input_per_mtok,
                output_per_mtok: m.price.output_per_mtok,
                cached_input_per_mtok: m.price.cached_input(),
                cache_write_per_mtok: m.price.cache_write(),
                image_tokens: m.image_tokens,
                context_window: m.context_window,
                max_tokens: u64::from(m.max_tokens),
                redactor: redactor.clone(),
            });
            let concrete = Arc::new(ConcreteModel::new(info, upstream));
            let model = cached(config, cache, name, Layer::Model, concrete.clone());
            g.insert(
                name,
                Node {
                    model,
                    strategy: "passthrough",
                    is_route: false,
                    concrete: Some(concrete),
                    keepalive: None,
                },
            );
        }
        let with = Building {
            config,
            store,
            strategies,
            kept,
            cache,
        };
        for name in config.routes.keys() {
            g.route(&with, name)?;
        }
        Ok(g)
    }

    fn insert(&mut self, name: &str, node: Node) {
        let key: Arc<str> = name.into();
        self.names.push(key.clone());
        self.nodes.insert(key, node);
    }

    /// The node for `name`, building routes depth-first (validation has
    /// ruled out cycles).
    fn route(&mut self, with: &Building, name: &str) -> Result<Arc<dyn ChatModel>, BuildError> {
        if let Some(n) = self.nodes.get(name) {
            return Ok(n.model.clone());
        }
        let route = with
            .config
            .routes
            .get(name)
            .ok_or_else(|| Unresolved(name.to_owned()))?;
        // Keep-alive needs: the nodes a route names are built first.
        let mut keepalive = None;
        let model: Arc<dyn ChatModel> = match route {
            Route::Passthrough {
                model,
                stream_idle_timeout: None,
            } => self.route(with, model)?,
            Route::Passthrough {
                model,
                stream_idle_timeout,
            } => Arc::new(Passthrough {
                model: self.route(with, model)?,
                stream_idle_timeout: *stream_idle_timeout,
            }),
            Route::Strategy(spec) => {
                let strategy = spec.strategy();
                let build = table::builder(with.strategies, strategy).ok_or_else(|| {
                    BuildError::NoBuilder {
                        route: name.to_owned(),
                        strategy,
                    }
                })?;
                let built = build(
                    spec.as_ref(),
                    name,
                    with.config,
                    &mut Resolver { graph: self, with },
                )?;
                keepalive = built.keepalive;
                Arc::new(Pinned {
                    strategy,
                    route: name.into(),
                    pins: built.pins,
                    inner: built.model,
                })
            }
        };
        let model = cached(with.config, with.cache, name, Layer::Route, model);
        let (strategy, concrete) = match route {
            // An alias of a route runs that route's strategy, and reaches
            // the concrete model that route reaches, if any.
            Route::Passthrough { model, .. } => {
                let target = self.nodes.get(model.as_str());
                keepalive = target.and_then(|n| n.keepalive);
                target.map_or(("passthrough", None), |n| (n.strategy, n.concrete.clone()))
            }
            _ => (route.strategy(), None),
        };
        self.insert(
            name,
            Node {
                model: model.clone(),
                strategy,
                is_route: true,
                concrete,
                keepalive,
            },
        );
        Ok(model)
    }

    pub fn get(&self, name: &str) -> Option<(&Arc<str>, &Node)> {
        self.nodes.get_key_value(name)
    }
}

/// What every route of one build is built from.
struct Building<'a> {
    config: &'a Config,
    store: &'a Records,
    strategies: &'a [Strategy],
    kept: &'a Kept,
    cache: Option<&'a Arc<Cache>>,
}

/// `model`, in the cache's decorator when `name` has a cache rule.
fn cached(
    config: &Config,
    cache: Option<&Arc<Cache>>,
    name: &str,
    layer: Layer,
    model: Arc<dyn ChatModel>,
) -> Arc<dyn ChatModel> {
    match (cache, config.cache_rules.get(name)) {
        (Some(cache), Some(rule)) => {
            Arc::new(Cached::new(model, name, *rule, layer, cache.clone()))
        }
        _ => model,
    }
}

/// What a strategy's build sees of the graph being built.
struct Resolver<'g> {
    graph: &'g mut Graph,
    with: &'g Building<'g>,
}

impl Resolve for Resolver<'_> {
    fn model(&mut self, name: &str) -> Result<Arc<dyn ChatModel>, BuildError> {
        self.graph.route(self.with, name)
    }

    fn keepalive(&self, name: &str) -> Option<Duration> {
        self.graph.nodes.get(name).and_then(|n| n.keepalive)
    }

    fn records(&self) -> Records {
        self.with.store.clone()
    }

    fn kept_state(&self) -> &Kept {
        self.with.kept
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    const CONFIG: &str = "[upstreams.sim]\nkind = \"mock\"\n\n[models.a]\nupstream = \"sim\"\n\n\
        [routes.p]\nstrategy = \"passthrough\"\nmodel = \"a\"\n";

    #[test]
    fn a_passthrough_route_is_the_node_it_names() {
        let config = crate::config::parse(
            CONFIG,
            "t.toml",
            &|_| None,
            &crate::config::Strategies::new([], &[]),
        )
        .unwrap();
        let store =
            Arc::new(crate::store::Store::in_memory(crate::clock::Clock::system()).unwrap());
        let g = Graph::build(
            &config,
            &Records::sqlite(&store),
            &Registry::new(),
            &Kept::default(),
            &Metrics::noop(),
            &[],
        )
        .unwrap();
        let (_, a) = g.get("a").unwrap();
        let (_, p) = g.get("p").unwrap();
        assert!(Arc::ptr_eq(&a.model, &p.model));
        assert_eq!((p.strategy, p.is_route), ("passthrough", true));
        assert!(p.concrete.is_some());
    }
}
