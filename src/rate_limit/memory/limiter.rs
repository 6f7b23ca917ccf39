//! `InMemoryRateLimiter`: the sliding-window driver of one process.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::bucket::Bucket;
use super::shards::Shards;
use crate::clock::{self, SharedClock};
use crate::decision::Decision;
use crate::rate_limit::{RateLimitError, RateLimiterDriver, SlidingWindowConfig};
use crate::sharded::Locked;
use crate::sweep::SweepSchedule;

/// Shards of a new limiter: enough that a few cores rarely meet on one lock,
/// few enough that a sweep or a count visits them quickly.
const DEFAULT_SHARDS: usize = 64;

/// A sliding-window limiter that keeps its buckets in this process.
///
/// Each key holds the times of its admitted hits, at millisecond resolution,
/// read from the limiter's [`Clock`](crate::clock::Clock). A call drops the
/// hits that have left the window (`now - window`, `now`] (a hit exactly one
/// window old is out), then admits and records itself when fewer than
/// `max_requests` remain. A refused call records nothing.
///
/// - **Exact.** The check and the record are one step under the lock of the
///   key's shard, so a limit of N admits N under any concurrency.
/// - **Scales past one core.** Keys are spread over many shards, each behind
///   its own lock; there is no global lock on the path of a call.
/// - **Compact.** A hit costs 2 bytes (the gap to the hit before it; 10
///   bytes for a gap of 65.5 seconds or more), so a key holding 100 hits
///   costs a few hundred bytes in all.
/// - **Bounded.** A bucket that holds nothing in its window is dropped as soon
///   as a call touches it. Buckets nobody touches again are dropped by a
///   sweep that runs inside an ordinary call once per sweep interval of clock
///   time (default one second): the first call after the interval has passed
///   walks the shards one lock at a time. So a flood of distinct keys costs
///   buckets for about one window of them, and the application calls
///   nothing. One thing is kept: the notes that let a refusal take no lock
///   (64 bytes and its place in an index for each key refused within one
///   window, at most 65,520 a shard) are handed out again once their keys
///   go, but their memory is kept at the busiest window's size for the
///   driver's life, up to about 5.7 MiB a shard (about 360 MiB over the 64
///   shards of [`new`](Self::new), reached by refusing some four million
///   keys within one window); a key past that count is decided under its
///   shard's lock, exactly.
/// - **One process.** Every replica of an application keeps its own buckets,
///   so behind N replicas a limit is N times looser, and a restart resets it.
///   Use the Redis driver when more than one process serves a limit.
///
/// `max_requests: 0` refuses every call; its `retry_after` is the window
/// length, since no place will ever free up. A window is rounded up to whole
/// milliseconds, so the limit never holds over a shorter span than asked.
///
/// The clock is a wall clock, which NTP or an operator may step. After a
/// step back, a call that finds a key's newest hit later than now moves
/// all of that key's hits back by the same amount, so that the newest is
/// now: their count and spacing are kept, and a full key is refused for one
/// window at most, never for the step and a window. (A refusal answered
/// from the note of a key refused before a step back that leaves the hit
/// it waits for at or before now may wait for that hit as it was stamped:
/// never longer than a window. A bucket no call touches is swept once its
/// hits have left the window as they were stamped.) A step forward ages
/// every hit by the step, as the window reads them.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use suprnova::clock::FakeClock;
/// use suprnova::rate_limit::memory::InMemoryRateLimiter;
/// use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let clock = FakeClock::at_unix(1_000_000);
/// let limiter: Arc<dyn RateLimiterDriver> =
///     Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
/// let cfg = SlidingWindowConfig::new(2, Duration::from_secs(10));
///
/// assert!(limiter.try_acquire("user:42", &cfg).await?);
/// clock.advance(Duration::from_secs(4));
/// assert!(limiter.try_acquire("user:42", &cfg).await?);
/// assert!(!limiter.try_acquire("user:42", &cfg).await?);
/// // The first hit leaves the window 10 s after it was made: 6 s from now.
/// assert_eq!(limiter.retry_after("user:42", &cfg).await?, Some(Duration::from_secs(6)));
/// # Ok::<(), suprnova::rate_limit::RateLimitError>(())
/// # }).unwrap();
/// ```
pub struct InMemoryRateLimiter {
    shards: Shards,
    clock: SharedClock,
    sweep: SweepSchedule,
}

impl InMemoryRateLimiter {
    /// The default interval between two sweeps of expired buckets.
    pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(1);

    /// A limiter on the system clock.
    pub fn new() -> Self {
        Self::with_clock(clock::system())
    }

    /// A limiter that reads `clock`: tests pass a
    /// [`FakeClock`](crate::clock::FakeClock) and move it instead of
    /// sleeping.
    pub fn with_clock(clock: SharedClock) -> Self {
        let now_ms = clock.unix_millis();
        Self {
            shards: Shards::new(DEFAULT_SHARDS),
            sweep: SweepSchedule::new(now_ms, millis_ceil(Self::DEFAULT_SWEEP_INTERVAL)),
            clock,
        }
    }

    /// Sweeps expired buckets at most once per `interval` of clock time
    /// (rounded up to whole milliseconds). A shorter interval bounds memory
    /// tighter and costs more sweeps; `Duration::ZERO` sweeps on every call,
    /// which only a test wants.
    pub fn with_sweep_interval(mut self, interval: Duration) -> Self {
        self.sweep = SweepSchedule::new(self.clock.unix_millis(), millis_ceil(interval));
        self
    }

    /// Spreads the keys over `count` shards (rounded up to a power of two,
    /// at least one). More shards make two calls less likely to wait for one
    /// lock, and a sweep or a [`bucket_count`](Self::bucket_count) a little
    /// slower. The default is 64.
    pub fn with_shards(mut self, count: usize) -> Self {
        self.shards = Shards::new(count);
        self
    }

    /// Drops every bucket that holds nothing at the current time and trims
    /// the others. Calls run it by themselves once per sweep interval; call
    /// it to free memory at a moment of your choosing.
    pub fn sweep(&self) {
        self.shards.sweep(self.clock.unix_millis());
    }

    /// How many keys hold a bucket now, counting buckets whose hits have
    /// expired but that no call or sweep has dropped yet. For diagnostics
    /// and tests.
    pub fn bucket_count(&self) -> usize {
        self.shards.bucket_count()
    }

    /// [`RateLimiterDriver::acquire`] without `async`: the memory driver
    /// never waits, so a synchronous caller can decide directly.
    pub fn acquire_now(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Result<Decision, RateLimitError> {
        config.validate()?;
        let now = self.clock.unix_nanos();
        let decision = self.decide(key, config, now);
        self.sweep_if_due(now / NANOS_PER_MILLI);
        Ok(decision)
    }

    /// [`RateLimiterDriver::retry_after`] without `async`.
    pub fn retry_after_now(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Result<Option<Duration>, RateLimitError> {
        config.validate()?;
        let now = self.clock.unix_nanos();
        let wait = self.wait_for_place(key, config, now);
        self.sweep_if_due(now / NANOS_PER_MILLI);
        Ok(wait)
    }

    /// The decision on `key` at `now`, in Unix nanoseconds.
    fn decide(&self, key: &str, config: &SlidingWindowConfig, now: u64) -> Decision {
        let max = config.max_requests;
        if max == 0 {
            return Decision::refused_under_zero(config.window, now);
        }
        let window_ms = millis_ceil(config.window);
        let place = self.shards.place(key);
        // A key found full is refused by reading its note, without the
        // shard's lock.
        if let Some(frees_at) = self
            .shards
            .noted_full(place, max, window_ms, now / NANOS_PER_MILLI)
        {
            return refused(max, frees_at, now);
        }
        let mut locked = self.shards.lock_place(place);
        // The clock read again under the lock: a call held between its
        // first read and the lock (its thread preempted) while others
        // dropped or trimmed this key's hits with a later time would
        // otherwise stamp its hit with the earlier time, and the hit would
        // leave before a whole window from the moment it was admitted.
        // Every call that changed the bucket read its time before it let
        // go of this lock, so this read is no earlier than theirs.
        let now = now.max(self.clock.unix_nanos());
        // A hit is stamped with `now` rounded up and evicted against `now`
        // rounded down, so rounding never lets a hit leave before a whole
        // window has really passed.
        let (now_ms, stamp_ms) = (now / NANOS_PER_MILLI, now.div_ceil(NANOS_PER_MILLI));
        // Noted in the same hold of the lock: a refusal notes when the next
        // place frees, an admission forgets the note. A key is noted once
        // it is refused, so a key that never is costs no note.
        match count_hit(&mut locked, max, window_ms, now_ms, stamp_ms) {
            Ok(admitted) => {
                self.shards.forget_full(place);
                admitted
            }
            Err(Full { frees_at, holds }) => {
                // Noted only when the bucket holds exactly `max` hits: then
                // no hit leaves the window before `frees_at`, so a refusal
                // read from the note evicts nothing a call under the lock
                // would. A bucket holding more (the key used under another
                // limit too, or a limit lowered) is decided under the lock.
                if holds == max {
                    self.shards.note_full(place, max, window_ms, frees_at);
                } else {
                    self.shards.forget_full(place);
                }
                refused(max, frees_at, now)
            }
        }
    }

    fn wait_for_place(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
        now: u64,
    ) -> Option<Duration> {
        let max = config.max_requests;
        if max == 0 {
            return Some(config.window);
        }
        let window_ms = millis_ceil(config.window);
        let place = self.shards.place(key);
        let mut locked = self.shards.lock(key);
        let bucket = locked.get_mut()?;
        // Read again under the lock, as a decision reads it: a call that
        // stamped a hit while this one waited for the lock must not look
        // like a clock that stepped back.
        let now = now.max(self.clock.unix_nanos());
        bucket.catch_up(now.div_ceil(NANOS_PER_MILLI));
        if bucket.trim(now / NANOS_PER_MILLI, window_ms) {
            self.shards.drop_bucket(&mut locked, place);
            return None;
        }
        if bucket.len() < max {
            return None;
        }
        Some(until(place_frees_at(bucket, max, window_ms), now))
    }

    fn sweep_if_due(&self, now_ms: u64) {
        // After the caller's own shard lock is released: the sweep takes
        // every shard's lock in turn.
        if self.sweep.claim(now_ms) {
            self.shards.sweep(now_ms);
        }
    }
}

#[async_trait]
impl RateLimiterDriver for InMemoryRateLimiter {
    async fn acquire(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Result<Decision, RateLimitError> {
        self.acquire_now(key, config)
    }

    async fn retry_after(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Result<Option<Duration>, RateLimitError> {
        self.retry_after_now(key, config)
    }

    fn acquire_without_waiting(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Option<Result<Decision, RateLimitError>> {
        Some(self.acquire_now(key, config))
    }

    fn unix_nanos_now(&self) -> Option<u64> {
        Some(self.clock.unix_nanos())
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}

impl Default for InMemoryRateLimiter {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for InMemoryRateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("InMemoryRateLimiter")
            .field("shards", &self.shards.len())
            .field("sweep_interval_ms", &self.sweep.interval_ms())
            .field("clock", &self.clock)
            .finish_non_exhaustive()
    }
}

/// A full bucket: when it next has a place (Unix milliseconds), and how
/// many hits it holds in the window.
struct Full {
    frees_at: u64,
    holds: u32,
}

/// Counts a hit in the locked bucket when it has a place: the admission, or
/// the full bucket.
fn count_hit(
    locked: &mut Locked<'_, '_, Bucket>,
    max: u32,
    window_ms: u64,
    now_ms: u64,
    stamp_ms: u64,
) -> Result<Decision, Full> {
    let Some(bucket) = locked.get_mut() else {
        // Only a key seen for the first time (or again after its bucket was
        // dropped) allocates.
        locked.insert(Bucket::new(stamp_ms, window_ms));
        return Ok(admitted(max, 1, stamp_ms, window_ms));
    };
    // After a wall clock stepped back, the hits stamped later than now are
    // moved back first, so that none holds a place longer than a window.
    bucket.catch_up(stamp_ms);
    if bucket.trim(now_ms, window_ms) {
        bucket.restart(stamp_ms, window_ms);
        return Ok(admitted(max, 1, stamp_ms, window_ms));
    }
    let count = bucket.len();
    if count < max {
        bucket.push(stamp_ms, max as usize - 1);
        return Ok(admitted(max, count + 1, bucket.nth(0), window_ms));
    }
    Err(Full {
        frees_at: place_frees_at(bucket, max, window_ms),
        holds: count,
    })
}

/// An admitted call that leaves `count` hits in the bucket, the oldest at
/// `oldest_ms`.
fn admitted(max: u32, count: u32, oldest_ms: u64, window_ms: u64) -> Decision {
    Decision::allowed(u64::from(max), u64::from(max - count))
        .with_reset_at(unix_secs_ceil(oldest_ms.saturating_add(window_ms)))
}

/// A refused call at `now` (Unix nanoseconds) on a full bucket whose next
/// place frees at `frees_at_ms`.
fn refused(max: u32, frees_at_ms: u64, now: u64) -> Decision {
    Decision::refused(u64::from(max), until(frees_at_ms, now))
        .with_reset_at(unix_secs_ceil(frees_at_ms))
}

/// When a full bucket next has a place: when the hit that keeps it at the
/// limit leaves the window. That is the oldest hit, unless the limit was
/// lowered while the bucket held more hits than the new limit.
fn place_frees_at(bucket: &Bucket, max: u32, window_ms: u64) -> u64 {
    bucket.nth(bucket.len() - max).saturating_add(window_ms)
}

/// The time from `now` (Unix nanoseconds) until `at_ms`, exact to the
/// clock's resolution (zero once `at_ms` has passed).
///
/// Subtracted in whole nanoseconds and made a `Duration` once, rather than
/// two `Duration`s built, normalised and subtracted: every refusal runs
/// this after reading its slot. A time past the year 2554, which a
/// nanosecond count cannot hold, takes the `Duration` way.
#[inline]
fn until(at_ms: u64, now: u64) -> Duration {
    match at_ms.checked_mul(NANOS_PER_MILLI) {
        Some(at) => Duration::from_nanos(at.saturating_sub(now)),
        None => Duration::from_millis(at_ms).saturating_sub(Duration::from_nanos(now)),
    }
}

/// The clock reads nanoseconds; buckets keep milliseconds.
const NANOS_PER_MILLI: u64 = 1_000_000;

/// Whole milliseconds, rounded up, so a window is never shortened.
///
/// Built from the seconds and the sub-second nanoseconds rather than
/// `as_nanos()`: rounding a `u128` up is a software division that cost about
/// as much as the rest of a decision.
fn millis_ceil(d: Duration) -> u64 {
    d.as_secs()
        .saturating_mul(1_000)
        .saturating_add(u64::from(d.subsec_nanos().div_ceil(1_000_000)))
}

fn unix_secs_ceil(ms: u64) -> i64 {
    i64::try_from(ms.div_ceil(1_000)).unwrap_or(i64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A bucket that `retry_after` finds empty and drops frees its note, as
    /// one the sweep drops does.
    #[test]
    fn a_bucket_dropped_by_retry_after_frees_its_note() {
        let clock = crate::clock::FakeClock::at_unix(1_000_000);
        let limiter = InMemoryRateLimiter::with_clock(clock.shared())
            .with_shards(1)
            .with_sweep_interval(Duration::MAX);
        let config = SlidingWindowConfig::new(1, Duration::from_secs(1));
        for k in 0..100 {
            let key = format!("k{k}");
            assert!(limiter.acquire_now(&key, &config).unwrap().allowed);
            assert!(!limiter.acquire_now(&key, &config).unwrap().allowed);
        }
        assert_eq!(limiter.shards.note_count(), 100);
        clock.advance(Duration::from_secs(2));
        for k in 0..100 {
            let wait = limiter.retry_after_now(&format!("k{k}"), &config);
            assert_eq!(wait.unwrap(), None);
        }
        assert_eq!(limiter.bucket_count(), 0);
        assert_eq!(limiter.shards.note_count(), 0);
    }

    /// A limit of 0 over the longest window refuses with the longest wait,
    /// without overflow.
    #[test]
    fn a_zero_limit_over_the_longest_window_refuses_for_ever() {
        let clock = crate::clock::FakeClock::at_unix(1_700_000_000);
        let limiter = InMemoryRateLimiter::with_clock(clock.shared());
        for window in [Duration::MAX, Duration::from_secs(u64::MAX)] {
            let refused = limiter
                .acquire_now("k", &SlidingWindowConfig::new(0, window))
                .unwrap();
            assert!(!refused.allowed);
            assert_eq!(refused.retry_after_secs(), Some(u64::MAX));
            assert_eq!(refused.reset_at, Some(i64::MAX));
        }
    }

    #[test]
    fn millis_round_up_without_overflow() {
        let d = Duration::new(12, 345_678_901);
        assert_eq!(millis_ceil(d), 12_346);
        assert_eq!(millis_ceil(Duration::from_millis(60_000)), 60_000);
        assert_eq!(millis_ceil(Duration::from_nanos(1)), 1);
        assert_eq!(millis_ceil(Duration::new(5, 999_999_999)), 6_000);
        assert_eq!(millis_ceil(Duration::MAX), u64::MAX);
    }

    #[test]
    fn until_is_exact_to_the_nanosecond_and_never_negative() {
        let now = 1_700_000_000_123_456_789;
        assert_eq!(until(1_700_000_060_124, now), Duration::new(60, 543_211));
        assert_eq!(until(1_700_000_000_123, now), Duration::ZERO);
        assert_eq!(until(1_700_000_000_124, now), Duration::from_nanos(543_211));
        // Past what a nanosecond count holds, still exact.
        assert_eq!(
            until(u64::MAX, now),
            Duration::from_millis(u64::MAX) - Duration::from_nanos(now)
        );
        let last_in_nanos = u64::MAX / NANOS_PER_MILLI;
        assert_eq!(
            until(last_in_nanos + 1, 0),
            Duration::from_millis(last_in_nanos + 1)
        );
        assert_eq!(
            until(last_in_nanos, 0),
            Duration::from_millis(last_in_nanos)
        );
    }
}
