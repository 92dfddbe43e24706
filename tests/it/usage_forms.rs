//! A strategy's answer counts every call of the request in its `usage`,
//! and the whole and streamed forms of the same request agree: each
//! strategy is asked once whole and once streamed (`include_usage`), and
//! both usages are the sum of its calls, which the mock fixes per model.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use serde_json::{Value, json};

const CONFIG: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.a]
reply = { text = "Paris is the capital of France." }
usage = { prompt_tokens = 30, completion_tokens = 4 }

[upstreams.sim.models.b]
reply = { text = "It is Paris." }
usage = { prompt_tokens = 40, completion_tokens = 5 }

[upstreams.sim.models.drafty]
reply = { text = "A draft: maybe Lyon." }
usage = { prompt_tokens = 10, completion_tokens = 2 }

[upstreams.sim.models.v]
reply = { json = { accept = true, feedback = "" } }
usage = { prompt_tokens = 20, completion_tokens = 3 }

[[upstreams.sim.models.v.rules]]
when_contains = "A draft"
then = { reply = { json = { accept = false, feedback = "name the capital, not a guess" } } }

[upstreams.sim.models.base]
reply = { text = "An easy answer." }
usage = { prompt_tokens = 50, completion_tokens = 6 }

[[upstreams.sim.models.base.rules]]
when_contains = "SAGE-SAYS"
then = { reply = { text = "Final answer with the expert's help." } }

[[upstreams.sim.models.base.rules]]
when_contains = "hard"
then = { reply = { tool_call = { name = "oracle_consult", arguments = { question = "Which city?" } } } }

[upstreams.sim.models.sage]
reply = { text = "SAGE-SAYS: Paris." }
usage = { prompt_tokens = 100, completion_tokens = 7 }

[upstreams.sim.models.down]
status = 503

[models.a]
upstream = "sim"
[models.b]
upstream = "sim"
[models.drafty]
upstream = "sim"
[models.v]
upstream = "sim"
[models.base]
upstream = "sim"
[models.sage]
upstream = "sim"
[models.down]
upstream = "sim"

[routes.chain]
strategy = "chain"
tiers = ["drafty", "a"]
verifier = "v"
verify = ["drafty"]

[routes.failover]
strategy = "chain"
tiers = ["down", "a"]
midstream_failover = true

[routes.race]
strategy = "race"
candidates = ["a", "b"]
cancel_on_perfect = false

[routes.arena]
strategy = "arena"
contestants = ["a", "b"]

[routes.oracle]
strategy = "oracle"
base = "base"
oracle = "sage"

[routes.balance]
strategy = "balance"
members = ["down", "b"]
weights = { b = 0 }
"#;

/// The usage of `route`'s answer, whole or streamed.
async fn usage_of(gw: &Srv, route: &str, stream: bool) -> (u64, u64) {
    let mut body = chat(route, "A hard one: what is the capital of France?");
    if stream {
        body["stream"] = json!(true);
        body["stream_options"] = json!({"include_usage": true});
    }
    let resp = post(&gw.base, &body).await;
    assert_eq!(resp.status, 200, "{route}: {}", resp.text);
    let usage = if stream {
        let chunks: Vec<Value> = resp
            .data_events()
            .iter()
            .filter(|e| e.as_str() != "[DONE]")
            .map(|e| serde_json::from_str(e).unwrap())
            .filter(|c: &Value| c["usage"].is_object())
            .collect();
        assert_eq!(chunks.len(), 1, "{route}: {}", resp.text);
        chunks[0]["usage"].clone()
    } else {
        resp.json()["usage"].clone()
    };
    let n = |k: &str| {
        usage[k]
            .as_u64()
            .unwrap_or_else(|| panic!("{route}: {usage}"))
    };
    assert_eq!(
        n("total_tokens"),
        n("prompt_tokens") + n("completion_tokens")
    );
    (n("prompt_tokens"), n("completion_tokens"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_strategy_counts_every_call_whole_and_streamed_alike() {
    let gw = Srv::gateway(CONFIG);
    let cases = [
        // drafty, the verifier rejecting it, a.
        ("chain", (10 + 20 + 30, 2 + 3 + 4)),
        // down answers 503 (no usage), then a.
        ("failover", (30, 4)),
        // Both candidates, scored without a model.
        ("race", (30 + 40, 4 + 5)),
        ("arena", (30 + 40, 4 + 5)),
        // The base twice around the oracle's answer.
        ("oracle", (50 + 100 + 50, 6 + 7 + 6)),
        ("balance", (40, 5)),
    ];
    let mut requests = 0;
    for (route, want) in cases {
        let whole = usage_of(&gw, route, false).await;
        let streamed = usage_of(&gw, route, true).await;
        requests += 2;
        assert_eq!(whole, want, "{route}, whole");
        assert_eq!(streamed, want, "{route}, streamed");
        // And what the request's own record says it cost.
        let ended = gw.events_of(&["request"], requests).await;
        for e in &ended[requests - 2..] {
            assert_eq!(e["route"], route, "{e}");
            assert_eq!(
                (e["input_tokens"].as_u64(), e["output_tokens"].as_u64()),
                (Some(want.0), Some(want.1)),
                "{e}"
            );
        }
    }
}
