#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
use std::sync::atomic::{AtomicU32, Ordering};

use super::*;

/// A member that is ejected (or not) and fails every call with a 503.
struct Fake {
    ejected: Option<Duration>,
    calls: AtomicU32,
}

#[async_trait]
impl ChatModel for Fake {
    async fn chat(&self, _call: Call, _req: Arc<ChatRequest>) -> Result<Reply, ModelError> {
        self.calls.fetch_add(1, Ordering::AcqRel);
        Err(ModelError::Status {
            upstream: "fake".into(),
            status: 503,
            message: "down".into(),
            code: None,
            retry_after: None,
        })
    }

    fn estimate(&self, size: CallSize) -> Spend {
        Spend {
            tokens: size.output,
            cost_usd: 0.0,
        }
    }

    fn availability(&self) -> Availability {
        match self.ejected {
            Some(retry_after) => Availability::Ejected { retry_after },
            None => Availability::Serving,
        }
    }
}

fn balance(members: &[(Option<u64>, u64)]) -> (Balance, Vec<Arc<Fake>>) {
    let fakes: Vec<Arc<Fake>> = members
        .iter()
        .map(|(ejected, _)| {
            Arc::new(Fake {
                ejected: ejected.map(Duration::from_secs),
                calls: AtomicU32::new(0),
            })
        })
        .collect();
    let list = fakes
        .iter()
        .enumerate()
        .map(|(i, f)| BalanceMember {
            name: format!("m{i}").into(),
            model: f.clone(),
            weight: 1,
            max_concurrency: None,
            local: false,
            state: Arc::new(MemberState::default()),
        })
        .collect();
    let b = Balance {
        name: "r".into(),
        members: list,
        policy: Policy::LeastBusy,
        retries: 2,
        midstream_failover: false,
        ttft_timeout: None,
        stream_idle_timeout: None,
    };
    (b, fakes)
}

fn req() -> Arc<ChatRequest> {
    Arc::new(
        serde_json::from_value(serde_json::json!({
            "model": "r", "messages": [{"role": "user", "content": "hi"}]
        }))
        .unwrap(),
    )
}

#[tokio::test]
async fn ejected_members_are_skipped_and_all_ejected_fails_fast() {
    let call = || Call::new(Arc::new(crate::context::test_ctx()));
    let (b, fakes) = balance(&[(Some(30), 0), (None, 0)]);
    let e = b.chat(call(), req()).await.err().unwrap();
    assert!(matches!(e, ModelError::Status { status: 503, .. }), "{e}");
    assert_eq!(fakes[0].calls.load(Ordering::Acquire), 0);
    assert_eq!(fakes[1].calls.load(Ordering::Acquire), 1);
    assert_eq!(b.availability(), Availability::Serving);

    let (b, fakes) = balance(&[(Some(30), 0), (Some(12), 0)]);
    let e = b.chat(call(), req()).await.err().unwrap();
    assert!(
        matches!(e, ModelError::NoHealthy { retry_after, .. } if retry_after == Duration::from_secs(12)),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "no healthy upstream for `r`: every member is ejected after repeated failures"
    );
    assert!(fakes.iter().all(|f| f.calls.load(Ordering::Acquire) == 0));
    assert_eq!(
        b.availability(),
        Availability::Ejected {
            retry_after: Duration::from_secs(12)
        }
    );
}

#[tokio::test]
async fn every_member_failing_is_exhausted_with_each_attempt() {
    let (b, fakes) = balance(&[(None, 0), (None, 0), (None, 0), (None, 0)]);
    let call = Call::new(Arc::new(crate::context::test_ctx()));
    let e = b.chat(call, req()).await.err().unwrap();
    let ModelError::Exhausted { attempts, .. } = &e else {
        panic!("{e}");
    };
    // retries = 2: three members tried, the fourth not.
    assert_eq!(attempts.len(), 3);
    let calls: u32 = fakes.iter().map(|f| f.calls.load(Ordering::Acquire)).sum();
    assert_eq!(calls, 3);
}

#[test]
fn the_estimate_is_the_dearest_member_per_try() {
    let (b, _) = balance(&[(None, 0), (None, 0)]);
    let size = CallSize {
        input: 0,
        images: 0,
        output: 100,
    };
    // Two members: one retry at most.
    assert_eq!(b.estimate(size).tokens, 200);
}
