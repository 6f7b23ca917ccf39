//! `RateLimitMiddleware` and `ip_based`: the decision, its headers, the
//! key, and the backend-error policy, on the memory driver with a frozen
//! clock and on a real Redis that is stopped mid-test.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use support::peer;

use bytes::Bytes;
use http_body_util::Full;
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig,
};
use suprnova::server::{handle_request, handle_request_with_peer};
use suprnova::{HttpResponse, Request, Router};

use support::clock_at;
use support::http::TestServer;

const MINUTE: Duration = Duration::from_secs(60);

fn get(path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path).body(Full::default()).unwrap()
}

fn ok(_req: Request) -> std::future::Ready<HttpResponse> {
    std::future::ready(HttpResponse::text("ok"))
}

/// A container with a memory driver on a frozen clock installed.
fn app_with_memory_driver() -> (App, FakeClock) {
    let clock = clock_at(12, 0, 0);
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    (app, clock)
}

fn memory(clock: &FakeClock) -> Arc<dyn RateLimiterDriver> {
    Arc::new(InMemoryRateLimiter::with_clock(clock.shared()))
}

/// `GET /r` answering `ok`, behind `middleware`.
fn limited(middleware: RateLimitMiddleware) -> Router {
    Router::new().get("/r", ok).middleware(middleware)
}

fn header<'a>(r: &'a HttpResponse, name: &str) -> Option<&'a str> {
    r.header_str(name)
}

#[tokio::test]
async fn every_response_carries_the_pair_and_the_refusal_its_retry_after() {
    let clock = clock_at(9, 0, 0);
    let router = Router::new()
        .get("/r", ok)
        .middleware(RateLimitMiddleware::new(
            memory(&clock),
            SlidingWindowConfig::new(3, MINUTE),
            |req| format!("route:{}", req.path()),
        ));
    let from = peer("198.51.100.1:1");
    for remaining in ["2", "1", "0"] {
        let r = handle_request_with_peer(&router, get("/r"), from).await;
        assert_eq!(r.status_code(), 200);
        assert_eq!(header(&r, "x-ratelimit-limit"), Some("3"));
        assert_eq!(header(&r, "x-ratelimit-remaining"), Some(remaining));
        assert_eq!(header(&r, "retry-after"), None);
    }
    clock.advance(Duration::from_millis(20_500));
    let r = handle_request_with_peer(&router, get("/r"), from).await;
    assert_eq!(r.status_code(), 429);
    assert_eq!(r.body_text(), "429 Too Many Requests");
    assert_eq!(header(&r, "x-ratelimit-limit"), Some("3"));
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("0"));
    // 39.5 s until the first hit leaves the window: rounded up.
    assert_eq!(header(&r, "retry-after"), Some("40"));
    // The first hit leaves at 09:01:00.
    assert_eq!(header(&r, "x-ratelimit-reset"), Some("1767258060"));

    clock.advance(Duration::from_millis(39_499));
    let r = handle_request_with_peer(&router, get("/r"), from).await;
    assert_eq!(header(&r, "retry-after"), Some("1"), "never 0");
    clock.advance(Duration::from_millis(1));
    let r = handle_request_with_peer(&router, get("/r"), from).await;
    assert_eq!(r.status_code(), 200);
    // All three first hits left together; this one took a place.
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("2"));
}

#[tokio::test]
async fn a_handler_that_answers_err_still_gets_the_pair() {
    let clock = clock_at(9, 0, 0);
    let router = Router::new()
        .get("/fail", |_req: Request| async {
            Err::<HttpResponse, _>(HttpResponse::text("nope").status(422))
        })
        .middleware(RateLimitMiddleware::new(
            memory(&clock),
            SlidingWindowConfig::new(5, MINUTE),
            |_req| "fixed".to_owned(),
        ));
    let r = handle_request(&router, get("/fail")).await;
    assert_eq!(r.status_code(), 422);
    assert_eq!(header(&r, "x-ratelimit-limit"), Some("5"));
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("4"));
}

#[tokio::test]
async fn only_when_false_skips_the_limiter_entirely() {
    let clock = clock_at(9, 0, 0);
    let router = Router::new().get("/r", ok).middleware(
        RateLimitMiddleware::new(
            memory(&clock),
            SlidingWindowConfig::new(1, MINUTE),
            |_req| "one".to_owned(),
        )
        .only_when(|req| req.query_param("limited").is_some()),
    );
    for _ in 0..3 {
        let r = handle_request(&router, get("/r")).await;
        assert_eq!(r.status_code(), 200);
        assert_eq!(header(&r, "x-ratelimit-limit"), None);
    }
    // The skipped requests counted nothing: the limited one is the first.
    let r = handle_request(&router, get("/r?limited=1")).await;
    assert_eq!(r.status_code(), 200);
    assert_eq!(header(&r, "x-ratelimit-remaining"), Some("0"));
    let r = handle_request(&router, get("/r?limited=1")).await;
    assert_eq!(r.status_code(), 429);
}

#[tokio::test]
async fn an_invalid_limit_answers_500_whatever_the_policy() {
    let clock = clock_at(9, 0, 0);
    for policy in [BackendErrorPolicy::FailOpen, BackendErrorPolicy::FailClosed] {
        let ran = Arc::new(AtomicUsize::new(0));
        let counter = ran.clone();
        let router = Router::new()
            .get("/r", move |_req: Request| {
                counter.fetch_add(1, Ordering::SeqCst);
                async { HttpResponse::text("ok") }
            })
            .middleware(
                RateLimitMiddleware::new(
                    memory(&clock),
                    SlidingWindowConfig::new(5, Duration::ZERO),
                    |_req| "k".to_owned(),
                )
                .on_backend_error(policy),
            );
        let r = handle_request(&router, get("/r")).await;
        assert_eq!(r.status_code(), 500, "{policy:?}");
        assert_eq!(ran.load(Ordering::SeqCst), 0, "{policy:?}");
    }
}

#[tokio::test]
async fn key_reads_body_refuses_over_the_cap_and_hands_the_exact_bytes_on() {
    let clock = clock_at(9, 0, 0);
    let ran = Arc::new(AtomicUsize::new(0));
    let counter = ran.clone();
    let router = Router::new()
        .post("/echo", move |mut req: Request| {
            counter.fetch_add(1, Ordering::SeqCst);
            async move {
                let body = req.bytes().await.unwrap();
                HttpResponse::bytes(body)
            }
        })
        .middleware(
            RateLimitMiddleware::new(
                memory(&clock),
                SlidingWindowConfig::new(10, MINUTE),
                |req| format!("len:{}", req.buffered_body().map_or(0, |b| b.len())),
            )
            .key_reads_body(16),
        );
    let post = |body: &'static [u8], announce: bool| {
        let mut builder = http::Request::post("/echo");
        if announce {
            builder = builder.header("content-length", body.len());
        }
        builder.body(Full::new(Bytes::from_static(body))).unwrap()
    };

    let r = handle_request(&router, post(b"exactly sixteen!", true)).await;
    assert_eq!(r.status_code(), 200);
    assert_eq!(r.body().as_ref(), b"exactly sixteen!");

    // Over the cap by Content-Length, and by what arrives without one.
    for announce in [true, false] {
        let r = handle_request(&router, post(b"seventeen bytes!!", announce)).await;
        assert_eq!(r.status_code(), 413, "announce={announce}");
        assert_eq!(r.body_text(), "413 Payload Too Large");
    }
    assert_eq!(
        ran.load(Ordering::SeqCst),
        1,
        "a refused body reached the handler"
    );

    // Through the real server, the bytes arrive intact.
    let server = TestServer::start(router).await;
    let bytes: &'static [u8] = "n\0l\r\n\u{e9}\u{20ac}".as_bytes();
    let reply = server
        .send(
            http::Request::post(server.url("/echo"))
                .body(Full::new(Bytes::from_static(bytes)))
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, 200);
    assert_eq!(reply.body.as_bytes(), bytes);
    // The key read the buffered body: ten bytes is a bucket of its own.
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("9"));
    let big = server
        .send(
            http::Request::post(server.url("/echo"))
                .body(Full::new(Bytes::from(vec![b'x'; 4096])))
                .unwrap(),
        )
        .await;
    assert_eq!(big.status, 413);
}

#[tokio::test]
async fn ip_based_refuses_the_21st_in_a_minute_and_spares_other_addresses() {
    let (app, clock) = app_with_memory_driver();
    app.scope(async move {
        let router = Router::new()
            .get("/login", ok)
            .middleware(RateLimitMiddleware::ip_based(20, MINUTE));
        let server = TestServer::start(router).await;
        let one: std::net::IpAddr = "127.0.0.1".parse().unwrap();
        for n in 1..=20 {
            clock.advance(Duration::from_secs(1));
            let r = server.send_from(one, get(&server.url("/login"))).await;
            assert_eq!(r.status, 200, "request {n}");
            assert_eq!(r.header("x-ratelimit-limit"), Some("20"));
            assert_eq!(
                r.header("x-ratelimit-remaining"),
                Some(&*(20 - n).to_string())
            );
        }
        // A spoofed X-Forwarded-For from a peer nobody trusts changes nothing.
        let spoofed = http::Request::get(server.url("/login"))
            .header("X-Forwarded-For", "203.0.113.77")
            .body(Full::default())
            .unwrap();
        let r = server.send_from(one, spoofed).await;
        assert_eq!(r.status, 429);
        assert_eq!(r.body, "429 Too Many Requests");
        // The first of the 20 was made 20 s ago: it leaves in 40 s.
        assert_eq!(r.header("retry-after"), Some("41"));
        assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));

        let two: std::net::IpAddr = "127.0.0.2".parse().unwrap();
        let r = server.send_from(two, get(&server.url("/login"))).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-ratelimit-remaining"), Some("19"));

        clock.advance(Duration::from_secs(41));
        let r = server.send_from(one, get(&server.url("/login"))).await;
        assert_eq!(r.status, 200, "the oldest hit has left the window");
    })
    .await;
}

#[tokio::test]
async fn ip_based_counts_ipv6_by_64_and_mapped_addresses_as_ipv4() {
    let (app, _clock) = app_with_memory_driver();
    app.scope(async {
        let router = limited(RateLimitMiddleware::ip_based(2, MINUTE));
        let status = |p: &'static str| {
            let router = &router;
            async move {
                handle_request_with_peer(router, get("/r"), peer(p))
                    .await
                    .status_code()
            }
        };
        assert_eq!(status("[2001:db8:1:2::1]:1").await, 200);
        assert_eq!(status("[2001:db8:1:2:dead:beef::7]:1").await, 200);
        assert_eq!(status("[2001:db8:1:2::ffff]:1").await, 429, "same /64");
        assert_eq!(status("[2001:db8:1:3::1]:1").await, 200, "next /64");

        assert_eq!(status("[::ffff:192.0.2.1]:1").await, 200);
        assert_eq!(status("192.0.2.1:1").await, 200);
        assert_eq!(status("192.0.2.1:2").await, 429, "mapped counts as IPv4");
    })
    .await;
}

#[tokio::test]
async fn equal_numbers_share_a_bucket_across_routes_and_different_ones_never() {
    let (app, _clock) = app_with_memory_driver();
    app.scope(async {
        let router = Router::new()
            .get("/a", ok)
            .middleware(RateLimitMiddleware::ip_based(2, MINUTE))
            .merge(
                Router::new()
                    .get("/b", ok)
                    .middleware(RateLimitMiddleware::ip_based(2, MINUTE)),
            )
            .merge(
                Router::new()
                    .get("/c", ok)
                    .middleware(RateLimitMiddleware::ip_based(3, MINUTE)),
            )
            .merge(
                Router::new()
                    .get("/d", ok)
                    .middleware(RateLimitMiddleware::ip_based(2, Duration::from_secs(61))),
            );
        let from = peer("198.51.100.9:1");
        let status = |path: &'static str| {
            let router = &router;
            async move {
                handle_request_with_peer(router, get(path), from)
                    .await
                    .status_code()
            }
        };
        assert_eq!(status("/a").await, 200);
        assert_eq!(status("/b").await, 200);
        assert_eq!(status("/a").await, 429, "/a and /b spend one budget");
        assert_eq!(status("/b").await, 429);
        assert_eq!(status("/c").await, 200, "another max is another bucket");
        assert_eq!(status("/d").await, 200, "another window is another bucket");
    })
    .await;
}

#[tokio::test]
async fn ip_based_reads_the_client_behind_a_trusted_proxy() {
    let (app, _clock) = app_with_memory_driver();
    app.install(Arc::new("127.0.0.1".parse::<TrustedProxies>().unwrap()));
    app.scope(async {
        let router = limited(RateLimitMiddleware::ip_based(1, MINUTE));
        let server = TestServer::start(router).await;
        let from = |client: &str| {
            http::Request::get(server.url("/r"))
                .header("X-Forwarded-For", client)
                .body(Full::default())
                .unwrap()
        };
        assert_eq!(server.send(from("203.0.113.1")).await.status, 200);
        assert_eq!(server.send(from("203.0.113.1")).await.status, 429);
        assert_eq!(server.send(from("203.0.113.2")).await.status, 200);
        // The client cannot prepend its way out: the walk starts at the right.
        assert_eq!(server.send(from("10.9.9.9, 203.0.113.1")).await.status, 429);
    })
    .await;
}

#[tokio::test]
async fn a_request_with_no_address_gets_a_bucket_of_its_own() {
    let (app, _clock) = app_with_memory_driver();
    app.scope(async {
        let router = limited(RateLimitMiddleware::ip_based(1, MINUTE));
        for _ in 0..5 {
            let r = handle_request(&router, get("/r")).await;
            assert_eq!(r.status_code(), 200);
            assert_eq!(r.header_str("x-ratelimit-remaining"), Some("0"));
        }
    })
    .await;
}

#[tokio::test]
async fn ip_based_finds_the_driver_installed_after_it_was_built() {
    let router = Router::new().get("/r", ok).middleware(
        RateLimitMiddleware::ip_based(1, MINUTE).on_backend_error(BackendErrorPolicy::FailClosed),
    );
    let app = App::new();
    let from = peer("192.0.2.5:1");
    let before = app
        .scope(handle_request_with_peer(&router, get("/r"), from))
        .await;
    assert_eq!(before.status_code(), 503);
    assert_eq!(before.header_str("retry-after"), Some("1"));

    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(
        clock_at(8, 0, 0).shared(),
    )));
    let first = app
        .scope(handle_request_with_peer(&router, get("/r"), from))
        .await;
    assert_eq!(first.status_code(), 200);
    let second = app
        .scope(handle_request_with_peer(&router, get("/r"), from))
        .await;
    assert_eq!(second.status_code(), 429);
}

#[tokio::test]
async fn no_installed_driver_goes_through_the_policy() {
    let app = App::new();
    app.scope(async {
        let open = limited(RateLimitMiddleware::ip_based(1, MINUTE));
        for _ in 0..3 {
            let r = handle_request_with_peer(&open, get("/r"), peer("192.0.2.6:1")).await;
            assert_eq!(r.status_code(), 200);
            assert_eq!(r.body_text(), "ok");
            assert_eq!(r.header_str("x-ratelimit-limit"), None);
        }
        let closed = Router::new().get("/r", ok).middleware(
            RateLimitMiddleware::ip_based(1, MINUTE)
                .on_backend_error(BackendErrorPolicy::FailClosed),
        );
        let r = handle_request_with_peer(&closed, get("/r"), peer("192.0.2.6:1")).await;
        assert_eq!(r.status_code(), 503);
        assert_eq!(r.body_text(), "503 Service Unavailable");
        assert_eq!(r.header_str("retry-after"), Some("1"));
    })
    .await;
}

#[tokio::test]
async fn over_quota_is_429_whatever_the_policy() {
    let clock = clock_at(9, 0, 0);
    for policy in [BackendErrorPolicy::FailOpen, BackendErrorPolicy::FailClosed] {
        let router = Router::new().get("/r", ok).middleware(
            RateLimitMiddleware::new(memory(&clock), SlidingWindowConfig::new(1, MINUTE), |_| {
                "k".to_owned()
            })
            .on_backend_error(policy),
        );
        assert_eq!(handle_request(&router, get("/r")).await.status_code(), 200);
        assert_eq!(handle_request(&router, get("/r")).await.status_code(), 429);
    }
}

#[cfg(feature = "redis")]
mod on_redis {
    use super::*;
    use std::time::Instant;
    use support::redis::RedisServer;
    use suprnova::rate_limit::redis::RedisRateLimiter;
    use suprnova::redis_client::{RedisConfig, RedisConnection};

    /// A Redis limiter that gives up after 250 ms + 250 ms, and that
    /// deadline.
    fn limiter(server: &RedisServer) -> (Arc<dyn RateLimiterDriver>, Duration) {
        let config = RedisConfig::from_url(&server.url())
            .unwrap()
            .with_timeouts(Duration::from_millis(250), Duration::from_millis(250));
        let conn = RedisConnection::new(config).unwrap();
        let deadline = conn.deadline();
        let limiter = RedisRateLimiter::new(conn).with_prefix(support::unique_prefix("mw"));
        (Arc::new(limiter), deadline)
    }

    fn router(limiter: Arc<dyn RateLimiterDriver>, policy: BackendErrorPolicy) -> Router {
        Router::new().get("/r", ok).middleware(
            RateLimitMiddleware::new(limiter, SlidingWindowConfig::new(5, MINUTE), |req| {
                format!("route:{}", req.path())
            })
            .on_backend_error(policy),
        )
    }

    /// Sends one request and returns the answer and how long it took.
    async fn timed(router: &Router) -> (HttpResponse, Duration) {
        let start = Instant::now();
        let r = handle_request_with_peer(router, get("/r"), peer("192.0.2.7:1")).await;
        (r, start.elapsed())
    }

    #[tokio::test]
    async fn fail_closed_answers_503_within_the_timeout_when_redis_stops() {
        let mut server = RedisServer::start();
        let (limiter, deadline) = limiter(&server);
        let router = router(limiter, BackendErrorPolicy::FailClosed);
        let (r, _) = timed(&router).await;
        assert_eq!(r.status_code(), 200);
        assert_eq!(r.header_str("x-ratelimit-remaining"), Some("4"));

        server.stop();
        for _ in 0..3 {
            let (r, took) = timed(&router).await;
            assert_eq!(r.status_code(), 503);
            assert_eq!(r.body_text(), "503 Service Unavailable");
            assert_eq!(r.header_str("retry-after"), Some("1"));
            assert_eq!(r.header_str("x-ratelimit-limit"), None);
            assert!(
                took <= deadline + Duration::from_millis(200),
                "took {took:?}"
            );
        }
    }

    #[tokio::test]
    async fn fail_open_passes_within_the_timeout_when_redis_stops() {
        let mut server = RedisServer::start();
        let (limiter, deadline) = limiter(&server);
        let router = router(limiter, BackendErrorPolicy::FailOpen);
        assert_eq!(timed(&router).await.0.status_code(), 200);

        server.stop();
        for _ in 0..3 {
            let (r, took) = timed(&router).await;
            assert_eq!(r.status_code(), 200);
            assert_eq!(r.body_text(), "ok");
            assert_eq!(r.header_str("x-ratelimit-limit"), None);
            assert!(
                took <= deadline + Duration::from_millis(200),
                "took {took:?}"
            );
        }

        // Redis back: the limit applies again (the restarted server is empty).
        server.restart();
        let start = Instant::now();
        loop {
            let (r, _) = timed(&router).await;
            if r.header_str("x-ratelimit-remaining").is_some() {
                assert_eq!(r.header_str("x-ratelimit-remaining"), Some("4"));
                break;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "Redis never came back"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    #[tokio::test]
    async fn ip_based_on_redis_refuses_with_a_rounded_up_retry_after() {
        let server = RedisServer::start();
        let (limiter, _) = limiter(&server);
        let app = App::new();
        app.install::<dyn RateLimiterDriver>(limiter);
        app.scope(async {
            let router = Router::new()
                .get("/r", ok)
                .middleware(RateLimitMiddleware::ip_based(2, Duration::from_secs(2)));
            let server = TestServer::start(router).await;
            assert_eq!(server.get("/r").await.status, 200);
            assert_eq!(server.get("/r").await.status, 200);
            let refused = server.get("/r").await;
            assert_eq!(refused.status, 429);
            // Less than 2 s is left of the window (the three requests take
            // well under one), rounded up to whole seconds: 2, not 1.
            let retry: u64 = refused.header("retry-after").unwrap().parse().unwrap();
            assert_eq!(retry, 2, "Retry-After {retry}");
        })
        .await;
    }
}

/// A limit keyed on `Request::route_path` counts every spelling the router
/// serves in one bucket: the router decodes `/token%3Arefresh` and
/// `/token%3arefresh` to the `/token:refresh` route, and so does the key.
#[tokio::test]
async fn a_key_on_route_path_counts_every_spelling_the_router_serves() {
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(InMemoryRateLimiter::new());
    let router = Router::new()
        .post("/token:refresh", |_req: Request| async {
            HttpResponse::text("ok")
        })
        .middleware(RateLimitMiddleware::new(
            driver,
            SlidingWindowConfig::new(1, Duration::from_secs(60)),
            |req| format!("path:{}", req.route_path()),
        ));
    let mut statuses = Vec::new();
    for path in ["/token:refresh", "/token%3Arefresh", "/token%3arefresh"] {
        let request = http::Request::post(path)
            .body(Full::<Bytes>::default())
            .unwrap();
        let peer: SocketAddr = "198.51.100.7:1".parse().unwrap();
        statuses.push(
            handle_request_with_peer(&router, request, peer)
                .await
                .status_code(),
        );
    }
    assert_eq!(statuses, [200, 429, 429]);
}
