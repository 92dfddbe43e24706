//! `POST /v1/completions` and `POST /v1/embeddings`: relayed to a concrete
//! model (or a passthrough route that names one) exactly as chat
//! completions are: the same life cycle (`ingress`), `model` rewritten
//! to the upstream's name, one recorded attempt, Completions streams
//! relayed event by event as chat's are. A strategy route is a 400:
//! strategies answer chat completions and the Responses API only.

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::{Map, Value};

use super::Gateway;
use super::chat::ChatRender;
use super::error::ApiError;
use super::ingress::{Admitted, Dialect, Job, serve};
use crate::boxed::boxed;
use crate::graph::Node;
use crate::upstream::ConcreteModel;
use crate::wire::billing::{Billable, answers, check_caps, output_cap, prompt_fields};
use crate::wire::{Endpoint, estimate_tokens, text_len};

pub fn completions(
    State(gw): State<Arc<Gateway>>,
    req: Request,
) -> impl Future<Output = Response> + Send + 'static {
    serve(gw, req, &Forward(Endpoint::COMPLETIONS))
}

pub fn embeddings(
    State(gw): State<Arc<Gateway>>,
    req: Request,
) -> impl Future<Output = Response> + Send + 'static {
    serve(gw, req, &Forward(Endpoint::EMBEDDINGS))
}

/// A body relayed as it is to one concrete model.
struct Forward(Endpoint);

/// The body as a JSON object with a non-empty `model`.
pub fn object_with_model(body: &[u8]) -> Result<(Map<String, Value>, String), ApiError> {
    let req: Map<String, Value> =
        serde_json::from_slice(body).map_err(|e| ApiError::invalid_json(&e))?;
    match req.get("model") {
        Some(Value::String(m)) if !m.is_empty() => {
            let m = m.clone();
            Ok((req, m))
        }
        _ => Err(ApiError::BadRequest {
            message: "`model` must be a non-empty string.".into(),
            param: Some("model".into()),
            code: Some("invalid_request_body"),
        }),
    }
}

/// The concrete model behind `node`, or a 400 for a strategy route.
pub fn concrete(node: &Node, model: &str) -> Result<Arc<ConcreteModel>, ApiError> {
    node.concrete.clone().ok_or_else(|| ApiError::BadRequest {
        message: format!(
            "`{model}` is a {} route, which serves chat completions and responses only \
             (POST /v1/chat/completions, POST /v1/responses).",
            node.strategy
        ),
        param: Some("model".into()),
        code: Some("unsupported_model"),
    })
}

#[async_trait]
impl Dialect for Forward {
    async fn job<'a>(&self, ad: &'a Admitted) -> Result<Job<'a>, ApiError> {
        let endpoint = self.0;
        let (req, model) = object_with_model(&ad.body)?;
        let (route, node) = ad.resolve(&model)?;
        let concrete = concrete(node, &model)?;
        let stream = endpoint == Endpoint::COMPLETIONS
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
            output: if endpoint == Endpoint::EMBEDDINGS {
                Some(0)
            } else {
                output_cap(&req).map(|cap| cap.saturating_mul(answers(&req)))
            },
        };
        Ok(Job {
            route,
            node,
            bill,
            answers: answers(&req),
            request: None,
            client_body: None,
            stream,
            run: Box::new(move |call| {
                boxed(move || async move { concrete.forward(call, endpoint, req).await })
            }),
            render: Box::new(ChatRender::new(include_usage)),
            headers: Vec::new(),
            on_open: None,
        })
    }
}
