//! `GET /v1/arena/leaderboard?route=NAME[&since=T][&until=T][&format=markdown]`:
//! a route's contestants ranked from its stored votes ([`super::board`]),
//! as JSON or a Markdown table; only the arenas the caller's key may use
//! exist for it. `route=*` pools the votes of every arena route the key
//! may use over the union of their contestants. `since` and `until` (Unix
//! seconds) keep the votes cast at `since` or later and before `until`.
//! Any other parameter is a 400 that names it.

use axum::Json;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::board::{Standing, leaderboard as rank};
use super::votes::{arenas, stored};
use crate::error::ModelError;
use crate::graph::endpoint::EndpointCall;

/// The parameters the leaderboard reads.
const KNOWN: &[&str] = &["route", "since", "until", "format"];
/// Every arena route the key may use, pooled.
const ALL: &str = "*";

fn bad(param: &'static str, code: &'static str, message: String) -> ModelError {
    ModelError::Strategy {
        status: 400,
        code,
        message,
        param: Some(param),
        retry_after: None,
    }
}

/// `since` or `until`: Unix seconds, when given.
fn seconds(call: &EndpointCall, name: &'static str) -> Result<Option<i64>, ModelError> {
    let Some(v) = call.query.get(name) else {
        return Ok(None);
    };
    v.trim().parse::<i64>().map(Some).map_err(|_| {
        let shown: String = v.chars().take(40).collect();
        bad(
            name,
            "invalid_request",
            format!("'{name}' must be Unix seconds (got \"{shown}\")."),
        )
    })
}

pub(super) async fn answer(call: EndpointCall) -> Result<Response, ModelError> {
    let mut unknown: Vec<String> = call
        .query
        .keys()
        .filter(|k| !KNOWN.contains(&k.as_str()))
        .map(|k| format!("'{}'", k.chars().take(40).collect::<String>()))
        .collect();
    if !unknown.is_empty() {
        unknown.sort();
        return Err(ModelError::Strategy {
            status: 400,
            code: "unknown_parameter",
            message: format!(
                "Unknown parameter{}: {}. Supported: {}.",
                if unknown.len() == 1 { "" } else { "s" },
                unknown.join(", "),
                KNOWN.join(", ")
            ),
            param: None,
            retry_after: None,
        });
    }
    let (since, until) = (seconds(&call, "since")?, seconds(&call, "until")?);
    let caller = &call.caller;
    let arenas = arenas(&call);
    // Only the arenas this key may use: others do not exist for it.
    let mut routes: Vec<&str> = arenas
        .iter()
        .map(|(r, _)| *r)
        .filter(|r| caller.may_use(r))
        .collect();
    routes.sort_unstable();
    let route = match call.query.get("route") {
        Some(r) => r.clone(),
        None if routes.len() == 1 => routes[0].to_owned(),
        None => {
            return Err(ModelError::BadRequest {
                message: format!(
                    "Name the arena route: ?route=… (arena routes: {}), or ?route=* for all of them.",
                    routes.join(", ")
                ),
                param: Some("route"),
            });
        }
    };
    let pooled: Vec<&str> = if route == ALL {
        routes.clone()
    } else if arenas.iter().any(|(r, _)| *r == route) && caller.may_use(&route) {
        vec![route.as_str()]
    } else {
        return Err(ModelError::Strategy {
            status: 404,
            code: "model_not_found",
            message: format!("The model `{route}` does not exist or you do not have access to it."),
            param: Some("model"),
            retry_after: None,
        });
    };
    let mut contestants: Vec<String> = Vec::new();
    let mut votes = Vec::new();
    for r in &pooled {
        if let Some((_, spec)) = arenas.iter().find(|(name, _)| name == r) {
            for c in &spec.contestants {
                if !contestants.contains(c) {
                    contestants.push(c.clone());
                }
            }
        }
        let got = call
            .records
            .arenas
            .votes(r)
            .await
            .map_err(|e| stored("the votes could not be read", &e))?;
        votes.extend(
            got.into_iter()
                .filter(|v| since.is_none_or(|s| v.at >= s) && until.is_none_or(|u| v.at < u)),
        );
    }
    let board = rank(&contestants, &votes);
    let comparisons: usize = votes.iter().map(|v| v.pairs().len()).sum();
    if call
        .query
        .get("format")
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
    let mut body = json!({
        "object": "arena.leaderboard",
        "route": route,
        "votes": votes.len(),
        "comparisons": comparisons,
        "since": since,
        "until": until,
        "method": "Bradley-Terry (MM; pairwise results of each vote; a tie or all bad is half a win; one virtual tie per pair), Elo scale; 95% CI from the Fisher information",
        "data": data,
    });
    if route == ALL {
        body["routes"] = json!(pooled);
    }
    Ok(Json(body).into_response())
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
