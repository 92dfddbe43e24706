//! In-process gateway: `conclave::prepare_with` on a test clock, with
//! requests sent through its router by `tower`'s `oneshot` (no socket).
//! Under `#[tokio::test(start_paused = true)]` tokio's paused clock then
//! drives every deadline, TTL, day roll-over and rate window, and the
//! wall clock follows it from [`START`], so a test waits with
//! `tokio::time::advance`, never a wall-clock sleep. Each gateway has its
//! own metrics recorder, event log and store.
#![allow(dead_code)]

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use axum::body::Body;
use axum::http::{Method, Request};
use http_body_util::BodyExt;
use serde_json::Value;
use tower::ServiceExt;

use super::Resp;

/// The wall time a test gateway starts at: 2026-03-01 23:59:00 UTC, a
/// minute before a day rolls over.
pub const START: Duration = Duration::from_secs(1_772_409_540);

pub struct Gw {
    prepared: conclave::Prepared,
    router: axum::Router,
    pub dir: tempfile::TempDir,
}

impl Gw {
    /// A gateway on `toml` (`{dir}` is replaced by a temp dir), its clock
    /// at [`START`]. Call it on the test's runtime.
    /// The gateway on `config/demo.toml`, its event log in its own dir.
    pub fn demo() -> Gw {
        let demo =
            std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/config/demo.toml"))
                .unwrap_or_default()
                .replace(
                    "event_log = \"conclave-events.jsonl\"",
                    "event_log = \"{dir}/events.jsonl\"",
                );
        Gw::start(&demo)
    }

    pub fn start(toml: &str) -> Gw {
        Gw::start_at(toml, UNIX_EPOCH + START)
    }

    /// A gateway whose clock reads `at` when it starts.
    pub fn start_at(toml: &str, at: SystemTime) -> Gw {
        Gw::start_with(toml, &[], at)
    }

    /// A gateway whose config reads `env` as its environment.
    pub fn start_with(toml: &str, env: &[(&str, &str)], at: SystemTime) -> Gw {
        Gw::start_edited(toml, env, at, |_| {})
    }

    /// [`Gw::start_with`], the parsed config changed by `edit` first (what
    /// the TOML cannot say yet, such as cache rules).
    pub fn start_edited(
        toml: &str,
        env: &[(&str, &str)],
        at: SystemTime,
        edit: impl FnOnce(&mut conclave::config::Config),
    ) -> Gw {
        let dir = tempfile::tempdir().unwrap();
        let text = toml.replace("{dir}", &dir.path().display().to_string());
        let lookup = |name: &str| {
            env.iter()
                .find(|(k, _)| *k == name)
                .map(|(_, v)| (*v).to_owned())
        };
        let mut config =
            conclave::config::parse(&text, "test.toml", &lookup, &conclave::strategy::ALL)
                .unwrap_or_else(|e| panic!("{e}"));
        edit(&mut config);
        let clock = conclave::clock::Clock::starting_at(at);
        let prepared = conclave::prepare_with(config, clock).unwrap();
        let router = prepared.router();
        Gw {
            prepared,
            router,
            dir,
        }
    }

    /// Sends `req`; the response as it comes (its body not read yet).
    pub async fn open(&self, req: Request<Body>) -> axum::response::Response {
        self.router.clone().oneshot(req).await.unwrap()
    }

    /// Sends `req` and reads the response whole.
    pub async fn send(&self, req: Request<Body>) -> Resp {
        let r = self.open(req).await;
        let status = r.status().as_u16();
        let headers = r.headers().clone();
        let bytes = r.into_body().collect().await.unwrap().to_bytes();
        Resp {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    /// `POST /v1/chat/completions` with `body` and `headers`.
    pub async fn chat_with(&self, body: &Value, headers: &[(&str, &str)]) -> Resp {
        self.post_with("/v1/chat/completions", body, headers).await
    }

    /// `POST /v1/chat/completions` with `body`, as API key `key`.
    pub async fn chat_as(&self, body: &Value, key: &str) -> Resp {
        let auth = format!("Bearer {key}");
        self.chat_with(body, &[("authorization", auth.as_str())])
            .await
    }

    /// Key `name`'s entry of `GET /v1/keys/usage`, read with admin key
    /// `admin`.
    pub async fn key_usage(&self, admin: &str, name: &str) -> Value {
        let auth = format!("Bearer {admin}");
        let r = self
            .get_with("/v1/keys/usage", &[("authorization", auth.as_str())])
            .await;
        super::key_entry(&r, name)
    }

    /// `POST /v1/chat/completions` with `body`.
    pub async fn chat(&self, body: &Value) -> Resp {
        self.chat_with(body, &[]).await
    }

    /// `POST path` with a JSON `body` and `headers`.
    pub async fn post_with(&self, path: &str, body: &Value, headers: &[(&str, &str)]) -> Resp {
        let mut req = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header("content-type", "application/json");
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(Body::from(body.to_string())).unwrap())
            .await
    }

    /// `GET path` with `headers`.
    pub async fn get_with(&self, path: &str, headers: &[(&str, &str)]) -> Resp {
        let mut req = Request::builder().method(Method::GET).uri(path);
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        self.send(req.body(Body::empty()).unwrap()).await
    }

    pub async fn get(&self, path: &str) -> Resp {
        self.get_with(path, &[]).await
    }

    /// The simulator of this gateway's `kind = "mock"` upstream `name`.
    pub fn sim(&self, name: &str) -> std::sync::Arc<conclave::mock::Simulator> {
        self.prepared
            .simulator(name)
            .unwrap_or_else(|| panic!("no mock upstream {name}"))
    }

    /// The models the mock upstream `name` was asked for, in order.
    pub fn arrivals(&self, name: &str) -> Vec<String> {
        self.sim(name)
            .recorded()
            .into_iter()
            .map(|r| r.model)
            .collect()
    }

    /// The bodies the mock upstream `name` received for `model`.
    pub fn asked(&self, name: &str, model: &str) -> Vec<Value> {
        self.sim(name)
            .recorded()
            .into_iter()
            .filter(|r| r.model == model)
            .map(|r| r.body)
            .collect()
    }

    /// This gateway's stored Responses API answers (the current config's).
    pub fn responses(&self) -> std::sync::Arc<conclave::store::responses::Responses> {
        self.prepared.responses()
    }

    /// This gateway's metrics, as `/metrics` renders them.
    pub fn metrics(&self) -> String {
        self.prepared.metrics()
    }

    /// Flushes telemetry as shutdown does: the event log is written and
    /// closed, queued spans are exported (and the tracer shut down). Once
    /// per gateway, at the end of a test.
    pub async fn flush(&self) {
        // Off the runtime: the flush blocks, and span export runs on it.
        let flush = self.prepared.flusher();
        tokio::task::spawn_blocking(flush).await.unwrap();
    }

    /// Every event in `{dir}/events.jsonl` of the given kinds (all but
    /// `request` when none), after the log is flushed. Ends the event
    /// log: call it once, at the end of a test.
    pub async fn events(&self, kinds: &[&str]) -> Vec<Value> {
        self.flush().await;
        let text = std::fs::read_to_string(self.dir.path().join("events.jsonl")).unwrap();
        text.lines()
            .filter(|l| !l.trim().is_empty())
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| match kinds {
                [] => e["event"] != "request",
                _ => kinds.iter().any(|k| e["event"] == *k),
            })
            .collect()
    }
}
