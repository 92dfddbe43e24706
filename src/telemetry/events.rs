//! The JSONL event log: one JSON object per line, written by a dedicated
//! thread so that file I/O never runs on a request's task. Its queue is
//! bounded: when the writer falls that far behind (a slow or stuck disk),
//! events are dropped and counted in `conclave_events_dropped_total`, and
//! requests go on at full speed. `reopen` starts a new file handle at the
//! same path (after log rotation moved the old one) without losing or
//! tearing a line.

use std::fs::{File, OpenOptions};
use std::io::{BufWriter, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{Receiver, SyncSender, TrySendError, sync_channel};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use metrics::counter;
use parking_lot::Mutex;
use serde::Serialize;
use serde_json::{Map, Value};

use super::EVENTS_DROPPED;
use crate::sink::Metrics;

/// One line of the event log (and of a record in the ring of recent
/// requests, which shares it): kept as built, serialized when written or
/// read.
#[derive(Serialize, Clone)]
pub struct Event {
    /// Written as RFC 3339 to the millisecond.
    #[serde(serialize_with = "rfc3339")]
    ts: SystemTime,
    request_id: Arc<str>,
    route: Arc<str>,
    event: &'static str,
    #[serde(flatten)]
    body: EventBody,
}

impl Event {
    /// An event of request `request_id`, stamped `at` (an attempt is
    /// stamped with its start).
    pub fn of(
        request_id: Arc<str>,
        route: Arc<str>,
        event: &'static str,
        body: EventBody,
        at: SystemTime,
    ) -> Self {
        Event {
            ts: at,
            request_id,
            route,
            event,
            body,
        }
    }

    /// Its body.
    pub fn body(&self) -> &EventBody {
        &self.body
    }

    /// The line's first fields (`ts`, `request_id`, `route`, `event`)
    /// followed by `fields`, as the log writes it: a [`EventBody::Fields`]
    /// event as a JSON object, built without serializing.
    pub fn fields_line(
        request_id: &str,
        route: &str,
        event: &'static str,
        fields: Map<String, Value>,
        at: SystemTime,
    ) -> Map<String, Value> {
        let mut line = Map::new();
        line.insert(
            "ts".into(),
            Value::String(humantime::format_rfc3339_millis(at).to_string()),
        );
        line.insert("request_id".into(), Value::from(request_id));
        line.insert("route".into(), Value::from(route));
        line.insert("event".into(), Value::from(event));
        line.extend(fields);
        line
    }
}

fn rfc3339<S: serde::Serializer>(at: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.collect_str(&humantime::format_rfc3339_millis(*at))
}

#[derive(Serialize, Clone)]
#[serde(untagged)]
pub enum EventBody {
    Attempt(Box<super::attempt::AttemptEvent>),
    Request(super::request::RequestLine),
    Fields(Map<String, Value>),
}

enum Msg {
    Event(Event),
    /// An event the ring of recent requests keeps too.
    Shared(Arc<Event>),
    Reopen,
    Close,
}

pub struct EventLog {
    pub path: PathBuf,
    tx: SyncSender<Msg>,
    dropped: AtomicU64,
    /// Where `conclave_events_dropped_total` is counted.
    metrics: Metrics,
    /// Taken once by `close` to wait for the writer to flush.
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl EventLog {
    /// Appends to `path`; up to `buffer` events wait for the writer.
    pub fn open(path: &Path, buffer: usize, metrics: Metrics) -> std::io::Result<Self> {
        let file = append(path)?;
        let (tx, rx) = sync_channel(buffer.max(1));
        let at = path.to_owned();
        let writer = std::thread::Builder::new()
            .name("conclave-events".into())
            .spawn(move || write_loop(rx, BufWriter::new(file), &at))?;
        Ok(EventLog {
            path: path.to_owned(),
            tx,
            dropped: AtomicU64::new(0),
            metrics,
            writer: Mutex::new(Some(writer)),
        })
    }

    pub fn send(&self, event: Event) {
        self.queue(Msg::Event(event));
    }

    /// [`send`](Self::send) for an event kept elsewhere too.
    pub fn send_shared(&self, event: Arc<Event>) {
        self.queue(Msg::Shared(event));
    }

    fn queue(&self, msg: Msg) {
        match self.tx.try_send(msg) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                self.metrics.scope(|| counter!(EVENTS_DROPPED).increment(1));
                let n = self.dropped.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    tracing::warn!(dropped = n, "event log queue full; events dropped");
                }
            }
            Err(TrySendError::Disconnected(_)) => {}
        }
    }

    /// Writes what is queued to the current file, then continues in a new
    /// file at the same path.
    /// (A full queue, behind a stuck writer, gets the request from a
    /// thread of its own: the caller, on the runtime, never waits.)
    pub fn reopen(&self) {
        if let Err(TrySendError::Full(msg)) = self.tx.try_send(Msg::Reopen) {
            let tx = self.tx.clone();
            std::thread::spawn(move || {
                let _ = tx.send(msg);
            });
        }
    }

    /// Flushes what is queued and stops the writer.
    pub fn close(&self) {
        let _ = self.tx.send(Msg::Close);
        if let Some(h) = self.writer.lock().take() {
            let _ = h.join();
        }
    }

    /// [`close`](Self::close), waiting at most `within` for a writer that
    /// may be stuck (a full disk, a pipe nobody reads); whether it closed.
    pub fn close_within(self: &Arc<Self>, within: Duration) -> bool {
        let (done, closed) = std::sync::mpsc::channel();
        let log = self.clone();
        std::thread::spawn(move || {
            log.close();
            let _ = done.send(());
        });
        closed.recv_timeout(within).is_ok()
    }
}

fn append(path: &Path) -> std::io::Result<File> {
    OpenOptions::new().create(true).append(true).open(path)
}

fn write(out: &mut BufWriter<File>, ev: &Event) {
    if let Err(e) = serde_json::to_writer(&mut *out, ev)
        .and_then(|()| out.write_all(b"\n").map_err(serde_json::Error::io))
    {
        tracing::warn!("event log write failed: {e}");
    }
}

fn write_loop(rx: Receiver<Msg>, mut out: BufWriter<File>, path: &Path) {
    while let Ok(msg) = rx.recv() {
        let mut next = Some(msg);
        // Drain whatever is queued, then flush once.
        while let Some(msg) = next.take() {
            match msg {
                Msg::Event(ev) => write(&mut out, &ev),
                Msg::Shared(ev) => write(&mut out, &ev),
                Msg::Reopen => {
                    let _ = out.flush();
                    match append(path) {
                        Ok(f) => out = BufWriter::new(f),
                        Err(e) => tracing::warn!(
                            "cannot reopen the event log {}: {e}; still writing to the old file",
                            path.display()
                        ),
                    }
                }
                Msg::Close => {
                    let _ = out.flush();
                    return;
                }
            }
            next = rx.try_recv().ok();
        }
        if let Err(e) = out.flush() {
            tracing::warn!("event log flush failed: {e}");
        }
    }
    let _ = out.flush();
}
