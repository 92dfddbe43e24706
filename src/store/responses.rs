//! The Responses API's stored responses: one row per response a client
//! asked to keep (`store`, the API's default), with its own input items
//! and the response object, per key, until `server.responses_retention`
//! runs out. [`ResponseStore`] is what the HTTP layer uses: a store that
//! takes a response without blocking (from inside a stream's last poll)
//! and never loses a read to a write still on its way to SQLite.

use std::sync::Arc;
use std::time::Duration;

use dashmap::DashMap;
use rusqlite::{OptionalExtension, params};
use serde_json::Value;

use super::{Store, StoreError};

/// One stored response.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredResponse {
    pub id: String,
    /// The name of the key that asked (`anonymous` without keys).
    pub key: String,
    /// The response it continued (`previous_response_id`).
    pub previous: Option<String>,
    /// The request's own input, as items with ids.
    pub input: Vec<Value>,
    /// The response object.
    pub response: Value,
}

/// Expired rows deleted at most per write.
const SWEEP: i64 = 100;
/// Responses waiting for their write before `put` writes in place.
const MAX_PENDING: usize = 10_000;
/// Most responses a conversation is followed back through.
pub const MAX_HOPS: usize = 1_000;
/// Most bytes of JSON a conversation gathers.
pub const MAX_CONVERSATION_BYTES: usize = 32 << 20;

impl Store {
    fn put_response(
        &self,
        r: &StoredResponse,
        created: i64,
        expires: i64,
    ) -> Result<(), StoreError> {
        let input = Value::Array(r.input.clone()).to_string();
        let output = r.response.to_string();
        let conn = self.conn.lock();
        conn.prepare_cached(
            "INSERT OR REPLACE INTO response (id, key, created, expires, previous, input, output)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
        )
        .and_then(|mut s| {
            s.execute(params![
                r.id, r.key, created, expires, r.previous, input, output
            ])
        })
        .and_then(|_| {
            conn.execute(
                "DELETE FROM response WHERE id IN
                 (SELECT id FROM response WHERE expires <= ?1 LIMIT ?2)",
                params![created, SWEEP],
            )
        })
        .map(|_| ())
        .map_err(|e| self.err(e))
    }

    fn get_response(&self, id: &str, key: &str) -> Result<Option<StoredResponse>, StoreError> {
        let now = self.clock().unix_secs_i64();
        let row = self
            .conn
            .lock()
            .prepare_cached(
                "SELECT previous, input, output FROM response
                 WHERE id = ?1 AND key = ?2 AND expires > ?3",
            )
            .and_then(|mut s| {
                s.query_row(params![id, key, now], |r| {
                    Ok((
                        r.get::<_, Option<String>>(0)?,
                        r.get::<_, String>(1)?,
                        r.get::<_, String>(2)?,
                    ))
                })
                .optional()
            })
            .map_err(|e| self.err(e))?;
        Ok(row.map(|(previous, input, output)| StoredResponse {
            id: id.to_owned(),
            key: key.to_owned(),
            previous,
            input: serde_json::from_str(&input).unwrap_or_default(),
            response: serde_json::from_str(&output).unwrap_or(Value::Null),
        }))
    }

    fn delete_response(&self, id: &str, key: &str) -> Result<bool, StoreError> {
        let now = self.clock().unix_secs_i64();
        self.conn
            .lock()
            .execute(
                "DELETE FROM response WHERE id = ?1 AND key = ?2 AND expires > ?3",
                params![id, key, now],
            )
            .map(|n| n > 0)
            .map_err(|e| self.err(e))
    }
}

/// Why a conversation could not be gathered.
#[derive(Debug, thiserror::Error)]
pub enum ConversationError {
    #[error(transparent)]
    Store(#[from] StoreError),
    #[error(
        "the conversation is longer than conclave follows ({MAX_HOPS} responses or \
         {} MiB); start a new one, or send the history as input", MAX_CONVERSATION_BYTES >> 20
    )]
    TooLong,
}

/// Stored responses, as the HTTP layer uses them.
pub struct ResponseStore {
    store: Arc<Store>,
    /// Responses taken but not yet written, readable meanwhile.
    pending: Arc<DashMap<String, Arc<StoredResponse>>>,
}

impl ResponseStore {
    pub fn new(store: Arc<Store>) -> Self {
        ResponseStore {
            store,
            pending: Arc::new(DashMap::new()),
        }
    }

    /// Keeps `r` for `retention` (zero: not at all), without blocking:
    /// it is readable at once and written on the blocking pool (in place
    /// when too many writes are waiting, or outside a runtime). A failed
    /// write is logged.
    pub fn put(&self, r: StoredResponse, retention: Duration) {
        if retention.is_zero() {
            return;
        }
        let created = self.store.clock().unix_secs_i64();
        let kept = i64::try_from(retention.as_secs()).unwrap_or(i64::MAX);
        let expires = created.saturating_add(kept);
        let (store, pending) = (self.store.clone(), self.pending.clone());
        let id = r.id.clone();
        let write = move || {
            // Written under the pending entry's lock, so a delete that
            // removes the entry either comes first (nothing is written)
            // or waits for the row and then deletes it.
            if let Some(entry) = pending.get(&id)
                && let Err(e) = store.put_response(&entry, created, expires)
            {
                tracing::error!(response_id = %id, "a stored response could not be written: {e}");
            }
            pending.remove(&id);
        };
        let runtime = tokio::runtime::Handle::try_current();
        let full = self.pending.len() >= MAX_PENDING;
        self.pending.insert(r.id.clone(), Arc::new(r));
        match runtime {
            Ok(rt) if !full => drop(rt.spawn_blocking(write)),
            _ => write(),
        }
    }

    /// The response `id` of `key`; another key's is `None`, as an unknown one.
    pub async fn get(&self, id: &str, key: &str) -> Result<Option<StoredResponse>, StoreError> {
        if let Some(r) = self.pending.get(id).filter(|r| r.key == key) {
            return Ok(Some(StoredResponse::clone(&r)));
        }
        let (store, id, key) = (self.store.clone(), id.to_owned(), key.to_owned());
        blocking(move || store.get_response(&id, &key)).await
    }

    /// Deletes the response `id` of `key`; whether there was one.
    pub async fn delete(&self, id: &str, key: &str) -> Result<bool, StoreError> {
        let was_pending = self.pending.remove_if(id, |_, r| r.key == key).is_some();
        let (store, id, key) = (self.store.clone(), id.to_owned(), key.to_owned());
        let deleted = blocking(move || store.delete_response(&id, &key)).await?;
        Ok(was_pending || deleted)
    }

    /// The items of the conversation that ends with response `id`, oldest
    /// first: each response's input items, then its output items. `None`
    /// when `id` is not `key`'s. A response further back that is gone
    /// (deleted, expired) ends the conversation there.
    pub async fn conversation(
        &self,
        id: &str,
        key: &str,
    ) -> Result<Option<Vec<Value>>, ConversationError> {
        let mut chain = Vec::new();
        let mut bytes = 0usize;
        let mut next = Some(id.to_owned());
        while let Some(at) = next {
            let Some(r) = self.get(&at, key).await? else {
                break;
            };
            if chain.len() >= MAX_HOPS {
                return Err(ConversationError::TooLong);
            }
            bytes = bytes
                .saturating_add(r.input.iter().map(json_len).sum())
                .saturating_add(json_len(&r.response));
            if bytes > MAX_CONVERSATION_BYTES {
                return Err(ConversationError::TooLong);
            }
            next = r.previous.clone();
            chain.push(r);
        }
        if chain.is_empty() {
            return Ok(None);
        }
        let mut items = Vec::new();
        for r in chain.into_iter().rev() {
            items.extend(r.input);
            if let Some(Value::Array(out)) = r.response.get("output") {
                items.extend(out.iter().cloned());
            }
        }
        Ok(Some(items))
    }
}

fn json_len(v: &Value) -> usize {
    serde_json::to_vec(v).map_or(0, |b| b.len())
}

async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| StoreError::Task(e.to_string()))?
}

#[cfg(test)]
mod tests;
