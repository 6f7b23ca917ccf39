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

mod fake;
mod system;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

pub use fake::FakeClock;
pub use system::SystemClock;

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

    /// Nanoseconds since the Unix epoch, saturating in the year 2554: the
    /// form the memory driver reads on every decision. Clocks that keep
    /// nanoseconds override it to skip the detour through [`Duration`].
    fn unix_nanos(&self) -> u64 {
        u64::try_from(self.now().as_nanos()).unwrap_or(u64::MAX)
    }
}

/// A shared, dynamically typed clock, as components hold it.
pub type SharedClock = Arc<dyn Clock>;

/// The system clock as a [`SharedClock`].
pub fn system() -> SharedClock {
    Arc::new(SystemClock)
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
