//! The rows behind [`Responses`](super::Responses): the pending map, the
//! one writer that drains it into SQLite in batches, the sweep of expired
//! rows, and reads (pending first, then stored) of one row and of a
//! conversation's chain. The writer and `delete` take the connection's
//! lock before they look at the pending map, so neither sees the other
//! half done.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use parking_lot::Mutex;
use rusqlite::{Connection, OptionalExtension, params};

use super::{
    BATCH, ConversationError, MAX_CONVERSATION_BYTES, MAX_HOPS, SWEEP_EVERY, SWEEP_ROWS,
    StoredResponse,
};
use crate::store::{Store, StoreError};

/// A row as stored: its JSON already text.
#[derive(Debug)]
pub(super) struct Row {
    pub(super) key: String,
    pub(super) previous: Option<String>,
    pub(super) created: i64,
    pub(super) expires: i64,
    pub(super) input: String,
    pub(super) output: String,
}

impl Row {
    pub(super) fn live(&self, key: &str, now: i64) -> bool {
        self.key == key && self.expires > now
    }

    pub(super) fn decode(&self, store: &Store, id: &str) -> Result<StoredResponse, StoreError> {
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
pub(super) struct Pending {
    pub(super) rows: HashMap<String, Arc<Row>>,
    /// Ids in the order they were put; one no longer in `rows` is skipped.
    pub(super) queue: VecDeque<String>,
    /// A writer is draining `queue`.
    pub(super) writing: bool,
}

pub(super) struct Inner {
    pub(super) store: Arc<Store>,
    pub(super) pending: Mutex<Pending>,
    /// Unix seconds of the last sweep of expired rows.
    pub(super) swept: AtomicI64,
}

impl Inner {
    /// Writes pending rows until none is left (the writer; one at a time).
    pub(super) fn drain(&self, now: i64) {
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
    pub(super) fn sweep(&self, conn: &Connection, now: i64) {
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
    pub(super) fn row(
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
    pub(super) fn chain(
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
