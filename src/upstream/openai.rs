//! `kind = "openai"`: any OpenAI-compatible server, over one pooled reqwest
//! client per upstream with `TCP_NODELAY` (model calls to a plain-http one
//! go through `upstream::direct` instead). The API key becomes an
//! `Authorization: Bearer` header marked sensitive, so it is never printed.

use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use futures::future::BoxFuture;
use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue, RETRY_AFTER};

use std::sync::Arc;

use super::direct::Direct;
use super::http::{describe, parse_url, raw, read_capped, send};
use super::served::{Served, unsupported};
use super::{CallIds, RawResponse, Transport, TransportError};

pub use super::http::BuildError;
use super::lane::Gate;
use super::llama_swap::{ProbeSettings, WarmProbe};
use super::server_kind::{self, ServerKind};
use super::window::Learner;
use super::window::count::{Counter, Tokens};
use crate::boxed::boxed;
use crate::config::{LlamaSwap, Secret};
use crate::labels::Warm;
use crate::sink::Metrics;
use crate::wire::{Endpoint, Family};

const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);
const READY_TIMEOUT: Duration = Duration::from_secs(3);

pub struct OpenAiTransport {
    client: reqwest::Client,
    /// The lean client, for a plain-http upstream (see [`Direct`]).
    direct: Option<Direct>,
    /// The OpenAI endpoints' URLs, parsed once: reqwest would parse a
    /// string URL on every request.
    urls: Served<reqwest::Url>,
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
            urls: Served::build(Family::OpenAi, |path| {
                parse_url(&format!("{base_url}{path}"))
            })?,
            models_url: parse_url(&format!("{base_url}/models"))?,
            base_url: base_url.to_owned(),
            auth,
        })
    }
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

impl OpenAiTransport {
    /// POSTs `body` to `endpoint`: through the direct pool when the
    /// upstream's address allows it, through reqwest otherwise.
    async fn post(
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
        let Some(url) = self.urls.get(endpoint) else {
            return Ok(unsupported(endpoint));
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
}

#[async_trait]
impl Transport for OpenAiTransport {
    /// [`Self::post`], its future built in its box ([`boxed`]).
    fn send<'a, 'b, 'c, 'async_trait>(
        &'a self,
        endpoint: Endpoint,
        body: Bytes,
        ids: &'b CallIds<'c>,
    ) -> BoxFuture<'async_trait, Result<RawResponse, TransportError>>
    where
        'a: 'async_trait,
        'b: 'async_trait,
        'c: 'async_trait,
        Self: 'async_trait,
    {
        boxed(move || self.post(endpoint, body, ids))
    }

    async fn context_window(&self, model: &str, warm: Warm, lane: &Arc<Gate>) -> Option<u64> {
        self.windows.as_ref()?.window(model, warm, lane).await
    }

    fn known_window(&self, model: &str, warm: Warm) -> Option<Option<u64>> {
        match &self.windows {
            Some(w) => w.known(model, warm),
            None => Some(None),
        }
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
