//! What oracle consults have spent, so a restart gives no budget back:
//! per session, and per key, route and UTC day. A consult reserves its
//! worst case in both before it is made, in one transaction that refuses
//! it when either would pass its cap ([`Store::reserve_oracle`]), and
//! settles to what it really cost afterwards ([`Store::settle_oracle`]).
//! A consult that never settles (the process died) stays charged its
//! reservation.

use rusqlite::{OptionalExtension, Transaction, params};

use super::{Store, StoreError};

/// Where one consult is counted, and the caps that hold there.
#[derive(Debug, Clone)]
pub struct OracleLedgers {
    /// `KEY/SESSION` and its cap, when the client named a session.
    pub session: Option<(String, f64)>,
    /// The key's name (`anonymous` without `[[keys]]`).
    pub key: String,
    pub route: String,
    /// `YYYY-MM-DD`, UTC.
    pub day: String,
    /// What the key may spend on the route that day.
    pub key_cap: f64,
}

/// What a reservation found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Reserved {
    /// Held: the spend now counted, the reservation included.
    Held { session: Option<f64>, key: f64 },
    /// The session's spend (reservations included) leaves no room.
    SessionFull { spent: f64 },
    /// The key's spend today on the route leaves no room.
    KeyFull { spent: f64 },
}

fn session_spent(tx: &Transaction<'_>, session: &str) -> rusqlite::Result<f64> {
    tx.query_row(
        "SELECT cost_usd FROM oracle_session WHERE session = ?1",
        params![session],
        |r| r.get(0),
    )
    .optional()
    .map(Option::unwrap_or_default)
}

fn key_spent(tx: &Transaction<'_>, at: &OracleLedgers) -> rusqlite::Result<f64> {
    tx.query_row(
        "SELECT cost_usd FROM oracle_key WHERE key = ?1 AND route = ?2 AND day = ?3",
        params![at.key, at.route, at.day],
        |r| r.get(0),
    )
    .optional()
    .map(Option::unwrap_or_default)
}

/// Adds `calls` consults and `cost_usd` (negative to give back) to both
/// ledgers; spend never goes below zero.
fn add(
    tx: &Transaction<'_>,
    at: &OracleLedgers,
    calls: i64,
    cost_usd: f64,
    now: i64,
) -> rusqlite::Result<()> {
    if let Some((session, _)) = &at.session {
        tx.execute(
            "INSERT INTO oracle_session (session, calls, cost_usd, updated)
                 VALUES (?1, ?2, max(?3, 0), ?4)
             ON CONFLICT (session) DO UPDATE SET calls = calls + ?2,
                 cost_usd = max(cost_usd + ?3, 0), updated = ?4",
            params![session, calls, cost_usd, now],
        )?;
    }
    tx.execute(
        "INSERT INTO oracle_key (key, route, day, calls, cost_usd)
             VALUES (?1, ?2, ?3, ?4, max(?5, 0))
         ON CONFLICT (key, route, day) DO UPDATE SET calls = calls + ?4,
             cost_usd = max(cost_usd + ?5, 0)",
        params![at.key, at.route, at.day, calls, cost_usd],
    )?;
    Ok(())
}

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

    /// Reserves `worst_usd` for one consult in its session and its key's
    /// day, all or nothing: refused when either would pass its cap.
    pub fn reserve_oracle(
        &self,
        at: &OracleLedgers,
        worst_usd: f64,
        now: i64,
    ) -> Result<Reserved, StoreError> {
        let mut conn = self.conn.lock();
        let run = |tx: &Transaction<'_>| -> rusqlite::Result<Reserved> {
            let session = match &at.session {
                Some((s, cap)) => {
                    let spent = session_spent(tx, s)?;
                    if spent + worst_usd > *cap {
                        return Ok(Reserved::SessionFull { spent });
                    }
                    Some(spent + worst_usd)
                }
                None => None,
            };
            let key = key_spent(tx, at)?;
            if key + worst_usd > at.key_cap {
                return Ok(Reserved::KeyFull { spent: key });
            }
            add(tx, at, 1, worst_usd, now)?;
            Ok(Reserved::Held {
                session,
                key: key + worst_usd,
            })
        };
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let r = run(&tx).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))?;
        Ok(r)
    }

    /// Settles a reservation of `reserved_usd` to the consult's real
    /// `cost_usd`.
    pub fn settle_oracle(
        &self,
        at: &OracleLedgers,
        reserved_usd: f64,
        cost_usd: f64,
        now: i64,
    ) -> Result<(), StoreError> {
        let mut conn = self.conn.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        add(&tx, at, 0, cost_usd - reserved_usd, now).map_err(|e| self.err(e))?;
        tx.commit().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(session: Option<&str>, key: &str) -> OracleLedgers {
        OracleLedgers {
            session: session.map(|s| (s.to_owned(), 1.0)),
            key: key.into(),
            route: "wise".into(),
            day: "2026-11-24".into(),
            key_cap: 1.5,
        }
    }

    #[test]
    fn reservations_hold_both_caps_and_settle_to_the_real_cost() {
        let s = Store::in_memory(crate::clock::Clock::system()).unwrap();
        let one = at(Some("k/s1"), "k");
        assert_eq!(
            s.reserve_oracle(&one, 0.6, 1).unwrap(),
            Reserved::Held {
                session: Some(0.6),
                key: 0.6
            }
        );
        // Reserved, not yet settled: a second 0.6 would pass the session's 1.0.
        assert_eq!(
            s.reserve_oracle(&one, 0.6, 2).unwrap(),
            Reserved::SessionFull { spent: 0.6 }
        );
        s.settle_oracle(&one, 0.6, 0.25, 3).unwrap();
        assert_eq!(s.oracle_spend("k/s1").unwrap(), (1, 0.25));
        // Another session of the same key: its own cap, the key's shared.
        let two = at(Some("k/s2"), "k");
        assert!(matches!(
            s.reserve_oracle(&two, 1.0, 4).unwrap(),
            Reserved::Held { .. }
        ));
        assert_eq!(
            s.reserve_oracle(&at(None, "k"), 0.3, 5).unwrap(),
            Reserved::KeyFull { spent: 1.25 }
        );
        // Another key, another day: their own.
        assert!(matches!(
            s.reserve_oracle(&at(None, "other"), 1.5, 6).unwrap(),
            Reserved::Held { .. }
        ));
        let mut tomorrow = at(None, "k");
        tomorrow.day = "2026-11-25".into();
        assert!(matches!(
            s.reserve_oracle(&tomorrow, 1.5, 7).unwrap(),
            Reserved::Held { .. }
        ));
    }
}
