//! One connection: hyper serves it (HTTP/1 or HTTP/2, with the head and
//! stream bounds of `[server]`) while its watchdog enforces the header,
//! idle and HTTP/1 request limits, eviction and shutdown. Each request
//! first gets a slot (`slots`); one that finds none within
//! `header_read_timeout` is answered 503 `server_busy`.

use std::convert::Infallible;
use std::sync::Arc;

use axum::body::Body;
use axum::response::IntoResponse;
use hyper::body::Incoming;
use hyper::{Request, Response, Version};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::TcpStream;
use tokio::sync::OwnedSemaphorePermit;
use tokio::time::sleep_until;
use tower::ServiceExt;

use super::Serving;
use super::exec::Deadline;
use super::io::{Tracked, Watched};
use super::state::{Busy, ConnState};
use crate::api::error::ApiError;

pub(super) async fn connection(tcp: TcpStream, serving: Arc<Serving>, _slot: OwnedSemaphorePermit) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("TCP_NODELAY not set: {e}");
    }
    let limits = serving.limits;
    let state = Arc::new(ConnState::new());
    let _listed = serving.slots.register(state.clone());
    let io = TokioIo::new(Watched {
        inner: tcp,
        state: state.clone(),
    });
    let service = {
        let (state, serving) = (state.clone(), serving.clone());
        hyper::service::service_fn(move |req| handle(req, state.clone(), serving.clone()))
    };
    let mut builder = auto::Builder::new(Deadline(serving.clone()));
    builder
        .http1()
        .timer(TokioTimer::new())
        .header_read_timeout(limits.header_read_timeout + limits.idle_timeout)
        .max_buf_size(limits.max_header_bytes);
    builder
        .http2()
        .timer(TokioTimer::new())
        .max_concurrent_streams(limits.http2_max_streams)
        .max_header_list_size(u32::try_from(limits.max_header_bytes).unwrap_or(u32::MAX));
    let conn = builder.serve_connection(io, service);
    tokio::pin!(conn);
    let mut stopping = false;
    loop {
        if state.take_eviction() {
            // Idle, and a new connection needs the slot.
            return;
        }
        let check = state.next_check(&limits);
        tokio::select! {
            res = conn.as_mut() => {
                if let Err(e) = res {
                    tracing::debug!("connection ended: {e}");
                }
                return;
            }
            () = sleep_until(check) => {
                if state.expired(&limits) {
                    if state.busy() > 0 {
                        tracing::debug!("an HTTP/1 request outlived its time limit: closing its connection");
                    }
                    // Dropping the connection closes it.
                    return;
                }
            }
            () = state.changed.notified() => {}
            () = serving.stop.cancelled(), if !stopping => {
                stopping = true;
                if state.busy() == 0 {
                    return;
                }
                conn.as_mut().graceful_shutdown();
            }
        }
    }
}

/// One request: counted in flight at once, given a slot, then routed.
async fn handle(
    req: Request<Incoming>,
    state: Arc<ConnState>,
    serving: Arc<Serving>,
) -> Result<Response<Tracked>, Infallible> {
    let h1 = req.version() < Version::HTTP_2;
    let busy = Busy::begin(state.clone(), h1.then(|| serving.request_limit()));
    let wait = serving.limits.header_read_timeout;
    let slot = tokio::select! {
        biased;
        slot = serving.slots.for_request(&state.own, wait) => slot.ok_or(ApiError::ServerBusy),
        () = serving.stop.cancelled() => Err(ApiError::ShuttingDown),
    };
    let (resp, slot) = match slot {
        Ok(slot) => {
            let resp = match serving.router.clone().oneshot(req.map(Body::new)).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            (resp, Some(slot))
        }
        Err(refusal) => (refusal.into_response(), None),
    };
    Ok(resp.map(|inner| Tracked { inner, busy, slot }))
}
