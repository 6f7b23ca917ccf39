//! `ThrottleRequestsMiddleware` through the router: constructors and their
//! keys, the `throttle` alias, headers, `after` and `response` callbacks,
//! named limiters, on the memory store with a frozen clock.

mod support;
mod throttle_support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use support::clock_at;
use suprnova::cache::{Cache, CacheError, IncrementOutcome, MemoryStore, Store, WindowIncrement};
use suprnova::clock::Clock;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig,
};
use suprnova::server::{handle_request, handle_request_with_peer};
use suprnova::throttle::{DEFAULT_DECAY_SECONDS, DEFAULT_MAX_ATTEMPTS, ThrottleAliasError};
use suprnova::{
    HttpResponse, Limit, RateLimiter, Request, Response, Router, ThrottleRequestsMiddleware,
    async_trait,
};
use throttle_support::{SignIn, limiter_app, memory_app as app_on, ok_routes};

const GUEST: &str = "203.0.113.5:40000";
const OTHER: &str = "198.51.100.7:40000";

/// Answers with the status of `?status=` (200 without one).
async fn status_from_query(req: Request) -> HttpResponse {
    let status = req
        .query_param("status")
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    HttpResponse::text("done").status(status)
}

async fn get(router: &Router, uri: &str, peer: &str) -> HttpResponse {
    let request = http::Request::get(uri)
        .body(Full::<Bytes>::default())
        .unwrap();
    handle_request_with_peer(router, request, peer.parse::<SocketAddr>().unwrap()).await
}

async fn get_as(router: &Router, uri: &str, peer: &str, user: &str) -> HttpResponse {
    let request = http::Request::get(uri)
        .header("x-user", user)
        .body(Full::<Bytes>::default())
        .unwrap();
    handle_request_with_peer(router, request, peer.parse::<SocketAddr>().unwrap()).await
}

fn remaining(r: &HttpResponse) -> Option<&str> {
    r.header_str("x-ratelimit-remaining")
}

/// How many of `n` requests were admitted.
async fn admitted(router: &Router, uri: &str, peer: &str, n: usize) -> usize {
    let mut count = 0;
    for _ in 0..n {
        if get(router, uri, peer).await.status_code() == 200 {
            count += 1;
        }
    }
    count
}

async fn attempts(key: &str) -> i64 {
    RateLimiter::attempts(key).await.unwrap()
}

#[tokio::test]
async fn default_counts_each_address_across_routes_and_each_user_by_id() {
    assert_eq!((DEFAULT_MAX_ATTEMPTS, DEFAULT_DECAY_SECONDS), (60, 60));
    assert_eq!(ThrottleRequestsMiddleware::DEFAULT_MAX_ATTEMPTS, 60);
    assert_eq!(ThrottleRequestsMiddleware::DEFAULT_DECAY_SECONDS, 60);
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/a", "/b"])
                .middleware(SignIn)
                .middleware(ThrottleRequestsMiddleware::default());

            // One bucket for the address, whichever route spends it.
            assert_eq!(admitted(&router, "/a", GUEST, 30).await, 30);
            let r = get(&router, "/b", GUEST).await;
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("60"));
            assert_eq!(remaining(&r), Some("29"));
            assert_eq!(admitted(&router, "/b", GUEST, 30).await, 29);
            let refused = get(&router, "/a", GUEST).await;
            assert_eq!(refused.status_code(), 429);
            assert_eq!(refused.header_str("retry-after"), Some("60"));
            assert_eq!(attempts("ip:203.0.113.5").await, 60);
            // Another address has its own bucket.
            assert_eq!(remaining(&get(&router, "/a", OTHER).await), Some("59"));

            // A signed-in user counts by id, from any address, not by the
            // address (which is full).
            let user = get_as(&router, "/a", GUEST, "7").await;
            assert_eq!((user.status_code(), remaining(&user)), (200, Some("59")));
            let user = get_as(&router, "/b", OTHER, "7").await;
            assert_eq!(remaining(&user), Some("58"));
            assert_eq!(attempts("user:7").await, 2);
            // An id that reads like an address shares no bucket with it.
            let lookalike = get_as(&router, "/a", OTHER, "203.0.113.5").await;
            assert_eq!(remaining(&lookalike), Some("59"));
        })
        .await;
}

#[tokio::test]
async fn with_counts_each_caller_on_each_path_under_its_prefix() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/a", "/b"])
                .middleware(SignIn)
                .middleware(ThrottleRequestsMiddleware::with(2, 1, ""));
            let login =
                ok_routes(&["/a"]).middleware(ThrottleRequestsMiddleware::with(2, 1, "login"));

            assert_eq!(admitted(&router, "/a?page=1", GUEST, 3).await, 2);
            assert_eq!(admitted(&router, "/b", GUEST, 3).await, 2);
            assert_eq!(attempts("ip:203.0.113.5:path:/a").await, 2);
            assert_eq!(attempts("ip:203.0.113.5:path:/b").await, 2);

            let user = get_as(&router, "/a", GUEST, "42").await;
            assert_eq!(remaining(&user), Some("1"));
            assert_eq!(attempts("user:42:path:/a").await, 1);

            // The prefix gives the same path a budget of its own.
            let prefixed = get(&login, "/a", GUEST).await;
            assert_eq!(
                (prefixed.status_code(), remaining(&prefixed)),
                (200, Some("1"))
            );
            assert_eq!(attempts("login:ip:203.0.113.5:path:/a").await, 1);

            // The window is given in minutes.
            clock.advance(Duration::from_secs(59));
            assert_eq!(get(&router, "/a", GUEST).await.status_code(), 429);
            clock.advance(Duration::from_secs(1));
            assert_eq!(get(&router, "/a", GUEST).await.status_code(), 200);
        })
        .await;
}

/// `with` counts per request path, as the reference keys it
/// (`ip:<address>:path:<path>`): each value of `/items/{id}` has a bucket
/// of its own, and `/items/1/` counts with `/items/1`, in process and over
/// HTTP.
#[tokio::test]
async fn with_counts_each_path_apart_and_each_spelling_of_one_path_together() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    let items = || {
        Router::new()
            .get("/items/{id}", |req: Request| async move {
                HttpResponse::text(format!("item {}", req.param("id").unwrap_or_default()))
            })
            .middleware(ThrottleRequestsMiddleware::with(2, 1, ""))
    };
    let paths = [
        "/items/1",
        "/items/2",
        "/items/1/",
        "/items/2",
        "//items/1",
        "/items/2",
    ];
    app.scope(async {
        let router = items();
        let mut statuses = Vec::new();
        for path in paths {
            statuses.push(get(&router, path, GUEST).await.status_code());
        }
        assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
        assert_eq!(attempts("ip:203.0.113.5:path:/items/1").await, 2);
        assert_eq!(attempts("ip:203.0.113.5:path:/items/2").await, 2);
        assert_eq!(attempts("ip:203.0.113.5:path:/items/{id}").await, 0);
    })
    .await;
    let server = app.scope(support::http::TestServer::start(items())).await;
    let mut statuses = Vec::new();
    for path in paths {
        let request = http::Request::get(server.url(path))
            .body(Full::default())
            .unwrap();
        statuses.push(
            server
                .send_from("127.0.0.9".parse().unwrap(), request)
                .await
                .status,
        );
    }
    assert_eq!(statuses, [200, 200, 200, 200, 429, 429]);
    server.stop().await;
}

/// A handler that panics answers 500 inside its route's middleware: an
/// `after` limit counting failures counts it, refuses the third, and every
/// answer carries the throttle's headers.
#[tokio::test]
async fn a_panicking_handler_is_counted_by_an_after_limit_and_carries_the_headers() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = Router::new()
                .post("/login", |req: Request| async move {
                    if req.query_param("user").as_deref() == Some("crash") {
                        panic!("a bug any caller can reach");
                    }
                    HttpResponse::text("bad password").status(401)
                })
                .middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(2)
                        .by("login:203.0.113.5")
                        .after(|r| r.status_code() >= 400),
                ]));
            let mut answers = Vec::new();
            for _ in 0..4 {
                let request = http::Request::post("/login?user=crash")
                    .body(Full::<Bytes>::default())
                    .unwrap();
                let r = handle_request_with_peer(&router, request, GUEST.parse().unwrap()).await;
                answers.push((r.status_code(), remaining(&r).map(str::to_owned)));
            }
            assert_eq!(
                answers,
                [
                    (500, Some("1".to_owned())),
                    (500, Some("0".to_owned())),
                    (429, Some("0".to_owned())),
                    (429, Some("0".to_owned())),
                ]
            );
            assert_eq!(attempts("login:203.0.113.5").await, 2);
        })
        .await;
}

#[tokio::test]
async fn nested_throttles_report_the_tighter_pair() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            // The middleware added first runs outermost, and adds its
            // headers last.
            let inner_tighter = ok_routes(&["/n"])
                .middleware(ThrottleRequestsMiddleware::with(10, 1, "outer"))
                .middleware(ThrottleRequestsMiddleware::with(3, 1, "inner"));
            let r = get(&inner_tighter, "/n", GUEST).await;
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
            assert_eq!(remaining(&r), Some("2"));

            let outer_tighter = ok_routes(&["/m"])
                .middleware(ThrottleRequestsMiddleware::with(2, 1, "outer"))
                .middleware(ThrottleRequestsMiddleware::with(10, 1, "inner"));
            let r = get(&outer_tighter, "/m", GUEST).await;
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("2"));
            assert_eq!(remaining(&r), Some("1"));
        })
        .await;
}

/// Limits that count in one bucket report it after every count of the
/// request, as Laravel reads each bucket after counting: two limits of one
/// throttle whose keys clean to one bucket, and two throttles nested on a
/// route without a prefix, whichever runs outermost.
#[tokio::test]
async fn limits_that_share_a_bucket_report_it_after_every_count() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| {
                vec![
                    Limit::per_minute(5).by("caf\u{e9}"),
                    Limit::per_minute(3).by("cafe"),
                ]
                .into()
            });
            let router =
                ok_routes(&["/cafe"]).middleware(ThrottleRequestsMiddleware::by_name("api"));
            let first = get(&router, "/cafe", GUEST).await;
            assert_eq!(first.status_code(), 200);
            assert_eq!(first.header_str("x-ratelimit-limit"), Some("3"));
            assert_eq!(remaining(&first), Some("1"));
            assert_eq!(attempts("api:cafe").await, 2);
            let second = get(&router, "/cafe", GUEST).await;
            assert_eq!(second.status_code(), 200);
            assert_eq!(second.header_str("x-ratelimit-limit"), Some("3"));
            assert_eq!(remaining(&second), Some("0"));
            assert_eq!(get(&router, "/cafe", GUEST).await.status_code(), 429);
            assert_eq!(attempts("api:cafe").await, 4);

            for (path, outer, inner) in [("/outer-tighter", 3, 10), ("/inner-tighter", 10, 3)] {
                let router = ok_routes(&[path])
                    .middleware(ThrottleRequestsMiddleware::with(outer, 1, ""))
                    .middleware(ThrottleRequestsMiddleware::with(inner, 1, ""));
                let r = get(&router, path, GUEST).await;
                assert_eq!(r.status_code(), 200, "{path}");
                assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"), "{path}");
                assert_eq!(remaining(&r), Some("1"), "{path}");
                assert_eq!(attempts(&format!("ip:203.0.113.5:path:{path}")).await, 2);
            }
        })
        .await;
}

/// Two identical limits count a request twice, under one fallback key: a
/// limit of 2 admits one request a minute.
#[tokio::test]
async fn identical_limits_admit_one_request_a_minute() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/twice"]).middleware(
                ThrottleRequestsMiddleware::with_limits(vec![Limit::per_minute(2).by("a"); 2])
                    .prefix("api"),
            );
            let first = get(&router, "/twice", GUEST).await;
            assert_eq!(first.status_code(), 200);
            assert_eq!(first.header_str("x-ratelimit-limit"), Some("2"));
            assert_eq!(remaining(&first), Some("0"));
            assert_eq!(attempts("api:a:attempts:2:decay:60").await, 2);
            let refused = get(&router, "/twice", GUEST).await;
            assert_eq!(refused.status_code(), 429);
            assert_eq!(refused.header_str("retry-after"), Some("60"));
            assert_eq!(attempts("api:a:attempts:2:decay:60").await, 2);
            clock.advance(Duration::from_secs(60));
            assert_eq!(admitted(&router, "/twice", GUEST, 2).await, 1);
        })
        .await;
}

/// The sliding-window middleware and the throttle layered on one route:
/// the pair of the tighter reaches the client, the outer one refuses first
/// once it is full, and the inner one does not count what the outer
/// refused.
#[tokio::test]
async fn the_driver_and_the_throttle_layer_on_one_route() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| Limit::per_minute(5).by("k").into());
            let driver: Arc<dyn RateLimiterDriver> =
                Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
            let sliding = |max| {
                RateLimitMiddleware::new(
                    driver.clone(),
                    SlidingWindowConfig::new(max, Duration::from_secs(60)),
                    |req| format!("route:{}", req.path()),
                )
            };

            let driver_outside = ok_routes(&["/items"])
                .middleware(sliding(3))
                .middleware(ThrottleRequestsMiddleware::by_name("api"));
            for left in ["2", "1", "0"] {
                let r = get(&driver_outside, "/items", GUEST).await;
                assert_eq!(r.status_code(), 200);
                assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
                assert_eq!(remaining(&r), Some(left));
            }
            let refused = get(&driver_outside, "/items", GUEST).await;
            assert_eq!(refused.status_code(), 429);
            assert_eq!(refused.body_text(), "429 Too Many Requests");
            assert_eq!(refused.header_str("retry-after"), Some("60"));
            assert_eq!(
                attempts("api:k").await,
                3,
                "the throttle never saw the fourth"
            );

            RateLimiter::define("tight", |_req| Limit::per_minute(2).by("t").into());
            let throttle_outside = ok_routes(&["/feed"])
                .middleware(ThrottleRequestsMiddleware::by_name("tight"))
                .middleware(sliding(3));
            for left in ["1", "0"] {
                let r = get(&throttle_outside, "/feed", GUEST).await;
                assert_eq!(r.status_code(), 200);
                assert_eq!(r.header_str("x-ratelimit-limit"), Some("2"));
                assert_eq!(remaining(&r), Some(left));
            }
            let refused = get(&throttle_outside, "/feed", GUEST).await;
            assert_eq!(refused.status_code(), 429);
            assert_eq!(refused.body_text(), "Too Many Attempts.");
            let config = SlidingWindowConfig::new(3, Duration::from_secs(60));
            let left = driver.acquire("route:/feed", &config).await.unwrap();
            assert_eq!(
                left.remaining, 0,
                "the driver counted the two admitted only"
            );
        })
        .await;
}

/// A count left full without its timer (a Laravel application's
/// `clear` of a key with an apostrophe removes only the timer, and an
/// evicted timer does the same) is an ended window: the next request opens
/// a new one, as Laravel's `tooManyAttempts` reads it, rather than being
/// refused until the count's own time to live runs out, or for ever.
#[tokio::test]
async fn a_count_left_full_without_its_timer_opens_a_new_window() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| Limit::per_minute(2).by("k").into());
            let router = ok_routes(&["/x"]).middleware(ThrottleRequestsMiddleware::by_name("api"));
            Cache::put("api:k", "2", Duration::from_secs(300))
                .await
                .unwrap();
            let first = get(&router, "/x", GUEST).await;
            assert_eq!(first.status_code(), 200);
            assert_eq!(remaining(&first), Some("1"));
            assert_eq!(attempts("api:k").await, 1);
            assert_eq!(get(&router, "/x", GUEST).await.status_code(), 200);
            assert_eq!(get(&router, "/x", GUEST).await.status_code(), 429);

            // A count with no time to live at all.
            Cache::increment("ip:203.0.113.5:path:/y", 2).await.unwrap();
            let inline = ok_routes(&["/y"]).middleware(ThrottleRequestsMiddleware::with(2, 1, ""));
            assert_eq!(get(&inline, "/y", GUEST).await.status_code(), 200);
            assert_eq!(attempts("ip:203.0.113.5:path:/y").await, 1);
        })
        .await;
}

/// A limit whose window is no time, on a key no window counts, stores
/// nothing and never limits, and its headers say every place is left, as
/// Laravel's `retriesLeft` reads the count it never stored.
#[tokio::test]
async fn a_window_of_no_time_never_limits_and_reports_every_place_left() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("none", |_req| Limit::per_second(5, 0).by("k").into());
            let router = ok_routes(&["/d"]).middleware(ThrottleRequestsMiddleware::by_name("none"));
            for _ in 0..7 {
                let r = get(&router, "/d", GUEST).await;
                assert_eq!(r.status_code(), 200);
                assert_eq!(r.header_str("x-ratelimit-limit"), Some("5"));
                assert_eq!(remaining(&r), Some("5"));
            }
            assert_eq!(attempts("none:k").await, 0);
        })
        .await;
}

/// A limit whose window is no time counts in a window an earlier hit
/// opened on its key, as Laravel's `tooManyAttempts` then `hit` with a
/// decay of 0 do: admitted while the count is under the maximum (its
/// headers read the count), refused with the window's `Retry-After` when
/// it is full, and a full count whose timer is gone is removed and the
/// request admitted with nothing stored.
#[tokio::test]
async fn a_window_of_no_time_counts_in_a_window_an_earlier_hit_opened() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router =
                ok_routes(&["/z"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_second(3, 0).by("k"),
                ]));
            let opened_at = clock.unix_seconds();
            assert_eq!(RateLimiter::hit("k", 60).await.unwrap(), 1);
            let r = get(&router, "/z", GUEST).await;
            assert_eq!(r.status_code(), 200);
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
            assert_eq!(remaining(&r), Some("1"));
            assert_eq!(r.header_str("retry-after"), None);
            assert_eq!(attempts("k").await, 2);

            assert_eq!(RateLimiter::hit("k", 60).await.unwrap(), 3);
            clock.advance(Duration::from_secs(20));
            let r = get(&router, "/z", GUEST).await;
            assert_eq!(r.status_code(), 429);
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
            assert_eq!(remaining(&r), Some("0"));
            assert_eq!(r.header_str("retry-after"), Some("40"));
            let reset = (opened_at + 60).to_string();
            assert_eq!(r.header_str("x-ratelimit-reset"), Some(reset.as_str()));
            assert_eq!(attempts("k").await, 3);

            // The timer gone, the full count is removed and nothing stored.
            Cache::forget("k:timer").await.unwrap();
            for _ in 0..2 {
                let r = get(&router, "/z", GUEST).await;
                assert_eq!(r.status_code(), 200);
                assert_eq!(remaining(&r), Some("3"));
                assert_eq!(Cache::get("k").await.unwrap(), None);
            }
        })
        .await;
}

/// The same with another limit, whose check comes first, and with a limit
/// that counts after the response: each counts in the open window, and
/// reports every place left on a key with no count.
#[tokio::test]
async fn a_window_of_no_time_counts_in_an_open_window_beside_other_limits() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router =
                ok_routes(&["/two"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(10).by("other"),
                    Limit::per_second(3, 0).by("k"),
                ]));
            let after =
                ok_routes(&["/after"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_second(3, 0).by("a").after(|_| true),
                ]));
            RateLimiter::hit("k", 60).await.unwrap();
            let r = get(&router, "/two", GUEST).await;
            assert_eq!((r.status_code(), remaining(&r)), (200, Some("1")));
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
            let r = get(&router, "/two", GUEST).await;
            assert_eq!((r.status_code(), remaining(&r)), (200, Some("0")));
            let r = get(&router, "/two", GUEST).await;
            assert_eq!(r.status_code(), 429);
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
            assert_eq!(r.header_str("retry-after"), Some("60"));
            assert_eq!((attempts("k").await, attempts("other").await), (3, 2));
            // The window it filled is full for a limit of a minute too.
            let minute =
                ok_routes(&["/m"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(3).by("k"),
                ]));
            let r = get(&minute, "/m", GUEST).await;
            assert_eq!(r.status_code(), 429);
            assert_eq!(r.header_str("retry-after"), Some("60"));
            assert_eq!(attempts("k").await, 3);

            for _ in 0..2 {
                let r = get(&after, "/after", GUEST).await;
                assert_eq!((r.status_code(), remaining(&r)), (200, Some("3")));
                assert_eq!(Cache::get("a").await.unwrap(), None);
            }
            RateLimiter::hit("a", 60).await.unwrap();
            let r = get(&after, "/after", GUEST).await;
            assert_eq!((r.status_code(), remaining(&r)), (200, Some("1")));
            assert_eq!(attempts("a").await, 2);
        })
        .await;
}

#[tokio::test]
async fn by_name_counts_under_the_name_and_each_limit_key() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("single", |_req| Limit::per_minute(3).by("abc").into());
            RateLimiter::define("global", |_req| Limit::per_minute(3).into());
            RateLimiter::define("shared", |req| {
                let ip = req.ip().unwrap_or_default();
                vec![
                    Limit::per_minute(2).by(ip.clone()),
                    Limit::per_hour(5).by(ip),
                ]
                .into()
            });
            let single =
                ok_routes(&["/single"]).middleware(ThrottleRequestsMiddleware::by_name("single"));
            let global =
                ok_routes(&["/global"]).middleware(ThrottleRequestsMiddleware::by_name("global"));
            let shared = ok_routes(&["/shared"])
                .middleware(ThrottleRequestsMiddleware::by_name("shared").prefix("v2"));

            assert_eq!(admitted(&single, "/single", GUEST, 4).await, 3);
            assert_eq!(attempts("single:abc").await, 3);
            get(&global, "/global", GUEST).await;
            get(&global, "/global", OTHER).await;
            assert_eq!(attempts("global:").await, 2);

            assert_eq!(admitted(&shared, "/shared", GUEST, 3).await, 2);
            assert_eq!(
                attempts("v2:shared:203.0.113.5:attempts:2:decay:60").await,
                2
            );
            assert_eq!(
                attempts("v2:shared:203.0.113.5:attempts:5:decay:3600").await,
                2
            );
        })
        .await;
}

#[tokio::test]
async fn with_limits_counts_limits_that_share_a_key_under_fallback_keys() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/items"]).middleware(
                ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_hour(5_000).by("user:1"),
                    Limit::per_minute(60).by("user:1"),
                    Limit::per_minute(10).by("team:9"),
                ])
                .prefix("api"),
            );
            let r = get(&router, "/items", GUEST).await;
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("10"));
            assert_eq!(remaining(&r), Some("9"));
            assert_eq!(attempts("api:user:1:attempts:5000:decay:3600").await, 1);
            assert_eq!(attempts("api:user:1:attempts:60:decay:60").await, 1);
            assert_eq!(attempts("api:team:9").await, 1);
            assert_eq!(attempts("api:user:1").await, 0);
        })
        .await;
}

/// A client cannot step around `with` by spelling the path another way
/// the router still serves, nor an IPv6 client by moving through its /64.
#[tokio::test]
async fn another_spelling_of_the_path_or_address_counts_in_the_same_bucket() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router =
                ok_routes(&["/login"]).middleware(ThrottleRequestsMiddleware::with(2, 1, ""));
            let mut statuses = Vec::new();
            for path in ["/login", "/login/", "//login", "/login//"] {
                statuses.push(get(&router, path, GUEST).await.status_code());
            }
            assert_eq!(statuses, [200, 200, 429, 429]);
            assert_eq!(attempts("ip:203.0.113.5:path:/login").await, 2);

            let mut statuses = Vec::new();
            for peer in [
                "[2001:db8:1:2::1]:1",
                "[2001:db8:1:2::5]:1",
                "[2001:db8:1:2:ffff::9]:1",
            ] {
                statuses.push(get(&router, "/login", peer).await.status_code());
            }
            assert_eq!(statuses, [200, 200, 429]);
            assert_eq!(attempts("ip:2001:db8:1:2::/64:path:/login").await, 2);
            // Another /64 is another client.
            let other = get(&router, "/login", "[2001:db8:1:3::1]:1").await;
            assert_eq!(other.status_code(), 200);
        })
        .await;
}

#[tokio::test]
async fn default_and_prefix_keys() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/admin"])
                .middleware(ThrottleRequestsMiddleware::default().prefix("admin"));
            get(&router, "/admin", GUEST).await;
            assert_eq!(attempts("admin:ip:203.0.113.5").await, 1);
            assert_eq!(attempts("ip:203.0.113.5").await, 0);
        })
        .await;
}

#[tokio::test]
async fn requests_without_an_address_get_a_bucket_each() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/x"]).middleware(ThrottleRequestsMiddleware::with(1, 1, ""));
            for _ in 0..3 {
                let request = http::Request::get("/x").body(Full::<Bytes>::default());
                let r = handle_request(&router, request.unwrap()).await;
                assert_eq!((r.status_code(), remaining(&r)), (200, Some("0")));
            }
        })
        .await;
}

#[test]
fn every_alias_refusal_names_its_reason() {
    let refused = |args: &[&str]| ThrottleRequestsMiddleware::from_alias_args(args).unwrap_err();
    let cases: &[(&[&str], ThrottleAliasError, &str)] = &[
        (
            &["1.5"],
            ThrottleAliasError::NotANumber {
                what: "limit",
                value: "1.5".into(),
            },
            "the limit of `throttle` must be a whole number, got `1.5`",
        ),
        (
            &["-3", "1"],
            ThrottleAliasError::NotANumber {
                what: "limit",
                value: "-3".into(),
            },
            "the limit of `throttle` must be a whole number, got `-3`",
        ),
        (
            &["60", "x"],
            ThrottleAliasError::NotANumber {
                what: "window",
                value: "x".into(),
            },
            "the window of `throttle` must be a whole number, got `x`",
        ),
        (
            &["60", ""],
            ThrottleAliasError::NotANumber {
                what: "window",
                value: "".into(),
            },
            "the window of `throttle` must be a whole number, got ``",
        ),
        (
            &["10|1.5", "1"],
            ThrottleAliasError::NotANumber {
                what: "user limit",
                value: "1.5".into(),
            },
            "the user limit of `throttle` must be a whole number, got `1.5`",
        ),
        (
            &["1e1|10"],
            ThrottleAliasError::NotANumber {
                what: "guest limit",
                value: "1e1".into(),
            },
            "the guest limit of `throttle` must be a whole number, got `1e1`",
        ),
        (
            &["0", "1"],
            ThrottleAliasError::ZeroLimit {
                what: "limit",
                value: "0".into(),
            },
            "the limit of `throttle` must be at least 1, got `0`",
        ),
        (
            &["0|60", "1"],
            ThrottleAliasError::ZeroLimit {
                what: "guest limit",
                value: "0".into(),
            },
            "the guest limit of `throttle` must be at least 1, got `0`",
        ),
        (
            &["10|0", "1"],
            ThrottleAliasError::ZeroLimit {
                what: "user limit",
                value: "0".into(),
            },
            "the user limit of `throttle` must be at least 1, got `0`",
        ),
        (
            &["60", "0"],
            ThrottleAliasError::ZeroWindow { value: "0".into() },
            "the window of `throttle` must be at least 1 minute, got `0`",
        ),
        (
            &["60", "1", "pre", "x"],
            ThrottleAliasError::TooManyArguments { count: 4 },
            "`throttle` takes at most three arguments (limit, window in minutes, prefix), got 4",
        ),
        (
            &["api", "1"],
            ThrottleAliasError::ArgumentsAfterLimiterName { name: "api".into() },
            "`throttle:api` names a rate limiter, which takes no further arguments",
        ),
        (
            &["2fa", "1"],
            ThrottleAliasError::ArgumentsAfterLimiterName { name: "2fa".into() },
            "`throttle:2fa` names a rate limiter, which takes no further arguments",
        ),
        (
            &["1e1"],
            ThrottleAliasError::NotANumber {
                what: "limit",
                value: "1e1".into(),
            },
            "the limit of `throttle` must be a whole number, got `1e1`",
        ),
    ];
    for (args, error, message) in cases {
        let got = refused(args);
        assert_eq!(&got, error, "{args:?}");
        assert_eq!(got.to_string(), *message, "{args:?}");
    }
}

#[tokio::test]
async fn a_refused_alias_fails_the_route_with_its_reason() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let err = ok_routes(&["/login"])
                .try_middleware_named("throttle:5,0")
                .unwrap_err()
                .to_string();
            assert!(err.contains("/login"), "{err}");
            assert!(
                err.contains("the window of `throttle` must be at least 1 minute, got `0`"),
                "{err}"
            );
            let router = ok_routes(&["/login"]).middleware_named("throttle:api,1");
            let err = router.validate().unwrap_err().to_string();
            assert!(err.contains("names a rate limiter"), "{err}");
            // A router with a refused alias answers nothing but 500.
            assert_eq!(get(&router, "/login", GUEST).await.status_code(), 500);
        })
        .await;
}

#[tokio::test]
async fn alias_forms_map_to_their_limits_and_keys() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| Limit::per_minute(2).by("k").into());
            let named = |path: &str, alias: &str| {
                let router = ok_routes(&[path]).middleware_named(alias);
                assert!(router.validate().is_ok(), "{alias}");
                router
            };

            // No arguments: the default, 60 a minute per address.
            let plain = get(&named("/plain", "throttle"), "/plain", GUEST).await;
            assert_eq!(plain.header_str("x-ratelimit-limit"), Some("60"));
            assert_eq!(attempts("ip:203.0.113.5").await, 1);

            // `throttle:3`: a minute.
            let one = named("/one", "throttle:3");
            assert_eq!(admitted(&one, "/one", GUEST, 4).await, 3);
            assert_eq!(attempts("ip:203.0.113.5:path:/one").await, 3);
            clock.advance(Duration::from_secs(60));
            assert_eq!(admitted(&one, "/one", GUEST, 1).await, 1);

            // `throttle:3,2`: two minutes.
            let two = named("/two", "throttle:3,2");
            assert_eq!(admitted(&two, "/two", GUEST, 3).await, 3);
            let refused = get(&two, "/two", GUEST).await;
            assert_eq!(refused.header_str("retry-after"), Some("120"));

            // `throttle:3,1,pre`.
            get(&named("/three", "throttle:3,1,pre"), "/three", GUEST).await;
            assert_eq!(attempts("pre:ip:203.0.113.5:path:/three").await, 1);

            // `throttle:api`.
            let api = named("/named", "throttle:api");
            assert_eq!(admitted(&api, "/named", GUEST, 3).await, 2);
            assert_eq!(attempts("api:k").await, 2);

            // A name that starts with a digit but is not a number, as
            // Laravel's `RateLimiter::for('2fa', ...)` and `throttle:2fa`.
            RateLimiter::define("2fa", |_req| Limit::per_minute(1).by("k").into());
            let two_factor = named("/2fa", "throttle:2fa");
            assert_eq!(admitted(&two_factor, "/2fa", GUEST, 2).await, 1);
            assert_eq!(attempts("2fa:k").await, 1);
        })
        .await;
}

#[tokio::test]
async fn guest_and_user_limits_split_on_the_bar() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/feed"])
                .middleware(SignIn)
                .middleware_named("throttle:10|60,1");
            assert!(router.validate().is_ok());

            let mut guest_admitted = 0;
            for _ in 0..11 {
                let r = get(&router, "/feed", GUEST).await;
                assert_eq!(r.header_str("x-ratelimit-limit"), Some("10"));
                guest_admitted += usize::from(r.status_code() == 200);
            }
            assert_eq!(guest_admitted, 10);

            let mut user_admitted = 0;
            for _ in 0..61 {
                let r = get_as(&router, "/feed", GUEST, "7").await;
                assert_eq!(r.header_str("x-ratelimit-limit"), Some("60"));
                user_admitted += usize::from(r.status_code() == 200);
            }
            assert_eq!(user_admitted, 60);
            assert_eq!(attempts("ip:203.0.113.5:path:/feed").await, 10);
            assert_eq!(attempts("user:7:path:/feed").await, 60);
        })
        .await;
}

#[tokio::test]
async fn success_and_refusal_headers() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/h"]).middleware(ThrottleRequestsMiddleware::with(3, 1, ""));
            for left in ["2", "1", "0"] {
                let r = get(&router, "/h", GUEST).await;
                assert_eq!(r.status_code(), 200);
                assert_eq!(r.body_text(), "ok");
                assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
                assert_eq!(remaining(&r), Some(left));
                assert_eq!(r.header_str("retry-after"), None);
                assert_eq!(r.header_str("x-ratelimit-reset"), None);
            }
            clock.advance(Duration::from_secs(3));
            let r = get(&router, "/h", GUEST).await;
            assert_eq!(r.status_code(), 429);
            assert_eq!(r.body_text(), "Too Many Attempts.");
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
            assert_eq!(remaining(&r), Some("0"));
            assert_eq!(r.header_str("retry-after"), Some("57"));
            let reset = clock_at(12, 1, 0).unix_seconds().to_string();
            assert_eq!(r.header_str("x-ratelimit-reset"), Some(reset.as_str()));
            // Within the last second, Retry-After is 1, never 0.
            clock.advance(Duration::from_millis(56_999));
            let r = get(&router, "/h", GUEST).await;
            assert_eq!(r.header_str("retry-after"), Some("1"));
            clock.advance(Duration::from_millis(1));
            assert_eq!(get(&router, "/h", GUEST).await.status_code(), 200);
        })
        .await;
}

#[tokio::test]
async fn several_limits_report_the_one_with_the_fewest_retries_left() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router =
                ok_routes(&["/m"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(5).by("a"),
                    Limit::per_second(3, 1).by("b"),
                ]));
            let tie =
                ok_routes(&["/tie"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(2).by("c"),
                    Limit::per_minute(10).by("d"),
                ]));
            let r = get(&router, "/m", GUEST).await;
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
            assert_eq!(remaining(&r), Some("2"));
            let r = get(&tie, "/tie", GUEST).await;
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("2"));
            assert_eq!(remaining(&r), Some("1"));
        })
        .await;
}

#[tokio::test]
async fn a_refusal_by_one_limit_counts_in_none() {
    // Laravel 13's split loops: with a per-minute limit of 5 and a
    // per-second limit of 3, the fourth request of a second is refused by
    // the second limit and leaves the minute's count at 3, so two more pass
    // in the next second.
    let clock = clock_at(0, 0, 0);
    app_on(&clock)
        .scope(async {
            let router =
                ok_routes(&["/x"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(5).by("a"),
                    Limit::per_second(3, 1).by("b"),
                ]));
            assert_eq!(admitted(&router, "/x", GUEST, 4).await, 3);
            assert_eq!(attempts("a").await, 3);
            assert_eq!(attempts("b").await, 3);
            clock.advance(Duration::from_secs(1));
            assert_eq!(admitted(&router, "/x", GUEST, 3).await, 2);
            assert_eq!(attempts("a").await, 5);
            let refused = get(&router, "/x", GUEST).await;
            assert_eq!(refused.header_str("x-ratelimit-limit"), Some("5"));
            assert_eq!(refused.header_str("retry-after"), Some("59"));
        })
        .await;
}

/// A memory store that records the counters the throttle counts in, in
/// order, and fills `rival` up to its maximum just before it counts in
/// `trigger`: a request of another replica that took the last place
/// between this request's check and its count.
#[derive(Debug)]
struct RacingStore {
    inner: MemoryStore,
    counted: Mutex<Vec<String>>,
    trigger: &'static str,
    rival: (&'static str, i64),
}

#[async_trait]
impl Store for RacingStore {
    async fn get(&self, key: &str) -> Result<Option<String>, CacheError> {
        self.inner.get(key).await
    }
    async fn put(&self, key: &str, value: &str, ttl: Duration) -> Result<(), CacheError> {
        self.inner.put(key, value, ttl).await
    }
    async fn add(&self, key: &str, value: &str, ttl: Duration) -> Result<bool, CacheError> {
        self.inner.add(key, value, ttl).await
    }
    async fn increment(&self, key: &str, by: i64) -> Result<i64, CacheError> {
        self.inner.increment(key, by).await
    }
    async fn increment_if_below(
        &self,
        key: &str,
        decay_seconds: i64,
        amount: i64,
        ceiling: i64,
    ) -> Result<IncrementOutcome, CacheError> {
        self.inner
            .increment_if_below(key, decay_seconds, amount, ceiling)
            .await
    }
    async fn increment_in_window(
        &self,
        count: WindowIncrement<'_>,
    ) -> Result<IncrementOutcome, CacheError> {
        self.counted.lock().unwrap().push(count.key.to_owned());
        if count.key == self.trigger {
            let (rival, max) = self.rival;
            let timer = format!("{rival}:timer");
            let fill = WindowIncrement {
                key: rival,
                timer_key: &timer,
                amount: max,
                ceiling: max,
                ..count
            };
            self.inner.increment_in_window(fill).await?;
        }
        self.inner.increment_in_window(count).await
    }
    async fn forget(&self, key: &str) -> Result<bool, CacheError> {
        self.inner.forget(key).await
    }
    async fn ttl(&self, key: &str) -> Result<Option<Duration>, CacheError> {
        self.inner.ttl(key).await
    }
    fn name(&self) -> &'static str {
        "racing"
    }
}

/// The bucket with the fewest places left counts first, whatever the list
/// order; a bucket counted before a later limit refuses keeps its count.
#[tokio::test]
async fn the_fewest_places_count_first_and_a_count_made_before_a_refusal_stays() {
    let clock = clock_at(12, 0, 0);
    let store = Arc::new(RacingStore {
        inner: MemoryStore::with_clock(clock.shared()),
        counted: Mutex::new(Vec::new()),
        trigger: "b",
        rival: ("a", 5),
    });
    limiter_app(store.clone(), clock.shared())
        .scope(async {
            let router =
                ok_routes(&["/race"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(5).by("a"),
                    Limit::per_minute(2).by("b"),
                ]));
            // Both empty when checked; "b" has 2 places and "a" 5, so "b"
            // counts first, and "a" fills up in between.
            let r = get(&router, "/race", GUEST).await;
            assert_eq!(*store.counted.lock().unwrap(), ["b", "a"]);
            assert_eq!(r.status_code(), 429);
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("5"));
            assert_eq!(r.header_str("retry-after"), Some("60"));
            assert_eq!(attempts("a").await, 5);
            assert_eq!(attempts("b").await, 1, "the count made first stays");
        })
        .await;
}

#[tokio::test]
async fn a_handler_that_reports_fewer_retries_keeps_its_headers() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = Router::new()
                .get("/own", |req: Request| async move {
                    let left = req.query_param("left").unwrap_or_default();
                    HttpResponse::text("ok")
                        .header("X-RateLimit-Limit", "1000")
                        .header("X-RateLimit-Remaining", left)
                })
                .middleware(ThrottleRequestsMiddleware::with(60, 1, ""));
            // The middleware's count after this request is 59.
            let below = get(&router, "/own?left=3", GUEST).await;
            assert_eq!(below.header_str("x-ratelimit-limit"), Some("1000"));
            assert_eq!(remaining(&below), Some("3"));
            // 58 now: equal is kept.
            let equal = get(&router, "/own?left=58", GUEST).await;
            assert_eq!(equal.header_str("x-ratelimit-limit"), Some("1000"));
            assert_eq!(remaining(&equal), Some("58"));
            // 57 now: above is replaced.
            let above = get(&router, "/own?left=999", GUEST).await;
            assert_eq!(above.header_str("x-ratelimit-limit"), Some("60"));
            assert_eq!(remaining(&above), Some("57"));
        })
        .await;
}

#[tokio::test]
async fn a_handler_error_response_gets_the_headers_too() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = Router::new()
                .get("/fail", |_req: Request| async {
                    Response::Err(HttpResponse::text("nope").status(422))
                })
                .middleware(ThrottleRequestsMiddleware::with(5, 1, ""));
            let r = get(&router, "/fail", GUEST).await;
            assert_eq!((r.status_code(), r.body_text()), (422, "nope".to_owned()));
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("5"));
            assert_eq!(remaining(&r), Some("4"));
        })
        .await;
}

#[tokio::test]
async fn an_after_callback_counts_only_the_responses_it_accepts() {
    let clock = clock_at(0, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("login", |req| {
                Limit::per_minute(1)
                    .by(req.ip().unwrap_or_default())
                    .after(|r| r.status_code() >= 400)
                    .into()
            });
            let router = Router::new()
                .get("/login", status_from_query)
                .middleware(ThrottleRequestsMiddleware::by_name("login"));
            for _ in 0..2 {
                let ok = get(&router, "/login", GUEST).await;
                assert_eq!((ok.status_code(), remaining(&ok)), (200, Some("1")));
            }
            let failed = get(&router, "/login?status=404", GUEST).await;
            assert_eq!((failed.status_code(), remaining(&failed)), (404, Some("0")));
            assert_eq!(attempts("login:203.0.113.5").await, 1);
            // Whatever it would answer, the next request is refused.
            let refused = get(&router, "/login", GUEST).await;
            assert_eq!(refused.status_code(), 429);
            assert_eq!(refused.header_str("retry-after"), Some("60"));
            assert_eq!(attempts("login:203.0.113.5").await, 1);
        })
        .await;
}

#[tokio::test]
async fn after_and_plain_limits_together() {
    let clock = clock_at(0, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = Router::new().get("/login", status_from_query).middleware(
                ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(10).by("all"),
                    Limit::per_minute(2)
                        .by("failed")
                        .after(|r| r.status_code() >= 400),
                ]),
            );
            let ok = get(&router, "/login", GUEST).await;
            // all: 9 left, failed: 2 left.
            assert_eq!(ok.header_str("x-ratelimit-limit"), Some("2"));
            assert_eq!(remaining(&ok), Some("2"));
            get(&router, "/login?status=401", GUEST).await;
            let second = get(&router, "/login?status=401", GUEST).await;
            assert_eq!(remaining(&second), Some("0"));
            assert_eq!(get(&router, "/login", GUEST).await.status_code(), 429);
            assert_eq!(attempts("all").await, 3);
            assert_eq!(attempts("failed").await, 2);
        })
        .await;
}

#[tokio::test]
async fn a_response_callback_replaces_the_refusal_and_keeps_its_own_headers() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router =
                ok_routes(&["/r"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(1).by("r").response(|req| {
                        HttpResponse::text(format!("slow down on {}", req.path()))
                            .status(503)
                            .header("Retry-After", "600")
                    }),
                ]));
            assert_eq!(get(&router, "/r", GUEST).await.status_code(), 200);
            clock.advance(Duration::from_secs(10));
            let r = get(&router, "/r", GUEST).await;
            assert_eq!(r.status_code(), 503);
            assert_eq!(r.body_text(), "slow down on /r");
            assert_eq!(r.header_str("retry-after"), Some("600"));
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("1"));
            assert_eq!(remaining(&r), Some("0"));
            let reset = clock_at(12, 1, 0).unix_seconds().to_string();
            assert_eq!(r.header_str("x-ratelimit-reset"), Some(reset.as_str()));
            assert_eq!(attempts("r").await, 1);
        })
        .await;
}

#[tokio::test]
async fn a_named_limiter_may_answer_or_let_through_uncounted() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("gate", |req| {
                if req.header("x-admin").is_some() {
                    Limit::none().into()
                } else if req.header("x-banned").is_some() {
                    HttpResponse::text("go away").status(403).into()
                } else {
                    Limit::per_minute(1).by("gate").into()
                }
            });
            let router = ok_routes(&["/g"]).middleware(ThrottleRequestsMiddleware::by_name("gate"));
            let with = |name: &'static str| {
                let request = http::Request::get("/g")
                    .header(name, "1")
                    .body(Full::<Bytes>::default())
                    .unwrap();
                handle_request_with_peer(&router, request, GUEST.parse().unwrap())
            };
            for _ in 0..3 {
                let admin = with("x-admin").await;
                assert_eq!(admin.status_code(), 200);
                assert_eq!(admin.header_str("x-ratelimit-limit"), None);
                assert_eq!(remaining(&admin), None);
            }
            let banned = with("x-banned").await;
            assert_eq!(
                (banned.status_code(), banned.body_text()),
                (403, "go away".into())
            );
            assert_eq!(banned.header_str("x-ratelimit-limit"), None);
            assert_eq!(attempts("gate:gate").await, 0);
            assert_eq!(attempts("gate:").await, 0);
            let counted = get(&router, "/g", GUEST).await;
            assert_eq!(remaining(&counted), Some("0"));
            assert_eq!(attempts("gate:gate").await, 1);
        })
        .await;
}

#[tokio::test]
async fn a_missing_named_limiter_answers_503_naming_it() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/api"]).middleware_named("throttle:api");
            let r = get(&router, "/api", GUEST).await;
            assert_eq!(r.status_code(), 503);
            assert_eq!(r.body_text(), "Rate limiter [api] is not defined.");
            assert_eq!(r.header_str("x-ratelimit-limit"), None);
            // Defined later, it is found: the lookup is per request.
            RateLimiter::define("api", |_req| Limit::per_minute(5).into());
            assert_eq!(remaining(&get(&router, "/api", GUEST).await), Some("4"));
        })
        .await;
}

/// A first argument with a `|` that is not two numbers names a limiter, as
/// any other first argument that is not a number does (the API reference:
/// "A first argument of two whole numbers joined by | is the guest's limit
/// and the signed-in user's ... Any other first argument that is not a
/// number names a limiter"): `api|v2`, and `5|api` too, whose one half is a
/// number.
#[tokio::test]
async fn a_limiter_named_with_a_bar_is_found_by_its_name() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            for name in ["api|v2", "5|api"] {
                RateLimiter::define(name, |_req| Limit::per_minute(2).by("k").into());
                let router = ok_routes(&["/v2"]).middleware_named(&format!("throttle:{name}"));
                assert!(router.validate().is_ok(), "{:?}", router.validate());
                let statuses = [
                    get(&router, "/v2", GUEST).await.status_code(),
                    get(&router, "/v2", GUEST).await.status_code(),
                    get(&router, "/v2", GUEST).await.status_code(),
                ];
                assert_eq!(statuses, [200, 200, 429], "throttle:{name}");
                assert_eq!(attempts(&format!("{name}:k")).await, 2);
            }
        })
        .await;
}

#[tokio::test]
async fn a_store_that_cannot_count_gets_the_backend_policy() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            // A value that is not a count makes the store fail on the key.
            Cache::put(
                "ip:203.0.113.5:path:/open",
                "garbage",
                Duration::from_secs(60),
            )
            .await
            .unwrap();
            Cache::put(
                "closed:ip:203.0.113.5:path:/closed",
                "garbage",
                Duration::from_secs(60),
            )
            .await
            .unwrap();
            let open = ok_routes(&["/open"]).middleware(ThrottleRequestsMiddleware::with(5, 1, ""));
            let closed = ok_routes(&["/closed"]).middleware(
                ThrottleRequestsMiddleware::with(5, 1, "closed")
                    .on_backend_error(BackendErrorPolicy::FailClosed),
            );
            let open = get(&open, "/open", GUEST).await;
            assert_eq!((open.status_code(), open.body_text()), (200, "ok".into()));
            assert_eq!(open.header_str("x-ratelimit-limit"), None);
            let closed = get(&closed, "/closed", GUEST).await;
            assert_eq!(closed.status_code(), 503);
            assert_eq!(closed.header_str("retry-after"), Some("1"));
            assert_eq!(
                ThrottleRequestsMiddleware::default().backend_error_policy(),
                BackendErrorPolicy::FailOpen
            );
        })
        .await;
}

/// One throttle serving two containers counts each request in the limiter
/// of the container it runs in, whichever container it saw first.
#[tokio::test]
async fn one_throttle_counts_in_each_containers_own_limiter() {
    let clock = clock_at(12, 0, 0);
    let (first, second) = (app_on(&clock), app_on(&clock));
    let router = ok_routes(&["/login"]).middleware(ThrottleRequestsMiddleware::with(2, 1, ""));
    let key = "ip:203.0.113.5:path:/login";

    first
        .scope(async {
            assert_eq!(admitted(&router, "/login", GUEST, 3).await, 2);
            assert_eq!(attempts(key).await, 2);
        })
        .await;
    second
        .scope(async {
            let r = get(&router, "/login", GUEST).await;
            assert_eq!((r.status_code(), remaining(&r)), (200, Some("1")));
            assert_eq!(attempts(key).await, 1);
        })
        .await;
    first
        .scope(async {
            assert_eq!(get(&router, "/login", GUEST).await.status_code(), 429);
            assert_eq!(attempts(key).await, 2);
        })
        .await;
    second
        .scope(async {
            assert_eq!(admitted(&router, "/login", GUEST, 2).await, 1);
            assert_eq!(attempts(key).await, 2);
        })
        .await;
}

/// After its first request, a throttle borrows the limiter it kept for the
/// length of a request instead of holding a clone of it: with two requests
/// in flight, their handlers see the container's reference, the
/// throttle's kept one and their own two, and no clone of the throttle's.
#[tokio::test]
async fn a_throttle_borrows_the_limiter_it_kept() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let (inside, leave) = (
                std::sync::Arc::new(tokio::sync::Barrier::new(2)),
                std::sync::Arc::new(tokio::sync::Barrier::new(2)),
            );
            let router = Router::new()
                .get("/", move |req: Request| {
                    let (inside, leave) = (inside.clone(), leave.clone());
                    async move {
                        let limiter = RateLimiter::instance();
                        if req.query_param("together").is_some() {
                            inside.wait().await;
                        }
                        let seen = std::sync::Arc::strong_count(&limiter);
                        if req.query_param("together").is_some() {
                            leave.wait().await;
                        }
                        HttpResponse::text(seen.to_string())
                    }
                })
                .middleware(ThrottleRequestsMiddleware::with(100, 1, ""));
            // The first request keeps a clone and counts with another.
            assert_eq!(get(&router, "/", GUEST).await.body_text(), "4");
            let (a, b) = tokio::join!(
                get(&router, "/?together=1", GUEST),
                get(&router, "/?together=1", OTHER)
            );
            assert_eq!((a.body_text(), b.body_text()), ("4".into(), "4".into()));
        })
        .await;
}

/// A limit key a caller chooses (`by(email)`) cannot name another bucket's
/// timer, `<key>:timer`, the entry that holds when its window ends: a
/// guest asking once as `alice:timer` leaves Alice's window as it was, and
/// her refusal says 60 seconds, not 1.
#[tokio::test]
async fn a_caller_chosen_key_cannot_write_another_buckets_timer() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("login", |req| {
                Limit::per_minute(5)
                    .by(req.query_param("email").unwrap_or_default())
                    .into()
            });
            let router =
                ok_routes(&["/login"]).middleware(ThrottleRequestsMiddleware::by_name("login"));
            // As written, and spelled so that cleaning makes it `:timer`.
            for decoy in ["alice:timer", "alice:tim%C3%A9r", "alice:timer~"] {
                let r = get(&router, &format!("/login?email={decoy}"), GUEST).await;
                assert_eq!(r.status_code(), 200, "{decoy}");
            }
            let ends_at = (clock.unix_seconds() + 60).to_string();
            assert_eq!(
                Cache::get("login:alice:timer").await.unwrap(),
                None,
                "no window opened for Alice yet"
            );
            for _ in 0..5 {
                assert_eq!(
                    get(&router, "/login?email=alice", GUEST)
                        .await
                        .status_code(),
                    200
                );
            }
            assert_eq!(
                Cache::get("login:alice:timer").await.unwrap(),
                Some(ends_at)
            );
            let refused = get(&router, "/login?email=alice", GUEST).await;
            assert_eq!(refused.status_code(), 429);
            assert_eq!(refused.header_str("retry-after"), Some("60"));
            // The decoys counted in buckets of their own, one each.
            assert_eq!(
                RateLimiter::attempts("login:alice:timer~").await.unwrap(),
                2
            );
            assert_eq!(
                RateLimiter::attempts("login:alice:timer~~").await.unwrap(),
                1
            );
        })
        .await;
}

/// A full bucket stays full while its window's timer is there, whatever
/// the timer holds: a timer's value raised by some other writer opens no
/// new window, as Laravel resets a count only when its timer is gone.
#[tokio::test]
async fn a_full_bucket_is_not_reset_while_its_timer_exists() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("login", |_req| Limit::per_minute(3).by("k").into());
            let router =
                ok_routes(&["/login"]).middleware(ThrottleRequestsMiddleware::by_name("login"));
            let mut admitted = 0;
            for round in 0..3 {
                if round > 0 {
                    Cache::increment("login:k:timer", 1).await.unwrap();
                }
                for _ in 0..4 {
                    if get(&router, "/login", GUEST).await.status_code() == 200 {
                        admitted += 1;
                    }
                }
            }
            assert_eq!(admitted, 3);
            // Once the timer is gone, a new window opens.
            clock.advance(Duration::from_secs(64));
            assert_eq!(get(&router, "/login", GUEST).await.status_code(), 200);
        })
        .await;
}

/// The headers read the bucket after the handler, as Laravel's
/// `retriesLeft` does after the response: a handler that charges the
/// throttle's bucket more (an expensive call) or clears it (a login that
/// succeeded) is seen in `X-RateLimit-Remaining`.
#[tokio::test]
async fn remaining_is_read_after_a_handler_that_counts_or_clears() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| Limit::per_minute(10).by("u1").into());
            RateLimiter::define("login", |_req| Limit::per_minute(5).by("alice").into());
            let export = Router::new()
                .get("/export", |_req: Request| async {
                    RateLimiter::increment("api:u1", 60, 4).await.unwrap();
                    HttpResponse::text("ok")
                })
                .middleware(ThrottleRequestsMiddleware::by_name("api"));
            let login = Router::new()
                .get("/login", |_req: Request| async {
                    RateLimiter::clear("login:alice").await.unwrap();
                    HttpResponse::text("welcome")
                })
                .middleware(ThrottleRequestsMiddleware::by_name("login"));
            let router = export.merge(login);
            let r = get(&router, "/export", GUEST).await;
            assert_eq!(r.status_code(), 200);
            assert_eq!(RateLimiter::attempts("api:u1").await.unwrap(), 5);
            assert_eq!(r.header_str("x-ratelimit-remaining"), Some("5"));
            let r = get(&router, "/export", GUEST).await;
            assert_eq!(r.header_str("x-ratelimit-remaining"), Some("0"));
            assert_eq!(get(&router, "/export", GUEST).await.status_code(), 429);

            let r = get(&router, "/login", GUEST).await;
            assert_eq!(r.status_code(), 200);
            assert_eq!(RateLimiter::attempts("login:alice").await.unwrap(), 0);
            assert_eq!(r.header_str("x-ratelimit-remaining"), Some("5"));
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("5"));
        })
        .await;
}

/// Laravel runs each of a route's middleware once (`uniqueMiddleware`):
/// `throttle:2,1` named on a route and again on its group counts each
/// request once, so 2 are admitted a minute, not 1.
#[tokio::test]
async fn the_same_throttle_named_twice_on_a_route_counts_a_request_once() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let router = ok_routes(&["/x"])
                .middleware_named("throttle:2,1")
                .middleware_named("throttle:2,1")
                .wrap_named("throttle:2,1");
            assert_eq!(router.routes()[0].middleware, vec!["throttle:2,1"]);
            assert_eq!(admitted(&router, "/x", GUEST, 3).await, 2);
            assert_eq!(attempts("ip:203.0.113.5:path:/x").await, 2);
        })
        .await;
}

/// A group's sign-in runs before its routes' own throttle when the group
/// wraps them, as Laravel runs a group's middleware before its routes':
/// the throttle counts the signed-in user, not the address. Added with
/// `middleware` it runs after, and the user counts as the address.
#[tokio::test]
async fn a_group_wrapped_in_a_sign_in_is_throttled_by_user() {
    let clock = clock_at(12, 0, 0);
    app_on(&clock)
        .scope(async {
            let login = || {
                Router::new()
                    .get("/login", |_req: Request| async { HttpResponse::text("ok") })
                    .middleware_named("throttle:5,1")
            };
            let wrapped = Router::new().merge(login()).wrap(SignIn);
            get_as(&wrapped, "/login", GUEST, "7").await;
            assert_eq!(attempts("user:7:path:/login").await, 1);
            assert_eq!(attempts("ip:203.0.113.5:path:/login").await, 0);

            let inside = Router::new().merge(login()).middleware(SignIn);
            get_as(&inside, "/login", GUEST, "7").await;
            assert_eq!(attempts("user:7:path:/login").await, 1);
            assert_eq!(attempts("ip:203.0.113.5:path:/login").await, 1);
            assert_eq!(
                wrapped.routes()[0].middleware,
                vec!["throttle:5,1"],
                "a middleware given as a value has no name to list"
            );
        })
        .await;
}
