//! The one place errors become HTTP: OpenAI's body
//! `{"error": {"message", "type", "param", "code"}}` with the status DESIGN.md
//! lists, before a stream starts; one SSE `data: {"error": …}` event after.
//! The Anthropic Messages dialect gets the same errors in Anthropic's shape
//! ([`anthropic`], chosen by an [`ErrorStyle`]).
//! 5xx messages name the upstream that failed, never a key or an internal URL;
//! a model's error reads [`ModelError::public_message`] (an upstream's own
//! words only when they are about the client's request), while the log line
//! of a failed request keeps the redacted detail. Requests refused because
//! the shared state is down are logged at most once per 10 s, with how
//! many were held back.

use crate::wire::billing::BadCap;
use std::time::Duration;

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde_json::{Value, json};

mod anthropic;
mod model;

use crate::error::ModelError;
use crate::governor::{Rejection, Scope};
use crate::store::responses::ConversationError;
use model::model_shape;

#[derive(Debug, thiserror::Error)]
pub enum ApiError {
    #[error("{message}")]
    BadRequest {
        message: String,
        param: Option<String>,
        code: Option<&'static str>,
    },
    #[error("{reason}")]
    Unauthorized { reason: &'static str },
    #[error("Only an admin key may read {what}.")]
    AdminOnly { what: &'static str },
    #[error("Only the metrics key (server.metrics_key_env) or an admin key may read {what}.")]
    OperatorOnly { what: &'static str },
    /// The console of a gateway without `[[keys]]`, asked for by a client
    /// that is not on this machine while `console.open` is off.
    #[error(
        "This gateway has no [[keys]], so its console is served to loopback clients only; set \
         console.open = true to serve it to every client."
    )]
    ConsoleLoopbackOnly,
    #[error("{}", .0.message)]
    Governed(Box<Rejection>),
    /// A stored response that is unknown, expired, deleted or another
    /// key's: all alike, in OpenAI's words.
    #[error("Response with id '{id}' not found.")]
    ResponseNotFound { id: String },
    /// A request record that is unknown, evicted from the ring of recent
    /// requests, or another key's: all alike.
    #[error("Request with id '{id}' not found.")]
    RequestNotFound { id: String },
    /// A `previous_response_id` that is not (or no longer) stored.
    #[error("Previous response with id '{id}' not found.")]
    PreviousResponseNotFound { id: String },
    /// An unknown model, or one the key may not use: the two answer
    /// alike, so a key cannot learn which names exist (as OpenAI does).
    #[error("The model `{model}` does not exist or you do not have access to it.")]
    NotFound { model: String },
    #[error("The request body is larger than the gateway's limit of {limit} bytes.")]
    TooLarge { limit: usize },
    #[error("The request timed out after {}.", humantime::format_duration(*.after))]
    Timeout { after: Duration },
    #[error("The request body did not arrive within {}.", humantime::format_duration(*.after))]
    BodyTimeout { after: Duration },
    #[error(
        "The gateway cannot check key `{key}`'s limits: the shared state does not answer; retry \
         shortly."
    )]
    StateDown { key: std::sync::Arc<str> },
    #[error("The gateway is shutting down; retry the request.")]
    ShuttingDown,
    #[error("The gateway has no room for another request right now; retry the request.")]
    ServerBusy,
    #[error("Unknown request URL: {method} {path}.")]
    UnknownUrl { method: String, path: String },
    #[error("Method not allowed for this URL.")]
    MethodNotAllowed,
    #[error("{0}")]
    Internal(String),
    #[error(transparent)]
    Model(#[from] ModelError),
}

/// Status, OpenAI error `type`, `code` and `param` of an error.
struct Shape {
    status: StatusCode,
    kind: &'static str,
    code: Option<String>,
    param: Option<String>,
    message: String,
    retry_after: Option<String>,
    extra: Option<(&'static str, Value)>,
    /// Response headers besides `Retry-After` (a key's `x-ratelimit-*`).
    headers: Vec<(&'static str, String)>,
}

/// How often a request refused while the shared state is down is logged.
const STATE_DOWN_LOG_EVERY: Duration = Duration::from_secs(10);
static STATE_DOWN_LOG: crate::log_line::Throttle =
    crate::log_line::Throttle::new(STATE_DOWN_LOG_EVERY);

impl ApiError {
    fn shape(&self) -> Shape {
        let plain = |status, kind, code: &str| Shape {
            status,
            kind,
            code: Some(code.to_owned()),
            param: None,
            message: self.to_string(),
            retry_after: None,
            extra: None,
            headers: Vec::new(),
        };
        match self {
            ApiError::BadRequest { param, code, .. } => Shape {
                param: param.clone(),
                code: code.map(str::to_owned),
                ..plain(StatusCode::BAD_REQUEST, "invalid_request_error", "")
            },
            // A wrong key stays wrong: clients that retry errors
            // (Claude Code retries a 401 for minutes) are told not to.
            ApiError::Unauthorized { .. } => Shape {
                headers: vec![("x-should-retry", "false".into())],
                ..plain(
                    StatusCode::UNAUTHORIZED,
                    "invalid_request_error",
                    "invalid_api_key",
                )
            },
            ApiError::AdminOnly { .. } | ApiError::OperatorOnly { .. } => {
                plain(StatusCode::FORBIDDEN, "permission_error", "admin_only")
            }
            ApiError::ConsoleLoopbackOnly => {
                plain(StatusCode::FORBIDDEN, "permission_error", "loopback_only")
            }
            ApiError::Governed(r) => Shape {
                retry_after: r.retry_after.map(|s| s.to_string()),
                headers: {
                    let mut h = r.headers.pairs();
                    if r.never {
                        h.push(("x-should-retry", "false".into()));
                    }
                    h
                },
                ..plain(
                    StatusCode::TOO_MANY_REQUESTS,
                    match r.scope {
                        Scope::Rpm => "requests",
                        Scope::Tpm | Scope::Upstream => "tokens",
                        Scope::DailyTokens | Scope::DailyCost => "insufficient_quota",
                    },
                    match r.scope {
                        Scope::DailyTokens | Scope::DailyCost => "budget_exceeded",
                        _ => "rate_limit_exceeded",
                    },
                )
            },
            // OpenAI sends neither a param nor a code here.
            ApiError::ResponseNotFound { .. } => {
                plain(StatusCode::NOT_FOUND, "invalid_request_error", "")
            }
            ApiError::RequestNotFound { .. } => plain(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "request_not_found",
            ),
            ApiError::PreviousResponseNotFound { .. } => Shape {
                param: Some("previous_response_id".into()),
                ..plain(
                    StatusCode::BAD_REQUEST,
                    "invalid_request_error",
                    "previous_response_not_found",
                )
            },
            ApiError::NotFound { .. } => Shape {
                param: Some("model".into()),
                ..plain(
                    StatusCode::NOT_FOUND,
                    "invalid_request_error",
                    "model_not_found",
                )
            },
            ApiError::TooLarge { .. } => plain(
                StatusCode::PAYLOAD_TOO_LARGE,
                "invalid_request_error",
                "request_too_large",
            ),
            ApiError::Timeout { .. } => {
                plain(StatusCode::GATEWAY_TIMEOUT, "timeout_error", "timeout")
            }
            ApiError::BodyTimeout { .. } => plain(
                StatusCode::REQUEST_TIMEOUT,
                "invalid_request_error",
                "request_body_timeout",
            ),
            ApiError::ShuttingDown => Shape {
                retry_after: Some("1".into()),
                ..plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "server_shutting_down",
                )
            },
            ApiError::StateDown { .. } => Shape {
                retry_after: Some("1".into()),
                ..plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "state_unavailable",
                )
            },
            ApiError::ServerBusy => Shape {
                retry_after: Some("1".into()),
                ..plain(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "server_error",
                    "server_busy",
                )
            },
            ApiError::UnknownUrl { .. } => plain(
                StatusCode::NOT_FOUND,
                "invalid_request_error",
                "unknown_url",
            ),
            ApiError::MethodNotAllowed => plain(
                StatusCode::METHOD_NOT_ALLOWED,
                "invalid_request_error",
                "method_not_allowed",
            ),
            ApiError::Internal(_) => plain(
                StatusCode::INTERNAL_SERVER_ERROR,
                "server_error",
                "internal_error",
            ),
            ApiError::Model(e) => model_shape(e),
        }
    }

    /// A 400 about the body's field `param`.
    pub fn field(param: &str, code: &'static str, message: String) -> Self {
        ApiError::BadRequest {
            message,
            param: Some(param.to_owned()),
            code: Some(code),
        }
    }

    /// A 400: the body's field `param` is not of the `expected` type.
    pub fn wrong_type(param: &str, expected: &str) -> Self {
        ApiError::field(
            param,
            "invalid_type",
            format!("`{param}` must be {expected}."),
        )
    }

    /// A body whose output cap or answer count is not a positive integer.
    pub fn bad_cap(e: BadCap) -> Self {
        ApiError::BadRequest {
            message: e.to_string(),
            param: Some(e.param.into()),
            code: Some("invalid_value"),
        }
    }

    /// A store failure: the detail (a path, SQLite's words) goes to the
    /// log, the client gets what failed.
    pub fn store_failed(what: &str, e: &dyn std::fmt::Display) -> Self {
        tracing::error!("{what}: {e}");
        ApiError::Internal(format!("{what}; see the gateway's log."))
    }

    /// What the stored conversation behind `previous_response_id = id`
    /// failing to load means to the client (`None`: it is not stored).
    pub fn conversation(id: &str, e: Option<ConversationError>) -> Self {
        let id: String = id.chars().take(128).collect();
        match e {
            None => ApiError::PreviousResponseNotFound { id },
            Some(ConversationError::Store(e)) => {
                ApiError::store_failed("the conversation could not be read", &e)
            }
            Some(e @ (ConversationError::TooManyHops | ConversationError::TooLarge)) => {
                ApiError::BadRequest {
                    message: format!(
                        "The stored conversation that ends with '{id}' is too long to continue ({e}); start a new one, or send its history as input."
                    ),
                    param: Some("previous_response_id".into()),
                    code: Some("conversation_too_long"),
                }
            }
        }
    }

    /// A body that is not the JSON it should be.
    pub fn invalid_json(e: &serde_json::Error) -> Self {
        ApiError::BadRequest {
            message: format!("We could not parse the JSON body of your request ({e})."),
            param: None,
            code: Some("invalid_json"),
        }
    }

    pub fn status(&self) -> StatusCode {
        self.shape().status
    }

    fn body(&self) -> (Shape, Value) {
        let s = self.shape();
        let mut err = json!({
            "message": s.message,
            "type": s.kind,
            "param": s.param,
            "code": s.code.as_deref().filter(|c| !c.is_empty()),
        });
        if let (Some((k, v)), Some(obj)) = (s.extra.clone(), err.as_object_mut()) {
            obj.insert(k.into(), v);
        }
        (s, json!({ "error": err }))
    }

    /// The error object (`message`, `type`, `param`, `code`), without the
    /// `{"error": …}` envelope: what a dialect's stream error event carries.
    pub fn object(&self) -> Value {
        let (_, mut body) = self.body();
        body.get_mut("error")
            .map(Value::take)
            .unwrap_or(Value::Null)
    }

    /// The error as one SSE event, for a stream that has already started.
    pub fn sse_event(&self) -> Bytes {
        let (_, body) = self.body();
        Bytes::from(format!("data: {body}\n\n"))
    }
}

/// Which error shape a client speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ErrorStyle {
    /// `{"error": {"message", "type", "param", "code"}}`.
    #[default]
    OpenAi,
    /// `{"type": "error", "error": {"type", "message"}}`.
    Anthropic,
}

impl ApiError {
    /// The error response in `style`.
    pub fn respond(self, style: ErrorStyle) -> Response {
        match style {
            ErrorStyle::OpenAi => self.into_response(),
            ErrorStyle::Anthropic => {
                let (mut shape, _) = self.body();
                let body = anthropic::body(&shape, self.object());
                shape.status = anthropic::status(shape.status);
                self.finish(shape, body)
            }
        }
    }

    /// The response of `shape` with `body`: its status, `Retry-After`
    /// and other headers.
    fn finish(self, shape: Shape, body: Value) -> Response {
        if matches!(self, ApiError::StateDown { .. }) {
            // Every request of an outage is refused: one line per period.
            if let Some(held) = STATE_DOWN_LOG.allow() {
                tracing::warn!(
                    status = shape.status.as_u16(),
                    error = %self,
                    held_back = held,
                    "request failed (refused while the shared state is down; at most one such line per {}s)",
                    STATE_DOWN_LOG_EVERY.as_secs()
                );
            }
        } else if shape.status.is_server_error() {
            tracing::warn!(status = shape.status.as_u16(), error = %self, "request failed");
        }
        let mut resp = (shape.status, axum::Json(body)).into_response();
        if let Some(ra) = shape
            .retry_after
            .and_then(|r| HeaderValue::from_str(&r).ok())
        {
            resp.headers_mut().insert(header::RETRY_AFTER, ra);
        }
        for (name, value) in shape.headers {
            if let Ok(v) = HeaderValue::from_str(&value) {
                resp.headers_mut().insert(name, v);
            }
        }
        resp
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let (shape, body) = self.body();
        self.finish(shape, body)
    }
}
