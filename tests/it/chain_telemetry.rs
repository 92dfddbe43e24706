//! `strategy = "chain"`: the event log and metrics of an escalating
//! request (every tier and verifier call, with its verdict).
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::world::*;
use common::*;
use serde_json::Value;

// ---------------------------------------------------------------------------
// Telemetry of an escalating request.
// ---------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn event_log_and_metrics_record_every_tier_and_verifier_call() {
    let w = world(
        &(route("review", &["l-down", "l-bad", "c-good"], Some("v"), "")
            + &route("streamed", &["l-down", "l-bad", "c-good"], Some("v"), "")
            + &route("unsure", &["l-good", "c-good"], Some("v-garbage"), "")
            + &route("novote", &["l-good", "c-good"], Some("v-down"), "")),
    )
    .await;
    let gw = &w.gw;

    let resp = w.ask(&chat("review", Q)).await;
    assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
    assert_eq!(resp.header("x-conclave-attempts"), Some("4"));
    let id = resp.header("x-request-id").unwrap().to_owned();
    let unsure = w.ask(&chat("unsure", Q)).await;
    let novote = w.ask(&chat("novote", Q)).await;
    let streamed = w.ask(&chat_stream("streamed", Q)).await;
    assert_eq!(streamed.header("x-conclave-attempts"), Some("4"));

    // (The local lane's `lane_swap` events are checked elsewhere.)
    let events = gw.events_of(&["attempt"], 14).await;
    // Each request closes with its `request` line: the whole request's
    // attempts, tokens and the time to the first token the client saw.
    let requests = gw.events_of(&["request"], 4).await;
    let closing = requests.iter().find(|e| e["request_id"] == id).unwrap();
    assert_eq!(closing["status"], "200");
    assert_eq!(closing["strategy"], "chain");
    assert_eq!(closing["attempts"], 4);
    assert_eq!(closing["key"], "anonymous");
    let (ttft, total) = (
        closing["ttft_ms"].as_f64().unwrap(),
        closing["duration_ms"].as_f64().unwrap(),
    );
    assert!(ttft > 0.0 && ttft <= total, "{closing}");
    assert!(closing["tokens"].as_u64().unwrap() > 0, "{closing}");
    let of = |rid: &str| {
        let mut v: Vec<Value> = events
            .iter()
            .filter(|e| e["request_id"] == rid)
            .cloned()
            .collect();
        v.sort_by_key(|e| e["attempt"].as_u64());
        v
    };
    let review = of(&id);
    assert_eq!(review.len(), 4, "{review:#?}");
    let fields = [
        "attempt",
        "model",
        "upstream",
        "role",
        "duration_ms",
        "ttft_ms",
        "warm_start",
        "verdict",
        "feedback",
        "error",
        "input_tokens",
        "output_tokens",
        "cost_usd",
        "output_summary",
    ];
    for e in &review {
        assert_eq!(e["event"], "attempt", "{e}");
        assert_eq!(e["route"], "review", "{e}");
        for f in fields {
            assert!(e.get(f).is_some(), "no {f} in {e}");
        }
        assert!(e["duration_ms"].as_f64().is_some_and(|d| d >= 0.0), "{e}");
    }
    let short: Vec<(u64, &str, &str, &str, &str)> = review
        .iter()
        .map(|e| {
            (
                e["attempt"].as_u64().unwrap(),
                e["model"].as_str().unwrap(),
                e["upstream"].as_str().unwrap(),
                e["role"].as_str().unwrap(),
                e["verdict"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        short,
        [
            (1, "l-down", "loc", "tier", "error"),
            (2, "l-bad", "loc", "tier", "escalate"),
            (3, "v", "cld", "verifier", "escalate"),
            (4, "c-good", "cld", "tier", "accept"),
        ]
    );
    assert!(
        review[0]["error"]
            .as_str()
            .is_some_and(|e| e.contains("503")),
        "{}",
        review[0]
    );
    assert_eq!(review[1]["feedback"], NEEDS);
    assert_eq!(review[1]["output_summary"], "BAD draft from l-bad");
    assert!(
        review[1]["input_tokens"].as_u64().is_some(),
        "{}",
        review[1]
    );
    assert_eq!(review[1]["output_tokens"], 4);
    assert_eq!(review[2]["feedback"], NEEDS);
    assert!(
        review[2]["output_summary"]
            .as_str()
            .is_some_and(|s| s.contains("accept")),
        "{}",
        review[2]
    );
    assert_eq!(review[3]["feedback"], Value::Null);
    assert_eq!(review[3]["error"], Value::Null);
    assert_eq!(review[3]["output_summary"], "GOOD answer from c-good");
    // c-good is priced at $3 / $15 per million tokens.
    let (inp, out) = (
        review[3]["input_tokens"].as_f64().unwrap(),
        review[3]["output_tokens"].as_f64().unwrap(),
    );
    assert_eq!(out, 4.0);
    let cost = review[3]["cost_usd"].as_f64().unwrap();
    assert!(
        (cost - (inp * 3.0 + out * 15.0) / 1e6).abs() < 1e-12,
        "{}",
        review[3]
    );
    // Whole answers have no first token; streamed tiers do, and so do
    // verifier calls (streamed from the server, so a verifier past its
    // timeout stops generating).
    for e in &review {
        let verifier = e["role"] == "verifier";
        assert_eq!(e["ttft_ms"].is_null(), !verifier, "{review:#?}");
    }
    let streamed = of(streamed.header("x-request-id").unwrap());
    let short: Vec<(&str, &str, &str, bool)> = streamed
        .iter()
        .map(|e| {
            (
                e["model"].as_str().unwrap(),
                e["role"].as_str().unwrap(),
                e["verdict"].as_str().unwrap(),
                e["ttft_ms"].as_f64().is_some(),
            )
        })
        .collect();
    assert_eq!(
        short,
        [
            ("l-down", "tier", "error", false),
            ("l-bad", "tier", "escalate", true),
            ("v", "verifier", "escalate", true),
            ("c-good", "tier", "accept", true),
        ],
        "{streamed:#?}"
    );
    assert_eq!(streamed[1]["output_summary"], "BAD draft from l-bad");
    assert_eq!(streamed[3]["output_tokens"], 4);

    // An unreadable verdict and a failed verifier: the tier escalates, the
    // verifier's own attempt is an error.
    for (resp, verifier) in [(&unsure, "v-garbage"), (&novote, "v-down")] {
        assert_eq!(resp.header("x-conclave-served-by"), Some("c-good"));
        let rid = resp.header("x-request-id").unwrap();
        let evs = of(rid);
        let short: Vec<(&str, &str, &str)> = evs
            .iter()
            .map(|e| {
                (
                    e["model"].as_str().unwrap(),
                    e["role"].as_str().unwrap(),
                    e["verdict"].as_str().unwrap(),
                )
            })
            .collect();
        assert_eq!(
            short,
            [
                ("l-good", "tier", "escalate"),
                (verifier, "verifier", "error"),
                ("c-good", "tier", "accept"),
            ],
            "{evs:#?}"
        );
        assert!(evs[0]["feedback"].as_str().is_some(), "{}", evs[0]);
    }

    // Metrics: one counter per call, labelled with what happened.
    let want = [
        ("review", "l-down", "loc", "tier", "error"),
        ("review", "l-bad", "loc", "tier", "escalate"),
        ("review", "v", "cld", "verifier", "escalate"),
        ("review", "c-good", "cld", "tier", "accept"),
        ("unsure", "l-good", "loc", "tier", "escalate"),
        ("unsure", "v-garbage", "cld", "verifier", "error"),
        ("novote", "v-down", "cld", "verifier", "error"),
        ("novote", "c-good", "cld", "tier", "accept"),
    ];
    let lines: Vec<String> = want
        .iter()
        .map(|(route, model, up, role, verdict)| {
            format!(
                "conclave_attempts_total{{route=\"{route}\",strategy=\"chain\",model=\"{model}\",upstream=\"{up}\",role=\"{role}\",verdict=\"{verdict}\",warm=\"unknown\"}} 1"
            )
        })
        .collect();
    let ok = eventually(2, || async {
        let m = gw.metrics().await;
        lines.iter().all(|l| m.lines().any(|x| x == l))
    })
    .await;
    let m = gw.metrics().await;
    let missing: Vec<&String> = lines
        .iter()
        .filter(|l| !m.lines().any(|x| x == l.as_str()))
        .collect();
    assert!(
        ok,
        "missing {missing:#?} in\n{}",
        m.lines()
            .filter(|l| l.starts_with("conclave_attempts_total"))
            .collect::<Vec<_>>()
            .join("\n")
    );
    assert!(
        m.contains(r#"conclave_requests_total{route="review",strategy="chain",status="200"} 1"#),
        "{m}"
    );
}
