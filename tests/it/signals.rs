//! Signals: SIGTERM drains gracefully (idle and half-read connections close
//! at once, streams finish, the event log is flushed, exit 0); past
//! `server.shutdown_grace` the rest end with a 503 or an SSE error event; a
//! second signal exits at once. SIGHUP reloads the config (a bad one keeps
//! the old) and reopens the event log for rotation.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use crate::common;

use std::time::Duration;

use common::*;
use futures::StreamExt;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

fn config(server: &str, extra: &str) -> String {
    format!(
        r#"
[server]
event_log = "{{dir}}/events.jsonl"
{server}

[upstreams.sim]
kind = "mock"

[upstreams.sim.models.ok]
reply = {{ text = "fine" }}

[upstreams.sim.models.slow]
reply = {{ text = "one two three four five six seven eight nine ten eleven twelve" }}
tokens_per_second = 12

[upstreams.sim.models.forever]
reply = {{ text = "x" }}
ttft = "60s"

[models.ok]
upstream = "sim"

[models.slow]
upstream = "sim"

[models.forever]
upstream = "sim"
{extra}
"#
    )
}

fn addr(p: &Proc) -> String {
    p.base.trim_start_matches("http://").to_owned()
}

/// Starts a streamed request and returns once its first bytes arrived.
async fn open_stream(
    p: &Proc,
    model: &str,
) -> impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + use<> {
    let r = client()
        .post(p.url("/v1/chat/completions"))
        .json(&chat_stream(model, "go"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    r.bytes_stream()
}

async fn rest(mut s: impl futures::Stream<Item = reqwest::Result<bytes::Bytes>> + Unpin) -> String {
    let mut out = Vec::new();
    while let Some(Ok(b)) = s.next().await {
        out.extend_from_slice(&b);
    }
    String::from_utf8_lossy(&out).into_owned()
}

async fn is_closed(s: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    matches!(
        timeout(within, s.read(&mut buf)).await,
        Ok(Ok(0)) | Ok(Err(_))
    )
}

#[tokio::test]
async fn sigterm_drains_streams_and_closes_idle_connections_at_once() {
    let mut gw = Proc::gateway(&config("shutdown_grace = \"20s\"", ""));
    let stream = open_stream(&gw, "slow").await;
    let mut idle = TcpStream::connect(addr(&gw)).await.unwrap();
    idle.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = [0u8; 1024];
    let _ = idle.read(&mut buf).await.unwrap();
    let fds = gw.open_fds();
    let mut half = TcpStream::connect(addr(&gw)).await.unwrap();
    half.write_all(b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    // The gateway holds the half-sent head's connection.
    let accepted = eventually(10, || async { gw.open_fds() > fds }).await;
    assert!(
        accepted,
        "the half-sent head's connection was never accepted"
    );

    gw.signal("TERM");
    assert!(
        is_closed(&mut idle, Duration::from_secs(10)).await,
        "idle connection kept open"
    );
    assert!(
        is_closed(&mut half, Duration::from_secs(10)).await,
        "half-read connection kept open"
    );
    let text = rest(Box::pin(stream)).await;
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "the stream did not finish: {text}"
    );
    assert_eq!(gw.wait_exit(10), Some(0), "{}", gw.stderr());
    let log = std::fs::read_to_string(gw.path("events.jsonl")).unwrap();
    assert!(
        log.lines()
            .any(|l| l.contains("\"model\":\"slow\"") && l.contains("\"verdict\":\"ok\"")),
        "the event log was not flushed: {log}"
    );
}

#[tokio::test]
async fn past_the_grace_period_requests_end_with_503_or_an_error_event() {
    let mut gw = Proc::gateway(&config(
        "shutdown_grace = \"300ms\"\nsse_keepalive = \"100ms\"",
        "",
    ));
    let stream = open_stream(&gw, "forever").await;
    let whole = tokio::spawn({
        let url = gw.url("/v1/chat/completions");
        async move {
            let r = client()
                .post(url)
                .json(&chat("forever", "go"))
                .send()
                .await
                .unwrap();
            (r.status().as_u16(), r.text().await.unwrap())
        }
    });
    // Both requests are in flight before the signal (a request that had
    // not arrived yet would find the port closed, not a 503).
    gw.wait_in_flight(2.0).await;
    gw.signal("TERM");
    let text = timeout(Duration::from_secs(10), rest(Box::pin(stream)))
        .await
        .unwrap();
    assert!(text.contains("server_shutting_down"), "{text}");
    let (status, body) = timeout(Duration::from_secs(10), whole)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("server_shutting_down"), "{body}");
    assert_eq!(gw.wait_exit(10), Some(0), "{}", gw.stderr());
}

#[tokio::test]
async fn a_second_signal_exits_at_once() {
    let mut gw = Proc::gateway(&config(
        "shutdown_grace = \"60s\"\nsse_keepalive = \"100ms\"",
        "",
    ));
    let _stream = open_stream(&gw, "forever").await;
    gw.signal("TERM");
    let draining = eventually(10, || async { gw.stderr().contains("draining requests") }).await;
    assert!(draining, "the first signal was not taken: {}", gw.stderr());
    assert_eq!(gw.wait_exit(0), None, "exited before the grace period");
    gw.signal("INT");
    assert_eq!(gw.wait_exit(10), Some(130));
}

#[tokio::test]
async fn sighup_reloads_a_valid_config_and_keeps_the_old_on_errors() {
    let gw = Proc::gateway(&config("", ""));
    let file = gw.path("conclave.toml");
    let stream = open_stream(&gw, "slow").await;
    // The new config adds a route and drops the model being streamed.
    let next = config(
        "",
        "[routes.fresh]\nstrategy = \"passthrough\"\nmodel = \"ok\"\n",
    )
    .replace("[models.slow]\nupstream = \"sim\"\n", "")
    .replace("{dir}", &gw.dir.path().display().to_string());
    std::fs::write(&file, next).unwrap();
    gw.signal("HUP");
    let fresh = eventually(5, || async {
        post(&gw.base, &chat("fresh", "hi")).await.status == 200
    })
    .await;
    assert!(fresh, "the reloaded route never answered: {}", gw.stderr());
    assert!(
        gw.stderr().contains("routes added: fresh"),
        "{}",
        gw.stderr()
    );
    assert!(
        gw.stderr().contains("models removed: slow"),
        "{}",
        gw.stderr()
    );
    let text = rest(Box::pin(stream)).await;
    assert!(
        text.ends_with("data: [DONE]\n\n"),
        "the in-flight stream broke: {text}"
    );
    assert_eq!(post(&gw.base, &chat("slow", "hi")).await.status, 404);

    std::fs::write(
        &file,
        "[server]\nlisten = \"nowhere\"\n[routes.x]\nstrategy = \"chain\"\n",
    )
    .unwrap();
    gw.signal("HUP");
    let logged = eventually(5, || async { gw.stderr().contains("config reload failed") }).await;
    assert!(logged, "{}", gw.stderr());
    assert_eq!(post(&gw.base, &chat("fresh", "hi")).await.status, 200);
}

#[tokio::test]
async fn sighup_reopens_the_event_log_without_losing_a_line() {
    let gw = Proc::gateway(&config("", ""));
    let log = gw.path("events.jsonl");
    let requests = 300;
    // Three rotations while requests keep coming: a quarter, half and
    // three quarters of the way through.
    let http = client();
    let mut files = Vec::new();
    for i in 0..requests {
        if i > 0 && i % 75 == 0 {
            let rotated = gw.path(&format!("events.{}.jsonl", i / 75));
            std::fs::rename(&log, &rotated).unwrap();
            gw.signal("HUP");
            files.push(rotated);
            let reopened = eventually(5, || async { log.exists() }).await;
            assert!(reopened, "SIGHUP did not reopen the event log");
        }
        post_via(&http, &gw.base, chat("ok", "hi").to_string(), &[]).await;
    }
    files.push(log);
    let lines = |p: &std::path::Path| -> Vec<String> {
        std::fs::read_to_string(p)
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    };
    // Each request writes its attempt and its request line.
    let total = || files.iter().map(|f| lines(f).len()).sum::<usize>();
    let complete = eventually(5, || async { total() >= 2 * requests }).await;
    assert!(complete, "lines lost: {} of {}", total(), 2 * requests);
    assert_eq!(total(), 2 * requests);
    for f in &files {
        assert!(
            !lines(f).is_empty(),
            "nothing was written to {}",
            f.display()
        );
        for l in lines(f) {
            let v: serde_json::Value =
                serde_json::from_str(&l).unwrap_or_else(|e| panic!("torn line ({e}): {l}"));
            assert!(v["event"] == "attempt" || v["event"] == "request", "{v}");
        }
    }
}
