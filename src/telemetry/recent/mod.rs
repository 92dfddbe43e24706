//! The ring of recent request records behind `GET /v1/requests`: the
//! last `console.recent_requests` finished requests of this gateway
//! instance, each with the event log's own lines for it (its `request`
//! line, its `attempt` lines, its other events), bounded per record
//! (`bound`). It is fed by the same records the event log is written
//! from, through a per-request [`Tap`] (`tap`), whether or not an event
//! log is configured: one source, not a second bookkeeping.
//!
//! Request ids come from the client (`x-request-id`), so two records may
//! share one: a look-up by id answers the newest.

mod bound;
mod tap;

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use serde_json::{Map, Value};

use bound::Gathered;
pub use bound::{FIELD_BYTES, FIELD_CHARS, MAX_ATTEMPTS, MAX_EVENTS, RECORD_BYTES};
pub use tap::Tap;

/// One finished request in the ring.
pub struct Record {
    pub id: String,
    pub route: Arc<str>,
    pub key: Arc<str>,
    pub status: String,
    /// Unix time it started, in seconds.
    pub started_at: u64,
    /// Its `request` line, as the event log has it.
    request: Map<String, Value>,
    /// Its other lines (attempts and events), which a late attempt (one
    /// still finishing when the client got its answer) may still join.
    gathered: Arc<Mutex<Gathered>>,
}

/// The fields a list shows, in this order.
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
    /// `{"id", "route", "key", "status", "started_at", "duration_ms",
    /// "cost_usd", "strategy"}`: the numbers are the `request` line's.
    pub fn summary(&self) -> Value {
        let mut out = Map::new();
        for name in SUMMARY {
            let v = match name {
                "id" => Value::from(self.id.as_str()),
                "route" => Value::from(&*self.route),
                "key" => Value::from(&*self.key),
                "status" => Value::from(self.status.as_str()),
                "started_at" => Value::from(self.started_at),
                _ => self.request.get(name).cloned().unwrap_or(Value::Null),
            };
            out.insert(name.to_owned(), v);
        }
        Value::Object(out)
    }

    /// The summary plus `attempts` and `events` (the event log's lines),
    /// how many of each were dropped and how many fields were cut, and
    /// the whole `request` line.
    pub fn detail(&self) -> Value {
        let mut out = match self.summary() {
            Value::Object(m) => m,
            _ => Map::new(),
        };
        let g = self.gathered.lock();
        let mut attempts = g.attempts.clone();
        // In the order they were made (they finish in any order).
        attempts.sort_by_key(|a| a.get("attempt").and_then(Value::as_u64));
        out.insert("attempts".into(), Value::Array(attempts));
        out.insert("events".into(), Value::Array(g.events.clone()));
        out.insert("attempts_dropped".into(), Value::from(g.attempts_dropped));
        out.insert("events_dropped".into(), Value::from(g.events_dropped));
        out.insert("fields_cut".into(), Value::from(g.fields_cut));
        drop(g);
        out.insert("request".into(), Value::Object(self.request.clone()));
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
                .is_none_or(|s| status_matches(s, &r.status))
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

/// The ring: the newest `cap` records, oldest first.
pub struct Recent {
    cap: AtomicUsize,
    ring: Mutex<VecDeque<Arc<Record>>>,
}

impl Recent {
    /// A ring of at most `cap` records (0: off).
    pub fn new(cap: usize) -> Self {
        Recent {
            cap: AtomicUsize::new(cap),
            ring: Mutex::new(VecDeque::new()),
        }
    }

    /// Whether the ring keeps anything (`console.recent_requests > 0`).
    pub fn enabled(&self) -> bool {
        self.cap.load(Ordering::Relaxed) > 0
    }

    /// Keeps at most `cap` records from now on (a reload); the oldest
    /// beyond it go at once.
    pub fn resize(&self, cap: usize) {
        self.cap.store(cap, Ordering::Relaxed);
        let mut ring = self.ring.lock();
        while ring.len() > cap {
            ring.pop_front();
        }
        if cap == 0 {
            ring.shrink_to_fit();
        }
    }

    fn push(&self, record: Record) {
        let cap = self.cap.load(Ordering::Relaxed);
        if cap == 0 {
            return;
        }
        let mut ring = self.ring.lock();
        while ring.len() >= cap {
            ring.pop_front();
        }
        ring.push_back(Arc::new(record));
    }

    /// The records `filter` matches, most recently finished first, at
    /// most `filter.limit`.
    pub fn list(&self, filter: &Filter) -> Vec<Arc<Record>> {
        self.ring
            .lock()
            .iter()
            .rev()
            .filter(|r| filter.matches(r))
            .take(filter.limit)
            .cloned()
            .collect()
    }

    /// The newest record with id `id` (of key `key`, when given).
    pub fn get(&self, id: &str, key: Option<&str>) -> Option<Arc<Record>> {
        self.ring
            .lock()
            .iter()
            .rev()
            .find(|r| r.id == id && key.is_none_or(|k| *r.key == *k))
            .cloned()
    }

    /// How many records it holds.
    pub fn len(&self) -> usize {
        self.ring.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests;
