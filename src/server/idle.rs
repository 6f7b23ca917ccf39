//! How long a connection may stay without a request.
//!
//! Each request a connection serves is counted when it arrives and when its
//! answer is made ([`Activity::begin`], whose [`Busy`] guard counts the
//! end: two relaxed additions to the connection's own counters). The
//! connection's task looks at the counts once a period ([`IdleWatch::wait`])
//! rather than being woken by every request.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

/// The requests one connection has begun and ended.
#[derive(Clone, Default)]
pub(super) struct Activity(Arc<Counts>);

#[derive(Default)]
struct Counts {
    begun: AtomicU64,
    ended: AtomicU64,
}

/// Counts the end of one request when dropped: when its answer is made, or
/// when its future is dropped unanswered (a reset HTTP/2 stream).
pub(super) struct Busy(Activity);

impl Activity {
    /// Counts a request that arrived, until the guard drops.
    pub(super) fn begin(&self) -> Busy {
        self.0.begun.fetch_add(1, Relaxed);
        Busy(self.clone())
    }

    fn snapshot(&self) -> (u64, u64) {
        // The end first: a request counted as ended is also counted as
        // begun, so the pair never shows more ended than begun.
        let ended = self.0.ended.load(Relaxed);
        (self.0.begun.load(Relaxed), ended)
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.0.ended.fetch_add(1, Relaxed);
    }
}

/// Why a connection's wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Quiet {
    /// No request arrived within the period after the connection opened.
    NoRequest,
    /// No request was in flight, and none arrived, for a whole period.
    Idle,
}

/// Watches one connection's [`Activity`], a period at a time.
pub(super) struct IdleWatch {
    activity: Activity,
    period: Duration,
    last: (u64, u64),
}

impl IdleWatch {
    pub(super) fn new(activity: Activity, period: Duration) -> Self {
        Self {
            activity,
            period,
            last: (0, 0),
        }
    }

    /// Resolves once the connection has sent no request for `period` after
    /// it opened, or has been without a request in flight and without a
    /// new one for a whole period: between one and two periods after its
    /// last answer.
    pub(super) async fn wait(&mut self) -> Quiet {
        loop {
            tokio::time::sleep(self.period).await;
            let now = self.activity.snapshot();
            if now.0 == 0 {
                return Quiet::NoRequest;
            }
            if now == self.last && now.0 == now.1 {
                return Quiet::Idle;
            }
            self.last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_requests_is_found_at_the_first_period() {
        let started = tokio::time::Instant::now();
        let mut watch = IdleWatch::new(Activity::default(), Duration::from_secs(30));
        assert_eq!(watch.wait().await, Quiet::NoRequest);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_is_a_whole_period_with_nothing_in_flight_and_nothing_new() {
        let activity = Activity::default();
        let started = tokio::time::Instant::now();
        let mut watch = IdleWatch::new(activity.clone(), Duration::from_secs(30));
        drop(activity.begin());
        // A request in flight across periods keeps the connection.
        let busy = activity.begin();
        let releaser = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(100)).await;
            drop(busy);
        });
        assert_eq!(watch.wait().await, Quiet::Idle);
        releaser.await.unwrap();
        // Ended at 100 s; seen at 120 s; unchanged and idle at 150 s.
        assert_eq!(started.elapsed(), Duration::from_secs(150));
    }
}
