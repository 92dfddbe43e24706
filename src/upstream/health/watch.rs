//! A concrete model's calls and the [`Health`] of its model and of its
//! upstream: a call is admitted by both (or refused as
//! [`ModelError::Ejected`], with nothing sent) before it paces or queues,
//! and its outcome is recorded when it ends: the transport's for the
//! upstream ([`Outcome::of_transport`], known once an answer begins), the
//! answer's for the model ([`Outcome::of`]; a stream's when it ends, so a
//! stream cut counts). A call's retries count once: a try's failure
//! counts against a member only when no earlier try of the call's did
//! ([`Counted`]). The request that ejected or recovered a member carries
//! the `upstream_ejected` or `upstream_recovered` event.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use serde_json::{Map, Value};

use super::{Change, Health, Outcome, Tenant, Ticket, UpstreamHealth};
use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::model::{Chunk, ChunkStream, ReplyBody};

/// One try's tickets: its upstream's (the transport) and its model's
/// (the answer).
pub struct Tickets {
    whole: Ticket,
    model: Ticket,
}

/// The members a call's tries have counted a failure against so far: a
/// request's retries count once.
#[derive(Debug, Default, Clone, Copy)]
pub struct Counted {
    whole: bool,
    model: bool,
}

/// Lets a call of `who` to `model` on `upstream` through (both its
/// upstream and its model admit it), or refuses it at once.
pub fn admit(
    upstream: &UpstreamHealth,
    model: &Arc<Health>,
    who: &Tenant,
    name: &Arc<str>,
) -> Result<Tickets, ModelError> {
    let refused = |retry_after| ModelError::Ejected {
        upstream: name.clone(),
        retry_after,
    };
    // The upstream first: a model's trial is not spent on a call its
    // upstream refuses (a ticket dropped unended releases a trial). A
    // transport failure says nothing about whose request met it (the
    // server never read it): it counts as everyone's.
    let whole = upstream.whole.admit(&Tenant::All).map_err(refused)?;
    let model = model.admit(who).map_err(refused)?;
    Ok(Tickets { whole, model })
}

/// Records how a call ended (`counted`: what its earlier tries counted);
/// a stream is recorded when it ends (a trial's when its first chunk is
/// in).
pub fn ended(
    tickets: Tickets,
    ctx: &Arc<RequestCtx>,
    counted: &mut Counted,
    result: Result<ReplyBody, ModelError>,
) -> Result<ReplyBody, ModelError> {
    let Tickets { whole, model } = tickets;
    match result {
        Ok(ReplyBody::Stream(s)) => {
            // An answer began: the transport works.
            settle(ctx, whole, Outcome::Success, &mut counted.whole);
            Ok(ReplyBody::Stream(ChunkStream::new(Watched {
                inner: s,
                ticket: Some(model),
                counted: *counted,
                ctx: ctx.clone(),
            })))
        }
        Ok(whole_body) => {
            settle(ctx, whole, Outcome::Success, &mut counted.whole);
            settle(ctx, model, Outcome::Success, &mut counted.model);
            Ok(whole_body)
        }
        Err(e) => {
            settle(ctx, whole, Outcome::of_transport(&e), &mut counted.whole);
            settle(ctx, model, Outcome::of(&e), &mut counted.model);
            Err(e)
        }
    }
}

/// Ends `ticket` with `outcome`, a failure only when the call's earlier
/// tries counted none against its member (`counted`), and reports the
/// change it made.
fn settle(ctx: &RequestCtx, ticket: Ticket, outcome: Outcome, counted: &mut bool) {
    let outcome = match outcome {
        Outcome::Failure(_) if *counted => Outcome::Neutral,
        Outcome::Failure(_) => {
            *counted = true;
            outcome
        }
        o => o,
    };
    let health = ticket.health();
    report(ctx, &health, ticket.end(outcome));
}

/// A stream whose end (or error) is its call's outcome for its model;
/// dropped before it ends, it says nothing (a trial is released).
struct Watched {
    inner: ChunkStream,
    ticket: Option<Ticket>,
    counted: Counted,
    ctx: Arc<RequestCtx>,
}

impl Stream for Watched {
    type Item = Result<Chunk, ModelError>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let next = Pin::new(&mut self.inner).poll_next(cx);
        let outcome = match &next {
            Poll::Ready(None) => Some(Outcome::Success),
            Poll::Ready(Some(Err(e))) => Some(Outcome::of(e)),
            // A trial is decided by its first chunk: the upstream answers,
            // and other calls need not wait for the whole stream (nor for
            // a client that stopped reading it).
            Poll::Ready(Some(Ok(_))) if self.ticket.as_ref().is_some_and(|t| t.is_trial()) => {
                Some(Outcome::Success)
            }
            _ => None,
        };
        if let Some(o) = outcome
            && let Some(t) = self.ticket.take()
        {
            let mut counted = self.counted.model;
            settle(&self.ctx, t, o, &mut counted);
        }
        next
    }
}

/// The request's event for a change it made to `health`.
fn report(ctx: &RequestCtx, health: &Health, change: Option<Change>) {
    let Some(change) = change else { return };
    if !ctx.events_enabled() {
        return;
    }
    let mut f = Map::new();
    f.insert("upstream".into(), Value::from(health.upstream()));
    f.insert("model".into(), Value::from(health.model()));
    let kind = match change {
        Change::Ejected {
            reason,
            cooldown,
            failures,
        } => {
            f.insert("reason".into(), Value::from(reason));
            f.insert("cooldown_ms".into(), Value::from(millis(cooldown)));
            f.insert("failures".into(), Value::from(failures));
            "upstream_ejected"
        }
        Change::Recovered { after } => {
            f.insert("after_ms".into(), Value::from(millis(after)));
            "upstream_recovered"
        }
    };
    ctx.emit(kind, f);
}

fn millis(d: std::time::Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}
