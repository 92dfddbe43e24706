//! Arenas: one row per blind comparison a client was shown, closed once
//! by its vote (`a`, `b`, `tie`) or a `skip`. A vote closes its row in one
//! transaction, so a second vote on the same arena finds it closed.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};

/// An arena as it was opened.
#[derive(Debug, Clone, PartialEq)]
pub struct Arena {
    pub id: String,
    pub route: String,
    /// The model shown as A (choice 0) and as B (choice 1).
    pub model_a: String,
    pub model_b: String,
    /// The name of the key that asked (`anonymous` without keys).
    pub key: String,
    pub excerpt: String,
    /// Unix seconds.
    pub created: i64,
    pub expires: i64,
}

/// What closing an arena found.
#[derive(Debug, Clone, PartialEq)]
pub enum Closed {
    /// Closed now with the outcome.
    Now(Arena),
    /// No such arena, or it expired unvoted.
    Unknown,
    /// Another key asked for it.
    NotYours,
    /// Already voted (or skipped): its outcome.
    Already(String),
}

/// One stored vote.
#[derive(Debug, Clone, PartialEq)]
pub struct Vote {
    pub model_a: String,
    pub model_b: String,
    /// `a`, `b` or `tie`.
    pub outcome: String,
}

impl Store {
    pub fn open_arena(&self, a: &Arena) -> Result<(), StoreError> {
        self.conn
            .lock()
            .prepare_cached(
                "INSERT INTO arena (id, route, model_a, model_b, key, excerpt, created, expires)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    a.id, a.route, a.model_a, a.model_b, a.key, a.excerpt, a.created, a.expires
                ])
            })
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Closes arena `id` with `outcome` (`a`, `b`, `tie`, `skip`) at `now`
    /// for the key named `key` (`None`: any key may).
    pub fn close_arena(
        &self,
        id: &str,
        outcome: &str,
        key: Option<&str>,
        now: i64,
    ) -> Result<Closed, StoreError> {
        let mut conn = self.conn.lock();
        let tx = conn.transaction().map_err(|e| self.err(e))?;
        let row = tx
            .query_row(
                "SELECT route, model_a, model_b, key, excerpt, created, expires, outcome
                 FROM arena WHERE id = ?1",
                params![id],
                |r| {
                    Ok((
                        Arena {
                            id: id.to_owned(),
                            route: r.get(0)?,
                            model_a: r.get(1)?,
                            model_b: r.get(2)?,
                            key: r.get(3)?,
                            excerpt: r.get(4)?,
                            created: r.get(5)?,
                            expires: r.get(6)?,
                        },
                        r.get::<_, Option<String>>(7)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))?;
        // Another key learns nothing of an arena, not even its vote.
        let closed = match row {
            None => Closed::Unknown,
            Some((a, _)) if key.is_some_and(|k| k != a.key) => Closed::NotYours,
            Some((_, Some(done))) => Closed::Already(done),
            Some((a, None)) if a.expires <= now => Closed::Unknown,
            Some((a, None)) => {
                tx.execute(
                    "UPDATE arena SET outcome = ?2, voted_at = ?3 WHERE id = ?1",
                    params![id, outcome, now],
                )
                .map_err(|e| self.err(e))?;
                Closed::Now(a)
            }
        };
        tx.commit().map_err(|e| self.err(e))?;
        Ok(closed)
    }

    /// Votes (not skips) of `route` per (A, B) pair of models.
    pub fn pair_counts(&self, route: &str) -> Result<Vec<(String, String, u64)>, StoreError> {
        let conn = self.conn.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT model_a, model_b, COUNT(*) FROM arena
                 WHERE route = ?1 AND outcome IN ('a', 'b', 'tie') GROUP BY model_a, model_b",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![route], |r| {
                Ok((
                    r.get(0)?,
                    r.get(1)?,
                    u64::try_from(r.get::<_, i64>(2)?).unwrap_or(0),
                ))
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }

    /// Every vote (not skips) of `route`, oldest first.
    pub fn votes(&self, route: &str) -> Result<Vec<Vote>, StoreError> {
        let conn = self.conn.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT model_a, model_b, outcome FROM arena
                 WHERE route = ?1 AND outcome IN ('a', 'b', 'tie') ORDER BY voted_at, id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![route], |r| {
                Ok(Vote {
                    model_a: r.get(0)?,
                    model_b: r.get(1)?,
                    outcome: r.get(2)?,
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arena(id: &str, expires: i64) -> Arena {
        Arena {
            id: id.into(),
            route: "ab".into(),
            model_a: "x".into(),
            model_b: "y".into(),
            key: "team".into(),
            excerpt: "hello".into(),
            created: 100,
            expires,
        }
    }

    #[test]
    fn an_arena_closes_once_for_its_own_key_before_it_expires() {
        let s = Store::in_memory(crate::clock::Clock::system()).unwrap();
        s.open_arena(&arena("one", 1000)).unwrap();
        s.open_arena(&arena("old", 150)).unwrap();
        assert_eq!(
            s.close_arena("one", "a", Some("other"), 200).unwrap(),
            Closed::NotYours
        );
        assert_eq!(
            s.close_arena("one", "a", Some("team"), 200).unwrap(),
            Closed::Now(arena("one", 1000))
        );
        assert_eq!(
            s.close_arena("one", "b", None, 201).unwrap(),
            Closed::Already("a".into())
        );
        assert_eq!(
            s.close_arena("old", "a", None, 200).unwrap(),
            Closed::Unknown
        );
        assert_eq!(
            s.close_arena("nope", "a", None, 200).unwrap(),
            Closed::Unknown
        );
        let votes = s.votes("ab").unwrap();
        assert_eq!(votes.len(), 1);
        assert_eq!(votes[0].outcome, "a");
    }
}
