//! One connection: hyper serves it (HTTP/1 or HTTP/2, with the head and
//! stream bounds of `[server]`) while its watchdog enforces the header,
//! idle and HTTP/1 request limits, eviction and shutdown. Each request
//! first gets a slot (`slots`); one that finds none within
//! `header_read_timeout` is answered 503 `server_busy`. Which protocol a
//! connection speaks is read from its first bytes by peeking, so hyper
//! reads them itself (see [`sniff`]).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use axum::body::Body;
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::{Sleep, sleep_until};

use super::Serving;
use super::exec::Deadline;
use super::io::{Tracked, Watched};
use super::quiet::Quiet;
use super::state::{Busy, ConnState};
use crate::api::console::{CONSOLE, Peer};
use crate::api::error::ApiError;

pub(super) async fn connection(tcp: TcpStream, serving: Arc<Serving>, _slot: OwnedSemaphorePermit) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("TCP_NODELAY not set: {e}");
    }
    let limits = serving.limits;
    let peer = tcp.peer_addr().ok();
    let state = Arc::new(ConnState::new());
    let _listed = serving.slots.register(state.clone());
    // One timer, re-armed only when it fires (see `state`).
    let check = sleep_until(state.next_check(&limits));
    tokio::pin!(check);
    // Until the first bytes arrive the watchdog keeps the idle limit,
    // eviction and shutdown, as it does below.
    let proto = loop {
        if state.take_eviction() {
            return;
        }
        tokio::select! {
            proto = sniff(&tcp) => break proto,
            signal = watch(check.as_mut(), &state, &serving, false) => match signal {
                Signal::Check => {
                    if over_time(&state, &serving, check.as_mut()) {
                        return;
                    }
                }
                Signal::Changed => {}
                Signal::Stop => return,
            },
        }
    };
    let io = TokioIo::new(Watched {
        inner: tcp,
        state: state.clone(),
    });
    let service = {
        let (state, serving) = (state.clone(), serving.clone());
        hyper::service::service_fn(move |req| handle(req, peer, state.clone(), serving.clone()))
    };
    let mut builder = auto::Builder::new(Deadline(serving.clone()));
    builder
        .http1()
        .timer(TokioTimer::new())
        // The watchdog keeps the header limit: hyper's own timer would be
        // one more timer made and dropped for every request.
        .header_read_timeout(None)
        .max_buf_size(limits.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    let builder = match proto {
        Proto::Http1 => builder.http1_only(),
        Proto::Http2 => builder.http2_only(),
        Proto::Unsure => builder,
    };
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        if state.take_eviction() {
            // Idle, and a new connection needs the slot.
            return;
        }
        // The watchdog's signals, polled only when one of them woke the
        // task: hyper wakes it for every read and write.
        let signal = Quiet::new(watch(check.as_mut(), &state, &serving, stopping));
        // Dropping the connection (every `return` below) closes it.
        tokio::select! {
            biased;
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            signal = signal => match signal {
                Signal::Check => {
                    if over_time(&state, &serving, check.as_mut()) {
                        return;
                    }
                }
                Signal::Changed => {}
                Signal::Stop => {
                    stopping = true;
                    if state.busy() == 0 {
                        return;
                    }
                    conn.as_mut().graceful_shutdown();
                }
            },
        }
    }
}

/// What woke a connection's watchdog.
enum Signal {
    /// Its timer: a deadline may have passed.
    Check,
    /// Its state was poked: a newcomer asked it to close if idle.
    Changed,
    /// The server is shutting down (not heard once `stopping`).
    Stop,
}

/// The watchdog's next signal: its timer `check`, its state poked, or the
/// server stopping.
async fn watch(
    check: Pin<&mut Sleep>,
    state: &ConnState,
    serving: &Serving,
    stopping: bool,
) -> Signal {
    tokio::select! {
        () = check => Signal::Check,
        () = state.changed.notified() => Signal::Changed,
        () = serving.stop.cancelled(), if !stopping => Signal::Stop,
    }
}

/// The watchdog's look when its timer fires: whether the connection is
/// past a time limit (it closes), else its timer re-armed.
fn over_time(state: &ConnState, serving: &Serving, check: Pin<&mut Sleep>) -> bool {
    let limits = &serving.limits;
    if state.expired(limits) {
        if state.busy() > 0 {
            tracing::debug!("an HTTP/1 request outlived its time limit: closing its connection");
        }
        return true;
    }
    check.reset(state.next_check(limits));
    false
}

/// The protocol a connection speaks, by its first bytes.
enum Proto {
    Http1,
    Http2,
    /// Too few bytes yet (part of the HTTP/2 preface), the end or an
    /// error: hyper-util reads the bytes to decide.
    Unsure,
}

const H2_PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// Peeks at the first bytes without taking them. hyper-util's own
/// detection reads the first 24 bytes apart from the rest; hyper's first
/// read then gets only those, and its read buffer grows to 16 KiB to take
/// the rest of the request: 8 KiB more held by every HTTP/1 connection
/// for as long as it lives (measured with heaptrack on 1,000 streams).
async fn sniff(tcp: &TcpStream) -> Proto {
    let mut first = [0u8; H2_PREFACE.len()];
    match tcp.peek(&mut first).await {
        Ok(n) if n > 0 && first.get(..n) != H2_PREFACE.get(..n) => Proto::Http1,
        Ok(n) if n == H2_PREFACE.len() => Proto::Http2,
        _ => Proto::Unsure,
    }
}

/// One request: counted in flight at once, given a slot, then routed,
/// its answer polled only when its own wakers fire ([`Quiet`]).
/// What can be done at once is done before its future is made, and the
/// rare waits are boxed: hyper writes the future into the connection's
/// room for it at every request, so what it holds is copied each time
/// (it was 1.5 KiB, now 0.4: `-Zprint-type-sizes`).
fn handle(
    mut req: Request<Incoming>,
    peer: Option<SocketAddr>,
    state: Arc<ConnState>,
    serving: Arc<Serving>,
) -> impl Future<Output = Result<Response<Tracked>, Infallible>> + Send + 'static {
    let h1 = req.version() < Version::HTTP_2;
    // Only the console asks who is calling (its loopback rule).
    if let Some(peer) = peer.filter(|_| req.uri().path().starts_with(CONSOLE)) {
        req.extensions_mut().insert(Peer(peer));
    }
    let busy = Busy::begin(state.clone(), h1.then(|| serving.request_limit()));
    let free = serving.slots.free_now(&state.own);
    let req = req.map(Body::new);
    async move {
        let slot = match free {
            Some(slot) => Ok(slot),
            None => Box::pin(wait_for_slot(&state, &serving)).await,
        };
        let (resp, slot) = match slot {
            Ok(slot) => (Quiet::new(serving.routes.answer(req)).await, Some(slot)),
            Err(refusal) => (refusal.into_response(), None),
        };
        Ok(resp.map(|inner| Tracked { inner, busy, slot }))
    }
}

/// A slot for a request that found none free: one freed within
/// `header_read_timeout`, unless the server stops first.
async fn wait_for_slot(
    state: &ConnState,
    serving: &Serving,
) -> Result<OwnedSemaphorePermit, ApiError> {
    let wait = serving.limits.header_read_timeout;
    tokio::select! {
        biased;
        slot = serving.slots.for_request(&state.own, wait) => slot.ok_or(ApiError::ServerBusy),
        () = serving.stop.cancelled() => Err(ApiError::ShuttingDown),
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::AsyncWriteExt;
    use tokio::net::TcpListener;

    use super::*;

    /// What `sniff` makes of a connection whose client wrote `first`; the
    /// bytes are still there to read afterwards.
    async fn sniffed(first: &[u8]) -> (Proto, usize) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap())
            .await
            .unwrap();
        client.write_all(first).await.unwrap();
        let (server, _) = listener.accept().await.unwrap();
        let proto = sniff(&server).await;
        let mut all = vec![0u8; 64];
        let n = server.try_read(&mut all).unwrap();
        (proto, n)
    }

    #[tokio::test]
    async fn the_first_bytes_tell_the_protocol_and_stay_unread() {
        let (proto, n) = sniffed(b"POST /v1/chat/completions HTTP/1.1\r\n").await;
        assert!(matches!(proto, Proto::Http1));
        assert_eq!(n, 36);
        // "P" alone could still be the preface; "PO" cannot.
        let (proto, _) = sniffed(b"PO").await;
        assert!(matches!(proto, Proto::Http1));
        let (proto, n) = sniffed(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\0\0").await;
        assert!(matches!(proto, Proto::Http2));
        assert_eq!(n, 26);
        let (proto, _) = sniffed(b"PRI * HTTP").await;
        assert!(matches!(proto, Proto::Unsure));
    }
}
