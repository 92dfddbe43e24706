//! How a config reads to a person: the resolved graph `conclave check`
//! prints, the one summary line `conclave serve` logs at start-up, and the
//! wording (counts, durations) the strategies' descriptions share.

use std::net::SocketAddr;

use indexmap::IndexMap;

use super::{Config, Key, Lane, Route, UpstreamKind};

/// `n` and `noun`, plural unless `n` is 1 ("1 retry", "2 retries",
/// "1 simulated model"); `noun` is the singular, the plural adds "s" (or
/// turns a final "y" after a consonant into "ies").
pub fn counted(n: impl Into<u64>, noun: &str) -> String {
    let n = n.into();
    if n == 1 {
        return format!("1 {noun}");
    }
    match noun.strip_suffix('y') {
        Some(stem) if !stem.ends_with(['a', 'e', 'i', 'o', 'u']) => format!("{n} {stem}ies"),
        _ => format!("{n} {noun}s"),
    }
}

/// A duration as `check` and warnings write it: humantime's form, with
/// the spelled-out units set apart ("7 days", "1 day 2h", "5m", "250ms").
pub fn duration_text(d: std::time::Duration) -> String {
    humantime::format_duration(d)
        .to_string()
        .split(' ')
        .map(|part| match part.find(|c: char| c.is_ascii_alphabetic()) {
            Some(i) if part[i..].len() > 2 => format!("{} {}", &part[..i], &part[i..]),
            _ => part.to_owned(),
        })
        .collect::<Vec<_>>()
        .join(" ")
}

impl Config {
    /// The resolved graph as `conclave check` prints it.
    pub fn describe(&self) -> String {
        let mut out = String::new();
        out.push_str(&format!("server: listen {}\n", self.server.listen));
        if !self.keys.is_empty() {
            out.push_str("keys:\n");
            for k in &self.keys {
                out.push_str(&format!("  {}: {}\n", k.name, key_terms(k)));
            }
        }
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
                    Some(ls) => format!("{base_url} (llama-swap {})", ls.url),
                    None => base_url.clone(),
                },
                UpstreamKind::Anthropic(a) => a.base_url.clone(),
                UpstreamKind::Mock { models, api, .. } => match api {
                    crate::mock::Api::OpenAi => counted(models.len() as u64, "simulated model"),
                    crate::mock::Api::Anthropic => format!(
                        "{} (Messages API)",
                        counted(models.len() as u64, "simulated model")
                    ),
                },
            };
            let rpm = u.rpm.map_or(String::new(), |r| format!(", {r} rpm"));
            out.push_str(&format!(
                "  {name}: {} {lane} lane, {detail}{rpm}\n",
                u.kind.name()
            ));
        }
        out.push_str("models:\n");
        for (name, m) in &self.models {
            out.push_str(&format!(
                "  {name} -> {}/{}{}\n",
                m.upstream,
                m.upstream_model,
                self.cached(name)
            ));
        }
        out.push_str("routes:\n");
        for (name, r) in &self.routes {
            match r {
                Route::Passthrough { model, .. } => out.push_str(&format!(
                    "  {name}: passthrough -> {model}{}\n",
                    self.cached(name)
                )),
                Route::Strategy(spec) => out.push_str(&format!(
                    "  {name}: {}{}\n",
                    spec.describe(self),
                    self.cached(name)
                )),
            }
        }
        if !self.cache_rules.is_empty() {
            out.push_str(&format!(
                "cache: at most {} and {} bytes, least recently used out first\n",
                counted(self.cache.max_entries, "entry"),
                self.cache.max_bytes
            ));
        }
        for w in &self.warnings {
            out.push_str(&format!("warning: {w}\n"));
        }
        out
    }

    /// `; cached …` for a route or model with a cache rule, else nothing.
    fn cached(&self, name: &str) -> String {
        self.cache_rules.get(name).map_or(String::new(), |r| {
            format!("; {}", super::cache::describe(r))
        })
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
        let traces = self
            .telemetry
            .otlp_endpoint
            .as_deref()
            .map_or("off".to_owned(), |e| format!("to {}", without_userinfo(e)));
        let state = match (&self.state, &self.server.state_path) {
            (Some(r), _) => format!("redis at {} ({})", r.shown, r.on_error.label()),
            (None, Some(p)) => format!("sqlite at {}", p.display()),
            (None, None) => "in memory".to_owned(),
        };
        format!(
            "listening on {listening}: {} models, {} routes ({}); upstreams: {}; auth {auth}; state {state}; event log {events}; traces {traces}",
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
}

/// A URL as it may be printed: a `user:password@` in it is left out.
fn without_userinfo(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) if !u.username().is_empty() || u.password().is_some() => {
            let _ = u.set_username("");
            let _ = u.set_password(None);
            u.to_string()
        }
        _ => url.to_owned(),
    }
}

/// What a key may use and spend, for `conclave check`.
fn key_terms(k: &Key) -> String {
    let l = &k.limits;
    let mut terms: Vec<String> = vec![match &k.models {
        None => "all models".to_owned(),
        Some(m) => m.join(", "),
    }];
    terms.extend(l.rpm.map(|r| format!("{r} rpm")));
    terms.extend(l.tpm.map(|t| format!("{t} tpm")));
    terms.extend(l.daily_tokens.map(|t| format!("{t} tokens/day")));
    terms.extend(l.daily_cost_usd.map(|c| format!("${c:.2}/day")));
    if k.admin {
        terms.push("admin".into());
    }
    if k.secret.is_none() {
        terms.push("given as SHA-256".into());
    }
    terms.join("; ")
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::{counted, duration_text};

    #[test]
    fn counts_and_durations_read_as_english() {
        assert_eq!(counted(1u64, "simulated model"), "1 simulated model");
        assert_eq!(counted(3u64, "simulated model"), "3 simulated models");
        assert_eq!(counted(1u32, "retry"), "1 retry");
        assert_eq!(counted(0u32, "retry"), "0 retries");
        assert_eq!(counted(2u32, "key"), "2 keys");
        assert_eq!(duration_text(Duration::from_secs(7 * 86_400)), "7 days");
        assert_eq!(
            duration_text(Duration::from_secs(86_400 + 7_200)),
            "1 day 2h"
        );
        assert_eq!(duration_text(Duration::from_secs(300)), "5m");
        assert_eq!(duration_text(Duration::from_millis(250)), "250ms");
    }
}
