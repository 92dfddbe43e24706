//! The report's figures: failed answers in the errors column, failed
//! calls and samples, degraded answers, capped ones, and which routes may
//! stand on the Pareto front.

use serde_json::json;

use super::*;

/// An answered outcome of `route`, recorded at `cost` USD in `latency` ms.
fn answered(route: &str, i: u32, correct: bool, cost: f64, latency: f64) -> Outcome {
    serde_json::from_value(json!({
        "id": format!("t{i}"), "route": route, "repeat": 0, "correct": correct,
        "detail": "", "answer": "42", "status": 200, "request_id": format!("{route}-{i}"),
        "latency_ms": latency, "recorded": true, "cost_usd": cost, "attempts": 1,
        "finish_reason": "stop",
    }))
    .unwrap()
}

fn head(cost: CostAxis) -> Head {
    Head {
        title: "t".into(),
        notes: Vec::new(),
        sampling: Sampling::default(),
        cost,
        partial: false,
    }
}

fn names(rs: &[&str]) -> Vec<String> {
    rs.iter().map(|s| s.to_string()).collect()
}

/// Issue 41: a passthrough whose answers came back empty is cheap and
/// fast because it did not answer; it is not a point of the front.
#[test]
fn a_route_whose_answers_failed_is_off_the_front_and_counted() {
    let mut os = Vec::new();
    for i in 0..30 {
        let mut o = answered("pass", i, false, 0.000_01, 50.0);
        if i > 0 {
            o.failed = true;
            o.detail = "an empty answer (finish_reason stop)".into();
        }
        os.push(o);
        os.push(answered("real", i, i % 2 == 0, 0.001, 900.0));
    }
    let rows = routes(&os, &names(&["pass", "real"]), CostAxis::Usd);
    assert_eq!(rows[0].errors, 29);
    assert!(!rows[0].fair && !rows[0].on_front);
    assert!(rows[1].fair && rows[1].on_front);
    let md = markdown(&head(CostAxis::Usd), &rows, &[], &[]);
    let pass = md.lines().find(|l| l.starts_with("| pass |")).unwrap();
    assert!(
        pass.contains("| 29 | 0 of 30 | excluded (97 % failed or degraded) |"),
        "{pass}"
    );
    assert!(md.contains("29 of 30 answers failed"), "{md}");
    let real = md.lines().find(|l| l.starts_with("| real |")).unwrap();
    assert!(real.ends_with("| 0 | 0 of 30 | ★ |"), "{real}");
    assert!(
        md.contains("Sampling: temperature 0, no seed, no max_tokens"),
        "{md}"
    );

    // One error in 30 (3 %) is within the fair share: it stays a point.
    let mut os: Vec<Outcome> = (0..30)
        .map(|i| answered("a", i, true, 0.001, 10.0))
        .collect();
    os[0].failed = true;
    let rows = routes(&os, &names(&["a"]), CostAxis::Usd);
    assert!(rows[0].fair && rows[0].on_front);
}

#[test]
fn failed_calls_samples_and_degraded_answers_are_shown() {
    let mut os = Vec::new();
    for i in 0..10 {
        let mut o = answered("self-moa-large", i, true, 0.002, 100.0);
        o.attempts = 4;
        o.samples = 3;
        if i < 4 {
            o.failed_samples = 1;
            o.failed_calls = 1;
        }
        os.push(o);
    }
    let rows = routes(&os, &names(&["self-moa-large"]), CostAxis::Usd);
    let r = &rows[0];
    assert_eq!((r.samples, r.failed_samples, r.degraded), (30, 4, 4));
    assert_eq!((r.calls, r.failed_calls), (40, 4));
    assert!(!r.fair, "4 of 10 degraded is past the fair share");
    let md = markdown(&head(CostAxis::Usd), &rows, &[], &[]);
    assert!(md.contains("| self-moa-large (degraded) | 10 |"), "{md}");
    assert!(
        md.contains("| 0 | 4 of 40 | excluded (40 % failed or degraded) |"),
        "{md}"
    );
    assert!(
        md.contains(
            "4 of 30 samples failed; **degraded**: 4 of 10 answers made of fewer samples than asked"
        ),
        "{md}"
    );
}

#[test]
fn capped_answers_are_graded_and_noted() {
    let mut os: Vec<Outcome> = (0..4).map(|i| answered("m", i, i == 0, 0.0, 5.0)).collect();
    os[1].finish_reason = Some("length".into());
    os[2].finish_reason = Some("length".into());
    let rows = routes(&os, &names(&["m"]), CostAxis::Usd);
    assert_eq!((rows[0].capped, rows[0].errors), (2, 0));
    let md = markdown(&head(CostAxis::Usd), &rows, &[], &[]);
    assert!(md.contains("2 answers capped at max_tokens"), "{md}");
}

#[test]
fn the_latency_axis_weighs_the_median_latency() {
    let mut os = Vec::new();
    for i in 0..10 {
        // Dear and slow, cheap and fast with fewer right: on the cost
        // axis both are on the front; on latency the slow one is not,
        // unless it is more accurate (it is).
        os.push(answered("slow", i, true, 0.0, 2000.0 + f64::from(i)));
        os.push(answered("fast", i, i < 5, 0.0, 100.0));
        os.push(answered("worse", i, i < 3, 0.0, 150.0));
    }
    let rows = routes(&os, &names(&["slow", "fast", "worse"]), CostAxis::Latency);
    assert_eq!(rows[0].cost, Some(2004.0));
    assert_eq!(rows[1].cost, Some(100.0));
    assert!(rows[0].on_front && rows[1].on_front && !rows[2].on_front);
    // Latency is known without the event log.
    let mut bare = os.clone();
    for o in &mut bare {
        o.recorded = false;
    }
    let rows = routes(&bare, &names(&["slow", "fast"]), CostAxis::Latency);
    assert!(rows.iter().all(|r| r.cost.is_some()));
    let rows = routes(&bare, &names(&["slow", "fast"]), CostAxis::Usd);
    assert!(rows.iter().all(|r| r.cost.is_none() && !r.on_front));
    let md = markdown(&head(CostAxis::Latency), &rows, &[], &[]);
    assert!(md.contains("| Pareto (latency) |"), "{md}");
}
