//! Boxing a future where it will run.
//!
//! `Box::pin(f())` builds the future on the stack and then copies all of
//! it into the new box: every byte of its largest state, though a future
//! that has not started holds only its arguments. A model call's future
//! is about 2 KiB, so each request wrote some 35 cache lines of a block
//! the allocator had just handed out, and at 64 connections those lines
//! are cold: the copy was the largest share of a request's write misses
//! (`benches/cachesim.py`). [`boxed`] allocates first and lets the
//! future be built in the box: only its arguments and its state are
//! written, and the rest of the block is touched only by the states the
//! request actually reaches.

use std::future::Future;

use futures::future::BoxFuture;

/// `make()`'s future, boxed and pinned, built in its box rather than
/// copied there. Pass a closure that makes the future (`|| f(a, b)`),
/// not the future itself, or it is built before the box exists.
#[inline(always)]
pub fn boxed<'a, F>(make: impl FnOnce() -> F) -> BoxFuture<'a, F::Output>
where
    F: Future + Send + 'a,
{
    let slot = Box::<F>::new_uninit();
    let future: Box<F> = Box::write(slot, make());
    Box::into_pin(future)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_boxed_future_runs_to_its_output_and_may_borrow() {
        let words = String::from("in place");
        let owned = boxed(move || async move { words.len() });
        let count = String::from("x");
        let borrowed = boxed(|| async { count.repeat(2) });
        assert_eq!(owned.await, 8);
        assert_eq!(borrowed.await, "xx");
    }
}
