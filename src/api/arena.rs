//! The arena's endpoints: `POST /v1/arena/{id}/vote` closes an arena with
//! its vote (once, by the key that asked, before it expires) and
//! `GET /v1/arena/leaderboard` ranks a route's contestants from every
//! stored vote, as JSON or a Markdown table.

use std::collections::HashMap;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use metrics::counter;
use serde_json::{Map, Value, json};

use super::Gateway;
use super::error::ApiError;
use super::error::ErrorStyle;
use super::guard::{finish_response, request_id};
use super::ingress::receive;
use crate::store::arena::Closed;
use crate::strategy::arena::board::{Standing, leaderboard as rank};
use crate::strategy::arena::pick::Pick;
use crate::telemetry::{ARENA_VOTES, Event, EventBody};

/// Longest arena id looked up.
const MAX_ID: usize = 100;

pub async fn vote(
    State(gw): State<Arc<Gateway>>,
    Path(id): Path<String>,
    headers: HeaderMap,
    body: Body,
) -> Response {
    let rid = request_id(&headers);
    let resp = cast(&gw, &id, &headers, body, &rid).await;
    finish_response(&gw, resp, &rid, ErrorStyle::OpenAi)
}

/// A store failure: the detail (a path, SQLite's words) goes to the log,
/// the client gets what failed.
fn stored(what: &str, e: &dyn std::fmt::Display) -> ApiError {
    tracing::error!("{what}: {e}");
    ApiError::Internal(format!("{what}; see the gateway's log."))
}

fn bad_pick(message: String) -> ApiError {
    ApiError::BadRequest {
        message,
        param: Some("pick".into()),
        code: Some("invalid_vote"),
    }
}

async fn cast(
    gw: &Gateway,
    id: &str,
    headers: &HeaderMap,
    body: Body,
    rid: &str,
) -> Result<Response, ApiError> {
    let ad = receive(gw, headers.clone(), body).await?;
    let (app, caller, bytes) = (ad.app, ad.caller, ad.body);
    let v: Value = serde_json::from_slice(&bytes).map_err(|e| ApiError::invalid_json(&e))?;
    let said = v.get("pick").and_then(Value::as_str).ok_or_else(|| {
        bad_pick(format!(
            "Send {{\"pick\": \"…\"}} with one of {}.",
            Pick::accepted()
        ))
    })?;
    let pick = Pick::read(said).ok_or_else(|| {
        let shown: String = said.chars().take(40).collect();
        bad_pick(format!(
            "\"{shown}\" is not a vote. Say one of {}.",
            Pick::accepted()
        ))
    })?;
    if id.len() > MAX_ID || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(ApiError::ArenaNotFound { id: "?".into() });
    }
    // With keys, only the key that asked may vote.
    let key = (!app.keys.is_empty()).then(|| caller.name.to_string());
    let now = app.clock.unix_secs_i64();
    let closed = app
        .records
        .arenas
        .close(id, pick.as_str(), key.as_deref(), now)
        .await
        .map_err(|e| stored("the vote could not be stored", &e))?;
    let arena = match closed {
        Closed::Now(a) => a,
        Closed::Unknown => return Err(ApiError::ArenaNotFound { id: id.to_owned() }),
        Closed::NotYours => return Err(ApiError::ArenaNotYours),
        Closed::Already(outcome) => {
            return Err(ApiError::ArenaVoted {
                id: id.to_owned(),
                outcome,
            });
        }
    };
    let winner = match pick {
        Pick::A => Some(arena.model_a.as_str()),
        Pick::B => Some(arena.model_b.as_str()),
        Pick::Tie | Pick::Skip => None,
    };
    let outcomes: &[(&str, &str)] = match pick {
        Pick::A => &[(&arena.model_a, "win"), (&arena.model_b, "loss")],
        Pick::B => &[(&arena.model_a, "loss"), (&arena.model_b, "win")],
        Pick::Tie => &[(&arena.model_a, "tie"), (&arena.model_b, "tie")],
        Pick::Skip => &[],
    };
    // Label values from the config only: a contestant since removed from
    // it is still named by the store, so it is left out of the metric.
    let known = app.arenas.get(&arena.route);
    app.telemetry.metrics.scope(|| {
        for (model, outcome) in outcomes {
            if known.is_some_and(|c| c.iter().any(|m| m == model)) {
                counter!(ARENA_VOTES, "route" => arena.route.clone(), "model" => (*model).to_owned(), "outcome" => *outcome)
                    .increment(1);
            }
        }
    });
    let mut f = Map::new();
    f.insert("arena_id".into(), Value::from(id));
    f.insert("pick".into(), Value::from(pick.as_str()));
    f.insert("a".into(), Value::from(arena.model_a.as_str()));
    f.insert("b".into(), Value::from(arena.model_b.as_str()));
    f.insert("winner".into(), winner.map_or(Value::Null, Value::from));
    f.insert("key".into(), Value::from(&*caller.name));
    app.telemetry.emit_event(Event::of(
        rid.to_owned(),
        arena.route.as_str().into(),
        "arena_vote",
        EventBody::Fields(f),
        app.clock.now(),
    ));
    Ok(Json(json!({
        "object": "arena.vote",
        "arena_id": id,
        "pick": pick.as_str(),
        "a": arena.model_a,
        "b": arena.model_b,
        "winner": winner,
        "recorded": pick != Pick::Skip,
    }))
    .into_response())
}

/// `GET /v1/arena/leaderboard?route=NAME[&format=markdown]`.
pub async fn leaderboard(
    State(gw): State<Arc<Gateway>>,
    Query(q): Query<HashMap<String, String>>,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    let app = gw.state();
    let caller = app.keys.authenticate(&headers)?;
    // Only the arenas this key may use: others do not exist for it.
    let routes: Vec<&String> = app.arenas.keys().filter(|r| caller.may_use(r)).collect();
    let route = match q.get("route") {
        Some(r) => r.clone(),
        None if routes.len() == 1 => routes[0].clone(),
        None => {
            return Err(ApiError::BadRequest {
                message: format!(
                    "Name the arena route: ?route=… (arena routes: {}).",
                    routes
                        .iter()
                        .map(|r| r.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ),
                param: Some("route".into()),
                code: Some("invalid_request"),
            });
        }
    };
    let Some(contestants) = app.arenas.get(&route).filter(|_| caller.may_use(&route)) else {
        return Err(ApiError::NotFound { model: route });
    };
    let votes = app
        .records
        .arenas
        .votes(&route)
        .await
        .map_err(|e| stored("the votes could not be read", &e))?;
    let board = rank(contestants, &votes);
    if q.get("format")
        .is_some_and(|f| f.eq_ignore_ascii_case("markdown"))
    {
        let mut resp = markdown(&route, votes.len(), &board).into_response();
        resp.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("text/markdown; charset=utf-8"),
        );
        return Ok(resp);
    }
    let one = |x: f64| (x * 10.0).round() / 10.0;
    let data: Vec<Value> = board
        .iter()
        .map(|s| {
            json!({
                "model": s.model, "votes": s.votes, "wins": s.wins, "losses": s.losses,
                "ties": s.ties, "win_rate": s.win_rate.map(|w| (w * 1000.0).round() / 1000.0),
                "rating": one(s.rating), "ci_low": one(s.ci_low), "ci_high": one(s.ci_high),
            })
        })
        .collect();
    Ok(Json(json!({
        "object": "arena.leaderboard",
        "route": route,
        "votes": votes.len(),
        "method": "Bradley-Terry (MM; a tie is half a win; one virtual tie per pair), Elo scale; 95% CI from the Fisher information",
        "data": data,
    }))
    .into_response())
}

fn markdown(route: &str, votes: usize, board: &[Standing]) -> String {
    let mut out = format!(
        "Arena `{route}`: {votes} vote{}\n\n| # | model | rating | 95% CI | votes | wins | losses | ties | win rate |\n|---|---|---|---|---|---|---|---|---|\n",
        if votes == 1 { "" } else { "s" }
    );
    for (i, s) in board.iter().enumerate() {
        let rate = s
            .win_rate
            .map_or("–".to_owned(), |w| format!("{:.1}%", w * 100.0));
        out.push_str(&format!(
            "| {} | {} | {:.0} | {:.0}–{:.0} | {} | {} | {} | {} | {rate} |\n",
            i + 1,
            s.model,
            s.rating,
            s.ci_low,
            s.ci_high,
            s.votes,
            s.wins,
            s.losses,
            s.ties
        ));
    }
    out
}
