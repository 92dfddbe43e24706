//! The embedded store (`server.state_path`): one SQLite file holding what
//! must survive a restart (each key's spend per UTC day; arena votes
//! later). It is created with its schema on first start and migrated in
//! order by `PRAGMA user_version`; a file from a newer conclave is refused
//! rather than misread. Every call blocks: async code runs it on
//! `spawn_blocking`, off the request path.

use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::{Connection, params};

/// The schema, one step per version; step `i` takes version `i` to `i + 1`.
/// Steps are only ever appended.
const MIGRATIONS: &[&str] = &["CREATE TABLE key_spend (
        key       TEXT    NOT NULL,
        day       TEXT    NOT NULL,   -- UTC, YYYY-MM-DD
        tokens    INTEGER NOT NULL,
        cost_usd  REAL    NOT NULL,
        PRIMARY KEY (key, day)
    );"];

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the state store {path}: {source}")]
    Sqlite {
        path: String,
        #[source]
        source: rusqlite::Error,
    },
    #[error(
        "the state store {path} has schema version {found}, newer than this build's {known}; \
         use a newer conclave or another server.state_path"
    )]
    Newer {
        path: String,
        found: i64,
        known: usize,
    },
}

/// One key's spend on one UTC day.
#[derive(Debug, Clone, PartialEq)]
pub struct SpendRow {
    pub key: String,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub tokens: u64,
    pub cost_usd: f64,
}

pub struct Store {
    path: PathBuf,
    conn: Mutex<Connection>,
}

impl Store {
    /// Opens (creating if needed) and migrates the store at `path`.
    pub fn open(path: &Path) -> Result<Store, StoreError> {
        let err = |source| StoreError::Sqlite {
            path: path.display().to_string(),
            source,
        };
        let mut conn = Connection::open(path).map_err(err)?;
        conn.busy_timeout(Duration::from_secs(5)).map_err(err)?;
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(err)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(err)?;
        let found: i64 = conn
            .pragma_query_value(None, "user_version", |r| r.get(0))
            .map_err(err)?;
        let from = usize::try_from(found).unwrap_or(usize::MAX);
        if from > MIGRATIONS.len() {
            return Err(StoreError::Newer {
                path: path.display().to_string(),
                found,
                known: MIGRATIONS.len(),
            });
        }
        let tx = conn.transaction().map_err(err)?;
        for step in &MIGRATIONS[from..] {
            tx.execute_batch(step).map_err(err)?;
        }
        tx.pragma_update(None, "user_version", MIGRATIONS.len() as i64)
            .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(Store {
            path: path.to_owned(),
            conn: Mutex::new(conn),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.display().to_string(),
            source,
        }
    }

    /// Every key's spend on `day`.
    pub fn spend_on(&self, day: &str) -> Result<Vec<SpendRow>, StoreError> {
        let conn = self.conn.lock();
        let mut stmt = conn
            .prepare_cached("SELECT key, tokens, cost_usd FROM key_spend WHERE day = ?1")
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![day], |r| {
                Ok(SpendRow {
                    key: r.get(0)?,
                    day: day.to_owned(),
                    tokens: u64::try_from(r.get::<_, i64>(1)?).unwrap_or(0),
                    cost_usd: r.get(2)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Writes these totals (not increments: writing one twice is harmless),
    /// all or none.
    pub fn save_spend(&self, rows: &[SpendRow]) -> Result<(), StoreError> {
        let mut conn = self.conn.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        {
            let mut stmt = tx
                .prepare_cached(
                    "INSERT INTO key_spend (key, day, tokens, cost_usd) VALUES (?1, ?2, ?3, ?4)
                     ON CONFLICT (key, day) DO UPDATE SET tokens = ?3, cost_usd = ?4",
                )
                .map_err(|e| self.err(e))?;
            for r in rows {
                let tokens = i64::try_from(r.tokens).unwrap_or(i64::MAX);
                stmt.execute(params![r.key, r.day, tokens, r.cost_usd])
                    .map_err(|e| self.err(e))?;
            }
        }
        tx.commit().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_migrated_saved_and_read_back_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Store::open(&path).unwrap();
        let row = |key: &str, day: &str, tokens| SpendRow {
            key: key.into(),
            day: day.into(),
            tokens,
            cost_usd: tokens as f64 / 1000.0,
        };
        store
            .save_spend(&[row("a", "2026-11-22", 5), row("a", "2026-11-23", 7)])
            .unwrap();
        store.save_spend(&[row("a", "2026-11-23", 9)]).unwrap();
        drop(store);
        let store = Store::open(&path).unwrap();
        assert_eq!(
            store.spend_on("2026-11-23").unwrap(),
            vec![row("a", "2026-11-23", 9)]
        );
        assert!(store.spend_on("2026-11-24").unwrap().is_empty());
    }

    #[test]
    fn a_store_from_a_newer_build_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let conn = Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", 99).unwrap();
        drop(conn);
        let err = Store::open(&path).err().unwrap().to_string();
        assert!(err.contains("schema version 99"), "{err}");
    }
}
