//! The upstreams of a running gateway, kept across reloads. A reload
//! that leaves an upstream's settings (and its models) as they were gets
//! the running [`Upstream`] back, so its lane, pacing, connection pool,
//! llama-swap probe and the context windows it learned go on; one whose
//! settings changed is built anew, but on the running upstream's lane
//! (and probe) when the lane's own settings did not change. So calls
//! still in flight on the old config and new ones on the new share one
//! lane, and a single-slot server never gets two calls at once because
//! of a reload. Its health (its own and its models' ejection states) goes
//! on too, as long as it is the same server (kind and base URL). Secrets
//! count as settings (by their digest, never kept).

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::Arc;

use parking_lot::Mutex;

use super::{Upstream, openai};
use crate::clock::Clock;
use crate::config::{self, Secret, UpstreamKind};
use crate::sink::Metrics;

/// The upstreams built so far, by name.
#[derive(Default)]
pub struct Registry {
    entries: Mutex<HashMap<String, Entry>>,
    /// The instance's wall clock, for what upstreams date (an
    /// Anthropic limit's reset, a translated answer's `created`).
    clock: Clock,
}

struct Entry {
    /// Everything that makes the upstream what it is.
    whole: String,
    /// What its lane depends on.
    lane: String,
    /// The server it calls (its health goes on while that stays).
    server: String,
    upstream: Arc<Upstream>,
}

impl Registry {
    pub fn new() -> Registry {
        Registry::default()
    }

    /// A registry whose upstreams read the date from `clock`.
    pub fn with_clock(clock: Clock) -> Registry {
        Registry {
            clock,
            ..Registry::default()
        }
    }

    /// Upstream `name` as `cfg` describes it: the running one when
    /// nothing about it changed, else a new one (on the running one's
    /// lane when that did not change). `models` and `max_tokens` are
    /// [`Upstream::from_config`]'s.
    pub fn upstream(
        &self,
        name: &str,
        cfg: &config::Upstream,
        models: Vec<(String, Arc<str>)>,
        max_tokens: HashMap<String, u32>,
        metrics: &Metrics,
    ) -> Result<Arc<Upstream>, openai::BuildError> {
        let lane = lane_key(cfg);
        let mut sorted: Vec<_> = max_tokens.iter().collect();
        sorted.sort();
        let whole = format!("{lane}|{cfg:?}|{models:?}|{sorted:?}|{}", secrets(cfg));
        let mut entries = self.entries.lock();
        let running = entries.get(name);
        if let Some(e) = running.filter(|e| e.whole == whole) {
            return Ok(e.upstream.clone());
        }
        let lane_of = running.filter(|e| e.lane == lane).map(|e| &*e.upstream);
        let server = server_key(cfg);
        let health_of = running
            .filter(|e| e.server == server)
            .map(|e| e.upstream.health.clone());
        let built = Arc::new(Upstream::from_config(
            name,
            cfg,
            models,
            max_tokens,
            (metrics.clone(), self.clock),
            lane_of,
            health_of,
        )?);
        entries.insert(
            name.to_owned(),
            Entry {
                whole,
                lane,
                server,
                upstream: built.clone(),
            },
        );
        Ok(built)
    }

    /// Forgets the upstreams not named in `names` (a config without them
    /// is running).
    pub fn keep_only<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let keep: Vec<&str> = names.into_iter().collect();
        self.entries
            .lock()
            .retain(|n, _| keep.contains(&n.as_str()));
    }
}

/// The settings a lane depends on: its kind and limits, and the server
/// it queues calls for (with its llama-swap probe, which asks with the
/// upstream's key; the probe is told of changed models).
fn lane_key(cfg: &config::Upstream) -> String {
    let server = match &cfg.kind {
        UpstreamKind::OpenAi {
            base_url,
            llama_swap: Some(ls),
            ..
        } => format!("openai {base_url} {ls:?} {}", secrets(cfg)),
        UpstreamKind::OpenAi { base_url, .. } => format!("openai {base_url}"),
        UpstreamKind::Anthropic(a) => format!("anthropic {}", a.base_url),
        UpstreamKind::Mock { swap, .. } => format!("mock {swap:?}"),
    };
    format!("{:?}|{:?}|{server}", cfg.lane, cfg.limits)
}

/// The server an upstream calls: its kind and base URL.
fn server_key(cfg: &config::Upstream) -> String {
    match &cfg.kind {
        UpstreamKind::OpenAi { base_url, .. } => format!("openai {base_url}"),
        UpstreamKind::Anthropic(a) => format!("anthropic {}", a.base_url),
        UpstreamKind::Mock { .. } => "mock".to_owned(),
    }
}

/// The digests of the upstream's secrets (their `Debug` hides them, so
/// a changed key would otherwise go unseen).
fn secrets(cfg: &config::Upstream) -> String {
    let key: Option<&Secret> = match &cfg.kind {
        UpstreamKind::OpenAi { api_key, .. } => api_key.as_ref(),
        UpstreamKind::Anthropic(a) => a.api_key.as_ref(),
        UpstreamKind::Mock { .. } => None,
    };
    let mut out = String::new();
    if let Some(k) = key {
        for b in config::digest(&k.0) {
            let _ = write!(out, "{b:02x}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use super::*;

    fn upstream(registry: &Registry, toml: &str, key: &str) -> Arc<Upstream> {
        let env = |v: &str| (v == "KEY").then(|| key.to_owned());
        let c = config::parse(toml, "t.toml", &env, &config::Strategies::new([], &[])).unwrap();
        registry
            .upstream(
                "u",
                &c.upstreams["u"],
                Vec::new(),
                HashMap::new(),
                &Metrics::noop(),
            )
            .unwrap()
    }

    #[test]
    fn a_reload_reuses_what_it_did_not_change_and_the_lane_of_what_it_did() {
        let r = Registry::new();
        let toml = |timeout: &str, lane: &str| {
            format!(
                "[upstreams.u]\nkind = \"openai\"\nbase_url = \"http://127.0.0.1:9/v1\"\n\
                 api_key_env = \"KEY\"\nlane = \"{lane}\"\ntimeout = \"{timeout}\"\n"
            )
        };
        let first = upstream(&r, &toml("30s", "local"), "k1");
        let same = upstream(&r, &toml("30s", "local"), "k1");
        assert!(Arc::ptr_eq(&first, &same));
        let slower = upstream(&r, &toml("40s", "local"), "k1");
        assert!(!Arc::ptr_eq(&first, &slower));
        assert!(Arc::ptr_eq(&first.gate, &slower.gate), "the lane goes on");
        assert!(Arc::ptr_eq(&first.health, &slower.health), "so does health");
        let rekeyed = upstream(&r, &toml("40s", "local"), "k2");
        assert!(
            !Arc::ptr_eq(&slower, &rekeyed),
            "a new key is a new upstream"
        );
        let cloud = upstream(&r, &toml("40s", "cloud"), "k2");
        assert!(!Arc::ptr_eq(&rekeyed.gate, &cloud.gate));
        assert!(Arc::ptr_eq(&first.health, &cloud.health), "the same server");
        r.keep_only([]);
        let again = upstream(&r, &toml("40s", "cloud"), "k2");
        assert!(!Arc::ptr_eq(&cloud, &again));
    }
}
