//! The hot path's HTTP client for plain-`http://` upstreams (the local
//! servers: llama-swap, vLLM, Ollama, llama.cpp): HTTP/1.1 on hyper's
//! connection API over a pool of its own ([`pool`]), with `TCP_NODELAY`,
//! each request's path and `Host` made once per upstream, and no redirect
//! or proxy layer. reqwest's redirect layer parses the URL twice a request
//! (about a tenth of the gateway's own CPU on a local upstream); a model
//! endpoint has no business redirecting a POST.
//!
//! `https://` upstreams, and plain-http ones while the environment names an
//! HTTP proxy (`HTTP_PROXY`, `ALL_PROXY`), stay on reqwest, which speaks
//! TLS and honours proxies and `NO_PROXY`.

mod pool;

pub use pool::keep_apart;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use futures::future::Either;
use http_body_util::{BodyDataStream, Full};
use hyper::Request;
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue, RETRY_AFTER};
use hyper::http::uri::Uri;

use super::served::Served;
use super::{BoxError, CallIds, RawResponse, TransportError};
use crate::wire::{Endpoint, Family};
use pool::{Pool, Returning, Sender};

/// The environment variables that send plain-http requests through a
/// proxy in reqwest.
const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// A pooled HTTP/1.1 client for one plain-http upstream, with its
/// endpoints' paths.
pub struct Direct {
    pool: Arc<Pool>,
    /// `host:port`, as connections are opened to it.
    addr: String,
    connect_timeout: Duration,
    /// The `Host` header.
    host: HeaderValue,
    /// The OpenAI endpoints' paths (origin form).
    uris: Served<Uri>,
}

impl Direct {
    /// A client for `base_url` when it is plain http and no proxy is set
    /// in the environment; `None` sends the upstream through reqwest.
    pub fn for_base(base_url: &str, connect_timeout: Duration) -> Option<Self> {
        let proxied = PROXY_VARS
            .iter()
            .any(|v| std::env::var_os(v).is_some_and(|s| !s.is_empty()));
        if proxied || !base_url.starts_with("http://") {
            return None;
        }
        let base = Uri::try_from(base_url).ok()?;
        let authority = base.authority()?;
        let addr = match authority.port_u16() {
            Some(_) => authority.as_str().to_owned(),
            None => format!("{}:80", authority.host()),
        };
        let host = HeaderValue::from_str(authority.as_str()).ok()?;
        // HTTP/1 requests name their path (origin form), not the whole URI.
        let base_path = base.path().trim_end_matches('/');
        let uris = Served::build(Family::OpenAi, |path| {
            Uri::try_from(format!("{base_path}{path}")).map_err(drop)
        })
        .ok()?;
        Some(Direct {
            pool: Arc::default(),
            addr,
            connect_timeout,
            host,
            uris,
        })
    }

    /// The URI of an OpenAI endpoint (`None` for the others).
    pub fn uri(&self, endpoint: Endpoint) -> Option<&Uri> {
        self.uris.get(endpoint)
    }

    /// POSTs a JSON `body` to `uri` with `auth` and the call's ids, and
    /// returns once the status line is in. The request is built before
    /// the future that sends it is made, and moved into it: held across
    /// the await too, it would be in the future twice (every call's
    /// future is written whole when it is boxed). Inlined, so that its
    /// future is written where the caller's future keeps it: made out of
    /// line, it was written on the stack and copied whole, twice.
    #[inline(always)]
    pub fn post(
        &self,
        uri: &Uri,
        auth: Option<&HeaderValue>,
        body: Bytes,
        ids: &CallIds<'_>,
    ) -> impl Future<Output = Result<RawResponse, TransportError>> + Send + '_ {
        match self.request(uri, auth, body, ids) {
            Ok(req) => Either::Left(self.send(req)),
            Err(e) => Either::Right(std::future::ready(Err(e))),
        }
    }

    /// The request [`Self::post`] sends.
    fn request(
        &self,
        uri: &Uri,
        auth: Option<&HeaderValue>,
        body: Bytes,
        ids: &CallIds<'_>,
    ) -> Result<Request<Full<Bytes>>, TransportError> {
        let mut req = Request::post(uri.clone())
            .body(Full::new(body))
            .map_err(|e| TransportError {
                reason: "the request could not be built".into(),
                connected: false,
                source: Some(Box::new(e)),
            })?;
        let h = req.headers_mut();
        h.insert(HOST, self.host.clone());
        h.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        if let Some(auth) = auth {
            h.insert(hyper::header::AUTHORIZATION, auth.clone());
        }
        if let Ok(id) = HeaderValue::from_str(ids.request_id) {
            h.insert(HeaderName::from_static("x-request-id"), id);
        }
        if let Some(tp) = ids
            .traceparent
            .as_deref()
            .and_then(|t| HeaderValue::from_str(t).ok())
        {
            h.insert(HeaderName::from_static("traceparent"), tp);
        }
        Ok(req)
    }

    /// `resp`, the answer that came on `tx`, its body returning the
    /// connection to the pool (of `shard`) once read.
    fn answered(
        &self,
        tx: Sender,
        resp: hyper::Response<hyper::body::Incoming>,
        shard: usize,
    ) -> RawResponse {
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let status = resp.status().as_u16();
        let json = super::is_json(resp.headers());
        let body = Returning::new(resp.into_body(), tx, &self.pool, shard);
        let body = BodyDataStream::new(body).map_err(|e| Box::new(e) as BoxError);
        RawResponse {
            status,
            retry_after,
            json,
            body: Box::pin(body),
        }
    }

    /// Sends `req` on an idle connection, or a new one, and returns once
    /// its status line is in. A request that an idle connection could not
    /// take (the server closed it meanwhile) goes on a new connection; one
    /// that was sent is never sent twice.
    async fn send(&self, mut req: Request<Full<Bytes>>) -> Result<RawResponse, TransportError> {
        let shard = Pool::shard();
        while let Some(mut tx) = self.pool.take() {
            if tx.ready().await.is_err() {
                continue;
            }
            match tx.try_send_request(req).await {
                Ok(resp) => return Ok(self.answered(tx, resp, shard)),
                Err(mut e) => match e.take_message() {
                    Some(unsent) => req = unsent,
                    None => return Err(closed(e.into_error())),
                },
            }
        }
        let mut tx = pool::connect(&self.addr, self.connect_timeout)
            .await
            .map_err(|e| TransportError {
                reason: describe(&e, true, false),
                connected: false,
                source: Some(Box::new(e)),
            })?;
        tx.ready().await.map_err(closed)?;
        let resp = tx.send_request(req).await.map_err(closed)?;
        Ok(self.answered(tx, resp, shard))
    }
}

/// A connection that ended before its response.
fn closed(e: hyper::Error) -> TransportError {
    TransportError {
        reason: describe(&e, false, false),
        connected: true,
        source: Some(Box::new(e)),
    }
}

/// Says why no response arrived, without URLs or internals: the first
/// I/O error in `e`'s sources, else whether connecting timed out or failed.
pub(super) fn describe(
    e: &(dyn std::error::Error + 'static),
    connect: bool,
    timeout: bool,
) -> String {
    let mut src = Some(e);
    while let Some(s) = src {
        if let Some(io) = s.downcast_ref::<std::io::Error>() {
            return match io.kind() {
                std::io::ErrorKind::ConnectionRefused => "connection refused".into(),
                std::io::ErrorKind::ConnectionReset => "connection reset".into(),
                std::io::ErrorKind::TimedOut => "connect timed out".into(),
                _ => format!("connection failed ({})", io.kind()),
            };
        }
        src = s.source();
    }
    if timeout {
        "connect timed out".into()
    } else if connect {
        "could not connect".into()
    } else {
        "the connection closed before a response".into()
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::*;

    /// Whether `got` holds a whole request (its head and `content-length`
    /// bytes of body).
    fn whole(got: &[u8]) -> bool {
        let Some(end) = got.windows(4).position(|w| w == b"\r\n\r\n") else {
            return false;
        };
        let head = String::from_utf8_lossy(&got[..end]).to_ascii_lowercase();
        let len: usize = head
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .map_or(0, |v| v.trim().parse().unwrap());
        got.len() >= end + 4 + len
    }

    /// A server that answers `per_conn` requests on each connection, then
    /// closes it; its base URL and how many connections it took.
    async fn server(per_conn: usize) -> (String, Arc<AtomicUsize>) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}/v1", l.local_addr().unwrap());
        let accepted = Arc::new(AtomicUsize::new(0));
        let n = accepted.clone();
        tokio::spawn(async move {
            while let Ok((mut s, _)) = l.accept().await {
                n.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let mut buf = vec![0u8; 4096];
                    for _ in 0..per_conn {
                        let mut got = Vec::new();
                        while !whole(&got) {
                            match s.read(&mut buf).await {
                                Ok(0) | Err(_) => return,
                                Ok(k) => got.extend_from_slice(&buf[..k]),
                            }
                        }
                        let resp = "HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}";
                        if s.write_all(resp.as_bytes()).await.is_err() {
                            return;
                        }
                    }
                });
            }
        });
        (base, accepted)
    }

    /// One chat call, its answer read to the end.
    async fn call(d: &Direct) -> u16 {
        let ids = CallIds {
            request_id: "r",
            traceparent: None,
            anthropic_beta: None,
        };
        let uri = d.uri(Endpoint::CHAT).unwrap();
        let r = d
            .post(uri, None, Bytes::from_static(b"{}"), &ids)
            .await
            .unwrap();
        let body: Vec<Bytes> = r.body.try_collect().await.unwrap();
        assert_eq!(body.concat(), b"{}");
        r.status
    }

    #[tokio::test]
    async fn a_connection_is_used_again_once_its_answer_is_read() {
        let (base, accepted) = server(100).await;
        let Some(d) = Direct::for_base(&base, Duration::from_secs(1)) else {
            return; // under a proxy
        };
        for _ in 0..3 {
            assert_eq!(call(&d).await, 200);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 1);
    }

    #[tokio::test]
    async fn a_connection_the_server_closed_is_not_used_again() {
        let (base, accepted) = server(1).await;
        let Some(d) = Direct::for_base(&base, Duration::from_secs(1)) else {
            return;
        };
        for _ in 0..3 {
            assert_eq!(call(&d).await, 200);
        }
        assert_eq!(accepted.load(Ordering::SeqCst), 3);
    }

    #[test]
    fn only_plain_http_goes_direct() {
        let t = Duration::from_secs(1);
        assert!(Direct::for_base("https://api.openai.com/v1", t).is_none());
        // The test process may run under a proxy; then nothing goes direct.
        let proxied = PROXY_VARS.iter().any(|v| std::env::var_os(v).is_some());
        assert_eq!(
            Direct::for_base("http://127.0.0.1:8080/v1", t).is_some(),
            !proxied
        );
    }
}
