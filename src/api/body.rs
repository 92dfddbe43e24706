//! Reads a request body within `server.max_body_bytes` and
//! `server.body_read_timeout`: a declared `Content-Length` over the limit
//! is refused before a byte is read, a body that grows past it is cut off,
//! and one that trickles in too slowly ends with a 408 (the request's own
//! deadline only starts once the body is in). Shutdown refuses bodies still
//! being read.

use std::task::Poll;
use std::time::Duration;

use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use http_body_util::{BodyExt, LengthLimitError, Limited};
use tokio_util::sync::CancellationToken;

use super::error::ApiError;

pub async fn read(
    body: Body,
    headers: &HeaderMap,
    limit: usize,
    within: Duration,
    stop: &CancellationToken,
) -> Result<Bytes, ApiError> {
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limit as u64) {
        return Err(ApiError::TooLarge { limit });
    }
    let collect = Limited::new(body, limit).collect();
    tokio::pin!(collect);
    // A body that came in with its head is all there: no timer for it.
    let first = std::future::poll_fn(|cx| Poll::Ready(collect.as_mut().poll(cx))).await;
    let read = match first {
        Poll::Ready(r) => r,
        Poll::Pending => tokio::select! {
            r = tokio::time::timeout(within, collect) => match r {
                Err(_) => return Err(ApiError::BodyTimeout { after: within }),
                Ok(r) => r,
            },
            () = stop.cancelled() => return Err(ApiError::ShuttingDown),
        },
    };
    match read {
        Ok(c) => Ok(c.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(ApiError::TooLarge { limit }),
        Err(e) => Err(ApiError::BadRequest {
            message: format!("The request body could not be read: {e}"),
            param: None,
            code: Some("invalid_body"),
        }),
    }
}
