//! Stored Responses API answers (`store: true`): one `response` row per
//! answer, with the key that asked, the answer it continued
//! (`previous_response_id`), its own input items and the response object,
//! kept for `server.responses_retention` from when it was stored.
//!
//! The rows live behind [`ResponseRows`]: in the embedded SQLite store
//! ([`sqlite`], a file or, without `state_path`, memory) or, with
//! `[state]`, on the shared Redis ([`redis`]: one key per answer,
//! expiring with it), so every replica reads them.
//!
//! Every backend keeps the bounds (`server.responses_max_per_key`,
//! `…_max_bytes_per_key`, `…_max_bytes`, a [`ResponseBounds`]), counted
//! per key and in total as rows are written and deleted: before a row is
//! stored, its own key's oldest rows are evicted until it fits, never
//! another key's. A row that alone exceeds its key's bytes, or that would
//! not fit the total once its key had nothing left, is not stored
//! (logged). The sizes are the bytes of the stored text ([`Row::size`]).
//!
//! [`Responses::put`] is called where an answer ends, which may be inside
//! a stream's poll, so it never blocks: the row goes into a pending map at
//! once and one writer task drains that map into the rows in
//! batches. Reads look in the pending map before the rows, so an answer can
//! be read back the moment it was put. At most [`MAX_PENDING`] rows, and
//! [`MAX_PENDING_BYTES`] of them, wait for the writer; beyond that an
//! answer is not stored (logged), so a stalled disk cannot grow memory
//! without bound. A row the writer cannot write is logged and dropped.
//! Lines about answers not stored are logged at most once per 10 s, with
//! how many were held back.
//!
//! A response is another key's, expired, deleted or unknown alike: `None`.
//! Expired rows are deleted when the SQLite store opens, and by a sweep
//! that runs every [`SWEEP_EVERY`] seconds (at most [`SWEEP_ROUNDS`] ×
//! [`SWEEP_ROWS`] rows a time) for as long as the service lives; Redis
//! also expires an answer's key itself. The writer and `delete`
//! hold one lock while they look at the pending map and write, so a
//! deleted answer is never written after.
//! This module is the service; `rows` holds the map, writer and reads.

use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::Serialize;
use serde_json::Value;

use super::StoreError;
use crate::clock::Clock;
pub use crate::config::ResponseBounds;
use crate::log_line::Throttle;
use rows::{Inner, Pending, not_stored};
pub use rows::{ResponseRows, Row, Written};

/// Rows that may wait for the writer.
pub const MAX_PENDING: usize = 10_000;
/// Bytes ([`Row::size`]) the rows waiting for the writer may hold.
pub const MAX_PENDING_BYTES: u64 = 256 << 20;
/// Longest response id stored or looked up.
pub const MAX_ID: usize = 128;
/// Responses one conversation may chain (`previous_response_id` hops).
pub const MAX_HOPS: usize = 1000;
/// The stored JSON (inputs and answers) one conversation may hold.
pub const MAX_CONVERSATION_BYTES: usize = 32 << 20;
/// Expired rows one sweep deletes at most.
pub const SWEEP_ROWS: usize = 1000;
/// Sweeps one period runs at most (while each finds a full [`SWEEP_ROWS`]).
pub const SWEEP_ROUNDS: usize = 100;
/// Seconds between sweeps.
pub const SWEEP_EVERY: u64 = 60;
/// Lines about answers not stored: at most one per 10 s.
static NOT_STORED_LOG: Throttle = Throttle::new(Duration::from_secs(10));
/// Rows the writer writes in one transaction.
const BATCH: usize = 256;

/// One stored answer.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResponse {
    /// `resp_…`.
    pub id: String,
    /// The name of the key that asked (`anonymous` without keys).
    pub key: String,
    /// The answer this one continued.
    pub previous: Option<String>,
    /// This request's own input items, each with an `id` (one is given to
    /// an item without).
    pub input: Vec<Value>,
    /// The response object as the client got it.
    pub response: Value,
}

/// The order of a page of input items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Order {
    Asc,
    /// Newest first (OpenAI's default).
    #[default]
    Desc,
}

/// One page of a response's input items, in OpenAI's list shape.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ItemPage {
    pub object: &'static str,
    pub data: Vec<Value>,
    pub first_id: Option<String>,
    pub last_id: Option<String>,
    pub has_more: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum ConversationError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error("the conversation chains more than {MAX_HOPS} responses")]
    TooManyHops,
    #[error("the conversation holds more than {} MiB of stored items", MAX_CONVERSATION_BYTES >> 20)]
    TooLarge,
}

#[derive(Debug, thiserror::Error)]
pub enum PageError {
    #[error(transparent)]
    Store(#[from] StoreError),
    /// `after` names no input item of the response.
    #[error("no input item `{0}` in this response")]
    UnknownAfter(String),
}

/// The stored answers of the Responses API (see the module docs). Cheap
/// to derive with another retention and bounds: the store and pending
/// rows are shared.
pub struct Responses {
    inner: Arc<Inner>,
    retention: Duration,
    bounds: ResponseBounds,
}

impl Responses {
    /// Answers kept in `rows` within `bounds`, dated by `clock`. On a
    /// tokio runtime, starts the retention sweep (every [`SWEEP_EVERY`]
    /// seconds, until the last clone of the service is dropped).
    pub fn new(
        rows: Arc<dyn ResponseRows>,
        clock: Clock,
        retention: Duration,
        bounds: ResponseBounds,
    ) -> Self {
        let inner = Arc::new(Inner {
            rows,
            clock,
            pending: Mutex::new(Pending {
                bounds,
                ..Pending::default()
            }),
            io: tokio::sync::Mutex::new(()),
        });
        let weak = Arc::downgrade(&inner);
        if let Ok(rt) = tokio::runtime::Handle::try_current() {
            rt.spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_secs(SWEEP_EVERY));
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let Some(inner) = weak.upgrade() else { return };
                    let now = inner.clock.unix_secs_i64();
                    inner.sweep(now, SWEEP_ROUNDS).await;
                }
            });
        }
        Responses {
            inner,
            retention,
            bounds,
        }
    }

    /// The same stored answers, kept for `retention` and within `bounds`
    /// from now on (a reload's).
    pub fn configured(&self, retention: Duration, bounds: ResponseBounds) -> Self {
        Responses {
            inner: self.inner.clone(),
            retention,
            bounds,
        }
    }

    /// How long an answer put now is kept (zero: none is).
    pub fn retention(&self) -> Duration {
        self.retention
    }

    /// Stores `r` (see the module docs): never blocks, never fails; what
    /// cannot be stored is logged.
    pub fn put(&self, mut r: StoredResponse) {
        if self.retention.is_zero() {
            return;
        }
        if !valid_id(&r.id) {
            not_stored(
                &r.id.chars().take(MAX_ID).collect::<String>(),
                "its id is not one a client could ask for",
            );
            return;
        }
        let now = self.inner.clock.unix_secs_i64();
        let keep = i64::try_from(self.retention.as_secs().max(1)).unwrap_or(i64::MAX);
        for item in &mut r.input {
            give_id(item);
        }
        let (input, output) = match (
            serde_json::to_string(&r.input),
            serde_json::to_string(&r.response),
        ) {
            (Ok(i), Ok(o)) => (i, o),
            (Err(e), _) | (_, Err(e)) => {
                tracing::error!(response = %r.id, "the response could not be stored: {e}");
                return;
            }
        };
        let row = Arc::new(Row {
            key: r.key,
            previous: r.previous,
            created: now,
            expires: now.saturating_add(keep),
            input,
            output,
        });
        let size = row.size(&r.id);
        if size > self.bounds.max_bytes_per_key {
            not_stored(
                &r.id,
                &format!(
                    "its {size} bytes exceed server.responses_max_bytes_per_key ({})",
                    self.bounds.max_bytes_per_key
                ),
            );
            return;
        }
        let start = {
            let mut p = self.inner.pending.lock();
            if p.rows.len() >= MAX_PENDING || p.bytes.saturating_add(size) > MAX_PENDING_BYTES {
                drop(p);
                not_stored(
                    &r.id,
                    "too many responses (or bytes of them) already wait for the state store",
                );
                return;
            }
            p.bounds = self.bounds;
            p.insert(r.id, row);
            !std::mem::replace(&mut p.writing, true)
        };
        if start {
            let inner = self.inner.clone();
            match tokio::runtime::Handle::try_current() {
                Ok(rt) => drop(rt.spawn(async move { inner.drain().await })),
                Err(_) => {
                    tracing::error!("responses cannot be stored outside the runtime");
                    self.inner.pending.lock().writing = false;
                }
            }
        }
    }

    /// Waits (at most `within`) for the writer to write what is pending:
    /// at shutdown, so answers just put are not lost with the runtime.
    pub async fn flush(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.inner.pending.lock().writing && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    /// The answer `id` if the key named `key` stored it and it has not
    /// expired or been deleted.
    pub async fn get(&self, id: &str, key: &str) -> Result<Option<StoredResponse>, StoreError> {
        let now = self.inner.clock.unix_secs_i64();
        match self.inner.row(id, key, now).await? {
            Some(row) => self.inner.decode(&row, id).map(Some),
            None => Ok(None),
        }
    }

    /// Deletes the answer `id` of the key named `key`; whether there was
    /// one (an expired one is deleted but was not there).
    pub async fn delete(&self, id: &str, key: &str) -> Result<bool, StoreError> {
        let now = self.inner.clock.unix_secs_i64();
        let _io = self.inner.io.lock().await;
        let pending = {
            let mut p = self.inner.pending.lock();
            match p.rows.get(id) {
                Some(row) if row.key == key => p.remove(id).map(|r| r.expires > now),
                _ => None,
            }
        };
        let stored = self.inner.rows.delete(id, key).await?;
        Ok(pending.unwrap_or(false) || stored.is_some_and(|expires| expires > now))
    }

    /// The items of the stored conversation that ends with `id`, oldest
    /// first: for each answer on its `previous` chain, its input items and
    /// then its `output` items. `None` when `id` itself is not there; a
    /// link further back that is gone (deleted, expired) starts the
    /// conversation after it.
    pub async fn conversation(
        &self,
        id: &str,
        key: &str,
    ) -> Result<Option<Vec<Value>>, ConversationError> {
        let now = self.inner.clock.unix_secs_i64();
        let Some(chain) = self.inner.chain(id, key, now).await? else {
            return Ok(None);
        };
        let mut items = Vec::new();
        for (id, row) in chain.iter().rev() {
            let r = self.inner.decode(row, id)?;
            items.extend(r.input);
            if let Value::Object(mut o) = r.response
                && let Some(Value::Array(out)) = o.remove("output")
            {
                items.extend(out);
            }
        }
        Ok(Some(items))
    }

    /// A page of answer `id`'s own input items: `limit` (1 to 100) of
    /// them in `order`, starting after the item `after`.
    pub async fn input_items(
        &self,
        id: &str,
        key: &str,
        after: Option<&str>,
        limit: usize,
        order: Order,
    ) -> Result<Option<ItemPage>, PageError> {
        let Some(r) = self.get(id, key).await? else {
            return Ok(None);
        };
        let mut items = r.input;
        if order == Order::Desc {
            items.reverse();
        }
        let start = match after {
            None => 0,
            Some(a) => {
                items
                    .iter()
                    .position(|i| item_id(i) == Some(a))
                    .ok_or_else(|| PageError::UnknownAfter(a.to_owned()))?
                    + 1
            }
        };
        let limit = limit.clamp(1, 100);
        let has_more = items.len() > start.saturating_add(limit);
        let data: Vec<Value> = items.into_iter().skip(start).take(limit).collect();
        let id_of = |v: Option<&Value>| v.and_then(item_id).map(str::to_owned);
        Ok(Some(ItemPage {
            object: "list",
            first_id: id_of(data.first()),
            last_id: id_of(data.last()),
            has_more,
            data,
        }))
    }

    /// Deletes the rows expired now (what the periodic sweep does): how
    /// many.
    pub async fn sweep(&self) -> usize {
        let now = self.inner.clock.unix_secs_i64();
        self.inner.sweep(now, SWEEP_ROUNDS).await
    }
}

/// Whether `id` is one a response may have and be looked up by: 1 to
/// [`MAX_ID`] ASCII letters, digits, `_` and `-`.
pub fn valid_id(id: &str) -> bool {
    !id.is_empty()
        && id.len() <= MAX_ID
        && id
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-')
}

/// An item's `id`, if it has one.
fn item_id(item: &Value) -> Option<&str> {
    item.get("id").and_then(Value::as_str)
}

/// Gives an input item without an `id` one, prefixed as OpenAI's are.
fn give_id(item: &mut Value) {
    let Some(obj) = item.as_object_mut() else {
        return;
    };
    if obj.get("id").is_some_and(Value::is_string) {
        return;
    }
    let prefix = match obj.get("type").and_then(Value::as_str) {
        Some("function_call") => "fc",
        Some("function_call_output") => "fco",
        Some("reasoning") => "rs",
        _ => "msg",
    };
    let id = format!("{prefix}_{}", uuid::Uuid::new_v4().simple());
    obj.insert("id".into(), Value::from(id));
}

pub mod redis;
mod rows;
pub mod sqlite;
#[cfg(test)]
mod tests;
