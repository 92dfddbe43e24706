//! `POST /v1/chat/completions`: parse the body once into a `ChatRequest`,
//! read conclave's options, and run the named node through the request
//! life cycle of `request`.

use std::sync::Arc;

use axum::body::Body;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;

use super::error::ApiError;
use super::request::{
    Asked, Opened, Work, admit, bounded, finish_response, in_kind, open, request_id, resolve,
    with_limits,
};
use super::{Gateway, options, sse};
use crate::model::Call;
use crate::wire::ChatRequest;
use crate::wire::billing::{answers, check_caps};

pub async fn chat_completions(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = request_id(&headers);
    let resp = handle(&gw, &headers, body, &id).await;
    finish_response(&gw, resp, &id)
}

/// Reads the body as a `ChatRequest`, with OpenAI-style messages that say
/// which field is wrong.
pub fn parse(body: &[u8]) -> Result<ChatRequest, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(body);
    let req = serde_path_to_error::deserialize::<_, ChatRequest>(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() {
            return ApiError::invalid_json(&inner);
        }
        let msg = inner.to_string();
        let param = match path.as_str() {
            "." => msg
                .strip_prefix("missing field `")
                .and_then(|r| r.split('`').next())
                .map(str::to_owned),
            p => Some(p.to_owned()),
        };
        ApiError::BadRequest {
            message: format!("Invalid request body: {msg}"),
            param,
            code: Some("invalid_request_body"),
        }
    })?;
    de.end().map_err(|e| ApiError::invalid_json(&e))?;
    if req.model.is_empty() {
        return Err(ApiError::BadRequest {
            message: "`model` must not be empty.".into(),
            param: Some("model".into()),
            code: Some("invalid_request_body"),
        });
    }
    check_caps(&req.extra).map_err(ApiError::bad_cap)?;
    if req.messages.is_empty() {
        return Err(ApiError::BadRequest {
            message: "`messages` must contain at least one message.".into(),
            param: Some("messages".into()),
            code: Some("invalid_request_body"),
        });
    }
    Ok(req)
}

async fn handle(
    gw: &Arc<Gateway>,
    headers: &HeaderMap,
    body: Body,
    id: &str,
) -> Result<Response, ApiError> {
    let (app, caller, body) = admit(gw, headers, body).await?;
    let req = parse(&body)?;
    drop(body);
    let (route, node) = resolve(&app, &caller, &req.model)?;
    let opts = options::read(headers)?;
    let asked = Asked::new(&app, req.billable(), answers(&req.extra));
    let Opened { ctx, guard, limits } = open(gw, &app, id, (route, node), caller, opts, asked)?;
    let call = Call::new(ctx.clone());
    let include_usage = req.wants_stream_usage();
    let stream = req.is_stream();
    let model = node.model.clone();
    let req = Arc::new(req);
    let work: Work = Box::pin(bounded(
        ctx.clone(),
        async move { model.chat(call, req).await },
    ));
    let keepalive = sse::keepalive_for(&app, node);
    let resp = in_kind(stream, keepalive, node, &ctx, work, include_usage, guard).await;
    Ok(with_limits(resp, &limits))
}
