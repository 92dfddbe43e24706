//! A connection's hyper future on a task of its own, apart from its
//! watchdog (`conn`). A `select!` polls every branch each time its task
//! wakes: with hyper's connection in the watchdog's `select!`, its timer,
//! its notification and the stop signal were polled on every read and
//! write of the connection. Apart, each task wakes for its own events.
//! The watchdog ends the connection by dropping its [`Driver`] (the task
//! is aborted, which closes the socket) or asks it to finish the request
//! in flight and close ([`Driver::shut_down`]).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use futures::task::AtomicWaker;
use tokio::task::JoinHandle;

/// A graceful shutdown asked of a connection's task.
#[derive(Default)]
struct Shut {
    asked: AtomicBool,
    waker: AtomicWaker,
}

/// The task serving one connection; dropping it aborts the task.
pub(super) struct Driver {
    task: JoinHandle<()>,
    shut: Arc<Shut>,
}

impl Driver {
    /// Runs `conn` (hyper's connection future) on a task of its own;
    /// `graceful` starts its graceful shutdown when asked.
    pub(super) fn spawn<C, E>(conn: C, graceful: fn(Pin<&mut C>)) -> Self
    where
        C: Future<Output = Result<(), E>> + Send + 'static,
        E: std::fmt::Display,
    {
        let shut = Arc::new(Shut::default());
        let asked = shut.clone();
        let task = tokio::spawn(async move {
            let mut conn = std::pin::pin!(conn);
            let mut shutting = false;
            let res = std::future::poll_fn(|cx: &mut Context<'_>| {
                if !shutting {
                    asked.waker.register(cx.waker());
                    if asked.asked.load(Ordering::Acquire) {
                        shutting = true;
                        graceful(conn.as_mut());
                    }
                }
                conn.as_mut().poll(cx)
            })
            .await;
            if let Err(e) = res {
                tracing::debug!("connection ended: {e}");
            }
        });
        Driver { task, shut }
    }

    /// Asks the connection to finish the request in flight and close.
    pub(super) fn shut_down(&self) {
        self.shut.asked.store(true, Ordering::Release);
        self.shut.waker.wake();
    }
}

impl Future for Driver {
    type Output = ();

    /// Ready when the connection has ended.
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        Pin::new(&mut self.task).poll(cx).map(drop)
    }
}

impl Drop for Driver {
    fn drop(&mut self) {
        self.task.abort();
    }
}
