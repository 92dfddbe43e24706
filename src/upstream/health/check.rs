//! Active checks (`health = { path, interval, timeout }`): a task per
//! upstream `GET`s its health path every interval (see
//! [`super::super::Transport::check`]) and tells the whole upstream's
//! [`super::Health`] how it went (a failed check is everyone's failure).
//! The task holds the upstream weakly: it ends once a reload dropped the
//! upstream, or the gateway stopped.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};

use crate::config::HealthCheck;
use crate::upstream::Upstream;

/// Starts `upstream`'s checks, if it has them (inside a tokio runtime).
pub fn start(upstream: &Arc<Upstream>, check: &HealthCheck) {
    if tokio::runtime::Handle::try_current().is_err()
        || upstream.checking.swap(true, Ordering::AcqRel)
    {
        return;
    }
    let weak: Weak<Upstream> = Arc::downgrade(upstream);
    let check = check.clone();
    tokio::spawn(async move {
        let mut every = tokio::time::interval(check.interval);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            every.tick().await;
            let Some(u) = weak.upgrade() else { return };
            let passed =
                match tokio::time::timeout(check.timeout, u.transport.check(&check.path)).await {
                    Ok(Ok(())) => true,
                    Ok(Err(why)) => {
                        tracing::debug!(upstream = %u.name, why, "health check failed");
                        false
                    }
                    Err(_) => {
                        tracing::debug!(upstream = %u.name, "health check timed out");
                        false
                    }
                };
            u.health.whole.checked(passed);
        }
    });
}
