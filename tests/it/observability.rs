//! Metrics, the event log, `/v1/models`, `/healthz` and `/readyz`.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use common::*;
use futures::StreamExt;
use serde_json::json;
use std::time::Duration;

const GATEWAY: &str = r#"
[server]
event_log = "{dir}/events.jsonl"

[upstreams.sim]
kind = "mock"
lane = "local"
swap_delay = "20ms"

[upstreams.sim.models.small]
reply = { text = "hello from small" }
usage = { prompt_tokens = 1000, completion_tokens = 2000 }

[upstreams.sim.models.big]
reply = { text = "hello from big" }
ttft = "30ms"

[models.small]
upstream = "sim"
price = { input_per_mtok = 1.0, output_per_mtok = 10.0 }

[models.big]
upstream = "sim"

[routes.fast]
strategy = "passthrough"
model = "small"
"#;

/// The value of the series whose line starts with `prefix` (labels included).
fn series(text: &str, prefix: &str) -> Option<f64> {
    text.lines()
        .find(|l| l.starts_with(prefix))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

#[tokio::test]
async fn metrics_follow_the_contract() {
    let gw = Srv::gateway(GATEWAY);
    assert_eq!(post(&gw.base, &chat("fast", "hi")).await.status, 200);
    assert_eq!(post(&gw.base, &chat_stream("big", "hi")).await.status, 200);
    assert_eq!(
        post(&gw.base, &chat("made-up-model", "hi")).await.status,
        404
    );

    let resp = client().get(gw.url("/metrics")).send().await.unwrap();
    assert!(
        resp.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("text/plain"),
        "{:?}",
        resp.headers()
    );
    let text = resp.text().await.unwrap();
    let expect = [
        r#"conclave_requests_total{route="fast",strategy="passthrough",status="200"} 1"#,
        r#"conclave_requests_total{route="big",strategy="passthrough",status="200"} 1"#,
        r#"conclave_requests_total{route="unknown",strategy="none",status="404"} 1"#,
        r#"conclave_attempts_total{route="fast",strategy="passthrough",model="small",upstream="sim",role="direct",verdict="ok",warm="false"} 1"#,
        r#"conclave_tokens_total{model="small",kind="input"} 1000"#,
        r#"conclave_tokens_total{model="small",kind="output"} 2000"#,
        r#"conclave_cost_usd_total{model="small",key="anonymous"} 0.021"#,
        r#"conclave_inflight_requests{route="fast"} 0"#,
        // What the simulated llama-swap holds now: the last model asked.
        r#"conclave_llama_swap_warm{upstream="sim",model="big"} 1"#,
        r#"conclave_llama_swap_warm{upstream="sim",model="small"} 0"#,
    ];
    for e in expect {
        assert!(text.contains(e), "missing {e}\n{text}");
    }
    for h in [
        r#"conclave_request_duration_seconds_bucket{route="fast",strategy="passthrough",le="#,
        r#"conclave_overhead_seconds_bucket{route="big",strategy="passthrough",le="#,
        r#"conclave_attempt_duration_seconds_bucket{route="fast",strategy="passthrough",model="small",role="direct",le="#,
        r#"conclave_attempt_ttft_seconds_bucket{route="big",model="big",le="#,
    ] {
        assert!(text.contains(h), "missing histogram {h}\n{text}");
    }
    // The client's first token: the whole answer for a whole request, the
    // first content chunk (after the mock's 30 ms) for a stream.
    for route in ["fast", "big"] {
        let n = series(
            &text,
            &format!(
                r#"conclave_request_ttft_seconds_count{{route="{route}",strategy="passthrough"}}"#
            ),
        );
        assert_eq!(n, Some(1.0), "{route}");
    }
    let seen = series(
        &text,
        r#"conclave_request_ttft_seconds_sum{route="big",strategy="passthrough"}"#,
    )
    .unwrap();
    assert!(seen >= 0.03, "client ttft {seen}");
    // Only streamed answers have an upstream time to first token.
    assert!(!text.contains(r#"conclave_attempt_ttft_seconds_count{route="fast""#));
    let ttft = series(
        &text,
        r#"conclave_attempt_ttft_seconds_sum{route="big",model="big"}"#,
    )
    .unwrap();
    assert!(ttft >= 0.03, "ttft {ttft}");
    // A made-up model name never becomes a label value.
    assert!(!text.contains("made-up-model"), "{text}");
}

#[tokio::test]
async fn the_event_log_has_one_attempt_per_upstream_call() {
    let gw = Srv::gateway(GATEWAY);
    let r = post_with(
        &gw.base,
        &chat("fast", "hi"),
        &[("x-request-id", "trace-42")],
    )
    .await;
    assert_eq!(r.header("x-request-id"), Some("trace-42"));
    let ev = &gw.events(1).await[0];
    assert_eq!(ev["event"], "attempt");
    assert_eq!(ev["request_id"], "trace-42");
    assert_eq!(ev["route"], "fast");
    assert_eq!(ev["attempt"], 1);
    assert_eq!(ev["model"], "small");
    assert_eq!(ev["upstream"], "sim");
    assert_eq!(ev["role"], "direct");
    assert_eq!(ev["verdict"], "ok");
    assert_eq!(ev["warm_start"], false);
    assert_eq!(ev["input_tokens"], 1000);
    assert_eq!(ev["output_tokens"], 2000);
    assert_eq!(ev["cost_usd"], 0.021);
    assert_eq!(ev["output_summary"], "hello from small");
    assert!(ev["duration_ms"].as_f64().unwrap() >= 20.0, "{ev}");
    assert!(ev["ts"].as_str().unwrap().ends_with('Z'));

    // A second call to the loaded model is warm; a streamed one has a TTFT.
    post(&gw.base, &chat_stream("fast", "again")).await;
    let ev = &gw.events(2).await[1];
    assert_eq!(ev["warm_start"], true);
    assert!(ev["ttft_ms"].as_f64().is_some(), "{ev}");
    assert_eq!(ev["output_summary"], "hello from small");
}

#[tokio::test]
async fn models_health_and_readiness() {
    let gw = Srv::gateway(GATEWAY);
    let models = get_json(&client(), &gw.url("/v1/models")).await;
    assert_eq!(models["object"], "list");
    let ids: Vec<&str> = models["data"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["small", "big", "fast"]);
    assert_eq!(models["data"][2]["object"], "model");
    assert_eq!(models["data"][2]["owned_by"], "conclave");
    assert_eq!(
        models["data"][2]["conclave"],
        json!({"strategy": "passthrough", "route": true})
    );

    let h = client().get(gw.url("/healthz")).send().await.unwrap();
    assert_eq!(h.status(), 200);
    let r = client().get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(
        r.json::<serde_json::Value>().await.unwrap()["upstreams"]["sim"],
        "ok"
    );
}

#[tokio::test]
async fn readiness_fails_while_an_upstream_is_unreachable() {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let gw = Srv::gateway(&format!(
        "[upstreams.gone]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:{port}/v1\"\n\n[models.m]\nupstream = \"gone\"\n"
    ));
    let r = client().get(gw.url("/readyz")).send().await.unwrap();
    assert_eq!(r.status(), 503);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["status"], "not_ready");
    assert!(
        body["upstreams"]["gone"]
            .as_str()
            .unwrap()
            .contains("connection refused"),
        "{body}"
    );
    assert_eq!(
        client()
            .get(gw.url("/healthz"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
}

#[tokio::test]
async fn a_made_up_name_never_becomes_a_label_value() {
    let gw = Srv::gateway(GATEWAY);
    let made_up = "made-up-model-7f3a";
    let http = client();
    assert_eq!(post(&gw.base, &chat(made_up, "hi")).await.status, 404);
    assert_eq!(
        post(&gw.base, &chat_stream(made_up, "hi")).await.status,
        404
    );
    for path in ["/v1/embeddings", "/v1/completions"] {
        let r = http
            .post(gw.url(path))
            .json(&json!({"model": made_up, "input": "x", "prompt": "x"}))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 404, "{path}");
    }
    let r = http
        .get(gw.url(&format!("/v1/models/{made_up}")))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    // A pin, a session and a request id are the client's words too.
    let r = post_with(
        &gw.base,
        &chat("fast", "hi"),
        &[
            ("x-conclave-pin", made_up),
            ("x-conclave-session", made_up),
            ("x-request-id", made_up),
        ],
    )
    .await;
    assert!(r.status == 200 || r.status == 400, "{}", r.status);
    let r = http
        .post(gw.url(&format!("/v1/arena/{made_up}/vote")))
        .json(&json!({"pick": "A"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 404);
    let text = gw.metrics().await;
    assert!(!text.contains(made_up), "{text}");
    assert!(
        text.contains(r#"conclave_requests_total{route="unknown",strategy="none",status="404"}"#),
        "{text}"
    );
}

/// Opens a FIFO for reading on a thread of its own (opening blocks until
/// the gateway opens it for writing) and hands back the reader.
fn fifo_reader(path: std::path::PathBuf) -> std::sync::mpsc::Receiver<std::fs::File> {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(std::fs::File::open(path).unwrap());
    });
    rx
}

#[tokio::test]
async fn a_stuck_event_log_drops_and_counts_events_and_never_slows_requests() {
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("events.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    let reader = fifo_reader(fifo.clone());
    // Nobody reads the FIFO yet: once the pipe's 64 KiB are full, the
    // writer blocks, its queue of 50 fills, and every later event drops.
    let gw = Proc::gateway(&GATEWAY.replace(
        "event_log = \"{dir}/events.jsonl\"",
        &format!("event_log = \"{}\"\nevent_log_buffer = 50", fifo.display()),
    ));
    let reader = reader.recv_timeout(Duration::from_secs(10)).unwrap();
    let requests = 400;
    let started = tokio::time::Instant::now();
    let http = client();
    let sent = futures::stream::iter(0..requests)
        .map(|_| {
            let (http, base) = (http.clone(), gw.base.clone());
            async move {
                post_via(&http, &base, chat("fast", "hi").to_string(), &[])
                    .await
                    .status
            }
        })
        .buffer_unordered(8)
        .collect::<Vec<u16>>();
    let statuses = tokio::time::timeout(Duration::from_secs(60), sent)
        .await
        .expect("requests hung behind a stuck event log");
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let took = started.elapsed();
    let dropped = series(&gw.metrics().await, "conclave_events_dropped_total ").unwrap();
    assert!(dropped > 0.0, "nothing was dropped");

    // Reading the FIFO lets the writer go on; a graceful stop flushes the
    // rest. Every line is whole, and lines plus drops are every event.
    let read = std::thread::spawn(move || {
        let mut text = String::new();
        std::io::Read::read_to_string(&mut { reader }, &mut text).unwrap();
        text
    });
    gw.signal("TERM");
    let text = tokio::task::spawn_blocking(move || read.join().unwrap())
        .await
        .unwrap();
    let lines: Vec<&str> = text.lines().collect();
    for l in &lines {
        let v: serde_json::Value =
            serde_json::from_str(l).unwrap_or_else(|e| panic!("torn line ({e}): {l}"));
        assert!(v["event"] == "attempt" || v["event"] == "request", "{v}");
    }
    assert_eq!(
        lines.len() as f64 + dropped,
        2.0 * f64::from(requests),
        "lines lost without being counted ({took:?} for the requests)"
    );
}
