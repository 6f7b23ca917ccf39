//! The storage SPI of the sliding-window algorithm.

use std::fmt;
use std::time::Duration;

use async_trait::async_trait;

use super::{RateLimitError, SlidingWindowConfig};
use crate::decision::Decision;

/// A store of sliding-window buckets: one log of admitted hits per key.
///
/// A call to [`RateLimiterDriver::acquire`] evicts the hits of `key` that are
/// no longer in the window (`now - window`, `now`], and admits (and records)
/// the call when fewer than `max_requests` remain. A refused call records
/// nothing. The check and the record are one atomic step, so a limit of N
/// admits exactly N under any concurrency.
///
/// Implementations: [`InMemoryRateLimiter`](super::memory::InMemoryRateLimiter)
/// and, with the `redis` feature, `RedisRateLimiter` in `rate_limit::redis`.
#[async_trait]
pub trait RateLimiterDriver: fmt::Debug + Send + Sync + 'static {
    /// Admits or refuses one call for `key`, and returns the whole decision
    /// (admitted, places left, when to retry) from the same atomic step: one
    /// round trip on Redis.
    async fn acquire(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Result<Decision, RateLimitError>;

    /// [`acquire`](Self::acquire) for a backend that decides without
    /// waiting (the memory driver), called without a future: `None` from a
    /// backend that has to wait for its answer (Redis), which the caller
    /// then asks with `acquire`. The middleware tries this first, which
    /// spares a memory decision the boxed future of an `async` trait method
    /// (about half the decision's own cost).
    ///
    /// ```
    /// use std::sync::Arc;
    /// use std::time::Duration;
    /// use suprnova::rate_limit::memory::InMemoryRateLimiter;
    /// use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
    ///
    /// let limiter: Arc<dyn RateLimiterDriver> = Arc::new(InMemoryRateLimiter::new());
    /// let config = SlidingWindowConfig::new(1, Duration::from_secs(60));
    /// let first = limiter.acquire_without_waiting("user:42", &config);
    /// assert!(matches!(first, Some(Ok(decision)) if decision.allowed));
    /// let second = limiter.acquire_without_waiting("user:42", &config);
    /// assert!(matches!(second, Some(Ok(decision)) if !decision.allowed));
    /// ```
    fn acquire_without_waiting(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Option<Result<Decision, RateLimitError>> {
        let _ = (key, config);
        None
    }

    /// Whether this backend can decide under `config`, without deciding:
    /// the configuration's own rules ([`SlidingWindowConfig::validate`]),
    /// and the bounds the backend adds (the Redis driver takes windows of
    /// up to about 35 years). A caller that refuses without asking the
    /// backend checks this first, so that it answers an invalid limit as
    /// the backend would.
    fn check_config(&self, config: &SlidingWindowConfig) -> Result<(), RateLimitError> {
        config.validate()
    }

    /// Admits or refuses one call for `key`: `Ok(true)` when admitted.
    async fn try_acquire(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Result<bool, RateLimitError> {
        Ok(self.acquire(key, config).await?.allowed)
    }

    /// How long until the oldest hit of a full bucket leaves the window;
    /// `None` while the bucket has room. Records nothing.
    async fn retry_after(
        &self,
        key: &str,
        config: &SlidingWindowConfig,
    ) -> Result<Option<Duration>, RateLimitError>;

    /// The time this driver decides by, in nanoseconds since the Unix
    /// epoch, where it can tell without asking anyone: the memory driver's
    /// clock (a [`FakeClock`](crate::clock::FakeClock) in tests). `None`
    /// (the default) from a backend whose time is kept elsewhere, as Redis
    /// keeps its `TIME`; a caller that needs a time for a refusal no
    /// backend was asked about then reads the system clock.
    ///
    /// ```
    /// use std::sync::Arc;
    /// use suprnova::clock::FakeClock;
    /// use suprnova::rate_limit::RateLimiterDriver;
    /// use suprnova::rate_limit::memory::InMemoryRateLimiter;
    ///
    /// let clock = FakeClock::at_unix(1_000_000);
    /// let limiter: Arc<dyn RateLimiterDriver> =
    ///     Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    /// assert_eq!(limiter.unix_nanos_now(), Some(1_000_000_000_000_000));
    /// ```
    fn unix_nanos_now(&self) -> Option<u64> {
        None
    }

    /// A short name for logs: `memory`, `redis`.
    fn name(&self) -> &'static str;
}
