//! Stored Responses API answers (`store: true`): one `response` row per
//! answer, with the key that asked, the answer it continued
//! (`previous_response_id`), its own input items and the response object,
//! kept for `server.responses_retention` from when it was stored.
//!
//! [`Responses::put`] is called where an answer ends, which may be inside
//! a stream's poll, so it never blocks: the row goes into a pending map at
//! once and one writer on the blocking pool drains that map into SQLite in
//! batches. Reads look in the pending map before SQLite, so an answer can
//! be read back the moment it was put. At most [`MAX_PENDING`] rows wait
//! for the writer; beyond that an answer is not stored (logged), so a
//! stalled disk cannot grow memory without bound. A row the writer cannot
//! write is logged and dropped.
//!
//! A response is another key's, expired, deleted or unknown alike: `None`.
//! Expired rows are deleted when the store opens and then at most
//! [`SWEEP_ROWS`] at a time, at most once a minute, by whoever touches the
//! table. The writer and `delete` hold the connection's lock while they
//! look at the pending map, so a deleted answer is never written after.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};
use serde::Serialize;
use serde_json::Value;

use super::{Store, StoreError};

/// Rows that may wait for the writer.
pub const MAX_PENDING: usize = 10_000;
/// Responses one conversation may chain (`previous_response_id` hops).
pub const MAX_HOPS: usize = 1000;
/// The stored JSON (inputs and answers) one conversation may hold.
pub const MAX_CONVERSATION_BYTES: usize = 32 << 20;
/// Expired rows one sweep deletes at most.
pub const SWEEP_ROWS: usize = 1000;
/// Seconds between sweeps.
const SWEEP_EVERY: i64 = 60;
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

/// A row as stored: its JSON already text.
#[derive(Debug)]
struct Row {
    key: String,
    previous: Option<String>,
    created: i64,
    expires: i64,
    input: String,
    output: String,
}

impl Row {
    fn live(&self, key: &str, now: i64) -> bool {
        self.key == key && self.expires > now
    }

    fn decode(&self, store: &Store, id: &str) -> Result<StoredResponse, StoreError> {
        let json = |e| StoreError::Json {
            path: store.path.display().to_string(),
            source: e,
        };
        Ok(StoredResponse {
            id: id.to_owned(),
            key: self.key.clone(),
            previous: self.previous.clone(),
            input: serde_json::from_str(&self.input).map_err(json)?,
            response: serde_json::from_str(&self.output).map_err(json)?,
        })
    }
}

#[derive(Default)]
struct Pending {
    rows: HashMap<String, Arc<Row>>,
    /// Ids in the order they were put; one no longer in `rows` is skipped.
    queue: VecDeque<String>,
    /// A writer is draining `queue`.
    writing: bool,
}

struct Inner {
    store: Arc<Store>,
    pending: Mutex<Pending>,
    /// Unix seconds of the last sweep of expired rows.
    swept: AtomicI64,
}

/// The stored answers of the Responses API (see the module docs). Cheap
/// to derive with another retention: the store and pending rows are shared.
pub struct Responses {
    inner: Arc<Inner>,
    retention: Duration,
}

impl Responses {
    pub fn new(store: Arc<Store>, retention: Duration) -> Self {
        Responses {
            inner: Arc::new(Inner {
                store,
                pending: Mutex::new(Pending::default()),
                swept: AtomicI64::new(i64::MIN),
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
        let now = self.inner.store.clock().unix_secs_i64();
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
                Ok(rt) => drop(rt.spawn_blocking(move || inner.drain(now))),
                Err(_) => inner.drain(now),
            }
        }
    }

    /// The answer `id` if the key named `key` stored it and it has not
    /// expired or been deleted.
    pub async fn get(&self, id: &str, key: &str) -> Result<Option<StoredResponse>, StoreError> {
        let now = self.inner.store.clock().unix_secs_i64();
        let found = self.inner.pending.lock().rows.get(id).cloned();
        if let Some(row) = found {
            return match row.live(key, now) {
                true => row.decode(&self.inner.store, id).map(Some),
                false => Ok(None),
            };
        }
        let (inner, id, key) = (self.inner.clone(), id.to_owned(), key.to_owned());
        blocking(move || {
            let conn = inner.store.conn.lock();
            inner.sweep(&conn, now);
            match inner.row(&conn, &id, &key, now)? {
                Some(row) => row.decode(&inner.store, &id).map(Some),
                None => Ok(None),
            }
        })
        .await
    }

    /// Deletes the answer `id` of the key named `key`; whether there was
    /// one (an expired one is deleted but was not there).
    pub async fn delete(&self, id: &str, key: &str) -> Result<bool, StoreError> {
        let now = self.inner.store.clock().unix_secs_i64();
        let (inner, id, key) = (self.inner.clone(), id.to_owned(), key.to_owned());
        blocking(move || {
            let conn = inner.store.conn.lock();
            let pending = {
                let mut p = inner.pending.lock();
                match p.rows.get(&id) {
                    Some(row) if row.key == key => p.rows.remove(&id).map(|r| r.expires > now),
                    _ => None,
                }
            };
            let stored: Option<i64> = conn
                .query_row(
                    "DELETE FROM response WHERE id = ?1 AND key = ?2 RETURNING expires",
                    params![id, key],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| inner.store.err(e))?;
            Ok(pending.unwrap_or(false) || stored.is_some_and(|expires| expires > now))
        })
        .await
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
        let now = self.inner.store.clock().unix_secs_i64();
        let (inner, id, key) = (self.inner.clone(), id.to_owned(), key.to_owned());
        blocking(move || {
            let Some(chain) = inner.chain(&id, &key, now)? else {
                return Ok(None);
            };
            let mut items = Vec::new();
            for (id, row) in chain.iter().rev() {
                let r = row.decode(&inner.store, id)?;
                items.extend(r.input);
                if let Value::Object(mut o) = r.response
                    && let Some(Value::Array(out)) = o.remove("output")
                {
                    items.extend(out);
                }
            }
            Ok(Some(items))
        })
        .await
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

impl Inner {
    /// Writes pending rows until none is left (the writer; one at a time).
    fn drain(&self, now: i64) {
        loop {
            let conn = self.store.conn.lock();
            let batch: Vec<(String, Arc<Row>)> = {
                let mut p = self.pending.lock();
                if p.queue.is_empty() {
                    p.writing = false;
                    return;
                }
                let n = p.queue.len().min(BATCH);
                let ids: Vec<String> = p.queue.drain(..n).collect();
                ids.into_iter()
                    .filter_map(|id| p.rows.get(&id).cloned().map(|r| (id, r)))
                    .collect()
            };
            if let Err(e) = self.write(&conn, &batch) {
                tracing::error!(
                    "{} responses could not be stored and are lost: {e}",
                    batch.len()
                );
            }
            let now = batch.iter().map(|(_, r)| r.created).fold(now, i64::max);
            self.sweep(&conn, now);
            let mut p = self.pending.lock();
            for (id, row) in &batch {
                if p.rows.get(id).is_some_and(|r| Arc::ptr_eq(r, row)) {
                    p.rows.remove(id);
                }
            }
        }
    }

    fn write(&self, conn: &Connection, batch: &[(String, Arc<Row>)]) -> Result<(), StoreError> {
        let err = |e| self.store.err(e);
        let tx = conn.unchecked_transaction().map_err(err)?;
        {
            let mut insert = tx
                .prepare_cached(
                    "INSERT OR REPLACE INTO response (id, key, created, expires, previous, input, output)
                     VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                )
                .map_err(err)?;
            for (id, r) in batch {
                insert
                    .execute(params![
                        id, r.key, r.created, r.expires, r.previous, r.input, r.output
                    ])
                    .map_err(err)?;
            }
        }
        tx.commit().map_err(err)
    }

    /// Deletes up to [`SWEEP_ROWS`] expired rows, if the last sweep was
    /// at least a minute ago. A failure is logged: the next one retries.
    fn sweep(&self, conn: &Connection, now: i64) {
        let last = self.swept.load(Ordering::Relaxed);
        if now < last.saturating_add(SWEEP_EVERY)
            || self
                .swept
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_err()
        {
            return;
        }
        if let Err(e) = conn.execute(
            "DELETE FROM response WHERE rowid IN
             (SELECT rowid FROM response WHERE expires <= ?1 LIMIT ?2)",
            params![now, SWEEP_ROWS as i64],
        ) {
            tracing::error!("{}", self.store.err(e));
        }
    }

    /// Row `id` of `key`, live at `now`: pending first, then stored.
    fn row(
        &self,
        conn: &Connection,
        id: &str,
        key: &str,
        now: i64,
    ) -> Result<Option<Arc<Row>>, StoreError> {
        if let Some(row) = self.pending.lock().rows.get(id) {
            return Ok(row.live(key, now).then(|| row.clone()));
        }
        conn.prepare_cached(
            "SELECT key, previous, created, expires, input, output FROM response
             WHERE id = ?1 AND key = ?2 AND expires > ?3",
        )
        .and_then(|mut s| {
            s.query_row(params![id, key, now], |r| {
                Ok(Row {
                    key: r.get(0)?,
                    previous: r.get(1)?,
                    created: r.get(2)?,
                    expires: r.get(3)?,
                    input: r.get(4)?,
                    output: r.get(5)?,
                })
            })
            .optional()
        })
        .map(|r| r.map(Arc::new))
        .map_err(|e| self.store.err(e))
    }

    /// The rows from `id` back along `previous`, newest first, within
    /// [`MAX_HOPS`] and [`MAX_CONVERSATION_BYTES`].
    #[allow(clippy::type_complexity)]
    fn chain(
        &self,
        id: &str,
        key: &str,
        now: i64,
    ) -> Result<Option<Vec<(String, Arc<Row>)>>, ConversationError> {
        let conn = self.store.conn.lock();
        let mut chain: Vec<(String, Arc<Row>)> = Vec::new();
        let (mut next, mut bytes) = (Some(id.to_owned()), 0usize);
        while let Some(id) = next.take() {
            if chain.len() == MAX_HOPS {
                return Err(ConversationError::TooManyHops);
            }
            let Some(row) = self.row(&conn, &id, key, now)? else {
                break;
            };
            bytes = bytes.saturating_add(row.input.len() + row.output.len());
            if bytes > MAX_CONVERSATION_BYTES {
                return Err(ConversationError::TooLarge);
            }
            next = row.previous.clone();
            chain.push((id, row));
        }
        Ok((!chain.is_empty()).then_some(chain))
    }
}

/// Runs `f` on the blocking pool.
async fn blocking<T, E>(f: impl FnOnce() -> Result<T, E> + Send + 'static) -> Result<T, E>
where
    T: Send + 'static,
    E: From<StoreError> + Send + 'static,
{
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(e) => Err(StoreError::Task(e.to_string()).into()),
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

#[cfg(test)]
mod tests;
