//! Metric handles kept by their labels, so recording a request's or an
//! attempt's metrics skips the recorder's registry (which builds, hashes
//! and compares a key of labels on every call). Each route, and each
//! model of a route in a role, gets its handles once; a series appears
//! in the exposition when it is first recorded, as before.
//!
//! Label values come from the config and small fixed sets, so the cache
//! is bounded by the config (a route a reload removed keeps its handles,
//! as the recorder keeps its series).

use std::hash::Hash;
use std::sync::{Arc, OnceLock};

use hashbrown::{Equivalent, HashMap};
use metrics::{Counter, Gauge, Histogram, counter, gauge, histogram};
use parking_lot::RwLock;

use super::usage::{ModelTally, RouteTally, Today, Usage};
use super::{
    ATTEMPT_DURATION, ATTEMPT_TTFT, ATTEMPTS_TOTAL, GENERATION_TPS, INFLIGHT_REQUESTS, OVERHEAD,
    REQUEST_DURATION, REQUEST_TTFT, REQUESTS_TOTAL, TOKENS_TOTAL, UPSTREAM_ERRORS_TOTAL,
};
use crate::sink::Metrics;

/// A map from labels to handles, read-mostly.
struct Cache<K, V>(RwLock<HashMap<K, Arc<V>>>);

impl<K: Hash + Eq, V> Cache<K, V> {
    fn new() -> Self {
        Cache(RwLock::new(HashMap::default()))
    }

    /// The handles for `key`, made by `make` the first time.
    fn get<Q>(&self, key: &Q, owned: impl FnOnce() -> K, make: impl FnOnce() -> V) -> Arc<V>
    where
        Q: Hash + Equivalent<K> + ?Sized,
    {
        if let Some(v) = self.0.read().get(key) {
            return v.clone();
        }
        let mut map = self.0.write();
        if let Some(v) = map.get(key) {
            return v.clone();
        }
        let v = Arc::new(make());
        map.insert(owned(), v.clone());
        v
    }
}

/// Handles keyed by one fixed-set label value (a status, a verdict).
struct ByLabel<L, H>(RwLock<Vec<(L, H)>>);

impl<L: PartialEq + Copy, H: Clone> ByLabel<L, H> {
    fn new() -> Self {
        ByLabel(RwLock::new(Vec::new()))
    }

    fn get(&self, label: L, make: impl FnOnce() -> H) -> H {
        if let Some((_, h)) = self.0.read().iter().find(|(l, _)| *l == label) {
            return h.clone();
        }
        let mut all = self.0.write();
        if let Some((_, h)) = all.iter().find(|(l, _)| *l == label) {
            return h.clone();
        }
        let h = make();
        all.push((label, h.clone()));
        h
    }
}

/// One route's request metrics.
pub struct RouteHandles {
    metrics: Metrics,
    route: Arc<str>,
    strategy: &'static str,
    pub inflight: Gauge,
    pub duration: Histogram,
    pub overhead: Histogram,
    ttft: OnceLock<Histogram>,
    requests: ByLabel<&'static str, Counter>,
    /// Today's requests (`GET /v1/usage`), beside the counters.
    pub today: Today<RouteTally>,
}

impl RouteHandles {
    /// `conclave_requests_total` for this route and `status`.
    pub fn requests(&self, status: &'static str) -> Counter {
        self.requests.get(status, || {
            self.metrics.scope(|| {
                counter!(REQUESTS_TOTAL, "route" => self.route.clone(),
                    "strategy" => self.strategy, "status" => status)
            })
        })
    }

    /// `conclave_request_ttft_seconds` for this route.
    pub fn ttft(&self) -> &Histogram {
        self.ttft.get_or_init(|| {
            self.metrics.scope(|| {
                histogram!(REQUEST_TTFT, "route" => self.route.clone(), "strategy" => self.strategy)
            })
        })
    }
}

/// A model's attempt metrics, as one role of one route.
pub struct AttemptHandles {
    metrics: Metrics,
    key: AttemptKey,
    pub duration: Histogram,
    ttft: OnceLock<Histogram>,
    tps: OnceLock<Histogram>,
    tokens: OnceLock<(Counter, Counter)>,
    attempts: ByLabel<(&'static str, &'static str), Counter>,
    errors: ByLabel<&'static str, Counter>,
    /// Today's attempts (`GET /v1/usage`), beside the counters.
    pub today: Today<ModelTally>,
}

impl AttemptHandles {
    /// `conclave_attempts_total` for a `verdict` and `warm` state.
    pub fn attempts(&self, verdict: &'static str, warm: &'static str) -> Counter {
        let k = &self.key;
        self.attempts.get((verdict, warm), || {
            self.metrics.scope(|| {
                counter!(ATTEMPTS_TOTAL,
                    "route" => k.route.clone(), "strategy" => k.strategy,
                    "model" => k.model.clone(), "upstream" => k.upstream.clone(),
                    "role" => k.role, "verdict" => verdict, "warm" => warm)
            })
        })
    }

    /// `conclave_attempt_ttft_seconds`.
    pub fn ttft(&self) -> &Histogram {
        let k = &self.key;
        self.ttft.get_or_init(|| {
            self.metrics.scope(
                || histogram!(ATTEMPT_TTFT, "route" => k.route.clone(), "model" => k.model.clone()),
            )
        })
    }

    /// `conclave_generation_tokens_per_second`.
    pub fn tps(&self) -> &Histogram {
        let k = &self.key;
        self.tps.get_or_init(|| {
            self.metrics.scope(|| {
                histogram!(GENERATION_TPS, "upstream" => k.upstream.clone(), "model" => k.model.clone())
            })
        })
    }

    /// `conclave_tokens_total`, input and output.
    pub fn tokens(&self) -> &(Counter, Counter) {
        let m = &self.key.model;
        self.tokens.get_or_init(|| {
            self.metrics.scope(|| {
                (
                    counter!(TOKENS_TOTAL, "model" => m.clone(), "kind" => "input"),
                    counter!(TOKENS_TOTAL, "model" => m.clone(), "kind" => "output"),
                )
            })
        })
    }

    /// `conclave_upstream_errors_total` for an error `kind`.
    pub fn errors(&self, kind: &'static str) -> Counter {
        let up = &self.key.upstream;
        self.errors.get(kind, || {
            self.metrics
                .scope(|| counter!(UPSTREAM_ERRORS_TOTAL, "upstream" => up.clone(), "kind" => kind))
        })
    }
}

#[derive(Hash, PartialEq, Eq)]
struct RouteKey {
    route: Arc<str>,
    strategy: &'static str,
}

/// A [`RouteKey`] borrowed (the same fields in the same order, so the
/// same hash).
#[derive(Hash)]
struct RouteRef<'a> {
    route: &'a str,
    strategy: &'static str,
}

impl Equivalent<RouteKey> for RouteRef<'_> {
    fn equivalent(&self, k: &RouteKey) -> bool {
        *k.route == *self.route && k.strategy == self.strategy
    }
}

#[derive(Hash, PartialEq, Eq)]
struct AttemptKey {
    route: Arc<str>,
    strategy: &'static str,
    model: Arc<str>,
    upstream: Arc<str>,
    role: &'static str,
}

/// An [`AttemptKey`] borrowed.
#[derive(Hash)]
pub struct AttemptRef<'a> {
    pub route: &'a Arc<str>,
    pub strategy: &'static str,
    pub model: &'a Arc<str>,
    pub upstream: &'a Arc<str>,
    pub role: &'static str,
}

impl Equivalent<AttemptKey> for AttemptRef<'_> {
    fn equivalent(&self, k: &AttemptKey) -> bool {
        k.route == *self.route
            && k.strategy == self.strategy
            && k.model == *self.model
            && k.upstream == *self.upstream
            && k.role == self.role
    }
}

/// The handles of one gateway instance's recorder.
pub struct Handles {
    metrics: Metrics,
    routes: Cache<RouteKey, RouteHandles>,
    attempts: Cache<AttemptKey, AttemptHandles>,
}

impl Handles {
    pub fn new(metrics: Metrics) -> Self {
        Handles {
            metrics,
            routes: Cache::new(),
            attempts: Cache::new(),
        }
    }

    /// A route's request metrics.
    pub fn route(&self, route: &Arc<str>, strategy: &'static str) -> Arc<RouteHandles> {
        let key = RouteRef { route, strategy };
        let owned = || RouteKey {
            route: route.clone(),
            strategy,
        };
        self.routes.get(&key, owned, || {
            let (inflight, duration, overhead) = self.metrics.scope(|| {
                (
                    gauge!(INFLIGHT_REQUESTS, "route" => route.clone()),
                    histogram!(REQUEST_DURATION, "route" => route.clone(), "strategy" => strategy),
                    histogram!(OVERHEAD, "route" => route.clone(), "strategy" => strategy),
                )
            });
            RouteHandles {
                metrics: self.metrics.clone(),
                route: route.clone(),
                strategy,
                inflight,
                duration,
                overhead,
                ttft: OnceLock::new(),
                requests: ByLabel::new(),
                today: Today::default(),
            }
        })
    }

    /// A model's attempt metrics in one role of one route.
    pub fn attempt(&self, r: AttemptRef<'_>) -> Arc<AttemptHandles> {
        let owned = || AttemptKey {
            route: r.route.clone(),
            strategy: r.strategy,
            model: r.model.clone(),
            upstream: r.upstream.clone(),
            role: r.role,
        };
        self.attempts.get(&r, owned, || {
            let key = owned();
            let duration = self.metrics.scope(|| {
                histogram!(ATTEMPT_DURATION,
                    "route" => key.route.clone(), "strategy" => key.strategy,
                    "model" => key.model.clone(), "role" => key.role)
            });
            AttemptHandles {
                metrics: self.metrics.clone(),
                key,
                duration,
                ttft: OnceLock::new(),
                tps: OnceLock::new(),
                tokens: OnceLock::new(),
                attempts: ByLabel::new(),
                errors: ByLabel::new(),
                today: Today::default(),
            }
        })
    }

    /// Every handle's tally of day `day`, gathered by route and by model.
    pub fn usage(&self, day: u64) -> Usage {
        let mut u = Usage::default();
        for (k, h) in self.routes.0.read().iter() {
            if let Some(t) = h.today.of(day) {
                u.route(&k.route, &t);
            }
        }
        for (k, h) in self.attempts.0.read().iter() {
            if let Some(t) = h.today.of(day) {
                u.model(&k.model, &k.upstream, &t);
            }
        }
        u
    }
}
