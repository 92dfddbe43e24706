//! The shared lease in memory, with the rules of the Redis scripts, so the
//! lane's use of it runs on paused time in unit tests: several
//! [`MemoryLeases::replica`] handles play several replicas.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use parking_lot::Mutex;
use tokio::time::Instant;

use super::{Lease, Renewed, STARVING_TTL};
use crate::store::StoreError;

#[derive(Default)]
struct Inner {
    /// (replica, model) -> (token, expiry).
    holds: HashMap<(String, Arc<str>), (u64, Instant)>,
    fence: u64,
    /// (replica, model, expiry) of a starving replica.
    starving: Option<(String, Arc<str>, Instant)>,
    /// While set, every call fails as if Redis were down.
    down: bool,
}

#[derive(Clone)]
pub struct MemoryLeases {
    inner: Arc<Mutex<Inner>>,
    ttl: Duration,
}

impl MemoryLeases {
    pub fn new(ttl: Duration) -> MemoryLeases {
        MemoryLeases {
            inner: Arc::default(),
            ttl,
        }
    }

    pub fn replica(&self, name: &str) -> Arc<dyn Lease> {
        Arc::new(Replica {
            leases: self.clone(),
            name: name.to_owned(),
        })
    }

    pub fn set_down(&self, down: bool) {
        self.inner.lock().down = down;
    }

    /// The models held now, sorted.
    pub fn held(&self) -> Vec<String> {
        let now = Instant::now();
        let inner = self.inner.lock();
        let mut v: Vec<String> = inner
            .holds
            .iter()
            .filter(|(_, (_, exp))| *exp > now)
            .map(|((_, m), _)| m.to_string())
            .collect();
        v.sort();
        v.dedup();
        v
    }
}

struct Replica {
    leases: MemoryLeases,
    name: String,
}

fn down() -> StoreError {
    StoreError::Redis {
        op: "memory",
        message: "down".into(),
    }
}

#[async_trait]
impl Lease for Replica {
    async fn acquire(
        &self,
        candidates: &[Arc<str>],
        max_models: usize,
        starving: bool,
    ) -> Result<Option<(Arc<str>, u64)>, StoreError> {
        let now = Instant::now();
        let mut st = self.leases.inner.lock();
        if st.down {
            return Err(down());
        }
        st.holds.retain(|_, (_, exp)| *exp > now);
        if st.starving.as_ref().is_some_and(|(_, _, exp)| *exp <= now) {
            st.starving = None;
        }
        let mut models: Vec<Arc<str>> = st.holds.keys().map(|(_, m)| m.clone()).collect();
        models.sort();
        models.dedup();
        let s_model = st.starving.as_ref().map(|(_, m, _)| m.clone());
        let allowed = |m: &Arc<str>| s_model.as_ref().is_none_or(|s| s == m);
        let pick = candidates
            .iter()
            .find(|m| models.contains(m) && allowed(m))
            .or_else(|| {
                (models.len() < max_models)
                    .then(|| candidates.iter().find(|m| allowed(m)))
                    .flatten()
            })
            .cloned();
        let Some(pick) = pick else {
            let mine = st.starving.as_ref().is_none_or(|(r, _, _)| *r == self.name);
            if let (true, true, Some(first)) = (starving, mine, candidates.first()) {
                st.starving = Some((self.name.clone(), first.clone(), now + STARVING_TTL));
            }
            return Ok(None);
        };
        if s_model.as_ref() == Some(&pick) {
            st.starving = None;
        }
        st.fence += 1;
        let token = st.fence;
        let exp = now + self.leases.ttl;
        st.holds
            .insert((self.name.clone(), pick.clone()), (token, exp));
        Ok(Some((pick, token)))
    }

    async fn renew(&self, holds: &[(Arc<str>, u64)]) -> Result<Renewed, StoreError> {
        let now = Instant::now();
        let mut st = self.leases.inner.lock();
        if st.down {
            return Err(down());
        }
        let mut out = Renewed::default();
        for (m, t) in holds {
            match st.holds.get_mut(&(self.name.clone(), m.clone())) {
                Some((token, exp)) if token == t && *exp > now => {
                    *exp = now + self.leases.ttl;
                }
                _ => out.lost.push(m.clone()),
            }
        }
        out.drain = st
            .starving
            .as_ref()
            .is_some_and(|(r, _, exp)| *r != self.name && *exp > now);
        Ok(out)
    }

    async fn release(&self, model: &str, token: u64) -> Result<bool, StoreError> {
        let mut st = self.leases.inner.lock();
        if st.down {
            return Err(down());
        }
        let key = (self.name.clone(), Arc::from(model));
        if st.holds.get(&key).is_some_and(|(t, _)| *t == token) {
            st.holds.remove(&key);
            return Ok(true);
        }
        Ok(false)
    }
}
