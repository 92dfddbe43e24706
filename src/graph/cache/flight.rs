//! Identical requests in flight at once make one call. The first
//! (the leader) spawns the inner call as a task of its own, so neither
//! the leader's client leaving nor any waiter's stops it while anyone is
//! still waiting; it is dropped (and so cancelled upstream) only when
//! nobody is. A stream is teed: its chunks go on to the leader as they
//! come while the whole answer is put together (within `MAX_RESPONSE`),
//! and at its clean end the answer is stored and handed to the waiters.
//! A waiter whose leader failed joins again: one of them leads the next
//! call, so a key has one call in flight at a time.

use std::collections::HashMap;
use std::sync::Arc;

use futures::StreamExt;
use parking_lot::Mutex;
use tokio::sync::{mpsc, oneshot, watch};

use super::Storing;
use crate::error::ModelError;
use crate::model::{Call, ChatModel, ChunkStream, Completion, Meta, Reply, ReplyBody};
use crate::store::cache::Entry;
use crate::wire::assemble::Assembler;
use crate::wire::{ChatRequest, MAX_RESPONSE};

/// A call's end as its waiters see it: the stored entry, or nothing to
/// share (an error, a cut stream, an answer not to store).
pub type Outcome = Option<Arc<Entry>>;

/// The calls in flight, by cache key.
#[derive(Default)]
pub struct Flights {
    calls: Mutex<HashMap<String, Lead>>,
}

/// Chunks buffered between the call's task and the leader's client.
const TEE_DEPTH: usize = 64;

/// Header the mid-stream failover sets: such a stream is never stored.
const FAILED_OVER: &str = "x-conclave-midstream-failover";

/// What tells a call's waiters its outcome.
pub type Lead = Arc<watch::Sender<Option<Outcome>>>;

pub enum Joined {
    /// This request makes the call; the sender tells the waiters.
    Lead(Lead),
    /// Another request is making it: wait for its outcome.
    Wait(watch::Receiver<Option<Outcome>>),
}

impl Flights {
    /// Joins the call for `key`, or becomes its leader.
    pub fn join(&self, key: &str) -> Joined {
        let mut calls = self.calls.lock();
        // Still running, or just answered and being stored: wait for (or
        // take) its answer. One that failed is led again.
        if let Some(tx) = calls.get(key)
            && !matches!(*tx.borrow(), Some(None))
        {
            return Joined::Wait(tx.subscribe());
        }
        let tx = Arc::new(watch::channel(None).0);
        calls.insert(key.to_owned(), tx.clone());
        Joined::Lead(tx)
    }

    fn done(&self, key: &str, tx: &Lead) {
        let mut calls = self.calls.lock();
        if calls.get(key).is_some_and(|t| Arc::ptr_eq(t, tx)) {
            calls.remove(key);
        }
    }

    /// Calls in flight now.
    pub fn len(&self) -> usize {
        self.calls.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Waits for the leader's outcome, by `call`'s deadline; `None`: nothing
/// to share (the waiter makes its own call).
pub async fn wait(mut rx: watch::Receiver<Option<Outcome>>, call: &Call) -> Outcome {
    let got = tokio::time::timeout_at(call.by(), rx.wait_for(Option::is_some)).await;
    match got {
        Ok(Ok(o)) => o.clone().flatten(),
        _ => None,
    }
}

/// Makes the call for `storing` in a task of its own, its waiters told
/// through `tx` (none for a request that skipped the lookup), and answers
/// the leader.
pub async fn lead(
    inner: Arc<dyn ChatModel>,
    call: Call,
    req: Arc<ChatRequest>,
    storing: Storing,
    tx: Option<Lead>,
) -> Result<Reply, ModelError> {
    let (reply_tx, reply_rx) = oneshot::channel();
    tokio::spawn(drive(inner, call, req, storing, tx, reply_tx));
    match reply_rx.await {
        Ok(r) => r,
        Err(_) => Err(ModelError::StreamCut {
            upstream: "conclave".into(),
            detail: "the cached call ended without an answer".into(),
        }),
    }
}

/// Resolves once nobody wants the call's answer any more.
async fn abandoned(reply_tx: &mut oneshot::Sender<Result<Reply, ModelError>>, tx: Option<&Lead>) {
    reply_tx.closed().await;
    if let Some(tx) = tx {
        tx.closed().await;
    }
}

async fn drive(
    inner: Arc<dyn ChatModel>,
    call: Call,
    req: Arc<ChatRequest>,
    storing: Storing,
    tx: Option<Lead>,
    mut reply_tx: oneshot::Sender<Result<Reply, ModelError>>,
) {
    // Should this task stop before it settles (a member panicking), its
    // waiters are told there is nothing to share and the flight ends, so
    // no key is left waiting on a call that is gone.
    let mut unsettled = Unsettled {
        tx: tx.as_ref(),
        storing: &storing,
        armed: true,
    };
    let before = call.ctx.totals();
    let result = {
        let answer = inner.chat(call.clone(), req);
        tokio::select! {
            r = answer => Some(r),
            () = abandoned(&mut reply_tx, tx.as_ref()) => None,
        }
    };
    let outcome = match result {
        None => None,
        Some(Err(e)) => {
            let _ = reply_tx.send(Err(e));
            None
        }
        Some(Ok(reply)) if !storable(&reply.meta) => {
            let _ = reply_tx.send(Ok(reply));
            None
        }
        Some(Ok(reply)) => match reply.body {
            ReplyBody::Whole(c) => {
                let body = c.body.clone();
                let attempt = reply.attempt.clone();
                let _ = reply_tx.send(Ok(Reply {
                    body: ReplyBody::Whole(c),
                    ..reply
                }));
                storing.entry(&call, &attempt, before, body).map(Arc::new)
            }
            ReplyBody::Stream(s) => {
                let (chunks_tx, chunks_rx) = mpsc::channel(TEE_DEPTH);
                let attempt = reply.attempt.clone();
                let _ = reply_tx.send(Ok(Reply {
                    body: ReplyBody::Stream(receiver_stream(chunks_rx)),
                    ..reply
                }));
                match tee(s, chunks_tx, tx.as_ref()).await {
                    Some(c)
                        if !call
                            .ctx
                            .late_headers()
                            .iter()
                            .any(|(n, _)| *n == FAILED_OVER) =>
                    {
                        storing.entry(&call, &attempt, before, c.body).map(Arc::new)
                    }
                    _ => None,
                }
            }
        },
    };
    unsettled.armed = false;
    if let Some(tx) = &tx {
        tx.send_replace(Some(outcome.clone()));
    }
    if let Some(entry) = outcome {
        storing.put(&call, entry).await;
    }
    // Only now: a request arriving while the answer was being stored
    // took it from the flight rather than calling again.
    if let Some(tx) = &tx {
        storing.cache.flights.done(&storing.key, tx);
    }
}

/// Answers no later request may get: an arena's (a blind comparison
/// wants fresh answers, and each has its own vote), wherever the arena
/// sits in the route, and a chain's best try after every tier was
/// rejected (`x-conclave-exhausted`).
const NOT_STORED: [&str; 3] = [
    "x-conclave-arena-id",
    "x-conclave-arena",
    "x-conclave-exhausted",
];

fn storable(meta: &Meta) -> bool {
    !meta
        .headers
        .iter()
        .any(|(name, _)| NOT_STORED.contains(&name.as_str()))
}

/// See `drive`: settles a flight its task did not.
struct Unsettled<'a> {
    tx: Option<&'a Lead>,
    storing: &'a Storing,
    armed: bool,
}

impl Drop for Unsettled<'_> {
    fn drop(&mut self) {
        if let (true, Some(tx)) = (self.armed, self.tx) {
            tx.send_replace(Some(None));
            self.storing.cache.flights.done(&self.storing.key, tx);
        }
    }
}

/// Passes `s` on to the leader while putting the whole answer together;
/// the answer when the stream ended cleanly. Stops (dropping the
/// upstream stream) once neither the leader nor any waiter listens.
async fn tee(
    mut s: ChunkStream,
    out: mpsc::Sender<Result<crate::model::Chunk, ModelError>>,
    waiters: Option<&Lead>,
) -> Option<Completion> {
    let mut whole = Some(Assembler::default());
    let (mut bytes, mut usage) = (0usize, None);
    let mut leader = true;
    while let Some(chunk) = s.next().await {
        let chunk = match chunk {
            Ok(c) => c,
            Err(e) => {
                let _ = out.send(Err(e)).await;
                return None;
            }
        };
        bytes += chunk.data.len();
        if bytes > MAX_RESPONSE {
            whole = None;
        }
        if let crate::wire::UsageField::Present(u) = chunk.usage {
            usage = Some(u);
        }
        if let Some(w) = whole.as_mut()
            && !chunk.loading
            && w.add(&chunk.data).is_err()
        {
            whole = None;
        }
        if leader && out.send(Ok(chunk)).await.is_err() {
            leader = false;
        }
        let waited = waiters.is_some_and(|w| w.receiver_count() > 0);
        if !leader && (!waited || whole.is_none()) {
            return None;
        }
    }
    let body = serde_json::to_vec(&whole?.finish()).ok()?;
    Some(Completion {
        body: body.into(),
        usage,
    })
}

fn receiver_stream(rx: mpsc::Receiver<Result<crate::model::Chunk, ModelError>>) -> ChunkStream {
    ChunkStream::new(futures::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|c| (c, rx))
    }))
}
