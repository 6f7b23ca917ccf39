//! The `Store` SPI: what a cache backend offers the facade.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use crate::http::BoxError;

/// A cache store: string values under string keys, each with an optional
/// time to live.
///
/// Values are strings because that is how Laravel's Redis store keeps them:
/// integers as plain decimal strings (`"2"`, `"1796202328"`), so a Laravel
/// application and this crate read and write the same counters. Every
/// operation is atomic on its one key.
///
/// A time to live is at least one second: a shorter one is raised to one
/// second, as Laravel's Redis store does. The Redis store keeps whole
/// seconds (the remainder is dropped); the memory store keeps the duration as
/// given.
///
/// Implementations: [`MemoryStore`](super::MemoryStore) and, with the
/// `redis` feature, `RedisStore`. The store an
/// application uses is installed in the container as `Arc<dyn Store>`.
///
/// A store of your own, for example one that keeps nothing:
///
/// ```
/// use std::time::Duration;
/// use suprnova::async_trait;
/// use suprnova::cache::{CacheError, IncrementOutcome, Store};
///
/// #[derive(Debug)]
/// struct Forgetful;
///
/// #[async_trait]
/// impl Store for Forgetful {
///     async fn get(&self, _key: &str) -> Result<Option<String>, CacheError> { Ok(None) }
///     async fn put(&self, _key: &str, _value: &str, _ttl: Duration) -> Result<(), CacheError> { Ok(()) }
///     async fn add(&self, _key: &str, _value: &str, _ttl: Duration) -> Result<bool, CacheError> { Ok(true) }
///     async fn increment(&self, _key: &str, by: i64) -> Result<i64, CacheError> { Ok(by) }
///     async fn increment_if_below(
///         &self, _key: &str, _decay_seconds: i64, amount: i64, ceiling: i64,
///     ) -> Result<IncrementOutcome, CacheError> {
///         Ok(IncrementOutcome::decide(0, amount, ceiling))
///     }
///     async fn forget(&self, _key: &str) -> Result<bool, CacheError> { Ok(false) }
///     async fn ttl(&self, _key: &str) -> Result<Option<Duration>, CacheError> { Ok(None) }
///     fn name(&self) -> &'static str { "forgetful" }
/// }
/// ```
#[async_trait]
pub trait Store: fmt::Debug + Send + Sync + 'static {
    /// The value under `key`; `None` when it is missing or has expired.
    async fn get(&self, key: &str) -> Result<Option<String>, CacheError>;

    /// Stores `value` under `key` for `ttl`, replacing what was there.
    async fn put(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError>;

    /// Stores `value` under `key` for `ttl` only when the key is absent;
    /// `true` when it stored it. An existing key keeps its value and its time
    /// to live.
    async fn add(&self, key: &str, value: &str, ttl: Duration) -> Result<bool, CacheError>;

    /// Adds `by` to the integer under `key` and returns the new value. A
    /// missing key starts at 0 and gets no time to live (as Redis `INCRBY`
    /// does); an existing key keeps its time to live. A value that is not an
    /// integer, or a sum that overflows `i64`, is an error.
    async fn increment(&self, key: &str, by: i64) -> Result<i64, CacheError>;

    /// Subtracts `by` from the integer under `key`; see [`Store::increment`].
    async fn decrement(&self, key: &str, by: i64) -> Result<i64, CacheError> {
        let by = by.checked_neg().ok_or_else(|| CacheError::Overflow {
            key: key.to_owned(),
        })?;
        self.increment(key, by).await
    }

    /// Adds `amount` to the integer under `key` only when the result stays at
    /// or below `ceiling`, in one atomic step.
    ///
    /// A missing key counts from 0. When it counts, a key without a time to
    /// live (a new one) gets `decay_seconds` (at least 1); an existing time to
    /// live is kept. When it does not count, the value is left untouched and
    /// the outcome carries it (0 for a missing key).
    ///
    /// `ceiling` is the highest value the counter may reach, not a maximum
    /// of attempts: a count has room for `amount` when
    /// `count + amount <= ceiling` (exactly, past the end of `i64` too). A
    /// rate limiter that admits a call while the count is below a maximum
    /// `max` passes `ceiling = max + amount - 1` (the throttle counts one
    /// place for each limit of a bucket that way, `attempt` one under
    /// `max`), so a count with no room for `amount` is one at or above the
    /// maximum the ceiling stands for, `ceiling - amount + 1`: a full one,
    /// in Laravel's `tooManyAttempts` words. This method removes no count;
    /// for a full count whose window has ended, see
    /// [`increment_in_window`](Store::increment_in_window).
    async fn increment_if_below(
        &self,
        key: &str,
        decay_seconds: i64,
        amount: i64,
        ceiling: i64,
    ) -> Result<IncrementOutcome, CacheError>;

    /// Gives `key`, which exists, at least `ttl` to live: a time to live
    /// shorter than `ttl`, or none, becomes `ttl`; a longer one is kept. A
    /// window's counter is given its window's time to live this way by the
    /// call that opened the window when the two were written apart (a
    /// cluster), and by a count in no window that a window's timer keeps.
    ///
    /// The provided method gives `ttl` (in whole seconds, rounded up) only
    /// to a key without a time to live, through
    /// [`increment_if_below`](Store::increment_if_below) of 0, the one
    /// step that every store has, and would make a missing key a counter
    /// of 0; the memory and Redis stores lengthen a shorter one too, and
    /// leave a missing key missing.
    async fn expire_at_least(&self, key: &str, ttl: Duration) -> Result<(), CacheError> {
        let seconds = i64::try_from(ttl.as_millis().div_ceil(1000)).unwrap_or(i64::MAX);
        self.increment_if_below(key, seconds, 0, i64::MAX).await?;
        Ok(())
    }

    /// Adds `amount` to the counter under `key` while a rate-limit window
    /// is open on it, and returns the count: a count in no window (a window
    /// of 0 seconds or less, which opens none), as Laravel's `hit` with a
    /// decay of 0 counts.
    ///
    /// A counter holding a count other than 0 is counted in, as
    /// [`increment`](Store::increment) counts, and keeps its time to live.
    /// A missing counter, or one at 0, is counted in only while the
    /// window's timer under `timer_key` has a time to live (a window whose
    /// count was reset, or taken back to 0), and then lives at least as
    /// long as the timer ([`expire_at_least`](Store::expire_at_least));
    /// otherwise the call stores nothing (a counter at 0 is removed) and
    /// returns `amount`.
    ///
    /// The provided method takes these as steps of their own:
    /// [`increment`](Store::increment), then, on a count of `amount`, a
    /// read of the timer and a time to live given or a removal. Callers at
    /// the same moment on a key with no window may then see each other's
    /// count before its removal. The memory store counts under the
    /// counter's lock, and the Redis store on one node in one script, so
    /// that no caller sees another's count on a key with no window. On a
    /// Redis Cluster, where the counter and its timer live in different
    /// slots, a script on the counter counts in a count other than 0 at
    /// once and stores nothing on a missing one; only for a counter
    /// missing or at 0 is the timer read, and the counter asked again with
    /// what it read. The memory store reads the timer that way too, before
    /// it locks the counter again.
    async fn increment_in_open_window(
        &self,
        key: &str,
        timer_key: &str,
        amount: i64,
    ) -> Result<i64, CacheError> {
        let hits = self.increment(key, amount).await?;
        if hits == amount {
            match self.ttl(timer_key).await? {
                Some(left) => self.expire_at_least(key, left).await?,
                None => {
                    self.forget(key).await?;
                }
            }
        }
        Ok(hits)
    }

    /// Opens a rate-limit window and counts in it: [`add`](Store::add) of
    /// `ends_at` under `timer_key` for `decay_seconds` (at least 1), then
    /// [`increment_if_below`](Store::increment_if_below) of `key` (the
    /// fields of [`WindowIncrement`]). The timer is sent before the
    /// counter, so on one server no counter exists without its timer (on a
    /// Redis Cluster the two live on two masters, which may answer in
    /// either order).
    ///
    /// A counter found full (with no room for `amount`: see
    /// [`increment_if_below`](Store::increment_if_below)) by the call that
    /// opens the timer may be a leftover of an ended window (its timer
    /// expired or was removed alone), which Laravel's `tooManyAttempts`
    /// resets. A store that can tell it from a counter the new window
    /// filled resets it and counts from 0, when `amount <= ceiling` (else
    /// no counter has room, and nothing is removed): the Redis store on one
    /// node (its script reads both keys in one step) and the memory store
    /// (each counter records the newest window that counted in it). One
    /// that cannot (the provided method, a cluster, where the two keys are
    /// read apart) must not: between its opening of the timer and its read
    /// of the counter, the counter may have been filled in the new window.
    /// A counter with room for `amount` is kept and counted on, whatever
    /// its timer, as Laravel's `tooManyAttempts` keeps a count below the
    /// maximum: so the one rule, for any amount, is that a leftover is
    /// reset exactly when it would refuse a call that a missing counter
    /// admits. (The rate limiter's count in no window follows it too: see
    /// [`CacheRateLimiter::increment_if_below`](crate::limiter::CacheRateLimiter::increment_if_below).)
    ///
    /// The provided method starts both calls at once, the timer's first: on
    /// one multiplexed connection they travel in one round trip and a
    /// single server runs them in the order sent. A store that can do both
    /// in one step of its own overrides it, as
    /// [`MemoryStore`](super::MemoryStore) does (one clock read, no text)
    /// and `RedisStore` does on one node (one script).
    async fn increment_in_window(
        &self,
        count: WindowIncrement<'_>,
    ) -> Result<IncrementOutcome, CacheError> {
        add_then_increment_if_below(self, count).await
    }

    /// [`increment_in_window`](Store::increment_in_window), and, when the
    /// call did not count, the end of the window as its timer holds it (Unix
    /// seconds; `None` when the timer holds no integer): what a refusal tells
    /// its caller. The provided method reads the timer after the count; the
    /// Redis store on one node reads it in the count's own step, so that a
    /// refusal costs one round trip as an admission does.
    async fn increment_in_window_or_window_end(
        &self,
        count: WindowIncrement<'_>,
    ) -> Result<(IncrementOutcome, Option<i64>), CacheError> {
        count_then_read_window_end(self, count).await
    }

    /// [`increment_in_window`](Store::increment_in_window) for a store that
    /// answers without waiting (the memory store), called without a future:
    /// `None` from a store that has to wait for its answer (Redis, and the
    /// provided method), which the caller then asks with
    /// `increment_in_window`. The rate limiter tries this first, which
    /// spares a throttled request on the memory store the boxed future of
    /// an `async` trait method.
    ///
    /// ```
    /// use suprnova::cache::{MemoryStore, Store, WindowIncrement};
    ///
    /// let store = MemoryStore::new();
    /// let count = WindowIncrement {
    ///     key: "k",
    ///     timer_key: "k:timer",
    ///     ends_at: 1_900_000_000,
    ///     decay_seconds: 60,
    ///     amount: 1,
    ///     ceiling: 2,
    /// };
    /// let counted = store.increment_in_window_without_waiting(count);
    /// assert!(matches!(counted, Some(Ok(outcome)) if outcome.counted && outcome.count == 1));
    /// ```
    fn increment_in_window_without_waiting(
        &self,
        count: WindowIncrement<'_>,
    ) -> Option<Result<IncrementOutcome, CacheError>> {
        let _ = count;
        None
    }

    /// Removes `key`; `true` when it was there.
    async fn forget(&self, key: &str) -> Result<bool, CacheError>;

    /// How long `key` has left; `None` when it is missing or never expires.
    async fn ttl(&self, key: &str) -> Result<Option<Duration>, CacheError>;

    /// Whether `key` holds a value.
    async fn has(&self, key: &str) -> Result<bool, CacheError> {
        Ok(self.get(key).await?.is_some())
    }

    /// A short name for logs: `memory`, `redis`.
    fn name(&self) -> &'static str;
}

/// [`Store::increment_in_window`] as two calls started at once, the timer's
/// `add` first: the provided method, and the path of a store that can fuse
/// the two only sometimes (a Redis Cluster, where the counter and its timer
/// live in different slots).
pub(crate) async fn add_then_increment_if_below<S: Store + ?Sized>(
    store: &S,
    count: WindowIncrement<'_>,
) -> Result<IncrementOutcome, CacheError> {
    let ends_at = count.ends_at.to_string();
    let (added, outcome) = futures_util::future::join(
        store.add(count.timer_key, &ends_at, count.ttl()),
        store.increment_if_below(count.key, count.decay_seconds, count.amount, count.ceiling),
    )
    .await;
    let outcome = outcome?;
    // A refusal stands whatever became of the timer (on a cluster its node
    // may be the one that failed): the counter's node said the window is
    // full. A count whose timer could not be written is an error.
    let opened = if outcome.counted {
        added?
    } else {
        matches!(added, Ok(true))
    };
    // The call that opened the window and counted gives the counter at
    // least the window's time to live, once both calls have answered:
    // written apart, the counter may otherwise end before its timer (one
    // an earlier window left with less time, or one whose write reached
    // its server before the timer's did), and the window would count from
    // 0 again before it ends. Refused when it opened the window, it gives
    // a full count with no time to live (a plain increment wrote it, here
    // or in a Laravel application) the window's, so that it ends with this
    // window; one with a time to live keeps it, and nothing is removed: it
    // cannot be told from one callers of the new window filled between the
    // two calls, and one the ended window left full would otherwise refuse
    // this whole window. (A count of 0 is a counter at 0, or none, which
    // the step that adds 0 would write: it is asked whether it exists.)
    if opened && outcome.counted {
        store.expire_at_least(count.key, count.ttl()).await?;
    } else if opened && (outcome.count != 0 || store.has(count.key).await?) {
        store
            .increment_if_below(count.key, count.decay_seconds, 0, i64::MAX)
            .await?;
    }
    Ok(outcome)
}

/// Whether a counter holding `current` has no room for `amount` under
/// `ceiling` (`current + amount > ceiling`, exactly): full, as
/// [`Store::increment_if_below`] reads its ceiling, and, without its
/// window's timer, a leftover to reset (as the Redis script compares the
/// count with the ceiling less the amount).
pub(crate) fn has_no_room(current: i64, amount: i64, ceiling: i64) -> bool {
    i128::from(current) + i128::from(amount) > i128::from(ceiling)
}

/// [`Store::increment_in_window_or_window_end`] as two steps: the count,
/// then, when it did not count, a read of the timer. A refusal whose
/// timer cannot be read (on a cluster, its node failed) reports the end
/// of a window opened now, the longest the open one can last.
pub(crate) async fn count_then_read_window_end<S: Store + ?Sized>(
    store: &S,
    count: WindowIncrement<'_>,
) -> Result<(IncrementOutcome, Option<i64>), CacheError> {
    let outcome = store.increment_in_window(count).await?;
    if outcome.counted {
        return Ok((outcome, None));
    }
    match window_end(store, count.timer_key).await {
        Ok(ends_at) => Ok((outcome, ends_at)),
        Err(error) => {
            tracing::debug!(%error, "the window's end could not be read; the refusal reports a whole window");
            Ok((outcome, Some(count.ends_at)))
        }
    }
}

/// The end of a window as its timer under `timer_key` holds it (Unix
/// seconds); `None` when there is no timer or it holds no integer.
pub(crate) async fn window_end<S: Store + ?Sized>(
    store: &S,
    timer_key: &str,
) -> Result<Option<i64>, CacheError> {
    let timer = store.get(timer_key).await?;
    Ok(timer.and_then(|value| parse_integer(timer_key, &value).ok()))
}

/// One count in a rate-limit window, as [`Store::increment_in_window`]
/// takes it: open the window's timer when it is not open, then add
/// `amount` to the counter unless that passes `ceiling`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WindowIncrement<'a> {
    /// The counter.
    pub key: &'a str,
    /// The window's timer (`<key>:timer` for the rate limiter).
    pub timer_key: &'a str,
    /// The timer's value: when the window ends, in Unix seconds.
    pub ends_at: i64,
    /// The time to live, in seconds (at least 1), of a timer the call
    /// writes and of a counter without one.
    pub decay_seconds: i64,
    /// The amount to add (may be negative).
    pub amount: i64,
    /// The highest value the counter may reach.
    pub ceiling: i64,
}

impl WindowIncrement<'_> {
    /// The time to live of a timer the call writes: `decay_seconds`, at
    /// least one second.
    pub fn ttl(&self) -> Duration {
        decay_ttl(self.decay_seconds)
    }
}

/// The time to live a count in a window of `decay_seconds` gives a new
/// entry: at least one second, as a store's time to live always is.
pub(crate) fn decay_ttl(decay_seconds: i64) -> Duration {
    Duration::from_secs(decay_seconds.max(1).unsigned_abs())
}

/// What [`Store::increment_if_below`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct IncrementOutcome {
    /// Whether the amount was added.
    pub counted: bool,
    /// The value after the call: the new count when it counted, the
    /// untouched one (0 for a missing key) when it did not.
    pub count: i64,
}

impl IncrementOutcome {
    /// The outcome for a key holding `current`: counted (with the new count)
    /// when `current + amount <= ceiling`, otherwise `current` untouched. A
    /// sum that overflows `i64` does not count.
    ///
    /// ```
    /// use suprnova::cache::IncrementOutcome;
    ///
    /// assert_eq!(IncrementOutcome::decide(4, 1, 5), IncrementOutcome { counted: true, count: 5 });
    /// assert_eq!(IncrementOutcome::decide(5, 1, 5), IncrementOutcome { counted: false, count: 5 });
    /// assert!(IncrementOutcome::decide(i64::MAX, 1, i64::MAX).count == i64::MAX);
    /// ```
    pub fn decide(current: i64, amount: i64, ceiling: i64) -> Self {
        match current.checked_add(amount) {
            Some(next) if next <= ceiling => Self {
                counted: true,
                count: next,
            },
            _ => Self {
                counted: false,
                count: current,
            },
        }
    }
}

/// A cache store that could not answer.
#[derive(Debug, thiserror::Error)]
pub enum CacheError {
    /// The backend failed: Redis unreachable, a script error, a reply of the
    /// wrong type.
    #[error("cache backend failed: {0}")]
    Backend(#[source] BoxError),
    /// The backend did not answer in time.
    #[error("cache backend did not answer within {0:?}")]
    Timeout(Duration),
    /// An integer operation found a value that is not an integer.
    #[error("the cache value under {key:?} is not an integer: {value:?}")]
    NotAnInteger {
        /// The key.
        key: String,
        /// The value found.
        value: String,
    },
    /// An integer operation would leave the range of `i64`.
    #[error("the cache value under {key:?} would overflow a 64-bit integer")]
    Overflow {
        /// The key.
        key: String,
    },
}

impl CacheError {
    /// Whether the backend did not answer in time.
    pub fn is_timeout(&self) -> bool {
        matches!(self, CacheError::Timeout(_))
    }

    /// Whether the backend failed or timed out, as opposed to a value that
    /// does not fit the operation.
    pub fn is_backend(&self) -> bool {
        matches!(self, CacheError::Backend(_) | CacheError::Timeout(_))
    }
}

#[cfg(feature = "redis")]
impl From<crate::redis_client::RedisBackendError> for CacheError {
    fn from(e: crate::redis_client::RedisBackendError) -> Self {
        match e {
            crate::redis_client::RedisBackendError::Timeout(d) => CacheError::Timeout(d),
            other => CacheError::Backend(Box::new(other)),
        }
    }
}

/// Parses a stored integer: a decimal string, or the PHP-serialized form
/// `i:<n>;` that a Laravel app configured with a phpredis serializer writes
/// for the timer.
pub(crate) fn parse_integer(key: &str, value: &str) -> Result<i64, CacheError> {
    let digits = value
        .strip_prefix("i:")
        .and_then(|v| v.strip_suffix(';'))
        .unwrap_or(value);
    digits.parse::<i64>().map_err(|_| CacheError::NotAnInteger {
        key: key.to_owned(),
        value: value.to_owned(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_php_serialized_integers() {
        assert_eq!(parse_integer("k", "42").unwrap(), 42);
        assert_eq!(parse_integer("k", "-3").unwrap(), -3);
        assert_eq!(parse_integer("k", "i:1796202336;").unwrap(), 1_796_202_336);
        let err = parse_integer("k", "abc").unwrap_err().to_string();
        assert!(err.contains("\"k\"") && err.contains("abc"), "{err}");
    }

    #[test]
    fn decide_refuses_overflow_and_the_ceiling() {
        assert_eq!(
            IncrementOutcome::decide(0, 3, 2),
            IncrementOutcome {
                counted: false,
                count: 0
            }
        );
        assert!(!IncrementOutcome::decide(i64::MAX, 1, i64::MAX).counted);
        assert!(IncrementOutcome::decide(i64::MAX - 1, 1, i64::MAX).counted);
    }
}
