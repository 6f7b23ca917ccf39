//! Edge cases of the cache stores, the `Cache` facade and the rate limiter
//! built on them: the same calls on the memory store and on a real
//! redis-server must give the same answers, and the rate limiter must keep
//! what its reference promises.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::redis::{RedisServer, connect};
use support::two_steps::TwoSteps;
use support::unique_prefix;
use suprnova::cache::{CacheError, MemoryStore, RedisStore, Store};
use suprnova::chrono::{DateTime, Utc};
use suprnova::clock::FakeClock;
use suprnova::limiter::CacheRateLimiter;

const MINUTE: Duration = Duration::from_secs(60);

/// 2000-01-01T00:00:00Z.
const Y2K: u64 = 946_684_800;

/// A memory store on a frozen clock and a Redis store on `server`, each
/// with a prefix of its own.
fn both_stores(server: &RedisServer, name: &str) -> [(&'static str, Arc<dyn Store>); 2] {
    let memory = MemoryStore::with_clock(FakeClock::at_unix(Y2K).shared());
    let redis = RedisStore::new(connect(&server.url())).with_prefix(unique_prefix(name));
    [
        ("memory", Arc::new(memory) as Arc<dyn Store>),
        ("redis", Arc::new(redis) as Arc<dyn Store>),
    ]
}

/// Runs `future` bounded in time.
async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    support::within(what, Duration::from_secs(20), future).await
}

#[tokio::test]
async fn integers_written_with_a_leading_zero_or_a_sign_are_refused_on_both_stores() {
    let server = RedisServer::start();
    let mut differences = Vec::new();
    for (name, store) in both_stores(&server, "lenient") {
        for value in ["007", "+5", "-0", "00", "+0"] {
            let k = format!("k{value}");
            bounded("put", store.put(&k, value, MINUTE)).await.unwrap();
            let incremented = bounded("increment", store.increment(&k, 1)).await;
            if !matches!(incremented, Err(CacheError::NotAnInteger { .. })) {
                differences.push(format!(
                    "{name}: increment of {value:?} gave {incremented:?}"
                ));
            }
            let below = bounded(
                "increment_if_below",
                store.increment_if_below(&k, 60, 1, 100),
            )
            .await;
            if !matches!(below, Err(CacheError::NotAnInteger { .. })) {
                differences.push(format!(
                    "{name}: increment_if_below of {value:?} gave {below:?}"
                ));
            }
            // Left as it was put.
            let left = bounded("get", store.get(&k)).await.unwrap();
            if left.as_deref() != Some(value) {
                differences.push(format!("{name}: {value:?} became {left:?}"));
            }
        }
    }
    assert!(
        differences.is_empty(),
        "the stores disagree:\n{}",
        differences.join("\n")
    );
}

#[tokio::test]
async fn not_an_integer_names_the_value_found_on_both_stores() {
    let server = RedisServer::start();
    for (name, store) in both_stores(&server, "named") {
        bounded("put", store.put("k", "abc", MINUTE)).await.unwrap();
        let error = bounded("increment", store.increment("k", 1))
            .await
            .unwrap_err();
        match &error {
            CacheError::NotAnInteger { key, value } => {
                assert_eq!(key, "k", "{name}");
                assert_eq!(value, "abc", "{name}: {error}");
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

// Both stores refuse a decrement by i64::MIN (its negation does not fit)
// as an overflow, the value's fault, and leave the counter alone.
#[tokio::test]
async fn a_decrement_by_the_smallest_integer_is_an_overflow_on_both_stores() {
    let server = RedisServer::start();
    for (name, store) in both_stores(&server, "min") {
        bounded("put", store.put("k", "-1", MINUTE)).await.unwrap();
        let error = bounded("decrement", store.decrement("k", i64::MIN))
            .await
            .unwrap_err();
        assert!(
            matches!(error, CacheError::Overflow { .. }) && !error.is_backend(),
            "{name}: {error:?}"
        );
        assert_eq!(
            bounded("get", store.get("k")).await.unwrap().as_deref(),
            Some("-1"),
            "{name}"
        );
    }
}

// Values, empty keys and keys with odd characters come back as they were
// put, and count alike, on both stores.
#[tokio::test]
async fn odd_keys_and_values_round_trip_alike_on_both_stores() {
    let server = RedisServer::start();
    let long = "k".repeat(10_000);
    let keys = ["", " ", "a\0b", "line\nbreak", "clé:ключ:😀", long.as_str()];
    let mut seen: Vec<Vec<String>> = Vec::new();
    for (name, store) in both_stores(&server, "odd") {
        let mut answers = Vec::new();
        for key in keys {
            bounded("put", store.put(key, "", MINUTE)).await.unwrap();
            answers.push(format!("{:?}", bounded("get", store.get(key)).await));
            answers.push(format!("{:?}", bounded("has", store.has(key)).await));
            bounded("forget", store.forget(key)).await.unwrap();
            answers.push(format!(
                "{:?}",
                bounded("increment", store.increment(key, i64::MAX)).await
            ));
            answers.push(format!(
                "{:?}",
                bounded("increment", store.increment(key, 1))
                    .await
                    .map_err(|e| matches!(e, CacheError::Overflow { .. }))
            ));
            answers.push(format!(
                "{:?}",
                bounded("ttl", store.ttl(key)).await.unwrap()
            ));
            answers.push(format!(
                "{:?}",
                bounded("add", store.add(key, "x", MINUTE)).await
            ));
            assert!(
                bounded("forget", store.forget(key)).await.unwrap(),
                "{name}"
            );
            answers.push(format!(
                "{:?}",
                bounded("add", store.add(key, "x", Duration::ZERO)).await
            ));
            let ttl = bounded("ttl", store.ttl(key)).await.unwrap().unwrap();
            assert!(
                ttl <= Duration::from_secs(1) && ttl > Duration::from_millis(500),
                "{name}: a time to live of 0 is raised to one second: {ttl:?}"
            );
        }
        seen.push(answers);
    }
    assert_eq!(seen[0], seen[1], "memory, then redis");
}

#[tokio::test]
async fn hit_until_a_past_time_counts_in_an_open_window_whose_count_is_zero() {
    let clock = FakeClock::at_unix(Y2K);
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let limiter = CacheRateLimiter::new(store.clone(), clock.shared());
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    assert_eq!(limiter.decrement("k", 60, 1).await.unwrap(), 0);
    clock.advance(Duration::from_secs(10));
    let past = DateTime::<Utc>::from_timestamp(Y2K as i64 - 1, 0).unwrap();
    // The window opened by the first hit is open: its timer and its counter
    // are there.
    assert_eq!(limiter.available_in("k").await.unwrap(), 50);
    assert_eq!(limiter.hit_until("k", past).await.unwrap(), 1);
    // "the hit counts in a window that is already open": the count stays.
    assert_eq!(limiter.attempts("k").await.unwrap(), 1);
    assert_eq!(store.ttl("k").await.unwrap(), Some(Duration::from_secs(50)));
}

#[tokio::test]
async fn hit_until_a_past_time_counts_in_a_window_pinned_after_reset_attempts() {
    let clock = FakeClock::at_unix(Y2K);
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let limiter = CacheRateLimiter::new(store.clone(), clock.shared());
    limiter.hit("k", 60).await.unwrap();
    assert!(limiter.reset_attempts("k").await.unwrap());
    assert_eq!(limiter.available_in("k").await.unwrap(), 60);
    // A hit of the same window counts in it.
    let past = DateTime::<Utc>::from_timestamp(Y2K as i64 - 1, 0).unwrap();
    assert_eq!(limiter.hit_until("k", past).await.unwrap(), 1);
    assert_eq!(limiter.attempts("k").await.unwrap(), 1);
}

/// What `store` holds under the keys the transcript uses, with times to
/// live in whole seconds, rounded up.
async fn dump(store: &dyn Store, out: &mut Vec<String>) {
    for key in ["k", "k:timer", "z", "z:timer", "q", "q:timer"] {
        let value = store.get(key).await.unwrap();
        let ttl = support::ttl_seconds(store, key).await.unwrap();
        out.push(format!("  {key} = {value:?} ttl {ttl:?}"));
    }
}

/// Every rate-limiter method, in one sequence, on `limiter`: each answer
/// and what the store holds after it, as text (times to live in whole
/// seconds, rounded up).
async fn limiter_transcript(limiter: &CacheRateLimiter) -> Vec<String> {
    let store = limiter.store().clone();
    let mut out = Vec::new();
    let past = DateTime::<Utc>::from_timestamp(Y2K as i64 - 5, 0).unwrap();
    let future = DateTime::<Utc>::from_timestamp(Y2K as i64 + 90, 0).unwrap();
    macro_rules! step {
        ($what:expr, $call:expr) => {{
            let answer = bounded($what, $call).await;
            out.push(format!("{}: {:?}", $what, answer));
            dump(store.as_ref(), &mut out).await;
        }};
    }
    step!("hit", limiter.hit("k", 60));
    step!("increment 5", limiter.increment("k", 60, 5));
    step!("decrement 7", limiter.decrement("k", 60, 7));
    step!("attempts", limiter.attempts("k"));
    step!("remaining", limiter.remaining("k", 3));
    step!("too many at -1", limiter.too_many_attempts("k", -1));
    step!("available_in", limiter.available_in("k"));
    step!("below 5 of 3", limiter.increment_if_below("k", 60, 5, 3));
    step!("below 1 of 0", limiter.increment_if_below("k", 60, 1, 0));
    step!(
        "below -3 of -10",
        limiter.increment_if_below("k", 60, -3, -10)
    );
    step!("hit decay 0", limiter.hit("k", 0));
    step!("hit decay -5", limiter.hit("k", -5));
    step!("hit_until past", limiter.hit_until("k", past));
    step!("hit_until future", limiter.hit_until("k", future));
    step!("reset", limiter.reset_attempts("k"));
    step!("reset again", limiter.reset_attempts("k"));
    step!("too many at 0", limiter.too_many_attempts("k", 0));
    step!("hit after reset", limiter.hit("k", 60));
    step!("clear", limiter.clear("k"));
    step!(
        "z: below 5 of 2 fresh",
        limiter.increment_if_below("z", 60, 5, 2)
    );
    step!(
        "z: below 0 of 0 fresh",
        limiter.increment_if_below("z", 60, 0, 0)
    );
    step!(
        "z: below -1 of -2 fresh",
        limiter.increment_if_below("z", 60, -1, -2)
    );
    step!("z: decrement fresh", limiter.decrement("z", 60, 2));
    step!("z: below 3 of 1", limiter.increment_if_below("z", 60, 3, 1));
    step!("z: hit decay 0", limiter.hit("z", 0));
    step!("z: hit_and_check", limiter.hit_and_check("z", 1, 60));
    step!("q: hit decay 0 fresh", limiter.hit("q", 0));
    step!("q: below decay 0", limiter.increment_if_below("q", 0, 1, 1));
    step!("q: hit_until past fresh", limiter.hit_until("q", past));
    step!("q: hit a year", limiter.hit("q", 31_536_000));
    step!("q: too many at 1", limiter.too_many_attempts("q", 1));
    step!("q: forget timer", store.forget("q:timer"));
    step!("q: too many at 1 again", limiter.too_many_attempts("q", 1));
    step!("q: attempts", limiter.attempts("q"));
    out
}

// The rate limiter answers alike, and leaves alike entries, on the memory
// store and on Redis, for every method and odd amounts, ceilings and
// windows.
#[tokio::test]
async fn the_rate_limiter_answers_alike_on_both_stores() {
    let server = RedisServer::start();
    let mut transcripts = Vec::new();
    for (_, store) in both_stores(&server, "transcript") {
        let clock = FakeClock::at_unix(Y2K);
        let limiter = CacheRateLimiter::new(store, clock.shared());
        transcripts.push(limiter_transcript(&limiter).await);
    }
    let (memory, redis) = (&transcripts[0], &transcripts[1]);
    let differences: Vec<String> = memory
        .iter()
        .zip(redis)
        .filter(|(m, r)| m != r)
        .map(|(m, r)| format!("memory {m}\n redis {r}"))
        .collect();
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

#[tokio::test]
async fn the_rate_limiter_answers_alike_on_a_store_of_two_steps() {
    let mut transcripts = Vec::new();
    let clock = FakeClock::at_unix(Y2K);
    let stores: [Arc<dyn Store>; 2] = [
        Arc::new(MemoryStore::with_clock(clock.shared())),
        Arc::new(TwoSteps(MemoryStore::with_clock(clock.shared()))),
    ];
    for store in stores {
        let limiter = CacheRateLimiter::new(store, clock.shared());
        transcripts.push(limiter_transcript(&limiter).await);
    }
    let (memory, two) = (&transcripts[0], &transcripts[1]);
    let differences: Vec<String> = memory
        .iter()
        .zip(two)
        .filter(|(m, r)| m != r)
        .map(|(m, r)| format!("memory {m}\n   two {r}"))
        .collect();
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}
