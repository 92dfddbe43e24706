//! The local lane of one process: which models it serves, its queue,
//! and the warm-first choice of the next model (see the parent module).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use parking_lot::Mutex;
use tokio::sync::{Notify, oneshot};
use tokio::time::{Instant, timeout_at};

use super::{Admitted, LaneTimeout, Permit};
use crate::sink::Metrics;
use crate::store::lanes::Lease;
use crate::telemetry::{LANE_QUEUE_DEPTH, LANE_SWAPS, LANE_WAIT};
use crate::upstream::llama_swap::WarmProbe;

pub struct LocalLane {
    upstream: Arc<str>,
    metrics: Metrics,
    /// Calls per model at once: `max_concurrency`, or what the server
    /// takes when that is not set.
    per_model: AtomicUsize,
    /// `max_concurrency` was set: the server's kind changes nothing.
    explicit: bool,
    pub(super) max_models: usize,
    max_wait_swap: Duration,
    probe: Option<Arc<WarmProbe>>,
    pub(super) state: Mutex<State>,
    /// The lease shared with other replicas, with `[state]`.
    pub(super) shared: OnceLock<SharedLane>,
}

/// The lease a local lane is shared through (`[state]`), and the bell
/// that wakes its keeper (see [`super::shared`]).
pub struct SharedLane {
    pub(super) lease: Arc<dyn Lease>,
    pub(super) wake: Notify,
}

impl SharedLane {
    pub fn new(lease: Arc<dyn Lease>) -> SharedLane {
        SharedLane {
            lease,
            wake: Notify::new(),
        }
    }
}

impl LocalLane {
    pub(super) fn new(
        upstream: Arc<str>,
        metrics: Metrics,
        per_model: Option<usize>,
        (max_models, max_wait_swap): (usize, Duration),
        probe: Option<Arc<WarmProbe>>,
    ) -> LocalLane {
        LocalLane {
            upstream,
            metrics,
            per_model: AtomicUsize::new(per_model.unwrap_or(1)),
            explicit: per_model.is_some(),
            max_models,
            max_wait_swap,
            probe,
            state: Mutex::new(State::default()),
            shared: OnceLock::new(),
        }
    }
}

impl LocalLane {
    /// Whether calls per model follow what the server takes.
    pub(super) fn follows_server(&self) -> bool {
        !self.explicit
    }

    /// Calls per model at once from now on (when not configured); calls
    /// already queued for a served model join at once.
    pub(super) fn follow(self: &Arc<Self>, per_model: usize) -> bool {
        if self.explicit || self.per_model.swap(per_model.max(1), Ordering::AcqRel) == per_model {
            return false;
        }
        let mut grants = Grants::new();
        self.join_waiters(&mut self.state.lock(), &mut grants);
        send(grants);
        true
    }

    fn per_model(&self) -> usize {
        self.per_model.load(Ordering::Acquire)
    }
}

#[derive(Default)]
pub(super) struct State {
    /// The models being served, each with its calls in flight.
    pub(super) serving: Vec<(Arc<str>, usize)>,
    /// The model the lane started serving last.
    last: Option<Arc<str>>,
    pub(super) queue: VecDeque<Waiter>,
    next_id: u64,
    /// Shared lane: the lease holds (model, token) of the served models.
    pub(super) tokens: Vec<(Arc<str>, u64)>,
    /// Shared lane: join no more calls (another replica starves, or a
    /// served model's hold was lost).
    pub(super) drain: bool,
    /// Shared lane: its keeper task runs.
    pub(super) keeper: bool,
}

pub(super) struct Waiter {
    id: u64,
    pub(super) model: Arc<str>,
    since: Instant,
    pub(super) tx: oneshot::Sender<LocalPermit>,
}

/// A place in a local lane; dropping it lets the next call in.
pub struct LocalPermit {
    lane: Arc<LocalLane>,
    model: Arc<str>,
    swapped_from: Option<Arc<str>>,
}

impl Drop for LocalPermit {
    fn drop(&mut self) {
        self.lane.release(&self.model);
    }
}

/// Removes a waiter that goes away (cancelled or late) from the queue;
/// the calls it held back may go now.
struct Queued<'a> {
    lane: &'a Arc<LocalLane>,
    id: u64,
}

impl Drop for Queued<'_> {
    fn drop(&mut self) {
        let grants = {
            let mut st = self.lane.state.lock();
            let before = st.queue.len();
            st.queue.retain(|w| w.id != self.id);
            if st.queue.len() == before {
                return;
            }
            self.lane.dispatch(&mut st)
        };
        send(grants);
    }
}

pub(super) type Grants = Vec<(oneshot::Sender<LocalPermit>, LocalPermit)>;

/// Sent outside the lock: a permit whose waiter is gone comes back and is
/// dropped, which releases it again.
pub(super) fn send(grants: Grants) {
    for (tx, p) in grants {
        let _ = tx.send(p);
    }
}

impl State {
    fn running(&mut self, model: &str) -> Option<&mut usize> {
        self.serving
            .iter_mut()
            .find(|(m, _)| &**m == model)
            .map(|(_, n)| n)
    }
}

impl LocalLane {
    pub(super) async fn admit(
        self: &Arc<Self>,
        model: &Arc<str>,
        by: Instant,
    ) -> Result<Admitted, LaneTimeout> {
        let started = Instant::now();
        let rx = {
            let mut st = self.state.lock();
            if let Some(p) = self.join_at_once(&mut st, model, started) {
                return Ok(self.admitted(p, started));
            }
            let (tx, rx) = oneshot::channel();
            let id = st.next_id;
            st.next_id += 1;
            st.queue.push_back(Waiter {
                id,
                model: model.clone(),
                since: started,
                tx,
            });
            self.depth(&st);
            // Shared: the keeper asks the lease for it.
            self.wake_keeper(&mut st);
            (rx, id)
        };
        let (rx, id) = rx;
        let _queued = Queued { lane: self, id };
        match timeout_at(by, rx).await {
            Ok(Ok(p)) => Ok(self.admitted(p, started)),
            _ => Err(LaneTimeout),
        }
    }

    fn admitted(&self, p: LocalPermit, started: Instant) -> Admitted {
        let queued = started.elapsed();
        self.metrics.scope(|| {
            histogram!(LANE_WAIT, "upstream" => self.upstream.clone()).record(queued.as_secs_f64());
        });
        Admitted {
            swapped_from: p.swapped_from.clone(),
            permit: Permit::Local(p),
            queued,
        }
    }

    /// A permit without queueing, when the lane may take the call now.
    fn join_at_once(
        self: &Arc<Self>,
        st: &mut State,
        model: &Arc<str>,
        now: Instant,
    ) -> Option<LocalPermit> {
        let starving = self.starving(st, now) || st.drain;
        let queued_same = st.queue.iter().any(|w| w.model == *model);
        let per_model = self.per_model();
        match st.running(model) {
            Some(n) if *n < per_model && !queued_same && !starving => {
                *n += 1;
                return Some(self.permit(model, None));
            }
            Some(_) => return None,
            None => {}
        }
        if st.serving.len() < self.max_models && st.queue.is_empty() && !self.is_shared() {
            return Some(self.serve(st, model));
        }
        None
    }

    /// Starts serving `model` with one call.
    pub(super) fn serve(self: &Arc<Self>, st: &mut State, model: &Arc<str>) -> LocalPermit {
        let from = st.last.replace(model.clone()).filter(|l| l != model);
        if from.is_some() {
            self.metrics
                .scope(|| counter!(LANE_SWAPS, "upstream" => self.upstream.clone()).increment(1));
        }
        st.serving.push((model.clone(), 1));
        self.permit(model, from)
    }

    fn permit(self: &Arc<Self>, model: &Arc<str>, swapped_from: Option<Arc<str>>) -> LocalPermit {
        LocalPermit {
            lane: self.clone(),
            model: model.clone(),
            swapped_from,
        }
    }

    /// The oldest waiting call has waited too long for a model the lane
    /// does not serve.
    pub(super) fn starving(&self, st: &State, now: Instant) -> bool {
        st.queue.front().is_some_and(|w| {
            now.saturating_duration_since(w.since) >= self.max_wait_swap
                && !st.serving.iter().any(|(m, _)| *m == w.model)
        })
    }

    fn release(self: &Arc<Self>, model: &str) {
        let grants = {
            let mut st = self.state.lock();
            if let Some(n) = st.running(model) {
                *n -= 1;
            }
            st.serving.retain(|(_, n)| *n > 0);
            if !st.serving.iter().any(|(m, _)| &**m == model) {
                self.let_go(&mut st, model);
            }
            self.dispatch(&mut st)
        };
        send(grants);
    }

    /// Lets in the waiting calls the lane can take now.
    pub(super) fn dispatch(self: &Arc<Self>, st: &mut State) -> Grants {
        let now = Instant::now();
        let mut out = Vec::new();
        if !self.starving(st, now) && !st.drain {
            self.join_waiters(st, &mut out);
        }
        if self.is_shared() {
            // New models start only with the lease: the keeper asks.
            if !st.queue.is_empty() && st.serving.len() < self.max_models {
                self.wake_keeper(st);
            }
            self.depth(st);
            return out;
        }
        while st.serving.len() < self.max_models && !st.queue.is_empty() {
            let Some(next) = self.next_model(st, now) else {
                break;
            };
            let first = st.queue.iter().position(|w| w.model == next);
            if let Some(w) = first.and_then(|i| st.queue.remove(i)) {
                let p = self.serve(st, &next);
                out.push((w.tx, p));
            }
            self.join_waiters(st, &mut out);
        }
        self.depth(st);
        out
    }

    /// Queued calls for served models, in order, up to each model's limit.
    pub(super) fn join_waiters(self: &Arc<Self>, st: &mut State, out: &mut Grants) {
        let mut i = 0;
        while i < st.queue.len() {
            let model = st.queue[i].model.clone();
            let per_model = self.per_model();
            match st.running(&model) {
                Some(n) if *n < per_model => {
                    *n += 1;
                    if let Some(w) = st.queue.remove(i) {
                        out.push((w.tx, self.permit(&model, None)));
                    }
                }
                _ => i += 1,
            }
        }
    }

    /// The model to serve next: the oldest waiter's when it starves, else
    /// a loaded one some call wants, else the oldest waiter's.
    pub(super) fn next_model(&self, st: &State, now: Instant) -> Option<Arc<str>> {
        let oldest = st.queue.front()?.model.clone();
        if self.starving(st, now) {
            return Some(oldest);
        }
        let wanted = |m: &str| st.queue.iter().any(|w| &*w.model == m);
        let loaded = self.probe.as_ref().and_then(|p| p.cached());
        let warm = match loaded {
            Some(l) => l.iter().find(|m| wanted(m)).map(|m| Arc::from(m.as_str())),
            None => st.last.clone().filter(|m| wanted(m)),
        };
        Some(warm.unwrap_or(oldest))
    }

    pub(super) fn depth(&self, st: &State) {
        let depth = st.queue.len() as f64;
        self.metrics
            .scope(|| gauge!(LANE_QUEUE_DEPTH, "upstream" => self.upstream.clone()).set(depth));
    }
}
