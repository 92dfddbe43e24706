//! Lanes: how calls to one upstream are let through.
//!
//! A *local lane* (a llama-swap server, or any upstream with `lane =
//! "local"`) serves `max_models` models at a time (default one): calls for
//! a model it serves run at once, up to `max_concurrency` per model (when
//! it is not set, as many as the server takes: one until its kind is
//! known, see [`crate::upstream::server_kind`]); calls
//! for any other model wait in its queue, because sending them would make
//! the server swap models back and forth. When the lane has room for a
//! model, the next one is chosen warm first (the model the server reports
//! loaded, else the one the lane served last, if any waiting call wants
//! it), otherwise the model of the oldest waiting call. A call that has
//! waited `max_wait_swap` stops new calls for the served models from
//! joining, so the lane drains and serves it next: nobody starves.
//!
//! With `[state]`, a local lane is shared by every replica on the same
//! shared state ([`shared`], through the [`Lease`] of the upstream that
//! the state backend hands out, see [`crate::store::lanes`]): a replica
//! starts serving a model only while it holds the lease for it, calls
//! for a model another replica serves join it, and a call starving on
//! one replica drains the others. Without shared state (or while it is
//! down) each replica's lane works alone, as above.
//!
//! A *cloud lane* runs calls in parallel, up to an optional
//! `max_concurrency`. Either way a call holds its [`Permit`] until its
//! answer has been read; a call that is dropped while queued leaves the
//! queue at once, and the request deadline covers the wait.

mod local;
mod shared;
#[cfg(test)]
mod shared_tests;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use metrics::histogram;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, timeout_at};

use super::llama_swap::WarmProbe;
use crate::config::LaneLimits;
use crate::sink::Metrics;
use crate::store::lanes::Lease;
use crate::telemetry::LANE_WAIT;
use local::SharedLane;
pub use local::{LocalLane, LocalPermit};

/// How calls to one upstream are let through.
pub enum Gate {
    Open,
    Cloud(Arc<str>, Arc<Semaphore>, Metrics),
    Local(Arc<LocalLane>),
}

/// The right to call the upstream; dropping it frees the place.
pub enum Permit {
    Open,
    Cloud(#[allow(dead_code)] OwnedSemaphorePermit),
    Local(LocalPermit),
}

/// A call let through, and what its wait was.
pub struct Admitted {
    pub permit: Permit,
    /// Time spent waiting for the lane.
    pub queued: Duration,
    /// The lane changed the model it serves for this call: from this one.
    pub swapped_from: Option<Arc<str>>,
}

/// The deadline passed while the call waited for the lane.
#[derive(Debug, Clone, Copy, thiserror::Error)]
#[error("timed out waiting for the local lane")]
pub struct LaneTimeout;

impl Gate {
    pub fn new(
        local: bool,
        upstream: &Arc<str>,
        limits: LaneLimits,
        probe: Option<Arc<WarmProbe>>,
        metrics: Metrics,
    ) -> Gate {
        match (local, limits.max_concurrency) {
            (true, per_model) => Gate::Local(Arc::new(LocalLane::new(
                upstream.clone(),
                metrics,
                per_model.map(|n| n.max(1)),
                (limits.max_models.max(1), limits.max_wait_swap),
                probe,
            ))),
            (false, Some(n)) => {
                let places = Arc::new(Semaphore::new(n.max(1)));
                Gate::Cloud(upstream.clone(), places, metrics)
            }
            (false, None) => Gate::Open,
        }
    }

    /// Shares a local lane with the other replicas through `lease`
    /// (once; a cloud lane is per replica).
    pub fn share(&self, lease: Arc<dyn Lease>) {
        if let Gate::Local(lane) = self {
            let _ = lane.shared.set(SharedLane::new(lease));
        }
    }

    /// Whether this is a local lane without `max_concurrency`, whose
    /// calls per model follow what its server takes.
    pub fn follows_server(&self) -> bool {
        matches!(self, Gate::Local(lane) if lane.follows_server())
    }

    /// Lets `per_model` calls per model through a local lane that follows
    /// its server; `true` when it did.
    pub fn follow(&self, per_model: usize) -> bool {
        match self {
            Gate::Local(lane) => lane.follow(per_model),
            _ => false,
        }
    }

    /// Whether calls pass through a local lane.
    pub fn is_local(&self) -> bool {
        matches!(self, Gate::Local(_))
    }

    /// Waits (until `by`) for the right to call `model` (the name the
    /// server knows).
    pub async fn admit(&self, model: &str, by: Instant) -> Result<Admitted, LaneTimeout> {
        match self {
            Gate::Open => Ok(Admitted {
                permit: Permit::Open,
                queued: Duration::ZERO,
                swapped_from: None,
            }),
            Gate::Cloud(upstream, s, metrics) => {
                let started = Instant::now();
                let p = timeout_at(by, s.clone().acquire_owned())
                    .await
                    .map_err(|_| LaneTimeout)?
                    .map_err(|_| LaneTimeout)?;
                let queued = started.elapsed();
                metrics.scope(|| {
                    histogram!(LANE_WAIT, "upstream" => upstream.clone())
                        .record(queued.as_secs_f64());
                });
                Ok(Admitted {
                    permit: Permit::Cloud(p),
                    queued,
                    swapped_from: None,
                })
            }
            Gate::Local(lane) => lane.admit(&Arc::from(model), by).await,
        }
    }
}
