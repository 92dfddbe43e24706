//! The ring of recent request records behind `GET /v1/requests`: the
//! last `console.recent_requests` finished requests of this gateway
//! instance, and the requests still running, each with the event log's
//! own lines for it (its `request` line, its `attempt` lines, its other
//! events), bounded per record (`bound`). It is fed by the same records
//! the event log is written from, through a per-request [`Tap`] (`tap`),
//! whether or not an event log is configured: one source, not a second
//! bookkeeping. The lines are kept as built and serialized when read.
//!
//! A record is listed from its request's start (`running`: bounded by
//! the requests in flight, which the server bounds) and moves to the ring
//! when its `request` line closes it; a request that never closes (its
//! sink dropped first) leaves with its sink. Both lists are kept in
//! shards, one per serving thread (`shard`), and the ring's older records
//! let go a batch at a time (`cold`): a reader merges the shards.
//!
//! Request ids come from the client (`x-request-id`), so two records may
//! share one: a look-up by id answers the newest.

mod bound;
mod cold;
mod shard;
mod tap;

use std::cmp::Reverse;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::{Event, EventBody};
use bound::Gathered;
pub use bound::{FIELD_BYTES, FIELD_CHARS, MAX_ATTEMPTS, MAX_EVENTS, RECORD_BYTES};
use shard::Shard;
pub use tap::Tap;

/// The status a record shows while its request runs.
pub const RUNNING: &str = "running";

/// One request, running or finished.
pub struct Record {
    pub id: Arc<str>,
    pub route: Arc<str>,
    pub key: Arc<str>,
    pub strategy: &'static str,
    /// Unix time it started, in seconds.
    pub started_at: u64,
    /// When it started, for its duration so far.
    started: Instant,
    /// Its order among records (a later start, a larger one).
    seq: u64,
    /// Its final status, once its `request` line closed it.
    status: OnceLock<&'static str>,
    /// Its lines, which a late attempt (one still finishing when the
    /// client got its answer) may still join.
    gathered: Mutex<Gathered>,
}

/// The fields a list shows, in this order.
#[cfg(test)]
const SUMMARY: [&str; 8] = [
    "id",
    "route",
    "key",
    "status",
    "started_at",
    "duration_ms",
    "cost_usd",
    "strategy",
];

impl Record {
    /// Its final status, or `running`.
    pub fn status(&self) -> &'static str {
        self.status.get().copied().unwrap_or(RUNNING)
    }

    /// `{"id", "route", "key", "status", "started_at", "duration_ms",
    /// "cost_usd", "strategy"}`: the numbers are the `request` line's;
    /// while it runs, its duration so far and its attempts' cost so far
    /// (`null` before one has a price).
    pub fn summary(&self) -> Value {
        let (duration_ms, cost_usd) = {
            let g = self.gathered.lock();
            match &g.request {
                Some((line, _)) => (Value::from(line.duration_ms), Value::from(line.cost_usd)),
                None => (
                    Value::from(super::ms(self.started.elapsed())),
                    g.cost_usd.map_or(Value::Null, Value::from),
                ),
            }
        };
        let mut out = Map::new();
        out.insert("id".into(), Value::from(&*self.id));
        out.insert("route".into(), Value::from(&*self.route));
        out.insert("key".into(), Value::from(&*self.key));
        out.insert("status".into(), Value::from(self.status()));
        out.insert("started_at".into(), Value::from(self.started_at));
        out.insert("duration_ms".into(), duration_ms);
        out.insert("cost_usd".into(), cost_usd);
        out.insert("strategy".into(), Value::from(self.strategy));
        Value::Object(out)
    }

    /// The summary plus `attempts` and `events` (the event log's lines),
    /// how many of each were dropped and how many fields were cut, and
    /// the whole `request` line (`null` while it runs).
    pub fn detail(&self) -> Value {
        let mut out = match self.summary() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        let g = self.gathered.lock();
        out.insert(
            "attempts".into(),
            Value::Array(g.attempts(&self.id, &self.route)),
        );
        out.insert("events".into(), Value::Array(g.events()));
        out.insert("attempts_dropped".into(), Value::from(g.attempts_dropped));
        out.insert("events_dropped".into(), Value::from(g.events_dropped));
        out.insert("fields_cut".into(), Value::from(g.fields_cut));
        let request = g
            .request
            .as_ref()
            .and_then(|(line, at)| {
                let body = EventBody::Request(line.clone());
                let ev = Event::of(self.id.clone(), self.route.clone(), "request", body, *at);
                serde_json::to_value(&ev).ok()
            })
            .unwrap_or(Value::Null);
        drop(g);
        out.insert("request".into(), request);
        Value::Object(out)
    }
}

/// What a list asks for; `None` matches every record.
#[derive(Debug, Default, Clone)]
pub struct Filter {
    pub route: Option<String>,
    pub key: Option<String>,
    /// A status (`200`, `stream_error`) or a class (`2xx`, `5xx`).
    pub status: Option<String>,
    /// Started at or after this unix second.
    pub since: Option<u64>,
    /// Started at or before this unix second.
    pub until: Option<u64>,
    /// Leave the requests still running out (`running=false`).
    pub finished_only: bool,
    pub limit: usize,
}

impl Filter {
    fn matches(&self, r: &Record) -> bool {
        let is = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        is(&self.route, &r.route)
            && is(&self.key, &r.key)
            && self
                .status
                .as_deref()
                .is_none_or(|s| status_matches(s, r.status()))
            && self.since.is_none_or(|s| r.started_at >= s)
            && self.until.is_none_or(|u| r.started_at <= u)
    }
}

/// `want` is `have`, or its class (`4xx` for `404`).
fn status_matches(want: &str, have: &str) -> bool {
    if want == have {
        return true;
    }
    match want.as_bytes() {
        [c, b'x', b'x'] if c.is_ascii_digit() => {
            have.len() == 3 && have.as_bytes()[0] == *c && have.bytes().all(|b| b.is_ascii_digit())
        }
        _ => false,
    }
}

/// Where a running request's record is listed: its shard and its slot
/// there.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Listed {
    shard: usize,
    slot: usize,
}

/// How often (in finished records) a push also sweeps another shard:
/// every shard is swept once in `SWEEP * SHARDS` finished requests.
const SWEEP: u64 = 64;

/// The ring: the newest `cap` finished records, and the records of the
/// requests running, kept in shards by the thread that serves them
/// (`shard`).
pub struct Recent {
    cap: AtomicUsize,
    shards: Box<[Shard]>,
    /// Records started so far: their order.
    seq: AtomicU64,
    /// Records finished so far: the newest one's number.
    finished: AtomicU64,
}

impl Recent {
    /// A ring of at most `cap` records (0: off).
    pub fn new(cap: usize) -> Self {
        Recent {
            cap: AtomicUsize::new(cap),
            shards: (0..shard::SHARDS).map(|_| Shard::default()).collect(),
            seq: AtomicU64::new(0),
            finished: AtomicU64::new(0),
        }
    }

    /// Whether the ring keeps anything (`console.recent_requests > 0`).
    pub fn enabled(&self) -> bool {
        self.cap.load(Ordering::Relaxed) > 0
    }

    /// The ring's size and its newest record's number.
    fn bounds(&self) -> (usize, u64) {
        (
            self.cap.load(Ordering::Relaxed),
            self.finished.load(Ordering::Acquire),
        )
    }

    /// Keeps at most `cap` records from now on (a reload); the oldest
    /// beyond it go at once.
    pub fn resize(&self, cap: usize) {
        self.cap.store(cap, Ordering::Relaxed);
        let newest = self.finished.load(Ordering::Acquire);
        for s in &self.shards {
            s.resize(newest, cap);
        }
    }

    /// Lists the record of a request that starts now, in the calling
    /// thread's shard.
    fn start(&self, record: Arc<Record>) -> Listed {
        let shard = shard::mine();
        let slot = self.shards[shard].start(record);
        Listed { shard, slot }
    }

    /// The record listed at `at` is no longer running (it is in the ring
    /// already, or never will be).
    fn unlist(&self, at: Listed, record: &Arc<Record>) {
        if let Some(s) = self.shards.get(at.shard) {
            s.unlist(at.slot, record);
        }
    }

    /// A finished record joins the ring (before it leaves the running,
    /// so a reader always finds it), in the calling thread's shard.
    fn push(&self, record: Arc<Record>) {
        let cap = self.cap.load(Ordering::Relaxed);
        if cap == 0 {
            return;
        }
        let n = self.finished.fetch_add(1, Ordering::AcqRel) + 1;
        self.shards[shard::mine()].push(n, record, cap);
        if n.is_multiple_of(SWEEP) {
            let other = (n / SWEEP) as usize % self.shards.len();
            self.shards[other].sweep(n, cap);
        }
    }

    /// The finished records the ring keeps that `want` takes, newest
    /// first.
    fn finished(&self, want: &dyn Fn(&Record) -> bool) -> Vec<Arc<Record>> {
        let (cap, newest) = self.bounds();
        let mut found = Vec::new();
        for s in &self.shards {
            s.finished_into((newest, cap), want, &mut found);
        }
        found.sort_unstable_by_key(|(n, _)| Reverse(*n));
        found.into_iter().map(|(_, r)| r).collect()
    }

    /// The records listed as running that `want` takes, the latest
    /// started first.
    fn running_now(&self, want: &dyn Fn(&Record) -> bool) -> Vec<Arc<Record>> {
        let mut found = Vec::new();
        for s in &self.shards {
            s.running_into(want, &mut found);
        }
        found.sort_unstable_by_key(|r| Reverse(r.seq));
        found
    }

    /// The records `filter` matches: those running first (the latest
    /// started first), then the finished, most recently finished first;
    /// at most `filter.limit`.
    pub fn list(&self, filter: &Filter) -> Vec<Arc<Record>> {
        let want = |r: &Record| filter.matches(r);
        let mut out: Vec<Arc<Record>> = Vec::new();
        if !filter.finished_only {
            out = self.running_now(&want);
            out.truncate(filter.limit);
        }
        let left = filter.limit - out.len();
        out.extend(self.finished(&want).into_iter().take(left));
        out
    }

    /// The newest record with id `id` (of key `key`, when given): a
    /// running one first.
    pub fn get(&self, id: &str, key: Option<&str>) -> Option<Arc<Record>> {
        let is = |r: &Record| *r.id == *id && key.is_none_or(|k| *r.key == *k);
        let running = self.running_now(&is).into_iter().next();
        running.or_else(|| self.finished(&is).into_iter().next())
    }

    /// How many finished records it holds.
    pub fn len(&self) -> usize {
        let (cap, newest) = self.bounds();
        self.shards.iter().map(|s| s.count_kept(newest, cap)).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// How many requests it lists as running.
    pub fn running(&self) -> usize {
        self.shards.iter().map(Shard::count_running).sum()
    }
}

#[cfg(test)]
mod tests;
