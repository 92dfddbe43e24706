//! `[state]`: where shared state lives. Absent, it is the embedded
//! SQLite store (`server.state_path`, or memory); with a `url` (or
//! `url_env`) it is a Redis or Valkey server that several replicas
//! share: `redis://`, `rediss://` (TLS), with a password and database
//! number as `redis://:password@host:6379/2`.

use std::time::Duration;

use serde::Deserialize;

use super::fields::secret;
use super::{Errors, Secret};

/// Longest wait for one call to the shared state.
const MAX_TIMEOUT: Duration = Duration::from_secs(10);
const DEFAULT_TIMEOUT: Duration = Duration::from_millis(50);
const DEFAULT_LEASE_TTL: Duration = Duration::from_secs(30);

/// What a governor does when the shared state cannot answer in time.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OnError {
    /// Refuse the request: a 503 that says the limits cannot be checked.
    #[default]
    FailClosed,
    /// Admit it, and count what could not be checked (its spend is
    /// written once the state answers again).
    FailOpen,
}

impl OnError {
    pub fn label(self) -> &'static str {
        match self {
            OnError::FailClosed => "fail_closed",
            OnError::FailOpen => "fail_open",
        }
    }
}

/// A shared state: a Redis (or Valkey) server.
#[derive(Debug, Clone)]
pub struct StateConfig {
    /// The whole URL, password included.
    pub url: Secret,
    /// The URL as it may be shown: no password.
    pub shown: String,
    /// The default policy of every key's governor (a key's
    /// `on_state_error` overrides it).
    pub on_error: OnError,
    /// Longest wait for one call to it.
    pub timeout: Duration,
    /// Prefix of every key conclave writes.
    pub prefix: String,
    /// How long a replica's hold on a shared local lane lasts unless it
    /// renews it (a dead replica's hold ends by itself after this).
    pub lease_ttl: Duration,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Raw {
    url: Option<String>,
    url_env: Option<String>,
    #[serde(default)]
    on_error: OnError,
    #[serde(default, with = "humantime_serde")]
    timeout: Option<Duration>,
    prefix: Option<String>,
    #[serde(default, with = "humantime_serde")]
    lease_ttl: Option<Duration>,
}

/// Reads `[state]`: `None` for the embedded store.
pub(super) fn state(
    v: Option<toml::Value>,
    env: &dyn Fn(&str) -> Option<String>,
    errs: &mut Errors,
) -> Option<StateConfig> {
    let raw: Raw = errs.parse("state", v?)?;
    let url = match (raw.url, &raw.url_env) {
        (Some(u), None) => Secret(u),
        (None, Some(var)) => secret(env, var, "state.url_env", errs)?,
        (Some(_), Some(_)) => {
            errs.push("state.url_env", "set url or url_env, not both");
            return None;
        }
        (None, None) => {
            errs.push(
                "state.url",
                "missing: set url (redis://host:6379/0) or url_env (a variable holding it), \
                 or remove [state] to keep state in server.state_path",
            );
            return None;
        }
    };
    let shown = shown(&url.0);
    if let Err(why) = check_url(&url.0) {
        errs.push("state.url", format!("\"{shown}\" {why}"));
    }
    let timeout = raw.timeout.unwrap_or(DEFAULT_TIMEOUT);
    if timeout.is_zero() || timeout > MAX_TIMEOUT {
        errs.push(
            "state.timeout",
            format!(
                "must be greater than 0 and at most {}",
                humantime::format_duration(MAX_TIMEOUT)
            ),
        );
    }
    let lease_ttl = raw.lease_ttl.unwrap_or(DEFAULT_LEASE_TTL);
    if lease_ttl < Duration::from_secs(1) {
        errs.push("state.lease_ttl", "must be at least 1s");
    }
    let prefix = raw.prefix.unwrap_or_else(|| "conclave".to_owned());
    if prefix.is_empty() || prefix.contains(['{', '}']) || prefix.chars().any(char::is_whitespace) {
        errs.push(
            "state.prefix",
            "must be non-empty, without spaces or braces (braces are Redis Cluster hash tags)",
        );
    }
    Some(StateConfig {
        url,
        shown,
        on_error: raw.on_error,
        timeout,
        prefix,
        lease_ttl,
    })
}

/// Why `url` is not a Redis URL conclave can use: the rules the client
/// reads a URL by (checked here, so `conclave check` reports them).
pub(crate) fn check_url(url: &str) -> Result<(), &'static str> {
    let parsed = reqwest::Url::parse(url).map_err(|_| "is not a URL")?;
    let tcp = match parsed.scheme() {
        "redis" | "rediss" | "valkey" | "valkeys" if parsed.has_host() => true,
        "redis" | "rediss" | "valkey" | "valkeys" => return Err("has no host"),
        "unix" | "redis+unix" | "valkey+unix" => false,
        _ => return Err("is not a redis://, rediss:// or unix:// URL"),
    };
    if readable(&parsed, tcp) {
        Ok(())
    } else {
        Err("is not a Redis URL (redis://[:password@]host[:port][/db])")
    }
}

/// Whether the client can read `u`: a host that is not a wildcard, a TLS
/// fragment of `insecure` only, a database number, a user name and
/// password that decode to UTF-8, a known `protocol`; a socket's path.
fn readable(u: &reqwest::Url, tcp: bool) -> bool {
    let query: std::collections::HashMap<_, _> = u.query_pairs().collect();
    let number = |s: &str| s.parse::<i64>().is_ok();
    let protocol = query
        .get("protocol")
        .is_none_or(|p| matches!(p.as_ref(), "2" | "resp2" | "3" | "resp3"));
    if !tcp {
        return protocol && u.to_file_path().is_ok() && query.get("db").is_none_or(|d| number(d));
    }
    let wildcard = matches!(u.host_str(), Some("0.0.0.0" | "[::]"));
    let tls = matches!(u.scheme(), "rediss" | "valkeys");
    let fragment = !tls || u.fragment().is_none_or(|f| f == "insecure");
    let db = u.path().trim_matches('/');
    protocol
        && !wildcard
        && fragment
        && (db.is_empty() || number(db))
        && decodes(u.username())
        && u.password().is_none_or(decodes)
}

/// Whether `s`, percent-decoded, is UTF-8 (an escape that is not one
/// stays as it is).
fn decodes(s: &str) -> bool {
    let b = s.as_bytes();
    let hex = |i: usize| b.get(i).and_then(|&c| char::from(c).to_digit(16));
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while let Some(&c) = b.get(i) {
        match (c, hex(i + 1), hex(i + 2)) {
            (b'%', Some(high), Some(low)) => {
                out.push(u8::try_from(high * 16 + low).unwrap_or(b'?'));
                i += 3;
            }
            _ => {
                out.push(c);
                i += 1;
            }
        }
    }
    String::from_utf8(out).is_ok()
}

/// `url` without its password (for logs, errors and the start-up line).
pub fn shown(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(mut u) => {
            if u.password().is_some() {
                let _ = u.set_password(Some("***"));
            }
            u.to_string()
        }
        Err(_) => "(unparsable URL)".to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(toml: &str, env: &[(&str, &str)]) -> (Option<StateConfig>, Vec<String>) {
        let mut errs = Errors::default();
        let v: toml::Value = toml::from_str(toml).unwrap();
        let env = |k: &str| {
            env.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        };
        let got = state(Some(v), &env, &mut errs);
        (
            got,
            errs.0
                .iter()
                .map(|e| format!("{}: {}", e.path, e.message))
                .collect(),
        )
    }

    #[test]
    fn a_url_with_a_password_is_kept_whole_and_shown_without_it() {
        let (s, errs) = read(r#"url = "redis://:hunter2@cache:6380/3""#, &[]);
        assert!(errs.is_empty(), "{errs:?}");
        let s = s.unwrap();
        assert_eq!(s.url.0, "redis://:hunter2@cache:6380/3");
        assert!(!s.shown.contains("hunter2"), "{}", s.shown);
        assert_eq!(s.on_error, OnError::FailClosed);
        assert_eq!(s.timeout, DEFAULT_TIMEOUT);
        let (s, errs) = read(
            "url_env = \"REDIS\"\non_error = \"fail_open\"\ntimeout = \"200ms\"",
            &[("REDIS", "rediss://u:p@cache:6379")],
        );
        assert!(errs.is_empty(), "{errs:?}");
        assert_eq!(s.unwrap().on_error, OnError::FailOpen);
    }

    #[test]
    fn bad_state_tables_say_what_is_wrong() {
        let (_, errs) = read(r#"url = "http://cache:6379""#, &[]);
        assert!(errs[0].contains("not a redis://"), "{errs:?}");
        let (_, errs) = read(
            r#"url = "redis://:secret@cache:6379"
timeout = "0s""#,
            &[],
        );
        assert!(errs[0].contains("state.timeout"), "{errs:?}");
        assert!(!errs.join(" ").contains("secret"), "{errs:?}");
        let (_, errs) = read(r#"on_error = "maybe""#, &[]);
        assert!(errs[0].contains("on_error"), "{errs:?}");
        let (_, errs) = read(r#"url_env = "NOPE""#, &[]);
        assert!(errs[0].contains("NOPE"), "{errs:?}");
    }
}
