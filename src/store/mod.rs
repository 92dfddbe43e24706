//! The embedded store (`server.state_path`): one SQLite file holding what
//! must survive a restart: each key's spend per UTC day ([`spend`]), the
//! arenas and their votes ([`arena`]), and what each session, and each
//! key per oracle route and day, spent on oracle consults (`oracle`), and
//! the Responses API's stored answers ([`responses`]), with their size and
//! each key's count and bytes (`response_usage`, kept by triggers). It
//! is created with its schema on first start and migrated in order by
//! `PRAGMA user_version`; a file
//! from a newer conclave is refused rather than misread; arenas that
//! expired unvoted, and stored answers past their retention, are deleted
//! then. Without a path the same store lives
//! in memory. Every call blocks: async code runs it on `spawn_blocking`
//! (the [`responses`] service does that itself and is async).
//!
//! Beside it, the rest of the state and the one place that picks where
//! it lives: [`Backend`] (built once by `prepare`) hands out, in this
//! process or (`[state]`) on a shared Redis ([`redis`], the connection,
//! named nowhere above the store): keys' limits and an upstream's `rpm`
//! ([`limits`]), arenas and oracle spend ([`records`]), stored answers
//! ([`responses`]), a local lane's lease ([`lanes`]) and the response
//! cache's entries ([`cache`]), each a trait with this store's (or this
//! process's) implementation and a Redis one side by side.

pub mod arena;
mod backend;
pub mod cache;
pub mod lanes;
pub mod limits;
pub mod oracle;
pub mod records;
pub mod redis;
pub mod responses;
mod spend;

pub use backend::{Backend, Health};
pub use spend::SpendRow;

use std::path::{Path, PathBuf};
use std::time::Duration;

use parking_lot::Mutex;
use rusqlite::Connection;

use crate::clock::Clock;

/// The schema, one step per version; step `i` takes version `i` to `i + 1`.
/// Steps are only ever appended.
pub(crate) const MIGRATIONS: &[&str] = &[
    "CREATE TABLE key_spend (
        key       TEXT    NOT NULL,
        day       TEXT    NOT NULL,   -- UTC, YYYY-MM-DD
        tokens    INTEGER NOT NULL,
        cost_usd  REAL    NOT NULL,
        PRIMARY KEY (key, day)
    );",
    "CREATE TABLE arena (
        id        TEXT    PRIMARY KEY,
        route     TEXT    NOT NULL,
        model_a   TEXT    NOT NULL,
        model_b   TEXT    NOT NULL,
        key       TEXT    NOT NULL,
        excerpt   TEXT    NOT NULL,   -- the prompt's first 200 characters
        created   INTEGER NOT NULL,   -- Unix seconds
        expires   INTEGER NOT NULL,
        outcome   TEXT,               -- a, b, tie, skip; NULL while open
        voted_at  INTEGER
    );
    CREATE INDEX arena_route_outcome ON arena (route, outcome);",
    "CREATE TABLE oracle_session (
        session   TEXT    PRIMARY KEY,   -- key name and x-conclave-session
        calls     INTEGER NOT NULL,
        cost_usd  REAL    NOT NULL,
        updated   INTEGER NOT NULL       -- Unix seconds
    );",
    "CREATE TABLE oracle_key (
        key       TEXT    NOT NULL,      -- key name, or anonymous
        route     TEXT    NOT NULL,
        day       TEXT    NOT NULL,      -- UTC, YYYY-MM-DD
        calls     INTEGER NOT NULL,
        cost_usd  REAL    NOT NULL,
        PRIMARY KEY (key, route, day)
    );",
    "CREATE TABLE response (
        id        TEXT    PRIMARY KEY,   -- resp_…
        key       TEXT    NOT NULL,      -- key name, or anonymous
        created   INTEGER NOT NULL,      -- Unix seconds
        expires   INTEGER NOT NULL,
        previous  TEXT,                  -- previous_response_id
        input     TEXT    NOT NULL,      -- JSON array of its own input items
        output    TEXT    NOT NULL       -- the response object, JSON
    );
    CREATE INDEX response_expires ON response (expires);",
    // Stored responses' bounds: each row's size (the bytes of its stored
    // text), and per key its rows and bytes, kept by triggers on every
    // insert and delete.
    "ALTER TABLE response ADD COLUMN size INTEGER NOT NULL DEFAULT 0;
    UPDATE response SET size = length(CAST(id AS BLOB)) + length(CAST(key AS BLOB))
        + COALESCE(length(CAST(previous AS BLOB)), 0)
        + length(CAST(input AS BLOB)) + length(CAST(output AS BLOB));
    CREATE INDEX response_key ON response (key);
    CREATE TABLE response_usage (
        key       TEXT    PRIMARY KEY,   -- key name, or anonymous
        count     INTEGER NOT NULL,      -- its stored responses
        bytes     INTEGER NOT NULL       -- the sum of their size
    );
    INSERT INTO response_usage (key, count, bytes)
        SELECT key, COUNT(*), SUM(size) FROM response GROUP BY key;
    CREATE TRIGGER response_added AFTER INSERT ON response BEGIN
        INSERT INTO response_usage (key, count, bytes) VALUES (NEW.key, 1, NEW.size)
        ON CONFLICT (key) DO UPDATE SET count = count + 1, bytes = bytes + excluded.bytes;
    END;
    CREATE TRIGGER response_removed AFTER DELETE ON response BEGIN
        UPDATE response_usage SET count = count - 1, bytes = bytes - OLD.size
            WHERE key = OLD.key;
        DELETE FROM response_usage WHERE key = OLD.key AND count <= 0;
    END;",
    // Arenas of 2 to 6 contestants: all of them in letter order (A..F),
    // a JSON array; NULL on a pair's row from before (model_a, model_b).
    // The leaderboard filters votes by when they were cast.
    "ALTER TABLE arena ADD COLUMN models TEXT;
    CREATE INDEX arena_route_voted ON arena (route, voted_at);",
];

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
    #[error("the state store {path} holds JSON this build cannot read: {source}")]
    Json {
        path: String,
        #[source]
        source: serde_json::Error,
    },
    #[error("a state store task ended early: {0}")]
    Task(String),
    #[error("the shared state (Redis) failed to {op}: {message}")]
    Redis { op: &'static str, message: String },
    #[error("the shared state (Redis) did not answer {op} within {}", humantime::format_duration(*.after))]
    Timeout {
        op: &'static str,
        after: std::time::Duration,
    },
}

pub struct Store {
    path: PathBuf,
    pub(crate) conn: Mutex<Connection>,
    /// The gateway instance's clock: what "now" is for expiry and days.
    clock: Clock,
}

impl Store {
    /// Opens (creating if needed) and migrates the store at `path`.
    pub fn open(path: &Path, clock: Clock) -> Result<Store, StoreError> {
        let conn = Connection::open(path).map_err(|source| StoreError::Sqlite {
            path: path.display().to_string(),
            source,
        })?;
        Store::migrate(conn, path, clock)
    }

    /// A store that lives as long as the process (no `state_path`).
    pub fn in_memory(clock: Clock) -> Result<Store, StoreError> {
        let path = Path::new(":memory:");
        let conn = Connection::open_in_memory().map_err(|source| StoreError::Sqlite {
            path: path.display().to_string(),
            source,
        })?;
        Store::migrate(conn, path, clock)
    }

    fn migrate(mut conn: Connection, path: &Path, clock: Clock) -> Result<Store, StoreError> {
        let err = |source| StoreError::Sqlite {
            path: path.display().to_string(),
            source,
        };
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
        // Arenas nobody voted on before they expired are of no more use.
        tx.execute(
            "DELETE FROM arena WHERE outcome IS NULL AND expires <= ?1",
            [clock.unix_secs_i64()],
        )
        .map_err(err)?;
        // As are stored responses past their retention.
        tx.execute(
            "DELETE FROM response WHERE expires <= ?1",
            [clock.unix_secs_i64()],
        )
        .map_err(err)?;
        tx.commit().map_err(err)?;
        Ok(Store {
            path: path.to_owned(),
            conn: Mutex::new(conn),
            clock,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The instance's clock, which the store's records are dated by.
    pub fn clock(&self) -> Clock {
        self.clock
    }

    pub(crate) fn err(&self, source: rusqlite::Error) -> StoreError {
        StoreError::Sqlite {
            path: self.path.display().to_string(),
            source,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn created_migrated_saved_and_read_back_after_reopening() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.db");
        let store = Store::open(&path, Clock::system()).unwrap();
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
        let store = Store::open(&path, Clock::system()).unwrap();
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
        let err = Store::open(&path, Clock::system())
            .err()
            .unwrap()
            .to_string();
        assert!(err.contains("schema version 99"), "{err}");
    }
}
