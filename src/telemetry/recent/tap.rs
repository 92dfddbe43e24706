//! [`Tap`]: one request's event and attempt sink while the ring is on. It
//! hands every line to telemetry as before (metrics, spans, the event log
//! when there is one) and keeps the same line for the request's record,
//! unserialized: an attempt's and the `request` line's own fields (with an
//! event log, the attempt line the log writes, shared), another event
//! bounded. The record is listed as running from the start; the `request`
//! line closes it and puts it in the ring, and a tap dropped before that
//! takes it off the list (a request cancelled or panicked before it was
//! recorded).

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{Map, Value};
use tokio::time::Instant;

use super::bound::{self, AttemptLine, Gathered};
use super::{Listed, Recent, Record};
use crate::sink::{AttemptRecord, AttemptSink, EventSink, RequestEnd};
use crate::telemetry::attempt::AttemptEvent;
use crate::telemetry::{Event, EventBody, Telemetry, attempt, request};

/// Attempt `r`'s line for the log, with its own `fields`.
fn event(r: &AttemptRecord, fields: Box<AttemptEvent>) -> Event {
    let who = &r.who;
    let body = EventBody::Attempt(fields);
    Event::of(
        who.request_id.clone(),
        who.route.clone(),
        "attempt",
        body,
        r.started_at,
    )
}

/// One request's sink: telemetry's, plus its record.
pub struct Tap {
    telemetry: Arc<Telemetry>,
    record: Arc<Record>,
    /// Where it is listed among the running, while it is.
    listed_at: Listed,
    listed: AtomicBool,
    /// The bytes its id and route take in a line.
    head: usize,
}

impl Tap {
    /// The sink of request `id`, started at `at`, listed as running.
    pub(in crate::telemetry) fn new(
        telemetry: Arc<Telemetry>,
        id: &Arc<str>,
        route: &Arc<str>,
        strategy: &'static str,
        key: &Arc<str>,
        at: SystemTime,
    ) -> Self {
        let recent = telemetry.recent();
        let record = Arc::new(Record {
            id: id.clone(),
            route: route.clone(),
            key: key.clone(),
            strategy,
            started_at: at
                .duration_since(UNIX_EPOCH)
                .map(|d| d.as_secs())
                .unwrap_or(0),
            started: Instant::now(),
            seq: recent.seq.fetch_add(1, Ordering::Relaxed),
            status: std::sync::OnceLock::new(),
            gathered: Mutex::new(Gathered::default()),
        });
        let listed_at = recent.start(record.clone());
        Tap {
            telemetry,
            record,
            listed_at,
            listed: AtomicBool::new(true),
            head: bound::head_len(id, route),
        }
    }

    fn recent(&self) -> &Recent {
        self.telemetry.recent()
    }
}

impl Drop for Tap {
    fn drop(&mut self) {
        if self.listed.swap(false, Ordering::AcqRel) {
            self.recent().unlist(self.listed_at, &self.record);
        }
    }
}

impl EventSink for Tap {
    /// Always: the ring keeps events even without an event log.
    fn events_enabled(&self) -> bool {
        true
    }

    fn emit(
        &self,
        request_id: &str,
        route: &Arc<str>,
        event: &'static str,
        fields: Map<String, Value>,
        at: SystemTime,
    ) {
        if self.telemetry.events_enabled() {
            let line = Event::fields_line(request_id, route, event, fields.clone(), at);
            self.record.gathered.lock().event(line);
            self.telemetry.emit(request_id, route, event, fields, at);
        } else {
            let line = Event::fields_line(request_id, route, event, fields, at);
            self.record.gathered.lock().event(line);
        }
    }

    /// The `request` line: the record is complete and joins the ring.
    fn request(&self, end: &RequestEnd) {
        let line = request::line(end);
        if self.telemetry.events_enabled() {
            let who = &end.who;
            let body = EventBody::Request(line.clone());
            let ev = Event::of(
                who.request_id.clone(),
                who.route.clone(),
                "request",
                body,
                end.started_at,
            );
            self.telemetry.emit_event(ev);
        }
        self.record.gathered.lock().request = Some((line, end.started_at));
        let _ = self.record.status.set(end.status);
        if self.listed.swap(false, Ordering::AcqRel) {
            self.recent().push(self.record.clone());
            self.recent().unlist(self.listed_at, &self.record);
        }
    }
}

impl AttemptSink for Tap {
    /// Without an event log the ring keeps the line's own fields; with
    /// one, the line the log writes (shared), or a copy cut to the
    /// ring's bounds when a text is over them.
    fn record(&self, r: &AttemptRecord) {
        self.telemetry.account(r);
        let mut fields = attempt::line(r);
        let mut cut = 0;
        let kept = if !self.telemetry.events_enabled() {
            if bound::too_long(&fields) {
                cut = bound::cut(&mut fields);
            }
            AttemptLine::Own(fields, r.started_at)
        } else if bound::too_long(&fields) {
            let mut copy = fields.clone();
            cut = bound::cut(&mut copy);
            self.telemetry.emit_event(event(r, fields));
            AttemptLine::Own(copy, r.started_at)
        } else {
            let line = Arc::new(event(r, fields));
            self.telemetry.emit_shared(&line);
            AttemptLine::Shared(line)
        };
        let mut g = self.record.gathered.lock();
        if g.attempt(kept, self.head) {
            g.fields_cut += cut;
        }
    }
}
