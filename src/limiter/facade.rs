//! `RateLimiter`: the static Laravel-shape facade.

use std::future::Future;
use std::sync::Arc;

use chrono::{DateTime, Utc};

use super::clean_key::clean_rate_limiter_key;
use super::limit_result::LimitResult;
use super::named::{NamedLimiter, NamedLimiters};
use super::rate_limiter::CacheRateLimiter;
use crate::cache::{CacheError, IncrementOutcome, store_of};
use crate::clock;
use crate::container::App;
use crate::http::Request;

/// The static facade of Laravel's `RateLimiter`: a fixed-window counter in
/// the cache, named limiters, and key cleaning.
///
/// Each counter method is a thin call on the [`CacheRateLimiter`] installed
/// in [`App::current`]. When none is installed, the first call builds one
/// over the container's `Arc<dyn Store>` (or, when there is none either,
/// over a new [`MemoryStore`](crate::cache::MemoryStore) that it installs as
/// the container's store) on the system clock, and installs it. Install your
/// own with [`CacheConfig::install`](crate::cache::CacheConfig::install) or
/// `App::bind(Arc::new(CacheRateLimiter::new(store, clock)))`.
///
/// Every counter method cleans its key with
/// [`clean_rate_limiter_key`](RateLimiter::clean_rate_limiter_key) first,
/// exactly once; see [`CacheRateLimiter`] for the storage layout.
///
/// ```
/// use suprnova::RateLimiter;
/// use suprnova::container::App;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// App::new().scope(async {
///     assert!(!RateLimiter::hit_and_check("login:203.0.113.5", 2, 60).await?);
///     assert!(!RateLimiter::hit_and_check("login:203.0.113.5", 2, 60).await?);
///     assert!(RateLimiter::hit_and_check("login:203.0.113.5", 2, 60).await?);
///     assert_eq!(RateLimiter::attempts("login:203.0.113.5").await?, 3);
///
///     let ran = RateLimiter::attempt("send:1", 1, || async { "sent" }, 60).await?;
///     assert_eq!(ran, Some("sent"));
///     let refused = RateLimiter::attempt("send:1", 1, || async { "sent" }, 60).await?;
///     assert_eq!(refused, None);
///     Ok::<(), suprnova::cache::CacheError>(())
/// })
/// .await
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct RateLimiter;

impl RateLimiter {
    /// The limiter of [`App::current`], built and installed on first use as
    /// described above.
    pub fn instance() -> Arc<CacheRateLimiter> {
        App::with_current(|app| {
            app.get_or_install(|| Arc::new(CacheRateLimiter::new(store_of(app), clock::system())))
        })
    }

    /// See [`CacheRateLimiter::hit`].
    pub async fn hit(key: &str, decay_seconds: i64) -> Result<i64, CacheError> {
        Self::instance().hit(key, decay_seconds).await
    }

    /// See [`CacheRateLimiter::hit_for_minute`].
    pub async fn hit_for_minute(key: &str) -> Result<i64, CacheError> {
        Self::instance().hit_for_minute(key).await
    }

    /// See [`CacheRateLimiter::hit_until`].
    pub async fn hit_until(key: &str, until: DateTime<Utc>) -> Result<i64, CacheError> {
        Self::instance().hit_until(key, until).await
    }

    /// See [`CacheRateLimiter::hit_and_check`].
    pub async fn hit_and_check(
        key: &str,
        max_attempts: i64,
        decay_seconds: i64,
    ) -> Result<bool, CacheError> {
        Self::instance()
            .hit_and_check(key, max_attempts, decay_seconds)
            .await
    }

    /// See [`CacheRateLimiter::increment`].
    pub async fn increment(key: &str, decay_seconds: i64, amount: i64) -> Result<i64, CacheError> {
        Self::instance().increment(key, decay_seconds, amount).await
    }

    /// See [`CacheRateLimiter::decrement`].
    pub async fn decrement(key: &str, decay_seconds: i64, amount: i64) -> Result<i64, CacheError> {
        Self::instance().decrement(key, decay_seconds, amount).await
    }

    /// See [`CacheRateLimiter::attempts`].
    pub async fn attempts(key: &str) -> Result<i64, CacheError> {
        Self::instance().attempts(key).await
    }

    /// See [`CacheRateLimiter::available_in`].
    pub async fn available_in(key: &str) -> Result<i64, CacheError> {
        Self::instance().available_in(key).await
    }

    /// See [`CacheRateLimiter::remaining`].
    pub async fn remaining(key: &str, max_attempts: i64) -> Result<i64, CacheError> {
        Self::instance().remaining(key, max_attempts).await
    }

    /// See [`CacheRateLimiter::retries_left`].
    pub async fn retries_left(key: &str, max_attempts: i64) -> Result<i64, CacheError> {
        Self::instance().retries_left(key, max_attempts).await
    }

    /// See [`CacheRateLimiter::too_many_attempts`].
    pub async fn too_many_attempts(key: &str, max_attempts: i64) -> Result<bool, CacheError> {
        Self::instance().too_many_attempts(key, max_attempts).await
    }

    /// See [`CacheRateLimiter::reset_attempts`].
    pub async fn reset_attempts(key: &str) -> Result<bool, CacheError> {
        Self::instance().reset_attempts(key).await
    }

    /// See [`CacheRateLimiter::clear`].
    pub async fn clear(key: &str) -> Result<(), CacheError> {
        Self::instance().clear(key).await
    }

    /// See [`CacheRateLimiter::attempt`].
    pub async fn attempt<F, Fut, T>(
        key: &str,
        max_attempts: i64,
        callback: F,
        decay_seconds: i64,
    ) -> Result<Option<T>, CacheError>
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = T>,
    {
        Self::instance()
            .attempt(key, max_attempts, callback, decay_seconds)
            .await
    }

    /// See [`CacheRateLimiter::increment_if_below`].
    pub async fn increment_if_below(
        key: &str,
        decay_seconds: i64,
        amount: i64,
        ceiling: i64,
    ) -> Result<IncrementOutcome, CacheError> {
        Self::instance()
            .increment_if_below(key, decay_seconds, amount, ceiling)
            .await
    }

    /// Registers a named limiter in the [`NamedLimiters`] of
    /// [`App::current`], replacing one of the same name. Laravel's
    /// `RateLimiter::for`, which is a keyword in Rust.
    ///
    /// ```
    /// use suprnova::{Limit, RateLimiter};
    /// use suprnova::container::App;
    ///
    /// let app = App::new();
    /// let _current = app.enter();
    /// RateLimiter::define("api", |req| {
    ///     let ip = req.ip().unwrap_or_else(|| "anon".into());
    ///     Limit::per_minute(60).by(format!("ip:{ip}")).into()
    /// });
    /// assert!(RateLimiter::limiter("api").is_some());
    /// ```
    pub fn define(
        name: impl Into<String>,
        callback: impl Fn(&Request) -> LimitResult + Send + Sync + 'static,
    ) {
        NamedLimiters::current().define(name, callback);
    }

    /// Laravel's spelling of [`define`](RateLimiter::define).
    pub fn r#for(
        name: impl Into<String>,
        callback: impl Fn(&Request) -> LimitResult + Send + Sync + 'static,
    ) {
        Self::define(name, callback);
    }

    /// The named limiter registered under `name` in [`App::current`],
    /// wrapped so that limits of one result that share a key count under
    /// their fallback keys; see [`NamedLimiters::limiter`]. `None` when no
    /// limiter has that name.
    pub fn limiter(name: &str) -> Option<NamedLimiter> {
        NamedLimiters::current().limiter(name)
    }

    /// Cleans a key as Laravel's `cleanRateLimiterKey` does; see
    /// [`clean_rate_limiter_key`].
    ///
    /// ```
    /// use suprnova::RateLimiter;
    ///
    /// assert_eq!(RateLimiter::clean_rate_limiter_key("café"), "cafe");
    /// assert_eq!(RateLimiter::clean_rate_limiter_key("a&b"), "aab");
    /// ```
    pub fn clean_rate_limiter_key(key: &str) -> String {
        clean_rate_limiter_key(key)
    }
}
