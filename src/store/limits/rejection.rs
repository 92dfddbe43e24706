//! A request that a limit turned away, counted and written down in one
//! place (`conclave_governor_rejections_total{key, scope}` and the
//! `governor_rejection` event): a key's limits (the governor) and an
//! upstream's `rpm` (`upstream`) alike.

use metrics::counter;
use serde_json::{Map, Value};

use crate::context::RequestCtx;
use crate::telemetry::GOVERNOR_REJECTIONS;

/// Which limit turned a request away (a bounded label).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    Rpm,
    Tpm,
    DailyTokens,
    DailyCost,
    Upstream,
}

impl Scope {
    pub fn label(self) -> &'static str {
        match self {
            Scope::Rpm => "rpm",
            Scope::Tpm => "tpm",
            Scope::DailyTokens => "daily_tokens",
            Scope::DailyCost => "daily_cost",
            Scope::Upstream => "upstream",
        }
    }
}

/// Counts a rejection and writes its `governor_rejection` event.
pub fn record_rejection(
    ctx: &RequestCtx,
    scope: Scope,
    limit: f64,
    asked: f64,
    extra: &[(&str, Value)],
) {
    ctx.metrics.scope(|| {
        counter!(GOVERNOR_REJECTIONS, "key" => ctx.key.clone(), "scope" => scope.label())
            .increment(1);
    });
    if !ctx.events_enabled() {
        return;
    }
    let mut f = Map::new();
    f.insert("key".into(), Value::from(&*ctx.key));
    f.insert("scope".into(), Value::from(scope.label()));
    f.insert("limit".into(), Value::from(limit));
    f.insert("asked".into(), Value::from(asked));
    for (k, v) in extra {
        f.insert((*k).into(), v.clone());
    }
    ctx.emit("governor_rejection", f);
}
