//! llama-swap awareness. Over HTTP, the mock server plays llama-swap
//! (one model loaded at a time, a load delay) and the gateway probes its
//! `/running` and reads its `sendLoadingState` banner. The local lane's
//! scheduling (order, concurrency, starvation, deadlines, a client that
//! leaves) runs in-process on paused time against the same simulator as a
//! `kind = "mock"` upstream, so its waits are exact.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::routing::get;
use common::world::closed_port;
use common::*;
use parking_lot::Mutex;
use serde_json::{Value, json};
use std::sync::atomic::Ordering;

use tokio::time::{Instant, sleep};

/// Models `a`..`d`, `slow` and `busy` of the mock upstream `up`: `slow`
/// and `busy` answer after their `ttft`.
fn swap_models(up: &str) -> String {
    format!(
        r#"
[upstreams.{up}.models.a]
reply = {{ text = "from a" }}
ttft = "100ms"

[upstreams.{up}.models.b]
reply = {{ text = "from b" }}
ttft = "100ms"

[upstreams.{up}.models.slow]
reply = {{ text = "from slow" }}
ttft = "1600ms"

[upstreams.{up}.models.busy]
reply = {{ text = "from busy" }}
ttft = "300ms"

[upstreams.{up}.models.c]
reply = {{ text = "from c" }}

[upstreams.{up}.models.d]
reply = {{ text = "from d" }}
"#
    )
}

/// A llama-swap in front of models `a`..`d`, `slow` and `busy`, taking
/// `swap` to load a model.
fn swap_mock(swap: &str, extra: &str) -> Srv {
    Srv::mock(&format!(
        "[upstreams.sim]\nkind = \"mock\"\nswap_delay = \"{swap}\"\n{extra}\n{}",
        swap_models("sim")
    ))
}

/// The same llama-swap in-process: the `kind = "mock"` upstream `local`
/// on a local lane (`lane_keys` added), whose warm state is what the
/// simulator has loaded, and a cloud upstream `cloud` serving `c2` at
/// once; `server` keys go in `[server]`. Under paused time the swaps,
/// answers, lane waits and deadlines are all tokio timers.
fn swap_sim(swap: &str, server: &str, lane_keys: &str, extra: &str) -> Arc<inproc::Gw> {
    let models: String = ["a", "b", "c", "d", "slow", "busy"]
        .iter()
        .map(|m| format!("[models.{m}]\nupstream = \"local\"\n"))
        .collect();
    Arc::new(inproc::Gw::start(&format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"
{server}

[upstreams.local]
kind = "mock"
lane = "local"
swap_delay = "{swap}"
{lane_keys}
{local}

[upstreams.cloud]
kind = "mock"

[upstreams.cloud.models.c2]
reply = {{ text = "from the cloud" }}

{models}
[models.c2]
upstream = "cloud"

{extra}
"#,
        local = swap_models("local"),
    )))
}

/// Sends `body` to the in-process gateway in a task of its own.
fn spawn_chat(gw: &Arc<inproc::Gw>, body: Value) -> tokio::task::JoinHandle<Resp> {
    let gw = gw.clone();
    tokio::spawn(async move { gw.chat(&body).await })
}

/// Loads `model` on the in-process llama-swap; the gauge shows it at once.
async fn load_in(gw: &inproc::Gw, model: &str) {
    assert_eq!(gw.chat(&chat(model, "warm up")).await.status, 200);
    let want = format!("conclave_llama_swap_warm{{upstream=\"local\",model=\"{model}\"}} 1");
    assert!(gw.metrics().contains(&want), "{}", gw.metrics());
}

/// `queued_ms` of `model`'s attempts, in the order they ended.
fn queued_of(events: &[Value], model: &str) -> Vec<f64> {
    attempts_of(events, model)
        .iter()
        .map(|e| e["queued_ms"].as_f64().unwrap())
        .collect()
}

/// A gateway whose upstream `local` is the llama-swap at `mock`, with
/// `lane_keys` added to it and every model of the mock configured.
fn gateway(mock: &Srv, lane_keys: &str, extra: &str) -> Srv {
    gateway_in(mock, "", lane_keys, extra)
}

/// [`gateway`] with `server` keys added to `[server]`.
fn gateway_in(mock: &Srv, server: &str, lane_keys: &str, extra: &str) -> Srv {
    let toml = format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"
{server}

[upstreams.local]
kind = "openai"
base_url = "{v1}"
llama_swap = "{base}"
probe_cache = "50ms"
# Far past a busy machine's slowest answer: a probe that timed out would
# read as unknown.
probe_timeout = "5s"
timeout = "20s"
{lane_keys}

{models}
{extra}
"#,
        v1 = mock.v1(),
        base = mock.base,
        models = ["a", "b", "c", "d", "slow", "busy"]
            .iter()
            .map(|m| format!("[models.{m}]\nupstream = \"local\"\n"))
            .collect::<Vec<_>>()
            .join("\n"),
    );
    Srv::gateway(&toml)
}

/// Attempt events of `model`.
fn attempts_of<'a>(events: &'a [Value], model: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["model"] == model).collect()
}

#[tokio::test]
async fn warm_labels_and_the_gauge_follow_what_is_loaded() {
    let mock = swap_mock("100ms", "");
    let gw = gateway(&mock, "", "");
    // Nothing loaded: the first call is cold.
    assert_eq!(post(&gw.base, &chat("a", "1")).await.status, 200);
    let m = gw.metrics().await;
    assert!(
        eventually(5, || async {
            let m = gw.metrics().await;
            m.contains(r#"conclave_llama_swap_warm{upstream="local",model="a"} 1"#)
                && m.contains(r#"conclave_llama_swap_warm{upstream="local",model="b"} 0"#)
        })
        .await,
        "{m}"
    );
    // a is loaded: warm. b is not: cold, and afterwards a is no longer loaded.
    assert_eq!(post(&gw.base, &chat("a", "2")).await.status, 200);
    assert_eq!(post(&gw.base, &chat("b", "3")).await.status, 200);
    let ev = gw.events_of(&["attempt"], 3).await;
    let warm: Vec<&Value> = ev.iter().map(|e| &e["warm_start"]).collect();
    assert_eq!(warm, [&json!(false), &json!(true), &json!(false)], "{ev:?}");
    assert!(
        eventually(5, || async {
            let m = gw.metrics().await;
            m.contains(r#"conclave_llama_swap_warm{upstream="local",model="a"} 0"#)
                && m.contains(r#"conclave_llama_swap_warm{upstream="local",model="b"} 1"#)
        })
        .await,
        "{}",
        gw.metrics().await
    );
    let m = gw.metrics().await;
    assert!(
        m.contains(r#"model="a",upstream="local",role="direct",verdict="ok",warm="true"} 1"#),
        "{m}"
    );
    assert!(
        m.contains(r#"model="b",upstream="local",role="direct",verdict="ok",warm="false"} 1"#),
        "{m}"
    );
    // /readyz says what llama-swap has loaded.
    let ready = get_json(&client(), &gw.url("/readyz")).await;
    assert_eq!(
        ready["llama_swap"]["local"]["loaded"],
        json!(["b"]),
        "{ready}"
    );
}

// The lane tests run in-process on paused time: a `sleep` below is the
// test's task waiting while every other task runs until it waits too and
// the clock moves to the next timer, so calls start in a fixed order and
// every wait is exact.

#[tokio::test(start_paused = true)]
async fn interleaved_requests_reach_llama_swap_batched_by_model() {
    let gw = swap_sim("300ms", "", "", "");
    load_in(&gw, "busy").await;
    let sim = gw.sim("local");
    sim.clear_recorded();
    // A B A B A, 30 ms apart, while A (busy, 300 ms a call) is loaded.
    let mut calls = Vec::new();
    for (i, m) in ["busy", "b", "busy", "b", "busy"].iter().enumerate() {
        calls.push(spawn_chat(&gw, chat(m, &format!("call {i}"))));
        sleep(Duration::from_millis(30)).await;
    }
    for c in calls {
        assert_eq!(c.await.unwrap().status, 200);
    }
    assert_eq!(gw.arrivals("local"), ["busy", "busy", "busy", "b", "b"]);
    assert_eq!(
        sim.stats.loads.load(Ordering::Relaxed),
        2,
        "busy once, then b once"
    );
    let m = gw.metrics();
    assert!(
        m.contains(r#"conclave_llama_swap_swaps_total{upstream="local"} 1"#),
        "one swap, busy to b:\n{m}"
    );
    assert!(
        m.contains(r#"conclave_generation_tokens_per_second_count{upstream="local",model="b"} 2"#),
        "{m}"
    );
    assert!(
        m.contains(r#"conclave_lane_queue_depth{upstream="local"} 0"#),
        "{m}"
    );
    let ev = gw.events(&["lane_swap", "attempt"]).await;
    let swaps: Vec<&Value> = ev.iter().filter(|e| e["event"] == "lane_swap").collect();
    assert_eq!(swaps.len(), 1, "{swaps:?}");
    assert_eq!(swaps[0]["from"], "busy");
    assert_eq!(swaps[0]["to"], "b");
    // The b calls (30 and 90 ms in) waited for the busy calls (the last
    // joined at 120 ms and ends at 420): the wait is not their duration.
    assert_eq!(queued_of(&ev, "b"), [390.0, 330.0]);
    for e in attempts_of(&ev, "b") {
        assert!(e["tokens_per_second"].as_f64().is_some(), "{e}");
        // 300 ms of load, 100 of answer.
        assert_eq!(e["duration_ms"].as_f64(), Some(400.0), "{e}");
    }
}

#[tokio::test(start_paused = true)]
async fn calls_for_the_served_model_run_up_to_max_concurrency() {
    let gw = swap_sim("0s", "", "max_concurrency = 2", "");
    load_in(&gw, "a").await;
    let started = Instant::now();
    let calls: Vec<_> = (0..4)
        .map(|i| spawn_chat(&gw, chat("a", &format!("{i}"))))
        .collect();
    for c in calls {
        assert_eq!(c.await.unwrap().status, 200);
    }
    // Two rounds of 100 ms, not one, and not four.
    assert_eq!(started.elapsed(), Duration::from_millis(200));
    let ev = gw.events(&["attempt"]).await;
    let mut queued: Vec<f64> = ev[1..]
        .iter()
        .map(|e| e["queued_ms"].as_f64().unwrap())
        .collect();
    queued.sort_by(f64::total_cmp);
    assert_eq!(queued, [0.0, 0.0, 100.0, 100.0]);
}

#[tokio::test(start_paused = true)]
async fn a_waiting_model_is_not_starved_by_a_stream_of_others() {
    let gw = swap_sim(
        "0s",
        "",
        "max_wait_swap = \"300ms\"\nmax_concurrency = 8",
        "",
    );
    load_in(&gw, "busy").await;
    gw.sim("local").clear_recorded();
    // busy (300 ms a call) is asked for every 50 ms for 1.5 s, so it is
    // never idle; b once, 100 ms in.
    let mut calls = Vec::new();
    for i in 0..30 {
        let model = if i == 2 { "b" } else { "busy" };
        calls.push(spawn_chat(&gw, chat(model, &format!("{i}"))));
        sleep(Duration::from_millis(50)).await;
    }
    for c in calls {
        assert_eq!(c.await.unwrap().status, 200);
    }
    let order = gw.arrivals("local");
    let b_at = order.iter().position(|m| m == "b").unwrap();
    // Once b has waited 300 ms (at 400 ms), no busy call joins: the seven
    // let in by then drain, and b is next.
    assert_eq!(b_at, 7, "{order:?}");
    let ev = gw.events(&["attempt"]).await;
    let b = attempts_of(&ev, "b")[0];
    // The last busy call let in (350 ms) ends at 650 ms.
    assert_eq!(b["queued_ms"].as_f64(), Some(550.0), "{b}");
}

#[tokio::test(start_paused = true)]
async fn a_cloud_call_does_not_wait_for_a_busy_local_lane() {
    let gw = swap_sim("300ms", "", "", "");
    load_in(&gw, "slow").await;
    // The lane is busy with slow (1.6 s) and b waits behind it.
    let busy = spawn_chat(&gw, chat("slow", "x"));
    let queued = spawn_chat(&gw, chat("b", "x"));
    sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    let r = gw.chat(&chat("c2", "x")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(t.elapsed(), Duration::ZERO, "the cloud answers at once");
    assert!(!busy.is_finished() && !queued.is_finished());
    assert_eq!(busy.await.unwrap().status, 200);
    assert_eq!(queued.await.unwrap().status, 200);
}

#[tokio::test(start_paused = true)]
async fn a_client_that_leaves_the_queue_never_reaches_llama_swap() {
    let gw = swap_sim("0s", "", "", "");
    load_in(&gw, "slow").await;
    let busy = spawn_chat(&gw, chat("slow", "x"));
    sleep(Duration::from_millis(100)).await;
    // The client gives up after 200 ms: its request is dropped, as a
    // closed connection drops it.
    let gone = tokio::time::timeout(
        Duration::from_millis(200),
        gw.chat(&chat("b", "never sent")),
    )
    .await;
    assert!(gone.is_err(), "the client should have given up");
    let m = gw.metrics();
    assert!(
        m.contains(r#"conclave_lane_queue_depth{upstream="local"} 0"#),
        "{m}"
    );
    assert!(!busy.is_finished(), "b left the queue while slow still ran");
    assert_eq!(busy.await.unwrap().status, 200);
    sleep(Duration::from_millis(200)).await;
    let got = gw.arrivals("local");
    assert!(!got.contains(&"b".to_owned()), "{got:?}");
    assert_eq!(gw.sim("local").running().as_deref(), Some("slow"));
    let ev = gw.events(&["attempt"]).await;
    let b = attempts_of(&ev, "b")[0];
    assert_eq!(b["verdict"], "cancelled", "{b}");
}

#[tokio::test(start_paused = true)]
async fn the_request_deadline_covers_the_lane_queue() {
    // slow takes 1.6 s of a 2 s deadline; b's deadline passes while a
    // second slow call (joining the served model) still holds the lane.
    let gw = swap_sim("0s", r#"request_timeout = "2s""#, "", "");
    load_in(&gw, "slow").await;
    let first = spawn_chat(&gw, chat("slow", "1"));
    sleep(Duration::from_millis(200)).await;
    let t = Instant::now();
    let waiting = spawn_chat(&gw, chat("b", "x"));
    sleep(Duration::from_millis(800)).await;
    let second = spawn_chat(&gw, chat("slow", "2"));
    let r = waiting.await.unwrap();
    assert_eq!(t.elapsed(), Duration::from_secs(2), "at its deadline");
    assert_eq!(r.status, 504, "{}", r.text);
    let msg = r.json()["error"]["message"].as_str().unwrap().to_owned();
    assert!(
        msg.contains("timed out waiting for the local lane"),
        "{msg}"
    );
    assert_eq!(first.await.unwrap().status, 200);
    assert_eq!(second.await.unwrap().status, 200);
    assert!(!gw.arrivals("local").contains(&"b".to_owned()));
}

/// A fake llama-swap whose `/running` answers what the test says, after
/// an optional delay.
struct FakeRunning {
    base: String,
    body: Arc<Mutex<(String, Duration)>>,
    /// How many probes arrived.
    hits: Arc<std::sync::atomic::AtomicUsize>,
}

async fn fake_running() -> FakeRunning {
    let body = Arc::new(Mutex::new((String::from("{}"), Duration::ZERO)));
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let (state, counted) = (body.clone(), hits.clone());
    let app = Router::new().route(
        "/running",
        get(move || {
            let state = state.clone();
            counted.fetch_add(1, Ordering::SeqCst);
            async move {
                let (text, delay) = state.lock().clone();
                tokio::time::sleep(delay).await;
                ([("content-type", "application/json")], text)
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    FakeRunning { base, body, hits }
}

/// A gateway on upstream `local` (the mock's models) whose llama-swap is
/// `fake`, probed every 20 ms, each probe given `probe_timeout`.
fn probed_gateway(mock: &Srv, fake: &FakeRunning, probe_timeout: &str) -> Srv {
    Srv::gateway(&format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"

[upstreams.local]
kind = "openai"
base_url = "{v1}"
llama_swap = "{fake}"
probe_cache = "20ms"
probe_timeout = "{probe_timeout}"

[models.c]
upstream = "local"
"#,
        v1 = mock.v1(),
        fake = fake.base
    ))
}

#[tokio::test]
async fn the_probe_reads_every_version_of_running_and_fails_to_unknown() {
    let fake = fake_running().await;
    let mock = swap_mock("0s", "");
    let gw = probed_gateway(&mock, &fake, "1s");
    // Each case's answer differs from the one before, so a stale cache
    // cannot pass for the new answer.
    let cases: &[(&str, u64, Value)] = &[
        (
            r#"{"running":[{"model":"c","state":"ready"}]}"#,
            0,
            json!(true),
        ),
        (
            r#"{"running":[{"model":"c","state":"starting","cmd":"llama-server","proxy":"http://127.0.0.1:9999","ttl":0,"name":"C","description":""}]}"#,
            0,
            json!(false),
        ),
        (
            r#"{"running":[{"model":"c"}],"extra":{"x":1}}"#,
            0,
            json!(true),
        ),
        (
            r#"{"running":[{"model":"c","state":"stopping"},{"model":"d","state":"ready","ttl":300}]}"#,
            0,
            json!(false),
        ),
        (r#"<html>not llama-swap</html>"#, 0, Value::Null),
        (r#"{"running":[]}"#, 0, json!(false)),
        (
            r#"{"running":[{"model":"c","state":"ready"}]}"#,
            0,
            json!(true),
        ),
        // Slower than probe_timeout: unknown.
        (
            r#"{"running":[{"model":"c","state":"ready"}]}"#,
            3000,
            Value::Null,
        ),
    ];
    let mut seen = 0;
    for (i, (body, delay_ms, want)) in cases.iter().enumerate() {
        *fake.body.lock() = (body.to_string(), Duration::from_millis(*delay_ms));
        // The cache follows within a probe or two; the deadline is for a
        // busy machine.
        let deadline = Instant::now() + Duration::from_secs(20);
        let got = loop {
            let r = post(&gw.base, &chat("c", "x")).await;
            assert_eq!(r.status, 200, "case {i}: {}", r.text);
            seen += 1;
            let got = gw.events_of(&["attempt"], seen).await[seen - 1]["warm_start"].clone();
            if got == *want || Instant::now() > deadline {
                break got;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
        };
        assert_eq!(got, *want, "case {i}: {body}");
    }
}

/// A request never waits for a probe once one has answered: with a probe
/// held for a minute (and given 30 s), requests are answered from the
/// cache while it hangs.
#[tokio::test]
async fn a_request_never_waits_for_a_slow_probe() {
    let fake = fake_running().await;
    *fake.body.lock() = (
        r#"{"running":[{"model":"c","state":"ready"}]}"#.to_owned(),
        Duration::ZERO,
    );
    let mock = swap_mock("0s", "");
    let gw = probed_gateway(&mock, &fake, "30s");
    assert_eq!(post(&gw.base, &chat("c", "x")).await.status, 200);
    let ev = gw.events_of(&["attempt"], 1).await;
    assert_eq!(ev[0]["warm_start"], true, "{}", ev[0]);
    // From now on every probe hangs; wait until one is hanging.
    fake.body.lock().1 = Duration::from_secs(60);
    let hits = fake.hits.load(Ordering::SeqCst);
    assert!(
        eventually(10, || async { fake.hits.load(Ordering::SeqCst) > hits }).await,
        "no probe after the first"
    );
    for n in 2..=4 {
        let r = tokio::time::timeout(Duration::from_secs(20), post(&gw.base, &chat("c", "x")))
            .await
            .expect("a request waited for the hanging probe");
        assert_eq!(r.status, 200, "{}", r.text);
        let ev = gw.events_of(&["attempt"], n).await;
        assert_eq!(
            ev[n - 1]["warm_start"],
            true,
            "the cached answer: {}",
            ev[n - 1]
        );
    }
}

#[tokio::test]
async fn a_probe_of_a_server_that_is_down_reads_unknown() {
    let mock = swap_mock("0s", "");
    let gw = Srv::gateway(&format!(
        "[server]\nevent_log = \"{{dir}}/events.jsonl\"\n\n[upstreams.local]\nkind = \"openai\"\nbase_url = \"{}\"\nllama_swap = \"http://127.0.0.1:{}\"\n\n[models.c]\nupstream = \"local\"\n",
        mock.v1(),
        closed_port()
    ));
    assert_eq!(post(&gw.base, &chat("c", "x")).await.status, 200);
    let ev = gw.events_of(&["attempt"], 1).await;
    assert_eq!(ev[0]["warm_start"], Value::Null, "{}", ev[0]);
    let ready = get_json(&client(), &gw.url("/readyz")).await;
    assert_eq!(ready["status"], "ready", "{ready}");
    assert_eq!(
        ready["llama_swap"]["local"]["loaded"],
        Value::Null,
        "{ready}"
    );
    assert!(
        ready["llama_swap"]["local"]["error"]
            .as_str()
            .unwrap()
            .contains("refused"),
        "{ready}"
    );
}

/// A gateway whose local lane (no probe) is a llama-swap with
/// `sendLoadingState`, plus a cloud upstream with a verifier `v` and a
/// fallback model `c2`.
async fn loading_world(routes: &str) -> (Srv, Srv, Srv) {
    let mock = swap_mock("500ms", "send_loading_state = true");
    let cloud = Srv::mock(
        "[upstreams.sim]\nkind = \"mock\"\n\n[upstreams.sim.models.c2]\nreply = { text = \"from the cloud\" }\n\n[upstreams.sim.models.v]\nreply = { json = { accept = true, feedback = \"\" } }\n",
    );
    let gw = Srv::gateway(&format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"

[upstreams.local]
kind = "openai"
base_url = "{local}"
lane = "local"

[upstreams.cloud]
kind = "openai"
base_url = "{cloud}"

[models.b]
upstream = "local"

[models.c2]
upstream = "cloud"

[models.v]
upstream = "cloud"

{routes}
"#,
        local = mock.v1(),
        cloud = cloud.v1()
    ));
    (mock, cloud, gw)
}

#[tokio::test]
async fn a_loading_banner_marks_the_call_cold_and_is_not_its_first_token() {
    let (_mock, _cloud, gw) = loading_world("").await;
    let r = post(&gw.base, &chat_stream("b", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    // The client sees llama-swap's banner (its feature), then the answer.
    let events = r.data_events();
    let first: Value = serde_json::from_str(&events[0]).unwrap();
    let banner = first["choices"][0]["delta"]["reasoning_content"].as_str();
    assert_eq!(banner, Some("━━━━━\n"), "{events:?}");
    assert!(r.text.contains("llama-swap loading model: b"), "{}", r.text);
    assert!(r.text.contains("from"), "{}", r.text);
    let ev = &gw.events_of(&["attempt"], 1).await[0];
    // Without a probe warm state would be unknown: the banner says cold.
    assert_eq!(ev["warm_start"], false, "{ev}");
    // Time to first token runs to the first real token, after the load.
    let ttft = ev["ttft_ms"].as_f64().unwrap();
    assert!(ttft >= 450.0, "{ev}");
    assert!(
        !ev["output_summary"]
            .as_str()
            .unwrap()
            .contains("llama-swap"),
        "{ev}"
    );
    // Loaded now: no banner, warm unknown again (no probe), quick TTFT.
    let r = post(&gw.base, &chat_stream("b", "again")).await;
    assert!(!r.text.contains("llama-swap loading"), "{}", r.text);
    let ev = &gw.events_of(&["attempt"], 2).await[1];
    assert_eq!(ev["warm_start"], Value::Null, "{ev}");
}

/// In-process: llama-swap's banner streams while it loads `b` (500 ms);
/// the chain's 200 ms first-token timeout moves on to the cloud exactly
/// then.
#[tokio::test(start_paused = true)]
async fn a_loading_banner_does_not_beat_a_chain_s_ttft_timeout() {
    let routes =
        "[routes.r]\nstrategy = \"chain\"\ntiers = [\"b\", \"c2\"]\nttft_timeout = \"200ms\"\n";
    let gw = swap_sim("500ms", "", "send_loading_state = true", routes);
    let t = Instant::now();
    let r = gw.chat(&chat_stream("r", "hi")).await;
    assert_eq!(t.elapsed(), Duration::from_millis(200));
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("c2"), "{}", r.text);
    assert!(r.text.contains(r#""content":" cloud""#), "{}", r.text);
    assert!(!r.text.contains("llama-swap loading"), "{}", r.text);
    let ev = gw.events(&["attempt"]).await;
    assert_eq!(ev.len(), 2, "{ev:?}");
    assert_eq!(ev[0]["model"], "b");
    assert_eq!(ev[0]["verdict"], "error", "{}", ev[0]);
    assert!(
        ev[0]["error"].as_str().unwrap().contains("first token"),
        "{}",
        ev[0]
    );
}

#[tokio::test]
async fn a_verifier_never_reads_the_loading_banner() {
    let routes = "[routes.r]\nstrategy = \"chain\"\ntiers = [\"b\", \"c2\"]\nverifier = \"v\"\n";
    let (_mock, cloud, gw) = loading_world(routes).await;
    let r = post(&gw.base, &chat_stream("r", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("b"), "{}", r.text);
    let asked = cloud.received().await;
    let verifier: Vec<&Value> = asked.iter().filter(|r| r["model"] == "v").collect();
    assert_eq!(verifier.len(), 1, "{asked:?}");
    let prompt = verifier[0]["body"].to_string();
    assert!(prompt.contains("from b"), "{prompt}");
    assert!(!prompt.contains("llama-swap"), "{prompt}");
    assert!(!prompt.contains("━━━━━"), "{prompt}");
}

/// `conclave check --probe` says what each upstream answered and what
/// each llama-swap has loaded, and fails when any cannot say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_probe_reports_what_llama_swap_has_loaded() {
    let mock = swap_mock("0s", "");
    let dir = tempfile::tempdir().unwrap();
    let write = |name: &str, extra: &str| {
        let path = dir.path().join(name);
        let text = format!(
            "[upstreams.local]\nkind = \"openai\"\nbase_url = \"{}\"\nllama_swap = \"{}\"\n\n[models.a]\nupstream = \"local\"\n{extra}",
            mock.v1(),
            mock.base
        );
        std::fs::write(&path, text).unwrap();
        path.display().to_string()
    };
    // The mock runs on this test's runtime: the CLI is waited for off it.
    let check = |path: &str| {
        let out = tokio::task::block_in_place(|| {
            std::process::Command::new(env!("CARGO_BIN_EXE_conclave"))
                .args(["check", "--probe", "--config", path])
                .output()
                .unwrap()
        });
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
        )
    };
    let good = write("good.toml", "");
    let (code, out) = check(&good);
    assert_eq!(code, Some(0), "{out}");
    assert!(
        out.contains("upstream local: answers; llama-swap has nothing loaded"),
        "{out}"
    );
    // Load a model straight on the mock, then ask again.
    assert_eq!(post(&mock.base, &chat("a", "x")).await.status, 200);
    let (_, out) = check(&good);
    assert!(out.contains("llama-swap has loaded: a"), "{out}");
    let dead = write(
        "dead.toml",
        &format!(
            "\n[upstreams.gone]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{}/v1\"\nllama_swap = \"http://127.0.0.1:{}\"\n\n[models.g]\nupstream = \"gone\"\n",
            closed_port(),
            closed_port()
        ),
    );
    let (code, out) = check(&dead);
    assert_eq!(code, Some(1), "{out}");
    assert!(out.contains("upstream gone: unreachable: connection refused; llama-swap's loaded models are unknown: connection refused"), "{out}");
}

/// A chain's `ttft_timeout` covers a local tier's wait for its lane: a tier
/// that cannot even start in time moves the chain on.
#[tokio::test(start_paused = true)]
async fn a_chain_s_ttft_timeout_covers_the_lane_queue() {
    let routes =
        "[routes.r]\nstrategy = \"chain\"\ntiers = [\"b\", \"c2\"]\nttft_timeout = \"300ms\"\n";
    let gw = swap_sim("0s", "", "", routes);
    load_in(&gw, "slow").await;
    let busy = spawn_chat(&gw, chat("slow", "x"));
    sleep(Duration::from_millis(100)).await;
    let t = Instant::now();
    let r = gw.chat(&chat_stream("r", "hi")).await;
    assert_eq!(r.status, 200, "{}", r.text);
    assert_eq!(r.header("x-conclave-served-by"), Some("c2"), "{}", r.text);
    assert_eq!(
        t.elapsed(),
        Duration::from_millis(300),
        "b's 300 ms, then c2"
    );
    assert!(!busy.is_finished(), "slow still holds the lane");
    assert_eq!(busy.await.unwrap().status, 200);
    assert!(!gw.arrivals("local").contains(&"b".to_owned()));
    let ev = gw.events(&["attempt"]).await;
    let b = attempts_of(&ev, "b")[0];
    assert!(b["error"].as_str().unwrap().contains("local lane"), "{b}");
}
