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
use crate::graph::endpoint::{Caller, EndpointCall, HttpEndpoint, Method};

/// `router` with every endpoint of `table` mounted.
pub fn mount(mut router: Router<Arc<Gateway>>, table: &'static [Strategy]) -> Router<Arc<Gateway>> {
    for strategy in table {
        for endpoint in strategy.endpoints {
            let name = strategy.name;
            let answer = move |State(gw): State<Arc<Gateway>>,
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
                Method::Get => get(answer),
                Method::Post => post(answer),
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
    (strategy, endpoint): (&'static str, &'static HttpEndpoint),
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]
    use axum::body::to_bytes;
    use axum::http::{Request, StatusCode};
    use serde_json::Value;
    use tower::ServiceExt;

    const CONFIG: &str = "[upstreams.sim]\nkind = \"mock\"\n\n[models.a]\nupstream = \"sim\"\n\n\
        [models.b]\nupstream = \"sim\"\n\n[routes.ab]\nstrategy = \"arena\"\n\
        contestants = [\"a\", \"b\"]\n";

    async fn get(path: &str) -> (StatusCode, bool, Value) {
        let config = crate::config::parse(CONFIG, "t.toml", &|_| None, &crate::strategy::ALL)
            .unwrap_or_else(|e| panic!("{e}"));
        let gw = crate::prepare_with(config, crate::clock::Clock::system()).unwrap();
        let req = Request::get(path).body(axum::body::Body::empty()).unwrap();
        let resp = gw.router().oneshot(req).await.unwrap();
        let status = resp.status();
        let id = resp.headers().contains_key("x-request-id");
        let body = to_bytes(resp.into_body(), 1 << 20).await.unwrap();
        (status, id, serde_json::from_slice(&body).unwrap())
    }

    #[tokio::test]
    async fn a_strategys_endpoints_answer_under_v1_and_bare_as_requests() {
        for path in ["/v1/arena/leaderboard", "/arena/leaderboard?route=ab"] {
            let (status, id, body) = get(path).await;
            assert_eq!(status, StatusCode::OK, "{path}: {body}");
            assert!(id, "{path}: no x-request-id");
            assert_eq!(body["object"], "arena.leaderboard");
            assert_eq!(body["route"], "ab");
        }
        // Its errors go through the one mapping.
        let (status, id, body) = get("/v1/arena/leaderboard?route=nope").await;
        assert_eq!(status, StatusCode::NOT_FOUND);
        assert!(id);
        assert_eq!(body["error"]["code"], "model_not_found");
        assert_eq!(body["error"]["param"], "model");
        assert_eq!(body["error"]["type"], "invalid_request_error");
    }
}
