//! Configs that are valid but likely not what the user meant: `check`
//! prints these as warnings, `serve` logs them. Each strategy says what
//! deserves a warning in its own routes; a secret too plain to be told
//! apart from text ([`crate::redact::plain`]) is never redacted from
//! answers, and gets one too.

use super::{Anthropic, Config, Route, UpstreamKind};

/// Adds the warnings for `config` to it.
pub(super) fn warn(mut config: Config) -> Config {
    let mut warnings = Vec::new();
    for (name, route) in &config.routes {
        if let Route::Strategy(spec) = route {
            warnings.extend(spec.warnings(name, &config));
        }
    }
    warnings.extend(plain_secrets(&config));
    config.warnings.extend(warnings);
    config
}

/// A warning for each secret that redaction will not look for, named by
/// where it comes from (never by its value).
fn plain_secrets(config: &Config) -> Vec<String> {
    let upstreams = config
        .upstreams
        .iter()
        .filter_map(|(name, u)| match &u.kind {
            UpstreamKind::OpenAi {
                api_key: Some(k), ..
            }
            | UpstreamKind::Anthropic(Anthropic {
                api_key: Some(k), ..
            }) => Some((format!("upstreams.{name}.api_key_env"), k)),
            _ => None,
        });
    let keys = config.keys.iter().enumerate().filter_map(|(i, k)| {
        let s = k.secret.as_ref()?;
        Some((format!("keys[{i}].key_env (key \"{}\")", k.name), s))
    });
    let metrics = config
        .server
        .metrics_key
        .as_ref()
        .map(|s| ("server.metrics_key_env".to_owned(), s));
    upstreams
        .chain(keys)
        .chain(metrics)
        .filter_map(|(path, secret)| {
            let why = crate::redact::plain(&secret.0)?;
            Some(format!(
                "{path}: this secret is never redacted from what upstreams send: {why}, so it \
                 cannot be told apart from ordinary text. Fine for a placeholder key; a real \
                 secret should be a generated one."
            ))
        })
        .collect()
}
