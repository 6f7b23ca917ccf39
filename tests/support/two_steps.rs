//! A memory store that counts in a window in two calls.

use std::time::Duration;

use suprnova::cache::{CacheError, IncrementOutcome, MemoryStore, Store};

/// A memory store whose `increment_in_window` is the trait's provided
/// method: the timer's `add` and the counter's `increment_if_below` as two
/// calls, the path of a store that cannot do both in one step (a Redis
/// Cluster).
#[derive(Debug)]
pub struct TwoSteps(pub MemoryStore);

#[suprnova::async_trait]
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
    fn name(&self) -> &'static str {
        "two steps"
    }
}
