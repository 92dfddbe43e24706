//! The small read-only endpoints: `/v1/models`, `/v1/keys/usage`,
//! `/v1/usage`, `/metrics`, `/healthz` (`/readyz` is in `ready`).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::Gateway;
use super::error::ApiError;
use crate::governor;
use crate::graph::Node;

pub async fn models(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let app = gw.state();
    let caller = app.keys.authenticate(&headers)?;
    let data: Vec<Value> = app
        .graph
        .names
        .iter()
        .filter(|n| caller.may_use(n))
        .filter_map(|n| app.graph.get(n))
        .map(|(name, node)| entry(name, node, app.started_at))
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /v1/models/{id}`: one model or route the caller may use.
pub async fn model(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let app = gw.state();
    let caller = app.keys.authenticate(&headers)?;
    match app.graph.get(&id) {
        Some((name, node)) if caller.may_use(name) => Ok(Json(entry(name, node, app.started_at))),
        _ => Err(ApiError::NotFound { model: id }),
    }
}

/// `GET /v1/keys/usage`: every key's limits, how much of its `rpm` and
/// `tpm` is in use now, today's spend and what is left (admin keys only;
/// a gateway without keys has none to show).
pub async fn keys_usage(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let app = gw.state();
    app.keys.authenticate_admin(&headers, "/v1/keys/usage")?;
    let mut data: Vec<Value> = Vec::new();
    for c in app.keys.callers() {
        let Some(gov) = c.gov.as_ref() else { continue };
        let mut entry = Map::new();
        entry.insert("name".into(), Value::from(&*c.name));
        entry.insert("admin".into(), Value::from(c.admin));
        let usage = governor::usage_of(gov)
            .await
            .map_err(|_| ApiError::StateDown {
                key: c.name.clone(),
            })?;
        if let Value::Object(usage) = usage {
            entry.extend(usage);
        }
        data.push(Value::Object(entry));
    }
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /v1/usage`: today's (UTC) requests per route and attempts per
/// model on this instance, the increments of its Prometheus counters
/// since midnight or its start (admin keys only, like `/v1/keys/usage`).
pub async fn usage(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let app = gw.state();
    app.keys.authenticate_admin(&headers, "/v1/usage")?;
    Ok(Json(app.telemetry.usage()))
}

fn entry(name: &str, node: &Node, created: u64) -> Value {
    json!({
        "id": name,
        "object": "model",
        "created": created,
        "owned_by": "conclave",
        "conclave": {
            "strategy": node.strategy,
            "route": node.is_route,
        }
    })
}

/// `GET /metrics`, behind the metrics key when one is set.
pub async fn metrics(State(gw): State<Arc<Gateway>>, headers: HeaderMap) -> Response {
    let app = gw.state();
    if let Err(e) = app
        .keys
        .operator(app.metrics_key.as_ref(), &headers, "/metrics")
    {
        return e.into_response();
    }
    let mut resp = app.telemetry.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}
