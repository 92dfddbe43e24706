//! The load generator: N concurrent streamed chat completions, one HTTP/1.1 connection
//! each, ramped over a few seconds. It measures, per token event, the gap since the stream's
//! previous token (as the client sees it) and the transit time (client receive time minus
//! the upstream's send time carried in the token), and counts dropped streams.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use tokio::net::TcpStream;
use tokio::time::{timeout, Instant};

use crate::hist::Hist;
use crate::upstream::now_us;
use crate::Opts;

/// Longest SSE line kept while waiting for its end; a longer one fails the stream.
const MAX_LINE: usize = 64 * 1024;
/// Longest wait for any byte of a stream (connect, head, next event).
const IDLE: Duration = Duration::from_secs(30);

#[derive(Default)]
struct Counts {
    completed: AtomicU64,
    connect: AtomicU64,
    status: AtomicU64,
    body: AtomicU64,
    no_done: AtomicU64,
    short: AtomicU64,
    /// Still running at three times its nominal length plus a minute: cut by the load
    /// generator (the box did not keep up), not dropped by the server.
    overtime: AtomicU64,
    active: AtomicU64,
    events: AtomicU64,
}

struct Stats {
    gap: Hist,
    transit: Hist,
    /// The same, counting only events once every stream is open (`steady`: the ramp is over
    /// and a second more), so connection set-up does not blur the relay's own cost.
    steady_gap: Hist,
    steady_transit: Hist,
    steady: Instant,
    /// First token to last token of each stream that got two or more, in ms: a stream the
    /// box cannot keep up with stretches past (tokens - 1) x interval.
    span: Hist,
    n: Counts,
}

struct Target {
    addr: String,
    authority: String,
    path: String,
}

fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or("--url must start with http://")?;
    let (authority, path) = match rest.find('/') {
        Some(i) => (&rest[..i], &rest[i..]),
        None => (rest, "/"),
    };
    Ok(Target {
        addr: authority.to_string(),
        authority: authority.to_string(),
        path: path.to_string(),
    })
}

enum End {
    Ok,
    Connect,
    Status,
    Body,
    NoDone,
    Short,
    Overtime,
}

/// Takes the token's send time out of an SSE `data:` line, if it is a token chunk.
fn token_time(line: &[u8]) -> Option<u64> {
    const KEY: &[u8] = b"\"content\":\"";
    let at = line.windows(KEY.len()).position(|w| w == KEY)? + KEY.len();
    let digits = &line[at..];
    let end = digits.iter().position(|b| !b.is_ascii_digit())?;
    if end == 0 || digits[end] != b'"' {
        return None;
    }
    std::str::from_utf8(&digits[..end]).ok()?.parse().ok()
}

async fn read_events(body: &mut Incoming, s: &Stats, tokens: u64) -> End {
    let mut buf: Vec<u8> = Vec::with_capacity(512);
    let mut first: Option<Instant> = None;
    let mut last: Option<Instant> = None;
    let mut got = 0u64;
    let mut done = false;
    loop {
        let frame = match timeout(IDLE, body.frame()).await {
            Err(_) | Ok(Some(Err(_))) => return End::Body,
            Ok(None) => break,
            Ok(Some(Ok(f))) => f,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let recv_at = Instant::now();
        let recv_us = now_us();
        buf.extend_from_slice(&data);
        let mut start = 0;
        while let Some(nl) = buf[start..].iter().position(|&b| b == b'\n') {
            let line = &buf[start..start + nl];
            start += nl + 1;
            let Some(payload) = line.strip_prefix(b"data:") else {
                continue;
            };
            let payload = payload.trim_ascii();
            if payload == b"[DONE]" {
                done = true;
            } else if let Some(sent) = token_time(payload) {
                got += 1;
                s.n.events.fetch_add(1, Ordering::Relaxed);
                let transit = recv_us.saturating_sub(sent);
                s.transit.record(transit);
                let steady = recv_at >= s.steady;
                if steady {
                    s.steady_transit.record(transit);
                }
                if let Some(prev) = last {
                    let gap = recv_at.duration_since(prev).as_micros() as u64;
                    s.gap.record(gap);
                    if steady {
                        s.steady_gap.record(gap);
                    }
                }
                last = Some(recv_at);
                first.get_or_insert(recv_at);
            }
        }
        buf.drain(..start);
        if buf.len() > MAX_LINE {
            return End::Body;
        }
    }
    if let (Some(a), Some(b)) = (first, last) {
        if got > 1 {
            s.span.record(b.duration_since(a).as_millis() as u64);
        }
    }
    if !done {
        End::NoDone
    } else if got < tokens {
        End::Short
    } else {
        End::Ok
    }
}

async fn one(t: Arc<Target>, s: Arc<Stats>, tokens: u64) -> End {
    let stream = match timeout(IDLE, TcpStream::connect(&t.addr)).await {
        Ok(Ok(st)) => st,
        _ => return End::Connect,
    };
    let _ = stream.set_nodelay(true);
    let io = hyper_util::rt::TokioIo::new(stream);
    let Ok((mut sender, conn)) = hyper::client::conn::http1::handshake(io).await else {
        return End::Connect;
    };
    tokio::spawn(conn);
    let body = r#"{"model":"slow-model","stream":true,"messages":[{"role":"user","content":"Count slowly."}]}"#;
    let req = hyper::Request::post(t.path.as_str())
        .header(hyper::header::HOST, t.authority.as_str())
        .header(hyper::header::CONTENT_TYPE, "application/json")
        .body(Full::new(Bytes::from_static(body.as_bytes())));
    let Ok(req) = req else { return End::Connect };
    let mut resp = match timeout(IDLE, sender.send_request(req)).await {
        Ok(Ok(r)) => r,
        Ok(Err(_)) | Err(_) => return End::Status,
    };
    if resp.status() != hyper::StatusCode::OK {
        return End::Status;
    }
    read_events(resp.body_mut(), &s, tokens).await
}

fn us(v: u64) -> String {
    format!("{:.3}ms", v as f64 / 1000.0)
}

pub async fn run(o: Opts) -> Result<(), String> {
    let t = Arc::new(parse_url(&o.url)?);
    let began = Instant::now();
    let s = Arc::new(Stats {
        gap: Hist::new(),
        transit: Hist::new(),
        steady_gap: Hist::new(),
        steady_transit: Hist::new(),
        steady: began + o.ramp + Duration::from_secs(1),
        span: Hist::new(),
        n: Counts::default(),
    });
    let n = o.streams.max(1);
    // Each stream is bounded: three times its expected length plus a margin.
    let cap =
        o.interval * u32::try_from(o.tokens).unwrap_or(u32::MAX) * 3 + Duration::from_secs(60);
    let mut handles = Vec::with_capacity(n);
    for i in 0..n {
        let at = began + o.ramp.mul_f64(i as f64 / n as f64);
        let (t, s) = (t.clone(), s.clone());
        let tokens = o.tokens;
        handles.push(tokio::spawn(async move {
            tokio::time::sleep_until(at).await;
            s.n.active.fetch_add(1, Ordering::Relaxed);
            let end = timeout(cap, one(t, s.clone(), tokens))
                .await
                .unwrap_or(End::Overtime);
            s.n.active.fetch_sub(1, Ordering::Relaxed);
            let c = match end {
                End::Ok => &s.n.completed,
                End::Connect => &s.n.connect,
                End::Status => &s.n.status,
                End::Body => &s.n.body,
                End::NoDone => &s.n.no_done,
                End::Short => &s.n.short,
                End::Overtime => &s.n.overtime,
            };
            c.fetch_add(1, Ordering::Relaxed);
        }));
    }
    let progress = {
        let s = s.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(10));
            tick.tick().await;
            loop {
                tick.tick().await;
                eprintln!(
                    "load: {:>4.0}s active={} events={} completed={}",
                    began.elapsed().as_secs_f64(),
                    s.n.active.load(Ordering::Relaxed),
                    s.n.events.load(Ordering::Relaxed),
                    s.n.completed.load(Ordering::Relaxed)
                );
            }
        })
    };
    for h in handles {
        let _ = h.await;
    }
    progress.abort();
    let c = |a: &AtomicU64| a.load(Ordering::Relaxed);
    let dropped = n as u64 - c(&s.n.completed);
    println!(
        "url={} streams={n} tokens_each={} ramp={:?} wall={:.1}s",
        o.url,
        o.tokens,
        o.ramp,
        began.elapsed().as_secs_f64()
    );
    println!(
        "completed={} dropped={dropped} connect={} status={} body={} no_done={} short={} overtime={}",
        c(&s.n.completed),
        c(&s.n.connect),
        c(&s.n.status),
        c(&s.n.body),
        c(&s.n.no_done),
        c(&s.n.short),
        c(&s.n.overtime)
    );
    let offered = n as f64 / o.interval.as_secs_f64();
    println!(
        "events={} offered_per_s={offered:.0} stream_ms p50={} p99={} max={} expected={}",
        c(&s.n.events),
        s.span.quantile(0.5),
        s.span.quantile(0.99),
        s.span.max(),
        (o.interval * u32::try_from(o.tokens.saturating_sub(1)).unwrap_or(u32::MAX)).as_millis()
    );
    for (name, h) in [
        ("gap", &s.gap),
        ("transit", &s.transit),
        ("steady_gap", &s.steady_gap),
        ("steady_transit", &s.steady_transit),
    ] {
        println!(
            "{name}_us p50={} p99={} p999={} max={} n={}   ({name}: p50 {} p99 {} max {})",
            h.quantile(0.5),
            h.quantile(0.99),
            h.quantile(0.999),
            h.max(),
            h.count(),
            us(h.quantile(0.5)),
            us(h.quantile(0.99)),
            us(h.max())
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_times() {
        let l = br#"{"choices":[{"index":0,"delta":{"content":"1764036542123456"},"finish_reason":null}]}"#;
        assert_eq!(token_time(l), Some(1_764_036_542_123_456));
        assert_eq!(token_time(br#"{"delta":{"content":""}}"#), None);
        assert_eq!(token_time(br#"{"delta":{"content":"12ab"}}"#), None);
        assert_eq!(token_time(br#"{"delta":{}}"#), None);
    }

    #[test]
    fn urls() {
        let t = parse_url("http://127.0.0.1:18101/v1/chat/completions").unwrap();
        assert_eq!(t.addr, "127.0.0.1:18101");
        assert_eq!(t.path, "/v1/chat/completions");
    }
}
