//! Each key's spend per UTC day: read back at start, written as totals.

use rusqlite::params;

use super::{Store, StoreError};

/// One key's spend on one UTC day.
#[derive(Debug, Clone, PartialEq)]
pub struct SpendRow {
    pub key: String,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    pub tokens: u64,
    pub cost_usd: f64,
}

impl Store {
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
