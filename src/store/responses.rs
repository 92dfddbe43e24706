//! Stored Responses API answers (`store: true`): one `response` row per
//! answer, with the key that asked, the answer it continued
//! (`previous_response_id`), its own input items and the response object,
//! kept for `server.responses_retention` from when it was stored.
//!
//! The rows live behind [`ResponseRows`]: in the embedded SQLite store
//! ([`sqlite`]) or, with `[state]`, on the shared Redis ([`redis`]: one
//! key per answer, expiring with it), so every replica reads them.
//!
//! [`Responses::put`] is called where an answer ends, which may be inside
//! a stream's poll, so it never blocks: the row goes into a pending map at
//! once and one writer task drains that map into the rows in
//! batches. Reads look in the pending map before the rows, so an answer can
//! be read back the moment it was put. At most [`MAX_PENDING`] rows wait
//! for the writer; beyond that an answer is not stored (logged), so a
//! stalled disk cannot grow memory without bound. A row the writer cannot
//! write is logged and dropped.
//!
//! A response is another key's, expired, deleted or unknown alike: `None`.
//! In SQLite, expired rows are deleted when the store opens and then at
//! most [`SWEEP_ROWS`] at a time, at most once a minute, by whoever
//! touches the table; Redis expires them itself. The writer and `delete`
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
use rows::{Inner, Pending};
pub use rows::{ResponseRows, Row};

/// Rows that may wait for the writer.
pub const MAX_PENDING: usize = 10_000;
/// Responses one conversation may chain (`previous_response_id` hops).
pub const MAX_HOPS: usize = 1000;
/// The stored JSON (inputs and answers) one conversation may hold.
pub const MAX_CONVERSATION_BYTES: usize = 32 << 20;
/// Expired rows one sweep deletes at most.
pub const SWEEP_ROWS: usize = 1000;
/// Seconds between sweeps.
pub(crate) const SWEEP_EVERY: i64 = 60;
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
/// to derive with another retention: the store and pending rows are shared.
pub struct Responses {
    inner: Arc<Inner>,
    retention: Duration,
}

impl Responses {
    /// Answers kept in `rows`, dated by `clock`.
    pub fn new(rows: Arc<dyn ResponseRows>, clock: Clock, retention: Duration) -> Self {
        Responses {
            inner: Arc::new(Inner {
                rows,
                clock,
                pending: Mutex::new(Pending::default()),
                io: tokio::sync::Mutex::new(()),
            }),
            retention,
        }
    }

    /// The same stored answers, kept for `retention` from now on.
    pub fn with_retention(&self, retention: Duration) -> Self {
        Responses {
            inner: self.inner.clone(),
            retention,
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
        let start = {
            let mut p = self.inner.pending.lock();
            if p.rows.len() >= MAX_PENDING {
                drop(p);
                tracing::error!(
                    response = %r.id,
                    "the response was not stored: {MAX_PENDING} responses already wait for the state store"
                );
                return;
            }
            p.rows.insert(r.id.clone(), row);
            p.queue.push_back(r.id);
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
                Some(row) if row.key == key => p.rows.remove(id).map(|r| r.expires > now),
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
