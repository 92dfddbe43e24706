//! Stored answers' rows in the embedded SQLite store (`response` table),
//! each call on the blocking pool. Expired rows are swept at most
//! [`SWEEP_ROWS`] at a time, at most once a minute, when rows are
//! written or read.

use std::sync::Arc;
use std::sync::atomic::{AtomicI64, Ordering};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use super::rows::{ResponseRows, Row};
use super::{SWEEP_EVERY, SWEEP_ROWS};
use crate::store::{Store, StoreError};

pub struct SqliteRows {
    store: Arc<Store>,
    /// Unix seconds of the last sweep of expired rows.
    swept: Arc<AtomicI64>,
}

impl SqliteRows {
    pub fn new(store: Arc<Store>) -> Self {
        SqliteRows {
            store,
            swept: Arc::new(AtomicI64::new(i64::MIN)),
        }
    }

    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&Store, &AtomicI64) -> Result<T, StoreError> + Send + 'static,
    ) -> Result<T, StoreError> {
        let (store, swept) = (self.store.clone(), self.swept.clone());
        match tokio::task::spawn_blocking(move || f(&store, &swept)).await {
            Ok(r) => r,
            Err(e) => Err(StoreError::Task(e.to_string())),
        }
    }
}

/// Deletes up to [`SWEEP_ROWS`] expired rows, if the last sweep was at
/// least a minute ago. A failure is logged: the next one retries.
fn sweep(store: &Store, swept: &AtomicI64, conn: &Connection, now: i64) {
    let last = swept.load(Ordering::Relaxed);
    if now < last.saturating_add(SWEEP_EVERY)
        || swept
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
        tracing::error!("{}", store.err(e));
    }
}

#[async_trait]
impl ResponseRows for SqliteRows {
    async fn write(&self, batch: &[(String, Arc<Row>)]) -> Result<(), StoreError> {
        let batch = batch.to_vec();
        let now = self.store.clock().unix_secs_i64();
        self.run(move |store, swept| {
            let conn = store.conn.lock();
            let err = |e| store.err(e);
            let tx = conn.unchecked_transaction().map_err(err)?;
            {
                let mut insert = tx
                    .prepare_cached(
                        "INSERT OR REPLACE INTO response (id, key, created, expires, previous, input, output)
                         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
                    )
                    .map_err(err)?;
                for (id, r) in &batch {
                    insert
                        .execute(params![
                            id, r.key, r.created, r.expires, r.previous, r.input, r.output
                        ])
                        .map_err(err)?;
                }
            }
            tx.commit().map_err(err)?;
            let now = batch.iter().map(|(_, r)| r.created).fold(now, i64::max);
            sweep(store, swept, &conn, now);
            Ok(())
        })
        .await
    }

    async fn read(&self, id: &str, key: &str, now: i64) -> Result<Option<Row>, StoreError> {
        let (id, key) = (id.to_owned(), key.to_owned());
        self.run(move |store, swept| {
            let conn = store.conn.lock();
            sweep(store, swept, &conn, now);
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
        self.run(move |store, _| {
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
