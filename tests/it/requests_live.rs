//! `GET /v1/requests/{id}` while the request runs: its record so far
//! (`"status": "running"`, the attempts finished, the duration and cost
//! so far), listed first, seen by its own key and an admin only; and the
//! record leaves the running list when the request ends, whether it
//! finished or its client went away.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

use crate::common::inproc::{Gw, START};
use crate::common::{Resp, Served, Srv, chat_stream, client, eventually, send};

const ENV: &[(&str, &str)] = &[
    ("K_ADMIN", "sk-admin"),
    ("K_ALICE", "sk-alice"),
    ("K_BOB", "sk-bob"),
];

/// A chain whose priced (local, so verified) draft the verifier rejects at once, then a slow
/// final tier: 2 s to its first token, then 10 tokens a second.
const SLOW_CHAIN: &str = r#"
[upstreams.local]
kind = "mock"
lane = "local"

[upstreams.local.models.draft-sim]
reply = { text = "Draft: {last_user}" }

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.check-sim]
reply = { json = { accept = false, feedback = "only a draft" } }

[upstreams.sim.models.slow-sim]
reply = { text = "one two three four five six seven eight nine ten" }
ttft = "2s"
tokens_per_second = 10

[models.draft]
upstream = "local"
model = "draft-sim"
price = { input_per_mtok = 1.0, output_per_mtok = 2.0 }

[models.check]
upstream = "sim"
model = "check-sim"
price = { input_per_mtok = 1.0, output_per_mtok = 2.0 }

[models.slow]
upstream = "sim"
model = "slow-sim"
price = { input_per_mtok = 1.0, output_per_mtok = 2.0 }

[routes.chain]
strategy = "chain"
tiers = ["draft", "slow"]
verifier = "check"

[[keys]]
name = "admin"
key_env = "K_ADMIN"
admin = true

[[keys]]
name = "alice"
key_env = "K_ALICE"

[[keys]]
name = "bob"
key_env = "K_BOB"
"#;

async fn get(gw: &Gw, path: &str, key: &str) -> Resp {
    let auth = format!("Bearer {key}");
    gw.get_with(path, &[("authorization", &auth)]).await
}

fn ids(list: &Value) -> Vec<(String, String)> {
    list["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            let s = |f: &str| e[f].as_str().unwrap().to_owned();
            (s("id"), s("status"))
        })
        .collect()
}

#[tokio::test(start_paused = true)]
async fn a_running_request_shows_its_record_so_far() {
    let gw = Gw::start_with(SLOW_CHAIN, ENV, UNIX_EPOCH + START);
    let body = chat_stream("chain", "hi");
    let asked = gw.chat_with(
        &body,
        &[
            ("x-request-id", "live-1"),
            ("authorization", "Bearer sk-alice"),
        ],
    );
    let watched = async {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let own = get(&gw, "/v1/requests/live-1", "sk-alice").await;
        let theirs = get(&gw, "/v1/requests/live-1", "sk-bob").await;
        let admin = get(&gw, "/v1/requests/live-1", "sk-admin").await;
        let list = get(&gw, "/v1/requests", "sk-admin").await.json();
        let finished = get(&gw, "/v1/requests?running=false", "sk-admin")
            .await
            .json();
        let running = get(&gw, "/v1/requests?status=running", "sk-alice")
            .await
            .json();
        let bobs = get(&gw, "/v1/requests", "sk-bob").await.json();
        (own, theirs, admin, list, finished, running, bobs)
    };
    let (done, (own, theirs, admin, list, finished, running, bobs)) = tokio::join!(asked, watched);
    assert_eq!(done.status, 200, "{}", done.text);

    // A second in: the draft has been checked, the slow tier is still on
    // its way.
    assert_eq!(own.status, 200, "{}", own.text);
    let mid = own.json();
    assert_eq!(mid["status"], "running", "{mid}");
    assert_eq!(mid["duration_ms"], 1000.0, "{mid}");
    assert_eq!(mid["started_at"], START.as_secs());
    assert_eq!(
        (mid["route"].as_str(), mid["key"].as_str()),
        (Some("chain"), Some("alice"))
    );
    assert_eq!(mid["request"], Value::Null);
    let roles: Vec<&str> = mid["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["model"].as_str().unwrap())
        .collect();
    // The verifier's call is done (the draft's own line comes with the
    // chain's verdict on it); the slow tier's is not.
    assert!(
        roles.contains(&"check") && !roles.contains(&"slow"),
        "{mid}"
    );
    let so_far: f64 = mid["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a["cost_usd"].as_f64().unwrap())
        .sum();
    assert!(
        so_far > 0.0 && (mid["cost_usd"].as_f64().unwrap() - so_far).abs() < 1e-15,
        "{mid}"
    );
    // Another key's running request is a 404 like any other; an admin
    // sees it, and lists it first.
    assert_eq!(theirs.status, 404, "{}", theirs.text);
    assert_eq!(theirs.json()["error"]["code"], "request_not_found");
    assert_eq!(admin.json()["status"], "running");
    assert_eq!(ids(&list), [("live-1".to_owned(), "running".to_owned())]);
    assert!(ids(&finished).is_empty(), "{finished}");
    assert_eq!(ids(&running).len(), 1);
    assert!(ids(&bobs).is_empty(), "{bobs}");

    // Done: the same record, finished, with the slow tier's attempt and
    // its `request` line.
    let end = get(&gw, "/v1/requests/live-1", "sk-alice").await.json();
    assert_eq!(end["status"], "200", "{end}");
    assert_eq!(end["attempts"].as_array().unwrap().len(), 3, "{end}");
    assert!(end["duration_ms"].as_f64().unwrap() > 2000.0, "{end}");
    assert_eq!(end["cost_usd"], end["request"]["cost_usd"]);
    assert!(end["cost_usd"].as_f64().unwrap() > so_far);
    let list = get(&gw, "/v1/requests", "sk-admin").await.json();
    assert_eq!(ids(&list), [("live-1".to_owned(), "200".to_owned())]);
}

/// One mock model that streams 400 words at 20 tokens a second.
fn slow_stream() -> String {
    let words = vec!["word"; 400].join(" ");
    format!(
        "[upstreams.sim]\nkind = \"mock\"\n\n[upstreams.sim.models.slow]\n\
         reply = {{ text = \"{words}\" }}\ntokens_per_second = 20\n\n\
         [models.slow]\nupstream = \"sim\"\n"
    )
}

#[tokio::test]
async fn a_client_that_leaves_takes_its_request_off_the_running_list() {
    let gw = Srv::gateway(&slow_stream());
    let http = client();
    let mut resp = http
        .post(gw.url("/v1/chat/completions"))
        .header("x-request-id", "gone-1")
        .json(&chat_stream("slow", "hi"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let first = tokio::time::timeout(Duration::from_secs(10), resp.chunk()).await;
    assert!(matches!(first, Ok(Ok(Some(_)))), "{first:?}");
    let record = send(http.get(gw.url("/v1/requests/gone-1"))).await.json();
    assert_eq!(record["status"], "running", "{record}");
    let running = send(http.get(gw.url("/v1/requests?status=running")))
        .await
        .json();
    assert_eq!(ids(&running), [("gone-1".to_owned(), "running".to_owned())]);

    drop(resp);
    let left = || async {
        let r = send(http.get(gw.url("/v1/requests/gone-1"))).await.json();
        r["status"] == "499"
    };
    assert!(eventually(10, left).await, "the record still runs");
    let running = send(http.get(gw.url("/v1/requests?status=running")))
        .await
        .json();
    assert!(ids(&running).is_empty(), "{running}");
}
