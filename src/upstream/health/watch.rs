//! A concrete model's calls and its upstream's [`Health`]: a call is
//! admitted (or refused as [`ModelError::Ejected`], with nothing sent)
//! before it paces or queues, and its outcome is recorded when it ends;
//! a stream's when it ends, so a stream cut counts. The request that
//! ejected or recovered the upstream carries the `upstream_ejected` or
//! `upstream_recovered` event.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use serde_json::{Map, Value};

use super::{Change, Health, Outcome, Ticket};
use crate::context::RequestCtx;
use crate::error::ModelError;
use crate::model::{Chunk, ChunkStream, ReplyBody};

/// Lets a call to `upstream` through, or refuses it at once.
pub fn admit(health: &Arc<Health>, upstream: &Arc<str>) -> Result<Ticket, ModelError> {
    health.admit().map_err(|retry_after| ModelError::Ejected {
        upstream: upstream.clone(),
        retry_after,
    })
}

/// Records how a call ended; a stream is recorded when it ends (a
/// trial's when its first chunk is in).
pub fn ended(
    ticket: Ticket,
    ctx: &Arc<RequestCtx>,
    upstream: &Arc<str>,
    result: Result<ReplyBody, ModelError>,
) -> Result<ReplyBody, ModelError> {
    match result {
        Ok(ReplyBody::Stream(s)) => Ok(ReplyBody::Stream(ChunkStream::new(Watched {
            inner: s,
            ticket: Some(ticket),
            ctx: ctx.clone(),
            upstream: upstream.clone(),
        }))),
        Ok(whole) => {
            report(ctx, upstream, ticket.end(Outcome::Success));
            Ok(whole)
        }
        Err(e) => {
            report(ctx, upstream, ticket.end(Outcome::of(&e)));
            Err(e)
        }
    }
}

/// A stream whose end (or error) is its call's outcome; dropped before
/// it ends, it says nothing (a trial is released).
struct Watched {
    inner: ChunkStream,
    ticket: Option<Ticket>,
    ctx: Arc<RequestCtx>,
    upstream: Arc<str>,
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
            report(&self.ctx, &self.upstream, t.end(o));
        }
        next
    }
}

/// The request's event for a change it made.
fn report(ctx: &RequestCtx, upstream: &str, change: Option<Change>) {
    let Some(change) = change else { return };
    if !ctx.events_enabled() {
        return;
    }
    let mut f = Map::new();
    f.insert("upstream".into(), Value::from(upstream));
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
