//! [`Quiet`]: a future polled only once its own waker has fired.
//!
//! A connection's task runs whenever anything in it is woken, and every
//! run polls all it waits on. Two things are wrapped:
//!
//! - Its watchdog's signals (its timer, its state's `Notify`, shutdown),
//!   which it waits on beside hyper. hyper wakes the connection for every
//!   read and write; a plain `select!` then polls every idle signal again,
//!   each poll taking a lock or re-registering a timer.
//! - Each request's future. hyper polls it every time the task runs, and
//!   the task also runs for hyper's own reasons: taking a request body's
//!   last chunk wakes the body's sender, the connection itself, though
//!   that sender is gone by then (hyper 1.12's `body::chan`). Each such
//!   poll went down the request's whole chain of futures (some fifteen
//!   levels and two timers) to find them still waiting on the upstream.
//!
//! Wrapped in [`Quiet`], a future is polled when one of its own wakers
//! woke the task, and a wake meant for something else costs one atomic
//! swap.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Wake, Waker};

use futures::task::AtomicWaker;

/// Whether the inner future's waker fired, and the task to wake then.
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

pin_project_lite::pin_project! {
    /// `inner`, polled only on its first poll and after its own waker fired.
    pub(super) struct Quiet<F> {
        #[pin]
        inner: F,
        flag: Arc<Flag>,
        waker: Waker,
    }
}

impl<F: Future> Quiet<F> {
    pub(super) fn new(inner: F) -> Self {
        let flag = Arc::new(Flag {
            woken: AtomicBool::new(true),
            task: AtomicWaker::new(),
        });
        Quiet {
            inner,
            waker: Waker::from(flag.clone()),
            flag,
        }
    }
}

impl<F: Future> Future for Quiet<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        // Registered before the flag is read: a wake in between finds the
        // task to wake.
        this.flag.task.register(cx.waker());
        if !this.flag.woken.swap(false, Ordering::AcqRel) {
            return Poll::Pending;
        }
        this.inner.poll(&mut Context::from_waker(this.waker))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::AtomicUsize;

    use super::*;

    /// Counts its polls; ready once `open` is set, waking through the
    /// waker it was last polled with.
    struct Counted {
        polls: Arc<AtomicUsize>,
        open: Arc<AtomicBool>,
        waker: Arc<parking_lot::Mutex<Option<Waker>>>,
    }

    impl Future for Counted {
        type Output = ();
        fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
            self.polls.fetch_add(1, Ordering::SeqCst);
            if self.open.load(Ordering::SeqCst) {
                return Poll::Ready(());
            }
            *self.waker.lock() = Some(cx.waker().clone());
            Poll::Pending
        }
    }

    #[test]
    fn polls_the_inner_future_only_after_its_own_wake() {
        let polls = Arc::new(AtomicUsize::new(0));
        let open = Arc::new(AtomicBool::new(false));
        let inner_waker = Arc::new(parking_lot::Mutex::new(None));
        let mut q = Box::pin(Quiet::new(Counted {
            polls: polls.clone(),
            open: open.clone(),
            waker: inner_waker.clone(),
        }));
        let task = Arc::new(TaskWakes(AtomicUsize::new(0)));
        let waker = Waker::from(task.clone());
        let mut cx = Context::from_waker(&waker);
        assert!(q.as_mut().poll(&mut cx).is_pending());
        assert_eq!(polls.load(Ordering::SeqCst), 1, "the first poll reaches it");
        for _ in 0..5 {
            assert!(q.as_mut().poll(&mut cx).is_pending());
        }
        assert_eq!(
            polls.load(Ordering::SeqCst),
            1,
            "wakes meant for others do not"
        );
        open.store(true, Ordering::SeqCst);
        let w = inner_waker.lock().take().unwrap();
        w.wake();
        assert_eq!(task.0.load(Ordering::SeqCst), 1, "its wake wakes the task");
        assert!(q.as_mut().poll(&mut cx).is_ready());
        assert_eq!(polls.load(Ordering::SeqCst), 2);
    }

    struct TaskWakes(AtomicUsize);

    impl Wake for TaskWakes {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, Ordering::SeqCst);
        }
    }
}
