//! Edges of a counter's life in a rate-limit window and of the cache
//! store's Redis settings: a counter made under a window it did not open
//! keeping its own time to live on both stores, a call in no window
//! counting in an open window alike for `hit` and `attempt`, and a refused
//! database naming the variable that was read.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::boot::env;
use support::clock_at;
use support::redis::{RedisServer, connect};
use suprnova::bootstrap::bootstrap;
use suprnova::cache::{MemoryStore, RedisStore, Store};
use suprnova::clock;
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;

/// With `REDIS_CACHE_CONNECTION=default`, the cache store's database is
/// read from `REDIS_DB`: a database the Redis does not have refuses boot,
/// and the fix the refusal gives names `REDIS_DB`, the variable read on
/// that connection, beside `REDIS_CACHE_DB`, read on the other.
#[tokio::test]
async fn a_refused_database_of_the_default_connection_names_redis_db() {
    let server = RedisServer::start();
    let port = server.port().to_string();
    let pairs = [
        ("APP_ENV", "local"),
        ("CACHE_STORE", "redis"),
        ("REDIS_HOST", "127.0.0.1"),
        ("REDIS_PORT", port.as_str()),
        ("REDIS_CACHE_CONNECTION", "default"),
        ("REDIS_DB", "99"),
    ];
    let app = App::new();
    let refused = support::within(
        "boot",
        Duration::from_secs(20),
        app.scope(bootstrap(&env(&pairs))),
    )
    .await
    .map(|summary| summary.to_string())
    .unwrap_err()
    .to_string();
    assert!(
        refused.contains("refuses the database asked for"),
        "{refused}"
    );
    assert!(
        refused.contains("in REDIS_DB with REDIS_CACHE_CONNECTION=default"),
        "{refused}"
    );
}

/// A counter made by a hit under a window it did not open (the window of
/// 60 s opened by an earlier hit, its count reset, then a hit of 1 s)
/// gets the hit's own time to live, as Laravel's `add(K, 0, 1)` gives it
/// and as the Redis store gives it (its script extends only a counter the
/// opening call counts on): "later hits extend neither entry". The memory
/// store gives it the open timer's, so its count outlives the second the
/// hit asked for, and the two stores answer `attempts` apart.
#[tokio::test]
async fn a_counter_made_under_a_window_it_did_not_open_keeps_its_own_time_to_live() {
    // Redis, on its own clock.
    let server = RedisServer::start();
    let redis: Arc<dyn Store> = Arc::new(
        RedisStore::new(connect(&server.url())).with_prefix(support::unique_prefix("own")),
    );
    let on_redis = CacheRateLimiter::new(redis, clock::system());
    assert_eq!(on_redis.hit("k", 60).await.unwrap(), 1);
    assert!(on_redis.reset_attempts("k").await.unwrap());
    assert_eq!(on_redis.hit("k", 1).await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(1300)).await;
    assert_eq!(on_redis.attempts("k").await.unwrap(), 0, "redis");
    // Memory, on a fake clock: the same steps.
    let clock = clock_at(12, 0, 0);
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.shared()));
    let on_memory = CacheRateLimiter::new(memory.clone(), clock.shared());
    assert_eq!(on_memory.hit("k", 60).await.unwrap(), 1);
    assert!(on_memory.reset_attempts("k").await.unwrap());
    assert_eq!(on_memory.hit("k", 1).await.unwrap(), 1);
    let ttl = memory.ttl("k").await.unwrap();
    clock.advance(Duration::from_millis(1300));
    assert_eq!(
        on_memory.attempts("k").await.unwrap(),
        0,
        "memory: the hit of 1 s gave its counter {ttl:?} to live"
    );
}

/// A call in no window (a decay of 0) on a key whose window is open with
/// its count reset counts in that window: `hit` now keeps its count there,
/// ending with the window, and rate-limiting.md says `attempt` counts in
/// such a window "up to their maximum in one atomic step and refuse[s]
/// while the timer exists". `attempt` still removes the count it made, so
/// in that window it runs its callback every time and never refuses.
#[tokio::test]
async fn an_attempt_in_no_window_counts_in_an_open_window_as_a_hit_does() {
    let clock = clock_at(12, 0, 0);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.shared()));
    let limiter = CacheRateLimiter::new(store, clock.shared());
    let runs = std::sync::atomic::AtomicUsize::new(0);
    for key in ["hit", "attempt"] {
        assert_eq!(limiter.hit(key, 60).await.unwrap(), 1);
        assert!(limiter.reset_attempts(key).await.unwrap());
        assert_eq!(limiter.available_in(key).await.unwrap(), 60);
    }
    // `hit` with a decay of 0 counts in the open window, and the count
    // stays.
    for _ in 0..3 {
        limiter.hit("hit", 0).await.unwrap();
    }
    assert_eq!(limiter.attempts("hit").await.unwrap(), 3);
    // `attempt` with a maximum of 2 and a decay of 0, five times.
    let mut ran = 0;
    for _ in 0..5 {
        if support::attempt_with_no_window(&limiter, &runs, "attempt", 2)
            .await
            .is_some()
        {
            ran += 1;
        }
    }
    let left = limiter.attempts("attempt").await.unwrap();
    assert_eq!(
        (ran, left),
        (2, 2),
        "attempt ran {ran} times and left a count of {left} in the open window"
    );
}
