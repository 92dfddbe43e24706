//! Stored answers' rows in the embedded SQLite store (`response` table,
//! in a file or in memory), each call on the blocking pool. Each row
//! keeps its `size`; triggers keep `response_usage` (rows and bytes per
//! key) true on every insert and delete, whoever deletes (a write's
//! eviction, `DELETE`, the sweep, the store's opening), so a write reads
//! its key's figures and the total in O(keys). A key's oldest rows are
//! its lowest `rowid`s (a new row always gets a higher one than every
//! row there).

use std::sync::Arc;

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, Transaction, params};

use super::SWEEP_ROWS;
use super::rows::{ResponseRows, Row, Written};
use crate::config::ResponseBounds;
use crate::store::{Store, StoreError};

pub struct SqliteRows {
    store: Arc<Store>,
}

impl SqliteRows {
    pub fn new(store: Arc<Store>) -> Self {
        SqliteRows { store }
    }

    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let store = self.store.clone();
        match tokio::task::spawn_blocking(move || f(&store)).await {
            Ok(r) => r,
            Err(e) => Err(StoreError::Task(e.to_string())),
        }
    }
}

/// Rows and bytes key `key` holds, and the bytes all keys hold.
fn usage(tx: &Connection, key: &str) -> rusqlite::Result<(u64, u64, u64)> {
    let (n, kb): (i64, i64) = tx
        .prepare_cached("SELECT count, bytes FROM response_usage WHERE key = ?1")?
        .query_row([key], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?
        .unwrap_or((0, 0));
    let total: i64 = tx
        .prepare_cached("SELECT COALESCE(SUM(bytes), 0) FROM response_usage")?
        .query_row([], |r| r.get(0))?;
    let u = |v: i64| u64::try_from(v).unwrap_or(0);
    Ok((u(n), u(kb), u(total)))
}

/// Stores row `id` within `bounds`, evicting its key's oldest rows first:
/// whether it was stored, and how many rows were evicted.
fn put(tx: &Transaction, id: &str, r: &Row, b: ResponseBounds) -> rusqlite::Result<(bool, usize)> {
    let size = r.size(id);
    tx.prepare_cached("DELETE FROM response WHERE id = ?1")?
        .execute([id])?;
    let (mut n, mut kb, mut total) = usage(tx, &r.key)?;
    // What the key holds can all go; what other keys hold cannot.
    if size > b.max_bytes_per_key || total.saturating_sub(kb).saturating_add(size) > b.max_bytes {
        return Ok((false, 0));
    }
    let mut evicted = 0;
    while n.saturating_add(1) > b.max_per_key
        || kb.saturating_add(size) > b.max_bytes_per_key
        || total.saturating_add(size) > b.max_bytes
    {
        let oldest: Option<(i64, i64)> = tx
            .prepare_cached(
                "SELECT rowid, size FROM response WHERE key = ?1 ORDER BY rowid LIMIT 1",
            )?
            .query_row([&r.key], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()?;
        let Some((rowid, gone)) = oldest else {
            return Ok((false, evicted));
        };
        tx.prepare_cached("DELETE FROM response WHERE rowid = ?1")?
            .execute([rowid])?;
        let gone = u64::try_from(gone).unwrap_or(0);
        n = n.saturating_sub(1);
        kb = kb.saturating_sub(gone);
        total = total.saturating_sub(gone);
        evicted += 1;
    }
    tx.prepare_cached(
        "INSERT INTO response (id, key, created, expires, previous, input, output, size)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
    )?
    .execute(params![
        id,
        r.key,
        r.created,
        r.expires,
        r.previous,
        r.input,
        r.output,
        i64::try_from(size).unwrap_or(i64::MAX)
    ])?;
    Ok((true, evicted))
}

#[async_trait]
impl ResponseRows for SqliteRows {
    async fn write(
        &self,
        batch: &[(String, Arc<Row>)],
        bounds: ResponseBounds,
    ) -> Result<Written, StoreError> {
        let batch = batch.to_vec();
        self.run(move |store| {
            let conn = store.conn.lock();
            let err = |e| store.err(e);
            let tx = conn.unchecked_transaction().map_err(err)?;
            let mut w = Written::default();
            for (id, r) in &batch {
                let (stored, evicted) = put(&tx, id, r, bounds).map_err(err)?;
                w.evicted += evicted;
                if stored {
                    w.stored += 1;
                } else {
                    w.refused.push(id.clone());
                }
            }
            tx.commit().map_err(err)?;
            Ok(w)
        })
        .await
    }

    async fn sweep(&self, now: i64) -> Result<usize, StoreError> {
        self.run(move |store| {
            store
                .conn
                .lock()
                .execute(
                    "DELETE FROM response WHERE rowid IN
                     (SELECT rowid FROM response WHERE expires <= ?1 LIMIT ?2)",
                    params![now, SWEEP_ROWS as i64],
                )
                .map_err(|e| store.err(e))
        })
        .await
    }

    async fn read(&self, id: &str, key: &str, now: i64) -> Result<Option<Row>, StoreError> {
        let (id, key) = (id.to_owned(), key.to_owned());
        self.run(move |store| {
            let conn = store.conn.lock();
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
            .map_err(|e| store.err(e))
        })
        .await
    }

    async fn delete(&self, id: &str, key: &str) -> Result<Option<i64>, StoreError> {
        let (id, key) = (id.to_owned(), key.to_owned());
        self.run(move |store| {
            store
                .conn
                .lock()
                .query_row(
                    "DELETE FROM response WHERE id = ?1 AND key = ?2 RETURNING expires",
                    params![id, key],
                    |r| r.get(0),
                )
                .optional()
                .map_err(|e| store.err(e))
        })
        .await
    }

    fn shown(&self) -> String {
        self.store.path().display().to_string()
    }
}
