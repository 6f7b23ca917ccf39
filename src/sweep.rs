//! `SweepSchedule`: when the next sweep of expired entries is due, for the
//! in-memory limiter and the in-memory cache store.
//!
//! One atomic holds the clock time of the next sweep. Every call reads it;
//! the one call that finds it due and wins the compare-and-swap runs the
//! sweep, and every other call goes on without waiting. So memory stays
//! bounded by the keys of the last window or so, with no background task and
//! nothing for the application to call.

use std::sync::atomic::{AtomicU64, Ordering};

/// The time of the next sweep, in clock milliseconds.
#[derive(Debug)]
pub(crate) struct SweepSchedule {
    next_at_ms: AtomicU64,
    interval_ms: u64,
}

impl SweepSchedule {
    /// A schedule whose first sweep is due one interval after `now_ms`.
    pub(crate) fn new(now_ms: u64, interval_ms: u64) -> Self {
        Self {
            next_at_ms: AtomicU64::new(now_ms.saturating_add(interval_ms)),
            interval_ms,
        }
    }

    /// The interval between two sweeps, in milliseconds.
    pub(crate) fn interval_ms(&self) -> u64 {
        self.interval_ms
    }

    /// Whether the caller should sweep now. At most one caller per interval
    /// gets `true`.
    pub(crate) fn claim(&self, now_ms: u64) -> bool {
        let next = self.next_at_ms.load(Ordering::Relaxed);
        // A clock set back by more than an interval would otherwise put the
        // next sweep out of reach: treat it as due. A reading taken before
        // the last sweep (by a call that read the clock, then waited for a
        // lock the sweep held) is up to an interval older than that sweep,
        // so only one older still is taken for a clock set back.
        let due = now_ms >= next || next - now_ms > self.interval_ms.saturating_mul(2);
        due && self
            .next_at_ms
            .compare_exchange(
                next,
                now_ms.saturating_add(self.interval_ms),
                Ordering::AcqRel,
                Ordering::Relaxed,
            )
            .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn due_once_per_interval() {
        let schedule = SweepSchedule::new(0, 1_000);
        assert!(!schedule.claim(999));
        assert!(schedule.claim(1_000));
        assert!(!schedule.claim(1_000));
        assert!(!schedule.claim(1_999));
        assert!(schedule.claim(2_000));
    }

    #[test]
    fn a_clock_set_back_does_not_stop_sweeping() {
        let schedule = SweepSchedule::new(10_000, 1_000);
        assert!(schedule.claim(5_000));
        assert!(!schedule.claim(5_500));
        assert!(schedule.claim(6_000));
    }

    #[test]
    fn a_reading_taken_before_the_last_sweep_does_not_sweep_again() {
        let schedule = SweepSchedule::new(0, 1_000);
        assert!(schedule.claim(1_000));
        // Read before that sweep, by up to an interval: not a step back.
        assert!(!schedule.claim(999));
        assert!(!schedule.claim(1));
        assert!(!schedule.claim(0));
        assert!(schedule.claim(2_000));
    }
}
