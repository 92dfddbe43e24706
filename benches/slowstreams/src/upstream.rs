//! The slow upstream: an OpenAI-compatible server whose streamed chat completions send one
//! chunk every interval for a fixed duration. Each chunk's content is its send time in µs
//! since the UNIX epoch, so the client can compute each event's transit time.

use std::convert::Infallible;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper::body::{Body, Frame, Incoming, SizeHint};
use hyper::{Method, Request, Response, StatusCode};
use tokio::net::TcpSocket;
use tokio::time::{Interval, MissedTickBehavior};

use crate::Opts;

/// Microseconds since the UNIX epoch, the clock both processes share.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_micros() as u64)
        .unwrap_or(0)
}

const MODELS: &str = r#"{"object":"list","data":[{"id":"slow-model","object":"model","created":0,"owned_by":"bench"}]}"#;
const WHOLE: &str = r#"{"id":"chatcmpl-slow","object":"chat.completion","created":1700000000,"model":"slow-model","choices":[{"index":0,"message":{"role":"assistant","content":"slow"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":1,"total_tokens":6}}"#;

enum Phase {
    Tokens,
    Done,
}

/// A streamed answer: one token chunk per tick of an interval (a late tick delays the next
/// one instead of bursting to catch up) until duration / interval tokens are out,
/// then the final chunk with `usage` and `[DONE]` in one frame.
struct SlowSse {
    tick: Interval,
    tokens: u64,
    sent: u64,
    phase: Phase,
}

impl SlowSse {
    fn new(interval: Duration, duration: Duration) -> Self {
        let mut tick = tokio::time::interval(interval);
        // A late tick moves the next one an interval later: no bursts that would hide a stall.
        tick.set_missed_tick_behavior(MissedTickBehavior::Delay);
        // duration / interval tokens, counted (not timed) so every stream sends exactly as many.
        let tokens = (duration.as_micros() / interval.as_micros().max(1)) as u64;
        SlowSse {
            tick,
            tokens,
            sent: 0,
            phase: Phase::Tokens,
        }
    }
}

impl Body for SlowSse {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        if let Phase::Done = self.phase {
            return Poll::Ready(None);
        }
        if self.tick.poll_tick(cx).is_pending() {
            return Poll::Pending;
        }
        if self.sent >= self.tokens {
            self.phase = Phase::Done;
            let n = self.sent;
            let last = format!(
                "data: {{\"id\":\"chatcmpl-slow\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"slow-model\",\"choices\":[{{\"index\":0,\"delta\":{{}},\"finish_reason\":\"stop\"}}],\"usage\":{{\"prompt_tokens\":5,\"completion_tokens\":{n},\"total_tokens\":{}}}}}\n\ndata: [DONE]\n\n",
                n + 5
            );
            return Poll::Ready(Some(Ok(Frame::data(Bytes::from(last)))));
        }
        self.sent += 1;
        let chunk = format!(
            "data: {{\"id\":\"chatcmpl-slow\",\"object\":\"chat.completion.chunk\",\"created\":1700000000,\"model\":\"slow-model\",\"choices\":[{{\"index\":0,\"delta\":{{\"content\":\"{}\"}},\"finish_reason\":null}}]}}\n\n",
            now_us()
        );
        Poll::Ready(Some(Ok(Frame::data(Bytes::from(chunk)))))
    }

    fn is_end_stream(&self) -> bool {
        matches!(self.phase, Phase::Done)
    }

    fn size_hint(&self) -> SizeHint {
        SizeHint::default()
    }
}

type Answer = http_body_util::Either<Full<Bytes>, SlowSse>;

fn fixed(status: StatusCode, ctype: &str, body: &'static str) -> Response<Answer> {
    let mut r = Response::new(http_body_util::Either::Left(Full::new(Bytes::from_static(
        body.as_bytes(),
    ))));
    *r.status_mut() = status;
    if let Ok(v) = ctype.parse() {
        r.headers_mut().insert(hyper::header::CONTENT_TYPE, v);
    }
    r
}

async fn handle(req: Request<Incoming>, o: Opts) -> Result<Response<Answer>, Infallible> {
    match (req.method(), req.uri().path()) {
        (&Method::GET, "/v1/models") => Ok(fixed(StatusCode::OK, "application/json", MODELS)),
        (&Method::POST, "/v1/chat/completions") => {
            let body = match Limited::new(req.into_body(), 1 << 20).collect().await {
                Ok(b) => b.to_bytes(),
                Err(_) => return Ok(fixed(StatusCode::BAD_REQUEST, "text/plain", "bad body")),
            };
            let text = String::from_utf8_lossy(&body);
            let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
            if !compact.contains("\"stream\":true") {
                return Ok(fixed(StatusCode::OK, "application/json", WHOLE));
            }
            let mut r = Response::new(http_body_util::Either::Right(SlowSse::new(
                o.interval, o.duration,
            )));
            let h = r.headers_mut();
            h.insert(
                hyper::header::CONTENT_TYPE,
                hyper::header::HeaderValue::from_static("text/event-stream"),
            );
            h.insert(
                hyper::header::CACHE_CONTROL,
                hyper::header::HeaderValue::from_static("no-cache"),
            );
            Ok(r)
        }
        _ => Ok(fixed(StatusCode::NOT_FOUND, "text/plain", "not found")),
    }
}

pub async fn run(o: Opts) -> Result<(), String> {
    let addr: std::net::SocketAddr = o.listen.parse().map_err(|e| format!("--listen: {e}"))?;
    let sock = TcpSocket::new_v4().map_err(|e| e.to_string())?;
    sock.set_reuseaddr(true).map_err(|e| e.to_string())?;
    sock.bind(addr).map_err(|e| format!("bind {addr}: {e}"))?;
    let listener = sock.listen(4096).map_err(|e| e.to_string())?;
    eprintln!(
        "slowstreams upstream on {addr}: a token every {:?} for {:?}",
        o.interval, o.duration
    );
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(s) => s,
            Err(e) => {
                // EMFILE and friends: back off instead of spinning.
                eprintln!("accept: {e}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let _ = stream.set_nodelay(true);
        let o = o.clone();
        tokio::spawn(async move {
            let svc = hyper::service::service_fn(move |req| handle(req, o.clone()));
            let io = hyper_util::rt::TokioIo::new(stream);
            let _ = hyper::server::conn::http1::Builder::new()
                .serve_connection(io, svc)
                .await;
        });
    }
}
