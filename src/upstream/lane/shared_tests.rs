//! Local lanes of several replicas sharing one in-memory lease, on paused
//! time.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

use super::Gate;
use crate::config::LaneLimits;
use crate::sink::Metrics;
use crate::store::lanes::memory::MemoryLeases;

/// (replica, model, ms when admitted).
type Log = Arc<Mutex<Vec<(usize, String, u128)>>>;

fn replica(leases: &MemoryLeases, name: &str, max_wait_swap: Duration) -> Arc<Gate> {
    let limits = LaneLimits {
        max_concurrency: Some(4),
        max_models: 1,
        max_wait_swap,
    };
    let gate = Gate::new(true, &Arc::from("local"), limits, None, Metrics::noop());
    gate.share(leases.replica(name));
    Arc::new(gate)
}

/// A call for `model` on replica `r` at `at` ms, holding the lane `hold` ms.
fn call(
    gates: &[Arc<Gate>],
    log: &Log,
    t0: Instant,
    (r, model): (usize, &str),
    at: u64,
    hold: u64,
) {
    let (gate, log, model) = (gates[r].clone(), log.clone(), model.to_owned());
    tokio::spawn(async move {
        tokio::time::sleep_until(t0 + Duration::from_millis(at)).await;
        if let Ok(a) = gate.admit(&model, t0 + Duration::from_secs(600)).await {
            log.lock().push((r, model, t0.elapsed().as_millis()));
            tokio::time::sleep(Duration::from_millis(hold)).await;
            drop(a);
        }
    });
}

fn models(log: &Log) -> Vec<String> {
    log.lock().iter().map(|(_, m, _)| m.clone()).collect()
}

/// How many times the model changes in the order calls were admitted.
fn swaps(log: &Log) -> usize {
    models(log).windows(2).filter(|w| w[0] != w[1]).count()
}

#[tokio::test(start_paused = true)]
async fn interleaved_calls_on_two_replicas_are_batched_by_model() {
    let leases = MemoryLeases::new(Duration::from_secs(30));
    let wait = Duration::from_secs(30);
    let gates = [replica(&leases, "r1", wait), replica(&leases, "r2", wait)];
    let (log, t0) = (Log::default(), Instant::now());
    // A B A B A, 30 ms apart, on replicas 1 1 2 2 1: each replica sees
    // both models.
    let plan = [(0, "A"), (0, "B"), (1, "A"), (1, "B"), (0, "A")];
    for (i, c) in plan.into_iter().enumerate() {
        call(&gates, &log, t0, c, 30 * i as u64, 100);
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    assert_eq!(models(&log), ["A", "A", "A", "B", "B"], "{:?}", log.lock());
    assert_eq!(swaps(&log), 1);
    // Replica 2's A joined replica 1's hold at once; the B calls waited
    // for the last A (120 + 100 ms) and a poll.
    let at: Vec<u128> = log.lock().iter().map(|(_, _, t)| *t).collect();
    assert_eq!(at[..3], [0, 60, 120], "{at:?}");
    assert!(
        at[3..].iter().all(|t| (220..=220 + 30).contains(t)),
        "{at:?}"
    );
    assert!(leases.held().is_empty(), "every hold let go");
}

#[tokio::test(start_paused = true)]
async fn a_dead_replicas_hold_ends_at_its_expiry() {
    let leases = MemoryLeases::new(Duration::from_secs(1));
    let gates = [replica(&leases, "r1", Duration::from_secs(30))];
    let t0 = Instant::now();
    // A replica that took the lease for A and then died (never renews).
    let dead = leases.replica("dead");
    let got = dead.acquire(&[Arc::from("A")], 1, false).await.unwrap();
    let (_, token) = got.unwrap();
    let a = gates[0].admit("B", t0 + Duration::from_secs(60)).await;
    assert!(a.is_ok());
    let waited = t0.elapsed();
    assert!(
        waited >= Duration::from_secs(1) && waited <= Duration::from_millis(1030),
        "{waited:?}"
    );
    // Fencing: the dead replica's token no longer renews or releases.
    let renewed = dead.renew(&[(Arc::from("A"), token)]).await.unwrap();
    assert_eq!(renewed.lost, [Arc::<str>::from("A")]);
    assert!(!dead.release("A", token).await.unwrap());
    assert_eq!(leases.held(), ["B"]);
}

#[tokio::test(start_paused = true)]
async fn a_replica_starving_for_a_model_drains_the_others() {
    let leases = MemoryLeases::new(Duration::from_secs(30));
    let wait = Duration::from_secs(1);
    let gates = [replica(&leases, "r1", wait), replica(&leases, "r2", wait)];
    let (log, t0) = (Log::default(), Instant::now());
    // Replica 1 gets an A call every 100 ms (300 ms each) for 4 s: A
    // would be served forever. Replica 2 wants B at 50 ms.
    for i in 0..40 {
        call(&gates, &log, t0, (0, "A"), 100 * i, 300);
    }
    call(&gates, &log, t0, (1, "B"), 50, 10);
    tokio::time::sleep(Duration::from_secs(10)).await;
    let b = log
        .lock()
        .iter()
        .find(|(_, m, _)| m == "B")
        .map(|(_, _, t)| *t);
    // B starves at 1050 ms; replica 1 learns it at its next renewal
    // (within 250 ms), and the A calls it let in by then (300 ms) drain.
    assert!(b.is_some_and(|t| (1050..=1650).contains(&t)), "{b:?}");
}

#[tokio::test(start_paused = true)]
async fn without_the_lease_a_replica_serves_as_a_lane_of_its_own() {
    let leases = MemoryLeases::new(Duration::from_secs(30));
    leases.set_down(true);
    let wait = Duration::from_secs(30);
    let gates = [replica(&leases, "r1", wait), replica(&leases, "r2", wait)];
    let (log, t0) = (Log::default(), Instant::now());
    call(&gates, &log, t0, (0, "A"), 0, 100);
    call(&gates, &log, t0, (0, "B"), 10, 100);
    call(&gates, &log, t0, (1, "B"), 20, 100);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let got: Vec<(usize, String, u128)> = log.lock().clone();
    // Each replica on its own: replica 1 batches A then B; replica 2
    // serves B at once.
    assert_eq!(
        got,
        [
            (0, "A".to_owned(), 0),
            (1, "B".to_owned(), 20),
            (0, "B".to_owned(), 100)
        ]
    );
}
