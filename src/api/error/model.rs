//! How a model's error ([`ModelError`]) reads as an HTTP error: its
//! status, OpenAI `type` and `code`, and what a strategy that ran out of
//! members tells about its attempts. An ejected upstream (or a route
//! whose members all are) is a 503 with `Retry-After`; a server's 500
//! that is a request-validation error is the client's 400. A strategy's
//! own refusal ([`ModelError::Strategy`]) says its status and code; its
//! `type` follows from the status.

use axum::http::StatusCode;
use serde_json::Value;

use super::Shape;
use crate::error::{ModelError, secs};

/// The HTTP shape of a model's error.
pub(super) fn model_shape(e: &ModelError) -> Shape {
    let upstream_err = |status, kind, code: &str| Shape {
        status,
        kind,
        code: Some(code.to_owned()),
        param: None,
        message: e.public_message(),
        retry_after: None,
        extra: None,
        headers: Vec::new(),
    };
    match e {
        ModelError::Connect { .. } => upstream_err(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_unreachable",
        ),
        ModelError::Timeout { .. } => upstream_err(
            StatusCode::GATEWAY_TIMEOUT,
            "timeout_error",
            "upstream_timeout",
        ),
        ModelError::Status {
            status,
            code,
            retry_after,
            ..
        } => match status {
            400 | 413 | 422 => Shape {
                status: StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_REQUEST),
                kind: "invalid_request_error",
                code: code
                    .clone()
                    .or_else(|| Some("upstream_rejected_request".into())),
                ..upstream_err(StatusCode::BAD_REQUEST, "", "")
            },
            429 => Shape {
                retry_after: retry_after.clone(),
                ..upstream_err(
                    StatusCode::TOO_MANY_REQUESTS,
                    "rate_limit_error",
                    "rate_limit_exceeded",
                )
            },
            // Anthropic's "overloaded": a 503 with its Retry-After, which
            // the Messages API answers as its own 529 `overloaded_error`
            // (its clients retry that) and OpenAI's clients retry too.
            529 => Shape {
                retry_after: retry_after.clone(),
                ..upstream_err(
                    StatusCode::SERVICE_UNAVAILABLE,
                    "upstream_error",
                    "upstream_overloaded",
                )
            },
            // The upstream refused conclave's own credentials: its message
            // may quote part of the key, so it is not passed on.
            401 | 403 => upstream_err(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                "upstream_auth_failed",
            ),
            _ => upstream_err(StatusCode::BAD_GATEWAY, "upstream_error", "upstream_error"),
        },
        // A server's 500 that is a request-validation error: the
        // client's request, named by its field.
        ModelError::Rejected { field, .. } => Shape {
            param: field.clone(),
            ..upstream_err(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "upstream_rejected_request",
            )
        },
        ModelError::Throttled { retry_after, .. } => Shape {
            retry_after: Some(retry_after.to_string()),
            ..upstream_err(
                StatusCode::TOO_MANY_REQUESTS,
                "requests",
                "rate_limit_exceeded",
            )
        },
        ModelError::Invalid { .. } => upstream_err(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_invalid_response",
        ),
        ModelError::StreamCut { .. } => upstream_err(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "upstream_stream_cut",
        ),
        ModelError::FailoverUnavailable { .. } => upstream_err(
            StatusCode::BAD_GATEWAY,
            "upstream_error",
            "midstream_failover_unavailable",
        ),
        ModelError::Reported { .. } => {
            upstream_err(StatusCode::BAD_GATEWAY, "upstream_error", "upstream_error")
        }
        ModelError::Encode(_) => upstream_err(
            StatusCode::INTERNAL_SERVER_ERROR,
            "server_error",
            "internal_error",
        ),
        ModelError::BadRequest { param, .. } => Shape {
            param: param.map(str::to_owned),
            ..upstream_err(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "invalid_request",
            )
        },
        ModelError::TooLong { attempts, .. } => Shape {
            param: Some("messages".into()),
            extra: (!attempts.is_empty()).then(|| {
                let list = serde_json::to_value(attempts).unwrap_or(Value::Null);
                ("attempts", list)
            }),
            ..upstream_err(
                StatusCode::BAD_REQUEST,
                "invalid_request_error",
                "context_length_exceeded",
            )
        },
        // Refused at once: nothing was sent; it serves again after
        // Retry-After (then one trial call decides).
        ModelError::Ejected { retry_after, .. } => Shape {
            retry_after: Some(secs(*retry_after).to_string()),
            ..upstream_err(
                StatusCode::SERVICE_UNAVAILABLE,
                "upstream_error",
                "upstream_unavailable",
            )
        },
        ModelError::NoHealthy {
            retry_after,
            attempts,
            ..
        } => Shape {
            retry_after: Some(secs(*retry_after).to_string()),
            extra: Some((
                "attempts",
                serde_json::to_value(attempts).unwrap_or(Value::Null),
            )),
            ..upstream_err(
                StatusCode::SERVICE_UNAVAILABLE,
                "upstream_error",
                "no_healthy_upstream",
            )
        },
        ModelError::Strategy {
            status,
            code,
            param,
            retry_after,
            ..
        } => {
            let status = StatusCode::from_u16(*status).unwrap_or(StatusCode::BAD_GATEWAY);
            Shape {
                param: param.map(str::to_owned),
                retry_after: retry_after.map(|s| s.to_string()),
                ..upstream_err(status, strategy_type(status), code)
            }
        }
        ModelError::Exhausted {
            strategy, attempts, ..
        } => Shape {
            extra: Some((
                "attempts",
                serde_json::to_value(attempts).unwrap_or(Value::Null),
            )),
            ..upstream_err(
                StatusCode::BAD_GATEWAY,
                "upstream_error",
                &format!("{strategy}_exhausted"),
            )
        },
    }
}

/// The OpenAI error `type` of a strategy's refusal, by its status.
fn strategy_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        403 => "permission_error",
        429 => "rate_limit_error",
        500 => "server_error",
        s if s > 500 => "upstream_error",
        _ => "invalid_request_error",
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use std::time::Duration;

    use super::*;

    #[test]
    fn a_servers_validation_500_is_the_clients_400_naming_the_field() {
        let e = ModelError::Rejected {
            upstream: "local".into(),
            status: 500,
            field: Some("messages[1].content".into()),
            problem: "wrong type",
            message:
                "7 validation errors: {'type': 'string_type', 'input': None} File \"/x/app.py\""
                    .into(),
        };
        let s = model_shape(&e);
        assert_eq!(s.status, StatusCode::BAD_REQUEST);
        assert_eq!(s.kind, "invalid_request_error");
        assert_eq!(s.code.as_deref(), Some("upstream_rejected_request"));
        assert_eq!(s.param.as_deref(), Some("messages[1].content"));
        assert_eq!(
            s.message,
            "invalid request: `messages[1].content` is of the wrong type; upstream `local` rejected it"
        );
        assert!(!e.is_failover() && e.retry_reason().is_none());
        // The operator's log keeps what the server said.
        assert!(e.to_string().contains("app.py"), "{e}");
        let unnamed = |problem| ModelError::Rejected {
            upstream: "local".into(),
            status: 500,
            field: None,
            problem,
            message: String::new(),
        };
        let s = model_shape(&unnamed("invalid"));
        assert_eq!((s.status, s.param), (StatusCode::BAD_REQUEST, None));
        assert_eq!(
            s.message,
            "invalid request: upstream `local` rejected it as invalid"
        );
        assert_eq!(
            model_shape(&unnamed("wrong type")).message,
            "invalid request: upstream `local` rejected it as invalid (wrong type)"
        );
    }

    #[test]
    fn a_balance_with_no_member_to_call_is_a_503_or_a_429_with_retry_after() {
        let ejected = model_shape(&ModelError::NoHealthy {
            route: "r".into(),
            retry_after: Duration::from_millis(12_400),
            attempts: Vec::new(),
        });
        assert_eq!(ejected.status, StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(ejected.code.as_deref(), Some("no_healthy_upstream"));
        assert_eq!(ejected.retry_after.as_deref(), Some("13"), "rounded up");
    }

    #[test]
    fn a_strategys_refusal_keeps_its_status_code_param_and_retry_after() {
        let busy = model_shape(&ModelError::Strategy {
            status: 429,
            code: "members_busy",
            message: "busy".into(),
            param: None,
            retry_after: Some(1),
        });
        assert_eq!(busy.status, StatusCode::TOO_MANY_REQUESTS);
        assert_eq!(busy.kind, "rate_limit_error");
        assert_eq!(busy.code.as_deref(), Some("members_busy"));
        assert_eq!(busy.retry_after.as_deref(), Some("1"));
        assert_eq!(busy.message, "busy");
        let types = [
            (400, "invalid_request_error"),
            (403, "permission_error"),
            (404, "invalid_request_error"),
            (409, "invalid_request_error"),
            (500, "server_error"),
            (502, "upstream_error"),
        ];
        for (status, kind) in types {
            let s = model_shape(&ModelError::Strategy {
                status,
                code: "c",
                message: String::new(),
                param: Some("pick"),
                retry_after: None,
            });
            assert_eq!((s.status.as_u16(), s.kind), (status, kind));
            assert_eq!((s.param.as_deref(), s.retry_after), (Some("pick"), None));
        }
        // Not a status: a 502, never a panic.
        let s = model_shape(&ModelError::strategy(1000, "c", "m"));
        assert_eq!(s.status, StatusCode::BAD_GATEWAY);
    }
}
