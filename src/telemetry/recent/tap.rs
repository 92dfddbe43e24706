//! [`Tap`]: one request's event and attempt sink while the ring is on. It
//! hands every line to telemetry as before (metrics, spans, the event log
//! when there is one) and keeps the same line, serialized once from the
//! same [`Event`], for the ring; the `request` line closes the record and
//! puts it in the ring.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use parking_lot::Mutex;
use serde_json::{Map, Value};

use super::Record;
use super::bound::Gathered;
use crate::sink::{AttemptRecord, AttemptSink, EventSink};
use crate::telemetry::{Event, EventBody, Telemetry};

/// One request's sink: telemetry's, plus what the ring keeps of it.
pub struct Tap {
    telemetry: Arc<Telemetry>,
    gathered: Arc<Mutex<Gathered>>,
}

impl Tap {
    pub(in crate::telemetry) fn new(telemetry: Arc<Telemetry>) -> Self {
        Tap {
            telemetry,
            gathered: Arc::default(),
        }
    }
}

/// `ev` as the JSON object the event log writes for it.
fn line(ev: &Event) -> Option<Map<String, Value>> {
    match serde_json::to_value(ev) {
        Ok(Value::Object(m)) => Some(m),
        _ => None,
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
        let body = EventBody::Fields(fields);
        let ev = Event::of(request_id.to_owned(), route.clone(), event, body, at);
        if let Some(l) = line(&ev) {
            self.gathered.lock().event(Value::Object(l));
        }
        self.telemetry.emit_event(ev);
    }

    /// The `request` line: the record is complete and joins the ring.
    fn request(
        &self,
        request_id: &str,
        route: &Arc<str>,
        fields: Map<String, Value>,
        at: SystemTime,
    ) {
        let body = EventBody::Fields(fields);
        let ev = Event::of(request_id.to_owned(), route.clone(), "request", body, at);
        if let Some(request) = line(&ev) {
            let text = |name: &str| request.get(name).and_then(Value::as_str).unwrap_or("");
            let record = Record {
                id: request_id.to_owned(),
                route: route.clone(),
                key: text("key").into(),
                status: text("status").to_owned(),
                started_at: at
                    .duration_since(UNIX_EPOCH)
                    .map(|d| d.as_secs())
                    .unwrap_or(0),
                gathered: self.gathered.clone(),
                request,
            };
            self.telemetry.recent().push(record);
        }
        self.telemetry.emit_event(ev);
    }
}

impl AttemptSink for Tap {
    fn record(&self, r: &AttemptRecord) {
        self.telemetry.account(r);
        let ev = super::super::attempt::event(r);
        if let Some(l) = line(&ev) {
            self.gathered.lock().attempt(Value::Object(l));
        }
        self.telemetry.emit_event(ev);
    }
}
