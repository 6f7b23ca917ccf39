//! Whether a request's handler changed a rate limiter's counts: what tells
//! the throttle to read its buckets again before it writes its headers, as
//! Laravel reads every bucket after the response.
//!
//! A watch is a future that, while it polls the handler, puts its own flag
//! in a thread-local slot and takes it back after: a write through a
//! [`CacheRateLimiter`](super::CacheRateLimiter) in that poll sets the flag
//! in the slot. A plain `Cell` on the thread, a few instructions a poll,
//! where a tokio task-local costs a `RefCell` and a guard at each poll.

use std::cell::Cell;
use std::pin::Pin;
use std::task::{Context, Poll};

thread_local! {
    /// The flag of the watch polling on this thread (`None`: none is).
    static WROTE: Cell<Option<bool>> = const { Cell::new(None) };
}

/// Records that a count or a timer was written through a
/// [`CacheRateLimiter`](super::CacheRateLimiter), for the watch polling
/// this code, if any.
pub(crate) fn note_write() {
    WROTE.with(|wrote| {
        if wrote.get().is_some() {
            wrote.set(Some(true));
        }
    });
}

/// Runs `future` and tells whether it wrote through a rate limiter while
/// it was polled (a task it spawns is polled apart, and not watched). A
/// write seen by a watch is also one of the watch around it, if any.
pub(crate) fn watching_writes<F: Future + Unpin>(future: F) -> WatchingWrites<F> {
    WatchingWrites {
        inner: future,
        wrote: false,
    }
}

/// The future of [`watching_writes`].
pub(crate) struct WatchingWrites<F> {
    inner: F,
    wrote: bool,
}

/// Puts the watch around back in the slot when a poll ends, even by a
/// panic, and tells it of a write.
struct Restore {
    outer: Option<bool>,
}

impl Drop for Restore {
    fn drop(&mut self) {
        let inner = WROTE.replace(self.outer);
        if inner == Some(true) && self.outer.is_some() {
            WROTE.set(Some(true));
        }
    }
}

impl<F: Future + Unpin> Future for WatchingWrites<F> {
    type Output = (F::Output, bool);

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = &mut *self;
        let restore = Restore {
            outer: WROTE.replace(Some(this.wrote)),
        };
        let polled = Pin::new(&mut this.inner).poll(cx);
        this.wrote = WROTE.get() == Some(true);
        drop(restore);
        polled.map(|output| (output, this.wrote))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_is_seen_by_its_watch_and_the_ones_around_it() {
        note_write(); // No watch: nothing to tell.
        let ((), wrote) = watching_writes(Box::pin(async {})).await;
        assert!(!wrote);
        let (inner, outer) = watching_writes(Box::pin(async {
            let ((), inner) = watching_writes(Box::pin(async { note_write() })).await;
            inner
        }))
        .await;
        assert!(inner && outer);
        // A write in a later poll, after the handler waited.
        let ((), wrote) = watching_writes(Box::pin(async {
            tokio::task::yield_now().await;
            note_write();
        }))
        .await;
        assert!(wrote);
        assert_eq!(WROTE.get(), None, "the slot is left empty");
    }
}
