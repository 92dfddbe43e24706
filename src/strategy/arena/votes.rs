//! The arena's own endpoints, served through its strategy-table entry:
//! `POST /v1/arena/{id}/vote` closes an arena with its vote (once, by the
//! key that asked, before it expires), counted in `conclave_arena_votes_total`
//! and told in an `arena_vote` event; `GET /v1/arena/leaderboard` ranks a
//! route's contestants ([`super::leaderboard`]).

use std::sync::Arc;

use axum::Json;
use axum::response::{IntoResponse, Response};
use metrics::counter;
use serde_json::{Map, Value, json};

use super::config::ArenaSpec;
use super::pick::Pick;
use crate::config::RouteSpec;
use crate::error::ModelError;
use crate::graph::endpoint::EndpointCall;
use crate::store::arena::Closed;
use crate::telemetry::{Event, EventBody, MetricKind, MetricSpec};

pub const ARENA_VOTES: &str = "conclave_arena_votes_total";

/// Declared in the arena's strategy-table entry.
pub const METRICS: &[MetricSpec] = &[MetricSpec {
    name: ARENA_VOTES,
    help: "Arena votes by route and model: outcome win, loss or tie",
    kind: MetricKind::Counter,
}];

/// Longest arena id looked up.
const MAX_ID: usize = 100;

/// The arena routes of the running config and their contestants.
pub(super) fn arenas(call: &EndpointCall) -> Vec<(&str, &ArenaSpec)> {
    call.routes
        .iter()
        .filter_map(|(name, spec)| {
            let spec: &dyn RouteSpec = spec.as_ref();
            spec.as_any()
                .downcast_ref::<ArenaSpec>()
                .map(|a| (name.as_str(), a))
        })
        .collect()
}

/// A store failure: the detail (a path, SQLite's words) goes to the log,
/// the client gets what failed.
pub(super) fn stored(what: &str, e: &dyn std::fmt::Display) -> ModelError {
    tracing::error!("{what}: {e}");
    ModelError::strategy(
        500,
        "internal_error",
        format!("{what}; see the gateway's log."),
    )
}

fn bad_pick(message: String) -> ModelError {
    ModelError::Strategy {
        status: 400,
        code: "invalid_vote",
        message,
        param: Some("pick"),
        retry_after: None,
    }
}

fn not_found(id: &str) -> ModelError {
    ModelError::strategy(
        404,
        "arena_not_found",
        format!(
            "No open arena `{id}`: it is unknown, or expired unvoted after its route's vote_ttl."
        ),
    )
}

pub(super) async fn vote(call: EndpointCall) -> Result<Response, ModelError> {
    let id = call.params.get("id").map_or("", String::as_str);
    let v: Value = serde_json::from_slice(&call.body).map_err(|e| {
        ModelError::strategy(
            400,
            "invalid_json",
            format!("We could not parse the JSON body of your request ({e})."),
        )
    })?;
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
        return Err(not_found("?"));
    }
    // With keys, only the key that asked may vote.
    let key = call.caller.keyed.then(|| call.caller.name.to_string());
    let now = call.clock.unix_secs_i64();
    let closed = call
        .records
        .arenas
        .close(id, pick.as_str(), key.as_deref(), now)
        .await
        .map_err(|e| stored("the vote could not be stored", &e))?;
    let arena = match closed {
        Closed::Now(a) => a,
        Closed::Unknown => return Err(not_found(id)),
        Closed::NotYours => {
            return Err(ModelError::strategy(
                403,
                "arena_not_yours",
                "Only the key that asked for this arena may vote on it.",
            ));
        }
        Closed::Already(outcome) => {
            return Err(ModelError::strategy(
                409,
                "arena_already_voted",
                format!("Arena `{id}` already has its vote ({outcome}); an arena takes one."),
            ));
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
    let arenas = arenas(&call);
    let known = arenas
        .iter()
        .find(|(r, _)| *r == arena.route)
        .map(|(_, a)| &a.contestants);
    call.telemetry.metrics.scope(|| {
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
    f.insert("key".into(), Value::from(&*call.caller.name));
    call.telemetry.emit_event(Event::of(
        call.request_id.clone(),
        Arc::from(arena.route.as_str()),
        "arena_vote",
        EventBody::Fields(f),
        call.clock.now(),
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
