//! `DELETE /v1/cache` (`?route=NAME` optional): empties the response
//! cache, or one route's (or model's) entries, for an admin key; answers
//! `{"deleted": N}`. Like `/v1/keys/usage`: 401 without a key, 403
//! `admin_only` for other keys.

use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use serde_json::{Value, json};

use super::Gateway;
use super::error::ApiError;

/// Longest `route` accepted (a config name).
const MAX_ROUTE: usize = 256;

pub async fn clear(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let app = gw.state();
    app.keys.authenticate_admin(&headers, "/v1/cache")?;
    let mut route = None;
    for (name, value) in super::query::pairs(&uri)? {
        match name.as_str() {
            "route" if route.is_none() && !value.is_empty() && value.len() <= MAX_ROUTE => {
                route = Some(value);
            }
            "route" => {
                return Err(ApiError::field(
                    "route",
                    "invalid_request",
                    format!("`route` must be given once, 1 to {MAX_ROUTE} characters."),
                ));
            }
            other => {
                return Err(ApiError::field(
                    "query",
                    "invalid_request",
                    format!("Unknown query parameter `{other}`; only `route` is read."),
                ));
            }
        }
    }
    let deleted = app
        .cache
        .clear(route.as_deref(), &app.telemetry.metrics)
        .await;
    Ok(Json(json!({ "deleted": deleted })))
}
