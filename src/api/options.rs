//! The `x-conclave-*` request headers (and `anthropic-beta`), read in one place into the request
//! context's [`Options`], each with its own 400 when it is malformed.

use std::sync::Arc;

use axum::http::{HeaderMap, HeaderName};

use super::error::ApiError;
use crate::context::{CacheDirective, Options};

// Names, not strings: a lookup by string parses the name every time.
const PIN: HeaderName = HeaderName::from_static("x-conclave-pin");
const SESSION: HeaderName = HeaderName::from_static("x-conclave-session");
const CONFIRM: HeaderName = HeaderName::from_static("x-conclave-confirm");
const ANTHROPIC_BETA: HeaderName = HeaderName::from_static("anthropic-beta");
const CACHE: HeaderName = HeaderName::from_static("x-conclave-cache");

/// Longest `anthropic-beta` accepted (a comma-separated list of names).
const MAX_BETA: usize = 1024;

/// Longest pin or session id accepted.
const MAX_TOKEN: usize = 128;

pub fn read(headers: &HeaderMap) -> Result<Options, ApiError> {
    if !headers.keys().any(is_read) {
        return Ok(Options::default());
    }
    Ok(Options {
        pin: token(headers, PIN)?,
        session: token(headers, SESSION)?,
        confirm: match text(headers, CONFIRM)?
            .as_deref()
            .map(str::to_ascii_lowercase)
            .as_deref()
        {
            None | Some("no" | "false" | "0") => false,
            Some("yes" | "true" | "1") => true,
            Some(_) => return Err(bad(CONFIRM, "must be `yes` or `no`")),
        },
        trace_parent: crate::span::remote_parent(headers),
        anthropic_beta: match text(headers, ANTHROPIC_BETA)? {
            Some(s) if s.len() > MAX_BETA => {
                return Err(bad(
                    ANTHROPIC_BETA,
                    &format!("is longer than {MAX_BETA} characters"),
                ));
            }
            s => s.map(Arc::from),
        },
        cache: cache(headers)?,
    })
}

/// Whether `name` is a header [`read`] looks at. Most requests carry none
/// of them: one pass over their few names costs less than a lookup each.
fn is_read(name: &HeaderName) -> bool {
    name.as_str().starts_with("x-conclave-")
        || *name == ANTHROPIC_BETA
        || *name == axum::http::header::CACHE_CONTROL
        || crate::span::is_trace_header(name)
}

/// `Cache-Control`'s `no-cache` / `no-store` (other directives are not
/// the gateway's business) and `x-conclave-cache: bypass`.
fn cache(headers: &HeaderMap) -> Result<CacheDirective, ApiError> {
    let mut d = CacheDirective::default();
    for v in headers.get_all(axum::http::header::CACHE_CONTROL) {
        let Ok(v) = v.to_str() else { continue };
        for part in v.split(',').take(32) {
            match part.trim().to_ascii_lowercase().as_str() {
                "no-cache" => d.no_lookup = true,
                "no-store" => d.no_store = true,
                _ => {}
            }
        }
    }
    match text(headers, CACHE)?
        .as_deref()
        .map(str::to_ascii_lowercase)
        .as_deref()
    {
        None => {}
        Some("bypass") => d.no_lookup = true,
        Some(_) => return Err(bad(CACHE, "must be `bypass`")),
    }
    Ok(d)
}

fn bad(header: HeaderName, what: &str) -> ApiError {
    ApiError::BadRequest {
        message: format!("The {header} header {what}."),
        param: Some(header.as_str().into()),
        code: Some("invalid_header"),
    }
}

/// A header's trimmed text; `None` when absent or blank.
fn text(headers: &HeaderMap, name: HeaderName) -> Result<Option<String>, ApiError> {
    let Some(v) = headers.get(&name) else {
        return Ok(None);
    };
    let s = v
        .to_str()
        .map_err(|_| bad(name, "must be printable ASCII"))?
        .trim();
    Ok((!s.is_empty()).then(|| s.to_owned()))
}

/// A name-like header value: printable ASCII without spaces, bounded.
fn token(headers: &HeaderMap, name: HeaderName) -> Result<Option<Arc<str>>, ApiError> {
    match text(headers, name.clone())? {
        None => Ok(None),
        Some(s) if s.len() > MAX_TOKEN => {
            Err(bad(name, &format!("is longer than {MAX_TOKEN} characters")))
        }
        Some(s) if !s.bytes().all(|b| b.is_ascii_graphic()) => {
            Err(bad(name, "must not contain spaces or control characters"))
        }
        Some(s) => Ok(Some(s.into())),
    }
}

#[cfg(test)]
mod tests {
    use axum::http::{HeaderMap, HeaderValue};

    use super::read;

    fn with(name: &'static str, value: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(
            axum::http::HeaderName::from_static(name),
            HeaderValue::from_str(value).unwrap(),
        );
        h.insert("content-type", HeaderValue::from_static("application/json"));
        h
    }

    /// Every header `read` looks at is seen by the pass that lets plain
    /// requests skip the lookups: each one, alone among common headers,
    /// still changes what is read (or is refused).
    #[test]
    fn every_header_read_is_looked_at() {
        for name in [
            "x-conclave-pin",
            "x-conclave-session",
            "x-conclave-confirm",
            "x-conclave-cache",
            "anthropic-beta",
        ] {
            let bad = if name == "anthropic-beta" {
                "b".repeat(super::MAX_BETA + 1)
            } else {
                "not valid here".to_owned()
            };
            assert!(read(&with(name, &bad)).is_err(), "{name} was not read");
        }
        let o = read(&with("cache-control", "no-store")).unwrap();
        assert!(o.cache.no_store);
        let o = read(&with(
            "traceparent",
            "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01",
        ))
        .unwrap();
        assert!(o.trace_parent.is_some());
        let o = read(&with("x-conclave-confirm", "yes")).unwrap();
        assert!(o.confirm);
        let plain = read(&with("user-agent", "curl")).unwrap();
        assert!(plain.pin.is_none() && !plain.confirm && plain.trace_parent.is_none());
    }
}
