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

    /// A short name for logs: `memory`, `redis`.
    fn name(&self) -> &'static str;
}
