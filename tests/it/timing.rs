//! Timing logic in-process, under paused tokio time (see `common::fake`):
//! exact elapsed times, no wall-clock sleeps.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::fake::*;
use conclave::model::{Call, ChatModel};
use conclave::strategy::chain::config::OnExhausted;
use conclave::strategy::chain::verifier::Verifier;
use conclave::strategy::chain::{Chain, Tier};
use tokio::time::Instant;

fn tier(fake: &Arc<Fake>, name: &str, verified: bool) -> Tier {
    Tier {
        name: name.into(),
        model: fake.clone(),
        verified,
    }
}

fn chain(tiers: Vec<Tier>, verifier: Option<Verifier>) -> Chain {
    Chain {
        name: "r".into(),
        tiers,
        verifier,
        on_exhausted: OnExhausted::Error,
        ttft_timeout: None,
        stream_idle_timeout: None,
        midstream_failover: false,
    }
}

#[tokio::test(start_paused = true)]
async fn a_fallback_chain_takes_the_sum_of_its_tiers() {
    let down = Fake::new("down", vec![fails(5_000)]);
    let ok = Fake::new("ok", vec![answers(2_000, "fine")]);
    let c = chain(
        vec![tier(&down, "down", false), tier(&ok, "ok", false)],
        None,
    );
    let t0 = Instant::now();
    let (ctx, records) = recorded_ctx(Duration::from_secs(60));
    let reply = c.chat(Call::new(ctx.clone()), request("hi")).await.unwrap();
    assert_eq!(t0.elapsed(), Duration::from_millis(7_000));
    assert_eq!(text_of(&reply), "fine");
    assert_eq!(ok.started(), vec![t0 + Duration::from_millis(5_000)]);
    assert_eq!(ctx.attempts(), 2);
    // Both calls waited on upstreams the whole time: no overhead counted.
    assert_eq!(
        ctx.upstream_wait(Instant::now()),
        Duration::from_millis(7_000)
    );
    // Every attempt reaches the sinks once, with the verdict its owner set.
    drop(reply);
    assert_eq!(
        *records.0.lock(),
        [
            ("down".to_owned(), "tier", "error"),
            ("ok".to_owned(), "tier", "accept")
        ]
    );
}

#[tokio::test(start_paused = true)]
async fn a_slow_verifier_times_out_at_verifier_timeout_and_the_chain_escalates() {
    let draft = Fake::new("draft", vec![answers(100, "draft")]);
    let judge = Fake::new("judge", vec![answers(60_000, "{\"accept\": true}")]);
    let good = Fake::new("good", vec![answers(300, "good")]);
    let verifier = Verifier {
        name: "judge".into(),
        model: judge.clone(),
        json_mode: true,
        max_tokens: 256,
        timeout: Duration::from_secs(2),
    };
    let c = chain(
        vec![tier(&draft, "draft", true), tier(&good, "good", false)],
        Some(verifier),
    );
    let t0 = Instant::now();
    let reply = c
        .chat(Call::new(ctx(Duration::from_secs(300))), request("hi"))
        .await
        .unwrap();
    // draft 0.1 s, the verifier cut off at 2 s, then good 0.3 s.
    assert_eq!(t0.elapsed(), Duration::from_millis(2_400));
    assert_eq!(text_of(&reply), "good");
    assert_eq!(reply.meta.served_by.as_deref(), Some("good"));
}

#[tokio::test(start_paused = true)]
async fn the_request_deadline_bounds_every_tier() {
    let slow = Fake::new("slow", vec![answers(10_000, "late")]);
    let next = Fake::new("next", vec![answers(10, "never reached in time")]);
    let c = chain(
        vec![tier(&slow, "slow", false), tier(&next, "next", false)],
        None,
    );
    let t0 = Instant::now();
    let err = c
        .chat(Call::new(ctx(Duration::from_secs(3))), request("hi"))
        .await
        .err()
        .unwrap();
    // The first tier ran into the request's deadline; the second had no
    // time left and failed at once.
    assert_eq!(t0.elapsed(), Duration::from_secs(3));
    assert!(err.to_string().contains("tiers of chain"), "{err}");
}

mod race {
    use super::*;
    use conclave::strategy::race::rubric::{Caps, Rubric};
    use conclave::strategy::race::{Candidate, Gates, Mode, Race};
    use std::collections::BTreeMap;

    fn race(fakes: &[&Arc<Fake>], mode: Mode, hedge_delay: Option<Duration>) -> Race {
        Race {
            name: "r".into(),
            candidates: fakes
                .iter()
                .enumerate()
                .map(|(i, f)| Candidate {
                    name: format!("c{i}").into(),
                    model: (*f).clone(),
                })
                .collect(),
            mode,
            rubric: Rubric::new(&BTreeMap::from([("finish".to_owned(), 1.0)])).unwrap(),
            judge: None,
            webhook: None,
            caps: Caps {
                length_tokens: 2000,
                latency: Duration::from_secs(60),
            },
            gates: Gates {
                max_candidates: 3,
                budget_tokens: 0,
                confirm_threshold_tokens: 0,
                baseline_tokens_per_run: 75_000,
            },
            cancel_on_perfect: true,
            hedge_delay,
        }
    }

    async fn run(r: &Race) -> (Duration, String) {
        let t0 = Instant::now();
        let reply = r
            .chat(Call::new(ctx(Duration::from_secs(60))), request("hi"))
            .await
            .unwrap();
        (t0.elapsed(), text_of(&reply))
    }

    #[tokio::test(start_paused = true)]
    async fn a_hedge_starts_the_second_candidate_only_when_the_first_is_slow() {
        let slow = Fake::new("slow", vec![answers(500, "slow")]);
        let quick = Fake::new("quick", vec![answers(100, "quick")]);
        let t0 = Instant::now();
        let (took, text) = run(&race(
            &[&slow, &quick],
            Mode::First,
            Some(Duration::from_millis(200)),
        ))
        .await;
        assert_eq!((took, text.as_str()), (Duration::from_millis(300), "quick"));
        assert_eq!(quick.started(), vec![t0 + Duration::from_millis(200)]);

        // A first candidate fast enough: the second never starts.
        let fast = Fake::new("fast", vec![answers(100, "fast")]);
        let spare = Fake::new("spare", vec![answers(10, "spare")]);
        let (took, text) = run(&race(
            &[&fast, &spare],
            Mode::First,
            Some(Duration::from_millis(200)),
        ))
        .await;
        assert_eq!((took, text.as_str()), (Duration::from_millis(100), "fast"));
        assert!(spare.started().is_empty());

        // A first candidate that fails: the second starts then, not later.
        let broken = Fake::new("broken", vec![fails(50)]);
        let next = Fake::new("next", vec![answers(100, "next")]);
        let (took, text) = run(&race(
            &[&broken, &next],
            Mode::First,
            Some(Duration::from_millis(200)),
        ))
        .await;
        assert_eq!((took, text.as_str()), (Duration::from_millis(150), "next"));
    }

    #[tokio::test(start_paused = true)]
    async fn a_perfect_answer_ends_a_best_of_race_at_once() {
        let slow = Fake::new("slow", vec![answers(5_000, "slow")]);
        let quick = Fake::new("quick", vec![answers(400, "quick")]);
        let (took, text) = run(&race(&[&slow, &quick], Mode::Best, None)).await;
        assert_eq!((took, text.as_str()), (Duration::from_millis(400), "quick"));
        let mut r = race(&[&slow, &quick], Mode::Best, None);
        r.cancel_on_perfect = false;
        let (took, text) = run(&r).await;
        // Both perfect: fewer output tokens win ("slow" is 1, "quick" 2).
        assert_eq!(
            (took, text.as_str()),
            (Duration::from_millis(5_000), "slow")
        );
    }
}
