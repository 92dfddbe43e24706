//! Stored responses over HTTP, each key's own: the conversation a
//! `previous_response_id` continues and the keeping of a finished response
//! (`store`), for `POST /v1/responses`; and `GET /v1/responses/{id}` (the
//! response object), `DELETE /v1/responses/{id}` and
//! `GET /v1/responses/{id}/input_items` (a page of its own input items).
//! Another key's response, like an unknown, expired or deleted one, is a
//! 404 in OpenAI's words. An id too long or of other characters than
//! OpenAI's is not looked up (nor stored: the rule is the store's
//! [`valid_id`]). Failures are counted in the request
//! metrics as the arena's vote endpoint does.

use std::future::Future;
use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::{OnDone, ResponsesRequest};
use crate::api::error::ApiError;
use crate::api::error::ErrorStyle;
use crate::api::guard::{finish_response, request_id};
use crate::api::{AppState, Gateway};
use crate::store::responses::{MAX_ID, Order, PageError, StoredResponse, valid_id};

/// Items a page holds unless `limit` says otherwise, and at most.
const DEFAULT_LIMIT: usize = 20;
const MAX_LIMIT: usize = 100;

/// The items of the stored conversation `previous_response_id` ends.
pub async fn history(app: &AppState, key: &str, id: &str) -> Result<Vec<Value>, ApiError> {
    if !valid_id(id) {
        return Err(ApiError::conversation(id, None));
    }
    match app.responses.conversation(id, key).await {
        Ok(Some(items)) => Ok(items),
        Ok(None) => Err(ApiError::conversation(id, None)),
        Err(e) => Err(ApiError::conversation(id, Some(e))),
    }
}

/// What a finished response is handed to: kept for its key when the
/// request asked (`store`) and the gateway keeps responses.
pub fn keeper(app: &AppState, req: &ResponsesRequest, key: Arc<str>) -> OnDone {
    if !req.store() || app.responses.retention().is_zero() {
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
        store.put(StoredResponse {
            id: id.to_owned(),
            key: key.to_string(),
            previous,
            input,
            response: response.clone(),
        });
    })
}

/// `GET /v1/responses/{id}`.
pub async fn get(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let id = id.as_str();
    answer(&gw, &headers, id, |app, key| async move {
        let found = app
            .responses
            .get(id, &key)
            .await
            .map_err(|e| ApiError::store_failed("the response could not be read", &e))?;
        let r = found.ok_or_else(|| not_found(id))?;
        Ok(Json(r.response).into_response())
    })
    .await
}

/// `DELETE /v1/responses/{id}`.
pub async fn delete(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
) -> Response {
    let id = id.as_str();
    answer(&gw, &headers, id, |app, key| async move {
        let deleted = app
            .responses
            .delete(id, &key)
            .await
            .map_err(|e| ApiError::store_failed("the response could not be deleted", &e))?;
        if !deleted {
            return Err(not_found(id));
        }
        Ok(Json(json!({"id": id, "object": "response.deleted", "deleted": true})).into_response())
    })
    .await
}

/// `GET /v1/responses/{id}/input_items?after=&limit=&order=`.
pub async fn input_items(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    uri: Uri,
    headers: HeaderMap,
) -> Response {
    let id = id.as_str();
    answer(&gw, &headers, id, |app, key| async move {
        let q = Paging::read(&uri)?;
        let page = app
            .responses
            .input_items(id, &key, q.after.as_deref(), q.limit, q.order)
            .await
            .map_err(|e| match e {
                PageError::Store(e) => {
                    ApiError::store_failed("the input items could not be read", &e)
                }
                PageError::UnknownAfter(_) => ApiError::field(
                    "after",
                    "invalid_value",
                    "Invalid 'after': no input item of this response has that id.".into(),
                ),
            })?;
        let page = page.ok_or_else(|| not_found(id))?;
        Ok(Json(page).into_response())
    })
    .await
}

/// Answers a request about stored response `id` with what `f` makes of
/// the caller's state and key name, counted and given its request id.
async fn answer<F, Fut>(gw: &Gateway, headers: &HeaderMap, id: &str, f: F) -> Response
where
    F: FnOnce(Arc<AppState>, String) -> Fut,
    Fut: Future<Output = Result<Response, ApiError>>,
{
    let rid = request_id(headers);
    let resp = match admit(gw, headers, id) {
        Ok((app, key)) => f(app, key).await,
        Err(e) => Err(e),
    };
    finish_response(gw, resp, &rid, ErrorStyle::OpenAi)
}

/// The caller's state and key name, once the id is one worth looking up.
fn admit(gw: &Gateway, headers: &HeaderMap, id: &str) -> Result<(Arc<AppState>, String), ApiError> {
    let app = gw.state();
    let caller = app.keys.authenticate(headers)?;
    if !valid_id(id) {
        return Err(not_found(id));
    }
    Ok((app, caller.name.to_string()))
}

fn not_found(id: &str) -> ApiError {
    ApiError::ResponseNotFound {
        id: id.chars().take(MAX_ID).collect(),
    }
}

/// The query of `input_items`; other parameters (`include`) are ignored.
struct Paging {
    after: Option<String>,
    limit: usize,
    order: Order,
}

impl Paging {
    fn read(uri: &Uri) -> Result<Paging, ApiError> {
        let pairs = crate::api::query::pairs(uri)?;
        let mut q = Paging {
            after: None,
            limit: DEFAULT_LIMIT,
            order: Order::default(),
        };
        for (name, value) in pairs {
            match name.as_str() {
                "after" if !value.is_empty() => q.after = Some(value),
                "limit" => q.limit = limit(&value)?,
                "order" => {
                    q.order = match value.as_str() {
                        "asc" => Order::Asc,
                        "desc" => Order::Desc,
                        _ => {
                            return Err(ApiError::field(
                                "order",
                                "invalid_value",
                                format!(
                                    "Invalid value: '{}'. Supported values are: 'asc' and 'desc'.",
                                    value.chars().take(40).collect::<String>()
                                ),
                            ));
                        }
                    }
                }
                _ => {}
            }
        }
        Ok(q)
    }
}

fn limit(value: &str) -> Result<usize, ApiError> {
    let n: i64 = value.trim().parse().map_err(|_| {
        ApiError::field(
            "limit",
            "invalid_type",
            format!(
                "Invalid 'limit': expected an integer, but got '{}' instead.",
                value.chars().take(40).collect::<String>()
            ),
        )
    })?;
    match usize::try_from(n) {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ if n < 1 => Err(ApiError::field(
            "limit",
            "integer_below_min_value",
            format!(
                "Invalid 'limit': integer below minimum value. Expected a value >= 1, but got {n} instead."
            ),
        )),
        _ => Err(ApiError::field(
            "limit",
            "integer_above_max_value",
            format!(
                "Invalid 'limit': integer above maximum value. Expected a value <= {MAX_LIMIT}, but got {n} instead."
            ),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_bounded_in_length_and_charset() {
        assert!(valid_id("resp_0123abc-XYZ"));
        assert!(!valid_id(""));
        assert!(!valid_id("resp_1/../2"));
        assert!(!valid_id("resp é"));
        assert!(!valid_id(&"a".repeat(MAX_ID + 1)));
    }

    #[test]
    fn a_limit_is_an_integer_from_1_to_100() {
        assert_eq!(limit("1").unwrap(), 1);
        assert_eq!(limit("100").unwrap(), 100);
        for (bad, code) in [
            ("0", "integer_below_min_value"),
            ("-5", "integer_below_min_value"),
            ("101", "integer_above_max_value"),
            ("x", "invalid_type"),
            ("99999999999999999999", "invalid_type"),
        ] {
            match limit(bad) {
                Err(ApiError::BadRequest { param, code: c, .. }) => {
                    assert_eq!((param.as_deref(), c), (Some("limit"), Some(code)), "{bad}")
                }
                other => panic!("{bad}: {other:?}"),
            }
        }
    }
}
