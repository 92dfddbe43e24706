//! Compiles a validated [`Config`] into the model graph: one
//! `Arc<dyn ChatModel>` node per concrete model and per route, built once
//! at start-up. Routes refer to their parts by `Arc`, so a request walks
//! the graph without name lookups.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use crate::config::{Config, Resolve, Route, Unresolved};
use crate::model::ChatModel;
use crate::redact::Redactor;
use crate::sink::{Metrics, ModelInfo};
use crate::store::Store;
use crate::strategy::passthrough::Passthrough;
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
    nodes: HashMap<Arc<str>, Node>,
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
    #[error(transparent)]
    Redact(#[from] crate::redact::BuildError),
}

impl Graph {
    /// The graph of `config`; strategies that keep records (arenas) keep
    /// them in `store`; upstreams record their metrics to `metrics`.
    pub fn build(
        config: &Config,
        store: &Arc<Store>,
        metrics: &Metrics,
    ) -> Result<Graph, BuildError> {
        let mut upstreams = HashMap::new();
        for (name, u) in &config.upstreams {
            let models = config
                .models
                .iter()
                .filter(|(_, m)| m.upstream == *name)
                .map(|(n, m)| (m.upstream_model.clone(), Arc::from(n.as_str())))
                .collect();
            let built =
                Upstream::from_config(name, u, models, metrics.clone()).map_err(|source| {
                    BuildError::Client {
                        name: name.clone(),
                        source,
                    }
                })?;
            upstreams.insert(name.as_str(), Arc::new(built));
        }
        let redactor = Arc::new(Redactor::new(config.secrets())?);
        let mut g = Graph {
            names: Vec::new(),
            nodes: HashMap::new(),
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
                image_tokens: m.image_tokens,
                context_window: m.context_window,
                redactor: redactor.clone(),
            });
            let concrete = Arc::new(ConcreteModel::new(info, upstream));
            g.insert(
                name,
                Node {
                    model: concrete.clone(),
                    strategy: "passthrough",
                    is_route: false,
                    concrete: Some(concrete),
                    keepalive: None,
                },
            );
        }
        for name in config.routes.keys() {
            g.route(config, name, store)?;
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
    fn route(
        &mut self,
        config: &Config,
        name: &str,
        store: &Arc<Store>,
    ) -> Result<Arc<dyn ChatModel>, Unresolved> {
        if let Some(n) = self.nodes.get(name) {
            return Ok(n.model.clone());
        }
        let route = config
            .routes
            .get(name)
            .ok_or_else(|| Unresolved(name.to_owned()))?;
        // Keep-alive needs: the nodes a route names are built first.
        let mut keepalive = None;
        let model: Arc<dyn ChatModel> = match route {
            Route::Passthrough {
                model,
                stream_idle_timeout: None,
            } => self.route(config, model, store)?,
            Route::Passthrough {
                model,
                stream_idle_timeout,
            } => Arc::new(Passthrough {
                model: self.route(config, model, store)?,
                stream_idle_timeout: *stream_idle_timeout,
            }),
            Route::Strategy(spec) => {
                let built = spec.build(
                    name,
                    config,
                    &mut Resolver {
                        graph: self,
                        config,
                        store,
                    },
                )?;
                keepalive = built.keepalive;
                built.model
            }
        };
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

/// What a strategy's build sees of the graph being built.
struct Resolver<'g> {
    graph: &'g mut Graph,
    config: &'g Config,
    store: &'g Arc<Store>,
}

impl Resolve for Resolver<'_> {
    fn model(&mut self, name: &str) -> Result<Arc<dyn ChatModel>, Unresolved> {
        self.graph.route(self.config, name, self.store)
    }

    fn keepalive(&self, name: &str) -> Option<Duration> {
        self.graph.nodes.get(name).and_then(|n| n.keepalive)
    }

    fn store(&self) -> Arc<Store> {
        self.store.clone()
    }
}
