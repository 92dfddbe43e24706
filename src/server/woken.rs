//! [`Woken`]: a request's future polled only when one of its own wakers
//! has fired since its last poll.
//!
//! hyper polls a connection's request future every time the connection's
//! task runs, and the task also runs for hyper's own reasons: taking a
//! request body's last chunk wakes the body's sender, which is the
//! connection itself, though that sender is gone by then (hyper 1.12's
//! `body::chan`). Every such poll went down the whole request's futures
//! (some fifteen levels and two timers) to find them still waiting on
//! the upstream. The request's futures get a waker of their own, which
//! marks them woken and wakes the task; a poll that finds them not woken
//! returns at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// `inner`, polled only when its own waker fired (and on its first poll).
pub struct Woken<F> {
    inner: F,
    flag: Arc<Flag>,
    /// `flag` as a waker, made once.
    waker: Waker,
}

/// Whether the inner future was woken, and the task to wake with it.
struct Flag {
    woken: AtomicBool,
    task: AtomicWaker,
}

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.woken.store(true, Ordering::Release);
        self.task.wake();
    }
}

impl<F> Woken<F> {
    pub fn new(inner: F) -> Self {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        let waker = Waker::from(flag.clone());
        Woken { inner, flag, waker }
    }
}

impl<F: Future + Unpin> Future for Woken<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = &mut *self;
        // Registered before the flag is read: a wake after the read finds
        // this task.
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        let mut own = Context::from_waker(&this.waker);
        Pin::new(&mut this.inner).poll(&mut own)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// A future that counts its polls and is ready once `open` is set,
    /// waking whoever waits when it is.
    struct Gate {
        polls: Arc<AtomicUsize>,
        open: Arc<AtomicBool>,
        waiting: Arc<AtomicWaker>,
    }

    impl Future for Gate {
        type Output = &'static str;
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<&'static str> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            self.waiting.register(cx.waker());
            match self.open.load(Ordering::SeqCst) {
                true => Poll::Ready("done"),
                false => Poll::Pending,
            }
        }
    }

    /// Counts the task's wakes.
    struct Count(AtomicUsize);

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }

    #[test]
    fn only_its_own_wakes_poll_the_inner_future() {
        let polls = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicBool::new(false));
        let waiting = Arc::new(AtomicWaker::new());
        let mut f = Woken::new(Gate {
            polls: polls.clone(),
            open: open.clone(),
            waiting: waiting.clone(),
        });
        let task = Arc::new(Count(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);

        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1, "the first poll goes in");
        // The task runs for some other reason: the inner future is left be.
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert!(Pin::new(&mut f).poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1);

        // Its own waker fires: the task is woken, and the next poll goes in.
        open.store(true, Ordering::SeqCst);
        waiting.wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1);
        assert_eq!(Pin::new(&mut f).poll(&mut cx), Poll::Ready("done"));
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    #[tokio::test]
    async fn a_woken_request_runs_to_its_end_on_a_runtime() {
        let (tx, rx) = tokio::sync::oneshot::channel::<u32>();
        let f = Woken::new(Box::pin(async move { rx.await.unwrap_or(0) + 1 }));
        let waiter = tokio::spawn(f);
        tokio::task::yield_now().await;
        let _ = tx.send(41);
        assert_eq!(waiter.await.ok(), Some(42));
    }
}
