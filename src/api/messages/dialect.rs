//! `POST /v1/messages` and `POST /v1/messages/count_tokens` through the
//! request life cycle (`ingress`), with errors in Anthropic's shape: the
//! request translated to chat and the answer rendered back
//! ([`Messages`]) on every route and strategy, or, for a model whose
//! upstream speaks the Messages API (a concrete model on an Anthropic
//! upstream, or a passthrough route to one), forwarded verbatim (only
//! `model` rewritten, the client's `anthropic-beta` passed on) and its
//! events relayed as they come (`Native`). Both bill the whole body by
//! the one rule (`wire::billing`) and refuse a bad `max_tokens` before any
//! upstream call; `count_tokens` is admitted as an errand (`ingress`):
//! one request to the key's `rpm`, no tokens.

use std::sync::Arc;

use async_trait::async_trait;
use axum::Json;
use axum::extract::{Request, State};
use axum::http::{HeaderName, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::events::Messages;
use super::render::Head;
use super::request::{MessagesRequest, from_object, max_tokens};
use crate::api::Gateway;
use crate::api::error::{ApiError, ErrorStyle};
use crate::api::ingress::{
    Admitted, Answer, Dialect, Errand, Errands, Job, dropped_tools, serve, serve_errand,
};
use crate::boxed::boxed;
use crate::graph::Node;
use crate::upstream::ConcreteModel;
use crate::wire::Endpoint;
use crate::wire::billing::Billable;

/// Says how `count_tokens` counted: `estimate` (conclave's rule).
pub const TOKEN_COUNT: HeaderName = HeaderName::from_static("x-conclave-token-count");

pub fn create(
    State(gw): State<Arc<Gateway>>,
    req: Request,
) -> impl Future<Output = Response> + Send + 'static {
    serve(gw, req, &MessagesApi)
}

struct MessagesApi;

#[async_trait]
impl Dialect for MessagesApi {
    async fn job<'a>(&self, ad: &'a Admitted) -> Result<Job<'a>, ApiError> {
        let raw = object(&ad.body)?;
        let model = match raw.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            _ => return Err(ApiError::wrong_type("model", "a non-empty string")),
        };
        let (route, node) = ad.resolve(&model)?;
        if let Some(concrete) = node
            .concrete
            .clone()
            .filter(|c| c.speaks(Endpoint::MESSAGES))
        {
            return native((route, node), concrete, raw);
        }
        let req = from_object(&raw)?;
        drop(raw);
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
            request: Some(chat.clone()),
            client_body: None,
            stream,
            run: Box::new(move |call| boxed(move || async move { model.chat(call, chat).await })),
            render: Box::new(Messages::new(head)),
            headers,
            on_open,
        })
    }

    fn errors(&self) -> ErrorStyle {
        ErrorStyle::Anthropic
    }
}

/// A `count_tokens` answer, saying how it was counted.
fn counted(input: u64, how: &'static str) -> Response {
    let mut resp = Json(json!({"input_tokens": input})).into_response();
    resp.headers_mut()
        .insert(TOKEN_COUNT, HeaderValue::from_static(how));
    resp
}

/// The job of a request forwarded verbatim to an Anthropic upstream,
/// billed by the one rule for the whole body (system, tools, blocks,
/// images); a `max_tokens` missing or not a positive integer is a 400
/// before any upstream call, as on the translated path.
fn native<'a>(
    at: (&'a Arc<str>, &'a Node),
    concrete: Arc<ConcreteModel>,
    raw: Map<String, Value>,
) -> Result<Job<'a>, ApiError> {
    max_tokens(&raw)?;
    let bill = Billable::messages(&raw).map_err(ApiError::bad_cap)?;
    let how = (Endpoint::MESSAGES, ErrorStyle::Anthropic);
    Ok(crate::api::native::job(at, concrete, how, raw, bill))
}

/// The body as a JSON object.
fn object(body: &[u8]) -> Result<Map<String, Value>, ApiError> {
    serde_json::from_slice(body).map_err(|e| ApiError::invalid_json(&e))
}

/// `POST /v1/messages/count_tokens`: the request's input tokens, as the
/// model's own Anthropic upstream counts them (`x-conclave-token-count:
/// upstream`), else (another upstream, a strategy route, or no answer
/// from it) by conclave's estimate (`estimate`). Admitted as every request
/// is: one request to the key's `rpm`, no tokens.
pub async fn count_tokens(State(gw): State<Arc<Gateway>>, req: Request) -> Response {
    serve_errand(&gw, req, &CountTokens).await
}

struct CountTokens;

#[async_trait]
impl Errands for CountTokens {
    async fn errand<'a>(&self, ad: &'a Admitted) -> Result<Errand<'a>, ApiError> {
        let raw = object(&ad.body)?;
        let model = match raw.get("model") {
            Some(Value::String(m)) if !m.is_empty() => m.clone(),
            _ => return Err(ApiError::wrong_type("model", "a non-empty string")),
        };
        let (route, node) = ad.resolve(&model)?;
        let upstream = node
            .concrete
            .clone()
            .filter(|c| c.speaks(Endpoint::MESSAGES));
        let answer: Answer<'a> = Box::new(move |ctx| {
            Box::pin(async move {
                if let Some(c) = upstream {
                    let beta = ctx.options.anthropic_beta.as_deref();
                    if let Some(n) = c.count_tokens(raw.clone(), &ctx.id, beta).await {
                        return Ok(counted(n, "upstream"));
                    }
                }
                let mut raw = raw;
                // `max_tokens` is not part of a count.
                raw.entry("max_tokens").or_insert(json!(1));
                let req = from_object(&raw)?;
                Ok(counted(req.chat.billable().input, "estimate"))
            })
        });
        Ok(Errand {
            route,
            node,
            answer,
        })
    }

    fn errors(&self) -> ErrorStyle {
        ErrorStyle::Anthropic
    }
}
