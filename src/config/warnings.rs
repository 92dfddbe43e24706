//! Configs that are valid but likely not what the user meant: `check`
//! prints these as warnings, `serve` logs them.

use super::{Config, Route};

/// Adds the warnings for `config` to it.
pub(super) fn warn(mut config: Config) -> Config {
    let mut warnings = Vec::new();
    idle_verifiers(&config, &mut warnings);
    hung_tiers(&config, &mut warnings);
    config.warnings.extend(warnings);
    config
}

/// A chain with a verifier whose tiers all self-certify: the verifier is
/// never called.
fn idle_verifiers(config: &Config, warnings: &mut Vec<String>) {
    for (name, route) in &config.routes {
        let Route::Chain(c) = route else { continue };
        if let Some(v) = &c.verifier
            && !c.tiers.iter().any(|t| config.tier_is_verified(c, t))
        {
            warnings.push(format!(
                "routes.{name}.verifier: every tier self-certifies (cloud upstreams, or listed in \
                 self_certify), so \"{v}\" is never called; list tiers in verify = [...] or drop the verifier"
            ));
        }
    }
}

/// A tier that is not the last of its chain, on an upstream whose
/// `timeout` is not shorter than the request's: one hung call there spends
/// the whole request's time and the later tiers never get a turn.
fn hung_tiers(config: &Config, warnings: &mut Vec<String>) {
    for (name, route) in &config.routes {
        let Route::Chain(c) = route else { continue };
        let Some((_, earlier)) = c.tiers.split_last() else {
            continue;
        };
        for (i, tier) in earlier.iter().enumerate() {
            let upstream = config
                .models
                .get(config.resolve_alias(tier))
                .and_then(|m| config.upstreams.get_key_value(&m.upstream));
            if let Some((up, u)) = upstream
                && u.timeout >= config.server.request_timeout
            {
                warnings.push(format!(
                    "routes.{name}.tiers[{i}]: upstream \"{up}\" has timeout = {} but \
                     server.request_timeout is {}: a hung call to \"{tier}\" uses up the whole \
                     request and the later tiers never run; set upstreams.{up}.timeout shorter",
                    humantime::format_duration(u.timeout),
                    humantime::format_duration(config.server.request_timeout),
                ));
            }
        }
    }
}
