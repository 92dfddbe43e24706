//! The small read-only endpoints: `/v1/models`, `/v1/keys/usage`,
//! `/metrics`, `/healthz`, `/readyz`.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Map, Value, json};

use super::Gateway;
use super::error::ApiError;
use crate::governor;
use crate::graph::Node;
use crate::upstream::llama_swap::Loaded;

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

/// `GET /v1/keys/usage`: every key's limits, today's spend and what is
/// left (admin keys only; a gateway without keys has none to show).
pub async fn keys_usage(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
) -> Result<Json<Value>, ApiError> {
    let app = gw.state();
    let caller = app.keys.authenticate(&headers)?;
    if !caller.admin {
        return Err(ApiError::AdminOnly {
            what: "/v1/keys/usage",
        });
    }
    let data: Vec<Value> = app
        .keys
        .callers()
        .filter_map(|c| {
            let mut entry = Map::new();
            entry.insert("name".into(), Value::from(&*c.name));
            entry.insert("admin".into(), Value::from(c.admin));
            if let Value::Object(usage) = governor::usage_of(c.gov.as_ref()?) {
                entry.extend(usage);
            }
            Some(Value::Object(entry))
        })
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
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

pub async fn metrics(State(gw): State<Arc<Gateway>>) -> Response {
    let mut resp = gw.state().telemetry.render().into_response();
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/plain; version=0.0.4; charset=utf-8"),
    );
    resp
}

pub async fn healthz() -> Json<Value> {
    Json(json!({"status": "ok"}))
}

/// Ready when every upstream answers (any HTTP status counts).
pub async fn readyz(State(gw): State<Arc<Gateway>>) -> Response {
    let app = gw.state();
    let checks = app
        .graph
        .upstreams
        .iter()
        .map(|u| async move { (u.name.clone(), u.status().await) });
    let results = futures::future::join_all(checks).await;
    let ready = results.iter().all(|(_, s)| s.ready.is_ok());
    let mut upstreams = Map::new();
    let mut swapping = Map::new();
    for (name, status) in results {
        let v = match status.ready {
            Ok(()) => json!("ok"),
            Err(e) => json!(format!("unreachable: {e}")),
        };
        upstreams.insert(name.to_string(), v);
        if let Some(l) = status.loaded {
            swapping.insert(name.to_string(), loaded_json(l));
        }
    }
    let status = if ready {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let mut body =
        json!({"status": if ready { "ready" } else { "not_ready" }, "upstreams": upstreams});
    if !swapping.is_empty() {
        body["llama_swap"] = Value::Object(swapping);
    }
    (status, Json(body)).into_response()
}

/// A llama-swap upstream's probe answer: `{"loaded": [...]}`, or
/// `{"loaded": null, "error": "..."}` when it could not be read.
fn loaded_json(l: Result<Loaded, String>) -> Value {
    match l {
        Ok(models) => json!({"loaded": *models}),
        Err(e) => json!({"loaded": null, "error": e}),
    }
}
