//! Whether a request's handler changed a rate limiter's counts: what tells
//! the throttle to read its buckets again before it writes its headers, as
//! Laravel reads every bucket after the response.

use std::cell::Cell;

tokio::task_local! {
    static WROTE: Cell<bool>;
}

/// Records that a count or a timer was written through a
/// [`CacheRateLimiter`](super::CacheRateLimiter), for the throttle awaiting
/// the handler this task runs. Nothing outside [`watching_writes`].
pub(crate) fn note_write() {
    let _ = WROTE.try_with(|wrote| wrote.set(true));
}

/// Runs `future` and tells whether it wrote through a rate limiter on this
/// task (a task it spawns is not watched). A write seen here is also one of
/// the watch around it, if any.
pub(crate) async fn watching_writes<F: Future>(future: F) -> (F::Output, bool) {
    let (output, wrote) = WROTE
        .scope(Cell::new(false), async move {
            let output = future.await;
            (output, WROTE.with(Cell::get))
        })
        .await;
    if wrote {
        note_write();
    }
    (output, wrote)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_write_is_seen_by_its_watch_and_the_ones_around_it() {
        note_write(); // No watch: nothing to tell.
        let ((), wrote) = watching_writes(async {}).await;
        assert!(!wrote);
        let (inner, outer) = watching_writes(async {
            let ((), inner) = watching_writes(async { note_write() }).await;
            inner
        })
        .await;
        assert!(inner && outer);
    }
}
