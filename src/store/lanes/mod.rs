//! The lease of a local lane shared by several replicas (`[state]`): which
//! models the upstream is being used for, and which replicas hold it. The
//! [`Backend`](crate::store::Backend) hands each shared upstream a
//! [`Lease`] ([`redis::RedisLease`]); the lane that uses it lives in
//! `upstream::lane`.
//!
//! Each replica holds the lease for a model while it has calls for that
//! model in flight. A hold has an expiry (`[state] lease_ttl`, renewed
//! while the calls run, so a dead or paused replica's hold ends by itself)
//! and a fencing token (a counter given at acquisition): a renewal or a
//! release succeeds only with the token of the current hold, so a replica
//! whose hold expired cannot extend or end another's. A replica may start
//! a model when the lease has room for it (`max_models`) or already serves
//! it (calls for the served model join, across replicas). A replica whose
//! oldest call has waited `max_wait_swap` records that it starves: nobody
//! joins or starts another model until it has started its own, so the
//! lease drains to it.
//!
//! [`redis`] keeps it in the shared Redis; `memory` (tests only) keeps it
//! in memory with the same rules, for the lane's unit tests.

#[cfg(test)]
pub mod memory;
pub mod redis;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::StoreError;

/// How long a starving entry lasts unless its replica asks again: it
/// polls far more often, so it ends soon after the call leaves.
pub const STARVING_TTL: Duration = Duration::from_secs(1);

/// What a renewal found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Renewed {
    /// Holds that were no longer this replica's (expired, or taken over).
    pub lost: Vec<Arc<str>>,
    /// Another replica starves: start no more calls, let the lease drain.
    pub drain: bool,
}

/// One replica's handle on the shared lease of one upstream.
#[async_trait]
pub trait Lease: Send + Sync {
    /// Holds the lease for one of `candidates` (in the replica's order of
    /// preference; a model the lease serves already is taken first), if
    /// it may: `Some((model, token))`. `starving`: the first candidate's
    /// oldest call has waited past `max_wait_swap`; a refusal records it.
    async fn acquire(
        &self,
        candidates: &[Arc<str>],
        max_models: usize,
        starving: bool,
    ) -> Result<Option<(Arc<str>, u64)>, StoreError>;

    /// Extends this replica's `holds` (model, token).
    async fn renew(&self, holds: &[(Arc<str>, u64)]) -> Result<Renewed, StoreError>;

    /// Ends this replica's hold of `model`, if `token` is still current.
    async fn release(&self, model: &str, token: u64) -> Result<bool, StoreError>;
}
