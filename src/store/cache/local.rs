//! The response cache in this process's memory: a map from key to a slot
//! of a slab, the slots chained most recently used first, so a get, a put
//! and an eviction are O(1). A get moves its entry to the front; a put
//! evicts from the back (least recently used) until both bounds hold.
//!
//! An entry's size is its body, route and key lengths in bytes (what it
//! holds that grows with the answer; the fixed overhead of a slot, some
//! 150 bytes, is not counted). An entry larger than `max_bytes` alone is
//! not stored. Its TTL is checked on get against the injected [`Clock`]:
//! an expired entry is a miss and is dropped then (until then it counts
//! against the bounds, and goes first if unused).
//!
//! One lock guards it all, never held across an await; `clear(Some(route))`
//! scans the slab [`CLEAR_CHUNK`] slots at a time, letting go of the lock
//! between chunks, and `clear(None)` frees the old entries after letting
//! go.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use parking_lot::Mutex;

use super::{Answers, Entry, Stats};
use crate::clock::Clock;
use crate::config::CacheConfig;
use crate::store::StoreError;

/// Slots `clear(Some(route))` looks at per hold of the lock.
pub const CLEAR_CHUNK: usize = 4096;

/// No slot (the chain's ends).
const NIL: usize = usize::MAX;

/// The cache's bytes for one entry (see the module doc).
pub fn size_of(key: &str, entry: &Entry) -> u64 {
    (entry.body.len() + entry.route.len() + key.len()) as u64
}

struct Slot {
    key: String,
    entry: Entry,
    expires: SystemTime,
    size: u64,
    prev: usize,
    next: usize,
}

#[derive(Default)]
struct Lru {
    map: HashMap<String, usize>,
    /// `None`: a free slot (its index is in `free`).
    slots: Vec<Option<Slot>>,
    free: Vec<usize>,
    /// Most recently used.
    head: Option<usize>,
    /// Least recently used.
    tail: Option<usize>,
    bytes: u64,
}

impl Lru {
    fn slot(&mut self, i: usize) -> Option<&mut Slot> {
        self.slots.get_mut(i).and_then(Option::as_mut)
    }

    fn unlink(&mut self, i: usize) {
        let Some((prev, next)) = self.slot(i).map(|s| (s.prev, s.next)) else {
            return;
        };
        match self.slot(prev) {
            Some(p) => p.next = next,
            None => self.head = (next != NIL).then_some(next),
        }
        match self.slot(next) {
            Some(n) => n.prev = prev,
            None => self.tail = (prev != NIL).then_some(prev),
        }
    }

    fn push_front(&mut self, i: usize) {
        let old = self.head;
        if let Some(s) = self.slot(i) {
            s.prev = NIL;
            s.next = old.unwrap_or(NIL);
        }
        match old.and_then(|h| self.slot(h)) {
            Some(h) => h.prev = i,
            None => self.tail = Some(i),
        }
        self.head = Some(i);
    }

    /// Takes slot `i` out; its entry.
    fn remove(&mut self, i: usize) -> Option<Slot> {
        self.unlink(i);
        let slot = self.slots.get_mut(i)?.take()?;
        self.map.remove(&slot.key);
        self.free.push(i);
        self.bytes -= slot.size;
        Some(slot)
    }

    fn insert(&mut self, slot: Slot) {
        self.bytes += slot.size;
        let key = slot.key.clone();
        let i = match self.free.pop() {
            Some(i) => {
                self.slots[i] = Some(slot);
                i
            }
            None => {
                self.slots.push(Some(slot));
                self.slots.len() - 1
            }
        };
        self.map.insert(key, i);
        self.push_front(i);
    }

    fn stats(&self) -> Stats {
        Stats {
            entries: self.map.len() as u64,
            bytes: self.bytes,
        }
    }
}

/// Answers kept in this process, within `bounds`.
pub struct LocalAnswers {
    lru: Mutex<Lru>,
    bounds: CacheConfig,
    clock: Clock,
}

impl LocalAnswers {
    pub fn new(bounds: CacheConfig, clock: Clock) -> Self {
        LocalAnswers {
            lru: Mutex::new(Lru::default()),
            bounds,
            clock,
        }
    }
}

#[async_trait]
impl Answers for LocalAnswers {
    async fn get(&self, key: &str) -> Result<Option<Entry>, StoreError> {
        let now = self.clock.now();
        let expired = {
            let mut lru = self.lru.lock();
            let Some(i) = lru.map.get(key).copied() else {
                return Ok(None);
            };
            let fresh = lru
                .slot(i)
                .filter(|s| s.expires > now)
                .map(|s| s.entry.clone());
            if let Some(entry) = fresh {
                lru.unlink(i);
                lru.push_front(i);
                return Ok(Some(entry));
            }
            lru.remove(i)
        };
        drop(expired);
        Ok(None)
    }

    async fn put(&self, key: &str, entry: Entry, ttl: Duration) -> Result<(), StoreError> {
        let size = size_of(key, &entry);
        let expires = self.clock.now() + ttl;
        let mut gone = Vec::new();
        {
            let mut lru = self.lru.lock();
            if let Some(i) = lru.map.get(key).copied() {
                gone.extend(lru.remove(i));
            }
            if size > self.bounds.max_bytes {
                return Ok(());
            }
            while lru.map.len() as u64 >= self.bounds.max_entries
                || lru.bytes + size > self.bounds.max_bytes
            {
                let Some(oldest) = lru.tail else { break };
                gone.extend(lru.remove(oldest));
            }
            lru.insert(Slot {
                key: key.to_owned(),
                entry,
                expires,
                size,
                prev: NIL,
                next: NIL,
            });
        }
        drop(gone);
        Ok(())
    }

    async fn clear(&self, route: Option<&str>) -> Result<u64, StoreError> {
        let Some(route) = route else {
            let old = std::mem::take(&mut *self.lru.lock());
            return Ok(old.map.len() as u64);
        };
        let mut deleted = 0;
        let mut start = 0;
        loop {
            let mut gone = Vec::new();
            let end = {
                let mut lru = self.lru.lock();
                let end = (start + CLEAR_CHUNK).min(lru.slots.len());
                for i in start..end {
                    if lru.slots[i]
                        .as_ref()
                        .is_some_and(|s| s.entry.route == route)
                    {
                        gone.extend(lru.remove(i));
                    }
                }
                (end < lru.slots.len()).then_some(end)
            };
            deleted += gone.len() as u64;
            drop(gone);
            match end {
                Some(end) => start = end,
                None => return Ok(deleted),
            }
        }
    }

    fn stats(&self) -> Stats {
        self.lru.lock().stats()
    }
}

#[cfg(test)]
mod tests;
