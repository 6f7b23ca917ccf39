//! The two Lua scripts against a real redis-server: the keys, values and
//! times to live they leave, their answers on values of the wrong type or
//! out of range, very large counts and windows, a flushed script cache and
//! a restart, and the Redis sliding window beside the memory one.
#![cfg(feature = "redis")]

mod support;
mod throttle_support;

use std::sync::Arc;
use std::time::Duration;

use support::redis::{RedisServer, connect};
use support::unique_prefix;
use suprnova::cache::{CacheError, MemoryStore, RedisStore, Store, WindowIncrement};
use suprnova::clock::{self, Clock, FakeClock, SystemClock};
use suprnova::decision::Decision;
use suprnova::limiter::CacheRateLimiter;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimitError, RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::RedisConnection;

/// A plain client on database 0, to write and read what another
/// application would.
async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(server.url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

async fn pttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("PTTL").arg(key).query_async(conn).await.unwrap()
}

async fn get(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

async fn set(conn: &mut redis::aio::MultiplexedConnection, key: &str, value: &str) {
    support::redis::set_for_a_minute(conn, key, value).await;
}

async fn keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(conn).await.unwrap();
    keys.sort();
    keys
}

async fn redis_time_us(conn: &RedisConnection) -> u64 {
    let (secs, micros): (u64, u64) = conn.query(&redis::cmd("TIME")).await.unwrap();
    secs * 1_000_000 + micros
}

// ---------------------------------------------------------------------
// The sliding-window script: keys and times to live.
// ---------------------------------------------------------------------

// An admitted call sets the bucket to live one window from its hit; a
// refused call and a `retry_after` leave that expiry as it is; a
// `retry_after` on a key that holds nothing writes nothing; once the
// window has passed no key is left.
#[tokio::test]
async fn the_bucket_lives_one_window_from_its_newest_hit_and_then_is_gone() {
    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    let limiter = RedisRateLimiter::new(connect(&server.url())).with_prefix("sw:");
    let cfg = SlidingWindowConfig::new(2, Duration::from_millis(400));

    assert_eq!(limiter.retry_after("k", &cfg).await.unwrap(), None);
    assert!(keys(&mut conn).await.is_empty(), "a read writes nothing");

    assert!(limiter.acquire("k", &cfg).await.unwrap().allowed);
    let first = pttl(&mut conn, "sw:k").await;
    assert!((350..=400).contains(&first), "PTTL {first}");
    assert!(limiter.acquire("k", &cfg).await.unwrap().allowed);
    let refused = limiter.acquire("k", &cfg).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.remaining, 0);
    let after_refusal = pttl(&mut conn, "sw:k").await;
    assert!(
        after_refusal <= 400 && after_refusal > 0,
        "PTTL {after_refusal}"
    );
    assert!(limiter.retry_after("k", &cfg).await.unwrap().is_some());
    assert!(pttl(&mut conn, "sw:k").await <= after_refusal);

    tokio::time::sleep(Duration::from_millis(450)).await;
    assert!(
        keys(&mut conn).await.is_empty(),
        "{:?}",
        keys(&mut conn).await
    );
}

// A window of 1 ms: the key lives 1 ms; a call a few milliseconds later is
// admitted as the first of a new window.
#[tokio::test]
async fn a_window_of_one_millisecond_keeps_its_bucket_one_millisecond() {
    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    let limiter = RedisRateLimiter::new(connect(&server.url())).with_prefix("ms:");
    let cfg = SlidingWindowConfig::new(1, Duration::from_millis(1));
    for _ in 0..3 {
        let decision = limiter.acquire("k", &cfg).await.unwrap();
        assert!(decision.allowed, "{decision:?}");
        assert_eq!(decision.remaining, 0);
        tokio::time::sleep(Duration::from_millis(5)).await;
        assert!(keys(&mut conn).await.is_empty());
    }
}

// A window of ten years and the longest window the driver takes: the
// bucket lives exactly that long, and a refusal waits for it to the
// second.
#[tokio::test]
async fn windows_of_years_are_kept_to_the_millisecond() {
    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    let redis = connect(&server.url());
    let limiter = RedisRateLimiter::new(redis.clone()).with_prefix("years:");
    let ten_years = Duration::from_secs(10 * 365 * 24 * 3_600);
    let longest = Duration::from_micros(1 << 50);
    for (key, window) in [("ten", ten_years), ("longest", longest)] {
        let cfg = SlidingWindowConfig::new(1, window);
        let before = redis_time_us(&redis).await;
        assert!(limiter.acquire(key, &cfg).await.unwrap().allowed);
        let ttl = pttl(&mut conn, &format!("years:{key}")).await;
        // Whole milliseconds, rounded up: the bucket never goes early.
        let window_ms = i64::try_from(window.as_micros().div_ceil(1_000)).unwrap();
        assert!(
            ttl <= window_ms && ttl > window_ms - 2_000,
            "{key}: PTTL {ttl}"
        );
        let refused = limiter.acquire(key, &cfg).await.unwrap();
        assert!(!refused.allowed);
        let wait = refused.retry_after.unwrap();
        assert!(
            wait <= window && wait > window - Duration::from_secs(2),
            "{wait:?}"
        );
        let frees_at = before + u64::try_from(window.as_micros()).unwrap();
        let reset = refused.reset_at.unwrap();
        assert!(
            (frees_at / 1_000_000..=frees_at / 1_000_000 + 3).contains(&(reset as u64)),
            "{key}: reset {reset}"
        );
    }
    let too_long = SlidingWindowConfig::new(1, longest + Duration::from_micros(1));
    assert!(matches!(
        limiter.acquire("past", &too_long).await,
        Err(RateLimitError::Config(_))
    ));
}

// A limit of u32::MAX: the places left are counted exactly.
#[tokio::test]
async fn the_largest_limit_counts_its_places_exactly() {
    let server = RedisServer::start();
    let limiter = RedisRateLimiter::new(connect(&server.url())).with_prefix("big:");
    let cfg = SlidingWindowConfig::new(u32::MAX, Duration::from_secs(60));
    for left in 1..=3_u64 {
        let decision = limiter.acquire("k", &cfg).await.unwrap();
        assert_eq!(
            decision,
            Decision::allowed(u64::from(u32::MAX), u64::from(u32::MAX) - left)
        );
    }
    assert_eq!(limiter.retry_after("k", &cfg).await.unwrap(), None);
}

// A key of another type where the bucket is expected (a hash, a list) is a
// backend error, and the key is left as it was.
#[tokio::test]
async fn a_hash_or_a_list_where_a_bucket_is_expected_is_an_error_and_left_alone() {
    let server = RedisServer::start();
    let limiter = RedisRateLimiter::new(connect(&server.url())).with_prefix("typed:");
    assert!(server.command("HSET typed:h a 1").starts_with(':'));
    assert!(server.command("RPUSH typed:l a").starts_with(':'));
    for key in ["h", "l"] {
        for admit in [true, false] {
            let cfg = SlidingWindowConfig::new(5, Duration::from_secs(60));
            let error = if admit {
                limiter.acquire(key, &cfg).await.unwrap_err()
            } else {
                limiter.retry_after(key, &cfg).await.unwrap_err()
            };
            assert!(matches!(error, RateLimitError::Backend(_)), "{error:?}");
            assert!(error.to_string().contains("WRONGTYPE"), "{error}");
        }
    }
    assert_eq!(server.command("HGET typed:h a").trim(), "$1\r\n1");
    assert_eq!(server.command("LLEN typed:l").trim(), ":1");
}

// ---------------------------------------------------------------------
// The sliding window on Redis beside the memory driver.
// ---------------------------------------------------------------------

/// What can be compared exactly between the two drivers for one decision:
/// admitted, the limit, the places left, the wait in whole seconds.
fn comparable(decision: &Decision) -> (bool, u64, u64, Option<u64>) {
    (
        decision.allowed,
        decision.limit,
        decision.remaining,
        decision.retry_after_secs(),
    )
}

// The same calls on both drivers, each at one moment (the memory driver's
// clock frozen, Redis's calls a few milliseconds apart in windows of a
// minute): the same admissions, places left and waits in seconds, a limit
// lowered under a fuller bucket and raised again included, and a limit of
// zero.
#[tokio::test]
async fn the_redis_window_decides_as_the_memory_window_on_the_same_calls() {
    let server = RedisServer::start();
    let redis = RedisRateLimiter::new(connect(&server.url())).with_prefix(unique_prefix("cmp"));
    let clock = FakeClock::at_unix(1_800_000_000);
    let memory = InMemoryRateLimiter::with_clock(clock.shared());
    let minute = |max| SlidingWindowConfig::new(max, Duration::from_secs(60));
    // (key, limit, acquire or read)
    let calls: Vec<(&str, u32, bool)> = [
        vec![("a", 5, true); 8],
        vec![("a", 5, false)],
        vec![("a", 2, true); 2],
        vec![("a", 2, false)],
        vec![("a", 7, true); 3],
        vec![("a", 7, false)],
        vec![("z", 0, true); 2],
        vec![("z", 0, false)],
        vec![("one", 1, true); 3],
    ]
    .concat();
    for (i, (key, max, acquire)) in calls.into_iter().enumerate() {
        let cfg = minute(max);
        if acquire {
            let on_memory = memory.acquire(key, &cfg).await.unwrap();
            let on_redis = redis.acquire(key, &cfg).await.unwrap();
            assert_eq!(
                comparable(&on_redis),
                comparable(&on_memory),
                "call {i}: {key} under {max}"
            );
        } else {
            let on_memory = memory.retry_after(key, &cfg).await.unwrap();
            let on_redis = redis.retry_after(key, &cfg).await.unwrap();
            let secs =
                |d: Option<Duration>| d.map(|d| d.as_secs() + u64::from(d.subsec_nanos() > 0));
            assert_eq!(
                secs(on_redis),
                secs(on_memory),
                "read {i}: {key} under {max}"
            );
        }
    }
}

// ---------------------------------------------------------------------
// The conditional increment: keys, values and times to live.
// ---------------------------------------------------------------------

// A Laravel 13 application's keys, values and times to live after a count
// that opens a window, one that counts in it, one refused, and a read of
// the window's end, to the millisecond; a window of ten years too.
#[tokio::test]
async fn counts_leave_laravels_keys_with_the_windows_time_to_live_to_the_millisecond() {
    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    let store = Arc::new(RedisStore::new(connect(&server.url())));
    let limiter = CacheRateLimiter::new(store, clock::system());
    const P: &str = "laravel-database-laravel-cache-";
    for (key, decay) in [("login", 60_i64), ("yearly", 10 * 365 * 24 * 3_600)] {
        let before = SystemClock.unix_seconds();
        let first = limiter.increment_if_below(key, decay, 1, 2).await.unwrap();
        assert!(first.counted && first.count == 1, "{first:?}");
        let second = limiter.increment_if_below(key, decay, 1, 2).await.unwrap();
        assert!(second.counted && second.count == 2, "{second:?}");
        let third = limiter.increment_if_below(key, decay, 1, 2).await.unwrap();
        assert!(!third.counted && third.count == 2, "{third:?}");
        let after = SystemClock.unix_seconds();
        let counter = format!("{P}{key}");
        let timer = format!("{P}{key}:timer");
        assert_eq!(get(&mut conn, &counter).await.as_deref(), Some("2"));
        let ends: i64 = get(&mut conn, &timer).await.unwrap().parse().unwrap();
        assert!((before + decay..=after + decay).contains(&ends), "{ends}");
        for k in [&counter, &timer] {
            let ttl = pttl(&mut conn, k).await;
            assert!(
                ttl <= decay * 1_000 && ttl > decay * 1_000 - 1_000,
                "{k}: PTTL {ttl}"
            );
        }
        let left = limiter.available_in(key).await.unwrap();
        assert!((decay - 1..=decay).contains(&left), "{left}");
    }
    assert_eq!(
        keys(&mut conn).await,
        [
            format!("{P}login"),
            format!("{P}login:timer"),
            format!("{P}yearly"),
            format!("{P}yearly:timer"),
        ]
    );
}

// A window of i64::MAX seconds: the count opens it and counts in it, the
// timer holds the end the memory store's timer holds, and both entries get
// the longest time to live the store gives.
#[tokio::test]
async fn a_window_of_the_longest_decay_counts_as_on_the_memory_store() {
    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    let redis = CacheRateLimiter::new(
        Arc::new(RedisStore::new(connect(&server.url())).with_prefix("long:")),
        clock::system(),
    );
    let memory = CacheRateLimiter::new(Arc::new(MemoryStore::new()), clock::system());
    let mut seen = Vec::new();
    for limiter in [&redis, &memory] {
        let hits = [
            limiter.hit("k", i64::MAX).await.unwrap(),
            limiter.hit("k", i64::MAX).await.unwrap(),
        ];
        let third = limiter
            .increment_if_below("k", i64::MAX, 1, 2)
            .await
            .unwrap();
        let timer = limiter.store().get("k:timer").await.unwrap();
        seen.push((hits, third.counted, third.count, timer));
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[0].3.as_deref(), Some("9223372036854775807"));
    for key in ["long:k", "long:k:timer"] {
        let ttl = pttl(&mut conn, key).await;
        let longest = RedisStore::MAX_TTL_SECONDS * 1_000;
        assert!(ttl <= longest && ttl > longest - 2_000, "{key}: PTTL {ttl}");
    }
}

// A window of a second: both entries are gone after it, nothing without a
// time to live is left at any point.
#[tokio::test]
async fn nothing_is_left_after_a_window_of_a_second() {
    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    let limiter = CacheRateLimiter::new(
        Arc::new(RedisStore::new(connect(&server.url())).with_prefix("app:")),
        clock::system(),
    );
    for _ in 0..3 {
        limiter.hit("k", 1).await.unwrap();
        limiter.increment_if_below("t", 1, 1, 2).await.unwrap();
        for key in keys(&mut conn).await {
            let ttl = pttl(&mut conn, &key).await;
            assert!(ttl > 0 && ttl <= 1_000, "{key}: PTTL {ttl}");
        }
    }
    tokio::time::sleep(Duration::from_millis(1_100)).await;
    assert!(
        keys(&mut conn).await.is_empty(),
        "{:?}",
        keys(&mut conn).await
    );
}

// ---------------------------------------------------------------------
// The conditional increment: values out of range and of the wrong type.
// ---------------------------------------------------------------------

/// The two stores, each with `value` under the counter `key`.
async fn both_stores_holding(
    server: &RedisServer,
    key: &str,
    value: &str,
) -> [(&'static str, Arc<dyn Store>); 2] {
    let prefix = unique_prefix("held");
    let redis = Arc::new(RedisStore::new(connect(&server.url())).with_prefix(&prefix));
    set(&mut raw(server).await, &format!("{prefix}{key}"), value).await;
    let memory = Arc::new(MemoryStore::new());
    memory
        .put(key, value, Duration::from_secs(60))
        .await
        .unwrap();
    [("redis", redis as Arc<dyn Store>), ("memory", memory)]
}

// A count at a ceiling past 2^53 (a cost-weighted budget: bytes, or
// nanoseconds of work): adding 1 to a count already at the ceiling must
// not count, and the count must stay at or below the ceiling, as on the
// memory store.
#[tokio::test]
async fn a_count_past_two_to_the_53_never_passes_its_ceiling() {
    let server = RedisServer::start();
    let ceiling: i64 = 10_000_000_000_000_000;
    for (name, store) in both_stores_holding(&server, "budget", &ceiling.to_string()).await {
        let outcome = store
            .increment_if_below("budget", 60, 1, ceiling)
            .await
            .unwrap();
        assert!(
            !outcome.counted && outcome.count == ceiling,
            "{name}: {outcome:?} past the ceiling {ceiling}"
        );
    }
    // Through the facade: a budget filled to its ceiling, then one more.
    let store = Arc::new(RedisStore::new(connect(&server.url())).with_prefix("facade:"));
    let limiter = CacheRateLimiter::new(store, clock::system());
    assert_eq!(
        limiter.increment("bytes", 60, ceiling).await.unwrap(),
        ceiling
    );
    let one_more = limiter
        .increment_if_below("bytes", 60, 1, ceiling)
        .await
        .unwrap();
    assert!(!one_more.counted, "{one_more:?}");
    assert_eq!(limiter.attempts("bytes").await.unwrap(), ceiling);
}

// A counter past the range of a 64-bit integer is a value that does not
// fit the operation: `NotAnInteger`, as INCRBY's own refusal of it is
// reported, and as the memory store reports it; not a backend failure.
#[tokio::test]
async fn a_counter_past_a_64_bit_integer_is_not_an_integer_on_every_call() {
    let server = RedisServer::start();
    let value = "9223372036854775808";
    for (name, store) in both_stores_holding(&server, "k", value).await {
        let incremented = store.increment("k", 1).await.unwrap_err();
        assert!(
            matches!(incremented, CacheError::NotAnInteger { .. }),
            "{name}: {incremented:?}"
        );
        let below = store.increment_if_below("k", 60, 1, 10).await.unwrap_err();
        assert!(
            matches!(below, CacheError::NotAnInteger { .. }) && !below.is_backend(),
            "{name}: {below:?}"
        );
    }
}

// A counter holding a float, a word or a padded number is refused as not
// an integer by every count, and left untouched.
#[tokio::test]
async fn a_counter_holding_a_float_or_junk_is_not_an_integer() {
    let server = RedisServer::start();
    for value in ["2.5", "1e3", "0x10", " 7", "7\n", "inf", "i:3;x"] {
        for (name, store) in both_stores_holding(&server, "k", value).await {
            for ceiling in [1, 100] {
                let error = store
                    .increment_if_below("k", 60, 1, ceiling)
                    .await
                    .unwrap_err();
                assert!(
                    matches!(error, CacheError::NotAnInteger { .. }),
                    "{name} {value:?} under {ceiling}: {error:?}"
                );
            }
            assert_eq!(
                store.get("k").await.unwrap().as_deref(),
                Some(value),
                "{name}"
            );
        }
    }
}

// A hash where the counter is expected: an error, never a count.
#[tokio::test]
async fn a_hash_where_a_counter_is_expected_is_an_error() {
    let server = RedisServer::start();
    let store = Arc::new(RedisStore::new(connect(&server.url())).with_prefix("h:"));
    assert!(server.command("HSET h:k a 1").starts_with(':'));
    let limiter = CacheRateLimiter::new(store.clone(), clock::system());
    assert!(limiter.hit("k", 60).await.is_err());
    assert!(limiter.increment_if_below("k", 60, 1, 5).await.is_err());
    assert!(limiter.attempts("k").await.is_err());
    assert!(store.increment_if_below("k", 60, 1, 5).await.is_err());
    assert_eq!(server.command("HGET h:k a").trim(), "$1\r\n1");
}

// A refusal's window end read in the count's step, where a Laravel
// application with a phpredis serializer wrote the timer (`i:<n>;`): the
// crate reads that form of the timer everywhere else, and the memory
// store's answer carries the end.
#[tokio::test]
async fn a_refusal_reads_a_php_serialized_timer_in_the_counts_step() {
    let server = RedisServer::start();
    let ends_at = SystemClock.unix_seconds() + 42;
    let mut answers = Vec::new();
    for (name, store) in both_stores_holding(&server, "k", "3").await {
        store
            .put("k:timer", &format!("i:{ends_at};"), Duration::from_secs(60))
            .await
            .unwrap();
        let count = WindowIncrement {
            key: "k",
            timer_key: "k:timer",
            ends_at: SystemClock.unix_seconds() + 60,
            decay_seconds: 60,
            amount: 1,
            ceiling: 3,
        };
        let (outcome, end) = store
            .increment_in_window_or_window_end(count)
            .await
            .unwrap();
        assert!(
            !outcome.counted && outcome.count == 3,
            "{name}: {outcome:?}"
        );
        answers.push((name, end));
    }
    assert_eq!(
        answers,
        [("redis", Some(ends_at)), ("memory", Some(ends_at))]
    );
}

// The same timer through the throttle: the refusal is right (the window's
// end is read again apart), but it costs Redis four commands where the
// documented refusal costs one script call, as it does with a plain timer.
#[tokio::test]
async fn a_refusal_under_a_php_serialized_timer_is_one_script_call() {
    use std::net::SocketAddr;

    use bytes::Bytes;
    use http_body_util::Full;
    use suprnova::server::handle_request_with_peer;
    use suprnova::{Limit, ThrottleRequestsMiddleware};

    let server = RedisServer::start();
    let mut conn = raw(&server).await;
    const P: &str = RedisStore::DEFAULT_PREFIX;
    let ends_at = SystemClock.unix_seconds() + 42;
    set(&mut conn, &format!("{P}k"), "3").await;
    set(&mut conn, &format!("{P}k:timer"), &format!("i:{ends_at};")).await;
    set(&mut conn, &format!("{P}plain"), "3").await;
    set(&mut conn, &format!("{P}plain:timer"), &ends_at.to_string()).await;
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(connect(&server.url())));
    let app = throttle_support::limiter_app(store, clock::system());
    app.scope(async {
        let request = |path: &str| {
            http::Request::get(path)
                .body(Full::<Bytes>::default())
                .unwrap()
        };
        let peer: SocketAddr = "203.0.113.5:40000".parse().unwrap();
        let throttled = |key: &str| {
            throttle_support::ok_routes(&["/t"]).middleware(
                ThrottleRequestsMiddleware::with_limits(vec![Limit::per_minute(3).by(key)]),
            )
        };
        let (plain, php) = (throttled("plain"), throttled("k"));
        // The first call loads the script.
        let warm = handle_request_with_peer(&plain, request("/t"), peer).await;
        assert_eq!(warm.status_code(), 429);
        let mut sent = Vec::new();
        for (path, router) in [("/plain", &plain), ("/php", &php)] {
            let commands = server
                .commands_sent_during(async {
                    let reply = handle_request_with_peer(router, request("/t"), peer).await;
                    assert_eq!(reply.status_code(), 429, "{path}");
                    let wait: i64 = reply.header_str("retry-after").unwrap().parse().unwrap();
                    assert!((41..=42).contains(&wait), "{path}: {wait}");
                })
                .await;
            sent.push((path, commands));
        }
        assert_eq!(
            sent,
            [
                ("/plain", vec!["evalsha".to_owned()]),
                ("/php", vec!["evalsha".to_owned()])
            ]
        );
    })
    .await;
}

// A full bucket whose timer holds digits past a 64-bit integer (written by
// something else than a rate limiter): the window is open, so the request
// is refused, as on the memory store, whatever the backend policy; a
// timer that cannot be read is no backend failure.
#[tokio::test]
async fn a_full_bucket_whose_timer_is_past_a_64_bit_integer_is_refused() {
    use std::net::SocketAddr;

    use bytes::Bytes;
    use http_body_util::Full;
    use suprnova::rate_limit::BackendErrorPolicy;
    use suprnova::server::handle_request_with_peer;
    use suprnova::{Limit, ThrottleRequestsMiddleware};

    let server = RedisServer::start();
    let mut answers = Vec::new();
    for (name, store) in both_stores_holding(&server, "k", "3").await {
        store
            .put("k:timer", "99999999999999999999", Duration::from_secs(60))
            .await
            .unwrap();
        let app = throttle_support::limiter_app(store, clock::system());
        app.scope(async {
            for policy in [BackendErrorPolicy::FailOpen, BackendErrorPolicy::FailClosed] {
                let router = throttle_support::ok_routes(&["/t"]).middleware(
                    ThrottleRequestsMiddleware::with_limits(vec![Limit::per_minute(3).by("k")])
                        .on_backend_error(policy),
                );
                let request = http::Request::get("/t")
                    .body(Full::<Bytes>::default())
                    .unwrap();
                let peer: SocketAddr = "203.0.113.5:40000".parse().unwrap();
                let reply = handle_request_with_peer(&router, request, peer).await;
                answers.push((name, policy, reply.status_code()));
            }
        })
        .await;
    }
    assert_eq!(
        answers,
        [
            ("redis", BackendErrorPolicy::FailOpen, 429),
            ("redis", BackendErrorPolicy::FailClosed, 429),
            ("memory", BackendErrorPolicy::FailOpen, 429),
            ("memory", BackendErrorPolicy::FailClosed, 429),
        ]
    );
}

// ---------------------------------------------------------------------
// A flushed script cache and a restart between calls.
// ---------------------------------------------------------------------

// After SCRIPT FLUSH and after a restart, each script is loaded again by the
// call that finds it missing, which runs once: the count goes on from where
// it was (flush) or from nothing (restart), never counted twice.
#[tokio::test]
async fn a_flush_or_a_restart_between_counts_counts_each_call_once() {
    let mut server = RedisServer::start();
    let store = Arc::new(RedisStore::new(connect(&server.url())).with_prefix("r:"));
    let limiter = CacheRateLimiter::new(store, clock::system());
    let driver = RedisRateLimiter::new(connect(&server.url())).with_prefix("d:");
    let cfg = SlidingWindowConfig::new(10, Duration::from_secs(60));

    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    assert!(driver.acquire("k", &cfg).await.unwrap().allowed);
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 2);
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    let counted = limiter.increment_if_below("k", 60, 1, 10).await.unwrap();
    assert_eq!((counted.counted, counted.count), (true, 3));
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    assert_eq!(driver.acquire("k", &cfg).await.unwrap().remaining, 8);
    assert_eq!(server.command("ZCARD d:k").trim(), ":2");

    server.restart();
    assert!(server.command("PING").starts_with("+PONG"));
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    assert_eq!(driver.acquire("k", &cfg).await.unwrap().remaining, 9);
    assert_eq!(server.command("GET r:k").trim(), "$1\r\n1");
    assert_eq!(server.command("ZCARD d:k").trim(), ":1");
    let ttl: i64 = server
        .command("TTL r:k:timer")
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap();
    assert!((59..=60).contains(&ttl), "{ttl}");
}
