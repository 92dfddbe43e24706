use super::*;

fn status(status: u16, message: &str, code: Option<&str>) -> ModelError {
    ModelError::Status {
        upstream: "u".into(),
        status,
        message: message.into(),
        code: code.map(str::to_owned),
        retry_after: None,
    }
}

#[test]
fn clients_read_no_upstream_internals() {
    let trace = "7 validation errors:\n  {'type': 'string_type', 'input': None}\n\n  \
                 File \"/usr/lib/python3/site-packages/llama_cpp/server/app.py\", line 123";
    let e = status(500, trace, None);
    assert_eq!(e.public_message(), "upstream `u` failed (HTTP 500)");
    assert!(e.to_string().contains("app.py"), "{e}");
    let e = status(400, trace, None);
    assert_eq!(
        e.public_message(),
        "upstream `u` rejected the request (HTTP 400): 7 validation errors:\n  {'type': 'string_type', 'input': None}"
    );
    let e = status(400, "bad tool schema", None);
    assert_eq!(
        e.public_message(),
        "upstream `u` rejected the request (HTTP 400): bad tool schema"
    );
    let e = ModelError::Reported {
        upstream: "u".into(),
        message: trace.into(),
        streamed: true,
    };
    assert_eq!(
        e.public_message(),
        "upstream `u` reported an error in its stream"
    );
    let e = ModelError::Invalid {
        upstream: "u".into(),
        detail: "the body is not an answer: expected value at line 1".into(),
    };
    assert_eq!(e.public_message(), "upstream `u` sent an invalid response");
    let e = status(500, trace, None);
    let s = AttemptSummary::failed("m", &e);
    assert_eq!(s.error.as_deref(), Some("upstream `u` failed (HTTP 500)"));
}

#[test]
fn failover_classes() {
    assert!(status(500, "boom", None).is_failover());
    assert!(status(429, "slow down", None).is_failover());
    assert!(status(401, "bad key", None).is_failover());
    assert!(!status(400, "bad tool schema", None).is_failover());
    assert!(status(400, "x", Some("context_length_exceeded")).is_failover());
    assert!(
        status(
            400,
            "This model's maximum context length is 8192 tokens",
            None
        )
        .is_failover()
    );
    assert!(
        ModelError::Timeout {
            upstream: "u".into(),
            phase: TimeoutPhase::FirstToken,
            after: Duration::from_secs(1)
        }
        .is_failover()
    );
}

#[test]
fn a_route_whose_every_member_rejected_the_request_as_invalid_is_the_clients_400() {
    let rejected = |upstream: &str| ModelError::Rejected {
        upstream: upstream.into(),
        status: 500,
        field: Some("messages[1].content".into()),
        problem: "wrong type",
        message: "7 validation errors".into(),
    };
    let trail = vec![
        AttemptSummary::failed("small", &rejected("a")),
        AttemptSummary::failed("big", &rejected("b")),
    ];
    let e = ModelError::exhausted("chain", "tiers", "r".into(), trail.clone());
    assert!(
        matches!(&e, ModelError::Rejected { upstream, field: Some(f), .. } if &**upstream == "a" && f == "messages[1].content"),
        "{e:?}"
    );
    // One member failed otherwise: the route is exhausted, as before.
    let mut mixed = trail;
    mixed[1] = AttemptSummary::failed("big", &status(500, "CUDA error", None));
    let e = ModelError::exhausted("chain", "tiers", "r".into(), mixed);
    assert!(matches!(e, ModelError::Exhausted { .. }), "{e:?}");
    let e = ModelError::exhausted("chain", "tiers", "r".into(), Vec::new());
    assert!(matches!(e, ModelError::Exhausted { .. }), "{e:?}");
}
