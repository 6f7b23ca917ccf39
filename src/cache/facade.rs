//! `Cache`: the static facade over the default store in the container.

use std::sync::Arc;
use std::time::Duration;

use super::MemoryStore;
use super::store::{CacheError, IncrementOutcome, Store};
use crate::container::App;
use crate::limiter::CacheRateLimiter;

/// The default cache store of [`App::current`], as Laravel's `Cache`
/// facade.
///
/// Each method acts on the `Arc<dyn Store>` installed in the current
/// container ([`CacheConfig::install`](super::CacheConfig::install) installs
/// one). When none is installed, the first call installs there the store
/// of the [`CacheRateLimiter`] installed (as a test installs one on a fake
/// clock), or else a [`MemoryStore`] on the system clock, so the facade
/// always works and the [`RateLimiter`](crate::RateLimiter) facade shares
/// the same store.
///
/// ```
/// use std::time::Duration;
/// use suprnova::cache::Cache;
/// use suprnova::container::App;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// App::new().scope(async {
///     assert!(Cache::add("greeting", "hello", Duration::from_secs(60)).await?);
///     assert!(!Cache::add("greeting", "bye", Duration::from_secs(60)).await?);
///     assert_eq!(Cache::get("greeting").await?.as_deref(), Some("hello"));
///     assert_eq!(Cache::increment("visits", 1).await?, 1);
///     Ok::<(), suprnova::cache::CacheError>(())
/// })
/// .await
/// # }).unwrap();
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct Cache;

impl Cache {
    /// The default store of [`App::current`], installing a [`MemoryStore`]
    /// when there is none.
    pub fn store() -> Arc<dyn Store> {
        App::with_current(store_of)
    }

    /// See [`Store::get`].
    pub async fn get(key: &str) -> Result<Option<String>, CacheError> {
        Self::store().get(key).await
    }

    /// See [`Store::has`].
    pub async fn has(key: &str) -> Result<bool, CacheError> {
        Self::store().has(key).await
    }

    /// See [`Store::put`]. A time to live under one second, which Laravel's
    /// `Repository` reads as 0 whole seconds, stores nothing and removes
    /// what was under `key`, as Laravel's `Cache::put` does.
    pub async fn put(key: &str, value: &str, ttl: Duration) -> Result<(), CacheError> {
        let store = Self::store();
        if ttl.as_secs() == 0 {
            store.forget(key).await?;
            return Ok(());
        }
        store.put(key, value, ttl).await
    }

    /// See [`Store::add`]. A time to live under one second stores nothing
    /// and returns `false`, as Laravel's `Cache::add` does.
    pub async fn add(key: &str, value: &str, ttl: Duration) -> Result<bool, CacheError> {
        if ttl.as_secs() == 0 {
            return Ok(false);
        }
        Self::store().add(key, value, ttl).await
    }

    /// See [`Store::increment`].
    pub async fn increment(key: &str, by: i64) -> Result<i64, CacheError> {
        Self::store().increment(key, by).await
    }

    /// See [`Store::decrement`].
    pub async fn decrement(key: &str, by: i64) -> Result<i64, CacheError> {
        Self::store().decrement(key, by).await
    }

    /// See [`Store::increment_if_below`].
    pub async fn increment_if_below(
        key: &str,
        decay_seconds: i64,
        amount: i64,
        ceiling: i64,
    ) -> Result<IncrementOutcome, CacheError> {
        Self::store()
            .increment_if_below(key, decay_seconds, amount, ceiling)
            .await
    }

    /// See [`Store::forget`].
    pub async fn forget(key: &str) -> Result<bool, CacheError> {
        Self::store().forget(key).await
    }

    /// See [`Store::ttl`].
    pub async fn ttl(key: &str) -> Result<Option<Duration>, CacheError> {
        Self::store().ttl(key).await
    }
}

/// The store installed in `app`, or, installed there when there is none,
/// the store of the [`CacheRateLimiter`] installed (the two facades count
/// in one store), else a new [`MemoryStore`].
pub(crate) fn store_of(app: &App) -> Arc<dyn Store> {
    app.get_or_install::<dyn Store>(|| {
        app.get_with::<CacheRateLimiter, _>(|limiter| limiter.map(|l| Arc::clone(l.store())))
            .unwrap_or_else(|| Arc::new(MemoryStore::new()))
    })
}
