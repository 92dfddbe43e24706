//! [`Slot`]: one answer a server gave, kept for [`KEEP`] (a failure's
//! for [`RETRY`]), and the one fetch at a time that refreshes it.

use std::sync::Arc;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::{KEEP, RETRY};

/// One cached answer and the single fetch that refreshes it. Only the
/// first answer is waited for: once there is one, a stale one is given at
/// once while a fetch in the background refreshes it, so a model's calls
/// wait for its server's metadata once, not every [`KEEP`].
pub(super) struct Slot<T> {
    /// The answer and until when it holds.
    value: Arc<Mutex<Option<(Instant, T)>>>,
    /// Held by the one fetch in flight.
    fetching: Arc<tokio::sync::Mutex<()>>,
}

impl<T> Slot<T> {
    /// Until when the kept answer holds, if there is one (tests).
    #[cfg(test)]
    pub(super) fn until(&self) -> Option<Instant> {
        self.value.lock().as_ref().map(|v| v.0)
    }
}

impl<T> Default for Slot<T> {
    fn default() -> Self {
        Slot {
            value: Arc::new(Mutex::new(None)),
            fetching: Arc::new(tokio::sync::Mutex::new(())),
        }
    }
}

impl<T: Clone + Default + Send + 'static> Slot<T> {
    /// The kept answer (refreshed in the background once it is older than
    /// [`KEEP`], or [`RETRY`] after a failure), and until when it holds
    /// (passed, for one given while it is refreshed); the first time,
    /// `fetch`'s, waited for. A fetch runs as a task of its own: a caller
    /// that stops waiting does not stop it, so its answer is kept for the
    /// next.
    pub(super) async fn get<F>(&self, fetch: impl FnOnce() -> F) -> (T, Instant)
    where
        F: Future<Output = Result<T, ()>> + Send + 'static,
    {
        let kept = self.value.lock().clone();
        if let Some((until, v)) = kept {
            if until <= Instant::now()
                && let Ok(one) = self.fetching.clone().try_lock_owned()
            {
                let value = self.value.clone();
                let fetch = fetch();
                tokio::spawn(async move {
                    let _one = one;
                    store(&value, fetch.await);
                });
            }
            return (v, until);
        }
        let one = self.fetching.clone().lock_owned().await;
        if let Some(kept) = self.value.lock().clone() {
            return (kept.1, kept.0);
        }
        let value = self.value.clone();
        let fetch = fetch();
        let task = tokio::spawn(async move {
            let _one = one;
            store(&value, fetch.await)
        });
        task.await
            .unwrap_or_else(|_| (T::default(), Instant::now()))
    }
}

/// Keeps a fetch's answer for [`KEEP`]; a failure keeps what was there
/// (or the default) for [`RETRY`]. The answer and until when it holds.
fn store<T: Clone + Default>(
    value: &Mutex<Option<(Instant, T)>>,
    got: Result<T, ()>,
) -> (T, Instant) {
    let mut value = value.lock();
    let (keep, v) = match got {
        Ok(v) => (KEEP, v),
        Err(()) => (RETRY, value.take().map(|(_, v)| v).unwrap_or_default()),
    };
    let until = Instant::now() + keep;
    *value = Some((until, v.clone()));
    (v, until)
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicU32, Ordering};
    use std::time::Duration;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn one_fetch_at_a_time_kept_then_retried() {
        let slot: Arc<Slot<Option<u64>>> = Arc::new(Slot::default());
        let fetches = Arc::new(AtomicU32::new(0));
        let fetch = |answer: Result<Option<u64>, ()>| {
            let n = fetches.clone();
            async move {
                n.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(500)).await;
                answer
            }
        };
        // Three callers at once: one fetch.
        let (a, b, c) = tokio::join!(
            slot.get(|| fetch(Ok(Some(512)))),
            slot.get(|| fetch(Ok(Some(1)))),
            slot.get(|| fetch(Ok(Some(2)))),
        );
        assert_eq!((a.0, b.0, c.0), (Some(512), Some(512), Some(512)));
        // Each told until when it holds.
        assert_eq!(a.1, Instant::now() + KEEP);
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        // Kept until KEEP has passed.
        tokio::time::advance(KEEP - Duration::from_secs(1)).await;
        assert_eq!(slot.get(|| fetch(Ok(Some(9)))).await.0, Some(512));
        assert_eq!(fetches.load(Ordering::SeqCst), 1);
        // Then given at once while one fetch refreshes it (a failed one
        // keeps it).
        tokio::time::advance(Duration::from_secs(2)).await;
        assert_eq!(slot.get(|| fetch(Err(()))).await.0, Some(512));
        assert_eq!(slot.get(|| fetch(Ok(Some(3)))).await.0, Some(512));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
        assert_eq!(slot.get(|| fetch(Ok(Some(7)))).await.0, Some(512));
        // A failure is tried again after RETRY, not before.
        tokio::time::advance(RETRY - Duration::from_secs(2)).await;
        assert_eq!(slot.get(|| fetch(Ok(Some(7)))).await.0, Some(512));
        assert_eq!(fetches.load(Ordering::SeqCst), 2);
        tokio::time::advance(Duration::from_secs(3)).await;
        assert_eq!(slot.get(|| fetch(Ok(Some(7)))).await.0, Some(512));
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(slot.get(|| fetch(Ok(Some(8)))).await.0, Some(7));
        assert_eq!(fetches.load(Ordering::SeqCst), 3);
    }

    #[tokio::test(start_paused = true)]
    async fn a_caller_that_stops_waiting_leaves_the_answer_kept() {
        let slot: Arc<Slot<Option<u64>>> = Arc::new(Slot::default());
        let slow = async {
            tokio::time::sleep(Duration::from_secs(1)).await;
            Ok(Some(4096))
        };
        let waited = tokio::time::timeout(Duration::from_millis(100), slot.get(|| slow)).await;
        assert!(waited.is_err());
        tokio::time::advance(Duration::from_secs(2)).await;
        let again = slot.get(|| async { Ok(Some(1)) }).await;
        assert_eq!(again.0, Some(4096));
    }
}
