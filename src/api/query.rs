//! Reads a query string into its pairs, in order (so a handler can refuse
//! an unknown or repeated parameter by name), or a 400 naming `query`.

use axum::extract::Query;
use axum::http::Uri;

use super::error::ApiError;

/// The query string's `(name, value)` pairs, decoded.
pub(super) fn pairs(uri: &Uri) -> Result<Vec<(String, String)>, ApiError> {
    let Query(pairs) = Query::<Vec<(String, String)>>::try_from_uri(uri).map_err(|e| {
        ApiError::field(
            "query",
            "invalid_request",
            format!("The query string could not be read: {e}."),
        )
    })?;
    Ok(pairs)
}
