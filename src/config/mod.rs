//! The config file: TOML in DESIGN.md's shape, read and validated once at
//! start-up into a [`Config`] with every default filled in and every name
//! checked. [`load`] collects *all* problems (file, key path, what is wrong)
//! instead of stopping at the first; [`check`], what `conclave check`
//! prints, does the same but lists unset secrets as warnings.
//!
//! The raw serde types live in `raw`; `errors` collects every problem of
//! every table; `validate` builds the validated config, `names` checks
//! cross-references and cycles, `warnings` flags likely mistakes, and
//! `describe` renders a config for people; `console` reads `[console]`.
//! `graph` compiles the result into model nodes.

mod anthropic;
mod cache;
mod console;
mod describe;
mod errors;
mod fields;
mod keys;
mod names;
mod paths;
mod price;
mod raw;
mod resilience;
mod server;
mod state;
mod strategies;
mod validate;
mod warnings;

use std::fmt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use indexmap::IndexMap;

pub use anthropic::{Anthropic, DEFAULT_BASE_URL, DEFAULT_VERSION};
pub use cache::{CacheConfig, CacheRule, CacheScope};
pub use console::{ConsoleConfig, DEFAULT_RECENT_REQUESTS, MAX_RECENT_REQUESTS};
pub use describe::{counted, duration_text};
pub(crate) use errors::Errors;
pub(crate) use errors::positive;
pub use errors::{ConfigError, ConfigErrors};
pub use keys::digest;
pub use price::DEFAULT_MAX_TOKENS;
pub use raw::{Lane, Price};
pub use resilience::{Eject, HealthCheck, Resilience, Retries, RetryBudget};
pub use server::{Limits, ResponseBounds, Server};
#[cfg(test)]
pub(crate) use state::check_url as check_state_url;
pub use state::{OnError, StateConfig};
pub(crate) use strategies::Parse;
pub use strategies::{RouteSpec, Strategies};

use crate::mock::{Behavior, Quirks, SwapSim};

/// Input tokens an image is estimated at unless its model says otherwise
/// (`image_tokens`): above what OpenAI (1,445 at most for a high-detail
/// image on GPT-4o, about 2,650 on the patch-priced minis), Anthropic
/// (about 1,600) and Gemini (258 a 768-pixel tile) charge for one.
pub const IMAGE_TOKENS: u64 = 4_096;

/// The largest context window a config or a server may give: beyond any
/// model's (a server claiming more is not believed).
pub const MAX_CONTEXT_WINDOW: u64 = 100_000_000;

/// A validated config: no `Option`s left for "filled in later".
#[derive(Debug)]
pub struct Config {
    pub server: Server,
    /// `[state]`: the shared Redis state, or `None` for the embedded store.
    pub state: Option<StateConfig>,
    pub telemetry: TelemetryConfig,
    /// `[console]`: the ring of recent requests behind `/v1/requests`.
    pub console: ConsoleConfig,
    pub keys: Vec<Key>,
    pub upstreams: IndexMap<String, Upstream>,
    pub models: IndexMap<String, Model>,
    pub routes: IndexMap<String, Route>,
    /// Each route's `retry_budget` (a model named directly, or a route
    /// without one, has the default).
    pub retry_budgets: IndexMap<String, RetryBudget>,
    /// `[cache]`: the response cache's bounds.
    pub cache: CacheConfig,
    /// The routes and models with `cache = { ... }`, by name.
    pub cache_rules: IndexMap<String, CacheRule>,
    /// Settings accepted but not acted on by this build.
    pub warnings: Vec<String>,
}

/// `[telemetry]`: where traces go (`None`: tracing off) and how many.
#[derive(Debug, Clone, PartialEq)]
pub struct TelemetryConfig {
    pub otlp_endpoint: Option<String>,
    pub service_name: String,
    /// Share of new traces recorded, 0 to 1.
    pub sample_ratio: f64,
    pub otlp_timeout: Duration,
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
    /// SHA-256 of the secret: what a presented key is compared with.
    pub digest: [u8; 32],
    /// The secret, when it came from `key_env` (kept out of what
    /// upstreams say); `key_sha256` keys have none.
    pub secret: Option<Secret>,
    /// `None`: every model (`"*"`).
    pub models: Option<Vec<String>>,
    pub admin: bool,
    pub limits: KeyLimits,
}

/// What a key may spend and how fast (`None`: no limit).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct KeyLimits {
    pub rpm: Option<u32>,
    pub tpm: Option<u32>,
    pub daily_tokens: Option<u64>,
    pub daily_cost_usd: Option<f64>,
    /// What the key's governor does when the shared state cannot answer
    /// (`None`: `[state] on_error`).
    pub on_state_error: Option<OnError>,
}

#[derive(Debug)]
pub struct Upstream {
    pub lane: Lane,
    pub limits: LaneLimits,
    /// Requests per minute conclave sends it (calls wait for their turn).
    pub rpm: Option<u32>,
    pub timeout: Duration,
    /// Longest gap between two events of a streamed answer.
    pub stream_idle_timeout: Duration,
    /// The server also speaks the Responses API natively (`responses`):
    /// a passthrough to it forwards `/v1/responses` bodies verbatim.
    pub responses: bool,
    /// Its `retries`, `eject` and `health`.
    pub resilience: Resilience,
    pub kind: UpstreamKind,
}

#[derive(Debug)]
pub enum UpstreamKind {
    OpenAi {
        base_url: String,
        api_key: Option<Secret>,
        llama_swap: Option<LlamaSwap>,
    },
    /// Anthropic's Messages API (`kind = "anthropic"`).
    Anthropic(Anthropic),
    Mock {
        /// The wire format it speaks (`api`).
        api: crate::mock::Api,
        swap: SwapSim,
        quirks: Quirks,
        models: IndexMap<String, Behavior>,
    },
}

/// How many calls an upstream's lane lets through.
#[derive(Debug, Clone, Copy)]
pub struct LaneLimits {
    /// Local lane: calls per model at once (`None`: as many as its server
    /// takes, see [`crate::upstream::server_kind`]); cloud lane: calls at
    /// once (`None`: unbounded).
    pub max_concurrency: Option<usize>,
    /// Local lane: models served at once.
    pub max_models: usize,
    /// Local lane: a call waiting longer stops new calls for the models
    /// being served from joining.
    pub max_wait_swap: Duration,
}

/// Where an upstream's llama-swap answers `GET /running`, and how it is
/// probed.
#[derive(Debug)]
pub struct LlamaSwap {
    pub url: String,
    pub probe_timeout: Duration,
    pub probe_cache: Duration,
}

impl UpstreamKind {
    pub fn name(&self) -> &'static str {
        match self {
            UpstreamKind::OpenAi { .. } => "openai",
            UpstreamKind::Anthropic(_) => "anthropic",
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
    /// Input tokens one image is estimated at, for budgets and `tpm`.
    pub image_tokens: u64,
    /// The context window the config gives (`None`: learned, if the
    /// server says).
    pub context_window: Option<u64>,
    /// `max_tokens` sent when a request sets none, to an upstream that
    /// requires it (Anthropic's).
    pub max_tokens: u32,
}

/// A route: an alias of another name, or a strategy that owns its config
/// (see `strategy`).
#[derive(Debug)]
pub enum Route {
    Passthrough {
        model: String,
        /// Overrides the upstream's `stream_idle_timeout` for this route.
        stream_idle_timeout: Option<Duration>,
    },
    /// Shared, so what serves a strategy's endpoints can read its routes.
    Strategy(std::sync::Arc<dyn RouteSpec>),
}

impl Route {
    pub fn strategy(&self) -> &'static str {
        match self {
            Route::Passthrough { .. } => "passthrough",
            Route::Strategy(s) => s.strategy(),
        }
    }
}

/// Reads and validates the config at `path`, taking secrets from the
/// process environment; `strategies` reads strategy routes
/// (`conclave::strategy::ALL`). Relative paths in it are relative to its
/// folder (see `paths`).
pub fn load(path: &Path, strategies: &Strategies) -> Result<Config, ConfigErrors> {
    let text = read(path)?;
    parse_file(&text, path, &|name| std::env::var(name).ok(), strategies)
}

/// The text of the config file at `path`.
fn read(path: &Path) -> Result<String, ConfigErrors> {
    std::fs::read_to_string(path).map_err(|e| ConfigErrors {
        file: path.display().to_string(),
        errors: vec![ConfigError {
            path: String::new(),
            message: format!("cannot read the file: {e}"),
        }],
    })
}

/// What `conclave check` reads: the config at `path` validated as
/// [`load`] does, except that an environment variable that is not set
/// (or blank) is a warning, not an error: its value is not the file's to
/// check, and `serve` ([`load`]) still refuses to start without it. Each
/// such variable stands in as a distinct placeholder (one that is also a
/// valid Redis URL), so every other rule still runs on the rest. Never
/// serve or call anything with the result: use [`load`] for that.
pub fn check(path: &Path, strategies: &Strategies) -> Result<Config, ConfigErrors> {
    let text = read(path)?;
    let unset = std::cell::RefCell::new(Vec::<String>::new());
    let env = |name: &str| match std::env::var(name) {
        Ok(v) if !v.trim().is_empty() => Some(v),
        _ => {
            let mut unset = unset.borrow_mut();
            if !unset.iter().any(|n| n == name) {
                unset.push(name.to_owned());
            }
            Some(format!("redis://unset:{name}@unset.invalid/0"))
        }
    };
    let mut config = parse_file(&text, path, &env, strategies)?;
    for name in unset.into_inner() {
        config.warnings.push(format!(
            "environment variable {name} is not set: `conclave serve` refuses to start without it"
        ));
    }
    Ok(config)
}

/// [`parse`] for the text of the config file at `path`: its relative
/// paths anchored at the file's folder, and the files it names checked.
pub fn parse_file(
    text: &str,
    path: &Path,
    env: &dyn Fn(&str) -> Option<String>,
    strategies: &Strategies,
) -> Result<Config, ConfigErrors> {
    let file = path.display().to_string();
    let mut config = parse(text, &file, env, strategies)?;
    let mut errs = Errors::default();
    paths::anchor(&mut config, &folder_of(path), &mut errs);
    if errs.0.is_empty() {
        Ok(config)
    } else {
        Err(ConfigErrors {
            file,
            errors: errs.0,
        })
    }
}

/// The folder a config file's relative paths start from: its own
/// (the working directory for a bare file name).
fn folder_of(path: &Path) -> PathBuf {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_owned(),
        _ => PathBuf::from("."),
    }
}

/// Validates config text; `env` looks up environment variables, and
/// `strategies` reads strategy routes (`conclave::strategy::ALL`).
pub fn parse(
    text: &str,
    file: &str,
    env: &dyn Fn(&str) -> Option<String>,
    strategies: &Strategies,
) -> Result<Config, ConfigErrors> {
    let mut errs = Errors::default();
    let config = validate::validate(text, env, strategies, &mut errs);
    match config {
        Some(c) if errs.0.is_empty() => Ok(c),
        _ => Err(ConfigErrors {
            file: file.to_owned(),
            errors: errs.0,
        }),
    }
}

/// What `conclave mock` plays: the simulated models, llama-swap
/// emulation and the quirks of real servers.
#[derive(Debug, Default)]
pub struct MockSetup {
    pub models: IndexMap<String, Behavior>,
    pub swap: SwapSim,
    pub quirks: Quirks,
    /// Serve `POST /v1/responses` too.
    pub responses: bool,
    /// The wire format it speaks (`api`).
    pub api: crate::mock::Api,
}

/// The simulated models (and llama-swap emulation) of one `kind = "mock"`
/// upstream of the config at `path`, for `conclave mock`: the first one,
/// or `name`.
pub fn mock_models(path: &Path, name: Option<&str>) -> Result<MockSetup, ConfigErrors> {
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
    let mut swap = SwapSim::default();
    let mut parsed = parsed;
    if let Some(u) = &mut parsed {
        for (model, b) in &u.models {
            for (p, msg) in b.check() {
                errs.push(format!("{at}.models.{model}.{p}"), msg);
            }
        }
        paths::anchor_models(&at, u.models.iter_mut(), &folder_of(path), &mut errs);
        swap = validate::swap_sim(u, &at, &mut errs);
        anthropic::mock_api(u, &at, &mut errs);
    }
    match parsed {
        Some(u) if errs.0.is_empty() => Ok(MockSetup {
            quirks: Quirks::new(&u.quirks),
            responses: u.responses,
            api: u.api,
            models: u.models,
            swap,
        }),
        _ => Err(ConfigErrors {
            file,
            errors: errs.0,
        }),
    }
}
impl Config {
    /// Every secret the config holds (upstream keys, API keys and the
    /// metrics key), which
    /// nothing an upstream says may repeat.
    pub fn secrets(&self) -> impl Iterator<Item = &str> {
        let upstream = self.upstreams.values().filter_map(|u| match &u.kind {
            UpstreamKind::OpenAi {
                api_key: Some(k), ..
            }
            | UpstreamKind::Anthropic(Anthropic {
                api_key: Some(k), ..
            }) => Some(k.0.as_str()),
            _ => None,
        });
        upstream
            .chain(
                self.keys
                    .iter()
                    .filter_map(|k| k.secret.as_ref().map(|s| s.0.as_str())),
            )
            .chain(self.server.metrics_key.as_ref().map(|s| s.0.as_str()))
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

    /// Whether `name` (through passthrough routes) is a model on a local
    /// lane.
    pub fn is_local(&self, name: &str) -> bool {
        self.models
            .get(self.resolve_alias(name))
            .and_then(|m| self.upstreams.get(&m.upstream))
            .is_some_and(|u| u.lane == Lane::Local)
    }
}

#[cfg(test)]
mod tests;
