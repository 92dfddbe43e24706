#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use super::*;

const S: Duration = Duration::from_secs(1);

fn eject() -> Eject {
    Eject {
        after: 3,
        cooldown: 10 * S,
        max_cooldown: 35 * S,
        error_rate: None,
        window: 60 * S,
        min_requests: 20,
    }
}

fn health(e: Option<Eject>) -> Arc<Health> {
    Health::new("u".into(), e, Metrics::noop())
}

fn call(h: &Arc<Health>, o: Outcome) -> Option<Change> {
    h.admit().expect("admitted").end(o)
}

const FAIL: Outcome = Outcome::Failure("status_5xx");

/// Fails calls until it is ejected; returns the cooldown.
fn fail_until_ejected(h: &Arc<Health>) -> Duration {
    for _ in 0..10 {
        if let Some(Change::Ejected { cooldown, .. }) = call(h, FAIL) {
            return cooldown;
        }
    }
    panic!("never ejected");
}

#[tokio::test(start_paused = true)]
async fn ejected_after_n_in_a_row_and_refused_while_ejected() {
    let h = health(Some(eject()));
    assert_eq!(call(&h, FAIL), None);
    assert_eq!(call(&h, Outcome::Success), None, "a success resets");
    assert_eq!(call(&h, FAIL), None);
    assert_eq!(call(&h, Outcome::Neutral), None, "neutral counts nothing");
    assert_eq!(call(&h, FAIL), None);
    assert_eq!(
        call(&h, FAIL),
        Some(Change::Ejected {
            reason: "status_5xx",
            cooldown: 10 * S,
            failures: 3
        })
    );
    assert_eq!(h.admit().err(), Some(10 * S));
    assert_eq!(h.shown(), Shown::Ejected(10 * S));
    tokio::time::advance(4 * S).await;
    assert_eq!(h.admit().err(), Some(6 * S));
}

#[tokio::test(start_paused = true)]
async fn one_trial_only_and_its_success_recovers() {
    let h = health(Some(eject()));
    fail_until_ejected(&h);
    tokio::time::advance(10 * S).await;
    let trial = h.admit().expect("the trial");
    assert!(trial.is_trial());
    assert_eq!(h.shown(), Shown::Trial);
    assert_eq!(h.admit().err(), Some(TRIAL_WAIT), "one trial at a time");
    assert_eq!(
        trial.end(Outcome::Success),
        Some(Change::Recovered { after: 10 * S })
    );
    assert_eq!(h.shown(), Shown::Serving);
    assert!(!h.admit().unwrap().is_trial());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_trial_lets_the_next_call_try() {
    let h = health(Some(eject()));
    fail_until_ejected(&h);
    tokio::time::advance(10 * S).await;
    drop(h.admit().expect("the trial"));
    let next = h.admit().expect("the next call is the trial");
    assert!(next.is_trial());
}

#[tokio::test(start_paused = true)]
async fn a_failed_trial_doubles_the_cooldown_up_to_the_cap() {
    let h = health(Some(eject()));
    assert_eq!(fail_until_ejected(&h), 10 * S);
    let mut seen = Vec::new();
    let mut wait = 10 * S;
    for _ in 0..3 {
        tokio::time::advance(wait).await;
        let t = h.admit().expect("the trial");
        match t.end(FAIL) {
            Some(Change::Ejected { cooldown, .. }) => {
                seen.push(cooldown);
                wait = cooldown;
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(seen, [20 * S, 35 * S, 35 * S]);
}

#[tokio::test(start_paused = true)]
async fn ejections_in_a_row_decay_after_serving_max_cooldown() {
    let h = health(Some(eject()));
    fail_until_ejected(&h);
    tokio::time::advance(10 * S).await;
    call(&h, Outcome::Success);
    // Soon after: the second ejection in a row.
    assert_eq!(fail_until_ejected(&h), 20 * S);
    tokio::time::advance(20 * S).await;
    call(&h, Outcome::Success);
    // Served longer than max_cooldown: back to the first cooldown.
    tokio::time::advance(36 * S).await;
    assert_eq!(fail_until_ejected(&h), 10 * S);
}

#[tokio::test(start_paused = true)]
async fn an_error_rate_over_the_window_ejects() {
    let e = Eject {
        after: 100,
        error_rate: Some(0.5),
        min_requests: 10,
        ..eject()
    };
    let h = health(Some(e));
    // Alternating: never 100 in a row, but half of the calls fail.
    for i in 0..9 {
        let o = if i % 2 == 0 { FAIL } else { Outcome::Success };
        assert_eq!(call(&h, o), None, "call {i}: fewer than min_requests");
    }
    assert!(matches!(
        call(&h, FAIL),
        Some(Change::Ejected { failures: 6, .. })
    ));
    // Failures that have left the window count no more.
    let h = health(Some(e));
    for _ in 0..6 {
        call(&h, FAIL);
    }
    tokio::time::advance(61 * S).await;
    for _ in 0..4 {
        call(&h, Outcome::Success);
    }
    for _ in 0..5 {
        assert_eq!(call(&h, FAIL), None);
    }
}

#[tokio::test(start_paused = true)]
async fn never_ejected_with_eject_off_and_checks_count() {
    let h = health(None);
    for _ in 0..50 {
        assert_eq!(call(&h, FAIL), None);
    }
    assert_eq!(h.shown(), Shown::Serving);
    let h = health(Some(eject()));
    for _ in 0..2 {
        assert_eq!(h.checked(false), None);
    }
    assert!(matches!(h.checked(false), Some(Change::Ejected { .. })));
    assert_eq!(h.checked(true), None, "not before the cooldown ends");
    tokio::time::advance(10 * S).await;
    assert!(matches!(h.checked(true), Some(Change::Recovered { .. })));
    assert_eq!(h.shown(), Shown::Serving);
    // Turning ejection off serves an ejected upstream again.
    fail_until_ejected(&h);
    h.configure(None);
    assert!(h.admit().is_ok());
}

#[test]
fn outcomes_of_errors() {
    let status = |s| ModelError::Status {
        upstream: "u".into(),
        status: s,
        message: String::new(),
        code: None,
        retry_after: None,
    };
    assert!(matches!(Outcome::of(&status(500)), Outcome::Failure(_)));
    assert!(matches!(Outcome::of(&status(429)), Outcome::Neutral));
    assert_eq!(Outcome::of(&status(400)), Outcome::Success);
    let timeout = |phase| ModelError::Timeout {
        upstream: "u".into(),
        phase,
        after: S,
    };
    assert_eq!(Outcome::of(&timeout(TimeoutPhase::Lane)), Outcome::Neutral);
    assert!(matches!(
        Outcome::of(&timeout(TimeoutPhase::FirstToken)),
        Outcome::Failure("timeout")
    ));
    let throttled = ModelError::Throttled {
        upstream: "u".into(),
        limit: 1,
        retry_after: 1,
    };
    assert_eq!(Outcome::of(&throttled), Outcome::Neutral);
}
