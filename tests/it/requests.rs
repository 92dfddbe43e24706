//! `GET /v1/requests` and `GET /v1/requests/{id}`: the ring of recent
//! request records, on in-process gateways over the demo's mock upstreams
//! (paused time). A record is the event log's own lines for its request
//! (the same numbers, attempts and events), newest first, filtered, bounded
//! (the ring and each record), each key seeing only its own.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, UNIX_EPOCH};

use serde_json::Value;

use crate::common::inproc::{Gw, START};
use crate::common::{Resp, chat, chat_stream, samples};

const ENV: &[(&str, &str)] = &[
    ("K_ADMIN", "sk-admin"),
    ("K_ALICE", "sk-alice"),
    ("K_BOB", "sk-bob"),
];

const KEYS: &str = "\n[[keys]]\nname = \"admin\"\nkey_env = \"K_ADMIN\"\nadmin = true\n\n\
     [[keys]]\nname = \"alice\"\nkey_env = \"K_ALICE\"\nrpm = 3\n\n\
     [[keys]]\nname = \"bob\"\nkey_env = \"K_BOB\"\n";

/// The demo config with `extra` appended; its event log in the gateway's
/// dir, or none.
fn demo(extra: &str, event_log: bool) -> Gw {
    let text =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo.toml")).unwrap();
    let log = if event_log {
        "event_log = \"{dir}/events.jsonl\""
    } else {
        ""
    };
    let text = text.replace("event_log = \"conclave-events.jsonl\"", log);
    assert!(!event_log || text.contains("{dir}/events.jsonl"));
    // The ring is on by default (1000 records).
    Gw::start_with(&format!("{text}\n{extra}"), ENV, UNIX_EPOCH + START)
}

/// `GET path` as `key` (none: no credentials).
async fn get(gw: &Gw, path: &str, key: Option<&str>) -> Resp {
    let auth = key.map(|k| format!("Bearer {k}"));
    let headers: Vec<(&str, &str)> = auth.iter().map(|a| ("authorization", a.as_str())).collect();
    gw.get_with(path, &headers).await
}

/// A chat request on `route` with id `id` as `key`; its status.
async fn ask(gw: &Gw, route: &str, id: &str, key: Option<&str>) -> u16 {
    let auth = key.map(|k| format!("Bearer {k}"));
    let mut headers = vec![("x-request-id", id)];
    headers.extend(auth.iter().map(|a| ("authorization", a.as_str())));
    gw.chat_with(&chat(route, "hi"), &headers).await.status
}

/// The ids of a list, in its order.
async fn ids(gw: &Gw, query: &str, key: Option<&str>) -> Vec<String> {
    let r = get(gw, &format!("/v1/requests{query}"), key).await;
    assert_eq!(r.status, 200, "{query}: {}", r.text);
    r.json()["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_owned())
        .collect()
}

fn error_code(r: &Resp, status: u16) -> String {
    assert_eq!(r.status, status, "{}", r.text);
    let e = &r.json()["error"];
    assert!(
        e["message"].is_string() && e["type"].is_string(),
        "{}",
        r.text
    );
    e["code"].as_str().unwrap_or_default().to_owned()
}

#[tokio::test(start_paused = true)]
async fn a_record_is_the_event_logs_lines_for_its_request() {
    let gw = demo("", true);
    assert_eq!(ask(&gw, "review", "rq-chain", None).await, 200);
    assert_eq!(ask(&gw, "council", "rq-judge", None).await, 200);
    assert_eq!(ask(&gw, "sc", "rq-vote", None).await, 200);
    let streamed = gw
        .chat_with(
            &chat_stream("review", "hi"),
            &[("x-request-id", "rq-stream")],
        )
        .await;
    assert_eq!(streamed.status, 200);

    // The chain's tiers and verifier calls, with their verdicts and the
    // verifier's feedback.
    let chain = get(&gw, "/v1/requests/rq-chain", None).await.json();
    assert_eq!(chain["route"], "review");
    assert_eq!(chain["strategy"], "chain");
    assert_eq!(chain["status"], "200");
    assert_eq!(chain["key"], "anonymous");
    assert_eq!(chain["started_at"], START.as_secs());
    let attempts = chain["attempts"].as_array().unwrap();
    let seen: Vec<(&str, &str)> = attempts
        .iter()
        .map(|a| (a["model"].as_str().unwrap(), a["verdict"].as_str().unwrap()))
        .collect();
    assert_eq!(seen[0], ("qwen-small", "escalate"), "{seen:?}");
    assert!(seen.contains(&("gemma-large", "accept")), "{seen:?}");
    assert!(seen.iter().any(|(m, _)| *m == "verifier"), "{seen:?}");
    assert!(
        chain.to_string().contains("This is only a draft"),
        "{chain}"
    );
    assert_eq!(chain["attempts_dropped"], 0);
    // A judge's ranking and a vote's tally are the request's events.
    let judge = get(&gw, "/v1/requests/rq-judge", None).await.json();
    let kinds = |r: &Value| -> Vec<String> {
        r["events"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"].as_str().unwrap().to_owned())
            .collect()
    };
    assert!(kinds(&judge).contains(&"judge_ranking".into()), "{judge}");
    let vote = get(&gw, "/v1/requests/rq-vote", None).await.json();
    assert!(kinds(&vote).contains(&"vote_finished".into()), "{vote}");
    assert_eq!(vote["attempts"].as_array().unwrap().len(), 5, "{vote}");

    // The numbers are Prometheus's: requests by route and status, and
    // the spend over them all.
    let list = get(&gw, "/v1/requests", None).await.json();
    let list = list["data"].as_array().unwrap().clone();
    assert_eq!(list.len(), 4);
    let metrics = gw.metrics();
    let reviews = samples(
        &metrics,
        "conclave_requests_total",
        &[("route", "review"), ("status", "200")],
    );
    assert_eq!(reviews.iter().sum::<f64>(), 2.0, "{metrics}");
    let spent: f64 = samples(&metrics, "conclave_cost_usd_total", &[])
        .iter()
        .sum();
    let listed: f64 = list.iter().map(|e| e["cost_usd"].as_f64().unwrap()).sum();
    assert!(
        spent > 0.0 && (spent - listed).abs() < 1e-12,
        "{spent} {listed}"
    );

    // And the event log's: each record's fields, attempts and events are
    // its lines, exactly.
    let details: Vec<Value> = {
        let mut v = Vec::new();
        for e in &list {
            let id = e["id"].as_str().unwrap();
            v.push(get(&gw, &format!("/v1/requests/{id}"), None).await.json());
        }
        v
    };
    let lines = gw.events(&[]).await;
    let requests = gw_request_lines(&gw);
    for (entry, detail) in list.iter().zip(&details) {
        let id = entry["id"].as_str().unwrap();
        let line = requests.iter().find(|l| l["request_id"] == id).unwrap();
        for f in [
            "route",
            "key",
            "status",
            "duration_ms",
            "cost_usd",
            "strategy",
        ] {
            assert_eq!(entry[f], line[f], "{id} {f}");
        }
        assert_eq!(&detail["request"], line, "{id}");
        let mut attempts: Vec<&Value> = lines
            .iter()
            .filter(|l| l["request_id"] == id && l["event"] == "attempt")
            .collect();
        attempts.sort_by_key(|a| a["attempt"].as_u64());
        let ring: Vec<&Value> = detail["attempts"].as_array().unwrap().iter().collect();
        assert_eq!(ring, attempts, "{id}");
        let others: Vec<&Value> = lines
            .iter()
            .filter(|l| l["request_id"] == id && l["event"] != "attempt")
            .collect();
        let ring: Vec<&Value> = detail["events"].as_array().unwrap().iter().collect();
        assert_eq!(ring, others, "{id}");
    }
}

/// The `request` lines of `gw`'s event log (flushed already).
fn gw_request_lines(gw: &Gw) -> Vec<Value> {
    let text = std::fs::read_to_string(gw.dir.path().join("events.jsonl")).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|l| l["event"] == "request")
        .collect()
}

#[tokio::test(start_paused = true)]
async fn newest_first_and_every_filter() {
    let gw = demo(KEYS, false);
    let admin = Some("sk-admin");
    assert_eq!(ask(&gw, "fast", "a1", Some("sk-alice")).await, 200);
    assert_eq!(ask(&gw, "review", "b1", Some("sk-bob")).await, 200);
    tokio::time::advance(Duration::from_secs(100)).await;
    assert_eq!(ask(&gw, "fast", "a2", Some("sk-alice")).await, 200);
    assert_eq!(ask(&gw, "review", "a3", Some("sk-alice")).await, 200);
    assert_eq!(ask(&gw, "sc", "a4", Some("sk-alice")).await, 200);
    // Alice's `rpm = 3` is spent: a 429, recorded under its route.
    assert_eq!(ask(&gw, "review", "a5", Some("sk-alice")).await, 429);
    let later = START.as_secs() + 100;

    let all = ["a5", "a4", "a3", "a2", "b1", "a1"];
    assert_eq!(ids(&gw, "", admin).await, all);
    assert_eq!(ids(&gw, "?route=fast", admin).await, ["a2", "a1"]);
    assert_eq!(ids(&gw, "?key=bob", admin).await, ["b1"]);
    assert_eq!(ids(&gw, "?status=429", admin).await, ["a5"]);
    assert_eq!(ids(&gw, "?status=4xx", admin).await, ["a5"]);
    assert_eq!(
        ids(&gw, "?status=200&route=review", admin).await,
        ["a3", "b1"]
    );
    assert_eq!(ids(&gw, &format!("?since={later}"), admin).await, all[..4]);
    assert_eq!(
        ids(&gw, &format!("?until={}", later - 1), admin).await,
        ["b1", "a1"]
    );
    assert_eq!(ids(&gw, "?limit=2", admin).await, ["a5", "a4"]);
    assert_eq!(ids(&gw, "?route=nope", admin).await, Vec::<String>::new());
    // The bare path is the same list.
    let bare = get(&gw, "/requests?limit=1", admin).await.json();
    assert_eq!(bare["data"][0]["id"], "a5");
    let first = &get(&gw, "/v1/requests?limit=1", admin).await.json()["data"][0];
    let keys: Vec<&str> = first
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(
        keys,
        [
            "id",
            "route",
            "key",
            "status",
            "started_at",
            "duration_ms",
            "cost_usd",
            "strategy"
        ]
    );
    assert!(first["started_at"].as_u64().unwrap() >= later, "{first}");

    // A bad filter is a 400 naming it.
    for (q, param) in [
        ("limit=0", "limit"),
        ("since=yesterday", "since"),
        ("color=red", "color"),
    ] {
        let r = get(&gw, &format!("/v1/requests?{q}"), admin).await;
        error_code(&r, 400);
        assert_eq!(r.json()["error"]["param"], param, "{q}");
    }
}

#[tokio::test(start_paused = true)]
async fn an_arena_record_keeps_its_contestants_anonymous_for_the_key_that_asked() {
    let gw = demo(KEYS, true);
    let (admin, alice) = (Some("sk-admin"), Some("sk-alice"));
    assert_eq!(ask(&gw, "ab", "blind", alice).await, 200);
    // The models the demo's arena may pick, and what names them.
    let names = ["frontier", "second-opinion", "gemma-large", "gemma", "qwen"];
    let own = get(&gw, "/v1/requests/blind", alice).await;
    assert_eq!(own.status, 200, "{}", own.text);
    for name in names {
        assert!(!own.text.contains(name), "{name} in {}", own.text);
    }
    let record = own.json();
    let attempts = record["attempts"].as_array().unwrap();
    assert_eq!(attempts.len(), 2, "{}", own.text);
    for a in attempts {
        assert_eq!(a["model"], "contestant");
        assert_eq!(a["role"], "contestant");
        assert!(a["output_summary"].is_string() && a["duration_ms"].is_number());
        assert!(a.get("upstream").is_none() && a.get("cost_usd").is_none());
    }
    assert_eq!(record["events"], serde_json::json!([]));
    // An admin reads the whole record, as the event log has it.
    let whole = get(&gw, "/v1/requests/blind", admin).await.json();
    assert!(
        whole["events"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["event"] == "arena_started"),
        "{whole}"
    );
    assert!(whole["attempts"][0]["upstream"].is_string());
}

#[tokio::test(start_paused = true)]
async fn a_key_sees_its_own_requests_and_an_admin_all() {
    let gw = demo(KEYS, true);
    let (admin, alice, bob) = (Some("sk-admin"), Some("sk-alice"), Some("sk-bob"));
    assert_eq!(ask(&gw, "fast", "mine", alice).await, 200);
    assert_eq!(ask(&gw, "fast", "theirs", bob).await, 200);
    // Two requests may share an id: the newest is the one found.
    assert_eq!(ask(&gw, "fast", "shared", alice).await, 200);
    assert_eq!(ask(&gw, "review", "shared", bob).await, 200);

    assert_eq!(ids(&gw, "", alice).await, ["shared", "mine"]);
    assert_eq!(ids(&gw, "?key=alice", alice).await, ["shared", "mine"]);
    assert!(ids(&gw, "?key=bob", alice).await.is_empty());
    assert_eq!(ids(&gw, "", admin).await.len(), 4);
    assert_eq!(ids(&gw, "?key=bob", admin).await, ["shared", "theirs"]);

    let r = get(&gw, "/v1/requests/theirs", alice).await;
    assert_eq!(error_code(&r, 404), "request_not_found");
    assert_eq!(get(&gw, "/v1/requests/theirs", bob).await.status, 200);
    assert_eq!(get(&gw, "/v1/requests/mine", admin).await.status, 200);
    let r = get(&gw, "/v1/requests/no-such-id", admin).await;
    assert_eq!(error_code(&r, 404), "request_not_found");
    let shared = |r: Resp| r.json()["route"].as_str().unwrap().to_owned();
    assert_eq!(
        shared(get(&gw, "/v1/requests/shared", admin).await),
        "review"
    );
    assert_eq!(shared(get(&gw, "/v1/requests/shared", alice).await), "fast");

    // Credentials as everywhere else.
    for key in [None, Some("sk-wrong")] {
        for path in ["/v1/requests", "/v1/requests/mine"] {
            let r = get(&gw, path, key).await;
            assert_eq!(error_code(&r, 401), "invalid_api_key", "{path}");
        }
    }
    // Reading the ring is in no key's `rpm` (alice has 3, 2 used), and
    // never in the ring itself.
    for _ in 0..5 {
        assert_eq!(get(&gw, "/v1/requests", alice).await.status, 200);
    }
    assert_eq!(ask(&gw, "fast", "third", alice).await, 200);
    assert_eq!(ids(&gw, "", admin).await.len(), 5);
    let secret_free = get(&gw, "/v1/requests/third", admin).await.text;
    for secret in ["sk-admin", "sk-alice", "sk-bob"] {
        assert!(!secret_free.contains(secret));
    }
    let lines = gw.events(&["request"]).await;
    assert_eq!(lines.len(), 5, "{lines:?}");
}

#[tokio::test(start_paused = true)]
async fn the_ring_keeps_the_last_n_and_zero_turns_it_off() {
    let gw = demo("[console]\nrecent_requests = 3\n", false);
    for i in 0..5 {
        assert_eq!(ask(&gw, "fast", &format!("r{i}"), None).await, 200);
    }
    assert_eq!(ids(&gw, "", None).await, ["r4", "r3", "r2"]);
    let r = get(&gw, "/v1/requests/r1", None).await;
    assert_eq!(error_code(&r, 404), "request_not_found");
    assert_eq!(get(&gw, "/v1/requests/r2", None).await.status, 200);

    let off = demo(&format!("[console]\nrecent_requests = 0\n{KEYS}"), true);
    assert_eq!(ask(&off, "fast", "gone", Some("sk-admin")).await, 200);
    for path in ["/v1/requests", "/v1/requests/gone", "/requests"] {
        let r = get(&off, path, Some("sk-admin")).await;
        assert_eq!(error_code(&r, 404), "unknown_url", "{path}");
    }
    // The event log goes on without it.
    assert_eq!(off.events(&["request"]).await.len(), 1);
}

/// A chain whose (local, so verified) draft a verifier rejects with long feedback, and a vote
/// that samples it 32 times: 128 attempts in one request.
const BOUNDED: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.local]
kind = "mock"
lane = "local"

[upstreams.local.models.draft-sim]
reply = { text = "Draft: {last_user}" }

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.final-sim]
reply = { text = "Final answer: 42" }

[upstreams.sim.models.check-sim]
reply = { json = { accept = true, feedback = "" } }

[[upstreams.sim.models.check-sim.rules]]
when_contains = "Draft:"
then = { reply = { json = { accept = false, feedback = "FEEDBACK" } } }

[models.draft]
upstream = "local"
model = "draft-sim"

[models.final]
upstream = "sim"
model = "final-sim"

[models.check]
upstream = "sim"
model = "check-sim"

[routes.chain]
strategy = "chain"
tiers = ["draft", "final"]
verifier = "check"

[routes.many]
strategy = "vote"
model = "chain"
samples = 32
"#;

#[tokio::test(start_paused = true)]
async fn each_record_is_bounded() {
    use conclave::telemetry::recent::{FIELD_CHARS, MAX_ATTEMPTS};
    let feedback = "Say more. ".repeat(300);
    let gw = Gw::start(&BOUNDED.replace("FEEDBACK", &feedback));
    assert_eq!(ask(&gw, "chain", "one", None).await, 200);
    assert_eq!(ask(&gw, "many", "many", None).await, 200);

    let one = get(&gw, "/v1/requests/one", None).await.json();
    let rejected = one["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| {
            a["feedback"]
                .as_str()
                .is_some_and(|f| f.starts_with("Say more."))
        })
        .unwrap_or_else(|| panic!("{one}"));
    let cut = rejected["feedback"].as_str().unwrap();
    assert_eq!(cut.chars().count(), FIELD_CHARS + 1);
    assert!(cut.ends_with('…'));
    assert!(one["fields_cut"].as_u64().unwrap() >= 1, "{one}");

    let many = get(&gw, "/v1/requests/many", None).await;
    assert!(many.text.len() < 200 * 1024, "{}", many.text.len());
    let many = many.json();
    let kept = many["attempts"].as_array().unwrap().len();
    let lines = gw.events(&["attempt"]).await;
    let made = lines.iter().filter(|l| l["request_id"] == "many").count();
    assert!(made > MAX_ATTEMPTS, "{made}");
    assert!(kept <= MAX_ATTEMPTS, "{kept}");
    assert_eq!(many["attempts_dropped"], (made - kept) as u64);
    // The log keeps the whole feedback: only the ring is bounded.
    let longest = lines
        .iter()
        .filter_map(|l| l["feedback"].as_str())
        .map(|f| f.chars().count())
        .max();
    assert!(longest > Some(FIELD_CHARS + 1), "{longest:?}");
}

#[test]
fn recent_requests_is_checked() {
    let parse = |t: &str| {
        conclave::config::parse(t, "t.toml", &|_| None, &conclave::strategy::ALL)
            .err()
            .map(|e| e.to_string())
    };
    assert_eq!(parse("[console]\nrecent_requests = 0\n"), None);
    assert_eq!(parse("[console]\nrecent_requests = 100000\n"), None);
    for bad in ["-1", "100001", "\"many\""] {
        let e = parse(&format!("[console]\nrecent_requests = {bad}\n")).unwrap();
        assert!(e.contains("console.recent_requests"), "{bad}: {e}");
    }
    let e = parse("[console]\nrecent = 5\n").unwrap();
    assert!(e.contains("recent_requests"), "{e}");
}

#[tokio::test]
async fn a_reload_resizes_the_ring() {
    use crate::common::{Served, Srv, client, eventually, post, send};
    let config = |n: usize| {
        format!(
            "[upstreams.sim]\nkind = \"mock\"\n\n[upstreams.sim.models.echo]\n\
             reply = {{ text = \"hi\" }}\n\n[models.echo]\nupstream = \"sim\"\n\n\
             [console]\nrecent_requests = {n}\n"
        )
    };
    let gw = Srv::gateway(&config(5));
    for _ in 0..3 {
        assert_eq!(post(&gw.base, &chat("echo", "hi")).await.status, 200);
    }
    let listed = || async {
        let r = send(client().get(gw.url("/v1/requests"))).await;
        (r.status == 200).then(|| r.json()["data"].as_array().unwrap().len())
    };
    assert_eq!(listed().await, Some(3));
    for (n, want) in [(1, Some(1)), (0, None)] {
        std::fs::write(gw.path("conclave.toml"), config(n)).unwrap();
        gw.reload();
        assert!(
            eventually(10, || async { listed().await == want }).await,
            "{n}"
        );
    }
}
