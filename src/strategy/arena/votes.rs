//! The arena's own endpoints, served through its strategy-table entry:
//! `POST /v1/arena/{id}/vote` closes an arena with its vote (once, by the
//! key that asked, before it expires): a `pick` ([`super::pick`]: a letter
//! that beats every other, a tie, all bad, a skip) or a `ranking` (every
//! letter once, best first). The pairwise results it stands for
//! ([`crate::store::arena::pairwise`]) are counted in
//! `conclave_arena_votes_total` (per model, each result), and the vote is
//! told in an `arena_vote` event; its answer reveals every contestant; `GET /v1/arena/leaderboard` ranks a
//! route's contestants ([`super::leaderboard`]).

use std::sync::Arc;

use axum::Json;
use axum::response::{IntoResponse, Response};
use metrics::counter;
use serde_json::{Map, Value, json};

use super::config::ArenaSpec;
use super::pick::{Pick, rank_outcome, ranking, shown};
use crate::config::RouteSpec;
use crate::error::ModelError;
use crate::graph::endpoint::EndpointCall;
use crate::store::arena::{Closed, Side, pairwise};
use crate::telemetry::{Event, EventBody, MetricKind, MetricSpec};

pub const ARENA_VOTES: &str = "conclave_arena_votes_total";

/// Declared in the arena's strategy-table entry.
pub const METRICS: &[MetricSpec] = &[MetricSpec {
    name: ARENA_VOTES,
    help: "Arena votes by route and model, one per pairwise result: outcome win, loss or tie",
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

fn bad_vote(param: &'static str, message: String) -> ModelError {
    ModelError::Strategy {
        status: 400,
        code: "invalid_vote",
        message,
        param: Some(param),
        retry_after: None,
    }
}

/// What a vote's body says: a pick, or a ranking (positions, best first).
fn read(v: &Value) -> Result<(Option<Pick>, Option<Vec<usize>>), ModelError> {
    match (v.get("pick"), v.get("ranking")) {
        (Some(_), Some(_)) => Err(bad_vote(
            "ranking",
            "Send either \"pick\" or \"ranking\", not both.".into(),
        )),
        (None, Some(r)) => Ok((None, Some(ranking(r).map_err(|m| bad_vote("ranking", m))?))),
        (pick, None) => {
            let said = pick.and_then(Value::as_str).ok_or_else(|| {
                bad_vote(
                    "pick",
                    format!(
                        "Send {{\"pick\": \"…\"}} with one of {}, or {{\"ranking\": [\"B\", \"A\", …]}}.",
                        Pick::accepted()
                    ),
                )
            })?;
            let pick = Pick::read(said).ok_or_else(|| {
                let shown: String = said.chars().take(40).collect();
                bad_vote(
                    "pick",
                    format!(
                        "\"{shown}\" is not a vote. Say one of {}.",
                        Pick::accepted()
                    ),
                )
            })?;
            Ok((Some(pick), None))
        }
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
    let (pick, ranked) = read(&v)?;
    let outcome = match (&pick, &ranked) {
        (Some(p), _) => p.as_str().to_owned(),
        (None, Some(r)) => rank_outcome(r),
        (None, None) => String::new(),
    };
    if id.len() > MAX_ID || !id.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') {
        return Err(not_found("?"));
    }
    // With keys, only the key that asked may vote.
    let key = call.caller.keyed.then(|| call.caller.name.to_string());
    let now = call.clock.unix_secs_i64();
    let closed = call
        .records
        .arenas
        .close(id, &outcome, key.as_deref(), now)
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
        Closed::Misfit(n) => {
            let letters = format!("A to {}", shown(n.saturating_sub(1)));
            return Err(match &ranked {
                Some(r) => bad_vote(
                    "ranking",
                    format!(
                        "Arena `{id}` has {n} contestants ({letters}): rank every one of them once, best first (this ranking names {}).",
                        r.len()
                    ),
                ),
                None => bad_vote(
                    "pick",
                    format!(
                        "Arena `{id}` has {n} contestants ({letters}); pick one of them, \"tie\", \"bad\" or \"skip\"."
                    ),
                ),
            });
        }
    };
    let models = &arena.models;
    let winner = match (&pick, &ranked) {
        (Some(Pick::Letter(i)), _) => models.get(*i),
        (None, Some(r)) => r.first().and_then(|i| models.get(*i)),
        _ => None,
    };
    // Label values from the config only: a contestant since removed from
    // it is still named by the store, so it is left out of the metric.
    let arenas = arenas(&call);
    let known = arenas
        .iter()
        .find(|(r, _)| *r == arena.route)
        .map(|(_, a)| &a.contestants);
    let mut outcomes: Vec<(&str, &'static str)> = Vec::new();
    for (i, j, side) in pairwise(models.len(), &outcome) {
        let (x, y) = match side {
            Side::First => ("win", "loss"),
            Side::Second => ("loss", "win"),
            Side::Tie => ("tie", "tie"),
        };
        outcomes.push((&models[i], x));
        outcomes.push((&models[j], y));
    }
    call.telemetry.metrics.scope(|| {
        for (model, outcome) in &outcomes {
            if known.is_some_and(|c| c.iter().any(|m| m == model)) {
                counter!(ARENA_VOTES, "route" => arena.route.clone(), "model" => (*model).to_owned(), "outcome" => *outcome)
                    .increment(1);
            }
        }
    });
    let said = pick.map_or("ranking", Pick::as_str);
    let letters: Option<Vec<String>> = ranked
        .as_ref()
        .map(|r| r.iter().map(|&i| shown(i)).collect());
    let by_letter: Map<String, Value> = models
        .iter()
        .enumerate()
        .map(|(i, m)| (shown(i), Value::from(m.as_str())))
        .collect();
    let first = |i: usize| models.get(i).map_or("", String::as_str);
    let mut f = Map::new();
    f.insert("arena_id".into(), Value::from(id));
    f.insert("pick".into(), Value::from(said));
    f.insert("a".into(), Value::from(first(0)));
    f.insert("b".into(), Value::from(first(1)));
    f.insert("models".into(), json!(models));
    if let Some(l) = &letters {
        f.insert("ranking".into(), json!(l));
    }
    f.insert(
        "winner".into(),
        winner.map_or(Value::Null, |w| Value::from(w.as_str())),
    );
    f.insert("key".into(), Value::from(&*call.caller.name));
    call.telemetry.emit_event(Event::of(
        call.request_id.clone(),
        Arc::from(arena.route.as_str()),
        "arena_vote",
        EventBody::Fields(f),
        call.clock.now(),
    ));
    let mut body = json!({
        "object": "arena.vote",
        "arena_id": id,
        "pick": said,
        "a": first(0),
        "b": first(1),
        "models": by_letter,
        "winner": winner,
        "recorded": pick != Some(Pick::Skip),
    });
    if let Some(l) = letters {
        body["ranking"] = json!(l);
    }
    Ok(Json(body).into_response())
}
