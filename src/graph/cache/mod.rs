//! The response cache on the request path: [`Cached`], the decorator the
//! graph puts around a route's node or a concrete model's node that has
//! `cache = { ... }` (a route's whole answer, or one member's call inside
//! a strategy). It looks the canonical request ([`key`]) up in the
//! gateway's [`Answers`], answers a hit from the entry ([`answer`]) with
//! no upstream call and no attempt record (so nothing is billed), and on a
//! miss makes one call for every identical request in flight ([`flight`]),
//! storing only complete answers (never an arena's, nor a chain's best try
//! after every tier was rejected). A `fresh` call (an arena's contestant,
//! a vote's sample) passes through. Only a route's layer, or a model asked
//! for directly, tells the client `x-conclave-cache`. [`Cache`] is the
//! gateway's one instance, kept across reloads.

pub mod answer;
pub mod flight;
pub mod key;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use metrics::{counter, gauge};
use serde_json::{Map, Value, json};

use self::flight::{Flights, Joined};
use self::key::KeyParts;
use crate::attempt::Attempt;
use crate::config::{CacheRule, CacheScope};
use crate::context::Totals;
use crate::error::ModelError;
use crate::labels::{Role, Warm};
use crate::model::{Availability, Call, CallSize, ChatModel, Reply, Spend};
use crate::redact::Redactor;
use crate::sink::{Metrics, ModelInfo};
use crate::store::cache::{Answers, Entry};
use crate::telemetry::{MetricKind, MetricSpec};
use crate::wire::ChatRequest;

pub const CACHE_REQUESTS: &str = "conclave_cache_requests_total";
pub const CACHE_ENTRIES: &str = "conclave_cache_entries";
pub const CACHE_BYTES: &str = "conclave_cache_bytes";
pub const CACHE_SAVED_TOKENS: &str = "conclave_cache_saved_tokens_total";
pub const CACHE_SAVED_COST: &str = "conclave_cache_saved_cost_usd_total";

/// The cache's metrics, declared with telemetry's at start-up.
pub const METRICS: &[MetricSpec] = &[
    MetricSpec {
        name: CACHE_REQUESTS,
        help: "Requests to a cached route or model, by result (hit, miss, bypass, off)",
        kind: MetricKind::Counter,
    },
    MetricSpec {
        name: CACHE_ENTRIES,
        help: "Entries the response cache holds",
        kind: MetricKind::Gauge,
    },
    MetricSpec {
        name: CACHE_BYTES,
        help: "Bytes the response cache holds",
        kind: MetricKind::Gauge,
    },
    MetricSpec {
        name: CACHE_SAVED_TOKENS,
        help: "Tokens cache hits did not spend (what the stored answers cost)",
        kind: MetricKind::Counter,
    },
    MetricSpec {
        name: CACHE_SAVED_COST,
        help: "Dollars cache hits did not spend (what the stored answers cost; a float, so kept as a gauge that only grows)",
        kind: MetricKind::Gauge,
    },
];

/// The gateway's response cache: where entries live and the calls in
/// flight.
pub struct Cache {
    pub answers: Arc<dyn Answers>,
    flights: Flights,
}

impl Cache {
    pub fn new(answers: Arc<dyn Answers>) -> Arc<Self> {
        Arc::new(Cache {
            answers,
            flights: Flights::default(),
        })
    }

    /// Deletes every entry, or `route`'s; how many (a failing store
    /// deleted none).
    pub async fn clear(&self, route: Option<&str>, metrics: &Metrics) -> u64 {
        let n = self.answers.clear(route).await.unwrap_or(0);
        self.gauges(metrics);
        n
    }

    fn gauges(&self, metrics: &Metrics) {
        let s = self.answers.stats();
        metrics.scope(|| {
            gauge!(CACHE_ENTRIES).set(s.entries as f64);
            gauge!(CACHE_BYTES).set(s.bytes as f64);
        });
    }
}

/// Which layer a decorator caches, for the `cache_hit` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Layer {
    Route,
    Model,
}

impl Layer {
    fn label(self) -> &'static str {
        match self {
            Layer::Route => "route",
            Layer::Model => "model",
        }
    }
}

/// A node answered through the response cache (see the module doc).
pub struct Cached {
    pub inner: Arc<dyn ChatModel>,
    /// The route or model name the rule is on.
    pub name: Arc<str>,
    pub rule: CacheRule,
    pub layer: Layer,
    pub cache: Arc<Cache>,
    /// What a hit's (unrecorded) attempt names.
    info: Arc<ModelInfo>,
}

impl Cached {
    pub fn new(
        inner: Arc<dyn ChatModel>,
        name: &str,
        rule: CacheRule,
        layer: Layer,
        cache: Arc<Cache>,
    ) -> Self {
        let info = Arc::new(ModelInfo {
            name: name.into(),
            upstream: "cache".into(),
            upstream_model: name.to_owned(),
            input_per_mtok: 0.0,
            output_per_mtok: 0.0,
            cached_input_per_mtok: 0.0,
            cache_write_per_mtok: 0.0,
            image_tokens: 0,
            context_window: None,
            max_tokens: 0,
            redactor: Arc::new(Redactor::new(std::iter::empty())),
        });
        Cached {
            inner,
            name: name.into(),
            rule,
            layer,
            cache,
            info,
        }
    }

    /// Whether the rule caches `req`: its temperature (1 when absent) is
    /// at most the rule's, or it sets a `seed`.
    pub fn eligible(&self, req: &ChatRequest) -> bool {
        eligible(&self.rule, req)
    }

    fn count(&self, call: &Call, result: &'static str) {
        call.ctx.metrics.scope(|| {
            counter!(CACHE_REQUESTS, "route" => self.name.to_string(), "result" => result)
                .increment(1);
        });
    }

    fn served_by(&self) -> Option<Arc<str>> {
        (self.layer == Layer::Model).then(|| self.name.clone())
    }

    /// Whether this layer's `x-conclave-cache` (and `age`) reach the
    /// client: a route's always, a model's when the client asked for it
    /// directly, never a member's inside a strategy.
    fn shown(&self, call: &Call) -> bool {
        self.layer == Layer::Route || call.role == Role::Direct
    }

    /// Answers `call` from `entry`: headers, event, metrics.
    fn hit(&self, call: &Call, req: &ChatRequest, entry: &Entry) -> Result<Reply, ModelError> {
        let mut reply = answer::reply(
            entry,
            &call.ctx,
            &self.info,
            call.role,
            req.is_stream(),
            self.served_by(),
        )?;
        if !self.shown(call) {
            unshown(&mut reply.meta);
        }
        self.count(call, "hit");
        let route = self.name.to_string();
        call.ctx.metrics.scope(|| {
            counter!(CACHE_SAVED_TOKENS, "route" => route.clone()).increment(entry.tokens);
            if entry.cost_usd.is_finite() && entry.cost_usd > 0.0 {
                gauge!(CACHE_SAVED_COST, "route" => route).increment(entry.cost_usd);
            }
        });
        if call.role == Role::Direct {
            call.ctx.set_cached();
        }
        if call.ctx.events_enabled() {
            let age = call.ctx.clock.unix_secs().saturating_sub(entry.stored_at);
            let mut f = Map::new();
            f.insert("layer".into(), json!(self.layer.label()));
            f.insert("model".into(), json!(&*self.name));
            f.insert("age_s".into(), json!(age));
            call.ctx.emit("cache_hit", f);
        }
        Ok(reply)
    }

    fn storing(&self, key: String) -> Storing {
        Storing {
            cache: self.cache.clone(),
            key,
            name: self.name.clone(),
            ttl: self.rule.ttl,
            layer: self.layer,
        }
    }
}

/// See [`Cached::eligible`].
pub fn eligible(rule: &CacheRule, req: &ChatRequest) -> bool {
    let temperature = req
        .extra
        .get("temperature")
        .and_then(Value::as_f64)
        .unwrap_or(1.0);
    let seeded = req.extra.get("seed").is_some_and(|s| !s.is_null());
    temperature <= rule.max_temperature || seeded
}

/// What a call's end stores, and where.
pub struct Storing {
    cache: Arc<Cache>,
    key: String,
    name: Arc<str>,
    ttl: Duration,
    layer: Layer,
}

impl Storing {
    /// The entry for a whole answer `body`, if it may be stored; what it
    /// cost is the request's spend since `before` at the route, the
    /// call's own at a model (its panel siblings spend alongside).
    fn entry(&self, call: &Call, attempt: &Attempt, before: Totals, body: Bytes) -> Option<Entry> {
        if !answer::complete(&body) {
            return None;
        }
        let cost_usd = match self.layer {
            Layer::Route => (call.ctx.totals().cost_usd - before.cost_usd).max(0.0),
            Layer::Model => attempt.cost_usd().unwrap_or(0.0),
        };
        Some(Entry {
            tokens: answer::tokens(&body),
            body,
            stored_at: call.ctx.clock.unix_secs(),
            route: self.name.to_string(),
            cost_usd,
        })
    }

    async fn put(&self, call: &Call, entry: Arc<Entry>) {
        let entry = Arc::unwrap_or_clone(entry);
        // A failing store is a miss next time, never an error now.
        let _ = self.cache.answers.put(&self.key, entry, self.ttl).await;
        self.cache.gauges(&call.ctx.metrics);
    }
}

#[async_trait]
impl ChatModel for Cached {
    async fn chat(&self, call: Call, req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        // A blind comparison needs fresh answers, and a vote's samples
        // are each their own.
        if call.role == Role::Contestant || call.fresh {
            return self.inner.chat(call, req).await;
        }
        let asked = call.ctx.options.cache;
        if asked.no_store || !self.eligible(&req) {
            self.count(&call, "off");
            let show = self.shown(&call);
            return tagged(self.inner.chat(call, req).await, "off", show);
        }
        let scope = match self.rule.scope {
            CacheScope::Key => Some(&*call.ctx.key),
            CacheScope::Shared => None,
        };
        let parts = KeyParts {
            name: &self.name,
            scope,
            pin: call.pin.as_deref(),
            beta: call.ctx.options.anthropic_beta.as_deref(),
        };
        let key = key::digest(&parts, &req)?;
        if asked.no_lookup {
            self.count(&call, "bypass");
            let storing = self.storing(key);
            let show = self.shown(&call);
            let r = flight::lead(self.inner.clone(), call, req, storing, None).await;
            return tagged(r, "bypass", show);
        }
        if let Ok(Some(entry)) = self.cache.answers.get(&key).await {
            // An entry that cannot be answered from is a miss.
            if let Ok(reply) = self.hit(&call, &req, &entry) {
                return Ok(reply);
            }
        }
        // A failed leader's waiters join again, so one of them leads the
        // next call rather than all calling at once: one call in flight
        // per key, whatever the upstream answers, until the deadline.
        while tokio::time::Instant::now() < call.by() {
            match self.cache.flights.join(&key) {
                Joined::Lead(tx) => {
                    self.count(&call, "miss");
                    let storing = self.storing(key);
                    let show = self.shown(&call);
                    let r = flight::lead(self.inner.clone(), call, req, storing, Some(tx)).await;
                    return tagged(r, "miss", show);
                }
                Joined::Wait(rx) => {
                    if let Some(entry) = flight::wait(rx, &call).await
                        && let Ok(reply) = self.hit(&call, &req, &entry)
                    {
                        return Ok(reply);
                    }
                }
            }
        }
        self.count(&call, "miss");
        let storing = self.storing(key);
        let show = self.shown(&call);
        let r = flight::lead(self.inner.clone(), call, req, storing, None).await;
        tagged(r, "miss", show)
    }

    fn estimate(&self, size: CallSize) -> Spend {
        self.inner.estimate(size)
    }

    fn estimate_request(&self, req: &ChatRequest, size: CallSize) -> Spend {
        self.inner.estimate_request(req, size)
    }

    fn availability(&self) -> Availability {
        self.inner.availability()
    }

    async fn warm(&self) -> Warm {
        self.inner.warm().await
    }

    fn continues_prefill(&self) -> bool {
        self.inner.continues_prefill()
    }
}

/// The reply with this layer's `x-conclave-cache` header when it is
/// `shown` (replacing an inner layer's: a route over a cached model says
/// one thing).
fn tagged(
    r: Result<Reply, ModelError>,
    result: &'static str,
    shown: bool,
) -> Result<Reply, ModelError> {
    r.map(|mut reply| {
        if shown {
            unshown(&mut reply.meta);
            reply.meta.add_header("x-conclave-cache", result);
        }
        reply
    })
}

/// `meta` without a cache's `x-conclave-cache` and `age`.
fn unshown(meta: &mut crate::model::Meta) {
    meta.headers
        .retain(|(name, _)| name.as_str() != "x-conclave-cache" && name.as_str() != "age");
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn rule(max_temperature: f64) -> CacheRule {
        CacheRule {
            ttl: Duration::from_secs(60),
            scope: CacheScope::Key,
            max_temperature,
        }
    }

    fn req(v: Value) -> ChatRequest {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn temperature_and_seed_decide_eligibility() {
        let m = json!([{"role": "user", "content": "x"}]);
        let none = req(json!({"model": "m", "messages": m}));
        let zero = req(json!({"model": "m", "messages": m, "temperature": 0}));
        let hot = req(json!({"model": "m", "messages": m, "temperature": 0.7}));
        let seeded = req(json!({"model": "m", "messages": m, "temperature": 0.7, "seed": 3}));
        assert!(!eligible(&rule(0.0), &none), "absent counts as 1");
        assert!(eligible(&rule(1.0), &none));
        assert!(eligible(&rule(0.0), &zero));
        assert!(!eligible(&rule(0.5), &hot));
        assert!(eligible(&rule(0.0), &seeded));
        assert!(eligible(&rule(2.0), &hot));
    }
}
