#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use super::*;
use crate::error::{ModelError, TimeoutPhase};

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
    Health::new("u".into(), "m".into(), e, Metrics::noop())
}

/// A call of everyone's (a gateway without keys).
fn call(h: &Arc<Health>, o: Outcome) -> Option<Change> {
    h.admit(&Tenant::All).expect("admitted").end(o)
}

fn key(name: &str) -> Tenant {
    Tenant::Key(name.into())
}

/// A call of key `k`'s.
fn call_as(h: &Arc<Health>, k: &str, o: Outcome) -> Option<Change> {
    h.admit(&key(k)).expect("admitted").end(o)
}

const FAIL: Outcome = Outcome::Failure("status_5xx");

/// Keys `a`, `b`, `a` fail in turn (ejecting it, as the tests' `eject`
/// says after three), then its cooldown passes.
async fn eject_by_a_and_b_then_cool_down(h: &Arc<Health>) {
    for k in ["a", "b", "a"] {
        call_as(h, k, FAIL);
    }
    tokio::time::advance(10 * S).await;
}

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
    assert_eq!(h.admit(&Tenant::All).err(), Some(10 * S));
    assert_eq!(h.shown(), Shown::Ejected(10 * S));
    tokio::time::advance(4 * S).await;
    assert_eq!(h.admit(&Tenant::All).err(), Some(6 * S));
}

#[tokio::test(start_paused = true)]
async fn one_trial_only_and_its_success_recovers() {
    let h = health(Some(eject()));
    fail_until_ejected(&h);
    tokio::time::advance(10 * S).await;
    let trial = h.admit(&Tenant::All).expect("the trial");
    assert!(trial.is_trial());
    assert_eq!(h.shown(), Shown::Trial);
    assert_eq!(
        h.admit(&Tenant::All).err(),
        Some(TRIAL_WAIT),
        "one trial at a time"
    );
    assert_eq!(
        trial.end(Outcome::Success),
        Some(Change::Recovered { after: 10 * S })
    );
    assert_eq!(h.shown(), Shown::Serving);
    assert!(!h.admit(&Tenant::All).unwrap().is_trial());
}

#[tokio::test(start_paused = true)]
async fn a_dropped_trial_lets_the_next_call_try() {
    let h = health(Some(eject()));
    fail_until_ejected(&h);
    tokio::time::advance(10 * S).await;
    drop(h.admit(&Tenant::All).expect("the trial"));
    let next = h.admit(&Tenant::All).expect("the next call is the trial");
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
        let t = h.admit(&Tenant::All).expect("the trial");
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
    assert!(h.admit(&Tenant::All).is_ok());
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
    // A 500 that is a request-validation error: the server worked.
    let rejected = ModelError::Rejected {
        upstream: "u".into(),
        status: 500,
        field: Some("messages[1].content".into()),
        problem: "wrong type",
        message: "7 validation errors".into(),
    };
    assert_eq!(Outcome::of(&rejected), Outcome::Success);
    assert_eq!(Outcome::of_transport(&rejected), Outcome::Success);
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

#[tokio::test(start_paused = true)]
async fn one_keys_failures_alone_never_eject_it_for_the_others() {
    let h = health(Some(eject()));
    for i in 0..50 {
        assert_eq!(call_as(&h, "attacker", FAIL), None, "failure {i}");
    }
    assert_eq!(h.shown(), Shown::Serving);
    assert!(h.admit(&key("victim")).is_ok());
    // A second key's failure shows it is not one key's requests: the run
    // (long past `after`) ejects it.
    assert!(matches!(
        call_as(&h, "victim", FAIL),
        Some(Change::Ejected { failures: 51, .. })
    ));
    assert_eq!(h.admit(&key("third")).err(), Some(10 * S));
}

#[tokio::test(start_paused = true)]
async fn an_attacker_between_a_victims_calls_never_ejects_it() {
    let h = health(Some(eject()));
    for i in 0..30 {
        call_as(&h, "attacker", FAIL);
        call_as(&h, "attacker", FAIL);
        assert_eq!(
            call_as(&h, "victim", Outcome::Success),
            None,
            "victim call {i}"
        );
        tokio::time::advance(S).await;
    }
    assert_eq!(h.shown(), Shown::Serving);
}

#[tokio::test(start_paused = true)]
async fn failures_of_two_keys_eject_it_and_neither_is_the_trial() {
    let h = health(Some(eject()));
    call_as(&h, "a", FAIL);
    call_as(&h, "b", FAIL);
    assert!(matches!(
        call_as(&h, "a", FAIL),
        Some(Change::Ejected { failures: 3, .. })
    ));
    tokio::time::advance(10 * S).await;
    // A cause's call after the cooldown is its own probe, not the trial:
    // another key's call still is.
    let probe = h.admit(&key("a")).expect("a's probe");
    assert!(probe.is_trial());
    assert_eq!(
        h.admit(&key("a")).err(),
        Some(TRIAL_WAIT),
        "one probe a key"
    );
    assert_eq!(h.shown(), Shown::Ejected(Duration::ZERO));
    // Its failure holds back `a` alone (for the next cooldown's length).
    assert_eq!(probe.end(FAIL), None);
    assert_eq!(h.admit(&key("a")).err(), Some(20 * S));
    let trial = h.admit(&key("c")).expect("c's call is the trial");
    assert_eq!(h.shown(), Shown::Trial);
    assert_eq!(h.admit(&key("d")).err(), Some(TRIAL_WAIT));
    let b = h.admit(&key("b")).expect("b probes while c is the trial");
    assert_eq!(
        trial.end(Outcome::Success),
        Some(Change::Recovered { after: 10 * S })
    );
    assert_eq!(b.end(FAIL), None, "served again meanwhile: b's probe ends");
    assert_eq!(h.shown(), Shown::Serving);
    assert!(h.admit(&key("a")).is_ok(), "served again, for every key");
}

#[tokio::test(start_paused = true)]
async fn a_causes_probe_that_succeeds_serves_it_again() {
    let h = health(Some(eject()));
    eject_by_a_and_b_then_cool_down(&h).await;
    let probe = h.admit(&key("b")).unwrap();
    assert_eq!(
        probe.end(Outcome::Success),
        Some(Change::Recovered { after: 10 * S })
    );
    assert_eq!(h.shown(), Shown::Serving);
}

#[tokio::test(start_paused = true)]
async fn a_failed_trial_makes_its_key_a_cause_too() {
    let h = health(Some(eject()));
    eject_by_a_and_b_then_cool_down(&h).await;
    let trial = h.admit(&key("c")).unwrap();
    assert!(matches!(
        trial.end(FAIL),
        Some(Change::Ejected {
            failures: 1,
            cooldown,
            ..
        }) if cooldown == 20 * S
    ));
    tokio::time::advance(20 * S).await;
    // c failed the last trial: its call is a probe now; d's is the trial.
    let c = h.admit(&key("c")).unwrap();
    let d = h.admit(&key("d")).unwrap();
    assert_eq!(h.shown(), Shown::Trial);
    assert_eq!(c.end(FAIL), None, "c's probe ejects nobody");
    assert!(matches!(d.end(FAIL), Some(Change::Ejected { .. })));
    assert_eq!(h.admit(&key("a")).err(), Some(35 * S));
}

#[tokio::test(start_paused = true)]
async fn a_dropped_probe_lets_its_key_probe_again() {
    let h = health(Some(eject()));
    eject_by_a_and_b_then_cool_down(&h).await;
    drop(h.admit(&key("a")).unwrap());
    assert!(h.admit(&key("a")).is_ok());
}

#[tokio::test(start_paused = true)]
async fn an_error_rate_needs_two_keys_failures() {
    let e = Eject {
        after: 100,
        error_rate: Some(0.5),
        min_requests: 10,
        ..eject()
    };
    let h = health(Some(e));
    for i in 0..40 {
        let (k, o) = if i % 2 == 0 {
            ("attacker", FAIL)
        } else {
            ("victim", Outcome::Success)
        };
        assert_eq!(call_as(&h, k, o), None, "call {i}: one key's failures");
    }
    assert!(matches!(
        call_as(&h, "other", FAIL),
        Some(Change::Ejected { .. })
    ));
}

#[tokio::test(start_paused = true)]
async fn each_model_has_its_own_health_and_the_upstream_its_own() {
    let u = UpstreamHealth::new("u".into(), Some(eject()), ["m1", "m2"], Metrics::noop());
    let m1 = u.model("m1");
    for _ in 0..3 {
        call(&m1, FAIL);
    }
    assert!(matches!(m1.shown(), Shown::Ejected(_)));
    assert_eq!(u.model("m2").shown(), Shown::Serving);
    assert_eq!(u.whole.shown(), Shown::Serving);
    assert!(Arc::ptr_eq(&m1, &u.model("m1")), "one health a model");
    assert_eq!(
        u.models_shown()
            .iter()
            .map(|(m, s)| (m.as_str(), s.label()))
            .collect::<Vec<_>>(),
        [("m1", "ejected"), ("m2", "serving")]
    );
    // A reload keeps the states, adds new models (serving) and forgets
    // those it no longer has.
    u.configure(Some(eject()), ["m1", "m3"]);
    let names: Vec<_> = u.models_shown().into_iter().map(|(m, _)| m).collect();
    assert_eq!(names, ["m1", "m3"]);
    assert!(matches!(u.model("m1").shown(), Shown::Ejected(_)));
    assert_eq!(u.model("m3").shown(), Shown::Serving);
    // Without `eject` every member serves again.
    u.configure(None, ["m1", "m3"]);
    assert_eq!(u.model("m1").shown(), Shown::Serving);
}

#[test]
fn transport_outcomes_of_errors() {
    let connect = ModelError::Connect {
        upstream: "u".into(),
        reason: "refused".into(),
        source: None,
    };
    assert_eq!(Outcome::of_transport(&connect), Outcome::Failure("connect"));
    assert_eq!(Outcome::of(&connect), Outcome::Neutral, "not the model's");
    let status = ModelError::Status {
        upstream: "u".into(),
        status: 500,
        message: String::new(),
        code: None,
        retry_after: None,
    };
    assert_eq!(Outcome::of_transport(&status), Outcome::Success);
    assert!(matches!(Outcome::of(&status), Outcome::Failure(_)));
}
