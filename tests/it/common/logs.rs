//! The log of in-process servers, per test thread: one global `tracing`
//! subscriber (installed once) formats events as `conclave serve` does
//! (text, `conclave=debug,warn`, control characters escaped by
//! `conclave::log_line`) into the buffer of the thread they happen on, and
//! drops them on a thread that has none. libtest runs each test on its own
//! thread, and `#[tokio::test]`'s current-thread runtime runs every task
//! of the test's servers there, so a test reads its own servers' log.
#![allow(dead_code)]

use std::cell::RefCell;
use std::io::{self, Write};
use std::sync::{Arc, Once};

use parking_lot::Mutex;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::layer::SubscriberExt;
use tracing_subscriber::{EnvFilter, Layer, filter};

thread_local! {
    static SINK: RefCell<Option<Log>> = const { RefCell::new(None) };
}

/// A test thread's captured log.
#[derive(Clone, Default)]
pub struct Log(Arc<Mutex<Vec<u8>>>);

impl Log {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock()).into_owned()
    }

    /// Adds `line` (what the binary itself would log).
    pub fn line(&self, line: &str) {
        let mut log = self.0.lock();
        log.extend_from_slice(&conclave::log_line::escape(line.as_bytes(), false));
        log.push(b'\n');
    }
}

/// This thread's log, capturing from now on.
pub fn capture() -> Log {
    static INSTALL: Once = Once::new();
    INSTALL.call_once(|| {
        let layer = tracing_subscriber::fmt::layer()
            .with_ansi(false)
            .with_writer(ToSink)
            .with_filter(EnvFilter::new("conclave=debug,warn"))
            .with_filter(filter::filter_fn(|_| SINK.with(|s| s.borrow().is_some())));
        let subscriber = tracing_subscriber::registry().with(layer);
        // Another global subscriber would only mean no capture.
        let _ = tracing::subscriber::set_global_default(subscriber);
    });
    SINK.with(|s| s.borrow_mut().get_or_insert_with(Log::default).clone())
}

/// Writes to the current thread's log, if it has one.
struct ToSink;

impl<'a> MakeWriter<'a> for ToSink {
    type Writer = SinkWriter;

    fn make_writer(&'a self) -> SinkWriter {
        SinkWriter
    }
}

struct SinkWriter;

impl Write for SinkWriter {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        SINK.with(|s| {
            if let Some(log) = &*s.borrow() {
                log.0
                    .lock()
                    .extend_from_slice(&conclave::log_line::escape(buf, false));
            }
        });
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
