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
            wall.anchor(wall.counter_nanos());
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
            // from its own reading, all of them right.
            return self.anchor(counter);
        }
        counter.wrapping_add(self.offset.load(Ordering::Relaxed))
    }

    /// Reads the operating system's wall time, stores the offset, and
    /// returns the wall time in Unix nanoseconds.
    fn anchor(&self, counter: u64) -> u64 {
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| u64::try_from(d.as_nanos()).unwrap_or(u64::MAX));
        self.offset
            .store(wall.wrapping_sub(counter), Ordering::Relaxed);
        let every = u64::try_from(REANCHOR_EVERY.as_nanos()).unwrap_or(u64::MAX);
        self.next_anchor
            .store(counter.saturating_add(every), Ordering::Relaxed);
        wall
    }
}

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

    #[test]
    fn moves_forward() {
        let first = SystemClock.now();
        std::thread::sleep(Duration::from_millis(2));
        assert!(SystemClock.now() > first);
    }
}
