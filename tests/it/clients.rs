//! Clients that hold resources: half-sent headers, trickled bodies, idle
//! keep-alive connections, floods beyond `server.max_connections`, heads
//! over `max_header_bytes` and clients that stop reading are all bounded,
//! `/healthz` keeps answering through them, and at the cap the
//! longest-idle connection makes room for a new one.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use common::*;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{Instant, timeout};

/// A gateway process (for the tests that count its descriptors).
fn gateway(server: &str) -> Proc {
    Proc::gateway(&config(server))
}

/// The gateway in-process.
fn in_process(server: &str) -> Srv {
    Srv::gateway(&config(server))
}

fn config(server: &str) -> String {
    format!(
        r#"
[server]
{server}

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.ok]
reply = {{ text = "fine" }}

[models.ok]
upstream = "sim"
"#
    )
}

fn addr(p: &impl Served) -> String {
    p.base().trim_start_matches("http://").to_owned()
}

/// A connection that sent part of a request head.
async fn half_head(p: &impl Served) -> TcpStream {
    let mut s = TcpStream::connect(addr(p)).await.unwrap();
    s.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nX-Slow: ")
        .await
        .unwrap();
    s
}

/// Waits for the server to close `s`; how long that took.
async fn closed_within(s: &mut TcpStream, limit: Duration) -> Option<Duration> {
    let t0 = Instant::now();
    let mut buf = [0u8; 4096];
    loop {
        match timeout(limit.saturating_sub(t0.elapsed()), s.read(&mut buf)).await {
            Err(_) => return None,
            Ok(Ok(0)) | Ok(Err(_)) => return Some(t0.elapsed()),
            Ok(Ok(_)) => {}
        }
    }
}

async fn healthz_fast(p: &impl Served) -> bool {
    let r = timeout(
        Duration::from_secs(10),
        client().get(p.url("/healthz")).send(),
    )
    .await;
    matches!(r, Ok(Ok(r)) if r.status() == 200)
}

#[tokio::test]
async fn half_sent_headers_are_closed_and_healthz_answers_meanwhile() {
    let gw = gateway("header_read_timeout = \"500ms\"\nmax_connections = 400");
    let fds = gw.open_fds();
    let mut slow = Vec::new();
    for _ in 0..200 {
        slow.push(half_head(&gw).await);
    }
    assert!(
        healthz_fast(&gw).await,
        "/healthz did not answer under the flood"
    );
    for s in &mut slow {
        let took = closed_within(s, Duration::from_secs(10)).await;
        assert!(took.is_some(), "a half-sent request head was kept open");
    }
    let settled = eventually(5, || async { gw.open_fds() <= fds + 4 }).await;
    assert!(
        settled,
        "descriptors not released: {} -> {}",
        fds,
        gw.open_fds()
    );
}

#[tokio::test]
async fn a_trickled_body_ends_with_408_and_a_huge_declared_body_with_413() {
    let gw = in_process("body_read_timeout = \"400ms\"");
    let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"model\":",
    )
    .await
    .unwrap();
    let mut out = Vec::new();
    let read = timeout(Duration::from_secs(10), async {
        let mut buf = [0u8; 4096];
        loop {
            // Keep trickling: the deadline must hold even while bytes come.
            let _ = s.write_all(b" ").await;
            match timeout(Duration::from_millis(50), s.read(&mut buf)).await {
                Ok(Ok(0)) | Ok(Err(_)) => break,
                Ok(Ok(n)) => {
                    out.extend_from_slice(&buf[..n]);
                    if out.windows(4).any(|w| w == b"}}\n\n") || out.ends_with(b"}}") {
                        break;
                    }
                }
                Err(_) => {}
            }
        }
    })
    .await;
    assert!(read.is_ok(), "a trickled body was never cut off");
    let text = String::from_utf8_lossy(&out);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(text.contains("request_body_timeout"), "{text}");

    let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
    s.write_all(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Length: 10000000000\r\n\r\n{",
    )
    .await
    .unwrap();
    let mut buf = vec![0u8; 4096];
    let n = timeout(Duration::from_secs(10), s.read(&mut buf))
        .await
        .expect("no answer to a 10 GB body")
        .unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.starts_with("HTTP/1.1 413"), "{text}");
}

#[tokio::test]
async fn idle_keep_alive_connections_are_closed() {
    let gw = in_process("idle_timeout = \"300ms\"");
    let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    let took = closed_within(&mut s, Duration::from_secs(10)).await;
    let took = took.expect("an idle keep-alive connection was kept open");
    assert!(
        took >= Duration::from_millis(200),
        "closed too early: {took:?}"
    );
}

#[tokio::test]
async fn connections_past_the_cap_wait_in_the_backlog() {
    // The held connections time out 5 s after they connect: long enough
    // that setting up the rest, even on a busy machine, ends before.
    let gw = gateway("max_connections = 20\nheader_read_timeout = \"5s\"");
    let fds = gw.open_fds();
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(half_head(&gw).await);
    }
    // Every held connection accepted (a slot each) before more come: each
    // worker accepts from its own queue, and one that took a queued
    // connection first would give its slot back when those are dropped.
    let accepted = eventually(10, || async { gw.open_fds() >= fds + 20 }).await;
    assert!(accepted, "the 20 held connections were not all accepted");
    // 100 more connect (the kernel queues them) but take no descriptor.
    let mut queued = Vec::new();
    for _ in 0..100 {
        queued.push(TcpStream::connect(addr(&gw)).await.unwrap());
    }
    // The gateway takes the one connection over the cap (and waits for a
    // slot for it), then no more.
    let over = eventually(10, || async { gw.open_fds() > fds + 20 }).await;
    assert!(over, "no connection over the cap was accepted");
    assert!(
        gw.open_fds() <= fds + 20 + 2,
        "connections past the cap took descriptors: {} -> {}",
        fds,
        gw.open_fds()
    );
    let mut waiting = TcpStream::connect(addr(&gw)).await.unwrap();
    drop(queued);
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let early = timeout(Duration::from_millis(300), waiting.read(&mut buf)).await;
    assert!(
        early.is_err(),
        "a connection past the cap was served at once"
    );
    // Once the held connections time out, the waiting one is served.
    let n = timeout(Duration::from_secs(20), waiting.read(&mut buf))
        .await
        .expect("the waiting connection was never served")
        .unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
}

/// A keep-alive connection that has been served once and now idles.
async fn served_then_idle(p: &impl Served) -> TcpStream {
    let mut s = TcpStream::connect(addr(p)).await.unwrap();
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let n = s.read(&mut buf).await.unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    s
}

/// On paused time: the idle ages below are the server's tokio timers.
#[tokio::test(start_paused = true)]
async fn at_the_cap_the_longest_idle_connection_makes_room() {
    let gw = in_process("max_connections = 4\nidle_timeout = \"60s\"");
    let mut idle = Vec::new();
    for _ in 0..4 {
        idle.push(served_then_idle(&gw).await);
        tokio::time::advance(Duration::from_millis(100)).await;
    }
    // Idle for longer than the shortest idle time that may be cut short.
    tokio::time::advance(Duration::from_millis(1200)).await;
    let t0 = Instant::now();
    assert!(
        healthz_fast(&gw).await,
        "a new connection waited for an idle one to time out"
    );
    // Far under the 60 s idle timeout it would otherwise wait for.
    assert!(t0.elapsed() < Duration::from_secs(10));
    let oldest = closed_within(&mut idle[0], Duration::from_secs(10)).await;
    assert!(
        oldest.is_some(),
        "the longest-idle connection is still open"
    );
    for s in &mut idle[1..] {
        assert!(
            closed_within(s, Duration::from_millis(200)).await.is_none(),
            "a connection that was not the longest idle was closed"
        );
    }
}

#[tokio::test]
async fn a_request_head_over_max_header_bytes_is_431() {
    let gw = gateway("");
    let fds = gw.open_fds();
    // 100 KB: under hyper's own 400 KB buffer, over the 32 KiB default.
    let mut head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', 100 * 1024));
    head.extend_from_slice(b"\r\n\r\n");
    for _ in 0..20 {
        let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
        let (mut rd, mut wr) = s.split();
        let head = head.clone();
        let write = async move {
            // The server may stop reading at its bound: ignore the rest.
            let _ = wr.write_all(&head).await;
        };
        let read = async {
            let mut out = Vec::new();
            let mut buf = [0u8; 4096];
            while let Ok(Ok(n @ 1..)) = timeout(Duration::from_secs(5), rd.read(&mut buf)).await {
                out.extend_from_slice(&buf[..n]);
            }
            out
        };
        let ((), out) = tokio::join!(write, read);
        let text = String::from_utf8_lossy(&out);
        assert!(text.starts_with("HTTP/1.1 431"), "{text}");
    }
    // A head under the bound is served as before.
    let mut s = TcpStream::connect(addr(&gw)).await.unwrap();
    let mut head = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: ".to_vec();
    head.extend(std::iter::repeat_n(b'a', 16 * 1024));
    head.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
    s.write_all(&head).await.unwrap();
    let mut out = Vec::new();
    s.read_to_end(&mut out).await.unwrap();
    assert!(String::from_utf8_lossy(&out).starts_with("HTTP/1.1 200"));
    let settled = eventually(5, || async { gw.open_fds() <= fds + 2 }).await;
    assert!(settled, "descriptors: {fds} -> {}", gw.open_fds());
}

/// An upstream whose streamed answer never ends and always has the next
/// chunk ready: only a client that does not read can hold it up. With it,
/// how many of its answers are being sent (one ends when the gateway drops
/// its connection).
async fn endless_upstream() -> (String, Arc<AtomicUsize>) {
    use axum::body::{Body, Bytes};
    /// Counts an answer as sent while its stream lives.
    struct Live(Arc<AtomicUsize>);
    impl Drop for Live {
        fn drop(&mut self) {
            self.0.fetch_sub(1, Ordering::SeqCst);
        }
    }
    let chunk = Bytes::from(format!(
        "data: {}\n\n",
        serde_json::json!({"id": "c", "object": "chat.completion.chunk", "created": 1, "model": "m",
            "choices": [{"index": 0, "delta": {"content": "w".repeat(4000)}, "finish_reason": null}]})
    ));
    let live = Arc::new(AtomicUsize::new(0));
    let sending = live.clone();
    let app = axum::Router::new().route(
        "/v1/chat/completions",
        axum::routing::post(move || {
            let chunk = chunk.clone();
            sending.fetch_add(1, Ordering::SeqCst);
            let held = Live(sending.clone());
            async move {
                let s = futures::stream::repeat_with(move || {
                    let _ = &held;
                    Ok::<_, std::io::Error>(chunk.clone())
                });
                axum::response::Response::builder()
                    .header("content-type", "text/event-stream")
                    .body(Body::from_stream(s))
                    .unwrap()
            }
        }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{a}/v1"), live)
}

/// On paused time: the request's limit is the server's tokio timer.
#[tokio::test(start_paused = true)]
async fn an_http1_client_that_stops_reading_is_cut_off_at_the_request_limit() {
    let (up, live) = endless_upstream().await;
    let gw = Srv::gateway(&format!(
        r#"
[server]
request_timeout = "1s"
body_read_timeout = "1s"
header_read_timeout = "1s"

[upstreams.up]
kind = "openai"
base_url = "{up}"
timeout = "60s"
stream_idle_timeout = "60s"

[models.m]
upstream = "up"
context_window = 8192
"#
    ));
    let sock = tokio::net::TcpSocket::new_v4().unwrap();
    sock.set_recv_buffer_size(4096).unwrap();
    let mut s = sock.connect(addr(&gw).parse().unwrap()).await.unwrap();
    let body = chat_stream("m", "hi").to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    s.write_all(format!("{head}{body}").as_bytes())
        .await
        .unwrap();
    let called = eventually(10, || async { live.load(Ordering::SeqCst) == 1 }).await;
    assert!(called, "the upstream was never called");
    // The client reads nothing until past the request's limit (1 s slot
    // wait + 1 s body + 1 s request + 2 s grace): the answer is stuck
    // behind it, so the handler cannot end it; the server must. (The
    // connection to the upstream goes with it.)
    tokio::time::sleep(Duration::from_secs(7)).await;
    let closed = eventually(10, || async { live.load(Ordering::SeqCst) == 0 }).await;
    assert!(
        closed,
        "the upstream connection of a request past its limit is still open"
    );
    // What was sent before reaches the client, then the end.
    let mut buf = vec![0u8; 64 * 1024];
    let drained = timeout(Duration::from_secs(10), async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    assert!(drained.is_ok(), "the connection was left open");
}
