//! `FakeClock`: a clock for tests, frozen until it is moved.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::{Clock, SharedClock};

/// A clock that stands still until it is moved.
///
/// Clones share one time: advance any clone and every holder sees it. The
/// resolution is one nanosecond.
#[derive(Clone)]
pub struct FakeClock {
    nanos: Arc<AtomicU64>,
}

impl FakeClock {
    /// A clock frozen at `at`. Instants before 1970 are clamped to the epoch.
    pub fn at(at: DateTime<Utc>) -> Self {
        let clock = Self {
            nanos: Arc::new(AtomicU64::new(0)),
        };
        clock.set(at);
        clock
    }

    /// A clock frozen at `secs` seconds after the Unix epoch.
    pub fn at_unix(secs: u64) -> Self {
        Self {
            nanos: Arc::new(AtomicU64::new(secs.saturating_mul(1_000_000_000))),
        }
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_nanos()).unwrap_or(u64::MAX);
        // Saturating, as the constructors are: a clock moved past the end
        // of what it holds stays there rather than wrapping back to 1970.
        let _ = self
            .nanos
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |nanos| {
                Some(nanos.saturating_add(by))
            });
    }

    /// Moves the clock to `at`, forward or backward. A time before the
    /// epoch is the epoch, and one past what the clock holds (about the
    /// year 2554) is its last instant, as [`at_unix`](Self::at_unix) and
    /// [`advance`](Self::advance) saturate.
    pub fn set(&self, at: DateTime<Utc>) {
        let nanos = u64::try_from(at.timestamp()).map_or(0, |secs| {
            secs.saturating_mul(1_000_000_000)
                .saturating_add(u64::from(at.timestamp_subsec_nanos()))
        });
        self.nanos.store(nanos, Ordering::SeqCst);
    }

    /// This clock as a [`SharedClock`] that moves with it.
    pub fn shared(&self) -> SharedClock {
        Arc::new(self.clone())
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.unix_nanos())
    }

    fn unix_nanos(&self) -> u64 {
        self.nanos.load(Ordering::SeqCst)
    }
}

impl fmt::Debug for FakeClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FakeClock").field(&self.now_utc()).finish()
    }
}
