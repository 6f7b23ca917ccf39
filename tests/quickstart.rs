//! The quickstart example as a newcomer runs it: the built binary, started
//! with `PORT` on a free port, answering over real HTTP; refusing a bad
//! configuration before it listens; stopping on ctrl-c; and the same routes
//! on a redis-server started here.
//!
//! The binary is built by the test support, with every example, in one
//! `cargo build` (a no-op when `cargo test` has built the examples
//! already), with the features this test was built with.

mod support;

use std::net::IpAddr;
use std::time::Duration;

use support::examples::{self, Exited, Running};
use support::http::Reply;

/// Longest wait for the binary to exit when it must refuse.
const START_LIMIT: Duration = Duration::from_secs(30);

/// The quickstart, started on a free port with `vars`.
fn start(vars: &[(&str, &str)]) -> Running {
    Running::start("quickstart", vars)
}

/// Starts the quickstart with `vars` on a free port and waits for it to
/// exit, failing the test if it is still running after [`START_LIMIT`].
fn run_expecting_exit(vars: &[(&str, &str)]) -> Exited {
    examples::run_to_exit("quickstart", vars, START_LIMIT)
}

/// The refusal every production start on the in-memory limiter ends with:
/// the reason and the two ways out.
const WHY_AND_WAYS_OUT: &str = "Per-process buckets mean every configured quota is \
multiplied by your replica count and reset by every deploy: behind N replicas a limit of \
5 attempts is really 5N, and nothing says so, because the requests succeed. Either point \
it at Redis with RATE_LIMIT_DRIVER=redis and RATE_LIMIT_REDIS_URL=redis://cache.internal:6379, \
or, if you genuinely run a single process, set RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION=true.";

fn assert_refused_before_listening(refused: &Exited, expected_stderr: &str) {
    assert_eq!(refused.status.code(), Some(1), "exit status of a refusal");
    assert_eq!(refused.stderr.trim(), expected_stderr);
    assert!(
        !refused.stdout.contains("listening on"),
        "it listened before refusing:\n{}",
        refused.stdout
    );
}

#[test]
fn production_without_a_driver_refuses_before_listening() {
    let refused = run_expecting_exit(&[("APP_ENV", "production")]);
    assert_refused_before_listening(
        &refused,
        &format!(
            "refusing to boot in production: RATE_LIMIT_DRIVER is unset, which defaults to the \
             in-memory limiter. {WHY_AND_WAYS_OUT}"
        ),
    );
}

#[test]
fn capitalised_redis_in_production_is_refused_by_its_value() {
    let refused = run_expecting_exit(&[("APP_ENV", "production"), ("RATE_LIMIT_DRIVER", "Redis")]);
    assert_refused_before_listening(
        &refused,
        &format!(
            "refusing to boot in production: RATE_LIMIT_DRIVER=\"Redis\" is not a driver (did you \
             mean redis?): the drivers are memory and redis, spelled exactly, and an unrecognised \
             value falls back to the in-memory limiter. {WHY_AND_WAYS_OUT}"
        ),
    );
}

#[test]
fn trusting_every_address_as_a_proxy_is_refused() {
    let refused = run_expecting_exit(&[("APP_TRUSTED_PROXIES", "0.0.0.0/0")]);
    assert_refused_before_listening(
        &refused,
        "APP_TRUSTED_PROXIES=\"0.0.0.0/0\" is invalid: \"0.0.0.0/0\" covers every address, so \
         every client would be a trusted proxy and choose the address it is limited by; list \
         only the addresses and ranges of your proxies",
    );
}

#[test]
fn a_port_that_is_not_a_number_is_refused() {
    let refused = run_expecting_exit(&[("PORT", "eighty")]);
    assert_refused_before_listening(
        &refused,
        "PORT=\"eighty\" is invalid: expected a whole number from 0 to 65535 (invalid digit found in string)",
    );
}

#[tokio::test]
async fn boots_as_local_when_app_env_is_unset_and_says_so() {
    let app = start(&[]);
    assert_eq!(app.get("/").await.status, 200);
    let log = app.log();
    for expected in [
        "APP_ENV is unset: the quickstart boots as local",
        "environment=local",
        "driver=memory",
        "cache=memory",
        "trusted_proxies=none",
        &format!("listening on {}", app.base),
    ] {
        assert!(
            log.contains(expected),
            "{expected:?} missing from the log:\n{log}"
        );
    }
    assert_eq!(app.stderr.text(), "");
}

#[cfg(unix)]
#[tokio::test]
async fn ctrl_c_stops_it_gracefully() {
    let mut app = start(&[("APP_ENV", "local")]);
    assert_eq!(app.get("/").await.status, 200);
    // SIGINT is what ctrl-c sends to the foreground process.
    assert!(support::signal(app.child.id(), "INT"));
    let status = app.wait_for_exit(Duration::from_secs(10));
    assert!(status.success(), "exit status after ctrl-c: {status}");
    let log = app.stdout.finish();
    assert!(log.contains("ctrl-c received; shutting down"), "{log}");
    assert!(log.contains("stopped"), "{log}");
}

/// Asserts that `replies` were admitted with the limit's headers, the places
/// left going down from `limit - 1`, one a request.
fn assert_admitted_counting_down(replies: &[Reply], limit: usize) {
    for (n, reply) in replies.iter().enumerate() {
        let which = format!("request {} of {}", n + 1, replies.len());
        assert_eq!(reply.status, 200, "{which}: {}", reply.body);
        assert_eq!(
            reply.header("x-ratelimit-limit"),
            Some(&*limit.to_string()),
            "{which}"
        );
        assert_eq!(
            reply.header("x-ratelimit-remaining"),
            Some(&*(limit - 1 - n).to_string()),
            "{which}"
        );
        assert_eq!(reply.header("retry-after"), None, "{which}");
    }
}

/// Asserts a 429 with the limit's headers and a `Retry-After` of the
/// window, or a second less (the requests before it took some of it: the
/// sliding window rounds the wait up, the fixed window counts whole
/// seconds), and returns the `Retry-After`.
fn assert_refused(reply: &Reply, limit: usize, window_secs: u64) -> u64 {
    assert_eq!(reply.status, 429, "{}", reply.body);
    let retry_after: u64 = reply
        .header("retry-after")
        .expect("a Retry-After header")
        .parse()
        .expect("Retry-After in whole seconds");
    assert!(
        (window_secs - 1..=window_secs).contains(&retry_after),
        "Retry-After: {retry_after} for a window of {window_secs} s"
    );
    assert_eq!(reply.header("x-ratelimit-limit"), Some(&*limit.to_string()));
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("0"));
    retry_after
}

/// The acceptance of the quickstart: 200 on `/`, then the `throttle:60,1`
/// route admits 60 requests a minute and refuses the 61st with Laravel's
/// headers.
async fn assert_home_then_sixty_a_minute(app: &Running) {
    let home = app.get("/").await;
    assert_eq!(home.status, 200);
    assert!(
        home.body.starts_with("Hello from Suprnova."),
        "{}",
        home.body
    );

    let admitted = app.get_times("/throttled", 60).await;
    assert_admitted_counting_down(&admitted, 60);
    let refused = app.get("/throttled").await;
    let retry_after = assert_refused(&refused, 60, 60);
    assert_eq!(refused.body, "Too Many Attempts.");
    let reset: i64 = refused
        .header("x-ratelimit-reset")
        .expect("an X-RateLimit-Reset header")
        .parse()
        .expect("X-RateLimit-Reset in unix seconds");
    let expected = chrono::Utc::now().timestamp() + retry_after as i64;
    assert!(
        (expected - 2..=expected + 1).contains(&reset),
        "X-RateLimit-Reset {reset}, expected about {expected}"
    );
    // A refused request is not counted, and the window does not move.
    let again = app.get("/throttled").await;
    assert_refused(&again, 60, retry_after);
}

#[tokio::test]
async fn throttle_60_1_refuses_the_61st_request_on_memory() {
    let app = start(&[]);
    assert_home_then_sixty_a_minute(&app).await;
    // The throttle counts per address: another client is admitted.
    let other = app
        .send_from("127.0.0.2".parse().unwrap(), "GET", "/throttled", None)
        .await;
    assert_eq!(other.status, 200);
    assert_eq!(other.header("x-ratelimit-remaining"), Some("59"));
}

#[tokio::test]
async fn ip_based_route_refuses_the_11th_request_from_an_address() {
    let app = start(&[]);
    let admitted = app.get_times("/sliding", 10).await;
    assert_admitted_counting_down(&admitted, 10);
    let refused = app.get("/sliding").await;
    assert_refused(&refused, 10, 60);
    assert_eq!(refused.body, "429 Too Many Requests");
    let other = app
        .send_from("127.0.0.3".parse().unwrap(), "GET", "/sliding", None)
        .await;
    assert_eq!(other.status, 200);
    assert_eq!(other.header("x-ratelimit-remaining"), Some("9"));
}

#[tokio::test]
async fn named_api_limiter_refuses_the_31st_request() {
    let app = start(&[]);
    let admitted = app.get_times("/api/items", 30).await;
    assert_admitted_counting_down(&admitted, 30);
    assert_eq!(admitted[0].body, r#"{"items":["apple","pear"]}"#);
    let refused = app.get("/api/items").await;
    assert_refused(&refused, 30, 60);
}

#[tokio::test]
async fn login_is_limited_per_account_and_per_address() {
    let app = start(&[]);
    let ada = "email=ada%40example.com&password=guess";
    // Five attempts on one account, each from another address.
    for n in 1..=5 {
        let peer: IpAddr = format!("127.0.1.{n}").parse().unwrap();
        let reply = app.send_from(peer, "POST", "/login", Some(ada)).await;
        assert_eq!(reply.status, 401, "attempt {n}: {}", reply.body);
    }
    // The sixth, from a fresh address, in capitals: the account's bucket is
    // full.
    let capitals = "email=Ada%40Example.com&password=guess";
    let refused = app
        .send_from(
            "127.0.1.6".parse().unwrap(),
            "POST",
            "/login",
            Some(capitals),
        )
        .await;
    assert_refused(&refused, 5, 15 * 60);

    // One address naming a new account each time: 20 attempts a minute.
    let peer: IpAddr = "127.0.2.1".parse().unwrap();
    for n in 1..=20 {
        let form = format!("email=user{n}%40example.com&password=guess");
        let reply = app.send_from(peer, "POST", "/login", Some(&form)).await;
        assert_eq!(reply.status, 401, "attempt {n}: {}", reply.body);
    }
    let form = "email=user21%40example.com&password=guess";
    let refused = app.send_from(peer, "POST", "/login", Some(form)).await;
    assert_refused(&refused, 20, 60);
}

#[tokio::test]
async fn logs_each_route_with_its_limit_and_a_curl_line() {
    let app = start(&[("APP_ENV", "development")]);
    let log = app.log();
    let base = &app.base;
    for expected in [
        format!("route GET /: no limit; try: curl -i {base}/"),
        format!(
            "route GET /sliding: 10 in any minute per address (RateLimitMiddleware::ip_based, \
             sliding window); see the 429: for i in $(seq 11); do curl -s -o /dev/null -w \
             '%{{http_code}}\\n' {base}/sliding; done; curl -i {base}/sliding"
        ),
        format!(
            "route GET /throttled [throttle:60,1]: 60 a minute per address and path \
             (throttle:60,1, fixed window in the cache store); see the 429: for i in $(seq 61); \
             do curl -s -o /dev/null -w '%{{http_code}}\\n' {base}/throttled; done; curl -i \
             {base}/throttled"
        ),
        "route GET /api/items [throttle:api]: 30 a minute per user or address".to_owned(),
        "route POST /login: 20 in any minute per address, and 5 in any 15 minutes per account \
         named in `email`"
            .to_owned(),
        format!("-d 'email=ada@example.com&password=guess' {base}/login; done"),
    ] {
        assert!(
            log.contains(&expected),
            "{expected:?} missing from the log:\n{log}"
        );
    }
    assert!(log.contains("environment=development"), "{log}");
    assert!(!log.contains("APP_ENV is unset"), "{log}");
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn on_redis_the_same_routes_refuse_the_same_way_in_production() {
    let redis = support::redis::RedisServer::start();
    let url = redis.url();
    let app = start(&[
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", &url),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", &url),
    ]);
    let log = app.log();
    let booted = format!(
        "rate limiting ready: environment=production driver=redis redis={url} (answering) \
         cache=redis cache_redis={url}/1 (answering) trusted_proxies=none"
    );
    assert!(
        log.contains(&booted),
        "{booted:?} missing from the log:\n{log}"
    );

    assert_home_then_sixty_a_minute(&app).await;
    let admitted = app.get_times("/sliding", 10).await;
    assert_admitted_counting_down(&admitted, 10);
    assert_refused(&app.get("/sliding").await, 10, 60);

    // Both limiters counted in this Redis: the driver's bucket in database
    // 0, the throttle's counter and its timer in database 1, the cache
    // database of a Laravel application.
    let keyspace = redis.command("INFO keyspace");
    assert!(keyspace.contains("db0:keys=1,"), "{keyspace}");
    assert!(keyspace.contains("db1:keys=2,"), "{keyspace}");
}
