//! `MemoryStore`: the cache in this process's memory.

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_trait::async_trait;

use super::store::{CacheError, IncrementOutcome, Store, WindowIncrement, decay_ttl, has_no_room};
use crate::clock::{self, SharedClock};
use crate::sharded::{Locked, ShardedMap};
use crate::sweep::SweepSchedule;

/// A cache store in this process's memory, as Laravel's `ArrayStore`.
///
/// Every time to live is read through the crate's [`Clock`](crate::clock::Clock),
/// so tests freeze and advance it instead of sleeping. An entry is gone at
/// the exact instant it expires (`now >= expires_at`, as `ArrayStore` has
/// it). Expired entries are removed when a call finds them, and a sweep that
/// the first call after each [sweep interval](MemoryStore::with_sweep_interval)
/// runs removes the rest, so a flood of distinct keys cannot grow the process
/// without limit. Entries that [`Store::increment`] created have no time to
/// live, as with Redis `INCRBY`, and stay until they are forgotten.
///
/// The map is split in shards, each behind its own lock, so that threads
/// working on different keys rarely wait for each other. Every operation is
/// atomic on its key.
///
/// The counts are per process: behind several replicas each one counts for
/// itself. Share a `RedisStore` (feature `redis`) to count across them.
///
/// ```
/// use std::time::Duration;
/// use suprnova::cache::{MemoryStore, Store};
/// use suprnova::clock::FakeClock;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let clock = FakeClock::at_unix(1_000);
/// let store = MemoryStore::with_clock(clock.shared());
/// store.put("k", "1", Duration::from_secs(10)).await?;
/// assert_eq!(store.increment("k", 2).await?, 3);
/// clock.advance(Duration::from_secs(10));
/// assert_eq!(store.get("k").await?, None);
/// # Ok::<(), suprnova::cache::CacheError>(())
/// # }).unwrap();
/// ```
pub struct MemoryStore {
    entries: ShardedMap<Entry>,
    clock: SharedClock,
    sweep: SweepSchedule,
    /// The number of the last window a rate-limit count opened, which each
    /// window's timer holds: a counter records the number of the window
    /// that counted in it, so that a count left by an earlier window is
    /// told from one of the window just opened, even in the same instant.
    windows_opened: AtomicU64,
    /// The latest time, in nanoseconds since the Unix epoch, at which a
    /// call or a sweep removed expired entries: a call that read the clock
    /// earlier reads it again once it holds a key's lock (see
    /// [`MemoryStore::live`]).
    expired_up_to: AtomicU64,
}

#[derive(Debug, Clone)]
struct Entry {
    value: Value,
    /// When the entry expires, as a duration since the Unix epoch.
    expires_at: Option<Duration>,
}

/// A stored value. Counters and timers, which the rate limiter writes on
/// every hit, are kept as numbers (as Redis keeps an integer string), so
/// counting neither parses nor formats text.
#[derive(Debug, Clone)]
enum Value {
    Integer(i64),
    /// A rate-limit window's timer: when the window ends, and the window's
    /// number (see [`MemoryStore::windows_opened`]).
    WindowTimer {
        ends_at: i64,
        window: u64,
    },
    /// A counter a rate-limit window counted, with the number of the newest
    /// window that counted in it.
    WindowCount {
        count: i64,
        window: u64,
    },
    Text(String),
}

impl Value {
    /// A number when `text` is an integer written as Redis writes one (no
    /// sign but `-`, no leading zero), else the text as given, so that `get`
    /// gives back exactly what was put.
    fn from_text(text: &str) -> Self {
        match text.parse::<i64>() {
            Ok(n) if n.to_string() == text => Value::Integer(n),
            _ => Value::Text(text.to_owned()),
        }
    }

    fn to_text(&self) -> String {
        match self {
            Value::Integer(n)
            | Value::WindowCount { count: n, .. }
            | Value::WindowTimer { ends_at: n, .. } => n.to_string(),
            Value::Text(text) => text.clone(),
        }
    }

    /// The value as a counter, as Redis's `INCRBY` reads it: an integer
    /// written as Redis writes one, which [`Value::from_text`] keeps as a
    /// number. Any other text (`007`, `+5`, `-0`, a PHP-serialized `i:7;`)
    /// is not an integer, on this store as on Redis.
    fn integer(&self, key: &str) -> Result<i64, CacheError> {
        match self {
            Value::Integer(n)
            | Value::WindowCount { count: n, .. }
            | Value::WindowTimer { ends_at: n, .. } => Ok(*n),
            Value::Text(text) => Err(CacheError::NotAnInteger {
                key: key.to_owned(),
                value: text.clone(),
            }),
        }
    }

    /// The number of the newest window that counted in this counter;
    /// `None` for a value no window counted.
    fn counted_in(&self) -> Option<u64> {
        match self {
            Value::WindowCount { window, .. } => Some(*window),
            _ => None,
        }
    }

    /// The number of the window this timer is; 0 for a timer that no
    /// rate-limit count opened (one `put` wrote, or a Laravel application).
    fn window_of_timer(&self) -> u64 {
        match self {
            Value::WindowTimer { window, .. } => *window,
            _ => 0,
        }
    }

    /// `count`, counted by the window numbered `window` (when one did) in
    /// a counter that held `self`. A count made in no window (a plain
    /// increment, or `increment_if_below`, which a rate limiter with a
    /// window of 0 seconds uses) leaves a counter a window counted that
    /// window's: full, it refuses until the window ends, not reset as a
    /// counter no window counted would be.
    fn counted(&self, count: i64, window: Option<u64>) -> Value {
        match (window, self.counted_in()) {
            (Some(window), held) => Value::WindowCount {
                count,
                window: held.map_or(window, |held| held.max(window)),
            },
            (None, Some(held)) => Value::WindowCount {
                count,
                window: held,
            },
            (None, None) => Value::Integer(count),
        }
    }
}

impl Entry {
    fn is_live(&self, now: Duration) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }

    /// Lives until `until` at least: an earlier expiry, or none, becomes
    /// `until`; a later one is kept.
    fn live_until_at_least(&mut self, until: Option<Duration>) {
        self.expires_at = self.expires_at.max(until);
    }
}

impl MemoryStore {
    /// How often expired entries are swept by default: once a minute.
    pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(60);

    /// A store on the system clock.
    pub fn new() -> Self {
        Self::with_clock(clock::system())
    }

    /// A store on `clock`.
    pub fn with_clock(clock: SharedClock) -> Self {
        let threads = std::thread::available_parallelism().map_or(1, usize::from);
        let sweep = SweepSchedule::new(clock.unix_millis(), millis(Self::DEFAULT_SWEEP_INTERVAL));
        Self {
            entries: ShardedMap::new((threads * 4).max(16)),
            clock,
            sweep,
            windows_opened: AtomicU64::new(0),
            expired_up_to: AtomicU64::new(0),
        }
    }

    /// Sweeps expired entries every `every` instead of once a minute.
    pub fn with_sweep_interval(mut self, every: Duration) -> Self {
        self.sweep = SweepSchedule::new(self.clock.unix_millis(), millis(every));
        self
    }

    /// How many entries the store holds, counting expired ones that no call
    /// has removed yet.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the store holds no entry.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Removes every expired entry now.
    pub fn sweep(&self) {
        let now = self.clock.now();
        self.note_removal_at(now);
        self.entries.retain(|_, entry| entry.is_live(now));
    }

    /// When a call that read the clock at `now` acts, having taken a key's
    /// lock: at `now` when no removal of expired entries came later (the
    /// usual case, which pays one load, one conversion and one
    /// comparison). Otherwise the call was held between
    /// its reading and the lock, or the wall clock stepped back since: it
    /// reads the clock again, and acts at that reading when the removal is
    /// not later (a call held, however long: see [`MemoryStore::live`]). A
    /// removal later than the new reading is a clock stepped back: the call
    /// acts at the removal's time when that is at most [`STEP_BACK_HELD`]
    /// later, and at the new reading otherwise, so that a step back does
    /// not hold every window open until the clock is back where it was.
    #[inline]
    fn acting_at(&self, now: Duration) -> Duration {
        let removed_at = self.expired_up_to.load(Ordering::Relaxed);
        if removed_at <= nanos(now) {
            return now;
        }
        let again = self.clock.now();
        let read = nanos(again);
        if removed_at <= read || removed_at - read > STEP_BACK_HELD_NANOS {
            again
        } else {
            Duration::from_nanos(removed_at)
        }
    }

    /// Notes that expired entries are removed at `now`: the latest such
    /// time moves on, or, after the clock stepped back, starts again from
    /// `now`.
    fn note_removal_at(&self, now: Duration) {
        let now = nanos(now);
        let removed_at = self.expired_up_to.load(Ordering::Relaxed);
        if removed_at.saturating_sub(now) > STEP_BACK_HELD_NANOS {
            self.expired_up_to.store(now, Ordering::Relaxed);
        } else {
            self.expired_up_to.fetch_max(now, Ordering::Relaxed);
        }
    }

    /// Runs `f` on the shard of `key` with the live entry (an expired one is
    /// removed first), after sweeping when a sweep is due.
    fn with_entry<T>(
        &self,
        key: &str,
        f: impl FnOnce(&mut Locked<'_, '_, Entry>, Duration) -> T,
    ) -> T {
        let (mut shard, now) = self.live(key, self.now_swept());
        f(&mut shard, now)
    }

    /// The time, after sweeping when a sweep is due.
    fn now_swept(&self) -> Duration {
        let now = self.clock.now();
        if self.sweep.claim(millis(now)) {
            self.sweep();
        }
        now
    }

    /// The shard of `key`, locked, with an expired entry of `key` removed,
    /// and the time the call acts at: `now`, read before the lock, or a
    /// reading taken again under the lock when another call removed
    /// expired entries at a later time (see [`MemoryStore::acting_at`]).
    ///
    /// A call may read the clock and take a key's lock only after another
    /// call, which read the clock later, found an entry expired and removed
    /// it. Acting at its own earlier time, it would see the key as the
    /// other did not (a window's counter gone while its timer still stood)
    /// and count in a window that has ended. Each removal notes its time
    /// first, under the lock, so whoever takes the lock after it reads the
    /// clock again and acts no earlier, however long it was held.
    fn live<'k>(&self, key: &'k str, now: Duration) -> (Locked<'_, 'k, Entry>, Duration) {
        let mut locked = self.entries.lock(key);
        let now = self.acting_at(now);
        if locked.get().is_some_and(|e| !e.is_live(now)) {
            self.note_removal_at(now);
            locked.remove();
        }
        (locked, now)
    }

    /// [`Store::add`] on the locked live entry: stores `value()` for `ttl`
    /// unless the key holds a value; `true` when it stored.
    fn add_locked(
        shard: &mut Locked<'_, '_, Entry>,
        value: impl FnOnce() -> Value,
        now: Duration,
        ttl: Duration,
    ) -> bool {
        if shard.get().is_some() {
            return false;
        }
        shard.insert(Entry {
            value: value(),
            expires_at: Self::expiry(now, ttl),
        });
        true
    }

    /// [`Store::increment_in_window`]: one clock read for both entries, and
    /// the timer kept as the number it is.
    ///
    /// The two keys are locked one after the other, so a counter found
    /// full when the timer was just opened may have been filled in the new
    /// window meanwhile. Each counter therefore records the end of the
    /// newest window that counted in it: when this call opened the window,
    /// one left full (with no room for the amount) by an older window, or
    /// by no window at all (written by `put`, or made by `increment`), is
    /// reset, as Laravel's `tooManyAttempts` resets a count whose timer is
    /// gone, and one the current window filled is not; one with room is
    /// counted on. Under a timer this call did not open, no counter is
    /// reset.
    ///
    /// The time is read once, and taken later when another call removed
    /// expired entries after it was read ([`MemoryStore::live`]); when the
    /// timer found has ended by the time the counter is locked, as a call
    /// that removed the counter saw it, the call starts again at that time.
    fn count_in_window(&self, count: WindowIncrement<'_>) -> Result<IncrementOutcome, CacheError> {
        let read = self.now_swept();
        let mut at = read;
        let (opened, window, now, mut counter) = loop {
            let (opened, window, timer_ends, now) = {
                let (mut timer, now) = self.live(count.timer_key, at);
                // A timer opened later than the caller read its time ends
                // as much later.
                let late = now.as_secs().saturating_sub(read.as_secs());
                let opened = Self::add_locked(
                    &mut timer,
                    || Value::WindowTimer {
                        ends_at: count
                            .ends_at
                            .saturating_add(i64::try_from(late).unwrap_or(i64::MAX)),
                        window: self.windows_opened.fetch_add(1, Ordering::Relaxed) + 1,
                    },
                    now,
                    count.ttl(),
                );
                let entry = timer.get();
                let window = entry.map(|entry| entry.value.window_of_timer());
                (
                    opened,
                    window,
                    entry.and_then(|entry| entry.expires_at),
                    now,
                )
            };
            let (counter, now) = self.live(count.key, now);
            if timer_ends.is_some_and(|ends| now >= ends) {
                at = now;
                continue;
            }
            break (opened, window, now, counter);
        };
        if opened
            && let Some(window) = window
            && count.amount <= count.ceiling
        {
            // A counter is a leftover only when this call opened the
            // window, as Redis's script reads it: under a timer it did not
            // open, the counter is the window's count, whatever the timer
            // holds (a timer's value changed by a caller is no new window).
            // And then only one an earlier window counted in, or no window
            // (put, or made by increment): one this window counted in is its
            // count. Windows are told apart by number, not by when they end,
            // so a timer removed and opened again in the same second opens a
            // window of its own. (The timer and the counter are locked one
            // after the other, so a caller that finds the timer another has
            // just opened, and reaches a full leftover first, is refused
            // before the opener resets it: a refusal at the opening of a
            // window, never an admission too many.)
            let leftover = |entry: &Entry| {
                entry
                    .value
                    .counted_in()
                    .is_none_or(|counted_in| counted_in < window)
            };
            // Full: no room for the amount (a count at or above the
            // maximum the ceiling stands for). One with room is kept and
            // counted on, as Laravel's `tooManyAttempts` keeps it.
            let left_full = match counter.get() {
                Some(entry) if leftover(entry) => {
                    let current = entry.value.integer(count.key)?;
                    has_no_room(current, count.amount, count.ceiling)
                }
                _ => false,
            };
            if left_full {
                counter.remove();
            }
        }
        let outcome = Self::count_below(
            &mut counter,
            count.key,
            now,
            count.decay_seconds,
            count.amount,
            count.ceiling,
            window,
        )?;
        if opened && let Some(entry) = counter.get_mut() {
            let window_ends = Self::expiry(now, decay_ttl(count.decay_seconds));
            if outcome.counted || entry.value.counted_in() == window {
                // A counter this window counted in lives at least as long
                // as the window, whoever counted: the call that opened it,
                // or another call, which found the timer this one opened
                // and counted first, in a counter left by an earlier window
                // (keeping its shorter time to live), or made the counter
                // at a time it read before this call did.
                entry.live_until_at_least(window_ends);
            } else if entry.expires_at.is_none() {
                // Refused, on a counter no call of this window counted in,
                // it gives a full counter with no time to live (a plain
                // increment wrote it) the window's, so that it ends with
                // this window, and leaves one with a time to live as it
                // is, as Redis does: that one is a count an ended window
                // left, which, lengthened, would refuse this whole window.
                entry.expires_at = window_ends;
            }
        }
        Ok(outcome)
    }

    /// [`Store::increment_in_open_window`]: a counter holding a count
    /// other than 0 is counted in under its lock, in one step; a missing
    /// one, or one at 0, only while the timer stands, read before the
    /// counter is locked again. Callers at the same moment on a key with
    /// no window therefore never see each other's count: none is stored.
    fn count_in_open_window(
        &self,
        key: &str,
        timer_key: &str,
        amount: i64,
    ) -> Result<i64, CacheError> {
        let now = self.now_swept();
        let now = {
            let (mut counter, now) = self.live(key, now);
            if let Some(count) = Self::count_held(&mut counter, key, amount)? {
                return Ok(count);
            }
            now
        };
        let (timer_ends, now) = {
            let (timer, now) = self.live(timer_key, now);
            (timer.get().and_then(|entry| entry.expires_at), now)
        };
        let (mut counter, now) = self.live(key, now);
        // Counted meanwhile: the count stands, and so does this one.
        if let Some(count) = Self::count_held(&mut counter, key, amount)? {
            return Ok(count);
        }
        match timer_ends.filter(|&ends| now < ends) {
            Some(ends) => {
                match counter.get_mut() {
                    // At 0: a counter a window counted stays that window's.
                    Some(entry) => {
                        entry.value = entry.value.counted(amount, None);
                        entry.live_until_at_least(Some(ends));
                    }
                    None => counter.insert(Entry {
                        value: Value::Integer(amount),
                        expires_at: Some(ends),
                    }),
                }
            }
            None => {
                counter.remove();
            }
        }
        Ok(amount)
    }

    /// `amount` added to the locked live counter of `key` when it holds a
    /// count other than 0, as [`Store::increment`] adds it; `None` for a
    /// missing counter or one at 0, which counts only in an open window.
    fn count_held(
        counter: &mut Locked<'_, '_, Entry>,
        key: &str,
        amount: i64,
    ) -> Result<Option<i64>, CacheError> {
        let Some(entry) = counter.get_mut() else {
            return Ok(None);
        };
        let current = entry.value.integer(key)?;
        if current == 0 {
            return Ok(None);
        }
        let next = current
            .checked_add(amount)
            .ok_or_else(|| CacheError::Overflow {
                key: key.to_owned(),
            })?;
        // A counter a window counted stays that window's.
        entry.value = entry.value.counted(next, None);
        Ok(Some(next))
    }

    /// [`Store::increment_if_below`] on the locked live entry of `key`.
    /// A count made in a window (`window`, its timer's number) is
    /// recorded with it. A counter gets a time to live when it has none,
    /// `decay_seconds` from `now`, as Redis's script gives it. (The call
    /// that opened the window then gives one that would end before the
    /// window the window's: see [`MemoryStore::count_in_window`].)
    fn count_below(
        shard: &mut Locked<'_, '_, Entry>,
        key: &str,
        now: Duration,
        decay_seconds: i64,
        amount: i64,
        ceiling: i64,
        window: Option<u64>,
    ) -> Result<IncrementOutcome, CacheError> {
        let current = match shard.get() {
            Some(entry) => entry.value.integer(key)?,
            None => 0,
        };
        let outcome = IncrementOutcome::decide(current, amount, ceiling);
        if outcome.counted {
            let decay = decay_ttl(decay_seconds);
            // Look up before inserting: only a new key allocates.
            match shard.get_mut() {
                Some(entry) => {
                    entry.value = entry.value.counted(outcome.count, window);
                    if entry.expires_at.is_none() {
                        entry.expires_at = Self::expiry(now, decay);
                    }
                }
                None => {
                    let entry = Entry {
                        value: Value::Integer(0).counted(outcome.count, window),
                        expires_at: Self::expiry(now, decay),
                    };
                    shard.insert(entry);
                }
            }
        }
        Ok(outcome)
    }

    fn expiry(now: Duration, ttl: Duration) -> Option<Duration> {
        Some(now.saturating_add(ttl.max(Duration::from_secs(1))))
    }
}

/// How far the wall clock may step back under a removal of expired
/// entries and calls still act at the removal's time: a step back of up to
/// this keeps every call at or after the removal (whose entries end no
/// earlier than what the removal saw), and a longer one is taken as the
/// new time.
const STEP_BACK_HELD: Duration = Duration::from_secs(1);

/// [`STEP_BACK_HELD`] in nanoseconds.
const STEP_BACK_HELD_NANOS: u64 = STEP_BACK_HELD.as_nanos() as u64;

/// `time` in nanoseconds, at most `u64::MAX` (the year 2554).
#[inline]
fn nanos(time: Duration) -> u64 {
    u64::try_from(time.as_nanos()).unwrap_or(u64::MAX)
}

impl Default for MemoryStore {
    fn default() -> Self {
        Self::new()
    }
}

impl fmt::Debug for MemoryStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryStore")
            .field("entries", &self.len())
            .field("clock", &self.clock)
            .finish()
    }
}

#[async_trait]
impl Store for MemoryStore {
    async fn get(&self, key: &str) -> Result<Option<String>, CacheError> {
        Ok(self.with_entry(key, |shard, _| shard.get().map(|e| e.value.to_text())))
    }

    async fn put(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError> {
        self.with_entry(key, |shard, now| {
            let entry = Entry {
                value: Value::from_text(value),
                expires_at: Self::expiry(now, ttl),
            };
            shard.insert(entry);
        });
        Ok(())
    }

    async fn add(&self, key: &str, value: &str, ttl: Duration) -> Result<bool, CacheError> {
        Ok(self.with_entry(key, |shard, now| {
            Self::add_locked(shard, || Value::from_text(value), now, ttl)
        }))
    }

    async fn increment(&self, key: &str, by: i64) -> Result<i64, CacheError> {
        self.with_entry(key, |shard, _| {
            let current = match shard.get() {
                Some(entry) => entry.value.integer(key)?,
                None => 0,
            };
            let next = current
                .checked_add(by)
                .ok_or_else(|| CacheError::Overflow {
                    key: key.to_owned(),
                })?;
            match shard.get_mut() {
                // A counter a window counted stays that window's.
                Some(entry) => entry.value = entry.value.counted(next, None),
                None => {
                    let entry = Entry {
                        value: Value::Integer(next),
                        expires_at: None,
                    };
                    shard.insert(entry);
                }
            }
            Ok(next)
        })
    }

    async fn increment_if_below(
        &self,
        key: &str,
        decay_seconds: i64,
        amount: i64,
        ceiling: i64,
    ) -> Result<IncrementOutcome, CacheError> {
        self.with_entry(key, |shard, now| {
            Self::count_below(shard, key, now, decay_seconds, amount, ceiling, None)
        })
    }

    async fn increment_in_open_window(
        &self,
        key: &str,
        timer_key: &str,
        amount: i64,
    ) -> Result<i64, CacheError> {
        self.count_in_open_window(key, timer_key, amount)
    }

    async fn increment_in_window(
        &self,
        count: WindowIncrement<'_>,
    ) -> Result<IncrementOutcome, CacheError> {
        self.count_in_window(count)
    }

    fn increment_in_window_without_waiting(
        &self,
        count: WindowIncrement<'_>,
    ) -> Option<Result<IncrementOutcome, CacheError>> {
        Some(self.count_in_window(count))
    }

    async fn expire_at_least(&self, key: &str, ttl: Duration) -> Result<(), CacheError> {
        self.with_entry(key, |shard, now| {
            if let Some(entry) = shard.get_mut() {
                entry.live_until_at_least(Some(now.saturating_add(ttl)));
            }
        });
        Ok(())
    }

    async fn forget(&self, key: &str) -> Result<bool, CacheError> {
        Ok(self.with_entry(key, |shard, _| shard.remove().is_some()))
    }

    async fn ttl(&self, key: &str) -> Result<Option<Duration>, CacheError> {
        Ok(self.with_entry(key, |shard, now| {
            shard
                .get()
                .and_then(|e| e.expires_at)
                .map(|at| at.saturating_sub(now))
        }))
    }

    fn name(&self) -> &'static str {
        "memory"
    }
}

fn millis(at: Duration) -> u64 {
    u64::try_from(at.as_millis()).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::clock::FakeClock;
    use crate::limiter::CacheRateLimiter;

    /// A counter an earlier window left full is reset by the call that
    /// opens the next window, even one that ends in the same second (its
    /// timer removed and written again): windows are told apart by number.
    /// Under a timer the call did not open, nothing is reset.
    #[tokio::test]
    async fn only_a_counter_an_earlier_window_left_full_is_reset() {
        let store = MemoryStore::with_clock(FakeClock::at_unix(1_000).shared());
        let count = |ends_at| WindowIncrement {
            key: "c",
            timer_key: "c:timer",
            ends_at,
            decay_seconds: 60,
            amount: 1,
            ceiling: 2,
        };
        let outcome = |counted, count| IncrementOutcome { counted, count };
        assert_eq!(
            store.count_in_window(count(1_060)).unwrap(),
            outcome(true, 1)
        );
        assert_eq!(
            store.count_in_window(count(1_060)).unwrap(),
            outcome(true, 2)
        );
        // Full under its own window: refused.
        assert_eq!(
            store.count_in_window(count(1_060)).unwrap(),
            outcome(false, 2)
        );
        // The timer removed: the next call opens a window, and resets.
        assert!(store.forget("c:timer").await.unwrap());
        assert_eq!(
            store.count_in_window(count(1_060)).unwrap(),
            outcome(true, 1)
        );
        assert_eq!(
            store.count_in_window(count(1_060)).unwrap(),
            outcome(true, 2)
        );
        // A timer whose value a caller raised is no new window: kept full.
        store.increment("c:timer", 5).await.unwrap();
        assert_eq!(
            store.count_in_window(count(1_061)).unwrap(),
            outcome(false, 2)
        );
        // Written by a plain increment, counted by no window: reset.
        store.put("d", "2", Duration::from_secs(300)).await.unwrap();
        let plain = WindowIncrement {
            key: "d",
            timer_key: "d:timer",
            ..count(1_060)
        };
        assert_eq!(store.count_in_window(plain).unwrap(), outcome(true, 1));
        assert_eq!(store.get("d").await.unwrap().as_deref(), Some("1"));
    }

    #[tokio::test]
    async fn values_come_back_as_they_were_put_and_integers_count() {
        let store = MemoryStore::with_clock(FakeClock::at_unix(1_000).shared());
        let ttl = Duration::from_secs(60);
        for text in ["007", "-0", "+5", "12", "-3", "1e3", "i:5;", "abc", ""] {
            store.put("k", text, ttl).await.unwrap();
            assert_eq!(store.get("k").await.unwrap().as_deref(), Some(text));
        }
        store.put("n", "41", ttl).await.unwrap();
        assert_eq!(store.increment("n", 1).await.unwrap(), 42);
        assert_eq!(store.get("n").await.unwrap().as_deref(), Some("42"));
        // Counted only as Redis's INCRBY counts: an integer as Redis writes
        // one.
        for text in ["i:7;", "007", "+5", "-0", "abc"] {
            store.put("x", text, ttl).await.unwrap();
            assert!(
                matches!(
                    store.increment("x", 1).await,
                    Err(CacheError::NotAnInteger { value, .. }) if value == text
                ),
                "{text}"
            );
            assert_eq!(store.get("x").await.unwrap().as_deref(), Some(text));
        }
    }

    #[tokio::test]
    async fn a_due_sweep_removes_expired_entries_of_every_shard() {
        let clock = FakeClock::at_unix(1_000);
        let store =
            MemoryStore::with_clock(clock.shared()).with_sweep_interval(Duration::from_secs(30));
        for i in 0..500 {
            store
                .put(&format!("k{i}"), "1", Duration::from_secs(5))
                .await
                .unwrap();
        }
        store
            .put("long", "1", Duration::from_secs(3600))
            .await
            .unwrap();
        assert_eq!(store.len(), 501);
        clock.advance(Duration::from_secs(29));
        store.get("other").await.unwrap();
        assert_eq!(store.len(), 501, "no sweep before the interval");
        clock.advance(Duration::from_secs(1));
        store.get("other").await.unwrap();
        assert_eq!(store.len(), 1);
        assert_eq!(store.get("long").await.unwrap().as_deref(), Some("1"));
    }

    #[tokio::test]
    async fn a_clock_set_back_does_not_stop_sweeping() {
        let clock = FakeClock::at_unix(1_000);
        let store =
            MemoryStore::with_clock(clock.shared()).with_sweep_interval(Duration::from_secs(30));
        clock.set(chrono::DateTime::from_timestamp(900, 0).unwrap());
        for i in 0..100 {
            store
                .put(&format!("k{i}"), "1", Duration::from_secs(5))
                .await
                .unwrap();
        }
        clock.advance(Duration::from_secs(31));
        store.get("other").await.unwrap();
        assert_eq!(store.len(), 0);
    }

    #[tokio::test]
    async fn an_expired_entry_is_removed_when_a_call_finds_it() {
        let clock = FakeClock::at_unix(1_000);
        let store = MemoryStore::with_clock(clock.shared());
        store.put("k", "1", Duration::from_secs(2)).await.unwrap();
        clock.advance(Duration::from_secs(2));
        assert_eq!(store.len(), 1);
        assert!(!store.has("k").await.unwrap());
        assert_eq!(store.len(), 0);
    }

    /// A memory store that answers `increment_in_window` with the trait's
    /// provided method: `add` and `increment_if_below` as two calls. Asked
    /// without a future, it gives its canned answer, if it has one, and
    /// otherwise the trait's `None`.
    #[derive(Debug)]
    struct TwoSteps(MemoryStore, Option<IncrementOutcome>);

    #[async_trait]
    impl Store for TwoSteps {
        async fn get(&self, key: &str) -> Result<Option<String>, CacheError> {
            self.0.get(key).await
        }
        async fn put(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError> {
            self.0.put(key, value, ttl).await
        }
        async fn add(&self, key: &str, value: &str, ttl: Duration) -> Result<bool, CacheError> {
            self.0.add(key, value, ttl).await
        }
        async fn increment(&self, key: &str, by: i64) -> Result<i64, CacheError> {
            self.0.increment(key, by).await
        }
        async fn increment_if_below(
            &self,
            key: &str,
            decay_seconds: i64,
            amount: i64,
            ceiling: i64,
        ) -> Result<IncrementOutcome, CacheError> {
            self.0
                .increment_if_below(key, decay_seconds, amount, ceiling)
                .await
        }
        async fn forget(&self, key: &str) -> Result<bool, CacheError> {
            self.0.forget(key).await
        }
        async fn ttl(&self, key: &str) -> Result<Option<Duration>, CacheError> {
            self.0.ttl(key).await
        }
        fn increment_in_window_without_waiting(
            &self,
            _count: WindowIncrement<'_>,
        ) -> Option<Result<IncrementOutcome, CacheError>> {
            self.1.map(Ok)
        }
        fn name(&self) -> &'static str {
            "two steps"
        }
    }

    // The rate limiter asks the memory store without a future, and a store
    // that must wait (here the two calls) through one; both count alike.
    #[tokio::test]
    async fn the_rate_limiter_counts_alike_at_once_and_through_a_future() {
        let clock = FakeClock::at_unix(1_000);
        let at_once = Arc::new(MemoryStore::with_clock(clock.shared()));
        let waiting = Arc::new(TwoSteps(MemoryStore::with_clock(clock.shared()), None));
        let probe = |store: &dyn Store| {
            store
                .increment_in_window_without_waiting(WindowIncrement {
                    key: "probe",
                    timer_key: "probe:timer",
                    ends_at: 1_060,
                    decay_seconds: 60,
                    amount: 1,
                    ceiling: 2,
                })
                .is_some()
        };
        assert!(probe(at_once.as_ref()));
        assert!(!probe(waiting.as_ref()));
        let stores: [Arc<dyn Store>; 2] = [at_once, waiting];
        for store in stores {
            let limiter = CacheRateLimiter::new(store.clone(), clock.shared());
            let mut outcomes = Vec::new();
            for _ in 0..3 {
                let outcome = limiter.increment_if_below("k", 60, 1, 2).await.unwrap();
                outcomes.push((outcome.counted, outcome.count));
            }
            assert_eq!(
                outcomes,
                [(true, 1), (true, 2), (false, 2)],
                "{}",
                store.name()
            );
            assert_eq!(store.get("k:timer").await.unwrap().as_deref(), Some("1060"));
        }
    }

    // The answer given without a future is the one the rate limiter uses,
    // and the store's future is then not asked.
    #[tokio::test]
    async fn the_rate_limiter_takes_the_answer_given_at_once() {
        let clock = FakeClock::at_unix(1_000);
        let canned = IncrementOutcome {
            counted: true,
            count: 42,
        };
        let store = Arc::new(TwoSteps(
            MemoryStore::with_clock(clock.shared()),
            Some(canned),
        ));
        let limiter = CacheRateLimiter::new(store.clone(), clock.shared());
        assert_eq!(
            limiter.increment_if_below("k", 60, 1, 2).await.unwrap(),
            canned
        );
        assert_eq!(limiter.hit("h", 60).await.unwrap(), 42);
        assert_eq!(
            store.get("k").await.unwrap(),
            None,
            "the future counted too"
        );
        assert_eq!(store.get("h:timer").await.unwrap(), None);
    }

    // The fused step leaves exactly what the two calls leave: the timer
    // written once per window with its end, the counter below the ceiling,
    // both expiring with the window.
    #[tokio::test]
    async fn counting_in_a_window_in_one_step_matches_the_two_calls() {
        let clock = FakeClock::at_unix(1_000);
        let fused = MemoryStore::with_clock(clock.shared());
        let split = TwoSteps(MemoryStore::with_clock(clock.shared()), None);
        let stores: [&dyn Store; 2] = [&fused, &split];
        let k = WindowIncrement {
            key: "k",
            timer_key: "k:timer",
            ends_at: 0,
            decay_seconds: 10,
            amount: 1,
            ceiling: 3,
        };
        for step in 0..8_i64 {
            let ends_at = 1_000 + step / 4 * 10 + 10;
            let mut seen = Vec::new();
            for store in stores {
                let outcome = store
                    .increment_in_window(WindowIncrement { ends_at, ..k })
                    .await
                    .unwrap();
                seen.push((
                    outcome,
                    store.get("k").await.unwrap(),
                    store.get("k:timer").await.unwrap(),
                    store.ttl("k").await.unwrap(),
                    store.ttl("k:timer").await.unwrap(),
                ));
            }
            assert_eq!(seen[0], seen[1], "step {step}");
            clock.advance(Duration::from_millis(2_500));
        }
        // A ceiling of 1: the first call counts, the second is refused and
        // leaves the count; the timer keeps the end of the window the first
        // call opened.
        let n = WindowIncrement {
            key: "n",
            timer_key: "n:timer",
            ends_at: 1_050,
            decay_seconds: 60,
            amount: 1,
            ceiling: 1,
        };
        let outcome = fused.increment_in_window(n).await.unwrap();
        assert_eq!((outcome.counted, outcome.count), (true, 1));
        let again = fused
            .increment_in_window(WindowIncrement {
                ends_at: 1_051,
                ..n
            })
            .await
            .unwrap();
        assert_eq!((again.counted, again.count), (false, 1));
        assert_eq!(fused.get("n:timer").await.unwrap().as_deref(), Some("1050"));
        assert_eq!(fused.ttl("n").await.unwrap(), Some(Duration::from_secs(60)));
    }
}
