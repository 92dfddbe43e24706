//! Stored responses over HTTP, each key's own: the conversation a
//! `previous_response_id` continues, the keeping of a finished response
//! (`store`), and `GET`/`DELETE /v1/responses/{id}` and
//! `GET /v1/responses/{id}/input_items`. Another key's response, an
//! expired or a deleted one answer as an unknown one: 404.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{OnDone, ResponsesRequest};
use crate::api::error::ApiError;
use crate::api::guard::{finish_response, request_id};
use crate::api::{AppState, Gateway};
use crate::store::responses::{ConversationError, StoredResponse};

/// Longest response id looked up.
const MAX_ID: usize = 100;

fn stored(what: &str, e: &dyn std::fmt::Display) -> ApiError {
    tracing::error!("{what}: {e}");
    ApiError::Internal(format!("{what}; see the gateway's log."))
}

/// A plausible response id, else nothing is looked up.
fn checked(id: &str) -> Result<&str, ApiError> {
    let ok = id.len() <= MAX_ID
        && !id.is_empty()
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-');
    if ok {
        Ok(id)
    } else {
        let shown: String = id.chars().take(40).collect();
        Err(ApiError::ResponseNotFound { id: shown })
    }
}

/// The items of the stored conversation `previous_response_id` ends.
pub async fn history(app: &AppState, key: &str, id: &str) -> Result<Vec<Value>, ApiError> {
    let gone = || ApiError::BadRequest {
        message: format!("Previous response with id '{id}' not found."),
        param: Some("previous_response_id".into()),
        code: Some("previous_response_not_found"),
    };
    let id = checked(id).map_err(|_| gone())?;
    match app.responses.conversation(id, key).await {
        Ok(Some(items)) => Ok(items),
        Ok(None) => Err(gone()),
        Err(ConversationError::TooLong) => Err(ApiError::BadRequest {
            message: format!(
                "The conversation that '{id}' ends is {}.",
                ConversationError::TooLong
            ),
            param: Some("previous_response_id".into()),
            code: Some("conversation_too_long"),
        }),
        Err(ConversationError::Store(e)) => Err(stored("the conversation could not be read", &e)),
    }
}

/// What a finished response is handed to: kept for its key when the
/// request asked (`store`) and the gateway keeps responses.
pub fn keeper(app: &AppState, req: &ResponsesRequest, key: Arc<str>) -> OnDone {
    let retention = app.responses_retention;
    if !req.store() || retention.is_zero() {
        return Box::new(|_| {});
    }
    let (store, previous, input) = (
        app.responses.clone(),
        req.previous_response_id().map(str::to_owned),
        req.input_items(),
    );
    Box::new(move |response: &Value| {
        let Some(id) = response.get("id").and_then(Value::as_str) else {
            return;
        };
        let r = StoredResponse {
            id: id.to_owned(),
            key: key.to_string(),
            previous,
            input,
            response: response.clone(),
        };
        store.put(r, retention);
    })
}

/// `GET /v1/responses/{id}`.
pub async fn get(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let rid = request_id(&headers);
    let resp = async {
        let (app, key) = (gw.state(), caller(&gw, &headers)?);
        Ok(Json(find(&app, &key, &id).await?.response).into_response())
    }
    .await;
    finish_response(&gw, resp, &rid)
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let rid = request_id(&headers);
    let resp = async {
        let (app, key) = (gw.state(), caller(&gw, &headers)?);
        let deleted = app
            .responses
            .delete(checked(&id)?, &key)
            .await
            .map_err(|e| stored("the response could not be deleted", &e))?;
        if !deleted {
            return Err(ApiError::ResponseNotFound { id });
        }
        Ok(Json(json!({"id": id, "object": "response.deleted", "deleted": true})).into_response())
    }
    .await;
    finish_response(&gw, resp, &rid)
}

/// `GET /v1/responses/{id}/input_items?after=&limit=&order=`: the
/// response's own input items, newest first unless `order=asc`.
pub async fn input_items(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Response {
    let rid = request_id(&headers);
    let resp = async {
        let (app, key) = (gw.state(), caller(&gw, &headers)?);
        let bad = |param: &str, message: &str| ApiError::BadRequest {
            message: message.to_owned(),
            param: Some(param.to_owned()),
            code: Some("invalid_value"),
        };
        let limit = match q.get("limit") {
            None => 20,
            Some(l) => l
                .parse::<usize>()
                .ok()
                .filter(|n| (1..=100).contains(n))
                .ok_or_else(|| bad("limit", "`limit` must be an integer from 1 to 100."))?,
        };
        let desc = match q.get("order").map(String::as_str) {
            None | Some("desc") => true,
            Some("asc") => false,
            Some(_) => return Err(bad("order", "`order` must be `asc` or `desc`.")),
        };
        let mut items = find(&app, &key, &id).await?.input;
        if desc {
            items.reverse();
        }
        if let Some(after) = q.get("after") {
            let at = items
                .iter()
                .position(|i| i.get("id").and_then(Value::as_str) == Some(after))
                .ok_or_else(|| bad("after", "`after` names no input item of this response."))?;
            items.drain(..=at);
        }
        let has_more = items.len() > limit;
        items.truncate(limit);
        let id_of = |i: Option<&Value>| i.and_then(|i| i.get("id")).cloned().unwrap_or(Value::Null);
        Ok(Json(json!({
            "object": "list",
            "first_id": id_of(items.first()),
            "last_id": id_of(items.last()),
            "has_more": has_more,
            "data": items,
        }))
        .into_response())
    }
    .await;
    finish_response(&gw, resp, &rid)
}

/// The key behind the request's credentials.
fn caller(gw: &Gateway, headers: &HeaderMap) -> Result<Arc<str>, ApiError> {
    Ok(gw.state().keys.authenticate(headers)?.name)
}

async fn find(app: &AppState, key: &str, id: &str) -> Result<StoredResponse, ApiError> {
    app.responses
        .get(checked(id)?, key)
        .await
        .map_err(|e| stored("the response could not be read", &e))?
        .ok_or_else(|| ApiError::ResponseNotFound { id: id.to_owned() })
}
