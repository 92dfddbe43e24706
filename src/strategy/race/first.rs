//! `mode = "first"`: a hedge for latency. The first candidate whose answer
//! is viable (and passes `format` when the rubric weighs it) wins; streamed,
//! the first to produce a real first delta (content or a tool call, not the
//! role-only first event) is streamed live. The others are cancelled at
//! that moment. With `hedge_delay`, candidates after the first start only
//! when no candidate has won by then (or every earlier one has failed), so
//! a hedge costs extra tokens only when the first candidate is slow.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::StreamExt;
use futures::stream::FuturesUnordered;
use serde_json::{Map, json};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::{Race, rubric};
use crate::error::{AttemptSummary, ModelError};
use crate::labels::{Role, Verdict};
use crate::model::{Call, Reply, ReplyBody};
use crate::strategy::event;
use crate::stream;
use crate::wire::ChatRequest;

/// Why a candidate did not win.
enum Lost {
    Failed(ModelError),
    /// It answered, but not with something usable (empty, wrong format).
    Unusable(&'static str),
}

pub async fn run(
    race: &Race,
    call: &Call,
    req: Arc<ChatRequest>,
    pool: usize,
) -> Result<Reply, ModelError> {
    let streamed = req.is_stream();
    let asked = if streamed {
        req.clone()
    } else {
        Race::whole(&req)
    };
    let started = Instant::now();
    let failed = Arc::new(AtomicUsize::new(0));
    let wake = Arc::new(Notify::new());
    let mut tallies = Vec::with_capacity(pool);
    let mut pending: FuturesUnordered<_> = (0..pool)
        .map(|i| {
            let (candidate, tally) = call.with_role(Role::Candidate).cancellable();
            tallies.push(tally);
            let (call, asked, failed, wake) =
                (candidate, asked.clone(), failed.clone(), wake.clone());
            async move {
                if i > 0
                    && let Some(delay) = race.hedge_delay
                {
                    hold(i, delay, &failed, &wake).await;
                }
                let result = attempt(race, i, call, asked, streamed).await;
                if result.is_err() {
                    failed.fetch_add(1, Ordering::AcqRel);
                    wake.notify_waiters();
                }
                (i, result)
            }
        })
        .collect();
    let mut lost = Vec::new();
    let mut winner = None;
    while let Some((i, result)) = pending.next().await {
        match result {
            Ok(reply) => {
                winner = Some((i, reply));
                break;
            }
            Err(why) => lost.push((i, why)),
        }
    }
    let still: Vec<usize> = (0..pool)
        .filter(|i| {
            winner.as_ref().is_none_or(|(w, _)| w != i) && !lost.iter().any(|(l, _)| l == i)
        })
        .collect();
    // Dropping the candidates still running aborts their upstream calls
    // (a candidate still held by hedge_delay never starts).
    drop(pending);
    let still: Vec<(usize, bool)> = still
        .into_iter()
        .map(|i| (i, tallies.get(i).is_none_or(|t| t.count() == 0)))
        .collect();
    record(race, call, (&winner, &lost, &still), pool, started);
    match winner {
        Some((_, mut reply)) => {
            reply.attempt.set_verdict(Verdict::Winner, None);
            reply.meta.add_header("x-conclave-race", "first");
            stream::with_request_usage(reply, call.ctx.clone())
        }
        None => Err(ModelError::exhausted(
            "race",
            "candidates",
            race.name.clone(),
            lost.iter()
                .map(|(i, why)| {
                    let name = &race.candidates[*i].name;
                    match why {
                        Lost::Failed(e) => AttemptSummary::failed(name, e),
                        Lost::Unusable(what) => AttemptSummary::rejected(name, "error", what),
                    }
                })
                .collect(),
        )),
    }
}

/// Holds candidate `i` until `delay` has passed, or until every candidate
/// before it has failed.
async fn hold(i: usize, delay: std::time::Duration, failed: &AtomicUsize, wake: &Notify) {
    let until = Instant::now() + delay;
    loop {
        let woken = wake.notified();
        if failed.load(Ordering::Acquire) >= i {
            return;
        }
        tokio::select! {
            () = tokio::time::sleep_until(until) => return,
            () = woken => {}
        }
    }
}

/// One candidate's answer, once it is known to be usable: a whole answer
/// that is viable (and well-formed when the rubric weighs `format`), or a
/// stream past its first real delta.
async fn attempt(
    race: &Race,
    i: usize,
    call: Call,
    req: Arc<ChatRequest>,
    streamed: bool,
) -> Result<Reply, Lost> {
    let c = &race.candidates[i];
    let mut reply = c
        .model
        .chat(call, req.clone())
        .await
        .map_err(Lost::Failed)?;
    match reply.body {
        ReplyBody::Stream(s) if streamed => match stream::commit_at_first_real(s).await {
            Ok(Some(s)) => {
                reply.body = ReplyBody::Stream(s);
                Ok(reply)
            }
            Ok(None) => {
                reply
                    .attempt
                    .set_verdict(Verdict::Error, Some("an empty answer".into()));
                Err(Lost::Unusable("an empty answer"))
            }
            Err(e) => Err(Lost::Failed(e)),
        },
        body => {
            reply.body = body;
            let (reply, out) = reply.buffer().await.map_err(Lost::Failed)?;
            let problem = if out.text.trim().is_empty() && out.tool_calls.is_empty() {
                Some("an empty answer")
            } else if race.rubric.uses("format") && rubric::format(&req, &out) < 1.0 {
                Some("not in the format the request asked for")
            } else {
                None
            };
            match problem {
                Some(what) => {
                    reply.attempt.set_verdict(Verdict::Error, Some(what.into()));
                    Err(Lost::Unusable(what))
                }
                None => Ok(reply),
            }
        }
    }
}

/// The winner, the losers, and the candidates cancelled (with whether
/// their servers stopped generating).
type Outcome<'a> = (
    &'a Option<(usize, Reply)>,
    &'a [(usize, Lost)],
    &'a [(usize, bool)],
);

/// `race_candidate` per candidate and `race_finished`.
fn record(race: &Race, call: &Call, (winner, lost, still): Outcome, pool: usize, started: Instant) {
    let name = |i: usize| &*race.candidates[i].name;
    let row = |i: usize, verdict: &str, error: Option<String>, stopped: Option<bool>| {
        let mut f = Map::new();
        f.insert("model".into(), json!(name(i)));
        f.insert("verdict".into(), json!(verdict));
        if let Some(e) = error {
            let key = if verdict == "skipped" {
                "reason"
            } else {
                "error"
            };
            f.insert(key.into(), json!(e));
        }
        if let Some(stopped) = stopped {
            f.insert("generation_stopped".into(), json!(stopped));
        }
        event(&call.ctx, "race_candidate", f);
    };
    if let Some((i, _)) = winner {
        row(*i, "winner", None, None);
    }
    for (i, why) in lost {
        match why {
            Lost::Failed(e) => match e.skipped() {
                // Never called: the request does not fit its window.
                Some(reason) => row(*i, "skipped", Some(reason), None),
                None => row(*i, "error", Some(e.to_string()), None),
            },
            Lost::Unusable(what) => row(*i, "error", Some((*what).to_owned()), None),
        }
    }
    for (i, stopped) in still {
        row(*i, "cancelled", None, Some(*stopped));
    }
    let mut f = Map::new();
    f.insert("mode".into(), json!("first"));
    f.insert(
        "winner".into(),
        json!(winner.as_ref().map(|(i, _)| name(*i))),
    );
    f.insert(
        "candidates".into(),
        json!((0..pool).map(name).collect::<Vec<_>>()),
    );
    f.insert(
        "cancelled".into(),
        json!(still.iter().map(|(i, _)| name(*i)).collect::<Vec<_>>()),
    );
    f.insert(
        "elapsed_ms".into(),
        json!(started.elapsed().as_secs_f64() * 1000.0),
    );
    event(&call.ctx, "race_finished", f);
}
