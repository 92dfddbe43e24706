//! The reqwest plumbing every HTTP transport shares: a request sent with
//! the call's ids, its response as a [`RawResponse`], why no response
//! arrived (without URLs or internals), a side answer's body read within
//! a cap, and the error of a transport that could not be set up.

use bytes::Bytes;
use futures::TryStreamExt;
use reqwest::header::HeaderValue;

use super::{BoxError, CallIds, RawResponse, TransportError};

/// The transport could not be set up.
#[derive(Debug, thiserror::Error)]
pub enum BuildError {
    #[error("the HTTP client could not be built: {0}")]
    Client(#[from] reqwest::Error),
    #[error("invalid URL {0}")]
    Url(String),
}

/// A side answer's body (a probe's, a count's), read to its end unless
/// it grows past `max` bytes: `Ok(None)` then, so no server can make conclave
/// hold more. The caller bounds the time.
pub async fn read_capped(
    resp: reqwest::Response,
    max: usize,
) -> Result<Option<Bytes>, reqwest::Error> {
    let mut body = bytes::BytesMut::new();
    let mut parts = resp.bytes_stream();
    while let Some(part) = parts.try_next().await? {
        if body.len() + part.len() > max {
            return Ok(None);
        }
        body.extend_from_slice(&part);
    }
    Ok(Some(body.freeze()))
}

pub(super) fn parse_url(s: &str) -> Result<reqwest::Url, BuildError> {
    reqwest::Url::parse(s).map_err(|e| BuildError::Url(format!("{s}: {e}")))
}

/// Says why no response arrived, without URLs or internals.
pub(super) fn describe(e: &reqwest::Error) -> String {
    super::direct::describe(e, e.is_connect(), e.is_timeout())
}

/// Sends a request with the call's ids (`x-request-id`, `traceparent`),
/// and says why when no response arrived.
pub(super) async fn send(
    mut req: reqwest::RequestBuilder,
    ids: &CallIds<'_>,
) -> Result<reqwest::Response, TransportError> {
    if let Ok(id) = HeaderValue::from_str(ids.request_id) {
        req = req.header("x-request-id", id);
    }
    if let Some(tp) = ids.traceparent.as_deref() {
        req = req.header("traceparent", tp);
    }
    req.send().await.map_err(|e| TransportError {
        reason: describe(&e),
        connected: !e.is_connect() && !e.is_timeout(),
        source: Some(Box::new(e.without_url())),
    })
}

/// A response as a [`RawResponse`], its body streamed without its URL.
pub(super) fn raw(resp: reqwest::Response, retry_after: Option<String>) -> RawResponse {
    RawResponse {
        status: resp.status().as_u16(),
        retry_after,
        json: super::is_json(resp.headers()),
        body: Box::pin(
            resp.bytes_stream()
                .map_err(|e| Box::new(e.without_url()) as BoxError),
        ),
    }
}
