//! A Redis that is alive but does not answer: every client paused with
//! `CLIENT PAUSE <ms> ALL`, so connections open and commands are sent, but
//! nothing comes back until the pause ends (as with a stalled or overloaded
//! server).
//!
//! Through both middlewares, `RateLimitMiddleware` on `RedisRateLimiter` and
//! `ThrottleRequestsMiddleware` on the Redis cache store, a request sent
//! during the pause waits at least the shorter of the connection's two
//! timeouts (it did wait on Redis) and at most its deadline, connect timeout
//! plus response timeout (`RedisConnection::deadline`), plus a little
//! scheduling slack, measured from the send; and it then gets the
//! `BackendErrorPolicy`: `FailClosed` answers 503 `503 Service Unavailable`
//! with `Retry-After: 1`, `FailOpen` runs the handler. The first request after
//! the pause ends is decided normally again, with its `X-RateLimit-*` headers.
//!
//! The deadlines: the driver's comes from `RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS`
//! and `RATE_LIMIT_REDIS_TIMEOUT_MS` (250 ms each here, 500 ms in all); the
//! throttle's cache store, read from the environment, takes the same two
//! variables (300 ms each here, 600 ms), and one test checks both middlewares on the
//! defaults an unconfigured deployment gets (1 s + 1 s = 2 s). The warm
//! cases meet the pause on a connection already open; one case meets it on a
//! connection opened during the pause. Requests go through
//! `handle_request_with_peer` and, for one case of each middleware, through
//! the real hyper server on a loopback port. Each test runs its own
//! `redis-server`.
#![cfg(feature = "redis")]

mod support;
mod throttle_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use support::http::TestServer;
use support::redis::RedisServer;
use support::unique_prefix;
use suprnova::bootstrap::variables::{
    RATE_LIMIT_DRIVER, RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS, RATE_LIMIT_REDIS_PREFIX,
    RATE_LIMIT_REDIS_TIMEOUT_MS, RATE_LIMIT_REDIS_URL,
};
use suprnova::bootstrap::{RedisPlan, bootstrap};
use suprnova::cache::CacheConfig;
use suprnova::clock;
use suprnova::config::Env;
use suprnova::container::App;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig,
};
use suprnova::redis_client::{RedisConfig, RedisConnection};
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Router, ThrottleRequestsMiddleware};
use throttle_support::{limiter_app, ok_routes};

const PEER: &str = "203.0.113.5:40000";

/// What a request may take beyond the deadline: scheduling, the handler
/// and the response, on a loopback. Small next to every deadline here.
const SLACK: Duration = Duration::from_millis(400);

/// The limit of every route, per minute: the requests of a test never reach
/// it.
const LIMIT: u32 = 5;

/// How long a pause lasts: long enough for every request a test sends
/// during it to give up before it ends.
const PAUSE_MS: u64 = 1_500;

/// Pauses every client of `server` for `ms` milliseconds and returns an
/// instant no later than the end of the pause.
fn pause_all_clients(server: &RedisServer, ms: u64) -> Instant {
    let ends = Instant::now() + Duration::from_millis(ms);
    let reply = server.command(&format!("CLIENT PAUSE {ms} ALL"));
    assert!(reply.starts_with("+OK"), "CLIENT PAUSE answered {reply:?}");
    ends
}

/// Sleeps until a little after `ends`, when Redis answers again.
async fn sleep_past(ends: Instant) {
    tokio::time::sleep_until((ends + Duration::from_millis(100)).into()).await;
}

/// Sends `GET path` from [`PEER`] through `router`, and returns the answer
/// and how long it took from the send.
async fn timed_get(router: &Router, path: &str) -> (HttpResponse, Duration) {
    let request = http::Request::get(path)
        .body(Full::<Bytes>::default())
        .unwrap();
    let sent = Instant::now();
    let response =
        handle_request_with_peer(router, request, PEER.parse::<SocketAddr>().unwrap()).await;
    (response, sent.elapsed())
}

/// Asserts that a request to a paused Redis configured with `redis` took
/// at least the shorter of its timeouts (it waited on Redis) and at most its
/// deadline plus [`SLACK`], and came back while Redis was still paused (it
/// met a hung Redis, not a recovered one).
fn assert_bounded(what: &str, took: Duration, redis: &RedisConfig, pause_ends: Instant) {
    let deadline = redis.connect_timeout + redis.response_timeout;
    let shortest = redis.connect_timeout.min(redis.response_timeout);
    eprintln!("{what}: {took:?} (deadline {deadline:?})");
    assert!(
        took >= shortest,
        "{what} took {took:?}, less than any timeout ({shortest:?}): it did not wait on Redis"
    );
    assert!(
        took <= deadline + SLACK,
        "{what} took {took:?}, past the deadline {deadline:?} + {SLACK:?}"
    );
    assert!(
        Instant::now() < pause_ends,
        "{what} came back after the pause ended: it did not meet a hung Redis"
    );
}

fn assert_fail_closed(response: &HttpResponse) {
    assert_eq!(
        (response.status_code(), response.body_text()),
        (503, "503 Service Unavailable".to_owned())
    );
    assert_eq!(response.header_str("retry-after"), Some("1"));
    assert_eq!(response.header_str("x-ratelimit-limit"), None);
}

fn assert_fail_open(response: &HttpResponse) {
    assert_eq!(
        (response.status_code(), response.body_text()),
        (200, "ok".to_owned())
    );
    assert_eq!(response.header_str("x-ratelimit-limit"), None);
}

/// The answer `policy` gives a request whose limiter could not decide.
fn assert_policy(policy: BackendErrorPolicy, response: &HttpResponse) {
    match policy {
        BackendErrorPolicy::FailClosed => assert_fail_closed(response),
        _ => assert_fail_open(response),
    }
}

/// `GET path` on `router`, decided while Redis answers; twice while every
/// client of `server` is paused, each answered by `policy` within the
/// deadline of `redis` (the second meets the connection the first gave up
/// on); and decided again once the pause has ended. `what` names the case
/// in the timings printed and in a failure.
async fn meets_a_hung_redis(
    server: &RedisServer,
    router: &Router,
    path: &str,
    policy: BackendErrorPolicy,
    redis: &RedisConfig,
    what: &str,
) {
    // The first request on a fresh key: exactly one place taken.
    let first = timed_get(router, path).await.0;
    assert_decided(&first);
    let left = (LIMIT - 1).to_string();
    assert_eq!(
        first.header_str("x-ratelimit-remaining"),
        Some(left.as_str())
    );
    let pause_ends = pause_all_clients(server, PAUSE_MS);
    for attempt in 1..=2 {
        let (response, took) = timed_get(router, path).await;
        assert_policy(policy, &response);
        assert_bounded(
            &format!("{what}, request {attempt}"),
            took,
            redis,
            pause_ends,
        );
    }
    sleep_past(pause_ends).await;
    assert_decided(&timed_get(router, path).await.0);
}

/// Asserts that the limiter decided `response`: 200, with the limit and
/// what is left of it. Not how much is left: a command Redis queued during
/// the pause runs when it ends, so the hits of requests that gave up may
/// still be counted.
fn assert_decided(response: &HttpResponse) {
    assert_decided_headers(
        response.status_code(),
        response.header_str("x-ratelimit-limit"),
        response.header_str("x-ratelimit-remaining"),
    );
}

fn assert_decided_headers(status: u16, limit: Option<&str>, remaining: Option<&str>) {
    assert_eq!(status, 200);
    assert_eq!(limit, Some(LIMIT.to_string().as_str()));
    let remaining: u32 = remaining.expect("X-RateLimit-Remaining").parse().unwrap();
    assert!(remaining < LIMIT, "X-RateLimit-Remaining {remaining}");
}

// ---- RateLimitMiddleware on RedisRateLimiter --------------------------------

/// The driver's Redis settings as an operator sets them: 250 ms to connect,
/// 250 ms to answer.
fn driver_env(server: &RedisServer) -> Vec<(&'static str, String)> {
    vec![
        (RATE_LIMIT_REDIS_URL, server.url()),
        (RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS, "250".to_owned()),
        (RATE_LIMIT_REDIS_TIMEOUT_MS, "250".to_owned()),
        (RATE_LIMIT_REDIS_PREFIX, unique_prefix("hung-rl")),
    ]
}

/// A Redis driver as the settings of `pairs` build it, and its settings.
fn driver_from(pairs: Vec<(&'static str, String)>) -> (Arc<dyn RateLimiterDriver>, RedisConfig) {
    let plan = RedisPlan::from_env(&Env::from_pairs(pairs)).unwrap();
    let conn = RedisConnection::new(plan.config.clone()).unwrap();
    assert_eq!(
        conn.deadline(),
        plan.config.connect_timeout + plan.config.response_timeout
    );
    let mut driver = RedisRateLimiter::new(conn);
    if let Some(prefix) = plan.prefix {
        driver = driver.with_prefix(prefix);
    }
    (Arc::new(driver), plan.config)
}

/// The driver of [`driver_env`]: a 500 ms deadline.
fn configured_driver(server: &RedisServer) -> (Arc<dyn RateLimiterDriver>, RedisConfig) {
    let (driver, redis) = driver_from(driver_env(server));
    assert_eq!(
        redis.connect_timeout + redis.response_timeout,
        Duration::from_millis(500)
    );
    (driver, redis)
}

/// `GET /r` answering `ok`, limited to [`LIMIT`] a minute by `driver`.
fn rate_limited(driver: Arc<dyn RateLimiterDriver>, policy: BackendErrorPolicy) -> Router {
    ok_routes(&["/r"]).middleware(
        RateLimitMiddleware::new(
            driver,
            SlidingWindowConfig::new(LIMIT, Duration::from_secs(60)),
            |req| format!("route:{}", req.path()),
        )
        .on_backend_error(policy),
    )
}

/// [`meets_a_hung_redis`] for `RateLimitMiddleware` on a Redis of its own.
async fn rate_limit_meets_a_hung_redis(policy: BackendErrorPolicy, what: &str) {
    let server = RedisServer::start();
    let (driver, redis) = configured_driver(&server);
    let router = rate_limited(driver, policy);
    meets_a_hung_redis(&server, &router, "/r", policy, &redis, what).await;
}

#[tokio::test]
async fn rate_limit_fail_closed_answers_503_within_the_deadline_while_redis_hangs() {
    rate_limit_meets_a_hung_redis(BackendErrorPolicy::FailClosed, "rate limit, FailClosed").await;
}

#[tokio::test]
async fn rate_limit_fail_open_runs_the_handler_within_the_deadline_while_redis_hangs() {
    rate_limit_meets_a_hung_redis(BackendErrorPolicy::FailOpen, "rate limit, FailOpen").await;
}

// Booted from the environment as a deployment is: the installed driver
// behind `ip_based`, served by the hyper server over a real connection.
#[tokio::test]
async fn over_http_a_booted_redis_driver_answers_503_within_the_deadline_while_redis_hangs() {
    let server = RedisServer::start();
    let mut pairs = driver_env(&server);
    let redis = RedisPlan::from_env(&Env::from_pairs(pairs.clone()))
        .unwrap()
        .config;
    pairs.push(("APP_ENV", "production".to_owned()));
    pairs.push((RATE_LIMIT_DRIVER, "redis".to_owned()));
    let app = App::new();
    app.scope(async {
        let summary = bootstrap(&Env::from_pairs(pairs)).await.unwrap();
        assert_eq!(summary.redis_answered, Some(true));
        let router = ok_routes(&["/r"]).middleware(
            RateLimitMiddleware::ip_based(LIMIT, Duration::from_secs(60))
                .on_backend_error(BackendErrorPolicy::FailClosed),
        );
        let http = TestServer::start(router).await;
        let first = http.get("/r").await;
        assert_eq!(
            (first.status, first.header("x-ratelimit-remaining")),
            (200, Some("4"))
        );

        let pause_ends = pause_all_clients(&server, PAUSE_MS);
        let sent = Instant::now();
        let refused = http.get("/r").await;
        let took = sent.elapsed();
        assert_eq!(
            (refused.status, refused.body.as_str()),
            (503, "503 Service Unavailable")
        );
        assert_eq!(refused.header("retry-after"), Some("1"));
        assert_eq!(refused.header("x-ratelimit-limit"), None);
        assert_bounded(
            "over HTTP, rate limit, FailClosed",
            took,
            &redis,
            pause_ends,
        );

        sleep_past(pause_ends).await;
        let back = http.get("/r").await;
        assert_decided_headers(
            back.status,
            back.header("x-ratelimit-limit"),
            back.header("x-ratelimit-remaining"),
        );
        http.stop().await;
    })
    .await;
}

// ---- ThrottleRequestsMiddleware on the Redis cache store --------------------

/// A container whose throttle counts in Redis through a cache store read
/// from the environment, whose calls give up after 300 ms to connect plus
/// 300 ms to answer (the rate limiter's two timeouts, which the cache store
/// reads too), and those settings.
fn throttle_app(server: &RedisServer) -> (App, RedisConfig) {
    let cache = CacheConfig::from_env(&Env::from_pairs([
        ("CACHE_STORE", "redis".to_owned()),
        ("REDIS_URL", server.url()),
        ("CACHE_PREFIX", unique_prefix("hung-throttle")),
        (RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS, "300".to_owned()),
        (RATE_LIMIT_REDIS_TIMEOUT_MS, "300".to_owned()),
    ]))
    .unwrap();
    let redis = cache.redis.clone().unwrap();
    assert_eq!(
        RedisConnection::new(redis.clone()).unwrap().deadline(),
        Duration::from_millis(600)
    );
    let store = cache.build_store().unwrap();
    (limiter_app(store, clock::system()), redis)
}

/// `GET /t` answering `ok`, throttled to [`LIMIT`] a minute per client and
/// path.
fn throttled(policy: BackendErrorPolicy) -> Router {
    ok_routes(&["/t"]).middleware(
        ThrottleRequestsMiddleware::with(i64::from(LIMIT), 1, "").on_backend_error(policy),
    )
}

/// [`meets_a_hung_redis`] for the throttle on a Redis of its own.
async fn throttle_meets_a_hung_redis(policy: BackendErrorPolicy, what: &str) {
    let server = RedisServer::start();
    let (app, redis) = throttle_app(&server);
    let router = throttled(policy);
    app.scope(meets_a_hung_redis(
        &server, &router, "/t", policy, &redis, what,
    ))
    .await;
}

#[tokio::test]
async fn throttle_fail_closed_answers_503_within_the_deadline_while_redis_hangs() {
    throttle_meets_a_hung_redis(BackendErrorPolicy::FailClosed, "throttle, FailClosed").await;
}

#[tokio::test]
async fn throttle_fail_open_runs_the_handler_within_the_deadline_while_redis_hangs() {
    throttle_meets_a_hung_redis(BackendErrorPolicy::FailOpen, "throttle, FailOpen").await;
}

#[tokio::test]
async fn over_http_the_throttle_fails_open_within_the_deadline_while_redis_hangs() {
    let server = RedisServer::start();
    let (app, redis) = throttle_app(&server);
    app.scope(async {
        let http = TestServer::start(throttled(BackendErrorPolicy::FailOpen)).await;
        let first = http.get("/t").await;
        assert_eq!(
            (first.status, first.header("x-ratelimit-remaining")),
            (200, Some("4"))
        );

        let pause_ends = pause_all_clients(&server, PAUSE_MS);
        let sent = Instant::now();
        let through = http.get("/t").await;
        let took = sent.elapsed();
        assert_eq!((through.status, through.body.as_str()), (200, "ok"));
        assert_eq!(through.header("x-ratelimit-limit"), None);
        assert_bounded("over HTTP, throttle, FailOpen", took, &redis, pause_ends);

        sleep_past(pause_ends).await;
        let back = http.get("/t").await;
        assert_decided_headers(
            back.status,
            back.header("x-ratelimit-limit"),
            back.header("x-ratelimit-remaining"),
        );
        http.stop().await;
    })
    .await;
}

// ---- Both middlewares -------------------------------------------------------

// No request before the pause: each middleware's connection is first opened
// while Redis hangs, so its setup waits on Redis too. Each request still
// gives up within the deadline, and the first one after the pause connects
// and is decided.
#[tokio::test]
async fn a_connection_first_opened_while_redis_hangs_gives_up_within_the_deadline_in_both_middlewares()
 {
    let server = RedisServer::start();
    let (driver, driver_redis) = configured_driver(&server);
    let (app, store_redis) = throttle_app(&server);
    app.scope(async {
        let limited = rate_limited(driver, BackendErrorPolicy::FailClosed);
        let throttled = throttled(BackendErrorPolicy::FailClosed);

        // Two rounds of both middlewares, each request up to its deadline
        // (500 and 600 ms), inside the pause.
        let pause_ends = pause_all_clients(&server, 2_500);
        for attempt in 1..=2 {
            let (response, took) = timed_get(&limited, "/r").await;
            assert_fail_closed(&response);
            let what = format!("cold, rate limit, request {attempt}");
            assert_bounded(&what, took, &driver_redis, pause_ends);
            let (response, took) = timed_get(&throttled, "/t").await;
            assert_fail_closed(&response);
            let what = format!("cold, throttle, request {attempt}");
            assert_bounded(&what, took, &store_redis, pause_ends);
        }

        sleep_past(pause_ends).await;
        assert_decided(&timed_get(&limited, "/r").await.0);
        assert_decided(&timed_get(&throttled, "/t").await.0);
    })
    .await;
}

// With no timeout set, the driver (no RATE_LIMIT_REDIS_*TIMEOUT_MS) and the
// cache store (which reads no timeout at all) wait 1 s to connect and 1 s
// for an answer: a hung Redis holds a request at most 2 s.
#[tokio::test]
async fn with_no_timeouts_set_both_middlewares_give_up_on_a_hung_redis_within_the_default_2_s() {
    let server = RedisServer::start();
    let (driver, driver_redis) = driver_from(vec![(RATE_LIMIT_REDIS_URL, server.url())]);
    let cache = CacheConfig::from_env(&Env::from_pairs([
        ("CACHE_STORE", "redis".to_owned()),
        ("REDIS_URL", server.url()),
        ("CACHE_PREFIX", unique_prefix("hung-default")),
    ]))
    .unwrap();
    let store_redis = cache.redis.clone().unwrap();
    for redis in [&driver_redis, &store_redis] {
        assert_eq!(
            (redis.connect_timeout, redis.response_timeout),
            (
                RedisConfig::DEFAULT_CONNECT_TIMEOUT,
                RedisConfig::DEFAULT_RESPONSE_TIMEOUT
            )
        );
        assert_eq!(
            redis.connect_timeout + redis.response_timeout,
            Duration::from_secs(2)
        );
    }
    let app = App::new();
    cache.install(&app).unwrap();

    app.scope(async {
        let limited = rate_limited(driver, BackendErrorPolicy::FailClosed);
        let throttled = throttled(BackendErrorPolicy::FailClosed);
        assert_decided(&timed_get(&limited, "/r").await.0);
        assert_decided(&timed_get(&throttled, "/t").await.0);

        // Both at once, so that both meet the pause, which outlasts the
        // deadline.
        let pause_ends = pause_all_clients(&server, 3_000);
        let ((limited_reply, limited_took), (throttled_reply, throttled_took)) =
            tokio::join!(timed_get(&limited, "/r"), timed_get(&throttled, "/t"));
        assert_fail_closed(&limited_reply);
        assert_fail_closed(&throttled_reply);
        let what = "defaults, rate limit, FailClosed";
        assert_bounded(what, limited_took, &driver_redis, pause_ends);
        let what = "defaults, throttle, FailClosed";
        assert_bounded(what, throttled_took, &store_redis, pause_ends);

        sleep_past(pause_ends).await;
        assert_decided(&timed_get(&limited, "/r").await.0);
        assert_decided(&timed_get(&throttled, "/t").await.0);
    })
    .await;
}
