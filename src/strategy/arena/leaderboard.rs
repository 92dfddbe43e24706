//! `GET /v1/arena/leaderboard?route=NAME[&format=markdown]`: a route's
//! contestants ranked from every stored vote ([`super::board`]), as JSON
//! or a Markdown table; only the arenas the caller's key may use exist
//! for it.

use axum::Json;
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::board::{Standing, leaderboard as rank};
use super::votes::{arenas, stored};
use crate::error::ModelError;
use crate::graph::endpoint::EndpointCall;

pub(super) async fn answer(call: EndpointCall) -> Result<Response, ModelError> {
    let caller = &call.caller;
    let arenas = arenas(&call);
    // Only the arenas this key may use: others do not exist for it.
    let routes: Vec<&str> = arenas
        .iter()
        .map(|(r, _)| *r)
        .filter(|r| caller.may_use(r))
        .collect();
    let route = match call.query.get("route") {
        Some(r) => r.clone(),
        None if routes.len() == 1 => routes[0].to_owned(),
        None => {
            return Err(ModelError::BadRequest {
                message: format!(
                    "Name the arena route: ?route=… (arena routes: {}).",
                    routes.join(", ")
                ),
                param: Some("route"),
            });
        }
    };
    let Some((_, spec)) = arenas
        .iter()
        .find(|(r, _)| *r == route)
        .filter(|_| caller.may_use(&route))
    else {
        return Err(ModelError::Strategy {
            status: 404,
            code: "model_not_found",
            message: format!("The model `{route}` does not exist or you do not have access to it."),
            param: Some("model"),
            retry_after: None,
        });
    };
    let votes = call
        .records
        .arenas
        .votes(&route)
        .await
        .map_err(|e| stored("the votes could not be read", &e))?;
    let board = rank(&spec.contestants, &votes);
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
