//! The hot path's HTTP client for plain-`http://` upstreams (the local
//! servers: llama-swap, vLLM, Ollama, llama.cpp): hyper's pooled client
//! with `TCP_NODELAY`, the request's URI parsed once per upstream, and no
//! redirect or proxy layer. reqwest's redirect layer parses the URL twice
//! a request (about a tenth of the gateway's own CPU on a local upstream);
//! a model endpoint has no business redirecting a POST.
//!
//! `https://` upstreams, and plain-http ones while the environment names an
//! HTTP proxy (`HTTP_PROXY`, `ALL_PROXY`), stay on reqwest, which speaks
//! TLS and honours proxies and `NO_PROXY`.

use std::time::Duration;

use bytes::Bytes;
use futures::TryStreamExt;
use http_body_util::{BodyDataStream, Full};
use hyper::Request;
use hyper::header::{CONTENT_TYPE, HOST, HeaderName, HeaderValue, RETRY_AFTER};
use hyper::http::uri::Uri;
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioTimer};

use super::{BoxError, CallIds, RawResponse, TransportError};
use crate::wire::Endpoint;

/// The environment variables that send plain-http requests through a
/// proxy in reqwest.
const PROXY_VARS: [&str; 4] = ["HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"];

/// A pooled HTTP/1.1 client for one plain-http upstream, with its
/// endpoints' URIs.
pub struct Direct {
    client: Client<HttpConnector, Full<Bytes>>,
    /// The `Host` header, made once (hyper would format it per request).
    host: HeaderValue,
    chat: Uri,
    completions: Uri,
    embeddings: Uri,
    responses: Uri,
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
        let uri = |e: Endpoint| Uri::try_from(format!("{base_url}{}", e.path())).ok();
        let mut http = HttpConnector::new();
        http.set_nodelay(true);
        http.set_connect_timeout(Some(connect_timeout));
        let client = Client::builder(TokioExecutor::new())
            .pool_idle_timeout(Duration::from_secs(90))
            .pool_timer(TokioTimer::new())
            .build(http);
        let chat = uri(Endpoint::Chat)?;
        let host = HeaderValue::from_str(chat.authority()?.as_str()).ok()?;
        Some(Direct {
            client,
            host,
            chat,
            completions: uri(Endpoint::Completions)?,
            embeddings: uri(Endpoint::Embeddings)?,
            responses: uri(Endpoint::Responses)?,
        })
    }

    /// The URI of an OpenAI endpoint (`None` for the others).
    pub fn uri(&self, endpoint: Endpoint) -> Option<&Uri> {
        match endpoint {
            Endpoint::Chat => Some(&self.chat),
            Endpoint::Completions => Some(&self.completions),
            Endpoint::Embeddings => Some(&self.embeddings),
            Endpoint::Responses => Some(&self.responses),
            Endpoint::Messages | Endpoint::CountTokens => None,
        }
    }

    /// POSTs a JSON `body` to `uri` with `auth` and the call's ids, and
    /// returns once the status line is in.
    pub async fn post(
        &self,
        uri: &Uri,
        auth: Option<&HeaderValue>,
        body: Bytes,
        ids: &CallIds<'_>,
    ) -> Result<RawResponse, TransportError> {
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
        let resp = self.client.request(req).await.map_err(|e| TransportError {
            reason: describe(&e, e.is_connect(), false),
            connected: !e.is_connect(),
            source: Some(Box::new(e)),
        })?;
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let status = resp.status().as_u16();
        let body = BodyDataStream::new(resp.into_body()).map_err(|e| Box::new(e) as BoxError);
        Ok(RawResponse {
            status,
            retry_after,
            body: Box::pin(body),
        })
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
    use super::*;

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
