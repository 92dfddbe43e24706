//! `kind = "openai"`: any OpenAI-compatible server, over one pooled reqwest
//! client per upstream with `TCP_NODELAY` (model calls to a plain-http one
//! go through `upstream::direct` instead). The API key becomes an
//! `Authorization: Bearer` header marked sensitive, so it is never printed.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::TryStreamExt;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};

use super::direct::Direct;
use super::{BoxError, CallIds, RawResponse, Transport, TransportError};
use std::sync::Arc;

use super::lane::Gate;
use super::llama_swap::{ProbeSettings, WarmProbe};
use super::server_kind::{self, ServerKind};
use super::window::Learner;
use super::window::count::{Counter, Tokens};
use crate::config::{LlamaSwap, Secret};
use crate::labels::Warm;
use crate::sink::Metrics;
use crate::wire::Endpoint;

/// The transport could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the HTTP client could not be built: {0}")]
    Client(#[from] reqwest::Error),
    #[error("invalid URL {0}")]
    Url(String),
}

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READY_TIMEOUT: Duration = Duration::from_secs(3);

pub struct OpenAiTransport {
    client: reqwest::Client,
    /// The lean client, for a plain-http upstream (see [`Direct`]).
    direct: Option<Direct>,
    /// Parsed once: reqwest would parse a string URL on every request.
    chat_url: reqwest::Url,
    completions_url: reqwest::Url,
    embeddings_url: reqwest::Url,
    responses_url: reqwest::Url,
    models_url: reqwest::Url,
    /// Where active health check paths go.
    base_url: String,
    auth: Option<HeaderValue>,
    /// What the server says about its models' context windows.
    windows: Option<Learner>,
    /// Exact token counts, asked of the server near a window.
    counter: Counter,
}

impl OpenAiTransport {
    /// A transport to `base_url`; `llama_swap`: the root of the llama-swap
    /// it goes through, if any (where context windows are asked).
    pub fn new(
        base_url: &str,
        api_key: Option<&Secret>,
        llama_swap: Option<&str>,
    ) -> Result<Self, BuildError> {
        let client = reqwest::Client::builder()
            .tcp_nodelay(true)
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(Duration::from_secs(90))
            .build()?;
        let auth = api_key.and_then(|k| {
            let mut v = HeaderValue::from_str(&format!("Bearer {}", k.0)).ok()?;
            v.set_sensitive(true);
            Some(v)
        });
        let windows = Learner::new(client.clone(), auth.clone(), base_url, llama_swap);
        let counter = Counter::new(client.clone(), auth.clone(), base_url, llama_swap);
        Ok(OpenAiTransport {
            direct: Direct::for_base(base_url, CONNECT_TIMEOUT),
            windows,
            counter,
            client,
            chat_url: parse_url(&format!("{base_url}{}", Endpoint::Chat.path()))?,
            completions_url: parse_url(&format!("{base_url}{}", Endpoint::Completions.path()))?,
            embeddings_url: parse_url(&format!("{base_url}{}", Endpoint::Embeddings.path()))?,
            responses_url: parse_url(&format!("{base_url}{}", Endpoint::Responses.path()))?,
            models_url: parse_url(&format!("{base_url}/models"))?,
            base_url: base_url.to_owned(),
            auth,
        })
    }
}

/// A side answer's body (a probe's, a count's), read to its end unless
/// it grows past `max` bytes: `Ok(None)` then, so no server can make conclave
/// hold more. The caller bounds the time.
pub async fn read_capped(
    resp: reqwest::Response,
    max: usize,
) -> Result<Option<Bytes>, reqwest::Error> {
    let mut body = bytes::BytesMut::new();
    let mut parts = resp.bytes_stream();
    while let Some(part) = parts.try_next().await? {
        if body.len() + part.len() > max {
            return Ok(None);
        }
        body.extend_from_slice(&part);
    }
    Ok(Some(body.freeze()))
}

impl OpenAiTransport {
    /// GETs `url` for [`Transport::server_kind`]: its status, `server`
    /// header and body, within [`server_kind::PROBE_TIMEOUT`] and
    /// [`server_kind::MAX_PROBE_BODY`].
    async fn probe_get(&self, url: reqwest::Url) -> Option<(u16, Option<String>, Bytes)> {
        let mut req = self.client.get(url).timeout(server_kind::PROBE_TIMEOUT);
        if let Some(auth) = &self.auth {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        let resp = req.send().await.ok()?;
        let status = resp.status().as_u16();
        let server = resp
            .headers()
            .get(reqwest::header::SERVER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        let body = read_capped(resp, server_kind::MAX_PROBE_BODY)
            .await
            .ok()??;
        Some((status, server, body))
    }

    /// A warm-state probe of the llama-swap at `settings.url`, over this
    /// upstream's connection pool and with its API key.
    pub fn probe(
        &self,
        ls: &LlamaSwap,
        upstream: &str,
        models: Vec<(String, Arc<str>)>,
        metrics: Metrics,
    ) -> Result<WarmProbe, BuildError> {
        Ok(WarmProbe::new(
            self.client.clone(),
            ProbeSettings {
                upstream: upstream.into(),
                url: parse_url(&format!("{}/running", ls.url))?,
                auth: self.auth.clone(),
                timeout: ls.probe_timeout,
                fresh_for: ls.probe_cache,
                models,
                metrics,
            },
        ))
    }
}

fn parse_url(s: &str) -> Result<reqwest::Url, BuildError> {
    reqwest::Url::parse(s).map_err(|e| BuildError::Url(format!("{s}: {e}")))
}

/// Says why no response arrived, without URLs or internals.
pub(super) fn describe(e: &reqwest::Error) -> String {
    super::direct::describe(e, e.is_connect(), e.is_timeout())
}

/// Sends a request with the call's ids (`x-request-id`, `traceparent`),
/// and says why when no response arrived.
pub(super) async fn send(
    mut req: reqwest::RequestBuilder,
    ids: &CallIds<'_>,
) -> Result<reqwest::Response, TransportError> {
    if let Ok(id) = HeaderValue::from_str(ids.request_id) {
        req = req.header("x-request-id", id);
    }
    if let Some(tp) = ids.traceparent.as_deref() {
        req = req.header("traceparent", tp);
    }
    req.send().await.map_err(|e| TransportError {
        reason: describe(&e),
        connected: !e.is_connect() && !e.is_timeout(),
        source: Some(Box::new(e.without_url())),
    })
}

/// A response as a [`RawResponse`], its body streamed without its URL.
pub(super) fn raw(resp: reqwest::Response, retry_after: Option<String>) -> RawResponse {
    RawResponse {
        status: resp.status().as_u16(),
        retry_after,
        body: Box::pin(
            resp.bytes_stream()
                .map_err(|e| Box::new(e.without_url()) as BoxError),
        ),
    }
}

#[async_trait]
impl Transport for OpenAiTransport {
    async fn send(
        &self,
        endpoint: Endpoint,
        body: Bytes,
        ids: &CallIds<'_>,
    ) -> Result<RawResponse, TransportError> {
        if let Some(direct) = &self.direct
            && let Some(uri) = direct.uri(endpoint)
        {
            return direct.post(uri, self.auth.as_ref(), body, ids).await;
        }
        let url = match endpoint {
            Endpoint::Chat => &self.chat_url,
            Endpoint::Completions => &self.completions_url,
            Endpoint::Embeddings => &self.embeddings_url,
            Endpoint::Responses => &self.responses_url,
            Endpoint::Messages | Endpoint::CountTokens => {
                return Ok(super::translate::unsupported(endpoint));
            }
        };
        let mut req = self
            .client
            .post(url.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body);
        if let Some(auth) = &self.auth {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        let resp = send(req, ids).await?;
        let retry_after = resp
            .headers()
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned);
        Ok(raw(resp, retry_after))
    }

    async fn context_window(&self, model: &str, warm: Warm, lane: &Arc<Gate>) -> Option<u64> {
        self.windows.as_ref()?.window(model, warm, lane).await
    }

    async fn exact_tokens(&self, model: &str, req: &crate::wire::ChatRequest) -> Option<Tokens> {
        self.counter.count(model, req).await
    }

    async fn server_kind(&self) -> ServerKind {
        let root = self.base_url.trim_end_matches('/');
        let root = root.strip_suffix("/v1").unwrap_or(root);
        if let Ok(url) = parse_url(&format!("{root}/props"))
            && let Some((status, _, body)) = self.probe_get(url).await
            && let Some(kind) = server_kind::from_props(status, &body)
        {
            if kind != (ServerKind::LlamaCpp { slots: None }) {
                return kind;
            }
            // A build whose `/props` does not count them: `/slots` lists them.
            let slots = match parse_url(&format!("{root}/slots")) {
                Ok(url) => self.probe_get(url).await,
                Err(_) => None,
            };
            let slots = slots.and_then(|(status, _, body)| server_kind::from_slots(status, &body));
            return ServerKind::LlamaCpp { slots };
        }
        match self.probe_get(self.models_url.clone()).await {
            Some((_, server, body)) => server_kind::from_models(server.as_deref(), &body),
            None => ServerKind::Unknown,
        }
    }

    async fn ready(&self) -> Result<(), String> {
        let mut req = self
            .client
            .get(self.models_url.clone())
            .timeout(READY_TIMEOUT);
        if let Some(auth) = &self.auth {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        // Any HTTP answer, even 401, means the server is there.
        req.send().await.map(|_| ()).map_err(|e| describe(&e))
    }

    async fn check(&self, path: &str) -> Result<(), String> {
        let url = parse_url(&format!("{}{path}", self.base_url))
            .map_err(|_| "an invalid health path".to_owned())?;
        let mut req = self.client.get(url);
        if let Some(auth) = &self.auth {
            req = req.header(AUTHORIZATION, auth.clone());
        }
        let resp = req.send().await.map_err(|e| describe(&e))?;
        match resp.status() {
            s if s.is_success() => Ok(()),
            s => Err(format!("HTTP {}", s.as_u16())),
        }
    }
}
