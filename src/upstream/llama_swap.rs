//! The llama-swap warm-state probe. `GET /running` lists the processes
//! llama-swap runs; a model is warm when it is listed in state `ready`
//! (older versions list only ready processes, some without `state`; newer
//! ones add `starting` and `stopping` processes and more fields). `GET
//! /v1/models` says nothing about warm state, and `/upstream/<model>/…` is
//! never probed: it would load the model.
//!
//! The answer is cached: the request path reads the cache and never waits
//! on it when it holds an answer (a stale one is refreshed in the
//! background); only a probe that has never answered is waited for, up to
//! its timeout. A poller refreshes it while the upstream exists, so
//! `conclave_llama_swap_warm` shows what is loaded now. Any failure reads
//! as "unknown", never as an error of a request.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Weak};
use std::time::Duration;

use metrics::gauge;
use parking_lot::Mutex;
use reqwest::header::{AUTHORIZATION, HeaderValue};
use serde::Deserialize;
use tokio::time::Instant;

use crate::labels::Warm;
use crate::sink::Metrics;
use crate::telemetry::LLAMA_SWAP_WARM;

/// Largest `/running` body read.
const MAX_BODY: usize = 256 * 1024;

/// What `/running` said, as the model names llama-swap knows.
pub type Loaded = Arc<Vec<String>>;

pub struct WarmProbe {
    upstream: Arc<str>,
    client: reqwest::Client,
    url: reqwest::Url,
    auth: Option<HeaderValue>,
    timeout: Duration,
    fresh_for: Duration,
    /// (name sent upstream, conclave's name) of each configured model,
    /// for the gauge (a reload that keeps the probe may change them).
    models: Mutex<Vec<(String, Arc<str>)>>,
    metrics: Metrics,
    cache: Mutex<Cache>,
    refreshing: AtomicBool,
    /// Serialises probes a cold cache waits for.
    cold: tokio::sync::Mutex<()>,
    polling: AtomicBool,
}

#[derive(Default)]
struct Cache {
    /// When the last probe ended; `None` before the first.
    at: Option<Instant>,
    /// `None`: the last probe failed.
    loaded: Option<Loaded>,
}

/// Settings of one probe.
pub struct ProbeSettings {
    pub upstream: Arc<str>,
    pub url: reqwest::Url,
    pub auth: Option<HeaderValue>,
    pub timeout: Duration,
    pub fresh_for: Duration,
    pub models: Vec<(String, Arc<str>)>,
    /// The instance's recorder, for the warm gauge.
    pub metrics: Metrics,
}

#[derive(Deserialize)]
struct Running {
    #[serde(default)]
    running: Option<Vec<Process>>,
}

#[derive(Deserialize)]
struct Process {
    #[serde(default)]
    model: Option<String>,
    #[serde(default)]
    state: Option<String>,
}

/// The models a `/running` body lists as ready; `None` when it is not
/// such a body at all.
pub fn parse_running(body: &[u8]) -> Option<Vec<String>> {
    if body.iter().find(|b| !b.is_ascii_whitespace()) != Some(&b'{') {
        return None;
    }
    let r: Running = serde_json::from_slice(body).ok()?;
    let ready = r
        .running
        .unwrap_or_default()
        .into_iter()
        .filter(|p| p.state.as_deref().is_none_or(|s| s == "ready"))
        .filter_map(|p| p.model)
        .collect();
    Some(ready)
}

/// Sets `conclave_llama_swap_warm` for each of an upstream's models
/// (name sent upstream, conclave's name) that `loaded` has an answer for.
pub fn show_loaded(
    (metrics, upstream): (&Metrics, &Arc<str>),
    models: &[(String, Arc<str>)],
    loaded: impl Fn(&str) -> Option<bool>,
) {
    metrics.scope(|| {
        for (upstream_model, name) in models {
            if let Some(on) = loaded(upstream_model) {
                gauge!(LLAMA_SWAP_WARM, "upstream" => upstream.clone(), "model" => name.clone())
                    .set(if on { 1.0 } else { 0.0 });
            }
        }
    });
}

impl WarmProbe {
    pub fn new(client: reqwest::Client, s: ProbeSettings) -> Self {
        WarmProbe {
            upstream: s.upstream,
            client,
            url: s.url,
            auth: s.auth,
            timeout: s.timeout,
            fresh_for: s.fresh_for,
            models: Mutex::new(s.models),
            metrics: s.metrics,
            cache: Mutex::new(Cache::default()),
            refreshing: AtomicBool::new(false),
            cold: tokio::sync::Mutex::new(()),
            polling: AtomicBool::new(false),
        }
    }

    /// What llama-swap has loaded, as last seen. Waits (up to the probe
    /// timeout) only when no probe has ended yet; a stale answer is
    /// returned at once and refreshed in the background.
    pub async fn loaded(self: &Arc<Self>) -> Option<Loaded> {
        let (at, loaded) = {
            let c = self.cache.lock();
            (c.at, c.loaded.clone())
        };
        match at {
            Some(at) => {
                if at.elapsed() >= self.fresh_for {
                    self.refresh_in_background();
                }
                loaded
            }
            None => {
                let _one = self.cold.lock().await;
                if self.cache.lock().at.is_none() {
                    let _ = self.refresh().await;
                }
                self.cache.lock().loaded.clone()
            }
        }
    }

    /// What llama-swap has loaded: the cached answer while it is fresh,
    /// else a probe now (with why it failed, when it does).
    pub async fn current(&self) -> Result<Loaded, String> {
        let fresh = {
            let c = self.cache.lock();
            c.at.filter(|at| at.elapsed() < self.fresh_for)
                .and(c.loaded.clone())
        };
        match fresh {
            Some(l) => Ok(l),
            None => self.refresh().await,
        }
    }

    /// The cached answer, without probing.
    pub fn cached(&self) -> Option<Loaded> {
        self.cache.lock().loaded.clone()
    }

    /// Whether `model` (the name sent upstream) is loaded.
    pub async fn warm(self: &Arc<Self>, model: &str) -> Warm {
        match self.loaded().await {
            Some(l) if l.iter().any(|m| m == model) => Warm::Yes,
            Some(_) => Warm::No,
            None => Warm::Unknown,
        }
    }

    fn refresh_in_background(self: &Arc<Self>) {
        if self.refreshing.swap(true, Ordering::AcqRel) {
            return;
        }
        let this = self.clone();
        tokio::spawn(async move {
            let _ = this.refresh().await;
            this.refreshing.store(false, Ordering::Release);
        });
    }

    /// Keeps the cache (and the gauge) fresh while the probe exists.
    pub fn start_polling(self: &Arc<Self>) {
        if tokio::runtime::Handle::try_current().is_err()
            || self.polling.swap(true, Ordering::AcqRel)
        {
            return;
        }
        let weak: Weak<Self> = Arc::downgrade(self);
        let every = self.fresh_for;
        tokio::spawn(async move {
            loop {
                match weak.upgrade() {
                    Some(p) => {
                        let _ = p.refresh().await;
                    }
                    None => return,
                }
                tokio::time::sleep(every).await;
            }
        });
    }

    /// The models it reports on from now on (a reload changed them).
    pub fn set_models(&self, models: Vec<(String, Arc<str>)>) {
        *self.models.lock() = models;
    }

    /// Probes once and records the answer (or `unknown`), which it also
    /// returns, with why there is none.
    pub async fn refresh(&self) -> Result<Loaded, String> {
        let loaded = match tokio::time::timeout(self.timeout, self.fetch()).await {
            Err(_) => Err(format!("no answer within {:?}", self.timeout)),
            Ok(r) => r.map(Arc::new),
        };
        if let Ok(l) = &loaded {
            let models = self.models.lock().clone();
            show_loaded((&self.metrics, &self.upstream), &models, |m| {
                Some(l.iter().any(|x| x == m))
            });
        }
        let mut c = self.cache.lock();
        c.at = Some(Instant::now());
        c.loaded = loaded.as_ref().ok().cloned();
        loaded
    }

    async fn fetch(&self) -> Result<Vec<String>, String> {
        let mut req = self.client.get(self.url.clone()).timeout(self.timeout);
        if let Some(a) = &self.auth {
            req = req.header(AUTHORIZATION, a.clone());
        }
        let failed = |e: reqwest::Error| {
            if e.is_timeout() {
                format!("no answer within {:?}", self.timeout)
            } else {
                super::http::describe(&e)
            }
        };
        let resp = req.send().await.map_err(failed)?;
        if !resp.status().is_success() {
            return Err(format!("HTTP {}", resp.status().as_u16()));
        }
        let body = super::http::read_capped(resp, MAX_BODY)
            .await
            .map_err(failed)?
            .ok_or_else(|| format!("more than {MAX_BODY} bytes"))?;
        parse_running(&body).ok_or_else(|| "not a llama-swap /running body".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_running_bodies_of_every_version() {
        let cases: &[(&str, Option<&[&str]>)] = &[
            // Older: only ready processes, model and state.
            (
                r#"{"running":[{"model":"qwen","state":"ready"}]}"#,
                Some(&["qwen"]),
            ),
            // Newer: starting, ready and stopping, with more fields.
            (
                r#"{"running":[{"model":"a","state":"starting","cmd":"x","proxy":"http://p","ttl":0,"name":"A","description":""},
                   {"model":"b","state":"ready","ttl":300},{"model":"c","state":"stopping"}]}"#,
                Some(&["b"]),
            ),
            (r#"{"running":[]}"#, Some(&[])),
            (r#"{"running":null}"#, Some(&[])),
            (r#"{}"#, Some(&[])),
            (r#"{"running":[{"model":"old"}]}"#, Some(&["old"])),
            (r#"{"running":[{"state":"ready"}]}"#, Some(&[])),
            (r#"{"running":"yes"}"#, None),
            (r#"<html>"#, None),
            (r#"[]"#, None),
        ];
        for (body, want) in cases {
            let got = parse_running(body.as_bytes());
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(got, want, "{body}");
        }
    }
}
