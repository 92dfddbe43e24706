//! The TOML file as serde reads it: one struct per table, every one
//! `deny_unknown_fields`. `config::load` deserialises each table on its own
//! so that one bad entry does not hide the errors in the others.

use std::path::PathBuf;
use std::time::Duration;

use indexmap::IndexMap;
use serde::Deserialize;

use crate::mock::{Api, Behavior, Quirk};

pub const DEFAULT_LISTEN: &str = "127.0.0.1:4000";

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Server {
    #[serde(default = "default_listen")]
    pub listen: String,
    #[serde(default = "default_request_timeout", with = "humantime_serde")]
    pub request_timeout: Duration,
    #[serde(default = "default_max_body")]
    pub max_body_bytes: usize,
    pub event_log: Option<PathBuf>,
    pub state_path: Option<PathBuf>,
    #[serde(default, with = "humantime_serde")]
    pub sse_keepalive: Option<Duration>,
    #[serde(default = "default_max_connections")]
    pub max_connections: usize,
    #[serde(default = "default_header_read_timeout", with = "humantime_serde")]
    pub header_read_timeout: Duration,
    #[serde(default = "default_body_read_timeout", with = "humantime_serde")]
    pub body_read_timeout: Duration,
    #[serde(default = "default_idle_timeout", with = "humantime_serde")]
    pub idle_timeout: Duration,
    #[serde(default = "default_shutdown_grace", with = "humantime_serde")]
    pub shutdown_grace: Duration,
    #[serde(default)]
    pub access_log: bool,
    #[serde(default = "default_estimate_output_tokens")]
    pub estimate_output_tokens: u32,
    #[serde(default = "default_event_log_buffer")]
    pub event_log_buffer: usize,
    /// The env var holding the key `/metrics` and `/readyz` then require.
    pub metrics_key_env: Option<String>,
    #[serde(default = "default_readyz_cache", with = "humantime_serde")]
    pub readyz_cache: Duration,
    #[serde(default = "default_responses_retention", with = "humantime_serde")]
    pub responses_retention: Duration,
    #[serde(default = "default_responses_max_per_key")]
    pub responses_max_per_key: u64,
    #[serde(default = "default_responses_max_bytes_per_key")]
    pub responses_max_bytes_per_key: u64,
    #[serde(default = "default_responses_max_bytes")]
    pub responses_max_bytes: u64,
    #[serde(default = "default_http2_max_streams")]
    pub http2_max_streams: u32,
    #[serde(default = "default_max_header_bytes")]
    pub max_header_bytes: usize,
    /// Serving threads; `None`: one per core.
    pub workers: Option<usize>,
}

impl Default for Server {
    fn default() -> Self {
        Server {
            listen: default_listen(),
            request_timeout: default_request_timeout(),
            max_body_bytes: default_max_body(),
            event_log: None,
            state_path: None,
            sse_keepalive: None,
            max_connections: default_max_connections(),
            header_read_timeout: default_header_read_timeout(),
            body_read_timeout: default_body_read_timeout(),
            idle_timeout: default_idle_timeout(),
            shutdown_grace: default_shutdown_grace(),
            access_log: false,
            estimate_output_tokens: default_estimate_output_tokens(),
            event_log_buffer: default_event_log_buffer(),
            metrics_key_env: None,
            readyz_cache: default_readyz_cache(),
            workers: None,
            responses_retention: default_responses_retention(),
            responses_max_per_key: default_responses_max_per_key(),
            responses_max_bytes_per_key: default_responses_max_bytes_per_key(),
            responses_max_bytes: default_responses_max_bytes(),
            http2_max_streams: default_http2_max_streams(),
            max_header_bytes: default_max_header_bytes(),
        }
    }
}

/// OpenAI keeps a stored response 30 days.
fn default_responses_retention() -> Duration {
    Duration::from_secs(30 * 86_400)
}

fn default_responses_max_per_key() -> u64 {
    10_000
}
/// 256 MiB.
fn default_responses_max_bytes_per_key() -> u64 {
    256 << 20
}
/// 1 GiB.
fn default_responses_max_bytes() -> u64 {
    1 << 30
}

fn default_readyz_cache() -> Duration {
    Duration::from_secs(5)
}

fn default_event_log_buffer() -> usize {
    16_384
}
fn default_http2_max_streams() -> u32 {
    16
}
fn default_max_header_bytes() -> usize {
    32 * 1024
}

/// `[telemetry]`: OpenTelemetry trace export (off without an endpoint).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Telemetry {
    pub otlp_endpoint: Option<String>,
    #[serde(default = "default_service_name")]
    pub service_name: String,
    #[serde(default = "default_sample_ratio")]
    pub sample_ratio: f64,
    #[serde(default = "default_otlp_timeout", with = "humantime_serde")]
    pub otlp_timeout: Duration,
}

impl Default for Telemetry {
    fn default() -> Self {
        Telemetry {
            otlp_endpoint: None,
            service_name: default_service_name(),
            sample_ratio: default_sample_ratio(),
            otlp_timeout: default_otlp_timeout(),
        }
    }
}

fn default_service_name() -> String {
    "conclave".to_owned()
}
fn default_sample_ratio() -> f64 {
    1.0
}
fn default_otlp_timeout() -> Duration {
    Duration::from_secs(10)
}

fn default_estimate_output_tokens() -> u32 {
    1024
}
fn default_listen() -> String {
    DEFAULT_LISTEN.to_owned()
}
fn default_request_timeout() -> Duration {
    Duration::from_secs(300)
}
fn default_max_body() -> usize {
    8 * 1024 * 1024
}
fn default_max_connections() -> usize {
    1024
}
fn default_header_read_timeout() -> Duration {
    Duration::from_secs(10)
}
fn default_body_read_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_idle_timeout() -> Duration {
    Duration::from_secs(60)
}
fn default_shutdown_grace() -> Duration {
    Duration::from_secs(30)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Key {
    pub name: String,
    pub key_env: Option<String>,
    pub key_sha256: Option<String>,
    pub rpm: Option<u32>,
    pub tpm: Option<u64>,
    pub daily_tokens: Option<u64>,
    pub daily_cost_usd: Option<f64>,
    pub on_state_error: Option<super::OnError>,
    #[serde(default)]
    pub models: Option<Vec<String>>,
    #[serde(default)]
    pub admin: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Lane {
    Local,
    Cloud,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OpenAiUpstream {
    #[allow(dead_code)]
    pub kind: String,
    pub base_url: String,
    pub api_key_env: Option<String>,
    pub llama_swap: Option<String>,
    #[serde(default, with = "humantime_serde")]
    pub probe_timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub probe_cache: Option<Duration>,
    pub lane: Option<Lane>,
    pub max_concurrency: Option<u32>,
    pub max_models: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    pub max_wait_swap: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub stream_idle_timeout: Option<Duration>,
    pub rpm: Option<u32>,
    /// The server also speaks the Responses API (`POST /responses`).
    #[serde(default)]
    pub responses: bool,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MockUpstream {
    #[allow(dead_code)]
    pub kind: String,
    pub lane: Option<Lane>,
    pub max_concurrency: Option<u32>,
    pub max_models: Option<u32>,
    #[serde(default, with = "humantime_serde")]
    pub max_wait_swap: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub timeout: Option<Duration>,
    #[serde(default, with = "humantime_serde")]
    pub stream_idle_timeout: Option<Duration>,
    pub rpm: Option<u32>,
    /// Simulated llama-swap load time when the requested model is not the
    /// loaded one; absent: no swap emulation, warm state unknown.
    #[serde(default, with = "humantime_serde")]
    pub swap_delay: Option<Duration>,
    /// With `swap_delay`: llama-swap's `sendLoadingState` banner on cold
    /// streamed requests.
    #[serde(default)]
    pub send_loading_state: bool,
    /// Behaviours of real servers to play (see `mock::Quirk`).
    #[serde(default)]
    pub quirks: Vec<Quirk>,
    /// Serve the Responses API (`POST /v1/responses`) too.
    #[serde(default)]
    pub responses: bool,
    /// The wire format it speaks: OpenAI's or Anthropic's Messages API.
    #[serde(default)]
    pub api: Api,
    #[serde(default)]
    pub models: IndexMap<String, Behavior>,
}

#[derive(Debug, Clone, Copy, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    #[serde(default)]
    pub input_per_mtok: f64,
    #[serde(default)]
    pub output_per_mtok: f64,
    /// Input tokens read from the provider's prompt cache (default: the
    /// input price, so budgets never undercount).
    pub cached_input_per_mtok: Option<f64>,
    /// Input tokens written to the provider's prompt cache (default: the
    /// input price).
    pub cache_write_per_mtok: Option<f64>,
}

impl Price {
    /// Dollars per million cached input tokens.
    pub fn cached_input(&self) -> f64 {
        self.cached_input_per_mtok.unwrap_or(self.input_per_mtok)
    }

    /// Dollars per million input tokens written to the cache.
    pub fn cache_write(&self) -> f64 {
        self.cache_write_per_mtok.unwrap_or(self.input_per_mtok)
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Model {
    pub upstream: String,
    pub model: Option<String>,
    #[serde(default)]
    pub price: Price,
    /// Whether the upstream honours `response_format = json_object`
    /// (used for verifier calls). Default true.
    pub json_mode: Option<bool>,
    /// Input tokens one image is estimated at, for budgets.
    pub image_tokens: Option<u64>,
    /// The model's context window in tokens (else learned from the server).
    pub context_window: Option<u64>,
    /// `max_tokens` sent when the request sets none, to an upstream that
    /// requires it (Anthropic's).
    pub max_tokens: Option<u32>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Passthrough {
    #[allow(dead_code)]
    pub strategy: String,
    pub model: String,
    #[serde(default, with = "humantime_serde")]
    pub stream_idle_timeout: Option<Duration>,
}
