//! A local lane shared by several replicas through a
//! [`Lease`](crate::store::lanes::Lease) (held in the lane's
//! [`SharedLane`](super::local::SharedLane)): the lane starts serving a
//! model only once it holds the lease for it, and lets the hold go when
//! its last call for the model ends. A keeper task runs
//! while the lane holds the lease or has calls waiting: every
//! [`RENEW`] it renews the holds (learning whether another replica
//! starves, so this one drains), and every [`POLL`] while calls wait it
//! asks for the model its queue wants next (warm first, as the lane
//! chooses; a model another replica serves joins).
//! When the lease cannot be asked (the shared state down or slow), the
//! lane serves as a lane of its own would: coordination never blocks
//! inference. These methods extend [`LocalLane`], whose own file does
//! not import this one.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::local::{Grants, LocalLane, State, send};

/// How often a keeper with waiting calls asks for the lease again.
pub const POLL: Duration = Duration::from_millis(25);
/// How often a keeper renews its holds (well within the shortest
/// `lease_ttl`, 1 s, and the 1 s a starving mark lasts).
pub const RENEW: Duration = Duration::from_millis(250);

impl LocalLane {
    pub(super) fn is_shared(&self) -> bool {
        self.shared.get().is_some()
    }

    /// Has the keeper ask for the lease now (starting it if it sleeps).
    pub(super) fn wake_keeper(self: &Arc<Self>, st: &mut State) {
        let Some(sh) = self.shared.get() else {
            return;
        };
        if st.keeper {
            sh.wake.notify_one();
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        st.keeper = true;
        rt.spawn(self.clone().keep());
    }

    /// The lane stopped serving `model`: its hold ends.
    pub(super) fn let_go(&self, st: &mut State, model: &str) {
        if st.serving.is_empty() {
            st.drain = false;
        }
        let Some(i) = st.tokens.iter().position(|(m, _)| &**m == model) else {
            return;
        };
        let (model, token) = st.tokens.swap_remove(i);
        self.release_hold(model, token);
    }

    fn release_hold(&self, model: Arc<str>, token: u64) {
        let (Some(sh), Ok(rt)) = (self.shared.get(), tokio::runtime::Handle::try_current()) else {
            return;
        };
        let lease = sh.lease.clone();
        // A failed release ends by itself at the hold's expiry.
        rt.spawn(async move { lease.release(&model, token).await });
    }

    async fn keep(self: Arc<Self>) {
        let Some(sh) = self.shared.get() else {
            return;
        };
        let mut renewed: Option<Instant> = None;
        loop {
            let holds = self.state.lock().tokens.clone();
            let due = renewed.is_none_or(|at| at.elapsed() >= RENEW);
            if !holds.is_empty() && due {
                renewed = Some(Instant::now());
            }
            if !holds.is_empty()
                && due
                && let Ok(r) = sh.lease.renew(&holds).await
            {
                let grants = {
                    let mut st = self.state.lock();
                    st.tokens.retain(|(m, _)| !r.lost.contains(m));
                    let unheld = st
                        .serving
                        .iter()
                        .any(|(m, _)| !st.tokens.iter().any(|(t, _)| t == m));
                    st.drain = r.drain || unheld;
                    self.dispatch(&mut st)
                };
                send(grants);
            }
            let want = self.candidates(&self.state.lock(), Instant::now());
            if let Some((candidates, starving)) = want {
                let got = sh
                    .lease
                    .acquire(&candidates, self.max_models, starving)
                    .await;
                let grants = {
                    let mut st = self.state.lock();
                    match got {
                        Ok(Some((model, token))) => self.start(&mut st, model, Some(token)),
                        Ok(None) => Vec::new(),
                        // The lease cannot be asked: serve as a lane of
                        // its own would (the shared state counts it).
                        Err(_) => match candidates.into_iter().next() {
                            Some(model) => self.start(&mut st, model, None),
                            None => Vec::new(),
                        },
                    }
                };
                send(grants);
            }
            let pause = {
                let mut st = self.state.lock();
                if st.queue.is_empty() && st.tokens.is_empty() {
                    st.keeper = false;
                    return;
                }
                if st.queue.is_empty() { RENEW } else { POLL }
            };
            tokio::select! {
                () = tokio::time::sleep(pause) => {}
                () = sh.wake.notified() => {}
            }
        }
    }

    /// The models worth asking the lease for, best first, and whether the
    /// first is a starving call's; `None` when the lane has no room or no
    /// call waits for a model it does not serve.
    fn candidates(&self, st: &State, now: Instant) -> Option<(Vec<Arc<str>>, bool)> {
        if st.serving.len() >= self.max_models {
            return None;
        }
        let served = |m: &Arc<str>| st.serving.iter().any(|(s, _)| s == m);
        if self.starving(st, now) {
            let oldest = st.queue.front()?.model.clone();
            return Some((vec![oldest], true));
        }
        let mut out: Vec<Arc<str>> = Vec::new();
        let first = self.next_model(st, now).filter(|m| !served(m));
        for m in first.iter().chain(st.queue.iter().map(|w| &w.model)) {
            if !served(m) && !out.contains(m) {
                out.push(m.clone());
            }
        }
        (!out.is_empty()).then_some((out, false))
    }

    /// Serves `model` (held with `token`, if any) for its first waiting
    /// call, and lets in the calls that may join.
    fn start(self: &Arc<Self>, st: &mut State, model: Arc<str>, token: Option<u64>) -> Grants {
        let mut out = Vec::new();
        let served = st.serving.iter().any(|(m, _)| *m == model);
        let first = st.queue.iter().position(|w| w.model == model);
        match first.filter(|_| !served).and_then(|i| st.queue.remove(i)) {
            Some(w) => {
                let p = self.serve(st, &model);
                if let Some(t) = token {
                    st.tokens.push((model, t));
                }
                out.push((w.tx, p));
                self.join_waiters(st, &mut out);
            }
            // Its calls left while the lease was asked: the hold goes back.
            None => {
                if let Some(t) = token {
                    self.release_hold(model, t);
                }
            }
        }
        self.depth(st);
        out
    }
}
