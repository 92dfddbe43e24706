//! Lanes: how calls to one upstream are let through.
//!
//! A *local lane* (a llama-swap server, or any upstream with `lane =
//! "local"`) serves `max_models` models at a time (default one): calls for
//! a model it serves run at once, up to `max_concurrency` per model; calls
//! for any other model wait in its queue, because sending them would make
//! the server swap models back and forth. When the lane has room for a
//! model, the next one is chosen warm first (the model the server reports
//! loaded, else the one the lane served last, if any waiting call wants
//! it), otherwise the model of the oldest waiting call. A call that has
//! waited `max_wait_swap` stops new calls for the served models from
//! joining, so the lane drains and serves it next: nobody starves.
//!
//! A *cloud lane* runs calls in parallel, up to an optional
//! `max_concurrency`. Either way a call holds its [`Permit`] until its
//! answer has been read; a call that is dropped while queued leaves the
//! queue at once, and the request deadline covers the wait.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use metrics::{counter, gauge, histogram};
use parking_lot::Mutex;
use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::time::{Instant, timeout_at};

use super::llama_swap::WarmProbe;
use crate::config::LaneLimits;
use crate::sink::Metrics;
use crate::telemetry::{LANE_QUEUE_DEPTH, LANE_SWAPS, LANE_WAIT};

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
            (true, per_model) => Gate::Local(Arc::new(LocalLane {
                upstream: upstream.clone(),
                metrics,
                per_model: per_model.unwrap_or(usize::MAX).max(1),
                max_models: limits.max_models.max(1),
                max_wait_swap: limits.max_wait_swap,
                probe,
                state: Mutex::new(State::default()),
            })),
            (false, Some(n)) => {
                let places = Arc::new(Semaphore::new(n.max(1)));
                Gate::Cloud(upstream.clone(), places, metrics)
            }
            (false, None) => Gate::Open,
        }
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

pub struct LocalLane {
    upstream: Arc<str>,
    metrics: Metrics,
    per_model: usize,
    max_models: usize,
    max_wait_swap: Duration,
    probe: Option<Arc<WarmProbe>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// The models being served, each with its calls in flight.
    serving: Vec<(Arc<str>, usize)>,
    /// The model the lane started serving last.
    last: Option<Arc<str>>,
    queue: VecDeque<Waiter>,
    next_id: u64,
}

struct Waiter {
    id: u64,
    model: Arc<str>,
    since: Instant,
    tx: oneshot::Sender<LocalPermit>,
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

type Grants = Vec<(oneshot::Sender<LocalPermit>, LocalPermit)>;

/// Sent outside the lock: a permit whose waiter is gone comes back and is
/// dropped, which releases it again.
fn send(grants: Grants) {
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
    async fn admit(
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
        let starving = self.starving(st, now);
        let queued_same = st.queue.iter().any(|w| w.model == *model);
        let per_model = self.per_model;
        match st.running(model) {
            Some(n) if *n < per_model && !queued_same && !starving => {
                *n += 1;
                return Some(self.permit(model, None));
            }
            Some(_) => return None,
            None => {}
        }
        if st.serving.len() < self.max_models && st.queue.is_empty() {
            return Some(self.serve(st, model));
        }
        None
    }

    /// Starts serving `model` with one call.
    fn serve(self: &Arc<Self>, st: &mut State, model: &Arc<str>) -> LocalPermit {
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
    fn starving(&self, st: &State, now: Instant) -> bool {
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
            self.dispatch(&mut st)
        };
        send(grants);
    }

    /// Lets in the waiting calls the lane can take now.
    fn dispatch(self: &Arc<Self>, st: &mut State) -> Grants {
        let now = Instant::now();
        let mut out = Vec::new();
        if !self.starving(st, now) {
            self.join_waiters(st, &mut out);
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
    fn join_waiters(self: &Arc<Self>, st: &mut State, out: &mut Grants) {
        let mut i = 0;
        while i < st.queue.len() {
            let model = st.queue[i].model.clone();
            let per_model = self.per_model;
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
    fn next_model(&self, st: &State, now: Instant) -> Option<Arc<str>> {
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

    fn depth(&self, st: &State) {
        let depth = st.queue.len() as f64;
        self.metrics
            .scope(|| gauge!(LANE_QUEUE_DEPTH, "upstream" => self.upstream.clone()).set(depth));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Log = Arc<Mutex<Vec<(String, u128)>>>;

    fn lane(per_model: usize, max_wait_swap: Duration) -> Arc<Gate> {
        let limits = LaneLimits {
            max_concurrency: Some(per_model),
            max_models: 1,
            max_wait_swap,
        };
        let metrics = Metrics::noop();
        Arc::new(Gate::new(true, &Arc::from("local"), limits, None, metrics))
    }

    /// Starts a call for `model` at `at` ms that holds the lane `hold` ms
    /// once admitted; logs (model, ms when admitted).
    fn call(gate: &Arc<Gate>, log: &Log, t0: Instant, model: &str, at: u64, hold: u64) {
        let (gate, log, model) = (gate.clone(), log.clone(), model.to_owned());
        tokio::spawn(async move {
            tokio::time::sleep_until(t0 + Duration::from_millis(at)).await;
            let by = t0 + Duration::from_secs(600);
            if let Ok(a) = gate.admit(&model, by).await {
                log.lock().push((model, t0.elapsed().as_millis()));
                tokio::time::sleep(Duration::from_millis(hold)).await;
                drop(a);
            }
        });
    }

    fn order(log: &Log) -> Vec<String> {
        log.lock().iter().map(|(m, _)| m.clone()).collect()
    }

    #[tokio::test(start_paused = true)]
    async fn interleaved_models_are_batched_by_model() {
        let (gate, log, t0) = (
            lane(4, Duration::from_secs(30)),
            Log::default(),
            Instant::now(),
        );
        for (i, m) in ["A", "B", "A", "B", "A"].iter().enumerate() {
            call(&gate, &log, t0, m, 30 * i as u64, 100);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        assert_eq!(order(&log), ["A", "A", "A", "B", "B"]);
        // Both B calls start together when the last A ends (120 + 100 ms).
        let times: Vec<u128> = log.lock().iter().map(|(_, t)| *t).collect();
        assert_eq!(times, [0, 60, 120, 220, 220]);
    }

    #[tokio::test(start_paused = true)]
    async fn the_served_model_runs_up_to_its_concurrency() {
        let (gate, log, t0) = (
            lane(2, Duration::from_secs(30)),
            Log::default(),
            Instant::now(),
        );
        for _ in 0..3 {
            call(&gate, &log, t0, "A", 0, 100);
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
        let times: Vec<u128> = log.lock().iter().map(|(_, t)| *t).collect();
        assert_eq!(times, [0, 0, 100]);
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_waiting_too_long_stops_others_from_joining() {
        let (gate, log, t0) = (
            lane(4, Duration::from_secs(1)),
            Log::default(),
            Instant::now(),
        );
        // A stream of A calls that would keep A served forever.
        for i in 0..40 {
            call(&gate, &log, t0, "A", 100 * i, 300);
        }
        call(&gate, &log, t0, "B", 50, 10);
        tokio::time::sleep(Duration::from_secs(10)).await;
        let b = log.lock().iter().find(|(m, _)| m == "B").map(|(_, t)| *t);
        // B waits 1 s, then the A calls already running (300 ms) drain.
        assert!(b.is_some_and(|t| (1050..=1400).contains(&t)), "{b:?}");
    }

    #[tokio::test(start_paused = true)]
    async fn the_deadline_covers_the_wait_and_a_late_call_leaves_the_queue() {
        let (gate, log, t0) = (
            lane(4, Duration::from_secs(30)),
            Log::default(),
            Instant::now(),
        );
        call(&gate, &log, t0, "A", 0, 1000);
        tokio::time::sleep(Duration::from_millis(10)).await;
        let late = gate.admit("B", t0 + Duration::from_millis(200)).await;
        assert!(late.is_err());
        assert_eq!(t0.elapsed(), Duration::from_millis(200));
        // A cancelled queued call leaves too: C is served next, alone.
        let queued = tokio::spawn({
            let gate = gate.clone();
            async move { gate.admit("B", t0 + Duration::from_secs(60)).await.is_ok() }
        });
        tokio::time::sleep(Duration::from_millis(10)).await;
        queued.abort();
        call(&gate, &log, t0, "C", 300, 10);
        tokio::time::sleep(Duration::from_secs(2)).await;
        assert_eq!(order(&log), ["A", "C"]);
        let Gate::Local(l) = &*gate else {
            unreachable!()
        };
        assert!(l.state.lock().queue.is_empty());
    }
}
