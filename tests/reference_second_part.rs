//! The API reference, from named limiters to the migration notes: every
//! example as written, and the rules it states, through the public API.

mod support;
mod throttle_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use support::clock_at;
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Request, Router};
use throttle_support::memory_app;

async fn list_items(_req: Request) -> HttpResponse {
    HttpResponse::text("items")
}

async fn create_item(_req: Request) -> HttpResponse {
    HttpResponse::text("created")
}

async fn login(_req: Request) -> HttpResponse {
    HttpResponse::text("welcome")
}

async fn get_from(router: &Router, uri: &str, peer: &str) -> HttpResponse {
    let request = http::Request::get(uri)
        .body(Full::<Bytes>::default())
        .unwrap();
    handle_request_with_peer(router, request, peer.parse::<SocketAddr>().unwrap()).await
}

// ---- The examples, as written ----

#[tokio::test]
async fn example_named_limiters() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            use suprnova::{Limit, RateLimiter};

            // At boot - `define` is the primary Rust-side name.
            RateLimiter::define("api", |req| {
                // `req.ip()`, not the raw `X-Forwarded-For` header - see below.
                let key = req.ip().unwrap_or_else(|| "anon".into());
                Limit::per_minute(60).by(format!("ip:{key}")).into()
            });

            // Laravel-side alias - same thing under the keyword-escape spelling.
            RateLimiter::r#for("uploads", |_req| Limit::per_hour(100).into());

            let request = Request::new(http::Request::get("/").body(String::new()).unwrap())
                .with_peer("203.0.113.5:4000".parse().unwrap());
            // Resolve.
            let cb = RateLimiter::limiter("api").unwrap();
            let limit_result = cb(&request);

            assert_eq!(limit_result.limits().len(), 1);
            assert_eq!(limit_result.limits()[0].key, "ip:203.0.113.5");
            assert_eq!(limit_result.limits()[0].max_attempts, 60);
            let uploads = RateLimiter::limiter("uploads").unwrap()(&request);
            assert_eq!(uploads.limits()[0].max_attempts, 100);
            assert_eq!(uploads.limits()[0].decay_seconds, 3_600);
        })
        .await;
}

#[tokio::test]
async fn example_two_limits_on_one_key() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            use suprnova::{Limit, RateLimiter};

            RateLimiter::define("api", |req| {
                let ip = req.ip().unwrap_or_else(|| "anon".into());
                vec![
                    Limit::per_minute(60).by(ip.clone()),
                    Limit::per_day(10_000).by(ip),
                ]
                .into()
            });

            let request = Request::new(http::Request::get("/").body(String::new()).unwrap())
                .with_peer("203.0.113.5:4000".parse().unwrap());
            let result = RateLimiter::limiter("api").unwrap()(&request);
            let keys: Vec<&str> = result.limits().iter().map(|l| l.key.as_str()).collect();
            assert_eq!(
                keys,
                [
                    "203.0.113.5:attempts:60:decay:60",
                    "203.0.113.5:attempts:10000:decay:86400"
                ]
            );
        })
        .await;
}

#[test]
#[allow(unused_variables)]
fn example_limit_builder() {
    use std::time::Duration;
    use suprnova::Limit;

    Limit::per_second(10, 1); // 10 per 1 second (max_attempts, decay_seconds)
    Limit::per_minute(60); // 60 per minute
    Limit::per_minutes(5, 100); // 100 per 5 minutes (decay-first, Laravel signature)
    Limit::per_hour(1_000); // 1000/hr
    Limit::per_hours(6, 5_000); // 5000 per 6 hours
    Limit::per_day(10_000); // 10000/day
    Limit::per_days(7, 50_000); // 50000 per 7 days
    Limit::new(123, Duration::from_secs(45)); // bare ctor

    // Builder chain.
    let l = Limit::per_minute(5)
        .by("user:42")
        .response(|req| suprnova::HttpResponse::text("blocked").status(429))
        .after(|response| response.status_code() >= 400);

    assert_eq!(
        (l.key.as_str(), l.max_attempts, l.decay_seconds),
        ("user:42", 5, 60)
    );
}

#[test]
fn example_throttle_constructors() {
    use suprnova::{Limit, ThrottleRequestsMiddleware};

    // The default limit - 60 requests a minute; see below.
    ThrottleRequestsMiddleware::default();

    // Named limiter - resolves at request time via RateLimiter::limiter(name).
    ThrottleRequestsMiddleware::by_name("api");

    // Inline max/decay/prefix - the literal Laravel `throttle:60,1` shape,
    // counted for each signed-in user, or each address, on each path.
    ThrottleRequestsMiddleware::with(60, 1, "myroute");

    // Explicit list of Limits - first-to-trip wins; most Rust-idiomatic.
    ThrottleRequestsMiddleware::with_limits(vec![
        Limit::per_hour(5_000).by("user:1"),
        Limit::per_minute(60).by("user:1"),
    ]);
}

#[tokio::test]
async fn example_named_aliases() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            use suprnova::middleware::register_middleware_alias_with_args;
            use suprnova::{Router, ThrottleRequestsMiddleware};

            register_middleware_alias_with_args(
                "throttle",
                ThrottleRequestsMiddleware::from_alias_args,
            );

            let router = Router::new()
                .post("/login", login)
                .middleware_named("throttle:5,1");

            assert!(router.validate().is_ok());
        })
        .await;
}

#[tokio::test]
async fn example_route_group() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            use suprnova::{Limit, RateLimiter, Router, ThrottleRequestsMiddleware};

            RateLimiter::define("api", |req| {
                Limit::per_minute(60)
                    .by(req.ip().unwrap_or_else(|| "anon".into()))
                    .into()
            });

            let router = Router::new()
                .get("/api/items", list_items)
                .post("/api/items", create_item)
                .middleware(ThrottleRequestsMiddleware::by_name("api"));

            let r = get_from(&router, "/api/items", "203.0.113.5:4000").await;
            assert_eq!(r.status_code(), 200);
            assert_eq!(r.header_str("x-ratelimit-remaining"), Some("59"));
            assert_eq!(
                suprnova::RateLimiter::attempts("api:203.0.113.5")
                    .await
                    .unwrap(),
                1
            );
        })
        .await;
}

#[tokio::test]
async fn example_driver_and_facade_together() {
    use suprnova::rate_limit::memory::InMemoryRateLimiter;
    use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig};
    use suprnova::{Limit, RateLimiter, ThrottleRequestsMiddleware};

    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("api", |req| {
                Limit::per_minute(3)
                    .by(req.ip().unwrap_or_else(|| "anon".into()))
                    .into()
            });
            let limiter_driver: Arc<dyn RateLimiterDriver> =
                Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
            let cfg = SlidingWindowConfig::new(5, Duration::from_secs(60));
            let key_fn = |req: &Request| req.ip().unwrap_or_default();

            let router = Router::new()
                .get("/api/items", list_items)
                .middleware(RateLimitMiddleware::new(limiter_driver, cfg, key_fn))
                .middleware(ThrottleRequestsMiddleware::by_name("api"));

            let statuses: Vec<u16> = {
                let mut s = Vec::new();
                for _ in 0..4 {
                    s.push(
                        get_from(&router, "/api/items", "203.0.113.5:4000")
                            .await
                            .status_code(),
                    );
                }
                s
            };
            assert_eq!(statuses, [200, 200, 200, 429]);
        })
        .await;
}

// ---- The rules ----

/// `.by("")`: one bucket for every caller, whichever address sends.
#[tokio::test]
async fn an_empty_key_is_one_bucket_for_every_caller() {
    use suprnova::{Limit, RateLimiter, ThrottleRequestsMiddleware};

    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = Router::new().get("/g", list_items).middleware(
                ThrottleRequestsMiddleware::with_limits(vec![Limit::per_minute(2).by("")]),
            );
            let first = get_from(&router, "/g", "203.0.113.5:4000").await;
            assert_eq!(first.header_str("x-ratelimit-remaining"), Some("1"));
            let second = get_from(&router, "/g", "198.51.100.7:4000").await;
            assert_eq!(second.header_str("x-ratelimit-remaining"), Some("0"));
            let third = get_from(&router, "/g", "192.0.2.9:4000").await;
            assert_eq!(third.status_code(), 429);
            assert_eq!(third.body_text(), "Too Many Attempts.");
            assert_eq!(RateLimiter::attempts("").await.unwrap(), 2);
        })
        .await;
}

/// A `GlobalLimit` is a limit with an empty key: returned by a named
/// limiter, it counts every caller under `<name>:`.
#[tokio::test]
async fn a_global_limit_from_a_named_limiter_counts_every_caller_together() {
    use suprnova::{GlobalLimit, RateLimiter, ThrottleRequestsMiddleware};

    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            assert_eq!(GlobalLimit::new(2, 60).key, "");
            RateLimiter::define("site", |_req| GlobalLimit::new(2, 60).into());
            let router = Router::new()
                .get("/g", list_items)
                .middleware(ThrottleRequestsMiddleware::by_name("site"));
            assert_eq!(
                get_from(&router, "/g", "203.0.113.5:4000")
                    .await
                    .status_code(),
                200
            );
            assert_eq!(
                get_from(&router, "/g", "198.51.100.7:4000")
                    .await
                    .status_code(),
                200
            );
            assert_eq!(
                get_from(&router, "/g", "192.0.2.9:4000")
                    .await
                    .status_code(),
                429
            );
            assert_eq!(RateLimiter::attempts("site:").await.unwrap(), 2);
        })
        .await;
}

/// "Every counter method cleans its key": each method given `café` reads or
/// writes the bucket `cafe`.
#[tokio::test]
async fn every_counter_method_cleans_its_key() {
    use suprnova::RateLimiter;

    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let a = "login:café";
            let b = "login:cafe";
            assert_eq!(RateLimiter::hit(a, 60).await.unwrap(), 1);
            assert_eq!(RateLimiter::attempts(b).await.unwrap(), 1);
            assert_eq!(RateLimiter::hit_for_minute(a).await.unwrap(), 2);
            assert_eq!(RateLimiter::increment(a, 60, 3).await.unwrap(), 5);
            assert_eq!(RateLimiter::decrement(a, 60, 1).await.unwrap(), 4);
            assert_eq!(RateLimiter::attempts(b).await.unwrap(), 4);
            assert_eq!(RateLimiter::attempts(a).await.unwrap(), 4);
            assert_eq!(RateLimiter::remaining(a, 10).await.unwrap(), 6);
            assert_eq!(RateLimiter::retries_left(a, 10).await.unwrap(), 6);
            assert!(RateLimiter::too_many_attempts(a, 4).await.unwrap());
            assert_eq!(RateLimiter::available_in(a).await.unwrap(), 60);
            let outcome = RateLimiter::increment_if_below(a, 60, 1, 5).await.unwrap();
            assert!(outcome.counted);
            assert_eq!(outcome.count, 5);
            let refused = RateLimiter::increment_if_below(a, 60, 1, 5).await.unwrap();
            assert!(!refused.counted);
            assert_eq!(refused.count, 5);
            assert_eq!(RateLimiter::attempts(b).await.unwrap(), 5);
            assert!(RateLimiter::hit_and_check(a, 5, 60).await.unwrap());
            assert_eq!(RateLimiter::attempts(b).await.unwrap(), 6);
            assert_eq!(
                RateLimiter::attempt(a, 10, || async { 7 }, 60)
                    .await
                    .unwrap(),
                Some(7)
            );
            assert_eq!(RateLimiter::attempts(b).await.unwrap(), 7);
            assert!(RateLimiter::reset_attempts(a).await.unwrap());
            assert_eq!(RateLimiter::attempts(b).await.unwrap(), 0);
            RateLimiter::hit(b, 60).await.unwrap();
            RateLimiter::clear(a).await.unwrap();
            assert_eq!(RateLimiter::attempts(b).await.unwrap(), 0);
            assert_eq!(RateLimiter::available_in(b).await.unwrap(), 0);
        })
        .await;
}

async fn get_forwarded(
    server: &support::http::TestServer,
    path: &str,
    xff: &str,
) -> support::http::Reply {
    server
        .send(
            http::Request::get(server.url(path))
                .header("x-forwarded-for", xff)
                .body(Full::default())
                .unwrap(),
        )
        .await
}

/// The default throttle counts `Request::ip()`: behind a trusted proxy,
/// each client behind it in a bucket of its own, over HTTP.
#[tokio::test]
async fn the_default_throttle_counts_each_client_behind_a_trusted_proxy_over_http() {
    use suprnova::http::TrustedProxies;
    use suprnova::{RateLimiter, ThrottleRequestsMiddleware};

    let clock = clock_at(12, 0, 0);
    let app = memory_app(&clock);
    app.install(Arc::new("127.0.0.1".parse::<TrustedProxies>().unwrap()));
    app.scope(async {
        let router = Router::new()
            .get("/a", list_items)
            .get("/b", list_items)
            .middleware(ThrottleRequestsMiddleware::default());
        let server = support::http::TestServer::start(router).await;
        let one = get_forwarded(&server, "/a", "198.51.100.7").await;
        assert_eq!(
            (one.status, one.header("x-ratelimit-limit")),
            (200, Some("60"))
        );
        assert_eq!(one.header("x-ratelimit-remaining"), Some("59"));
        let again = get_forwarded(&server, "/b", "198.51.100.7").await;
        assert_eq!(again.header("x-ratelimit-remaining"), Some("58"));
        let other = get_forwarded(&server, "/a", "198.51.100.8").await;
        assert_eq!(other.header("x-ratelimit-remaining"), Some("59"));
        // A client's own value, left of what the proxy wrote, is not read.
        let forged = get_forwarded(&server, "/a", "10.9.9.9, 198.51.100.8").await;
        assert_eq!(forged.header("x-ratelimit-remaining"), Some("58"));
        assert_eq!(RateLimiter::attempts("ip:198.51.100.7").await.unwrap(), 2);
        assert_eq!(RateLimiter::attempts("ip:198.51.100.8").await.unwrap(), 2);
        assert_eq!(RateLimiter::attempts("ip:127.0.0.1").await.unwrap(), 0);
        server.stop().await;
    })
    .await;
}

/// With `APP_TRUSTED_PROXIES` unset, every client of a terminating proxy is
/// the proxy: `with(20, 1, "login")` is 20 attempts a minute for all of
/// them together.
#[tokio::test]
async fn without_trusted_proxies_every_client_of_a_proxy_shares_one_bucket_over_http() {
    use suprnova::{RateLimiter, ThrottleRequestsMiddleware};

    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = Router::new()
                .get("/login", login)
                .middleware(ThrottleRequestsMiddleware::with(20, 1, "login"));
            let server = support::http::TestServer::start(router).await;
            let mut statuses = Vec::new();
            for i in 0..21 {
                statuses.push(
                    get_forwarded(&server, "/login", &format!("198.51.100.{i}"))
                        .await
                        .status,
                );
            }
            assert_eq!(statuses.iter().filter(|&&s| s == 200).count(), 20);
            assert_eq!(statuses[20], 429);
            assert_eq!(
                RateLimiter::attempts("login:ip:127.0.0.1:path:/login")
                    .await
                    .unwrap(),
                20
            );
            server.stop().await;
        })
        .await;
}

/// A named limiter that is not registered: 503 naming it, over HTTP, and
/// nothing counted.
#[tokio::test]
async fn a_missing_named_limiter_answers_503_over_http() {
    use suprnova::ThrottleRequestsMiddleware;

    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = Router::new()
                .get("/x", list_items)
                .middleware(ThrottleRequestsMiddleware::by_name("nope"));
            let server = support::http::TestServer::start(router).await;
            let r = server.get("/x").await;
            assert_eq!(r.status, 503);
            assert_eq!(r.body, "Rate limiter [nope] is not defined.");
            assert_eq!(r.header("x-ratelimit-limit"), None);
            server.stop().await;
        })
        .await;
}

/// Limits that end up with one key share one bucket, and a request is
/// counted in it once for each of them, as Laravel's `ThrottleRequests`
/// hits the key once for each limit after checking every limit. Two
/// `per_minute(3)` limits on one key: the first request counts 2, the
/// second passes the check (2 < 3) and counts 4, the third is refused.
/// One client, one request at a time: no race between check and count.
async fn two_limits_of_three_in_one_bucket() {
    use suprnova::{Limit, RateLimiter, ThrottleRequestsMiddleware};

    RateLimiter::define("api", |_req| {
        vec![Limit::per_minute(3).by("a"), Limit::per_minute(3).by("a")].into()
    });
    let router = Router::new()
        .get("/x", list_items)
        .middleware(ThrottleRequestsMiddleware::by_name("api"));
    let key = "api:a:attempts:3:decay:60";

    let first = get_from(&router, "/x", "203.0.113.5:4000").await;
    assert_eq!(first.status_code(), 200);
    assert_eq!(RateLimiter::attempts(key).await.unwrap(), 2);

    let second = get_from(&router, "/x", "203.0.113.5:4000").await;
    assert_eq!(
        (
            second.status_code(),
            RateLimiter::attempts(key).await.unwrap()
        ),
        (200, 4),
        "the second request passed the check with 2 of 3 and counts twice"
    );
    assert_eq!(second.header_str("x-ratelimit-remaining"), Some("0"));

    let third = get_from(&router, "/x", "203.0.113.5:4000").await;
    assert_eq!(third.status_code(), 429);
    assert_eq!(RateLimiter::attempts(key).await.unwrap(), 4);
}

#[tokio::test]
async fn limits_sharing_a_bucket_count_each_request_once_per_limit_one_request_at_a_time() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(two_limits_of_three_in_one_bucket())
        .await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn limits_sharing_a_bucket_count_each_request_once_per_limit_on_redis() {
    let redis = support::redis::RedisServer::start();
    let app = throttle_support::app_on_redis(&redis.url(), &support::unique_prefix("shared"));
    app.scope(two_limits_of_three_in_one_bucket()).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn limits_sharing_a_bucket_count_each_request_once_per_limit_on_a_cluster() {
    let cluster = support::redis::RedisCluster::start(3);
    let app = throttle_support::app_on_redis(&cluster.url(), &support::unique_prefix("shared"));
    app.scope(two_limits_of_three_in_one_bucket()).await;
}

/// `café` and `cafe` keep their keys and clean to one bucket, which counts
/// a request once for each limit (over HTTP): with a maximum of 3 each, the
/// second request passes the check at 2 and counts 4.
#[tokio::test]
async fn keys_that_clean_to_one_bucket_count_once_per_limit_over_http() {
    use suprnova::{Limit, RateLimiter, ThrottleRequestsMiddleware};

    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| {
                vec![
                    Limit::per_minute(3).by("caf\u{e9}"),
                    Limit::per_minute(3).by("cafe"),
                ]
                .into()
            });
            let router = Router::new()
                .get("/x", list_items)
                .middleware(ThrottleRequestsMiddleware::by_name("api"));
            let server = support::http::TestServer::start(router).await;
            let mut seen = Vec::new();
            for _ in 0..3 {
                let r = server.get("/x").await;
                seen.push((r.status, RateLimiter::attempts("api:cafe").await.unwrap()));
            }
            server.stop().await;
            assert_eq!(seen, [(200, 2), (200, 4), (429, 4)]);
        })
        .await;
}

/// Every wrapped response carries one pair: a handler's own error
/// responses and the 500 of a handler that panicked included, over HTTP.
#[tokio::test]
async fn every_wrapped_response_carries_the_pair_over_http() {
    use suprnova::ThrottleRequestsMiddleware;

    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = Router::new()
                .get("/ok", list_items)
                .get("/missing", |_req: Request| async {
                    HttpResponse::text("gone").status(404)
                })
                .get("/boom", |_req: Request| async {
                    if true {
                        panic!("a bug");
                    }
                    HttpResponse::text("never")
                })
                .middleware(ThrottleRequestsMiddleware::default());
            let server = support::http::TestServer::start(router).await;
            let mut seen = Vec::new();
            for path in ["/ok", "/missing", "/boom"] {
                let r = server.get(path).await;
                assert_eq!(
                    r.headers.get_all("x-ratelimit-limit").iter().count(),
                    1,
                    "{path}"
                );
                assert_eq!(
                    r.headers.get_all("x-ratelimit-remaining").iter().count(),
                    1,
                    "{path}"
                );
                seen.push((
                    r.status,
                    r.header("x-ratelimit-limit").map(str::to_owned),
                    r.header("x-ratelimit-remaining").map(str::to_owned),
                ));
            }
            server.stop().await;
            let pair = |left: &str| (Some("60".to_owned()), Some(left.to_owned()));
            assert_eq!(
                seen,
                [
                    (200, pair("59").0, pair("59").1),
                    (404, pair("58").0, pair("58").1),
                    (500, pair("57").0, pair("57").1),
                ]
            );
        })
        .await;
}
