//! Checks of a model's `price` (each figure a number ≥ 0, the cache
//! prices defaulting to the input price) and of its `max_tokens`, the
//! default an upstream that requires one (Anthropic's) is sent.

use super::{Errors, raw};

/// `max_tokens` sent to an upstream that requires it when neither the
/// request nor the model's config sets one.
pub const DEFAULT_MAX_TOKENS: u32 = 4096;

pub(super) fn check(m: &raw::Model, path: &str, errs: &mut Errors) {
    let p = &m.price;
    for (field, v) in [
        ("input_per_mtok", Some(p.input_per_mtok)),
        ("output_per_mtok", Some(p.output_per_mtok)),
        ("cached_input_per_mtok", p.cached_input_per_mtok),
        ("cache_write_per_mtok", p.cache_write_per_mtok),
    ] {
        if let Some(v) = v
            && !(v.is_finite() && v >= 0.0)
        {
            errs.push(format!("{path}.price.{field}"), "must be a number >= 0");
        }
    }
    if m.max_tokens == Some(0) {
        errs.push(
            format!("{path}.max_tokens"),
            "must be at least 1 (omit it for the default, 4096)",
        );
    }
}
