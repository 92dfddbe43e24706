//! The `x-conclave-*` response headers of an answer, written from what
//! is known when they go out: the route and strategy always, then the
//! answer's meta (who served it, its attempts, a strategy's own headers)
//! and the headers learned while it was made, or the attempt count of a
//! failure. A stream sends what came too late for its headers as closing
//! comments (`super::relay`).

use axum::http::{HeaderMap, HeaderName, HeaderValue};

use crate::context::RequestCtx;
use crate::graph::Node;
use crate::model::Meta;

pub const ROUTE: HeaderName = HeaderName::from_static("x-conclave-route");
pub const STRATEGY: HeaderName = HeaderName::from_static("x-conclave-strategy");
pub const SERVED_BY: HeaderName = HeaderName::from_static("x-conclave-served-by");
pub const ATTEMPTS: HeaderName = HeaderName::from_static("x-conclave-attempts");

/// Room for every header an answer's response gets (its type and length,
/// the request id, these and a strategy's own), so that adding them never
/// grows the map again.
pub fn answer_map() -> HeaderMap {
    HeaderMap::with_capacity(16)
}

/// What is known about the answer when the response headers go out.
pub enum Known<'a> {
    /// Keep-alives were sent before any answer existed.
    Committed,
    Answer(&'a Meta),
    Failed,
}

/// The `x-conclave-*` response headers.
pub fn answer_headers(h: &mut HeaderMap, ctx: &RequestCtx, node: &Node, known: Known<'_>) {
    if let Ok(v) = HeaderValue::from_str(&ctx.route) {
        h.insert(ROUTE, v);
    }
    h.insert(STRATEGY, HeaderValue::from_static(node.strategy));
    match known {
        Known::Committed => {}
        Known::Failed => {
            h.insert(ATTEMPTS, count_value(ctx.attempts()));
        }
        Known::Answer(meta) => {
            for (name, value) in meta_headers(meta, ctx) {
                h.insert(name, value);
            }
        }
    }
}

/// A count as a header value; the small ones every answer has without an
/// allocation.
fn count_value(n: u32) -> HeaderValue {
    const SMALL: [&str; 10] = ["0", "1", "2", "3", "4", "5", "6", "7", "8", "9"];
    match SMALL.get(n as usize) {
        Some(s) => HeaderValue::from_static(s),
        None => HeaderValue::from(n),
    }
}

/// The headers an answer's meta becomes, with the attempt count so far.
pub fn meta_headers(meta: &Meta, ctx: &RequestCtx) -> Vec<(HeaderName, HeaderValue)> {
    let mut out = Vec::with_capacity(meta.headers.len() + 2);
    if let Some(v) = meta
        .served_by
        .as_deref()
        .and_then(|s| HeaderValue::from_str(s).ok())
    {
        out.push((SERVED_BY, v));
    }
    out.push((ATTEMPTS, count_value(ctx.attempts())));
    out.extend(meta.headers.iter().cloned());
    out.extend(late_headers(ctx));
    out
}

/// The headers learned while the answer was made
/// ([`RequestCtx::add_late_header`]): a whole answer's, or a stream's
/// closing comments.
pub fn late_headers(ctx: &RequestCtx) -> Vec<(HeaderName, HeaderValue)> {
    ctx.late_headers()
        .into_iter()
        .filter_map(|(name, value)| {
            Some((
                HeaderName::from_static(name),
                HeaderValue::from_str(&value).ok()?,
            ))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::count_value;

    #[test]
    fn counts_read_as_their_digits() {
        for n in [0, 1, 9, 10, 11, 99, 1234, u32::MAX] {
            assert_eq!(
                count_value(n).to_str().ok(),
                Some(n.to_string().as_str()),
                "{n}"
            );
        }
    }
}
