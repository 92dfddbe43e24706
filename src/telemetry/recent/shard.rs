//! One shard of the ring: the records of the requests one thread started
//! and finished (a few threads share one where there are more threads
//! than [`SHARDS`]). A request starts, runs and ends on one serving
//! thread, so its record is listed, kept and let go by that thread,
//! under locks no other thread takes but a reader's: no lock's cache
//! line moves between cores for it, and a record's memory is freed by
//! the thread that allocated it (the allocator's fast path). With one
//! ring shared by every thread, 1,000 records cost a request about
//! 1.4 µs of CPU at 64 connections; in shards, about 1.2
//! (`benches/harness/compare.sh`'s load, against a ring that is off).
//!
//! A finished record carries its number among all the ring's finished
//! records (`Recent`'s count): the ring keeps the newest `cap` of them,
//! whichever shard holds them. A shard lets its older ones go when its
//! thread finishes another; one whose thread stopped serving is swept
//! by the others now and then ([`Shard::sweep`]), and readers skip what
//! a shard still holds but the ring no longer keeps. So a shard holds at
//! most `cap` records and a batch ([`super::cold::BATCH`]), and the ring
//! about `cap`: when the requests move from one thread to another, up to
//! twice that until the sweeps come by (within 1,024 finished requests).

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;

use super::Record;

/// How many shards a ring has.
pub const SHARDS: usize = 16;

/// The shard of the calling thread: each thread takes the next on its
/// first call, so the serving threads, started together, get their own.
pub fn mine() -> usize {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    thread_local! {
        static MINE: usize = NEXT.fetch_add(1, Ordering::Relaxed) % SHARDS;
    }
    MINE.with(|m| *m)
}

/// Whether the finished record numbered `n` is among the newest `cap`
/// when the newest is `newest`.
pub fn kept(n: u64, newest: u64, cap: usize) -> bool {
    n.saturating_add(cap as u64) > newest
}

/// The requests running, in slots a finished one frees.
#[derive(Default)]
struct Running {
    slots: Vec<Option<Arc<Record>>>,
    free: Vec<usize>,
}

/// One thread's records: those it finished, by number, oldest first;
/// and those it runs. Aligned apart so that two shards' locks never
/// share a cache line.
#[derive(Default)]
#[repr(align(128))]
pub struct Shard {
    finished: Mutex<VecDeque<(u64, Arc<Record>)>>,
    running: Mutex<Running>,
}

impl Shard {
    /// Lists `record` as running: its slot.
    pub fn start(&self, record: Arc<Record>) -> usize {
        let mut r = self.running.lock();
        match r.free.pop() {
            Some(slot) => {
                r.slots[slot] = Some(record);
                slot
            }
            None => {
                r.slots.push(Some(record));
                r.slots.len() - 1
            }
        }
    }

    /// The record in `slot` is no longer running (it is in the ring
    /// already, or never will be).
    pub fn unlist(&self, slot: usize, record: &Arc<Record>) {
        let mut r = self.running.lock();
        let mine = r
            .slots
            .get(slot)
            .and_then(Option::as_ref)
            .is_some_and(|have| Arc::ptr_eq(have, record));
        if mine {
            r.slots[slot] = None;
            r.free.push(slot);
        }
    }

    /// Keeps finished record `record`, numbered `n`; once the ring no
    /// longer keeps [`super::cold::BATCH`] of its older ones, lets them go
    /// together.
    pub fn push(&self, n: u64, record: Arc<Record>, cap: usize) {
        let old = {
            let mut f = self.finished.lock();
            f.push_back((n, record));
            let batch = super::cold::BATCH.min(cap);
            let full = f.len() > cap + batch;
            let stale = f.get(batch - 1).is_some_and(|(m, _)| !kept(*m, n, cap));
            (full || stale).then(|| take_stale(&mut f, n, cap))
        };
        if let Some(old) = old {
            super::cold::drop_all(old);
        }
    }

    /// Lets go of what the ring no longer keeps, unless the shard's
    /// thread (or a reader) holds it now.
    pub fn sweep(&self, newest: u64, cap: usize) {
        if let Some(mut f) = self.finished.try_lock() {
            trim(&mut f, newest, cap);
        }
    }

    /// Lets go of what the ring no longer keeps (a resize).
    pub fn resize(&self, newest: u64, cap: usize) {
        let mut f = self.finished.lock();
        trim(&mut f, newest, cap);
        if cap == 0 {
            f.shrink_to_fit();
        }
    }

    /// Adds the finished records the ring keeps that `want` takes, with
    /// their numbers.
    pub fn finished_into(
        &self,
        (newest, cap): (u64, usize),
        want: &dyn Fn(&Record) -> bool,
        out: &mut Vec<(u64, Arc<Record>)>,
    ) {
        let f = self.finished.lock();
        let found = f.iter().filter(|(n, r)| kept(*n, newest, cap) && want(r));
        out.extend(found.cloned());
    }

    /// How many finished records the ring keeps here.
    pub fn count_kept(&self, newest: u64, cap: usize) -> usize {
        let f = self.finished.lock();
        f.iter().filter(|(n, _)| kept(*n, newest, cap)).count()
    }

    /// Adds the records listed as running that `want` takes (finished ones
    /// still listed are in the ring already, and left out).
    pub fn running_into(&self, want: &dyn Fn(&Record) -> bool, out: &mut Vec<Arc<Record>>) {
        let r = self.running.lock();
        let found = r
            .slots
            .iter()
            .flatten()
            .filter(|r| is_running(r) && want(r));
        out.extend(found.cloned());
    }

    /// How many records it lists as running.
    pub fn count_running(&self) -> usize {
        let r = self.running.lock();
        r.slots.iter().flatten().filter(|r| is_running(r)).count()
    }
}

/// Whether `r` is still running: a finished one stays listed for a
/// moment after it joined the ring.
fn is_running(r: &Record) -> bool {
    r.status.get().is_none()
}

/// Lets the records the ring no longer keeps go from the front, and
/// never holds more than `cap`. Two threads sharing a shard may put
/// their records in slightly out of order: one left behind a newer one
/// goes with it, and readers skip it meanwhile.
fn trim(f: &mut VecDeque<(u64, Arc<Record>)>, newest: u64, cap: usize) {
    drop(take_stale(f, newest, cap));
}

/// [`trim`], what it lets go handed back (to be dropped outside the
/// lock, by [`super::cold::drop_all`]).
fn take_stale(f: &mut VecDeque<(u64, Arc<Record>)>, newest: u64, cap: usize) -> Vec<Arc<Record>> {
    let mut out = Vec::new();
    while let Some((n, _)) = f.front() {
        if kept(*n, newest, cap) && f.len() <= cap {
            break;
        }
        if let Some((_, r)) = f.pop_front() {
            out.push(r);
        }
    }
    out
}
