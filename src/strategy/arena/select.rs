//! Which contestants answer a request: the ones it names in its
//! `contestants` field (2 to 6 distinct names of the route's pool: using
//! the route is the permission to use them), or else a pair chosen by the
//! route's `pairs` (at random, or `balanced`: a pair with the fewest votes
//! so far).

use rand::seq::IndexedRandom;
use serde_json::Value;

use super::{Arena, Pairs};
use crate::error::ModelError;
use crate::store::arena::MAX_CONTESTANTS;
use crate::wire::ChatRequest;

/// The request field that names the contestants (taken out of what the
/// contestants receive).
pub const FIELD: &str = "contestants";
/// Characters of a name echoed in an error.
const ECHO: usize = 60;

fn bad(message: String) -> ModelError {
    ModelError::BadRequest {
        message,
        param: Some(FIELD),
    }
}

impl Arena {
    /// The pool's names, for an error.
    fn pool(&self) -> String {
        self.contestants
            .iter()
            .map(|c| format!("\"{}\"", c.name))
            .collect::<Vec<_>>()
            .join(", ")
    }

    /// The contestants `req` names, as positions in the pool in its
    /// order; `None` when it names none (absent or null).
    pub(super) fn named(&self, req: &ChatRequest) -> Result<Option<Vec<usize>>, ModelError> {
        let list = match req.extra.get(FIELD) {
            None | Some(Value::Null) => return Ok(None),
            Some(Value::Array(list)) => list,
            Some(_) => {
                return Err(bad(format!(
                    "`{FIELD}` must be a list of 2 to {MAX_CONTESTANTS} model names of arena \"{}\" ({}).",
                    self.name,
                    self.pool()
                )));
            }
        };
        if list.len() < 2 || list.len() > MAX_CONTESTANTS {
            return Err(bad(format!(
                "`{FIELD}` names {} model{}: an arena battle has 2 to {MAX_CONTESTANTS} contestants (of {}).",
                list.len(),
                if list.len() == 1 { "" } else { "s" },
                self.pool()
            )));
        }
        let mut out = Vec::with_capacity(list.len());
        for item in list {
            let Some(name) = item.as_str() else {
                return Err(bad(format!(
                    "`{FIELD}` must list model names (strings); allowed: {}.",
                    self.pool()
                )));
            };
            let shown: String = name.chars().take(ECHO).collect();
            let Some(at) = self.contestants.iter().position(|c| *c.name == *name) else {
                return Err(bad(format!(
                    "\"{shown}\" is not a contestant of arena \"{}\"; allowed: {}.",
                    self.name,
                    self.pool()
                )));
            };
            if out.contains(&at) {
                return Err(bad(format!(
                    "`{FIELD}` names \"{shown}\" twice; each contestant answers once."
                )));
            }
            out.push(at);
        }
        Ok(Some(out))
    }

    /// The two contestants of a request that names none (positions), in
    /// no order yet.
    pub(super) async fn pair(&self) -> (usize, usize) {
        let k = self.contestants.len();
        let all: Vec<(usize, usize)> = (0..k)
            .flat_map(|i| (i + 1..k).map(move |j| (i, j)))
            .collect();
        let candidates = match self.pairs {
            Pairs::Random => all,
            Pairs::Balanced => self.least_voted(all).await,
        };
        candidates
            .choose(&mut rand::rng())
            .copied()
            .unwrap_or((0, 1.min(k.saturating_sub(1))))
    }

    /// The pairs compared the fewest times so far (all of them when the
    /// votes cannot be read).
    async fn least_voted(&self, all: Vec<(usize, usize)>) -> Vec<(usize, usize)> {
        let Ok(counts) = self.store.pair_counts(&self.name).await else {
            return all;
        };
        let name = |i: usize| &*self.contestants[i].name;
        let count = |&(i, j): &(usize, usize)| -> u64 {
            counts
                .iter()
                .filter(|(a, b, _)| {
                    (a == name(i) && b == name(j)) || (a == name(j) && b == name(i))
                })
                .map(|(_, _, n)| n)
                .sum()
        };
        let fewest = all.iter().map(count).min().unwrap_or(0);
        all.into_iter().filter(|p| count(p) == fewest).collect()
    }
}
