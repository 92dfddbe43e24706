//! `GET /v1/requests` and `GET /v1/requests/{id}`: the ring of recent
//! request records (`crate::telemetry::recent`). They authenticate like
//! every endpoint and, like `/v1/keys/usage`, count in no key's limits
//! and are not themselves recorded. An admin key (and the caller of a
//! gateway without `[[keys]]`, which is an admin everywhere) sees every
//! request; another key only its own: a filter on another key's name
//! finds nothing, and another key's record is a 404 like an unknown or
//! evicted one. A request is there from its start (`"status":
//! "running"`, with what it has done so far), so a client may poll its
//! own request's record while it streams. An arena's record keeps its
//! contestants anonymous for a key that is not an admin ([`blind`]). With
//! `console.recent_requests = 0` both are a 404.

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, Method, Uri};
use serde_json::{Value, json};

use super::auth::Caller;
use super::error::ApiError;
use super::{AppState, Gateway};
use crate::telemetry::recent::Filter;

/// Records a list holds unless `limit` says otherwise, and at most.
const DEFAULT_LIMIT: usize = 100;
const MAX_LIMIT: usize = 1000;
/// Characters of a client's value an error message repeats.
const ECHO: usize = 40;
/// Longest request id looked up (`x-request-id` takes at most 128).
const MAX_ID: usize = 128;

/// `GET /v1/requests?route=&key=&status=&since=&until=&limit=&running=`:
/// the caller's view of the ring: the requests still running first (the
/// latest started first; `running=false` leaves them out, `status=running`
/// lists only them), then the finished, most recently finished first.
pub async fn list(
    State(gw): State<Arc<Gateway>>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let (app, caller) = open(&gw, &headers, &uri)?;
    let mut filter = read(&uri)?;
    if !caller.admin {
        match &filter.key {
            Some(k) if **k != *caller.name => {
                return Ok(Json(json!({"object": "list", "data": []})));
            }
            _ => filter.key = Some(caller.name.to_string()),
        }
    }
    let data: Vec<Value> = app
        .telemetry
        .recent()
        .list(&filter)
        .iter()
        .map(|r| r.summary())
        .collect();
    Ok(Json(json!({"object": "list", "data": data})))
}

/// `GET /v1/requests/{id}`: the newest record with that id the caller may
/// see, with its attempts and events; while it runs, with
/// `"status": "running"` and what it has done so far.
pub async fn one(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    uri: Uri,
) -> Result<Json<Value>, ApiError> {
    let (app, caller) = open(&gw, &headers, &uri)?;
    let not_found = || ApiError::RequestNotFound {
        id: id.chars().take(MAX_ID).collect(),
    };
    if id.len() > MAX_ID {
        return Err(not_found());
    }
    let own = (!caller.admin).then_some(&*caller.name);
    match app.telemetry.recent().get(&id, own) {
        Some(r) if caller.admin => Ok(Json(r.detail())),
        Some(r) => Ok(Json(blind(r.detail()))),
        None => Err(not_found()),
    }
}

/// What a key that is not an admin sees of its own arena request: the
/// contestants stay anonymous, as they are in the answer, so a record
/// read before the vote does not unblind it. Its events (which name the
/// models, as lane swaps do) are left out, and each contestant's attempt
/// keeps only what does not tell models apart: its role, verdict,
/// duration and what it wrote. Admins see the whole record, as the event
/// log has it.
fn blind(mut detail: Value) -> Value {
    if detail.get("strategy").and_then(Value::as_str) != Some("arena") {
        return detail;
    }
    if let Some(events) = detail.get_mut("events").and_then(Value::as_array_mut) {
        events.clear();
    }
    const KEPT: [&str; 9] = [
        "ts",
        "request_id",
        "route",
        "event",
        "attempt",
        "role",
        "verdict",
        "duration_ms",
        "output_summary",
    ];
    for a in detail
        .get_mut("attempts")
        .and_then(Value::as_array_mut)
        .into_iter()
        .flatten()
    {
        if let Some(fields) = a.as_object_mut() {
            fields.retain(|k, _| KEPT.contains(&k.as_str()));
            fields.insert("model".into(), Value::from("contestant"));
        }
    }
    detail
}

/// The state and the caller, once the ring is known to be on (else the
/// URL is unknown, as if it were not served) and the key checked.
fn open(gw: &Gateway, headers: &HeaderMap, uri: &Uri) -> Result<(Arc<AppState>, Caller), ApiError> {
    let app = gw.state();
    if !app.telemetry.recent().enabled() {
        return Err(ApiError::UnknownUrl {
            method: Method::GET.to_string(),
            path: uri.path().chars().take(MAX_ID * 2).collect(),
        });
    }
    let caller = app.keys.authenticate(headers)?;
    Ok((app, caller))
}

/// The list's query: every parameter known, each at most once.
fn read(uri: &Uri) -> Result<Filter, ApiError> {
    let pairs = super::query::pairs(uri)?;
    let mut f = Filter {
        limit: DEFAULT_LIMIT,
        ..Filter::default()
    };
    let mut seen: Vec<String> = Vec::new();
    for (name, value) in pairs {
        if seen.contains(&name) {
            return Err(ApiError::field(
                &echo(&name),
                "duplicate_parameter",
                format!("'{}' is given more than once.", echo(&name)),
            ));
        }
        let text = || (!value.is_empty()).then(|| value.clone());
        match name.as_str() {
            "route" => f.route = text(),
            "key" => f.key = text(),
            "status" => f.status = text(),
            "since" => f.since = Some(seconds("since", &value)?),
            "until" => f.until = Some(seconds("until", &value)?),
            "limit" => f.limit = limit(&value)?,
            "running" => f.finished_only = !flag("running", &value)?,
            _ => {
                return Err(ApiError::field(
                    &echo(&name),
                    "unknown_parameter",
                    format!(
                        "Unknown parameter: '{}'. Supported: route, key, status, since, until, limit, running.",
                        echo(&name)
                    ),
                ));
            }
        }
        seen.push(name);
    }
    Ok(f)
}

fn echo(s: &str) -> String {
    s.chars().take(ECHO).collect()
}

/// A unix time in seconds.
fn seconds(param: &'static str, value: &str) -> Result<u64, ApiError> {
    value.trim().parse::<u64>().map_err(|_| {
        ApiError::field(
            param,
            "invalid_type",
            format!(
                "Invalid '{param}': expected a unix time in seconds, but got '{}' instead.",
                echo(value)
            ),
        )
    })
}

/// `true` or `false`.
fn flag(param: &'static str, value: &str) -> Result<bool, ApiError> {
    match value.trim() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ApiError::field(
            param,
            "invalid_value",
            format!(
                "Invalid '{param}': expected true or false, but got '{}' instead.",
                echo(value)
            ),
        )),
    }
}

fn limit(value: &str) -> Result<usize, ApiError> {
    let bad = || {
        ApiError::field(
            "limit",
            "invalid_value",
            format!(
                "Invalid 'limit': expected an integer from 1 to {MAX_LIMIT}, but got '{}' instead.",
                echo(value)
            ),
        )
    };
    match value.trim().parse::<usize>() {
        Ok(n) if (1..=MAX_LIMIT).contains(&n) => Ok(n),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn q(query: &str) -> Result<Filter, ApiError> {
        read(&format!("/v1/requests?{query}").parse().unwrap())
    }

    #[test]
    fn the_query_reads_every_filter() {
        let f = q("route=review&key=alice&status=5xx&since=10&until=20&limit=7").unwrap();
        assert_eq!(f.route.as_deref(), Some("review"));
        assert_eq!(f.key.as_deref(), Some("alice"));
        assert_eq!(f.status.as_deref(), Some("5xx"));
        assert_eq!((f.since, f.until, f.limit), (Some(10), Some(20), 7));
        assert!(!f.finished_only && q("running=false").unwrap().finished_only);
        assert!(!q("running=true").unwrap().finished_only);
        assert_eq!(q("").unwrap().limit, DEFAULT_LIMIT);
        assert!(q("route=").unwrap().route.is_none());
    }

    #[test]
    fn a_bad_query_is_a_400_naming_its_parameter() {
        for (query, param) in [
            ("limit=0", "limit"),
            ("limit=1001", "limit"),
            ("limit=x", "limit"),
            ("since=-1", "since"),
            ("until=soon", "until"),
            ("rout=a", "rout"),
            ("key=a&key=b", "key"),
            ("running=no", "running"),
        ] {
            match q(query) {
                Err(ApiError::BadRequest { param: p, .. }) => {
                    assert_eq!(p.as_deref(), Some(param), "{query}")
                }
                other => panic!("{query}: {other:?}"),
            }
        }
    }
}
