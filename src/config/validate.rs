//! Turns config text into a [`Config`]: each table is read on its own, then
//! names are resolved (models and routes share one namespace), references
//! checked, and cycles between routes found.

use std::collections::HashSet;
use std::time::Duration;

use indexmap::IndexMap;

use crate::mock::{Quirks, SwapSim};

use super::anthropic::mock_api;
use super::fields::{DEFAULT_UPSTREAM_TIMEOUT, lane_limits, secret, upstream_rpm, url};
use super::{
    Config, Errors, IMAGE_TOKENS, Lane, LlamaSwap, MAX_CONTEXT_WINDOW, Model, Strategies,
    TelemetryConfig, Upstream, UpstreamKind,
};
use super::{Resilience, keys, names, positive, raw, server, state, warnings};

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
    let server = server::read(doc.remove("server"), env, errs);
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
