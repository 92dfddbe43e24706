//! Measurements behind the server limits' figures (issue 22, findings 3
//! and 6b), ignored by default: they take a few seconds each and print
//! numbers rather than assert them. Run against a release build:
//!
//! ```text
//! cargo build --release
//! CONCLAVE_BIN=target/release/conclave cargo test --test it server_figures:: -- --ignored --nocapture --test-threads 1
//! ```
//!
//! `CONCLAVE_BIN` may name any build (an older one, for a before/after);
//! without it the test build's own binary is used.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::http::Request;
use axum::routing::post;
use bytes::Bytes;
use serde_json::json;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, sleep, timeout};

/// A gateway process started from `CONCLAVE_BIN` (or this build's binary)
/// under `ulimit -n nofile`; killed when dropped.
struct Gateway {
    child: Child,
    addr: String,
    dir: tempfile::TempDir,
}

impl Gateway {
    fn start(toml: &str, nofile: u32) -> Gateway {
        let bin = std::env::var("CONCLAVE_BIN")
            .unwrap_or_else(|_| env!("CARGO_BIN_EXE_conclave").to_owned());
        let dir = tempfile::tempdir().unwrap();
        let config = dir.path().join("conclave.toml");
        std::fs::write(&config, toml).unwrap();
        let stderr = std::fs::File::create(dir.path().join("stderr.log")).unwrap();
        let mut child = Command::new("sh")
            .arg("-c")
            .arg(format!("ulimit -n {nofile} && exec \"$0\" \"$@\""))
            .arg(&bin)
            .args(["serve", "--listen", "127.0.0.1:0", "--config"])
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .unwrap();
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let base = line.trim().rsplit(' ').next().unwrap_or_default();
        let addr = base.trim_start_matches("http://").to_owned();
        assert!(!addr.is_empty(), "{bin} did not start: {line}");
        Gateway { child, addr, dir }
    }

    fn fds(&self) -> usize {
        std::fs::read_dir(format!("/proc/{}/fd", self.child.id()))
            .map(|d| d.count())
            .unwrap_or(0)
    }

    /// Resident memory, in MiB.
    fn rss_mib(&self) -> f64 {
        self.status_mib("VmRSS:")
    }

    /// A `/proc/PID/status` figure (in kB there), in MiB.
    fn status_mib(&self, key: &str) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .unwrap_or_default();
        status
            .lines()
            .find_map(|l| l.strip_prefix(key))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
            .map_or(0.0, |kb| kb / 1024.0)
    }

    fn stderr(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("stderr.log")).unwrap_or_default()
    }
}

impl Drop for Gateway {
    /// SIGTERM first (so `MIMALLOC_SHOW_STATS=1` can print its figures),
    /// then SIGKILL if it has not exited within 5 s.
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        for _ in 0..100 {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        if std::env::var("MIMALLOC_SHOW_STATS").is_ok() {
            eprintln!("{}", self.stderr());
        }
    }
}

/// An upstream whose answers take `delay`; counts the calls it holds at once.
async fn slow_upstream(delay: Duration) -> (String, Arc<AtomicUsize>, Arc<AtomicUsize>) {
    let (now, peak) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let (n, p) = (now.clone(), peak.clone());
    let app = Router::new().route(
        "/v1/chat/completions",
        post(move || {
            let (n, p) = (n.clone(), p.clone());
            async move {
                p.fetch_max(n.fetch_add(1, Ordering::SeqCst) + 1, Ordering::SeqCst);
                sleep(delay).await;
                n.fetch_sub(1, Ordering::SeqCst);
                axum::Json(json!({
                    "id": "c", "object": "chat.completion", "created": 1, "model": "m",
                    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"},
                                 "finish_reason": "stop"}]
                }))
            }
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let a = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    (format!("http://{a}/v1"), now, peak)
}

/// 9 HTTP/2 connections each asking for 200 concurrent slow answers under
/// `max_connections = 10` and a 1,200-descriptor limit: the peak of
/// requests in flight (at the upstream) and of the gateway's descriptors.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run by hand (see the module docs)"]
async fn http2_fan_out() {
    let (up, _, peak) = slow_upstream(Duration::from_secs(5)).await;
    let gw = Gateway::start(
        &format!(
            "[server]\nmax_connections = 10\n\n[upstreams.up]\nkind = \"openai\"\nbase_url = \"{up}\"\ntimeout = \"60s\"\n\n[models.m]\nupstream = \"up\"\n"
        ),
        1200,
    );
    let fds_before = gw.fds();
    let mut sends = Vec::new();
    for _ in 0..9 {
        let tcp = TcpStream::connect(&gw.addr).await.unwrap();
        let (send, conn) = h2::client::handshake(tcp).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        sends.push(send);
    }
    let statuses = Arc::new(parking_lot::Mutex::new(Vec::<u16>::new()));
    let mut tasks = Vec::new();
    for send in &sends {
        for _ in 0..200 {
            let (send, statuses) = (send.clone(), statuses.clone());
            let uri = format!("http://{}/v1/chat/completions", gw.addr);
            tasks.push(tokio::spawn(async move {
                let req = Request::post(uri)
                    .header("content-type", "application/json")
                    .body(())
                    .unwrap();
                let body = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
                let Ok(mut send) = send.ready().await else {
                    return;
                };
                let Ok((resp, mut stream)) = send.send_request(req, false) else {
                    return;
                };
                let _ = stream.send_data(Bytes::from(body.to_string()), true);
                if let Ok(r) = resp.await {
                    statuses.lock().push(r.status().as_u16());
                }
            }));
        }
    }
    let t0 = Instant::now();
    let mut peak_fds = 0;
    while t0.elapsed() < Duration::from_secs(12) {
        peak_fds = peak_fds.max(gw.fds());
        sleep(Duration::from_millis(20)).await;
    }
    let accept_failures = gw.stderr().matches("accept failed").count();
    let got = statuses.lock().clone();
    eprintln!(
        "HTTP/2 fan-out (9 connections x 200 streams, max_connections = 10, ulimit -n 1200, 5 s answers, first 12 s):\n  \
         peak in flight at the upstream: {}\n  gateway descriptors: {fds_before} before, {peak_fds} at peak\n  \
         'accept failed' log lines: {accept_failures}\n  answers: {} x 200, {} x 503, {} others",
        peak.load(Ordering::SeqCst),
        got.iter().filter(|s| **s == 200).count(),
        got.iter().filter(|s| **s == 503).count(),
        got.iter().filter(|s| **s != 200 && **s != 503).count(),
    );
    for t in tasks {
        t.abort();
    }
}

/// A few requests, one connection each.
async fn some_requests(addr: &str, n: usize) {
    for _ in 0..n {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            .await
            .unwrap();
        let mut out = Vec::new();
        let _ = s.read_to_end(&mut out).await;
    }
}

/// 1,000 connections each sending an unfinished header line of `size`
/// bytes, held until the server closes them; prints the gateway's resident
/// memory before, at its peak, 5 s after they all closed, and after a few
/// requests more (the allocator returns freed memory as it works).
async fn flood(gw: &Gateway, size: usize) {
    let addr = gw.addr.clone();
    some_requests(&addr, 2).await;
    sleep(Duration::from_millis(500)).await;
    let before = gw.rss_mib();
    let line: Arc<Vec<u8>> = Arc::new({
        let mut v = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Flood: ".to_vec();
        v.extend(std::iter::repeat_n(b'a', size));
        v
    });
    let closed = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..1000 {
        let (addr, line, closed) = (addr.clone(), line.clone(), closed.clone());
        tasks.push(tokio::spawn(async move {
            let Ok(mut s) = TcpStream::connect(&addr).await else {
                closed.fetch_add(1, Ordering::SeqCst);
                return;
            };
            let _ = s.write_all(&line).await;
            let mut buf = [0u8; 1024];
            let _ = timeout(Duration::from_secs(60), async {
                while let Ok(1..) = s.read(&mut buf).await {}
            })
            .await;
            closed.fetch_add(1, Ordering::SeqCst);
        }));
    }
    let t0 = Instant::now();
    let mut peak: f64 = 0.0;
    while closed.load(Ordering::SeqCst) < 1000 && t0.elapsed() < Duration::from_secs(70) {
        peak = peak.max(gw.rss_mib());
        sleep(Duration::from_millis(20)).await;
    }
    let all_closed = t0.elapsed();
    sleep(Duration::from_secs(5)).await;
    let after = gw.rss_mib();
    some_requests(&addr, 100).await;
    sleep(Duration::from_secs(2)).await;
    some_requests(&addr, 100).await;
    let later = gw.rss_mib();
    let anon = gw.status_mib("RssAnon:");
    eprintln!(
        "header flood (1,000 connections x {size} B header line): RSS {before:.0} MiB before, \
         {peak:.0} MiB at peak, {after:.0} MiB 5 s after all closed (within {:.1} s), \
         {later:.0} MiB ({anon:.0} MiB anonymous) after 200 requests more",
        all_closed.as_secs_f64()
    );
    for t in tasks {
        t.abort();
    }
}

/// The header flood of the issue (380 KB lines), and one just under the
/// default `max_header_bytes` (30 KB), which the server holds until
/// `header_read_timeout`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a measurement; run by hand (see the module docs)"]
async fn header_flood_rss() {
    for size in [380_000, 30_000] {
        let gw = Gateway::start("[server]\nmax_connections = 1024\n", 4096);
        flood(&gw, size).await;
        if std::env::var("FLOOD_TWICE").is_ok() {
            flood(&gw, size).await;
        }
    }
}
