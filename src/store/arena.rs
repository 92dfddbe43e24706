//! Arenas: one row per blind comparison a client was shown, of 2 to 6
//! models kept in letter order (A..F), closed once by its vote or a
//! `skip`. A vote closes its row in one transaction, so a second vote on
//! the same arena finds it closed.
//!
//! An outcome, as stored (the same words on every backend):
//! - `a` … `f`: that letter beats every other (the others are not
//!   compared with each other);
//! - `tie`: all tie; `bad`: all were bad (a tie in ratings);
//! - `rank:bac`: every letter once, best first: each beats all below it;
//! - `skip`: closed without a vote (not a vote).
//!
//! [`pairwise`] derives the pairwise results an outcome stands for; the
//! leaderboard, the pair counts and the vote metric all read them.

use rusqlite::{OptionalExtension, params};

use super::{Store, StoreError};

/// The most contestants an arena shows.
pub const MAX_CONTESTANTS: usize = 6;

/// An arena as it was opened.
#[derive(Debug, Clone, PartialEq)]
pub struct Arena {
    pub id: String,
    pub route: String,
    /// The models shown as A (choice 0), B (choice 1), …: 2 to 6.
    pub models: Vec<String>,
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
    /// The outcome names letters the arena does not have (or a ranking
    /// of another length): its number of contestants. Left open.
    Misfit(usize),
}

/// One stored vote.
#[derive(Debug, Clone, PartialEq)]
pub struct Vote {
    /// The arena's models in letter order.
    pub models: Vec<String>,
    /// As stored (see the module doc); never `skip`.
    pub outcome: String,
    /// When it was cast, Unix seconds (0 when unknown: a Redis vote
    /// recorded before votes were dated).
    pub at: i64,
}

/// The result of one pairwise comparison between `(first, second)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Side {
    First,
    Second,
    Tie,
}

/// The letter of position `i` (`a` for 0), lower case as stored.
pub fn letter(i: usize) -> char {
    char::from(b'a' + u8::try_from(i.min(25)).unwrap_or(0))
}

/// The position of a stored letter (`a` is 0).
fn position(c: char) -> Option<usize> {
    c.is_ascii_lowercase()
        .then(|| usize::from(c as u8 - b'a'))
        .filter(|&i| i < MAX_CONTESTANTS)
}

/// The positions of a stored ranking (`rank:bac`), best first.
fn ranking(outcome: &str) -> Option<Vec<usize>> {
    outcome
        .strip_prefix("rank:")?
        .chars()
        .map(position)
        .collect()
}

/// The arena sizes an outcome can close: at least the first, at most
/// the second number of contestants.
pub fn sizes(outcome: &str) -> (usize, usize) {
    let mut chars = outcome.chars();
    if let (Some(c), None) = (chars.next(), chars.next())
        && let Some(i) = position(c)
    {
        return (i + 1, MAX_CONTESTANTS);
    }
    match ranking(outcome) {
        Some(r) => (r.len(), r.len()),
        None => (2, MAX_CONTESTANTS),
    }
}

/// The pairwise results an outcome of an arena of `n` stands for, as
/// `(i, j, side)` with `i < j` positions: none for a skip or an unknown
/// outcome.
pub fn pairwise(n: usize, outcome: &str) -> Vec<(usize, usize, Side)> {
    let all = || (0..n).flat_map(move |i| (i + 1..n).map(move |j| (i, j)));
    let mut chars = outcome.chars();
    if let (Some(c), None) = (chars.next(), chars.next()) {
        let Some(w) = position(c).filter(|&w| w < n) else {
            return Vec::new();
        };
        return all()
            .filter(|&(i, j)| i == w || j == w)
            .map(|(i, j)| (i, j, if i == w { Side::First } else { Side::Second }))
            .collect();
    }
    match outcome {
        "tie" | "bad" => return all().map(|(i, j)| (i, j, Side::Tie)).collect(),
        _ => {}
    }
    let Some(order) = ranking(outcome).filter(|r| r.len() == n) else {
        return Vec::new();
    };
    let place = |x: usize| order.iter().position(|&p| p == x);
    all()
        .filter_map(|(i, j)| {
            let (pi, pj) = (place(i)?, place(j)?);
            Some((i, j, if pi < pj { Side::First } else { Side::Second }))
        })
        .collect()
}

impl Vote {
    /// Its pairwise results, by model: `(first, second, side)`.
    pub fn pairs(&self) -> Vec<(&str, &str, Side)> {
        pairwise(self.models.len(), &self.outcome)
            .into_iter()
            .map(|(i, j, s)| (self.models[i].as_str(), self.models[j].as_str(), s))
            .collect()
    }
}

/// How many times each pair of models was compared, from `votes`.
pub fn pair_counts(votes: &[Vote]) -> Vec<(String, String, u64)> {
    let mut out: Vec<(String, String, u64)> = Vec::new();
    for v in votes {
        for (a, b, _) in v.pairs() {
            match out.iter_mut().find(|(x, y, _)| x == a && y == b) {
                Some(row) => row.2 += 1,
                None => out.push((a.to_owned(), b.to_owned(), 1)),
            }
        }
    }
    out
}

/// An arena's models from its row: the `models` column, or (a pair's row
/// from before it) `model_a` and `model_b`.
fn models_of(a: String, b: String, models: Option<String>) -> Vec<String> {
    models
        .and_then(|m| serde_json::from_str::<Vec<String>>(&m).ok())
        .filter(|m| m.len() >= 2)
        .unwrap_or_else(|| vec![a, b])
}

impl Store {
    pub fn open_arena(&self, a: &Arena) -> Result<(), StoreError> {
        let first = |i: usize| a.models.get(i).map_or("", String::as_str);
        let models = serde_json::to_string(&a.models).unwrap_or_default();
        self.conn
            .lock()
            .prepare_cached(
                "INSERT INTO arena (id, route, model_a, model_b, models, key, excerpt, created, expires)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)",
            )
            .and_then(|mut s| {
                s.execute(params![
                    a.id,
                    a.route,
                    first(0),
                    first(1),
                    models,
                    a.key,
                    a.excerpt,
                    a.created,
                    a.expires
                ])
            })
            .map(|_| ())
            .map_err(|e| self.err(e))
    }

    /// Closes arena `id` with `outcome` (see the module doc) at `now` for
    /// the key named `key` (`None`: any key may).
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
                "SELECT route, model_a, model_b, models, key, excerpt, created, expires, outcome
                 FROM arena WHERE id = ?1",
                params![id],
                |r| {
                    Ok((
                        Arena {
                            id: id.to_owned(),
                            route: r.get(0)?,
                            models: models_of(r.get(1)?, r.get(2)?, r.get(3)?),
                            key: r.get(4)?,
                            excerpt: r.get(5)?,
                            created: r.get(6)?,
                            expires: r.get(7)?,
                        },
                        r.get::<_, Option<String>>(8)?,
                    ))
                },
            )
            .optional()
            .map_err(|e| self.err(e))?;
        let (min, max) = sizes(outcome);
        // Another key learns nothing of an arena, not even its vote.
        let closed = match row {
            None => Closed::Unknown,
            Some((a, _)) if key.is_some_and(|k| k != a.key) => Closed::NotYours,
            Some((_, Some(done))) => Closed::Already(done),
            Some((a, None)) if a.expires <= now => Closed::Unknown,
            Some((a, None)) if a.models.len() < min || a.models.len() > max => {
                Closed::Misfit(a.models.len())
            }
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

    /// How many times each pair of `route`'s models was compared by votes.
    pub fn pair_counts(&self, route: &str) -> Result<Vec<(String, String, u64)>, StoreError> {
        Ok(pair_counts(&self.votes(route)?))
    }

    /// Every vote (not skips) of `route`, oldest first.
    pub fn votes(&self, route: &str) -> Result<Vec<Vote>, StoreError> {
        let conn = self.conn.lock();
        let mut stmt = conn
            .prepare_cached(
                "SELECT model_a, model_b, models, outcome, voted_at FROM arena
                 WHERE route = ?1 AND outcome IS NOT NULL AND outcome != 'skip'
                 ORDER BY voted_at, id",
            )
            .map_err(|e| self.err(e))?;
        let rows = stmt
            .query_map(params![route], |r| {
                Ok(Vote {
                    models: models_of(r.get(0)?, r.get(1)?, r.get(2)?),
                    outcome: r.get(3)?,
                    at: r.get::<_, Option<i64>>(4)?.unwrap_or(0),
                })
            })
            .map_err(|e| self.err(e))?;
        rows.collect::<Result<_, _>>().map_err(|e| self.err(e))
    }
}

#[cfg(test)]
mod tests;
