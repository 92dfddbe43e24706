//! The event log read back: failed calls, a race's and a panel's failed
//! samples, and an answer none of whose samples came back.

use serde_json::json;

use super::*;

fn outcome(request_id: &str) -> Outcome {
    serde_json::from_value(json!({
        "id": request_id, "route": "r", "repeat": 0, "correct": true,
        "detail": "right", "answer": "42", "status": 200, "request_id": request_id,
        "latency_ms": 1.0,
    }))
    .unwrap()
}

fn log(lines: &[Value]) -> tempfile::NamedTempFile {
    let mut text = String::new();
    for l in lines {
        text.push_str(&l.to_string());
        text.push('\n');
    }
    let f = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(f.path(), text).unwrap();
    f
}

fn request(id: &str, attempts: u64) -> Value {
    json!({"event": "request", "request_id": id, "route": "r", "status": "200",
        "attempts": attempts, "cost_usd": 0.5, "input_tokens": 10, "output_tokens": 5})
}

fn attempt(id: &str, role: &str, model: &str, verdict: &str) -> Value {
    json!({"event": "attempt", "request_id": id, "route": "r", "role": role,
        "model": model, "verdict": verdict})
}

#[test]
fn failed_calls_and_samples_are_read_per_request() {
    let f = log(&[
        // A race: one of three candidates failed (twice: it was retried).
        attempt("race", "candidate", "a", "error"),
        attempt("race", "candidate", "a", "error"),
        attempt("race", "candidate", "b", "winner"),
        attempt("race", "candidate", "c", "loser"),
        json!({"event": "race_candidate", "request_id": "race", "model": "a", "verdict": "error"}),
        json!({"event": "race_candidate", "request_id": "race", "model": "b", "verdict": "winner"}),
        json!({"event": "race_candidate", "request_id": "race", "model": "c", "verdict": "loser"}),
        request("race", 4),
        // A panel: a failed first try then an answer is a sample; one
        // panellist skipped for its context window is not.
        attempt("panel", "panel", "a", "error"),
        attempt("panel", "panel", "a", "winner"),
        attempt("panel", "panel", "b", "loser"),
        json!({"event": "context_window_exceeded", "request_id": "panel", "role": "panel", "model": "c"}),
        attempt("panel", "synthesis", "a", "ok"),
        request("panel", 4),
        // A panel none of whose members answered: the default did.
        attempt("fallback", "panel", "a", "error"),
        attempt("fallback", "panel", "b", "error"),
        attempt("fallback", "default", "a", "ok"),
        request("fallback", 3),
        // No strategy samples at all.
        attempt("direct", "direct", "a", "ok"),
        request("direct", 1),
    ]);
    let mut os = vec![
        outcome("race"),
        outcome("panel"),
        outcome("fallback"),
        outcome("direct"),
    ];
    attach(&mut os, f.path()).unwrap();
    let figures: Vec<(u64, u64, u64, u64, bool)> = os
        .iter()
        .map(|o| {
            (
                o.attempts,
                o.failed_calls,
                o.samples,
                o.failed_samples,
                o.failed,
            )
        })
        .collect();
    assert_eq!(
        figures,
        [
            (4, 2, 3, 1, false),
            (4, 1, 3, 1, false),
            (3, 2, 2, 2, true),
            (1, 0, 0, 0, false),
        ]
    );
    let fallback = &os[2];
    assert!(!fallback.correct);
    assert!(
        fallback
            .detail
            .contains("every one of the strategy's 2 samples failed"),
        "{}",
        fallback.detail
    );
    // Read again (the eval reads the log until it settles): the same.
    attach(&mut os, f.path()).unwrap();
    assert_eq!(os[0].failed_calls, 2);
    assert_eq!(os[1].failed_samples, 1);
}
