//! `POST /v1/messages` and `POST /v1/messages/count_tokens` through the
//! request life cycle (`ingress`), with errors in Anthropic's shape: the
//! request translated to chat and the answer rendered back
//! ([`Messages`]) on every route and strategy.

use std::sync::Arc;

use async_trait::async_trait;
use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::events::Messages;
use super::render::Head;
use super::request::{MessagesRequest, from_object};
use crate::api::Gateway;
use crate::api::error::{ApiError, ErrorStyle};
use crate::api::guard::{finish_response, request_id};
use crate::api::ingress::{Admitted, Dialect, Job, admit, dropped_tools, serve};

/// Says how `count_tokens` counted: `estimate` (conclave's rule).
pub const TOKEN_COUNT: HeaderName = HeaderName::from_static("x-conclave-token-count");

pub async fn create(State(gw): State<Arc<Gateway>>, headers: HeaderMap, body: Body) -> Response {
    serve(&gw, headers, body, &MessagesApi).await
}

struct MessagesApi;

#[async_trait]
impl Dialect for MessagesApi {
    async fn job<'a>(&self, ad: &'a Admitted) -> Result<Job<'a>, ApiError> {
        let raw = object(&ad.body)?;
        let req = from_object(&raw)?;
        drop(raw);
        let (route, node) = ad.resolve(&req.model)?;
        let MessagesRequest {
            model: asked,
            stream,
            chat,
            dropped_tools: dropped,
        } = req;
        let bill = chat.billable();
        let head = Head {
            id: crate::api::responses::new_id("msg_"),
            model: asked,
            input_estimate: bill.input,
        };
        let (headers, on_open) = dropped_tools(&dropped);
        let chat = Arc::new(chat);
        let model = node.model.clone();
        Ok(Job {
            route,
            node,
            bill,
            answers: 1,
            stream,
            run: Box::new(move |call| Box::pin(async move { model.chat(call, chat).await })),
            render: Box::new(Messages::new(head)),
            headers,
            on_open,
        })
    }

    fn errors(&self) -> ErrorStyle {
        ErrorStyle::Anthropic
    }
}

/// The body as a JSON object.
fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::invalid_json(&e))
}

/// `POST /v1/messages/count_tokens`: the request's input tokens, by
/// conclave's estimate (the `x-conclave-token-count: estimate` header
/// says so). Nothing is sent upstream and no limit is charged.
pub async fn count_tokens(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let id = request_id(&headers);
    let resp = async {
        let ad = admit(&gw, headers, body).await?;
        let mut raw = object(&ad.body)?;
        // `max_tokens` is not part of a count.
        raw.entry("max_tokens").or_insert(json!(1));
        let req = from_object(&raw)?;
        ad.resolve(&req.model)?;
        let input = req.chat.billable().input;
        let mut resp = Json(json!({"input_tokens": input})).into_response();
        resp.headers_mut()
            .insert(TOKEN_COUNT, HeaderValue::from_static("estimate"));
        Ok(resp)
    }
    .await;
    finish_response(&gw, resp, &id, ErrorStyle::Anthropic)
}
