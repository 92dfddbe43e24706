//! Turns config text into a [`Config`]: each table is read on its own, then
//! names are resolved (models and routes share one namespace), references
//! checked, and cycles between routes found.

use std::collections::HashSet;
use std::net::SocketAddr;
use std::time::Duration;

use indexmap::IndexMap;

use crate::mock::{Quirks, SwapSim};

use super::anthropic::mock_api;
use super::fields::{DEFAULT_UPSTREAM_TIMEOUT, lane_limits, secret, upstream_rpm, url};
use super::{
    Config, Errors, IMAGE_TOKENS, Lane, Limits, LlamaSwap, MAX_CONTEXT_WINDOW, Model,
    ResponseBounds, Server, Strategies, TelemetryConfig, Upstream, UpstreamKind,
};
use super::{Resilience, keys, names, positive, raw, state, warnings};

const DEFAULT_STREAM_IDLE: Duration = Duration::from_secs(60);
const DEFAULT_PROBE_TIMEOUT: Duration = Duration::from_millis(200);
const DEFAULT_PROBE_CACHE: Duration = Duration::from_secs(1);

/// A mock upstream's llama-swap emulation.
pub(super) fn swap_sim(u: &raw::MockUpstream, path: &str, errs: &mut Errors) -> SwapSim {
    if u.send_loading_state && u.swap_delay.is_none() {
        errs.push(
            format!("{path}.send_loading_state"),
            "needs swap_delay: without swaps no model is ever loading",
        );
    }
    SwapSim {
        delay: u.swap_delay,
        loading_state: u.send_loading_state,
    }
}

pub(super) fn validate(
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
    strategies: &Strategies,
    errs: &mut Errors,
) -> Option<Config> {
    let mut doc: toml::Table = match text.parse() {
        Ok(t) => t,
        Err(e) => {
            errs.push("", format!("invalid TOML: {}", e.to_string().trim_end()));
            return None;
        }
    };
    let mut warnings = Vec::new();
    let server = server(doc.remove("server"), env, errs);
    let telemetry = telemetry(doc.remove("telemetry"), errs);
    let console = super::console::console(doc.remove("console"), errs);
    let keys = keys::keys(doc.remove("keys"), env, errs);
    let state = state::state(doc.remove("state"), env, errs);
    // Names whose tables failed to parse still count as defined, so one
    // bad table does not cascade into "unknown upstream" or "unknown
    // model" errors elsewhere.
    let mut broken_upstreams = HashSet::new();
    let upstreams = upstreams(doc.remove("upstreams"), env, errs, &mut broken_upstreams);
    let mut broken = HashSet::new();
    let known = |u: &str| upstreams.contains_key(u) || broken_upstreams.contains(u);
    let cache = super::cache::bounds(doc.remove("cache"), errs);
    let mut cache_rules = IndexMap::new();
    let models = models(
        doc.remove("models"),
        &known,
        errs,
        &mut broken,
        &mut cache_rules,
    );
    let mut retry_budgets = IndexMap::new();
    let routes = strategies.routes(
        doc.remove("routes"),
        errs,
        &mut broken,
        &mut retry_budgets,
        &mut cache_rules,
    );
    for key in doc.keys() {
        errs.push(
            key.clone(),
            "unknown top-level key (expected server, state, telemetry, console, keys, upstreams, models, routes, cache)",
        );
    }
    let budgeted = keys
        .iter()
        .any(|k| k.limits.daily_tokens.is_some() || k.limits.daily_cost_usd.is_some());
    if budgeted && state.is_none() && server.as_ref().is_some_and(|s| s.state_path.is_none()) {
        warnings.push(
            "keys: daily budgets are kept in memory only and start again from zero after a \
             restart; set server.state_path (or [state] url) to keep them"
                .to_owned(),
        );
    }
    names::check_names(&models, &routes, &broken, &keys, errs);
    names::check_cycles(&routes, errs);
    let config = Config {
        server: server?,
        state,
        telemetry,
        console,
        keys,
        upstreams,
        models,
        routes,
        retry_budgets,
        cache,
        cache_rules,
        warnings,
    };
    if errs.0.is_empty() {
        for (name, route) in &config.routes {
            if let super::Route::Strategy(spec) = route {
                for (path, msg) in spec.errors(name, &config) {
                    errs.push(path, msg);
                }
            }
        }
    }
    Some(warnings::warn(config))
}

pub(super) fn table(
    v: Option<toml::Value>,
    path: &str,
    errs: &mut Errors,
) -> IndexMap<String, toml::Value> {
    match v {
        None => IndexMap::new(),
        Some(toml::Value::Table(t)) => t.into_iter().collect(),
        Some(_) => {
            errs.push(path, "must be a table");
            IndexMap::new()
        }
    }
}

fn server(
    v: Option<toml::Value>,
    env: &dyn Fn(&str) -> Option<String>,
    errs: &mut Errors,
) -> Option<Server> {
    let raw: raw::Server = match v {
        Some(v) => errs.parse("server", v)?,
        None => raw::Server::default(),
    };
    let listen = match raw.listen.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            errs.push(
                "server.listen",
                format!(
                    "\"{}\" is not an address like \"127.0.0.1:4000\"",
                    raw.listen
                ),
            );
            None
        }
    };
    if raw.max_body_bytes == 0 {
        errs.push("server.max_body_bytes", "must be greater than 0");
    }
    if raw.request_timeout.is_zero() {
        errs.push("server.request_timeout", "must be greater than 0");
    }
    for (key, d) in [
        ("header_read_timeout", raw.header_read_timeout),
        ("body_read_timeout", raw.body_read_timeout),
        ("idle_timeout", raw.idle_timeout),
    ] {
        positive(Some(d), &format!("server.{key}"), errs);
    }
    if raw.estimate_output_tokens == 0 {
        errs.push("server.estimate_output_tokens", "must be greater than 0");
    }
    if !(1..=MAX_EVENT_LOG_BUFFER).contains(&raw.event_log_buffer) {
        errs.push(
            "server.event_log_buffer",
            format!("must be between 1 and {MAX_EVENT_LOG_BUFFER} (events, allocated up front)"),
        );
    }
    if raw.workers.is_some_and(|w| !(1..=MAX_WORKERS).contains(&w)) {
        errs.push(
            "server.workers",
            format!("must be between 1 and {MAX_WORKERS} (omit it for one per core)"),
        );
    }
    if raw.max_connections == 0 {
        errs.push("server.max_connections", "must be greater than 0");
    }
    if !(1..=MAX_HTTP2_STREAMS).contains(&raw.http2_max_streams) {
        errs.push(
            "server.http2_max_streams",
            format!("must be between 1 and {MAX_HTTP2_STREAMS}"),
        );
    }
    if !(MIN_HEADER_BYTES..=MAX_HEADER_BYTES).contains(&raw.max_header_bytes) {
        errs.push(
            "server.max_header_bytes",
            format!("must be between {MIN_HEADER_BYTES} and {MAX_HEADER_BYTES}"),
        );
    }
    if raw.sse_keepalive.is_some_and(|d| d.is_zero()) {
        errs.push(
            "server.sse_keepalive",
            "must be greater than 0 (omit it to turn keep-alives off)",
        );
    }
    positive(Some(raw.readyz_cache), "server.readyz_cache", errs);
    let responses_bounds = response_bounds(&raw, errs);
    let metrics_key = raw
        .metrics_key_env
        .as_deref()
        .and_then(|var| secret(env, var, "server.metrics_key_env", errs));
    Some(Server {
        listen: listen?,
        request_timeout: raw.request_timeout,
        max_body_bytes: raw.max_body_bytes,
        event_log: raw.event_log,
        state_path: raw.state_path,
        sse_keepalive: raw.sse_keepalive,
        body_read_timeout: raw.body_read_timeout,
        access_log: raw.access_log,
        estimate_output_tokens: raw.estimate_output_tokens,
        event_log_buffer: raw.event_log_buffer,
        limits: Limits {
            max_connections: raw.max_connections,
            header_read_timeout: raw.header_read_timeout,
            idle_timeout: raw.idle_timeout,
            shutdown_grace: raw.shutdown_grace,
            http2_max_streams: raw.http2_max_streams,
            max_header_bytes: raw.max_header_bytes,
            workers: raw.workers.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            }),
        },
        metrics_key,
        readyz_cache: raw.readyz_cache,
        responses_retention: raw.responses_retention,
        responses_bounds,
    })
}

/// The most serving threads (`server.workers`).
const MAX_WORKERS: usize = 1024;

/// The largest `server.responses_max_bytes` and `…_per_key` (1 TiB): the
/// byte sums stay far from the 2^53 a Redis script counts exactly.
const MAX_RESPONSE_BYTES: u64 = 1 << 40;

/// `server.responses_max_per_key`, `…_max_bytes_per_key`, `…_max_bytes`:
/// each at least 1 (`responses_retention = "0s"` stores nothing), a
/// key's bytes no more than all keys'.
fn response_bounds(raw: &raw::Server, errs: &mut Errors) -> ResponseBounds {
    let b = ResponseBounds {
        max_per_key: raw.responses_max_per_key,
        max_bytes_per_key: raw.responses_max_bytes_per_key,
        max_bytes: raw.responses_max_bytes,
    };
    if b.max_per_key == 0 {
        errs.push(
            "server.responses_max_per_key",
            "must be greater than 0 (set responses_retention = \"0s\" to store no response)",
        );
    }
    for (key, v) in [
        ("responses_max_bytes_per_key", b.max_bytes_per_key),
        ("responses_max_bytes", b.max_bytes),
    ] {
        if !(1..=MAX_RESPONSE_BYTES).contains(&v) {
            errs.push(
                format!("server.{key}"),
                format!(
                    "must be between 1 and {MAX_RESPONSE_BYTES} (bytes; set responses_retention = \"0s\" to store no response)"
                ),
            );
        }
    }
    if b.max_bytes_per_key > b.max_bytes {
        errs.push(
            "server.responses_max_bytes_per_key",
            format!(
                "must not exceed server.responses_max_bytes ({} bytes): one key's responses are part of all keys'",
                b.max_bytes
            ),
        );
    }
    b
}

/// Bounds of `server.http2_max_streams` and `server.max_header_bytes`
/// (hyper's HTTP/1 head buffer cannot be smaller than 8 KiB).
const MAX_HTTP2_STREAMS: u32 = 1024;
const MIN_HEADER_BYTES: usize = 8 * 1024;
const MAX_HEADER_BYTES: usize = 1024 * 1024;

/// The largest event-log queue: its slots are allocated when it opens.
const MAX_EVENT_LOG_BUFFER: usize = 1 << 20;

fn telemetry(v: Option<toml::Value>, errs: &mut Errors) -> TelemetryConfig {
    let raw: raw::Telemetry = match v {
        Some(v) => errs.parse("telemetry", v).unwrap_or_default(),
        None => raw::Telemetry::default(),
    };
    if let Some(endpoint) = &raw.otlp_endpoint {
        url(endpoint, "telemetry.otlp_endpoint", errs);
    }
    if !(0.0..=1.0).contains(&raw.sample_ratio) {
        errs.push("telemetry.sample_ratio", "must be between 0 and 1");
    }
    if raw.service_name.trim().is_empty() {
        errs.push("telemetry.service_name", "must not be empty");
    }
    positive(Some(raw.otlp_timeout), "telemetry.otlp_timeout", errs);
    TelemetryConfig {
        otlp_endpoint: raw.otlp_endpoint,
        service_name: raw.service_name,
        sample_ratio: raw.sample_ratio,
        otlp_timeout: raw.otlp_timeout,
    }
}

/// Reads the `[upstreams]` tables; one whose table fails goes into
/// `broken` (still a defined name).
fn upstreams(
    v: Option<toml::Value>,
    env: &dyn Fn(&str) -> Option<String>,
    errs: &mut Errors,
    broken: &mut HashSet<String>,
) -> IndexMap<String, Upstream> {
    let mut out = IndexMap::new();
    for (name, mut item) in table(v, "upstreams", errs) {
        let path = format!("upstreams.{name}");
        let resilience = super::resilience::take_upstream(&mut item, &path, errs);
        let kind = item.get("kind").and_then(|k| k.as_str()).map(str::to_owned);
        let upstream = match kind.as_deref() {
            Some("openai") => errs.parse::<raw::OpenAiUpstream>(&path, item).map(|u| {
                url(&u.base_url, &format!("{path}.base_url"), errs);
                if let Some(ls) = &u.llama_swap {
                    url(ls, &format!("{path}.llama_swap"), errs);
                }
                let api_key = u
                    .api_key_env
                    .as_deref()
                    .and_then(|var| secret(env, var, &format!("{path}.api_key_env"), errs));
                let lane = u.lane.unwrap_or(if u.llama_swap.is_some() {
                    Lane::Local
                } else {
                    Lane::Cloud
                });
                positive(
                    u.stream_idle_timeout,
                    &format!("{path}.stream_idle_timeout"),
                    errs,
                );
                for (key, v) in [
                    ("probe_timeout", u.probe_timeout),
                    ("probe_cache", u.probe_cache),
                ] {
                    positive(v, &format!("{path}.{key}"), errs);
                    if v.is_some() && u.llama_swap.is_none() {
                        errs.push(format!("{path}.{key}"), "applies only with llama_swap");
                    }
                }
                let (c, m, w) = (u.max_concurrency, u.max_models, u.max_wait_swap);
                Upstream {
                    lane,
                    limits: lane_limits(lane, c, m, w, &path, errs),
                    rpm: upstream_rpm(u.rpm, &path, errs),
                    timeout: u.timeout.unwrap_or(DEFAULT_UPSTREAM_TIMEOUT),
                    stream_idle_timeout: u.stream_idle_timeout.unwrap_or(DEFAULT_STREAM_IDLE),
                    responses: u.responses,
                    resilience: Resilience::default(),
                    kind: UpstreamKind::OpenAi {
                        base_url: u.base_url.trim_end_matches('/').to_owned(),
                        api_key,
                        llama_swap: u.llama_swap.map(|s| LlamaSwap {
                            url: s.trim_end_matches('/').to_owned(),
                            probe_timeout: u.probe_timeout.unwrap_or(DEFAULT_PROBE_TIMEOUT),
                            probe_cache: u.probe_cache.unwrap_or(DEFAULT_PROBE_CACHE),
                        }),
                    },
                }
            }),
            Some("mock") => errs.parse::<raw::MockUpstream>(&path, item).map(|u| {
                for (model, b) in &u.models {
                    for (at, msg) in b.check() {
                        errs.push(format!("{path}.models.{model}.{at}"), msg);
                    }
                }
                positive(
                    u.stream_idle_timeout,
                    &format!("{path}.stream_idle_timeout"),
                    errs,
                );
                let lane = u.lane.unwrap_or(Lane::Cloud);
                let (c, m, w) = (u.max_concurrency, u.max_models, u.max_wait_swap);
                Upstream {
                    lane,
                    limits: lane_limits(lane, c, m, w, &path, errs),
                    rpm: upstream_rpm(u.rpm, &path, errs),
                    timeout: u.timeout.unwrap_or(DEFAULT_UPSTREAM_TIMEOUT),
                    stream_idle_timeout: u.stream_idle_timeout.unwrap_or(DEFAULT_STREAM_IDLE),
                    responses: u.responses,
                    resilience: Resilience::default(),
                    kind: UpstreamKind::Mock {
                        api: mock_api(&u, &path, errs),
                        swap: swap_sim(&u, &path, errs),
                        quirks: Quirks::new(&u.quirks),
                        models: u.models,
                    },
                }
            }),
            Some("anthropic") => super::anthropic::upstream(item, &path, env, errs),
            Some(other) => {
                errs.push(
                    format!("{path}.kind"),
                    format!(
                        "unknown upstream kind \"{other}\" (expected \"openai\", \"anthropic\" \
                         or \"mock\")"
                    ),
                );
                None
            }
            None => {
                errs.push(
                    format!("{path}.kind"),
                    "missing (expected \"openai\", \"anthropic\" or \"mock\")",
                );
                None
            }
        };
        match upstream {
            Some(mut u) => {
                u.resilience = resilience;
                if u.timeout.is_zero() {
                    errs.push(format!("{path}.timeout"), "must be greater than 0");
                }
                out.insert(name, u);
            }
            None => {
                broken.insert(name);
            }
        }
    }
    out
}

/// Reads the `[models]` tables; `upstream_known` says whether an upstream
/// name is defined (broken tables included). A model's `cache` goes into
/// `rules`.
fn models(
    v: Option<toml::Value>,
    upstream_known: &dyn Fn(&str) -> bool,
    errs: &mut Errors,
    broken: &mut HashSet<String>,
    rules: &mut IndexMap<String, super::CacheRule>,
) -> IndexMap<String, Model> {
    let mut out = IndexMap::new();
    for (name, mut item) in table(v, "models", errs) {
        let path = format!("models.{name}");
        if let Some(rule) = super::cache::take_rule(&mut item, &path, None, errs) {
            rules.insert(name.clone(), rule);
        }
        let Some(m) = errs.parse::<raw::Model>(&path, item) else {
            broken.insert(name);
            continue;
        };
        if !upstream_known(&m.upstream) {
            errs.push(
                format!("{path}.upstream"),
                format!("unknown upstream \"{}\"", m.upstream),
            );
        }
        super::price::check(&m, &path, errs);
        if let Some(w) = m.context_window
            && !(1..=MAX_CONTEXT_WINDOW).contains(&w)
        {
            errs.push(
                format!("{path}.context_window"),
                format!(
                    "must be a positive number of tokens, at most {}",
                    MAX_CONTEXT_WINDOW
                ),
            );
        }
        out.insert(
            name.clone(),
            Model {
                upstream: m.upstream,
                upstream_model: m.model.unwrap_or(name),
                price: m.price,
                json_mode: m.json_mode.unwrap_or(true),
                image_tokens: m.image_tokens.unwrap_or(IMAGE_TOKENS),
                context_window: m.context_window,
                max_tokens: m.max_tokens.unwrap_or(super::price::DEFAULT_MAX_TOKENS),
            },
        );
    }
    out
}
