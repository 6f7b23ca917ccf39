//! The Redis sliding-window driver on one `redis-server`: many keys decided
//! at once on one connection, a decision given up during a write pause,
//! a restart over the Unix socket, a flushed server, and how the URL and
//! the connection report what went wrong.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use support::redis::RedisServer;
use suprnova::container::App;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimitError, RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::{RedisConfig, RedisConnection};

fn per_minute(max_requests: u32) -> SlidingWindowConfig {
    SlidingWindowConfig::new(max_requests, Duration::from_secs(60))
}

fn connection(url: &str, connect: Duration, response: Duration) -> RedisConnection {
    let config = RedisConfig::from_url(url)
        .unwrap()
        .with_timeouts(connect, response);
    RedisConnection::new(config).unwrap()
}

fn limiter(url: &str, millis: u64, name: &str) -> RedisRateLimiter {
    let wait = Duration::from_millis(millis);
    RedisRateLimiter::new(connection(url, wait, wait)).with_prefix(support::unique_prefix(name))
}

/// The number `ZCARD key` answers on `server`.
fn zcard(server: &RedisServer, key: &str) -> u64 {
    let reply = server.command(&format!("ZCARD {key}"));
    reply.trim().trim_start_matches(':').parse().unwrap()
}

// ---- many keys at once -------------------------------------------------------

// A hundred keys decided together on one multiplexed connection, thirty
// calls each, all in flight at once: every key admits exactly its limit,
// with the remainders 0 to 6 once each, and no call fails.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_keys_at_once_each_admit_exactly_their_limit() {
    let server = RedisServer::start();
    let limiter = Arc::new(limiter(&server.url(), 5_000, "many"));
    let cfg = per_minute(7);
    let mut calls = Vec::new();
    for key in 0..100_usize {
        for _ in 0..30 {
            let limiter = Arc::clone(&limiter);
            calls.push(tokio::spawn(async move {
                let decision = limiter.acquire(&format!("k{key}"), &cfg).await.unwrap();
                (key, decision)
            }));
        }
    }
    let mut remainders = vec![Vec::new(); 100];
    for call in calls {
        let (key, decision) = call.await.unwrap();
        assert_eq!(decision.limit, 7);
        if decision.allowed {
            remainders[key].push(decision.remaining);
        } else {
            assert_eq!(decision.remaining, 0);
            assert!(
                decision
                    .retry_after
                    .is_some_and(|wait| wait <= Duration::from_secs(60))
            );
        }
    }
    for (key, mut left) in remainders.into_iter().enumerate() {
        left.sort_unstable();
        assert_eq!(left, (0..7).collect::<Vec<u64>>(), "k{key}");
        assert_eq!(zcard(&server, &format!("{}k{key}", limiter.prefix())), 7);
    }
}

// ---- pauses, restarts and flushes --------------------------------------------

// A decision that gave up while Redis paused its writers (`CLIENT PAUSE
// WRITE`, as a failover does) fails within its timeout, and takes no place
// once the pause ends: its connection was dropped with it, so the script
// never ran. The bucket holds the two hits before the pause and the one
// after, and the next call is refused.
#[tokio::test]
async fn a_decision_given_up_during_a_write_pause_takes_no_place_afterwards() {
    let server = RedisServer::start();
    let limiter = limiter(&server.url(), 300, "wpause");
    let cfg = per_minute(3);
    for left in [2, 1] {
        assert_eq!(limiter.acquire("k", &cfg).await.unwrap().remaining, left);
    }
    let pause_ends = Instant::now() + Duration::from_millis(1_500);
    assert!(server.command("CLIENT PAUSE 1500 WRITE").starts_with("+OK"));
    let started = Instant::now();
    let error = limiter.acquire("k", &cfg).await.unwrap_err();
    assert!(matches!(error, RateLimitError::Timeout(_)), "{error:?}");
    assert!(
        started.elapsed() < Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    tokio::time::sleep_until((pause_ends + Duration::from_millis(200)).into()).await;
    let after = limiter.acquire("k", &cfg).await.unwrap();
    assert!(after.allowed);
    assert_eq!(after.remaining, 0);
    assert!(!limiter.acquire("k", &cfg).await.unwrap().allowed);
    assert_eq!(zcard(&server, &format!("{}k", limiter.prefix())), 3);
}

// Over the Unix socket, the first call after Redis restarts (a new socket
// file, an empty server without the script) is decided, on an empty bucket.
#[tokio::test]
async fn over_the_unix_socket_the_first_call_after_a_restart_is_decided() {
    let mut server = RedisServer::start();
    let limiter = limiter(&server.socket_url(), 500, "sockrestart");
    let cfg = per_minute(3);
    assert_eq!(limiter.acquire("k", &cfg).await.unwrap().remaining, 2);
    server.restart();
    let first = limiter.acquire("k", &cfg).await.unwrap();
    assert!(first.allowed);
    assert_eq!(first.remaining, 2);
}

// `FLUSHALL` and `SCRIPT FLUSH` together between two calls: the next call
// loads the script again and counts on an empty bucket.
#[tokio::test]
async fn after_flushall_and_script_flush_a_full_key_starts_again() {
    let server = RedisServer::start();
    let limiter = limiter(&server.url(), 500, "flushall");
    let cfg = per_minute(2);
    for _ in 0..2 {
        assert!(limiter.acquire("k", &cfg).await.unwrap().allowed);
    }
    assert!(!limiter.acquire("k", &cfg).await.unwrap().allowed);
    assert!(server.command("FLUSHALL").starts_with("+OK"));
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    assert_eq!(limiter.retry_after("k", &cfg).await.unwrap(), None);
    let decision = limiter.acquire("k", &cfg).await.unwrap();
    assert!(decision.allowed);
    assert_eq!(decision.remaining, 1);
}

// ---- what a failure says -----------------------------------------------------

// A call that gives up when its connection's response timeout (200 ms)
// passes, well before the deadline of both timeouts (1.2 s), reports the
// 200 ms it waited, not the 1.2 s deadline.
#[tokio::test]
async fn a_response_timeout_reports_the_time_the_call_waited() {
    let server = RedisServer::start();
    let conn = connection(
        &server.url(),
        Duration::from_millis(1_000),
        Duration::from_millis(200),
    );
    let limiter = RedisRateLimiter::new(conn).with_prefix(support::unique_prefix("waited"));
    assert!(limiter.acquire("k", &per_minute(5)).await.unwrap().allowed);
    assert!(server.command("CLIENT PAUSE 1500 ALL").starts_with("+OK"));
    let started = Instant::now();
    let error = limiter.acquire("k", &per_minute(5)).await.unwrap_err();
    let waited = started.elapsed();
    assert!(waited < Duration::from_millis(900), "{waited:?}");
    assert_eq!(
        error.to_string(),
        "rate limit backend did not answer within 200ms"
    );
}

// A port past 65535 is refused with the crate's own reason, the one port 0
// gets, and not with the client library's "did not parse".
#[test]
fn a_port_past_65535_is_refused_with_the_port_range() {
    for url in ["redis://cache.internal:0", "redis://cache.internal:65536"] {
        let refused = RedisConfig::from_url(url).unwrap_err();
        assert_eq!(
            refused.reason, "the port is a number from 1 to 65535",
            "{url}"
        );
    }
}

// A database that is not a number is refused with the crate's own reason,
// the one `/-1` gets, and not with the client library's words.
#[test]
fn a_database_that_is_not_a_number_is_refused_with_the_database_range() {
    let reason = "the database is a number from 0 to 2147483647 (/N after the host, or ?db=N after a socket's path)";
    for url in [
        "redis://cache.internal:6379/-1",
        "redis://cache.internal:6379/x",
        "redis://cache.internal:6379/1/2",
        "unix:///run/redis/redis.sock?db=",
    ] {
        let refused = RedisConfig::from_url(url).unwrap_err();
        assert_eq!(refused.reason, reason, "{url}");
    }
}

// A socket path longer than a Unix socket address holds (108 bytes on
// Linux, with the NUL) can never be connected to: every call would fail
// with "path must be shorter than SUN_LEN". Boot refuses it, naming the
// variable, as it refuses a relative socket path, and does not boot as if
// Redis were only down for now.
#[tokio::test]
async fn a_socket_path_too_long_for_a_socket_address_refuses_boot() {
    let url = format!("unix:///tmp/{}/redis.sock", "d".repeat(200));
    let env = support::boot::env(&[
        ("APP_ENV", "staging"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", &url),
        ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", "200"),
        ("RATE_LIMIT_REDIS_TIMEOUT_MS", "200"),
    ]);
    let app = App::new();
    let booted = app
        .scope(suprnova::bootstrap::bootstrap(&env))
        .await
        .map(|summary| summary.to_string())
        .map_err(|error| error.to_string());
    assert!(
        booted
            .as_ref()
            .is_err_and(|error| error.contains("RATE_LIMIT_REDIS_URL")),
        "{booted:?}"
    );
}
