//! `SystemClock`: the machine's wall time, read cheaply.
//!
//! The in-memory limiters read the clock on every decision. Reading the wall
//! clock through the operating system (`clock_gettime`, even through the
//! vDSO) costs tens of nanoseconds on a virtual machine, as much as the rest
//! of a decision. So the wall time is read from the CPU's time-stamp counter
//! (through `quanta`, calibrated against the monotonic clock once per
//! process, on the first read: a few milliseconds, up to 200), anchored to
//! the operating system's wall time, and re-anchored every 100 ms so that a
//! wall clock adjusted by NTP is followed within that time. Where the counter
//! is not usable, `quanta` reads the monotonic clock instead, and the result
//! is the same wall time at the usual cost. The limiters and stores read
//! their clock when they are built, so the calibration happens at boot, not
//! on a request.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use super::Clock;

/// How long the clock runs on the counter before it reads the operating
/// system's wall time again.
pub(crate) const REANCHOR_EVERY: Duration = Duration::from_millis(100);

/// The wall clock of the machine.
///
/// Cheap to read (a time-stamp counter read and a few arithmetic steps), and
/// within 100 ms of any change an operator or NTP makes to the
/// wall clock. Every `SystemClock` reads one process-wide source.
///
/// ```
/// use std::time::{SystemTime, UNIX_EPOCH};
/// use suprnova::clock::{Clock, SystemClock};
///
/// let before = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
/// let ours = SystemClock.now();
/// let after = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
/// // The first read calibrates the counter, so `after` may be well past
/// // `before`; ours falls between the two, give or take a few milliseconds.
/// let slack = std::time::Duration::from_millis(5);
/// assert!(before <= ours + slack && ours <= after + slack);
/// ```
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.unix_nanos())
    }

    fn unix_nanos(&self) -> u64 {
        WallTime::get().now_nanos()
    }
}

/// Wall time as the counter's time plus an offset that re-anchoring
/// refreshes. The offset is one atomic word, so a reader never sees half of
/// an update.
struct WallTime {
    counter: quanta::Clock,
    /// The counter's zero, as the raw reading it scales from.
    base: u64,
    /// Unix nanoseconds minus counter nanoseconds, at the last anchoring.
    offset: AtomicU64,
    /// Counter nanoseconds at which the next anchoring is due.
    next_anchor: AtomicU64,
}

impl WallTime {
    fn get() -> &'static WallTime {
        static WALL: OnceLock<WallTime> = OnceLock::new();
        WALL.get_or_init(|| {
            let counter = quanta::Clock::new();
            let base = counter.raw();
            let wall = WallTime {
                counter,
                base,
                offset: AtomicU64::new(0),
                next_anchor: AtomicU64::new(0),
            };
            // The first offset must be taken: try until readings come
            // close together (almost always the first time).
            while wall.try_anchor().is_none() {}
            wall
        })
    }

    /// Nanoseconds since the counter's zero: a raw reading scaled in
    /// integers, with no `Duration` in between.
    fn counter_nanos(&self) -> u64 {
        self.counter.delta_as_nanos(self.base, self.counter.raw())
    }

    fn now_nanos(&self) -> u64 {
        let counter = self.counter_nanos();
        if counter >= self.next_anchor.load(Ordering::Relaxed) {
            // Several threads may re-anchor at once; each stores an offset
            // from readings taken close together, all of them right within
            // ANCHOR_SPREAD_NANOS.
            return self.anchor(counter);
        }
        counter.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// Reads the operating system's wall time between two counter readings
    /// and, when the two are within [`ANCHOR_SPREAD_NANOS`], stores the offset of
    /// the wall time from their middle: a thread preempted between its
    /// readings would otherwise store an offset off by the time it was
    /// away, and the clock would run that far ahead until the next anchoring,
    /// then step back. After [`ANCHOR_TRIES`] readings too far apart the
    /// offset in place is kept, and the next read tries again. Returns the
    /// time in Unix nanoseconds; `counter` is the caller's own reading, for
    /// when the offset is kept.
    fn anchor(&self, counter: u64) -> u64 {
        for _ in 0..ANCHOR_TRIES {
            if let Some(now) = self.try_anchor() {
                return now;
            }
        }
        counter.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// One anchoring, or `None` when its counter readings were too far
    /// apart.
    fn try_anchor(&self) -> Option<u64> {
        let before = self.counter_nanos();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        let after = self.counter_nanos();
        let spread = after.saturating_sub(before);
        if spread > ANCHOR_SPREAD_NANOS {
            return None;
        }
        let offset = wall.wrapping_sub(before + spread / 2);
        self.offset.store(offset, Ordering::Relaxed);
        let every = u64::try_from(REANCHOR_EVERY.as_nanos()).unwrap_or(u64::MAX);
        self.next_anchor
            .store(after.saturating_add(every), Ordering::Relaxed);
        Some(after.wrapping_add(offset))
    }
}

/// How far apart, in nanoseconds (50 µs), the two counter readings around a
/// wall-time reading may be for an anchoring to count: twice the most its
/// offset can be off by.
const ANCHOR_SPREAD_NANOS: u64 = 50_000;

/// How many anchorings a read tries before it keeps the offset in place.
const ANCHOR_TRIES: usize = 3;

#[cfg(test)]
mod tests {
    use super::*;

    fn os_now() -> Duration {
        SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
    }

    #[test]
    fn follows_the_operating_system_clock() {
        for _ in 0..5 {
            let before = os_now();
            let ours = SystemClock.now();
            let after = os_now();
            // Within the counter's drift over one re-anchoring interval.
            let slack = Duration::from_millis(5);
            assert!(
                ours + slack >= before && ours <= after + slack,
                "{ours:?} not in {before:?}..{after:?}"
            );
            std::thread::sleep(REANCHOR_EVERY / 2);
        }
    }

    /// An anchoring by a caller whose own counter reading is old (its
    /// thread was preempted after reading) still puts the clock on the
    /// operating system's time.
    #[test]
    fn an_anchoring_from_an_old_reading_is_not_ahead() {
        let wall = WallTime::get();
        let stale = wall.counter_nanos();
        std::thread::sleep(Duration::from_millis(30));
        let anchored = Duration::from_nanos(wall.anchor(stale));
        let after = os_now();
        let ours = SystemClock.now();
        let slack = Duration::from_millis(1);
        assert!(anchored <= after + slack, "{anchored:?} ahead of {after:?}");
        assert!(
            ours <= os_now() + slack,
            "{ours:?} ahead of the system clock"
        );
    }

    #[test]
    fn moves_forward() {
        let first = SystemClock.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(SystemClock.now() > first);
    }
}
