//! The config file: TOML in DESIGN.md's shape, read and validated once at
//! start-up into a [`Config`] with every default filled in and every name
//! checked. [`load`] collects *all* problems (file, key path, what is wrong)
//! instead of stopping at the first, which is what `conclave check` prints.
//!
//! The raw serde types live in `raw`; cross-references and cycles are
//! checked in `validate`; `graph` compiles the result into model nodes.

mod raw;
mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;
use serde::de::DeserializeOwned;

pub use raw::{Lane, OnExhausted, Price};

use crate::mock::Behavior;

/// A validated config: no `Option`s left for "filled in later".
#[derive(Debug)]
pub struct Config {
    pub server: Server,
    pub keys: Vec<Key>,
    pub upstreams: IndexMap<String, Upstream>,
    pub models: IndexMap<String, Model>,
    pub routes: IndexMap<String, Route>,
    /// Settings accepted but not acted on by this build.
    pub warnings: Vec<String>,
}

#[derive(Debug)]
pub struct Server {
    pub listen: SocketAddr,
    pub request_timeout: Duration,
    pub max_body_bytes: usize,
    pub event_log: Option<PathBuf>,
    pub state_path: Option<PathBuf>,
    pub sse_keepalive: Option<Duration>,
    pub body_read_timeout: Duration,
    pub access_log: bool,
    /// Connection limits, fixed for the life of the process.
    pub limits: crate::server::Limits,
}

/// A secret read from the environment; never printed.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(pub String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

#[derive(Debug)]
pub struct Key {
    pub name: String,
    pub secret: Secret,
    /// `None`: every model (`"*"`).
    pub models: Option<Vec<String>>,
    pub admin: bool,
}

#[derive(Debug)]
pub struct Upstream {
    pub lane: Lane,
    pub timeout: Duration,
    /// Longest gap between two events of a streamed answer.
    pub stream_idle_timeout: Duration,
    pub kind: UpstreamKind,
}

#[derive(Debug)]
pub enum UpstreamKind {
    OpenAi {
        base_url: String,
        api_key: Option<Secret>,
        llama_swap: Option<String>,
    },
    Mock {
        swap_delay: Option<Duration>,
        models: IndexMap<String, Behavior>,
    },
}

impl UpstreamKind {
    pub fn name(&self) -> &'static str {
        match self {
            UpstreamKind::OpenAi { .. } => "openai",
            UpstreamKind::Mock { .. } => "mock",
        }
    }
}

#[derive(Debug)]
pub struct Model {
    pub upstream: String,
    pub upstream_model: String,
    pub price: Price,
    pub json_mode: bool,
}

#[derive(Debug)]
pub enum Route {
    Passthrough {
        model: String,
        /// Overrides the upstream's `stream_idle_timeout` for this route.
        stream_idle_timeout: Option<Duration>,
    },
    Chain(Chain),
}

impl Route {
    pub fn strategy(&self) -> &'static str {
        match self {
            Route::Passthrough { .. } => "passthrough",
            Route::Chain(_) => "chain",
        }
    }
}

#[derive(Debug)]
pub struct Chain {
    pub tiers: Vec<String>,
    pub verifier: Option<String>,
    pub self_certify: Vec<String>,
    pub verify: Vec<String>,
    pub on_exhausted: OnExhausted,
    pub ttft_timeout: Option<Duration>,
    pub keepalive: Duration,
    pub stream_idle_timeout: Option<Duration>,
    pub verifier_max_tokens: u32,
    pub verifier_timeout: Duration,
}

/// Default gap between SSE keep-alive comments while a chain verifies.
pub const CHAIN_KEEPALIVE: Duration = Duration::from_secs(5);

/// One problem: where in the file, and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub path: String,
    pub message: String,
}

/// Every problem found in one config file.
#[derive(Debug)]
pub struct ConfigErrors {
    pub file: String,
    pub errors: Vec<ConfigError>,
}

impl fmt::Display for ConfigErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, e) in self.errors.iter().enumerate() {
            if i > 0 {
                writeln!(f)?;
            }
            if e.path.is_empty() {
                write!(f, "{}: {}", self.file, e.message)?;
            } else {
                write!(f, "{}: {}: {}", self.file, e.path, e.message)?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for ConfigErrors {}

/// Collects errors while a config is read.
#[derive(Default)]
pub(crate) struct Errors(Vec<ConfigError>);

impl Errors {
    pub(crate) fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(ConfigError {
            path: path.into(),
            message: message.into(),
        });
    }

    /// Deserialises one table, reporting *every* failure under `path`:
    /// serde stops at the first, so after each one the offending key is
    /// taken out (unknown keys) or stood in for by a placeholder value
    /// (bad types and values, missing keys) and the table is read again.
    pub(crate) fn parse<T: DeserializeOwned>(
        &mut self,
        path: &str,
        value: toml::Value,
    ) -> Option<T> {
        let mut value = value;
        let mut failed = false;
        // The key currently holding a placeholder, and which one.
        let mut stand_in: Option<(Vec<Seg>, usize)> = None;
        for _ in 0..MAX_ROUNDS {
            let err = match serde_path_to_error::deserialize::<_, T>(value.clone()) {
                Ok(v) => return (!failed).then_some(v),
                Err(e) => e,
            };
            let at = segments(&err.path().to_string());
            let message = hint(err.into_inner().message());
            failed = true;
            if let Some((key, i)) = &mut stand_in
                && *key == at
            {
                // The placeholder did not fit either: try the next one.
                *i += 1;
                let Some(p) = PLACEHOLDERS.get(*i) else { break };
                put(&mut value, key, p());
                continue;
            }
            self.push(join(path, &at), message.clone());
            if let Some(field) = missing_field(&message) {
                let mut key = at;
                key.push(Seg::Key(field));
                put(&mut value, &key, PLACEHOLDERS[0]());
                stand_in = Some((key, 0));
            } else if message.starts_with("unknown field") {
                if !remove(&mut value, &at) {
                    break;
                }
            } else if put(&mut value, &at, PLACEHOLDERS[0]()) {
                stand_in = Some((at, 0));
            } else {
                break;
            }
        }
        None
    }
}

/// How many errors one table may report before the rest is left unread.
const MAX_ROUNDS: usize = 64;

/// Values tried in place of a bad one until the table reads.
const PLACEHOLDERS: &[fn() -> toml::Value] = &[
    || toml::Value::String(String::new()),
    || toml::Value::Integer(0),
    || toml::Value::Boolean(false),
    || toml::Value::Array(Vec::new()),
    || toml::Value::Table(toml::Table::new()),
    || toml::Value::String("1s".into()),
    || toml::Value::String("text".into()),
];

/// One step of a key path: a table key or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Seg {
    Key(String),
    Index(usize),
}

/// `a.b[2].c` as segments (`.` alone is the table itself).
fn segments(path: &str) -> Vec<Seg> {
    let mut out = Vec::new();
    if path == "." || path.is_empty() {
        return out;
    }
    for part in path.split('.') {
        let (key, rest) = part.split_once('[').unwrap_or((part, ""));
        if !key.is_empty() {
            out.push(Seg::Key(key.to_owned()));
        }
        for idx in rest.split('[') {
            if let Ok(i) = idx.trim_end_matches(']').parse() {
                out.push(Seg::Index(i));
            }
        }
    }
    out
}

fn join(path: &str, at: &[Seg]) -> String {
    let mut out = path.to_owned();
    for s in at {
        match s {
            Seg::Key(k) if out.is_empty() => out.push_str(k),
            Seg::Key(k) => {
                out.push('.');
                out.push_str(k);
            }
            Seg::Index(i) => out.push_str(&format!("[{i}]")),
        }
    }
    out
}

fn parent<'v>(value: &'v mut toml::Value, at: &[Seg]) -> Option<&'v mut toml::Value> {
    let mut cur = value;
    for s in at {
        cur = match (s, cur) {
            (Seg::Key(k), toml::Value::Table(t)) => t.get_mut(k)?,
            (Seg::Index(i), toml::Value::Array(a)) => a.get_mut(*i)?,
            _ => return None,
        };
    }
    Some(cur)
}

/// Removes the key at `at`; false when there is nothing to remove.
fn remove(value: &mut toml::Value, at: &[Seg]) -> bool {
    let Some((Seg::Key(last), init)) = at.split_last() else {
        return false;
    };
    match parent(value, init) {
        Some(toml::Value::Table(t)) => t.remove(last).is_some(),
        _ => false,
    }
}

/// Sets the value at `at`; false when its parent is not there.
fn put(value: &mut toml::Value, at: &[Seg], new: toml::Value) -> bool {
    let Some((last, init)) = at.split_last() else {
        return false;
    };
    match (last, parent(value, init)) {
        (Seg::Key(k), Some(toml::Value::Table(t))) => {
            t.insert(k.clone(), new);
            true
        }
        (Seg::Index(i), Some(toml::Value::Array(a))) if *i < a.len() => {
            a[*i] = new;
            true
        }
        _ => false,
    }
}

fn missing_field(message: &str) -> Option<String> {
    let rest = message.strip_prefix("missing field `")?;
    Some(rest.split('`').next()?.to_owned())
}

/// A duration error says what a good duration looks like.
fn hint(message: &str) -> String {
    const DURATION: &[&str] = &[
        "expected a duration",
        "time unit",
        "expected number at",
        "invalid character at",
        "value was empty",
    ];
    if DURATION.iter().any(|d| message.contains(d)) {
        format!("{message} (a duration is a string like \"200ms\", \"30s\" or \"5m\")")
    } else {
        message.to_owned()
    }
}

/// Reads and validates the config at `path`, taking secrets from the
/// process environment.
pub fn load(path: &Path) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let text = std::fs::read_to_string(path).map_err(|e| ConfigErrors {
        file: file.clone(),
        errors: vec![ConfigError {
            path: String::new(),
            message: format!("cannot read the file: {e}"),
        }],
    })?;
    parse(&text, &file, &|name| std::env::var(name).ok())
}

/// Validates config text; `env` looks up environment variables.
pub fn parse(
    text: &str,
    file: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigErrors> {
    let mut errs = Errors::default();
    let config = validate::validate(text, env, &mut errs);
    match config {
        Some(c) if errs.0.is_empty() => Ok(c),
        _ => Err(ConfigErrors {
            file: file.to_owned(),
            errors: errs.0,
        }),
    }
}

/// The simulated models (and swap delay) of one `kind = "mock"` upstream
/// of the config at `path`, for `conclave mock`: the first one, or `name`.
pub fn mock_models(
    path: &Path,
    name: Option<&str>,
) -> Result<(IndexMap<String, Behavior>, Option<Duration>), ConfigErrors> {
    let file = path.display().to_string();
    let fail = |path: String, message: String| ConfigErrors {
        file: file.clone(),
        errors: vec![ConfigError { path, message }],
    };
    let text = std::fs::read_to_string(path)
        .map_err(|e| fail(String::new(), format!("cannot read the file: {e}")))?;
    let doc: toml::Table = text.parse().map_err(|e: toml::de::Error| {
        fail(
            String::new(),
            format!("invalid TOML: {}", e.to_string().trim_end()),
        )
    })?;
    let upstreams = doc.get("upstreams").and_then(toml::Value::as_table);
    let is_mock = |v: &toml::Value| v.get("kind").and_then(toml::Value::as_str) == Some("mock");
    let found = upstreams.and_then(|u| match name {
        Some(n) => u.get_key_value(n).filter(|(_, v)| is_mock(v)),
        None => u.iter().find(|(_, v)| is_mock(v)),
    });
    let Some((key, value)) = found else {
        let what = name.map_or("any".to_owned(), |n| format!("\"{n}\""));
        return Err(fail(
            "upstreams".into(),
            format!("no kind = \"mock\" upstream matches {what}"),
        ));
    };
    let at = format!("upstreams.{key}");
    let mut errs = Errors::default();
    let parsed = errs.parse::<raw::MockUpstream>(&at, value.clone());
    if let Some(u) = &parsed {
        for (model, b) in &u.models {
            for (p, msg) in b.check() {
                errs.push(format!("{at}.models.{model}.{p}"), msg);
            }
        }
    }
    match parsed {
        Some(u) if errs.0.is_empty() => Ok((u.models, u.swap_delay)),
        _ => Err(ConfigErrors {
            file,
            errors: errs.0,
        }),
    }
}

impl Config {
    /// The resolved graph as `conclave check` prints it.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("server: listen {}\n", self.server.listen));
        out.push_str("upstreams:\n");
        for (name, u) in &self.upstreams {
            let lane = match u.lane {
                Lane::Local => "local",
                Lane::Cloud => "cloud",
            };
            let detail = match &u.kind {
                UpstreamKind::OpenAi {
                    base_url,
                    llama_swap,
                    ..
                } => match llama_swap {
                    Some(ls) => format!("{base_url} (llama-swap {ls})"),
                    None => base_url.clone(),
                },
                UpstreamKind::Mock { models, .. } => format!("{} simulated models", models.len()),
            };
            out.push_str(&format!(
                "  {name}: {} {lane} lane, {detail}\n",
                u.kind.name()
            ));
        }
        out.push_str("models:\n");
        for (name, m) in &self.models {
            out.push_str(&format!(
                "  {name} -> {}/{}\n",
                m.upstream, m.upstream_model
            ));
        }
        out.push_str("routes:\n");
        for (name, r) in &self.routes {
            match r {
                Route::Passthrough { model, .. } => {
                    out.push_str(&format!("  {name}: passthrough -> {model}\n"))
                }
                Route::Chain(c) => {
                    let tiers: Vec<String> = c
                        .tiers
                        .iter()
                        .map(|t| {
                            let how = if c.verifier.is_none() {
                                "fallback"
                            } else if self.tier_is_verified(c, t) {
                                "verified"
                            } else {
                                "self-certifies"
                            };
                            format!("{t} ({how})")
                        })
                        .collect();
                    let verifier = c
                        .verifier
                        .as_deref()
                        .unwrap_or("none: plain fallback chain");
                    out.push_str(&format!(
                        "  {name}: chain {} ; verifier {verifier}\n",
                        tiers.join(" -> ")
                    ));
                }
            }
        }
        for w in &self.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }

    /// The one start-up line: where it listens, what it serves, through
    /// which upstreams, whether auth is on, where events go.
    pub fn summary(&self, listening: SocketAddr) -> String {
        let mut strategies: IndexMap<&str, usize> = IndexMap::new();
        for r in self.routes.values() {
            *strategies.entry(r.strategy()).or_default() += 1;
        }
        let routes: Vec<String> = strategies.iter().map(|(s, n)| format!("{n} {s}")).collect();
        let upstreams: Vec<String> = self
            .upstreams
            .iter()
            .map(|(name, u)| {
                let lane = match u.lane {
                    Lane::Local => "local lane",
                    Lane::Cloud => "cloud lane",
                };
                let swap = match &u.kind {
                    UpstreamKind::OpenAi {
                        llama_swap: Some(_),
                        ..
                    } => ", llama-swap",
                    _ => "",
                };
                format!("{name} ({}, {lane}{swap})", u.kind.name())
            })
            .collect();
        let auth = if self.keys.is_empty() {
            "off (no [[keys]])".to_owned()
        } else {
            format!("on ({} keys)", self.keys.len())
        };
        let events = self
            .server
            .event_log
            .as_ref()
            .map_or("off".to_owned(), |p| p.display().to_string());
        format!(
            "listening on {listening}: {} models, {} routes ({}); upstreams: {}; auth {auth}; event log {events}",
            self.models.len(),
            self.routes.len(),
            if routes.is_empty() {
                "none".to_owned()
            } else {
                routes.join(", ")
            },
            upstreams.join(", "),
        )
    }

    /// Whether a chain's verifier checks this tier: local tiers are
    /// verified and cloud tiers self-certify, unless the route says otherwise.
    pub fn tier_is_verified(&self, chain: &Chain, tier: &str) -> bool {
        if chain.verifier.is_none() || chain.self_certify.iter().any(|t| t == tier) {
            return false;
        }
        if chain.verify.iter().any(|t| t == tier) {
            return true;
        }
        self.models
            .get(self.resolve_alias(tier))
            .and_then(|m| self.upstreams.get(&m.upstream))
            .is_some_and(|u| u.lane == Lane::Local)
    }

    /// Every secret the config holds (upstream keys and API keys), which
    /// nothing an upstream says may repeat.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        let upstream = self.upstreams.values().filter_map(|u| match &u.kind {
            UpstreamKind::OpenAi {
                api_key: Some(k), ..
            } => Some(k.0.as_str()),
            _ => None,
        });
        upstream.chain(self.keys.iter().map(|k| k.secret.0.as_str()))
    }

    /// Follows passthrough routes down to the name they stand for.
    pub fn resolve_alias<'a>(&'a self, mut name: &'a str) -> &'a str {
        // Bounded: validation rejects cycles, but never loop forever.
        for _ in 0..=self.routes.len() {
            match self.routes.get(name) {
                Some(Route::Passthrough { model, .. }) => name = model,
                _ => break,
            }
        }
        name
    }
}

#[cfg(test)]
mod tests;
