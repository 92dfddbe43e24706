//! HTTP/2 clients against the server's limits: many streams on a few
//! connections stay within `server.max_connections` requests in flight,
//! a stream whose client never opens its flow-control window still ends
//! at the request's deadline, and `http2_max_streams` and
//! `max_header_bytes` are what the server tells and enforces.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use bytes::Bytes;
use common::*;
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, timeout};

fn addr(p: &impl Served) -> String {
    p.base().trim_start_matches("http://").to_owned()
}

/// An upstream that counts the calls it is answering at once and the
/// most it ever had; each answer takes `delay`.
struct Counting {
    now: AtomicUsize,
    peak: AtomicUsize,
    calls: AtomicUsize,
}

async fn counting_upstream(delay: Duration) -> (String, Arc<Counting>) {
    let c = Arc::new(Counting {
        now: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    });
    let state = c.clone();
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let c = state.clone();
            async move {
                let n = c.now.fetch_add(1, Ordering::SeqCst) + 1;
                c.peak.fetch_max(n, Ordering::SeqCst);
                c.calls.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(delay).await;
                c.now.fetch_sub(1, Ordering::SeqCst);
                axum::Json(json!({
                    "id": "c-1", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                 "finish_reason": "stop"}],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}
                }))
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{a}/v1"), c)
}

/// An HTTP/2 (prior knowledge) connection to the gateway; `window` is the
/// client's initial stream window (`None`: h2's default).
async fn h2_connect(p: &impl Served, window: Option<u32>) -> h2::client::SendRequest<Bytes> {
    let tcp = TcpStream::connect(addr(p)).await.unwrap();
    let mut b = h2::client::Builder::new();
    if let Some(w) = window {
        b.initial_window_size(w);
    }
    let (send, conn) = b.handshake(tcp).await.unwrap();
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

fn chat_request(p: &impl Served, headers: &[(&str, &str)]) -> Request<()> {
    let mut r =
        Request::post(p.url("/v1/chat/completions")).header("content-type", "application/json");
    for (k, v) in headers {
        r = r.header(*k, *v);
    }
    r.body(()).unwrap()
}

/// What one HTTP/2 request got: its status, `Retry-After` and body, or
/// the stream error that ended it.
#[derive(Debug)]
enum Got {
    Answer {
        status: u16,
        retry_after: Option<String>,
        body: String,
    },
    Reset(String),
}

/// One request over `send`, read whole (releasing window as it reads).
async fn h2_post(send: &h2::client::SendRequest<Bytes>, req: Request<()>, body: &Value) -> Got {
    let run = async {
        let mut send = send.clone().ready().await?;
        let (resp, mut stream) = send.send_request(req, false)?;
        stream.send_data(Bytes::from(body.to_string()), true)?;
        let resp = resp.await?;
        let status = resp.status().as_u16();
        let retry_after = resp
            .headers()
            .get("retry-after")
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let mut body = resp.into_body();
        let mut out = Vec::new();
        while let Some(chunk) = body.data().await {
            let chunk = chunk?;
            let _ = body.flow_control().release_capacity(chunk.len());
            out.extend_from_slice(&chunk);
        }
        Ok::<_, h2::Error>(Got::Answer {
            status,
            retry_after,
            body: String::from_utf8_lossy(&out).into_owned(),
        })
    };
    run.await.unwrap_or_else(|e| Got::Reset(e.to_string()))
}

/// The config of a gateway in front of `upstream_v1` with `server` keys.
fn in_front(upstream_v1: &str, server: &str) -> String {
    format!(
        r#"
[server]
{server}

[upstreams.up]
kind = "openai"
base_url = "{upstream_v1}"
timeout = "30s"

[models.m]
upstream = "up"
"#
    )
}

fn gateway_in_front(upstream_v1: &str, server: &str) -> Srv {
    Srv::gateway(&in_front(upstream_v1, server))
}

/// Several HTTP/2 connections, each with many concurrent requests: the
/// requests in flight (at the upstream, and the gateway's descriptors)
/// never pass `max_connections`; the ones that find no room within
/// `header_read_timeout` get a 503 `server_busy` with `Retry-After`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn http2_streams_count_against_max_connections() {
    const CAP: usize = 4;
    const WORKERS: usize = 2;
    let (up, counts) = counting_upstream(Duration::from_millis(400)).await;
    // The process's descriptors are counted: a process.
    let gw = Proc::gateway(&in_front(
        &up,
        &format!("max_connections = {CAP}\nheader_read_timeout = \"2s\"\nworkers = {WORKERS}"),
    ));
    let fds_before = gw.open_fds();
    let peak_fds = Arc::new(AtomicUsize::new(fds_before));
    let sampling = {
        let (pid, peak) = (gw.pid(), peak_fds.clone());
        tokio::spawn(async move {
            loop {
                if let Ok(d) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
                    peak.fetch_max(d.count(), Ordering::SeqCst);
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
    };

    let mut tasks = Vec::new();
    for _ in 0..3 {
        let send = h2_connect(&gw, None).await;
        for _ in 0..10 {
            let (send, req) = (send.clone(), chat_request(&gw, &[]));
            tasks.push(tokio::spawn(async move {
                h2_post(&send, req, &chat("m", "hi")).await
            }));
        }
    }
    let mut got = Vec::new();
    for t in tasks {
        got.push(timeout(Duration::from_secs(30), t).await.unwrap().unwrap());
    }
    sampling.abort();

    let peak = counts.peak.load(Ordering::SeqCst);
    assert!(
        peak <= CAP,
        "{peak} requests were at the upstream at once (max_connections = {CAP})"
    );
    let mut ok = 0;
    for g in &got {
        match g {
            Got::Answer { status: 200, .. } => ok += 1,
            Got::Answer {
                status: 503,
                retry_after,
                body,
            } => {
                let v: Value = serde_json::from_str(body).unwrap();
                assert_eq!(v["error"]["code"], "server_busy", "{body}");
                assert_eq!(v["error"]["type"], "server_error", "{body}");
                assert_eq!(retry_after.as_deref(), Some("1"), "{body}");
            }
            other => panic!("want 200 or 503 server_busy, got {other:?}"),
        }
    }
    eprintln!("{ok} of 30 served, peak {peak} at the upstream");
    assert!(ok >= CAP, "only {ok} of 30 were served: {got:?}");
    // 3 client connections and at most CAP upstream calls in flight (one
    // descriptor each), plus slack for the runtime. Each worker keeps its
    // own idle upstream connections (as nginx's workers keep their own
    // keep-alive connections), so up to CAP of them per worker.
    let peak_fds = peak_fds.load(Ordering::SeqCst);
    assert!(
        peak_fds <= fds_before + 3 + CAP * WORKERS + 3,
        "descriptors grew from {fds_before} to {peak_fds}"
    );
}

/// `http2_max_streams` is the SETTINGS_MAX_CONCURRENT_STREAMS the server
/// sends, 16 when not set.
#[tokio::test]
async fn http2_max_streams_is_what_the_server_allows() {
    for (server, want) in [("", 16), ("http2_max_streams = 3", 3)] {
        let gw = gateway_in_front("http://127.0.0.1:9/v1", server);
        let send = h2_connect(&gw, None).await;
        // The SETTINGS frame arrives with the first exchange.
        let r = h2_post(&send, chat_request(&gw, &[]), &json!({})).await;
        assert!(matches!(r, Got::Answer { status: 400, .. }), "{r:?}");
        assert_eq!(send.current_max_send_streams(), want, "[server] {server}");
    }
}

/// Streamed answers to a client that never opens its flow-control window
/// (initial window 0): each stream still ends by the request's deadline
/// (here 1 s + 1 s body read + 1 s admission + grace), and no request is
/// left in flight.
#[tokio::test(start_paused = true)]
async fn a_stream_with_a_closed_window_ends_at_the_request_deadline() {
    let gw = Srv::gateway(
        r#"
[server]
request_timeout = "1s"
body_read_timeout = "1s"
header_read_timeout = "1s"

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.talker]
reply = { text = "a long answer that goes on and on and on and on and on and on and on and on and on and on and on and on" }
tokens_per_second = 20.0

[models.talker]
upstream = "sim"
"#,
    );
    let send = h2_connect(&gw, Some(0)).await;
    let t0 = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..10 {
        let (send, req) = (send.clone(), chat_request(&gw, &[]));
        tasks.push(tokio::spawn(async move {
            let r = h2_post(&send, req, &chat_stream("talker", "hi")).await;
            (r, t0.elapsed())
        }));
    }
    for t in tasks {
        let ended = timeout(Duration::from_secs(20), t).await;
        let (r, took) = ended
            .expect("a stream with a closed window was still open after 20 s")
            .unwrap();
        assert!(
            took < Duration::from_secs(12),
            "ended after {took:?}: {r:?}"
        );
    }
    let settled = eventually(5, || async {
        let m = gw.metrics().await;
        samples(&m, "conclave_inflight_requests", &[])
            .iter()
            .all(|v| *v == 0.0)
    })
    .await;
    assert!(settled, "requests still in flight:\n{}", gw.metrics().await);
}

/// A request head over `max_header_bytes` is refused over HTTP/2 as well
/// (431 or a refused stream); one under it is served.
#[tokio::test]
async fn http2_headers_over_max_header_bytes_are_refused() {
    let gw = gateway_in_front("http://127.0.0.1:9/v1", "max_header_bytes = 8192");
    let send = h2_connect(&gw, None).await;
    let big = "a".repeat(12 * 1024);
    let r = h2_post(&send, chat_request(&gw, &[("x-big", &big)]), &json!({})).await;
    match &r {
        Got::Answer { status, .. } => {
            assert_eq!(
                *status,
                StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE.as_u16()
            )
        }
        Got::Reset(e) => assert!(e.contains("refused"), "{e}"),
    }
    let send = h2_connect(&gw, None).await;
    let small = "a".repeat(4 * 1024);
    let r = h2_post(&send, chat_request(&gw, &[("x-small", &small)]), &json!({})).await;
    assert!(matches!(r, Got::Answer { status: 400, .. }), "{r:?}");
}
