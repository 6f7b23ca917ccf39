//! `CacheRateLimiter`: Laravel's fixed-window rate limiter over a cache
//! store.

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use super::clean_key::{clean_rate_limiter_key, cleaned};
use super::writes_seen::note_write;
use crate::cache::{
    CacheError, IncrementOutcome, Store, WindowIncrement, has_no_room, parse_integer, window_end,
};
use crate::clock::SharedClock;

/// Laravel's `Illuminate\Cache\RateLimiter`: a fixed-window counter kept in
/// a cache [`Store`], with its time read from an injected clock.
///
/// The static [`RateLimiter`](crate::RateLimiter) facade calls the instance
/// installed in the container; tests and libraries can hold one directly.
///
/// # Storage
///
/// For a key `K` (after [cleaning](CacheRateLimiter::clean_rate_limiter_key))
/// and a window of `D` seconds, two entries, exactly as Laravel writes them:
///
/// | key | value | time to live |
/// | --- | --- | --- |
/// | `K` | the count, an integer | `D`, set when the window opens |
/// | `K:timer` | the end of the window in Unix seconds: `floor(now) + D` | `D`, set when the window opens |
///
/// The window opens at the first hit: the timer is written with
/// [`Store::add`], so only the first caller of a window writes it, and the
/// counter with [`Store::increment_if_below`], which gives a new counter its
/// time to live in the same atomic step as the count. Later hits extend
/// neither time to live. When both expire the next hit opens a new window.
///
/// A window of 0 seconds or less opens none, as in Laravel: on a key with no
/// counter the hit returns the amount, stores nothing and never limits; a
/// counter an earlier window left (with a positive decay) is counted in,
/// and keeps its time to live. See
/// [`increment_if_below`](CacheRateLimiter::increment_if_below) for how a
/// full one refuses.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use suprnova::cache::MemoryStore;
/// use suprnova::clock::FakeClock;
/// use suprnova::limiter::CacheRateLimiter;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let clock = FakeClock::at_unix(946_684_800);
/// let limiter =
///     CacheRateLimiter::new(Arc::new(MemoryStore::with_clock(clock.shared())), clock.shared());
/// assert_eq!(limiter.hit("k", 60).await?, 1);
/// assert_eq!(limiter.hit("k", 60).await?, 2);
/// assert_eq!(limiter.remaining("k", 5).await?, 3);
/// assert!(limiter.too_many_attempts("k", 2).await?);
/// clock.advance(Duration::from_secs(59));
/// assert_eq!(limiter.available_in("k").await?, 1);
/// clock.advance(Duration::from_secs(1));
/// assert_eq!(limiter.attempts("k").await?, 0);
/// # Ok::<(), suprnova::cache::CacheError>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct CacheRateLimiter {
    store: Arc<dyn Store>,
    clock: SharedClock,
}

/// Where a window ends and how long its entries live.
#[derive(Debug, Clone, Copy)]
struct Window {
    /// The value of `K:timer`: the end of the window in Unix seconds.
    ends_at: i64,
    /// The time to live of both entries, in seconds; 0 or less opens no
    /// window.
    ttl_seconds: i64,
}

impl Window {
    fn opens(self) -> bool {
        self.ttl_seconds > 0
    }

    fn ttl(self) -> Duration {
        Duration::from_secs(self.ttl_seconds.max(0).unsigned_abs())
    }

    /// `amount` counted on `key` up to `ceiling` in this window, whose
    /// timer is `timer_key`.
    fn count<'a>(
        self,
        key: &'a str,
        timer_key: &'a str,
        amount: i64,
        ceiling: i64,
    ) -> WindowIncrement<'a> {
        WindowIncrement {
            key,
            timer_key,
            ends_at: self.ends_at,
            decay_seconds: self.ttl_seconds,
            amount,
            ceiling,
        }
    }
}

/// What [`CacheRateLimiter::count_in_no_window`] did.
#[derive(Debug, Clone, Copy)]
struct NoWindowCount {
    outcome: IncrementOutcome,
    /// Whether a counter is left in the store (with `outcome.count`).
    kept: bool,
    /// For a call that did not count, the end of the window its timer
    /// holds; `None` when there is no timer or it holds no integer.
    window_end: Option<i64>,
}

impl NoWindowCount {
    fn kept(outcome: IncrementOutcome, window_end: Option<i64>) -> Self {
        Self {
            outcome,
            kept: true,
            window_end,
        }
    }

    fn gone(outcome: IncrementOutcome) -> Self {
        Self {
            outcome,
            kept: false,
            window_end: None,
        }
    }

    /// The outcome with the count left in the store: 0 for a call that
    /// counted and kept no counter.
    fn left_in_store(self) -> IncrementOutcome {
        let mut outcome = self.outcome;
        if outcome.counted && !self.kept {
            outcome.count = 0;
        }
        outcome
    }
}

impl CacheRateLimiter {
    /// A limiter over `store` whose windows read `clock`.
    pub fn new(store: Arc<dyn Store>, clock: SharedClock) -> Self {
        Self { store, clock }
    }

    /// The store the counters live in.
    pub fn store(&self) -> &Arc<dyn Store> {
        &self.store
    }

    /// The clock the windows read.
    pub fn clock(&self) -> &SharedClock {
        &self.clock
    }

    /// Cleans a key as Laravel does; see
    /// [`clean_rate_limiter_key`].
    pub fn clean_rate_limiter_key(key: &str) -> String {
        clean_rate_limiter_key(key)
    }

    /// Counts one attempt in a window of `decay_seconds`, opening the window
    /// when none is open, and returns the count.
    pub async fn hit(&self, key: &str, decay_seconds: i64) -> Result<i64, CacheError> {
        self.increment(key, decay_seconds, 1).await
    }

    /// Counts one attempt in a window of 60 seconds: Laravel's `hit($key)`.
    pub async fn hit_for_minute(&self, key: &str) -> Result<i64, CacheError> {
        self.hit(key, 60).await
    }

    /// Counts one attempt in a window that ends at `until` (the timer holds
    /// its Unix second; the entries live for the whole seconds left, rounded
    /// up). A time that has passed opens no window: the hit counts in a
    /// window that is already open, and leaves nothing behind otherwise.
    pub async fn hit_until(&self, key: &str, until: DateTime<Utc>) -> Result<i64, CacheError> {
        let now_ms = i64::try_from(self.clock.unix_millis()).unwrap_or(i64::MAX);
        let left_ms = until.timestamp_millis().saturating_sub(now_ms);
        let window = Window {
            ends_at: until.timestamp(),
            ttl_seconds: if left_ms > 0 {
                left_ms.saturating_add(999) / 1000
            } else {
                0
            },
        };
        self.count(&cleaned(key), window, 1).await
    }

    /// Counts one attempt and tells whether it went over `max_attempts`:
    /// `true` means refuse the request. The count and the comparison come
    /// from the same atomic increment, so concurrent callers never slip past
    /// the limit, as they can between a
    /// [`too_many_attempts`](Self::too_many_attempts) and a [`hit`](Self::hit).
    /// Refused attempts are counted too. `i64::MAX` as the maximum is
    /// unlimited: always `false`, still counted.
    pub async fn hit_and_check(
        &self,
        key: &str,
        max_attempts: i64,
        decay_seconds: i64,
    ) -> Result<bool, CacheError> {
        let hits = self.hit(key, decay_seconds).await?;
        Ok(max_attempts != i64::MAX && hits > max_attempts)
    }

    /// Adds `amount` attempts in a window of `decay_seconds` and returns the
    /// count; for limits where a request costs more than one attempt.
    pub async fn increment(
        &self,
        key: &str,
        decay_seconds: i64,
        amount: i64,
    ) -> Result<i64, CacheError> {
        let window = self.window(decay_seconds);
        self.count(&cleaned(key), window, amount).await
    }

    /// Takes `amount` attempts back (the count may go to 0 or below), in a
    /// window of `decay_seconds` that it opens when none is open, as
    /// Laravel's `decrement` does.
    pub async fn decrement(
        &self,
        key: &str,
        decay_seconds: i64,
        amount: i64,
    ) -> Result<i64, CacheError> {
        self.increment(key, decay_seconds, amount.saturating_neg())
            .await
    }

    /// The count of the open window; 0 when none is open.
    pub async fn attempts(&self, key: &str) -> Result<i64, CacheError> {
        self.attempts_of(&cleaned(key)).await
    }

    /// The whole seconds until the window ends (`timer - now`, at least 0);
    /// 0 when no window is open. It can be 0 while the window is still open
    /// for a fraction of a second, as in Laravel.
    pub async fn available_in(&self, key: &str) -> Result<i64, CacheError> {
        Ok(match self.window_ends_at(key).await? {
            Some(ends_at) => seconds_until(ends_at, self.clock.unix_seconds()),
            None => 0,
        })
    }

    /// When the window ends, in Unix seconds, as its timer holds it; `None`
    /// when no window is open. A timer that holds no integer is an error.
    pub(crate) async fn window_ends_at(&self, key: &str) -> Result<Option<i64>, CacheError> {
        let timer = timer_key(&cleaned(key));
        match self.store.get(&timer).await? {
            Some(value) => parse_integer(&timer, &value).map(Some),
            None => Ok(None),
        }
    }

    /// How many attempts are left of `max_attempts` (never below 0).
    pub async fn remaining(&self, key: &str, max_attempts: i64) -> Result<i64, CacheError> {
        let attempts = self.attempts(key).await?;
        Ok(max_attempts.saturating_sub(attempts).max(0))
    }

    /// Laravel's spelling of [`remaining`](Self::remaining).
    pub async fn retries_left(&self, key: &str, max_attempts: i64) -> Result<i64, CacheError> {
        self.remaining(key, max_attempts).await
    }

    /// Whether the window is full: the count has reached `max_attempts` and
    /// the window is still open. A count at its maximum whose timer is gone
    /// is removed (and the answer is `false`), so the next hit opens a new
    /// window.
    pub async fn too_many_attempts(
        &self,
        key: &str,
        max_attempts: i64,
    ) -> Result<bool, CacheError> {
        let key = cleaned(key);
        match self.fullness(&key, max_attempts).await? {
            Fullness::Room => Ok(false),
            Fullness::Full => Ok(true),
            Fullness::FullWithoutTimer => {
                note_write();
                self.store.forget(&key).await?;
                Ok(false)
            }
        }
    }

    /// Whether the window is full, as
    /// [`too_many_attempts`](Self::too_many_attempts) tells, without removing
    /// a full count whose timer is gone (the count that follows resets it in
    /// its own atomic step, where a removal here could take counts others
    /// made in the new window meanwhile).
    pub(crate) async fn window_is_full(
        &self,
        key: &str,
        max_attempts: i64,
    ) -> Result<bool, CacheError> {
        let fullness = self.fullness(&cleaned(key), max_attempts).await?;
        Ok(matches!(fullness, Fullness::Full))
    }

    /// How full the window of the cleaned `key` is.
    async fn fullness(&self, key: &str, max_attempts: i64) -> Result<Fullness, CacheError> {
        if self.attempts_of(key).await? < max_attempts {
            return Ok(Fullness::Room);
        }
        Ok(if self.store.has(&timer_key(key)).await? {
            Fullness::Full
        } else {
            Fullness::FullWithoutTimer
        })
    }

    /// Removes the count and keeps the timer (the window stays pinned);
    /// `true` when there was a count.
    pub async fn reset_attempts(&self, key: &str) -> Result<bool, CacheError> {
        note_write();
        self.store.forget(&cleaned(key)).await
    }

    /// Removes the count and the timer.
    pub async fn clear(&self, key: &str) -> Result<(), CacheError> {
        note_write();
        let key = cleaned(key);
        self.store.forget(&key).await?;
        self.store.forget(&timer_key(&key)).await?;
        Ok(())
    }

    /// Runs `callback` and counts one attempt when the window is not full;
    /// returns `None` without running it when it is.
    ///
    /// The attempt is counted before the callback runs, by the one atomic
    /// step of [`increment_if_below`](Self::increment_if_below), so callers
    /// at the same moment never run more than `max_attempts` callbacks in
    /// a window. (Laravel checks, runs the callback and counts after it:
    /// callers that check before any of them has counted all pass, and
    /// twenty callers making fifty attempts each at a limit of 100 ran 115
    /// and 119 callbacks that way in two runs.) A full count whose window
    /// has ended is reset by that same step, which opens the new window
    /// (on a Redis Cluster, where the count and its timer are two keys on
    /// two nodes, once the count's own time to live has run out too). An
    /// attempt is counted only when its
    /// callback runs, and stays counted whatever the callback does. A
    /// maximum below 1 runs no callback.
    pub async fn attempt<F, Fut, T>(
        &self,
        key: &str,
        max_attempts: i64,
        callback: F,
        decay_seconds: i64,
    ) -> Result<Option<T>, CacheError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        // The count alone decides, atomically: it also resets a full count
        // whose window has ended, in the step that opens the new window. A
        // `too_many_attempts` before it would read, check and remove in
        // three steps, and remove counts others had made in the new window
        // meanwhile (twelve callers at a limit of 3 ran 34 to 39 callbacks
        // in five windows that way).
        if max_attempts < 1 {
            // A count a decrement left below 0 has room under a maximum of
            // 0; no count runs a callback under it.
            return Ok(None);
        }
        let counted = self
            .increment_if_below(key, decay_seconds, 1, max_attempts)
            .await?
            .counted;
        if !counted {
            return Ok(None);
        }
        Ok(Some(callback().await))
    }

    /// Adds `amount` only while the count stays at or below `ceiling`, in
    /// one atomic step of the store, opening the window when none is open.
    /// A call that does not count changes nothing and carries the count it
    /// found.
    ///
    /// A window of 0 seconds or less opens none, as Laravel's `hit` with a
    /// decay of 0 opens none: a counter an open window left is counted in,
    /// up to `ceiling`, in one atomic step, and keeps its time to live; a
    /// missing counter stays missing (the call counts when
    /// `amount <= ceiling`, and the outcome carries `amount`).
    ///
    /// `ceiling` is the highest the count may reach: a call counts while
    /// the count is below the maximum `ceiling - amount + 1` (`attempt`
    /// passes its maximum with an amount of 1; see
    /// [`Store::increment_if_below`]). A counter with no room for `amount`
    /// refuses while its timer exists; one whose timer is gone is removed
    /// when a missing counter would have room (`amount <= ceiling`), as
    /// Laravel's `tooManyAttempts` removes a count at or above the maximum,
    /// and the call goes on as on a missing counter. A counter with room
    /// is kept and counted on, whatever its timer. That one rule holds for
    /// every amount, in a window that opens (on a Redis Cluster, once the
    /// count's own time to live has run out: see
    /// [`Store::increment_in_window`]) as in one that does not.
    pub async fn increment_if_below(
        &self,
        key: &str,
        decay_seconds: i64,
        amount: i64,
        ceiling: i64,
    ) -> Result<IncrementOutcome, CacheError> {
        note_write();
        let key = cleaned(key);
        let window = self.window(decay_seconds);
        if !window.opens() {
            let counted = self
                .count_in_no_window(&key, window, amount, ceiling)
                .await?;
            return Ok(counted.outcome);
        }
        if amount <= ceiling {
            // The timer first, as `count` does, so that a counter never
            // exists without its timer (too_many_attempts would take that
            // for an expired window and reset it); the store's
            // `increment_in_window` keeps that order. On a cluster the two
            // keys may live on different nodes, so one that lags could let
            // a new window's counter reach its maximum before any timer of
            // that window is written; a check in that gap would reset the
            // counter as it resets one whose window ended.
            return self.count_in_window(&key, window, amount, ceiling).await;
        }
        // An amount above the ceiling counts only on a count below zero,
        // which a decrement left in a window it opened. Count first, so that
        // a refused call on a fresh key writes nothing at all.
        let outcome = self
            .store
            .increment_if_below(&key, window.ttl_seconds, amount, ceiling)
            .await?;
        if outcome.counted {
            self.store
                .add(&timer_key(&key), &window.ends_at.to_string(), window.ttl())
                .await?;
        }
        Ok(outcome)
    }

    /// `places` attempts (one for each limit counting in this bucket)
    /// counted while the bucket holds fewer than `max_attempts`, as
    /// [`increment_if_below`](Self::increment_if_below) counts them, and,
    /// when they do not count, the end of the window (Unix seconds) read in
    /// the same step where the store can: what the throttle's refusal
    /// reports, in the round trip of its count.
    ///
    /// A window of 0 seconds or less counts as `increment_if_below` does;
    /// the count it reports is the one left in the store, as Laravel's
    /// `retriesLeft` reads it for the headers: the counter's new value, or
    /// 0 when no counter is kept. A refusal carries the end its timer
    /// holds.
    pub(crate) async fn take_or_window_end(
        &self,
        key: &str,
        decay_seconds: i64,
        places: i64,
        max_attempts: i64,
    ) -> Result<(IncrementOutcome, Option<i64>), CacheError> {
        note_write();
        // Below `max_attempts` before the count is at most `ceiling` after.
        let ceiling = max_attempts.saturating_add(places - 1);
        let window = self.window(decay_seconds);
        if !window.opens() && max_attempts >= 1 {
            let key = cleaned(key);
            let counted = self
                .count_in_no_window(&key, window, places, ceiling)
                .await?;
            return Ok((counted.left_in_store(), counted.window_end));
        }
        if max_attempts < 1 {
            let outcome = self
                .increment_if_below(key, decay_seconds, places, ceiling)
                .await?;
            return Ok((outcome, None));
        }
        let key = cleaned(key);
        let timer = TimerKey::of(&key);
        let count = window.count(&key, timer.as_str(), places, ceiling);
        // A store that answers at once (memory) is asked without a future,
        // and read again only for a refusal.
        if let Some(outcome) = self.store.increment_in_window_without_waiting(count) {
            let outcome = outcome?;
            if outcome.counted {
                return Ok((outcome, None));
            }
            return Ok((outcome, window_end(&*self.store, timer.as_str()).await?));
        }
        self.store.increment_in_window_or_window_end(count).await
    }

    fn window(&self, decay_seconds: i64) -> Window {
        Window {
            ends_at: self.clock.unix_seconds().saturating_add(decay_seconds),
            ttl_seconds: decay_seconds,
        }
    }

    /// Counts `amount` on a cleaned key.
    ///
    /// Laravel's `increment` writes the counter with `add(K, 0)`, `INCRBY`,
    /// and a `put(K, amount)` when `INCRBY` answers `amount` (to give a
    /// counter that expired in between a time to live). Under concurrency at
    /// the start of a window that `put` can overwrite another caller's count:
    /// twenty connections deciding on the count admitted 111 of a limit of
    /// 100 that way. Here the counter is written by one atomic step of the
    /// store that increments and gives a new counter the window's time to
    /// live, so every caller gets a count of its own. The entries are the
    /// same as Laravel's.
    async fn count(&self, key: &str, window: Window, amount: i64) -> Result<i64, CacheError> {
        note_write();
        if !window.opens() {
            // No window to count in: count in the open one, if any, and
            // leave nothing behind otherwise, as Laravel's steps for a time
            // to live of 0 leave (they remove the counter INCRBY just
            // created). The store does it in one step, where Laravel's
            // steps let callers at the same moment see each other's count
            // before its removal, and refuse (twenty callers making ten
            // hits each with a maximum of 1 saw 193 of 200 refused).
            let timer = TimerKey::of(key);
            return self
                .store
                .increment_in_open_window(key, timer.as_str(), amount)
                .await;
        }
        // The timer first, so that a counter never exists without its timer
        // (too_many_attempts would take that for an ended window): the
        // store's `increment_in_window` keeps that order, in one round trip
        // (on a cluster, with the gap `increment_if_below` describes).
        let outcome = self.count_in_window(key, window, amount, i64::MAX).await?;
        if !outcome.counted {
            return Err(CacheError::Overflow {
                key: key.to_owned(),
            });
        }
        Ok(outcome.count)
    }

    /// After a count in no window made the counter of `key` (or found it
    /// at 0): while a window is open on the key (its timer stands, as after
    /// `reset_attempts` or a decrement to 0), the count is that window's,
    /// and the counter lives at least as long as the window
    /// ([`Store::expire_at_least`]); with no window open, the counter is
    /// removed, as Laravel removes it.
    /// `true` when the counter is kept.
    async fn keep_in_open_window_or_forget(&self, key: &str) -> Result<bool, CacheError> {
        let timer = TimerKey::of(key);
        match self.store.ttl(timer.as_str()).await? {
            Some(left) => {
                self.store.expire_at_least(key, left).await?;
                Ok(true)
            }
            None => {
                self.store.forget(key).await?;
                Ok(false)
            }
        }
    }

    /// Counts `amount` on a cleaned key up to `ceiling` for a window that
    /// does not open (0 seconds or less), as Laravel's `tooManyAttempts`
    /// and `hit` with a decay of 0 do together.
    ///
    /// The store's atomic `increment_if_below` counts on the key: an
    /// existing counter (an open window's) is counted in up to `ceiling`
    /// and keeps its time to live, so callers at the same moment never push
    /// it past `ceiling`, as in a window that opens. A counter the call
    /// made (it ends at `amount`: there was none, or it held 0) is removed
    /// again, as Laravel's `put(K, amount, 0)` removes it; it lives one
    /// second at most if the removal fails; in a window whose timer stands
    /// (its count reset, or decremented to 0) it is kept, and ends with the
    /// window, as [`count`](Self::count) keeps it. A call that does not count
    /// reads the timer: while it exists, the call refuses and carries the
    /// end it holds; without it, a counter with no room for `amount`
    /// (at or above the maximum `ceiling - amount + 1`) outlived its window
    /// and is removed (Laravel's `tooManyAttempts`), when a missing counter
    /// would have room, and the call goes on as on a missing counter: the
    /// rule of a window that opens ([`Store::increment_in_window`]).
    ///
    /// Only the count is atomic: the read of the timer and the removals
    /// that follow it are steps of their own, as Laravel's are. Between
    /// this call's count and its removal of a counter it made, another
    /// caller may count in that counter (a window of 60 seconds opening on
    /// the key, say); between its read of a missing timer and its removal
    /// of a full counter, another caller may open a new window, which
    /// resets the counter and counts in it. Such counts are removed with
    /// the counter, so that window may admit as many requests more. No
    /// count pushes a counter past `ceiling`, and no call with a window
    /// that opens takes this path.
    async fn count_in_no_window(
        &self,
        key: &str,
        window: Window,
        amount: i64,
        ceiling: i64,
    ) -> Result<NoWindowCount, CacheError> {
        let outcome = self
            .store
            .increment_if_below(key, window.ttl_seconds, amount, ceiling)
            .await?;
        if outcome.counted {
            if outcome.count != amount || self.keep_in_open_window_or_forget(key).await? {
                return Ok(NoWindowCount::kept(outcome, None));
            }
            return Ok(NoWindowCount::gone(outcome));
        }
        let timer = TimerKey::of(key);
        if let Some(ends_at) = self.store.get(timer.as_str()).await? {
            let ends_at = parse_integer(timer.as_str(), &ends_at).ok();
            return Ok(NoWindowCount::kept(outcome, ends_at));
        }
        if amount > ceiling || !has_no_room(outcome.count, amount, ceiling) {
            // No counter has room for `amount`, so none is removed; or
            // this one had room and did not count (a decrement past the
            // end of `i64`): Laravel's `tooManyAttempts` keeps a count
            // below the maximum.
            return Ok(NoWindowCount::kept(outcome, None));
        }
        self.store.forget(key).await?;
        Ok(NoWindowCount::gone(IncrementOutcome::decide(
            0, amount, ceiling,
        )))
    }

    /// The store's [`increment_in_window`](Store::increment_in_window) of
    /// `amount` on `key` up to `ceiling`, in `window`. A store that answers
    /// at once (memory) is asked without a future; the timer's key is built
    /// once, on the stack when it fits, for either way of asking.
    async fn count_in_window(
        &self,
        key: &str,
        window: Window,
        amount: i64,
        ceiling: i64,
    ) -> Result<IncrementOutcome, CacheError> {
        let timer = TimerKey::of(key);
        let count = || window.count(key, timer.as_str(), amount, ceiling);
        if let Some(outcome) = self.store.increment_in_window_without_waiting(count()) {
            return outcome;
        }
        self.store.increment_in_window(count()).await
    }

    async fn attempts_of(&self, key: &str) -> Result<i64, CacheError> {
        match self.store.get(key).await? {
            Some(value) => parse_integer(key, &value),
            None => Ok(0),
        }
    }
}

impl fmt::Debug for CacheRateLimiter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CacheRateLimiter")
            .field("store", &self.store.name())
            .field("clock", &self.clock)
            .finish()
    }
}

/// How full a window is, as Laravel's `tooManyAttempts` reads it.
enum Fullness {
    /// The count is under the maximum.
    Room,
    /// The count is at the maximum and the timer is there.
    Full,
    /// The count is at the maximum and the timer is gone: the window has
    /// ended.
    FullWithoutTimer,
}

/// The whole seconds from `now` to `ends_at` (Unix seconds), at least 0.
pub(crate) fn seconds_until(ends_at: i64, now: i64) -> i64 {
    ends_at.saturating_sub(now).max(0)
}

fn timer_key(key: &str) -> String {
    let mut timer = String::with_capacity(key.len() + TIMER_SUFFIX.len());
    timer.push_str(key);
    timer.push_str(TIMER_SUFFIX);
    timer
}

/// What `K:timer` adds to `K`.
pub(crate) const TIMER_SUFFIX: &str = ":timer";

/// The longest `K:timer` [`TimerKey`] holds on the stack.
const STACK_TIMER_KEY: usize = 128;

/// `K:timer` of a key, held on the stack when it fits, so that a throttled
/// request allocates no timer key.
enum TimerKey {
    Stack {
        bytes: [u8; STACK_TIMER_KEY],
        len: usize,
    },
    Heap(String),
}

impl TimerKey {
    fn of(key: &str) -> Self {
        let len = key.len() + TIMER_SUFFIX.len();
        if len > STACK_TIMER_KEY {
            return TimerKey::Heap(timer_key(key));
        }
        let mut bytes = [0_u8; STACK_TIMER_KEY];
        bytes[..key.len()].copy_from_slice(key.as_bytes());
        bytes[key.len()..len].copy_from_slice(TIMER_SUFFIX.as_bytes());
        TimerKey::Stack { bytes, len }
    }

    fn as_str(&self) -> &str {
        match self {
            TimerKey::Stack { bytes, len } => {
                std::str::from_utf8(&bytes[..*len]).expect("a str and an ASCII suffix are UTF-8")
            }
            TimerKey::Heap(key) => key,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timer_key_on_the_stack_is_the_one_off_it() {
        let fits = "x".repeat(STACK_TIMER_KEY - TIMER_SUFFIX.len());
        let too_long = "x".repeat(STACK_TIMER_KEY - TIMER_SUFFIX.len() + 1);
        for key in [
            "",
            "k",
            "ip:127.0.0.1:path:/login",
            "clé:ключ",
            &fits,
            &too_long,
        ] {
            assert_eq!(TimerKey::of(key).as_str(), format!("{key}:timer"));
        }
    }
}
