//! What each session has spent on oracle consults, so a restart does not
//! give a session its budget back.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};

impl Store {
    /// Consults and dollars `session` has spent so far.
    pub fn oracle_spend(&self, session: &str) -> Result<(u64, f64), StoreError> {
        let conn = self.conn.lock();
        conn.query_row(
            "SELECT calls, cost_usd FROM oracle_session WHERE session = ?1",
            params![session],
            |r| Ok((u64::try_from(r.get::<_, i64>(0)?).unwrap_or(0), r.get(1)?)),
        )
        .optional()
        .map(Option::unwrap_or_default)
        .map_err(|e| self.err(e))
    }

    /// Adds one consult costing `cost_usd` to `session`.
    pub fn add_oracle_spend(
        &self,
        session: &str,
        cost_usd: f64,
        now: i64,
    ) -> Result<(), StoreError> {
        self.conn
            .lock()
            .execute(
                "INSERT INTO oracle_session (session, calls, cost_usd, updated) VALUES (?1, 1, ?2, ?3)
                 ON CONFLICT (session) DO UPDATE SET calls = calls + 1,
                     cost_usd = cost_usd + ?2, updated = ?3",
                params![session, cost_usd, now],
            )
            .map(|_| ())
            .map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sessions_consults_add_up() {
        let s = Store::in_memory().unwrap();
        assert_eq!(s.oracle_spend("k/s1").unwrap(), (0, 0.0));
        s.add_oracle_spend("k/s1", 0.25, 1).unwrap();
        s.add_oracle_spend("k/s1", 0.5, 2).unwrap();
        assert_eq!(s.oracle_spend("k/s1").unwrap(), (2, 0.75));
        assert_eq!(s.oracle_spend("k/s2").unwrap(), (0, 0.0));
    }
}
