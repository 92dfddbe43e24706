//! The `[server]` table, read and checked into a [`Server`]: where the
//! gateway listens, its request and connection [`Limits`] (workers
//! included), the event log, and the [`ResponseBounds`] of stored
//! responses, each value checked against its own range.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::fields::secret;
use super::{Errors, Secret, positive, raw};

#[derive(Debug)]
pub struct Server {
    pub listen: SocketAddr,
    pub request_timeout: Duration,
    pub max_body_bytes: usize,
    pub event_log: Option<PathBuf>,
    pub state_path: Option<PathBuf>,
    pub sse_keepalive: Option<Duration>,
    pub body_read_timeout: Duration,
    pub access_log: bool,
    /// Output tokens a request that sets no `max_tokens` is estimated at,
    /// for `tpm` and daily budgets.
    pub estimate_output_tokens: u32,
    /// Events the log's writer may fall behind by before lines are dropped.
    pub event_log_buffer: usize,
    /// Connection limits, fixed for the life of the process.
    pub limits: Limits,
    /// The key `/metrics` and `/readyz` require (admin keys also pass);
    /// `None`: both are open.
    pub metrics_key: Option<Secret>,
    /// How long `/readyz` reuses its last probe of the upstreams.
    pub readyz_cache: Duration,
    /// How long a stored response (`store: true`) is kept; zero keeps none.
    pub responses_retention: Duration,
    /// How many stored responses, and how many bytes of them, are kept.
    pub responses_bounds: ResponseBounds,
}

/// The bounds of stored responses (`server.responses_max_*`): at a bound
/// the writing key's oldest are evicted, never another key's. Sizes are
/// the bytes of a response's stored text (its input items and response
/// object as JSON, its id, key name and `previous_response_id`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResponseBounds {
    /// Responses one key keeps.
    pub max_per_key: u64,
    /// Bytes one key's responses take.
    pub max_bytes_per_key: u64,
    /// Bytes all keys' responses take together.
    pub max_bytes: u64,
}

impl Default for ResponseBounds {
    fn default() -> Self {
        ResponseBounds {
            max_per_key: 10_000,
            max_bytes_per_key: 256 << 20,
            max_bytes: 1 << 30,
        }
    }
}

/// The server's limits (see `crate::server`), from `[server]`; fixed for
/// the life of the process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    pub max_connections: usize,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub shutdown_grace: Duration,
    /// Concurrent streams an HTTP/2 connection may open.
    pub http2_max_streams: u32,
    /// The largest request head (HTTP/1 buffer, HTTP/2 header list).
    pub max_header_bytes: usize,
    /// Serving threads, each with its own runtime and listening socket
    /// (`server::Listeners`); one per core unless set.
    pub workers: usize,
}

/// Reads `[server]` (its defaults when it is absent).
pub(super) fn read(
    v: Option<toml::Value>,
    env: &dyn Fn(&str) -> Option<String>,
    errs: &mut Errors,
) -> Option<Server> {
    let raw: raw::Server = match v {
        Some(v) => errs.parse("server", v)?,
        None => raw::Server::default(),
    };
    let listen = match raw.listen.parse::<SocketAddr>() {
        Ok(a) => Some(a),
        Err(_) => {
            errs.push(
                "server.listen",
                format!(
                    "\"{}\" is not an address like \"127.0.0.1:4000\"",
                    raw.listen
                ),
            );
            None
        }
    };
    if raw.max_body_bytes == 0 {
        errs.push("server.max_body_bytes", "must be greater than 0");
    }
    if raw.request_timeout.is_zero() {
        errs.push("server.request_timeout", "must be greater than 0");
    }
    for (key, d) in [
        ("header_read_timeout", raw.header_read_timeout),
        ("body_read_timeout", raw.body_read_timeout),
        ("idle_timeout", raw.idle_timeout),
    ] {
        positive(Some(d), &format!("server.{key}"), errs);
    }
    if raw.estimate_output_tokens == 0 {
        errs.push("server.estimate_output_tokens", "must be greater than 0");
    }
    if !(1..=MAX_EVENT_LOG_BUFFER).contains(&raw.event_log_buffer) {
        errs.push(
            "server.event_log_buffer",
            format!("must be between 1 and {MAX_EVENT_LOG_BUFFER} (events, allocated up front)"),
        );
    }
    if raw.workers.is_some_and(|w| !(1..=MAX_WORKERS).contains(&w)) {
        errs.push(
            "server.workers",
            format!("must be between 1 and {MAX_WORKERS} (omit it for one per core)"),
        );
    }
    if raw.max_connections == 0 {
        errs.push("server.max_connections", "must be greater than 0");
    }
    if !(1..=MAX_HTTP2_STREAMS).contains(&raw.http2_max_streams) {
        errs.push(
            "server.http2_max_streams",
            format!("must be between 1 and {MAX_HTTP2_STREAMS}"),
        );
    }
    if !(MIN_HEADER_BYTES..=MAX_HEADER_BYTES).contains(&raw.max_header_bytes) {
        errs.push(
            "server.max_header_bytes",
            format!("must be between {MIN_HEADER_BYTES} and {MAX_HEADER_BYTES}"),
        );
    }
    if raw.sse_keepalive.is_some_and(|d| d.is_zero()) {
        errs.push(
            "server.sse_keepalive",
            "must be greater than 0 (omit it to turn keep-alives off)",
        );
    }
    positive(Some(raw.readyz_cache), "server.readyz_cache", errs);
    let responses_bounds = response_bounds(&raw, errs);
    let metrics_key = raw
        .metrics_key_env
        .as_deref()
        .and_then(|var| secret(env, var, "server.metrics_key_env", errs));
    Some(Server {
        listen: listen?,
        request_timeout: raw.request_timeout,
        max_body_bytes: raw.max_body_bytes,
        event_log: raw.event_log,
        state_path: raw.state_path,
        sse_keepalive: raw.sse_keepalive,
        body_read_timeout: raw.body_read_timeout,
        access_log: raw.access_log,
        estimate_output_tokens: raw.estimate_output_tokens,
        event_log_buffer: raw.event_log_buffer,
        limits: Limits {
            max_connections: raw.max_connections,
            header_read_timeout: raw.header_read_timeout,
            idle_timeout: raw.idle_timeout,
            shutdown_grace: raw.shutdown_grace,
            http2_max_streams: raw.http2_max_streams,
            max_header_bytes: raw.max_header_bytes,
            workers: raw.workers.unwrap_or_else(|| {
                std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get)
            }),
        },
        metrics_key,
        readyz_cache: raw.readyz_cache,
        responses_retention: raw.responses_retention,
        responses_bounds,
    })
}

/// The most serving threads (`server.workers`).
const MAX_WORKERS: usize = 1024;

/// The largest `server.responses_max_bytes` and `…_per_key` (1 TiB): the
/// byte sums stay far from the 2^53 a Redis script counts exactly.
const MAX_RESPONSE_BYTES: u64 = 1 << 40;

/// `server.responses_max_per_key`, `…_max_bytes_per_key`, `…_max_bytes`:
/// each at least 1 (`responses_retention = "0s"` stores nothing), a
/// key's bytes no more than all keys'.
fn response_bounds(raw: &raw::Server, errs: &mut Errors) -> ResponseBounds {
    let b = ResponseBounds {
        max_per_key: raw.responses_max_per_key,
        max_bytes_per_key: raw.responses_max_bytes_per_key,
        max_bytes: raw.responses_max_bytes,
    };
    if b.max_per_key == 0 {
        errs.push(
            "server.responses_max_per_key",
            "must be greater than 0 (set responses_retention = \"0s\" to store no response)",
        );
    }
    for (key, v) in [
        ("responses_max_bytes_per_key", b.max_bytes_per_key),
        ("responses_max_bytes", b.max_bytes),
    ] {
        if !(1..=MAX_RESPONSE_BYTES).contains(&v) {
            errs.push(
                format!("server.{key}"),
                format!(
                    "must be between 1 and {MAX_RESPONSE_BYTES} (bytes; set responses_retention = \"0s\" to store no response)"
                ),
            );
        }
    }
    if b.max_bytes_per_key > b.max_bytes {
        errs.push(
            "server.responses_max_bytes_per_key",
            format!(
                "must not exceed server.responses_max_bytes ({} bytes): one key's responses are part of all keys'",
                b.max_bytes
            ),
        );
    }
    b
}

/// Bounds of `server.http2_max_streams` and `server.max_header_bytes`
/// (hyper's HTTP/1 head buffer cannot be smaller than 8 KiB).
const MAX_HTTP2_STREAMS: u32 = 1024;
const MIN_HEADER_BYTES: usize = 8 * 1024;
const MAX_HEADER_BYTES: usize = 1024 * 1024;

/// The largest event-log queue: its slots are allocated when it opens.
const MAX_EVENT_LOG_BUFFER: usize = 1 << 20;
