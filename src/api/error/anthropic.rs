//! Errors in the Anthropic Messages API's shape:
//! `{"type": "error", "error": {"type", "message"}}`, with the status the
//! OpenAI shape has (but 529 for 503, as Anthropic's overloaded) and
//! Anthropic's error `type` for that status.

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::{ApiError, Shape};
use crate::wire::anthropic::error_type;

/// The status Anthropic answers for `status`: its own 529 where the
/// gateway is overloaded (503: busy, shutting down), which Anthropic's
/// clients retry as they would Anthropic's.
pub(super) fn status(status: StatusCode) -> StatusCode {
    match status {
        StatusCode::SERVICE_UNAVAILABLE => StatusCode::from_u16(529).unwrap_or(status),
        s => s,
    }
}

/// The error object (`type`, `message`) of `shape`, typed by the status
/// Anthropic answers; `object` is the OpenAI error object, whose message
/// it keeps.
fn object(shape: &Shape, object: &Value) -> Value {
    json!({
        "type": error_type(status(shape.status).as_u16()),
        "message": object.get("message").cloned().unwrap_or(Value::Null),
    })
}

/// The whole Anthropic error body.
pub(super) fn body(shape: &Shape, openai: Value) -> Value {
    json!({"type": "error", "error": object(shape, &openai)})
}

impl ApiError {
    /// The error as Anthropic's `error` object (`type`, `message`), for
    /// a stream's `error` event.
    pub fn anthropic_object(&self) -> Value {
        object(&self.shape(), &self.object())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use axum::http::StatusCode;

    use super::super::{ApiError, ErrorStyle};

    async fn body_of(e: ApiError) -> (StatusCode, serde_json::Value) {
        let resp = e.respond(ErrorStyle::Anthropic);
        let status = resp.status();
        let bytes = axum::body::to_bytes(resp.into_body(), 1 << 20)
            .await
            .unwrap();
        (status, serde_json::from_slice(&bytes).unwrap())
    }

    #[tokio::test]
    async fn errors_take_anthropics_shape_and_types() {
        let (status, body) = body_of(ApiError::NotFound { model: "x".into() }).await;
        assert_eq!(status, 404);
        assert_eq!(body["type"], "error");
        assert_eq!(body["error"]["type"], "not_found_error");
        assert!(body["error"]["message"].as_str().unwrap().contains("`x`"));
        let (status, body) = body_of(ApiError::Unauthorized { reason: "no" }).await;
        assert_eq!(status, 401);
        assert_eq!(body["error"]["type"], "authentication_error");
        let (status, body) = body_of(ApiError::ServerBusy).await;
        assert_eq!(status.as_u16(), 529);
        assert_eq!(body["error"]["type"], "overloaded_error");
        assert_eq!(
            ApiError::TooLarge { limit: 1 }.anthropic_object()["type"],
            "request_too_large"
        );
    }
}
