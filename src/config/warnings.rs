//! Configs that are valid but likely not what the user meant: `check`
//! prints these as warnings, `serve` logs them. Each strategy says what
//! deserves a warning in its own routes.

use super::{Config, Route};

/// Adds the warnings for `config` to it.
pub(super) fn warn(mut config: Config) -> Config {
    let mut warnings = Vec::new();
    for (name, route) in &config.routes {
        if let Route::Strategy(spec) = route {
            warnings.extend(spec.warnings(name, &config));
        }
    }
    config.warnings.extend(warnings);
    config
}
