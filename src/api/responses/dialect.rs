//! `POST /v1/responses` through the request life cycle (`ingress`): a
//! request to a model whose upstream speaks the Responses API natively
//! (`responses = true`, a concrete model or a passthrough route to one)
//! is forwarded verbatim and its events relayed as they come (`Native`);
//! any other route (every strategy) gets the request translated to chat
//! and the answer rendered back ([`Responses`]), continuing and storing
//! the conversation in conclave's store.

use std::sync::Arc;

use async_trait::async_trait;
use axum::extract::{Request, State};
use axum::response::Response;
use serde_json::{Map, Value};

use super::stored::{history, keeper};
use super::{Head, Responses, from_object};
use crate::api::Gateway;
use crate::api::error::{ApiError, ErrorStyle};
use crate::api::forward::object_with_model;
use crate::api::ingress::{Admitted, Dialect, Job, dropped_tools, serve};
use crate::boxed::boxed;
use crate::wire::Endpoint;
use crate::wire::billing::Billable;

pub fn create(
    State(gw): State<Arc<Gateway>>,
    req: Request,
) -> impl Future<Output = Response> + Send + 'static {
    serve(gw, req, &ResponsesApi)
}

struct ResponsesApi;

#[async_trait]
impl Dialect for ResponsesApi {
    async fn job<'a>(&self, ad: &'a Admitted) -> Result<Job<'a>, ApiError> {
        let (raw, model) = object_with_model(&ad.body)?;
        let (route, node) = ad.resolve(&model)?;
        if let Some(concrete) = node
            .concrete
            .clone()
            .filter(|c| c.speaks(Endpoint::RESPONSES))
        {
            return native((route, node), concrete, raw);
        }
        let req = from_object(&raw)?;
        drop(raw);
        let history = match req.previous_response_id() {
            None => Vec::new(),
            Some(id) => history(&ad.app, &ad.caller.name, id).await?,
        };
        let tr = req.to_chat(&history)?;
        let head = Head::new(&model, tr.echo, ad.app.clock.unix_secs());
        let on_done = keeper(&ad.app, &req, ad.caller.name.clone());
        let (headers, on_open) = dropped_tools(&tr.dropped_tools);
        let chat = Arc::new(tr.chat);
        let model = node.model.clone();
        Ok(Job {
            route,
            node,
            bill: chat.billable(),
            answers: 1,
            request: Some(chat.clone()),
            client_body: None,
            stream: req.is_stream(),
            run: Box::new(move |call| boxed(move || async move { model.chat(call, chat).await })),
            render: Box::new(Responses::new(head, on_done)),
            headers,
            on_open,
        })
    }
}

/// The job of a request forwarded verbatim to a native upstream, billed
/// by the one rule for the whole body (tools, schemas, reasoning items,
/// images); a cap that is not a positive integer is a 400 before any
/// upstream call, as on the translated path.
fn native<'a>(
    at: (&'a Arc<str>, &'a crate::graph::Node),
    concrete: Arc<crate::upstream::ConcreteModel>,
    raw: Map<String, Value>,
) -> Result<Job<'a>, ApiError> {
    let bill = Billable::responses(&raw).map_err(ApiError::bad_cap)?;
    let how = (Endpoint::RESPONSES, ErrorStyle::OpenAi);
    Ok(crate::api::native::job(at, concrete, how, raw, bill))
}
