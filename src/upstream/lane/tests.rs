//! The local lane's scheduling on paused time.

use super::*;
use parking_lot::Mutex;
use tokio::time::Instant;

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
