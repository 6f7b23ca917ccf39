//! The in-memory sliding-window driver at its edges: a refusal answered from
//! a full key's note against one made under the shard's lock, and the memory
//! and Redis drivers deciding the same histories.
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use support::redis::{RedisServer, connect};
use suprnova::clock::FakeClock;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::RedisConnection;

/// Sets `clock` to `ms` milliseconds past the Unix second `start`.
fn at(clock: &FakeClock, start: u64, ms: u64) {
    clock.set(
        suprnova::chrono::DateTime::from_timestamp_millis((start * 1_000 + ms) as i64).unwrap(),
    );
}

/// Redis `TIME` in microseconds.
async fn redis_time_us(conn: &RedisConnection) -> u64 {
    let (secs, micros): (u64, u64) = conn.query(&redis::cmd("TIME")).await.unwrap();
    secs * 1_000_000 + micros
}

/// Writes hits stamped `offsets_us` from Redis `TIME` now into `key`, as the
/// script stamps them (score and member the same integer), with the expiry
/// the script gives its newest hit under `window_us`.
async fn seed_hits(conn: &RedisConnection, key: &str, offsets_us: &[i64], window_us: u64) {
    let now = redis_time_us(conn).await as i64;
    let mut add = redis::cmd("ZADD");
    add.arg(key);
    for offset in offsets_us {
        let stamp = now + offset;
        add.arg(stamp).arg(stamp);
    }
    let _: u64 = conn.query(&add).await.unwrap();
    let newest = offsets_us.iter().max().copied().unwrap();
    let ttl_ms = (newest + window_us as i64) / 1_000;
    let _: u64 = conn
        .query(redis::cmd("PEXPIRE").arg(key).arg(ttl_ms))
        .await
        .unwrap();
}

// ---------------------------------------------------------------------------
// The two drivers after a wall clock stepped back
// ---------------------------------------------------------------------------

#[tokio::test]
async fn after_a_step_back_redis_and_memory_decide_the_same_history_alike() {
    // The history: under 2 per 60 s, one hit at t = 20 s and one at
    // t = 100 s, both made before the clock stepped back; the clock then
    // reads t = 50 s. The hit of t = 100 s was made at or before now, so
    // the one of t = 20 s, made 80 s before it, is at least 80 s old: out
    // of the window. One hit is in, and the call has a place.
    let cfg = SlidingWindowConfig::new(2, Duration::from_secs(60));

    let clock = FakeClock::at_unix(1_000_000);
    let memory = InMemoryRateLimiter::with_clock(clock.shared());
    clock.advance(Duration::from_secs(20));
    assert!(memory.acquire_now("k", &cfg).unwrap().allowed);
    clock.advance(Duration::from_secs(80));
    assert!(memory.acquire_now("k", &cfg).unwrap().allowed);
    // Stepped back 50 s: now reads t = 50 s.
    at(&clock, 1_000_000, 50_000);
    let on_memory = memory.acquire_now("k", &cfg).unwrap();

    // The same two hits on Redis, stamped as the script stamped them before
    // its clock stepped back: 30 s before TIME and 50 s after it.
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let redis_driver = RedisRateLimiter::new(conn.clone()).with_prefix("step:");
    seed_hits(&conn, "step:k", &[-30_000_000, 50_000_000], 60_000_000).await;
    let on_redis = redis_driver.acquire("k", &cfg).await.unwrap();

    assert!(on_memory.allowed, "memory: {on_memory:?}");
    assert_eq!(
        on_redis.allowed, on_memory.allowed,
        "redis {on_redis:?} against memory {on_memory:?}"
    );
}

/// After a step back, a key that is not full is admitted, and its hits
/// made before the step are moved on that call, not left beside the hit it
/// adds: two hits from before the step (30 s before `TIME` and 50 s after
/// it, under 3 per 60 s), then two admissions. No hit ends stamped before
/// the first admission's time: moved on a later call, with hits made after
/// the step among them, the one made after the step would have been moved
/// back too, and left the window before a whole window had passed.
#[tokio::test]
async fn after_a_step_back_an_admission_moves_the_hits_made_before_it() {
    let cfg = SlidingWindowConfig::new(3, Duration::from_secs(60));
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let redis_driver = RedisRateLimiter::new(conn.clone()).with_prefix("step:");
    seed_hits(&conn, "step:k", &[-30_000_000, 50_000_000], 60_000_000).await;
    let before = redis_time_us(&conn).await;
    assert!(redis_driver.acquire("k", &cfg).await.unwrap().allowed);
    assert!(redis_driver.acquire("k", &cfg).await.unwrap().allowed);
    let hits: Vec<u64> = conn
        .query(redis::cmd("ZRANGE").arg("step:k").arg(0).arg(-1))
        .await
        .unwrap();
    // The hit of 30 s before the step left the window once moved; the one
    // of 50 s after it is now, with the two admissions.
    assert_eq!(hits.len(), 3, "{hits:?}");
    assert!(
        hits.iter().all(|&hit| hit >= before),
        "a hit stamped before the first admission ({before}): {hits:?}"
    );
}

// ---------------------------------------------------------------------------
// A refusal read from the note of a full key, against one made under the lock
// ---------------------------------------------------------------------------

#[test]
fn a_refusal_read_from_a_note_evicts_as_every_call_does() {
    // One key under two limits: 3 per 60 s and 2 per 200 ms. Hits at 0,
    // 100 and 120 ms (the long limit). At 140 ms the short limit refuses
    // (3 hits in its 200 ms); at 240 ms it refuses again and evicts the hit
    // of 0 ms, which is 240 ms old: "entries older than now - window are
    // evicted" on every call. At 260 ms the long limit finds 2 hits, and
    // admits. (All within the first second, before any sweep.)
    //
    // A key of more than 32 bytes is never noted and is decided under the
    // lock every time: it shows what the same history gives there.
    let long_key = "a-key-longer-than-thirty-two-bytes-is-never-noted";
    let long = SlidingWindowConfig::new(3, Duration::from_secs(60));
    let short = SlidingWindowConfig::new(2, Duration::from_millis(200));
    let start = 1_000_000;
    let mut outcomes = Vec::new();
    for key in ["k", long_key] {
        let clock = FakeClock::at_unix(start);
        let limiter = InMemoryRateLimiter::with_clock(clock.shared());
        for ms in [0, 100, 120] {
            at(&clock, start, ms);
            assert!(
                limiter.acquire_now(key, &long).unwrap().allowed,
                "{key} at {ms} ms"
            );
        }
        at(&clock, start, 140);
        assert!(!limiter.acquire_now(key, &short).unwrap().allowed);
        at(&clock, start, 240);
        let refused = limiter.acquire_now(key, &short).unwrap();
        assert!(!refused.allowed);
        // Both say the next place under 2 per 200 ms frees at 300 ms.
        assert_eq!(refused.retry_after, Some(Duration::from_millis(60)));
        at(&clock, start, 260);
        outcomes.push(limiter.acquire_now(key, &long).unwrap());
    }
    let under_lock = outcomes[1];
    assert!(under_lock.allowed, "under the lock: {under_lock:?}");
    assert_eq!(
        outcomes[0], under_lock,
        "the noted key decides otherwise than the same history under the lock"
    );
}

#[tokio::test]
async fn a_refused_call_evicts_alike_on_memory_and_redis() {
    let long = SlidingWindowConfig::new(3, Duration::from_secs(60));
    let short = SlidingWindowConfig::new(2, Duration::from_millis(200));

    // Memory: hits at 0, 100 and 120 ms, refusals at 140 and 240 ms, then
    // the long limit at 260 ms.
    let start = 1_000_000;
    let clock = FakeClock::at_unix(start);
    let memory = InMemoryRateLimiter::with_clock(clock.shared());
    for ms in [0, 100, 120] {
        at(&clock, start, ms);
        assert!(memory.acquire_now("k", &long).unwrap().allowed);
    }
    at(&clock, start, 140);
    assert!(!memory.acquire_now("k", &short).unwrap().allowed);
    at(&clock, start, 240);
    let memory_short = memory.acquire_now("k", &short).unwrap();
    at(&clock, start, 260);
    let memory_long = memory.acquire_now("k", &long).unwrap();

    // Redis: the three hits as the script stamps them, 240, 140 and 120 ms
    // before its TIME (the refusal at 140 ms wrote nothing), then the same
    // two calls at once. The hit of 140 ms ago stays in the 200 ms window
    // for 60 ms more, far longer than the two calls take.
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let redis_driver = RedisRateLimiter::new(conn.clone()).with_prefix("evict:");
    seed_hits(
        &conn,
        "evict:k",
        &[-240_000, -140_000, -120_000],
        60_000_000,
    )
    .await;
    let redis_short = redis_driver.acquire("k", &short).await.unwrap();
    let redis_long = redis_driver.acquire("k", &long).await.unwrap();

    assert!(!redis_short.allowed && !memory_short.allowed);
    assert!(redis_long.allowed, "Redis: {redis_long:?}");
    assert_eq!(
        memory_long.allowed, redis_long.allowed,
        "memory {memory_long:?} against Redis {redis_long:?}"
    );
}

// Keys up to 32 bytes are refused from their notes, longer ones under the
// lock; under one window per key (the limit changing from call to call),
// and under one limit per key (the window changing), over 200,000 calls
// at random times with sweeps between them, both decide every call, wait
// and reset alike.
#[test]
fn noted_and_unnoted_keys_decide_alike_under_one_window_or_one_limit_per_key() {
    for variant in ["one window a key", "one limit a key"] {
        let clock = FakeClock::at_unix(1_700_000_000);
        let limiter = InMemoryRateLimiter::with_clock(clock.shared())
            .with_shards(1)
            .with_sweep_interval(Duration::MAX);
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let mut next = |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        for step in 0..100_000 {
            let advance = match next(4) {
                0 => 0,
                1 => next(1_000_000),
                2 => next(50_000_000),
                _ => next(2_000_000_000),
            };
            clock.advance(Duration::from_nanos(advance));
            let k = next(3) as usize;
            let short_key = format!("k{k}");
            let long_key = format!("{}{k}", "x".repeat(40));
            let (max, window_ns) = if variant == "one window a key" {
                (
                    [1, 2, 3, 5][next(4) as usize],
                    [1_000_000, 100_000_000, 3_000_000_000][k],
                )
            } else {
                (
                    [1, 2, 3][k],
                    [
                        1_000_000,
                        7_000_000,
                        100_000_000,
                        1_000_000_000,
                        3_000_000_000,
                    ][next(5) as usize],
                )
            };
            let cfg = SlidingWindowConfig::new(max, Duration::from_nanos(window_ns));
            if next(50) == 0 {
                limiter.sweep();
            }
            if next(10) == 0 {
                let a = limiter.retry_after_now(&short_key, &cfg).unwrap();
                let b = limiter.retry_after_now(&long_key, &cfg).unwrap();
                assert_eq!(a, b, "{variant}: retry_after at step {step}");
            } else {
                let a = limiter.acquire_now(&short_key, &cfg).unwrap();
                let b = limiter.acquire_now(&long_key, &cfg).unwrap();
                assert_eq!(a, b, "{variant}: acquire at step {step}");
            }
        }
    }
}
