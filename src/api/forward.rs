//! `POST /v1/completions` and `POST /v1/embeddings`: relayed to a concrete
//! model (or a passthrough route that names one) exactly as chat
//! completions are: the same auth and key model lists, `model` rewritten
//! to the upstream's name, one recorded attempt, errors mapped in one
//! place, Completions streams relayed event by event. A strategy route is
//! a 400: strategies answer chat completions only.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value};

use super::error::ApiError;
use super::request::{
    Asked, Opened, Work, admit, bounded, finish_response, in_kind, open, request_id, resolve,
    with_limits,
};
use super::{Gateway, options};
use crate::model::Call;
use crate::wire::billing::{Billable, answers, check_caps, output_cap, prompt_fields};
use crate::wire::{Endpoint, estimate_tokens, text_len};

pub async fn completions(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = request_id(&headers);
    let resp = forward(&gw, &headers, body, &id, Endpoint::Completions).await;
    finish_response(&gw, resp, &id)
}

pub async fn embeddings(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = request_id(&headers);
    let resp = forward(&gw, &headers, body, &id, Endpoint::Embeddings).await;
    finish_response(&gw, resp, &id)
}

/// `POST /v1/responses`: not served, and says what to use instead.
pub async fn responses() -> Response {
    ApiError::BadRequest {
        message: "The Responses API (/v1/responses) is not served by this gateway yet; \
                  use POST /v1/chat/completions."
            .into(),
        param: None,
        code: Some("unsupported_endpoint"),
    }
    .into_response()
}

async fn forward(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    body: Body,
    id: &str,
    endpoint: Endpoint,
) -> Result<Response, ApiError> {
    let (app, caller, bytes) = admit(gw, headers, body).await?;
    let req: Map<String, Value> =
        serde_json::from_slice(&bytes).map_err(|e| ApiError::invalid_json(&e))?;
    let model = match req.get("model") {
        Some(Value::String(m)) if !m.is_empty() => m.clone(),
        _ => {
            return Err(ApiError::BadRequest {
                message: "`model` must be a non-empty string.".into(),
                param: Some("model".into()),
                code: Some("invalid_request_body"),
            });
        }
    };
    let (route, node) = resolve(&app, &caller, &model)?;
    let Some(concrete) = node.concrete.clone() else {
        return Err(ApiError::BadRequest {
            message: format!(
                "`{model}` is a {} route, which serves chat completions only (POST /v1/chat/completions).",
                node.strategy
            ),
            param: Some("model".into()),
            code: Some("unsupported_model"),
        });
    };
    let stream = endpoint == Endpoint::Completions
        && req.get("stream").and_then(Value::as_bool) == Some(true);
    let include_usage = req
        .get("stream_options")
        .and_then(|o| o.get("include_usage"))
        .and_then(Value::as_bool)
        == Some(true);
    check_caps(&req).map_err(ApiError::bad_cap)?;
    let counted = ["prompt", "input"];
    let prompt: usize = counted
        .iter()
        .filter_map(|k| req.get(*k))
        .map(text_len)
        .sum();
    let bill = Billable {
        input: estimate_tokens(prompt)
            .saturating_add(estimate_tokens(prompt_fields(&req, &counted) as usize)),
        images: 0,
        output: match endpoint {
            Endpoint::Embeddings => Some(0),
            _ => output_cap(&req).map(|cap| cap.saturating_mul(answers(&req))),
        },
    };
    let asked = Asked::new(&app, bill, answers(&req));
    let opts = options::read(headers)?;
    let Opened { ctx, guard, limits } = open(gw, &app, id, (route, node), caller, opts, asked)?;
    let call = Call::new(ctx.clone());
    let work: Work = Box::pin(bounded(ctx.clone(), async move {
        concrete.forward(call, endpoint, req).await
    }));
    let keepalive = app.sse_keepalive;
    let resp = in_kind(stream, keepalive, node, &ctx, work, include_usage, guard).await;
    Ok(with_limits(resp, &limits))
}
