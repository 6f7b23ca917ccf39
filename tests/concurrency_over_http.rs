//! The seed scenario over real HTTP: 20 clients, each on its own keep-alive
//! HTTP/1.1 connection to the crate's server on a loopback port, send 50
//! requests one after the other to one bucket that admits 100 a minute.
//! Exactly 100 are admitted, each with its own `X-RateLimit-Remaining`
//! (0 to 99, once each), and each of the 900 refusals says `X-RateLimit-Limit:
//! 100`, `X-RateLimit-Remaining: 0` and a `Retry-After` inside the window.
//!
//! Covered: `RateLimitMiddleware` on the memory driver (frozen clock) and on
//! Redis; `ThrottleRequestsMiddleware::with(100, 1, "")` on the memory store
//! (frozen clock) and on Redis; and `RateLimitMiddleware` on memory in
//! process through `handle_request_with_peer` (the throttle's in-process run
//! is `twenty_concurrent_clients_admit_exactly_the_limit` in
//! tests/rate_limiter_facade.rs).

mod support;
mod throttle_support;

use std::net::SocketAddr;
use std::ops::RangeInclusive;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::HeaderMap;
use http_body_util::Full;
use support::clock_at;
use support::http::{Reply, TestServer};
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig};
use suprnova::server::handle_request_with_peer;
use suprnova::{RateLimiter, Router, ThrottleRequestsMiddleware};
use throttle_support::{memory_app, ok_routes};
use tokio::sync::Barrier;

const CLIENTS: usize = 20;
const ATTEMPTS: usize = 50;
const LIMIT: usize = 100;
const PATH: &str = "/hot";
/// The throttle's key for `with(100, 1, "")`: per address and per path, and
/// every connection comes from 127.0.0.1 (tests/throttle_middleware.rs).
const THROTTLE_KEY: &str = "ip:127.0.0.1:path:/hot";
/// On a frozen clock every hit is at the same instant: the wait is the window.
const FROZEN: RangeInclusive<u64> = 60..=60;

/// `GET /hot` behind a `RateLimitMiddleware` of 100 a minute on `driver`,
/// every request in one bucket.
fn sliding_window_route(driver: Arc<dyn RateLimiterDriver>) -> Router {
    ok_routes(&[PATH]).middleware(RateLimitMiddleware::new(
        driver,
        SlidingWindowConfig {
            max_requests: 100,
            window: Duration::from_secs(60),
        },
        |_req| "one-key".into(),
    ))
}

/// `GET /hot` behind `ThrottleRequestsMiddleware::with(100, 1, "")`.
fn throttle_route() -> Router {
    ok_routes(&[PATH]).middleware(ThrottleRequestsMiddleware::with(100, 1, ""))
}

/// Every reply of `CLIENTS` concurrent clients to `server`, `ATTEMPTS`
/// each, one after the other on a keep-alive connection of its own.
async fn storm(server: &TestServer) -> Vec<Reply> {
    support::http::storm(server, CLIENTS, ATTEMPTS, PATH).await
}

/// Asserts the outcome of the scenario on `(status, headers)` of every
/// response: exactly `LIMIT` admitted, each with a distinct remaining count,
/// and every other one refused with the pair and a `Retry-After` in `retry`.
fn assert_exactly_100_admitted(responses: &[(u16, &HeaderMap)], retry: RangeInclusive<u64>) {
    let header = |headers: &HeaderMap, name: &str| -> String {
        let value = headers.get(name).unwrap_or_else(|| panic!("no {name}"));
        value.to_str().unwrap().to_owned()
    };
    let admitted: Vec<&HeaderMap> = responses
        .iter()
        .filter(|(status, _)| *status == 200)
        .map(|(_, headers)| *headers)
        .collect();
    let refused: Vec<&HeaderMap> = responses
        .iter()
        .filter(|(status, _)| *status == 429)
        .map(|(_, headers)| *headers)
        .collect();
    assert_eq!(responses.len(), CLIENTS * ATTEMPTS);
    assert_eq!(
        (admitted.len(), refused.len()),
        (LIMIT, CLIENTS * ATTEMPTS - LIMIT),
        "(200s, 429s)"
    );

    let mut remaining: Vec<usize> = admitted
        .iter()
        .map(|h| header(h, "x-ratelimit-remaining").parse().unwrap())
        .collect();
    remaining.sort_unstable();
    assert_eq!(remaining, (0..LIMIT).collect::<Vec<_>>());
    assert!(
        admitted
            .iter()
            .all(|h| header(h, "x-ratelimit-limit") == "100")
    );

    for h in refused {
        assert_eq!(header(h, "x-ratelimit-limit"), "100");
        assert_eq!(header(h, "x-ratelimit-remaining"), "0");
        let retry_after: u64 = header(h, "retry-after").parse().unwrap();
        assert!(retry.contains(&retry_after), "Retry-After {retry_after}");
    }
}

fn assert_replies(replies: &[Reply], retry: RangeInclusive<u64>) {
    let seen: Vec<(u16, &HeaderMap)> = replies.iter().map(|r| (r.status, &r.headers)).collect();
    assert_exactly_100_admitted(&seen, retry);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sliding_window_on_memory_admits_exactly_100_over_http() {
    let clock = clock_at(12, 0, 0);
    let driver = Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let server = TestServer::start(sliding_window_route(driver)).await;
    assert_replies(&storm(&server).await, FROZEN);
    server.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sliding_window_in_process_admits_exactly_100() {
    let clock = clock_at(12, 0, 0);
    let driver = Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let router = Arc::new(sliding_window_route(driver));
    let start = Arc::new(Barrier::new(CLIENTS));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|c| {
            let (router, start) = (router.clone(), start.clone());
            let peer = SocketAddr::from(([127, 0, 0, 1], 40_000 + c as u16));
            tokio::spawn(async move {
                start.wait().await;
                let mut responses = Vec::with_capacity(ATTEMPTS);
                for _ in 0..ATTEMPTS {
                    let request = http::Request::get(PATH)
                        .body(Full::<Bytes>::default())
                        .unwrap();
                    responses.push(handle_request_with_peer(&router, request, peer).await);
                }
                responses
            })
        })
        .collect();
    let mut responses = Vec::with_capacity(CLIENTS * ATTEMPTS);
    for task in tasks {
        responses.extend(task.await.unwrap());
    }
    let seen: Vec<(u16, &HeaderMap)> = responses
        .iter()
        .map(|r| (r.status_code(), r.headers()))
        .collect();
    assert_exactly_100_admitted(&seen, FROZEN);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn throttle_on_memory_admits_exactly_100_over_http() {
    let clock = clock_at(12, 0, 0);
    let app = memory_app(&clock);
    app.scope(async {
        let server = TestServer::start(throttle_route()).await;
        assert_replies(&storm(&server).await, FROZEN);
        // One bucket for all twenty connections, and no refusal counted.
        assert_eq!(RateLimiter::attempts(THROTTLE_KEY).await.unwrap(), 100);
        server.stop().await;
    })
    .await;
}

#[cfg(feature = "redis")]
mod on_redis {
    use super::*;

    use support::redis::RedisServer;
    use support::unique_prefix;
    use suprnova::cache::RedisStore;
    use suprnova::clock;
    use suprnova::rate_limit::redis::RedisRateLimiter;
    use suprnova::redis_client::{RedisConfig, RedisConnection};
    use throttle_support::limiter_app;

    /// On the system clock: the window less the seconds the storm has
    /// taken (a second or two; ten allowed for a loaded machine).
    const REAL: RangeInclusive<u64> = 50..=60;

    fn connect(server: &RedisServer) -> RedisConnection {
        RedisConnection::new(RedisConfig::from_url(&server.url()).unwrap()).unwrap()
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn sliding_window_on_redis_admits_exactly_100_over_http() {
        let redis = RedisServer::start();
        let driver =
            Arc::new(RedisRateLimiter::new(connect(&redis)).with_prefix(unique_prefix("http")));
        let server = TestServer::start(sliding_window_route(driver)).await;
        assert_replies(&storm(&server).await, REAL);
        server.stop().await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn throttle_on_redis_admits_exactly_100_over_http() {
        let redis = RedisServer::start();
        let store = RedisStore::new(connect(&redis)).with_prefix(unique_prefix("throttle"));
        let app = limiter_app(Arc::new(store), clock::system());
        app.scope(async {
            let server = TestServer::start(throttle_route()).await;
            assert_replies(&storm(&server).await, REAL);
            assert_eq!(RateLimiter::attempts(THROTTLE_KEY).await.unwrap(), 100);
            server.stop().await;
        })
        .await;
    }
}
