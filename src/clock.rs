//! The one source of "now" outside Redis.
//!
//! Every time-based rule in the crate (the sliding window of the memory
//! driver, the time to live of the memory cache store, the window end the
//! facade writes into `K:timer`, the `X-RateLimit-Reset` header) reads a
//! [`Clock`]. Production code uses [`SystemClock`]; tests use [`FakeClock`],
//! which stays frozen until it is told to move, so that no test has to sleep
//! to see a window pass.
//!
//! Redis-backed limiters read Redis's own `TIME` inside their scripts
//! instead, so that app servers with skewed clocks agree on one window.
//!
//! ```
//! use std::time::Duration;
//! use suprnova::chrono::{TimeZone, Utc};
//! use suprnova::clock::{Clock, FakeClock};
//!
//! let clock = FakeClock::at(Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap());
//! clock.advance(Duration::from_secs(59));
//! assert_eq!(clock.now_utc().to_rfc3339(), "2026-01-01T12:00:59+00:00");
//! ```

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use chrono::{DateTime, Utc};

/// A source of the current time, as a duration since the Unix epoch.
///
/// Implementations must be cheap: the memory limiters call [`Clock::now`] on
/// every decision.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current time as the duration since 1970-01-01T00:00:00Z.
    fn now(&self) -> Duration;

    /// The current time as a UTC date and time.
    fn now_utc(&self) -> DateTime<Utc> {
        let now = self.now();
        DateTime::from_timestamp(now.as_secs() as i64, now.subsec_nanos()).unwrap_or_default()
    }

    /// Whole seconds since the Unix epoch, rounded down (PHP's `time()`).
    fn unix_seconds(&self) -> i64 {
        self.now().as_secs() as i64
    }

    /// Milliseconds since the Unix epoch, rounded down.
    fn unix_millis(&self) -> u64 {
        self.now().as_millis() as u64
    }
}

/// A shared, dynamically typed clock, as components hold it.
pub type SharedClock = Arc<dyn Clock>;

/// The wall clock of the machine.
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap_or_default()
    }
}

/// The system clock as a [`SharedClock`].
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
}

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
        self.nanos.fetch_add(by, Ordering::SeqCst);
    }

    /// Moves the clock to `at`, forward or backward.
    pub fn set(&self, at: DateTime<Utc>) {
        let nanos = at
            .timestamp_nanos_opt()
            .map_or(0, |n| u64::try_from(n).unwrap_or(0));
        self.nanos.store(nanos, Ordering::SeqCst);
    }

    /// This clock as a [`SharedClock`] that moves with it.
    pub fn shared(&self) -> SharedClock {
        Arc::new(self.clone())
    }
}

impl Clock for FakeClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.nanos.load(Ordering::SeqCst))
    }
}

impl fmt::Debug for FakeClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("FakeClock").field(&self.now_utc()).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn fake_clock_moves_only_when_told() {
        let clock = FakeClock::at(Utc.with_ymd_and_hms(2026, 1, 1, 12, 0, 0).unwrap());
        let start = clock.unix_seconds();
        assert_eq!(clock.unix_seconds(), start);
        clock.advance(Duration::from_millis(1500));
        assert_eq!(clock.unix_seconds(), start + 1);
        assert_eq!(clock.unix_millis(), start as u64 * 1000 + 1500);
    }

    #[test]
    fn clones_share_one_time() {
        let clock = FakeClock::at_unix(100);
        let other = clock.shared();
        clock.advance(Duration::from_secs(5));
        assert_eq!(other.unix_seconds(), 105);
    }

    #[test]
    fn system_clock_is_after_2020() {
        assert!(SystemClock.unix_seconds() > 1_577_836_800);
    }
}
