//! The HTTP endpoints strategies serve (the arena's vote and leaderboard),
//! taken from the strategy table and mounted under `/v1` and bare. Each is
//! a request like the others: its id in `x-request-id`, the caller
//! authenticated, a POST's body read within the server's bounds, a
//! failure counted under route `unknown` and answered in the one error
//! mapping. The strategy's handler gets what it needs as an
//! [`EndpointCall`], never the API's own types.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, RawPathParams, State};
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::{MethodRouter, get, post};
use bytes::Bytes;

use super::error::{ApiError, ErrorStyle};
use super::guard::{finish_response, request_id};
use super::ingress::receive;
use super::{AppState, Gateway};
use crate::graph::Strategy;
use crate::graph::endpoint::{Caller, Endpoint, EndpointCall, Method};

/// `router` with every endpoint of `table` mounted.
pub fn mount(mut router: Router<Arc<Gateway>>, table: &'static [Strategy]) -> Router<Arc<Gateway>> {
    for strategy in table {
        for endpoint in strategy.endpoints {
            let name = strategy.name;
            let serve = move |State(gw): State<Arc<Gateway>>,
                              params: RawPathParams,
                              Query(query): Query<HashMap<String, String>>,
                              headers: HeaderMap,
                              body: Body| async move {
                let params = params
                    .iter()
                    .map(|(k, v)| (k.to_owned(), v.to_owned()))
                    .collect();
                serve(&gw, (name, endpoint), params, query, headers, body).await
            };
            let method: MethodRouter<Arc<Gateway>> = match endpoint.method {
                Method::Get => get(serve),
                Method::Post => post(serve),
            };
            router = router
                .route(&format!("/v1{}", endpoint.path), method.clone())
                .route(endpoint.path, method);
        }
    }
    router
}

async fn serve(
    gw: &Gateway,
    (strategy, endpoint): (&'static str, &'static Endpoint),
    params: HashMap<String, String>,
    query: HashMap<String, String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = request_id(&headers);
    let resp = async {
        let (app, caller, body) = match endpoint.method {
            Method::Post => {
                let r = receive(gw, headers, body).await?;
                (r.app, r.caller, r.body)
            }
            Method::Get => {
                let app = gw.state();
                let caller = app.keys.authenticate(&headers)?;
                (app, caller, Bytes::new())
            }
        };
        let call = EndpointCall {
            request_id: rid.clone(),
            params,
            query,
            body,
            caller: Caller {
                name: caller.name.clone(),
                keyed: !app.keys.is_empty(),
                models: caller.models(),
            },
            routes: routes_of(&app, strategy),
            records: app.records.clone(),
            telemetry: app.telemetry.clone(),
            clock: app.clock,
        };
        (endpoint.handler)(call).await.map_err(ApiError::Model)
    }
    .await;
    finish_response(gw, resp, &rid, ErrorStyle::OpenAi)
}

/// The routes of `strategy` in the running config, in config order.
fn routes_of(app: &AppState, strategy: &str) -> Vec<(String, Arc<dyn crate::config::RouteSpec>)> {
    app.specs
        .iter()
        .filter(|(_, spec)| spec.strategy() == strategy)
        .map(|(name, spec)| (name.clone(), spec.clone()))
        .collect()
}
