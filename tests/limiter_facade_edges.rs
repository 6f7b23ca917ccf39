//! Edge values of the Laravel-shape side: limits of zero and below, windows
//! of no time, `Limit::none()` alone and in a list, a named limiter whose
//! list has one full limit, one key in two named limiters, keys with
//! Unicode and very long keys, on memory, Redis and a cluster; and a burst
//! of failed logins under a limit that counts after the response.

mod support;
mod throttle_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use support::clock_at;
use suprnova::clock::Clock;
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router, ThrottleRequestsMiddleware};
use throttle_support::{get_as_guest, memory_app, ok_routes, status_and_counts as pair};

/// Asks `uri` once for each of `expected`, in turn: each answer's status,
/// `X-RateLimit-Limit` and `X-RateLimit-Remaining`.
async fn answers(router: &Router, uri: &str, expected: &[(u16, Option<&str>, Option<&str>)]) {
    for (n, want) in expected.iter().enumerate() {
        assert_eq!(
            pair(&get_as_guest(router, uri).await),
            *want,
            "{uri}, request {}",
            n + 1
        );
    }
}

async fn attempts(key: &str) -> i64 {
    RateLimiter::attempts(key).await.unwrap()
}

#[tokio::test]
async fn one_key_in_two_named_limiters_counts_in_two_buckets() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| Limit::per_minute(2).by("k").into());
            RateLimiter::define("uploads", |_req| Limit::per_minute(3).by("k").into());
            let api = ok_routes(&["/a"]).middleware_named("throttle:api");
            let uploads = ok_routes(&["/u"]).middleware_named("throttle:uploads");
            let router = api.merge(uploads);
            answers(
                &router,
                "/a",
                &[(200, Some("2"), Some("1")), (200, Some("2"), Some("0"))],
            )
            .await;
            assert_eq!(get_as_guest(&router, "/a").await.status_code(), 429);
            for left in ["2", "1", "0"] {
                assert_eq!(
                    pair(&get_as_guest(&router, "/u").await),
                    (200, Some("3"), Some(left))
                );
            }
            assert_eq!(get_as_guest(&router, "/u").await.status_code(), 429);
            assert_eq!(attempts("api:k").await, 2);
            assert_eq!(attempts("uploads:k").await, 3);
            assert_eq!(attempts("k").await, 0);
        })
        .await;
}

#[tokio::test]
async fn two_named_limiters_on_one_route_report_the_tighter_and_the_tighter_refuses() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("wide", |_req| Limit::per_minute(5).by("k").into());
            RateLimiter::define("narrow", |_req| Limit::per_minute(3).by("k").into());
            let router = ok_routes(&["/x"])
                .middleware_named("throttle:wide")
                .middleware_named("throttle:narrow");
            for left in ["2", "1", "0"] {
                assert_eq!(
                    pair(&get_as_guest(&router, "/x").await),
                    (200, Some("3"), Some(left))
                );
            }
            let refused = get_as_guest(&router, "/x").await;
            assert_eq!(pair(&refused), (429, Some("3"), Some("0")));
            assert_eq!(refused.header_str("retry-after"), Some("60"));
            assert_eq!(attempts("narrow:k").await, 3);
        })
        .await;
}

#[tokio::test]
async fn a_full_limit_of_a_named_list_refuses_with_its_headers_and_counts_none() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| {
                vec![
                    Limit::per_minute(10).by("wide"),
                    Limit::per_second(2, 30).by("narrow"),
                    Limit::per_hour(100).by("hourly"),
                ]
                .into()
            });
            let router = ok_routes(&["/x"]).middleware_named("throttle:api");
            answers(
                &router,
                "/x",
                &[(200, Some("2"), Some("1")), (200, Some("2"), Some("0"))],
            )
            .await;
            clock.advance(Duration::from_secs(10));
            let refused = get_as_guest(&router, "/x").await;
            assert_eq!(pair(&refused), (429, Some("2"), Some("0")));
            assert_eq!(refused.body_text(), "Too Many Attempts.");
            assert_eq!(refused.header_str("retry-after"), Some("20"));
            let reset = (clock.unix_seconds() + 20).to_string();
            assert_eq!(
                refused.header_str("x-ratelimit-reset"),
                Some(reset.as_str())
            );
            for key in ["api:wide", "api:narrow", "api:hourly"] {
                assert_eq!(attempts(key).await, 2, "{key}");
            }
            // The narrow window ends and opens again with this request: one
            // place left of 2 is still the fewest (the minute has 7).
            clock.advance(Duration::from_secs(20));
            assert_eq!(
                pair(&get_as_guest(&router, "/x").await),
                (200, Some("2"), Some("1"))
            );
            assert_eq!(attempts("api:wide").await, 3);
        })
        .await;
}

#[tokio::test]
async fn unlimited_alone_passes_uncounted_and_in_a_list_the_other_limit_reports() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("free", |_req| Limit::none().into());
            RateLimiter::define("mixed", |_req| {
                vec![Limit::none().into(), Limit::per_minute(2)].into()
            });
            let free = ok_routes(&["/free"]).middleware_named("throttle:free");
            let mixed = ok_routes(&["/mixed"]).middleware_named("throttle:mixed");
            let router = free.merge(mixed);
            for _ in 0..100 {
                assert_eq!(
                    pair(&get_as_guest(&router, "/free").await),
                    (200, None, None)
                );
            }
            assert_eq!(attempts("free:").await, 0);
            answers(
                &router,
                "/mixed",
                &[
                    (200, Some("2"), Some("1")),
                    (200, Some("2"), Some("0")),
                    (429, Some("2"), Some("0")),
                ],
            )
            .await;
            // Both limits had the empty key: they count under fallback keys.
            assert_eq!(attempts("mixed:attempts:2:decay:60").await, 2);
            let unlimited = format!("mixed:attempts:{}:decay:60", i64::MAX);
            assert_eq!(attempts(&unlimited).await, 2);
        })
        .await;
}

#[tokio::test]
async fn a_limit_of_zero_or_below_refuses_every_request_and_stores_nothing() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("zero", |_req| Limit::per_minute(0).by("z").into());
            RateLimiter::define("negative", |_req| Limit::per_minute(-3).by("n").into());
            let zero = ok_routes(&["/zero"]).middleware_named("throttle:zero");
            let negative = ok_routes(&["/negative"]).middleware_named("throttle:negative");
            let router = zero.merge(negative);
            for _ in 0..3 {
                let r = get_as_guest(&router, "/zero").await;
                assert_eq!(pair(&r), (429, Some("0"), Some("0")));
                assert!(r.header_str("retry-after").is_some());
                let r = get_as_guest(&router, "/negative").await;
                assert_eq!(
                    (r.status_code(), r.header_str("x-ratelimit-remaining")),
                    (429, Some("0"))
                );
            }
            assert_eq!(attempts("zero:z").await, 0);
            assert_eq!(attempts("negative:n").await, 0);
            assert_eq!(RateLimiter::available_in("zero:z").await.unwrap(), 0);
        })
        .await;
}

#[tokio::test]
async fn a_window_of_no_time_or_below_never_limits_and_reports_every_place() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("none", |_req| {
                vec![
                    Limit::per_second(3, 0).by("a"),
                    Limit::per_second(3, -60).by("b"),
                ]
                .into()
            });
            let router = ok_routes(&["/n"]).middleware_named("throttle:none");
            for _ in 0..10 {
                assert_eq!(
                    pair(&get_as_guest(&router, "/n").await),
                    (200, Some("3"), Some("3"))
                );
            }
            assert_eq!(attempts("none:a").await, 0);
            assert_eq!(attempts("none:b").await, 0);
        })
        .await;
}

#[tokio::test]
async fn unicode_keys_count_in_their_cleaned_bucket() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| {
                Limit::per_minute(3).by("José@exämple.com ½ 日本 😀").into()
            });
            let router = ok_routes(&["/u"]).middleware_named("throttle:api");
            answers(
                &router,
                "/u",
                &[(200, Some("3"), Some("2")), (200, Some("3"), Some("1"))],
            )
            .await;
            // Read raw, or by the key the cleaning gives: one bucket.
            assert_eq!(attempts("api:José@exämple.com ½ 日本 😀").await, 2);
            assert_eq!(attempts("api:Jose@example.com ½ 日本 😀").await, 2);
            RateLimiter::hit("api:Jose@example.com ½ 日本 😀", 60)
                .await
                .unwrap();
            assert_eq!(
                pair(&get_as_guest(&router, "/u").await),
                (429, Some("3"), Some("0"))
            );
        })
        .await;
}

#[tokio::test]
async fn a_very_long_key_counts_refuses_and_clears() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            // A timer key of 128 bytes, the most one holds in place, and of
            // 129; then 200,000 bytes with characters that clean.
            for (n, long) in [
                "k".repeat(116),
                "k".repeat(117),
                "é".repeat(61),
                "ab'é".repeat(40_000),
            ]
            .into_iter()
            .enumerate()
            {
                let name = format!("long{n}");
                let key = long.clone();
                RateLimiter::define(name.clone(), move |_req| {
                    Limit::per_minute(2).by(key.clone()).into()
                });
                let path = format!("/l{n}");
                let router =
                    ok_routes(&[path.as_str()]).middleware_named(&format!("throttle:{name}"));
                assert_eq!(
                    pair(&get_as_guest(&router, &path).await),
                    (200, Some("2"), Some("1"))
                );
                assert_eq!(
                    pair(&get_as_guest(&router, &path).await),
                    (200, Some("2"), Some("0"))
                );
                let refused = get_as_guest(&router, &path).await;
                assert_eq!(pair(&refused), (429, Some("2"), Some("0")), "{n}");
                assert_eq!(refused.header_str("retry-after"), Some("60"), "{n}");
                let full = format!("{name}:{long}");
                assert_eq!(attempts(&full).await, 2, "{n}");
                assert_eq!(RateLimiter::available_in(&full).await.unwrap(), 60, "{n}");
                RateLimiter::clear(&full).await.unwrap();
                assert_eq!(
                    pair(&get_as_guest(&router, &path).await),
                    (200, Some("2"), Some("1")),
                    "{n}"
                );
            }
        })
        .await;
}

#[tokio::test]
async fn counters_take_negative_amounts_and_maximums_as_laravel_does() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            assert_eq!(RateLimiter::increment("neg", 60, -3).await.unwrap(), -3);
            assert_eq!(RateLimiter::remaining("neg", 5).await.unwrap(), 8);
            assert!(RateLimiter::too_many_attempts("neg", -4).await.unwrap());
            assert!(!RateLimiter::too_many_attempts("neg", -2).await.unwrap());
            // Taking back a negative amount counts it.
            assert_eq!(RateLimiter::decrement("neg", 60, -2).await.unwrap(), -1);
            assert_eq!(
                RateLimiter::decrement("neg", 60, i64::MIN).await.unwrap(),
                i64::MAX - 1
            );
            assert_eq!(RateLimiter::remaining("neg", -5).await.unwrap(), 0);
            assert_eq!(RateLimiter::available_in("neg").await.unwrap(), 60);
            // A maximum of 0 runs nothing and counts nothing.
            let ran = RateLimiter::attempt("none", 0, || async { "ran" }, 60)
                .await
                .unwrap();
            assert_eq!(ran, None);
            assert_eq!(attempts("none").await, 0);
            assert!(!RateLimiter::hit_and_check("edge", 1, 60).await.unwrap());
            assert!(RateLimiter::hit_and_check("edge", 1, 60).await.unwrap());
            assert!(
                !RateLimiter::hit_and_check("edge", i64::MAX, 60)
                    .await
                    .unwrap()
            );
            assert_eq!(attempts("edge").await, 3);
        })
        .await;
}

#[tokio::test]
async fn a_response_callback_on_the_full_limit_of_a_list_gets_the_missing_headers() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("login", |_req| {
                vec![
                    Limit::per_minute(5).by("ip"),
                    Limit::per_minute(1)
                        .by("account")
                        .response(|req: &Request| {
                            HttpResponse::text(format!("slow down on {}", req.path())).status(429)
                        }),
                ]
                .into()
            });
            let router = ok_routes(&["/login"]).middleware_named("throttle:login");
            assert_eq!(
                pair(&get_as_guest(&router, "/login").await),
                (200, Some("1"), Some("0"))
            );
            let refused = get_as_guest(&router, "/login").await;
            assert_eq!(refused.body_text(), "slow down on /login");
            assert_eq!(pair(&refused), (429, Some("1"), Some("0")));
            assert_eq!(refused.header_str("retry-after"), Some("60"));
            assert_eq!(attempts("login:ip").await, 1);
        })
        .await;
}

#[tokio::test]
async fn with_limits_and_a_prefix_keep_the_fallback_keys_under_the_prefix() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = ok_routes(&["/p"]).middleware(
                ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_minute(3).by("u"),
                    Limit::per_hour(10).by("u"),
                ])
                .prefix("grp"),
            );
            assert_eq!(
                pair(&get_as_guest(&router, "/p").await),
                (200, Some("3"), Some("2"))
            );
            assert_eq!(attempts("grp:u:attempts:3:decay:60").await, 1);
            assert_eq!(attempts("grp:u:attempts:10:decay:3600").await, 1);
        })
        .await;
}

/// The edges above that need no clock step, on a Redis store and on a
/// Redis Cluster: the count's script and the cluster's two calls meet
/// the same keys and numbers.
#[cfg(feature = "redis")]
async fn edges_without_a_clock_step() {
    RateLimiter::define("list", |_req| {
        vec![
            Limit::per_minute(10).by("wide"),
            Limit::per_second(2, 30).by("narrow"),
        ]
        .into()
    });
    RateLimiter::define("zero", |_req| Limit::per_minute(0).by("z").into());
    RateLimiter::define("nowindow", |_req| {
        vec![
            Limit::per_second(3, 0).by("a"),
            Limit::per_second(3, -60).by("b"),
        ]
        .into()
    });
    RateLimiter::define("mixed", |_req| {
        vec![Limit::none().into(), Limit::per_minute(2)].into()
    });
    RateLimiter::define("free", |_req| Limit::none().into());
    let long = "ab'é{x}".repeat(20_000);
    let long_key = long.clone();
    RateLimiter::define("long", move |_req| {
        Limit::per_minute(2).by(long_key.clone()).into()
    });
    RateLimiter::define("uni", |_req| {
        Limit::per_minute(3).by("José@exämple.com ½ 日本 😀").into()
    });
    let router = ok_routes(&["/list"])
        .middleware_named("throttle:list")
        .merge(ok_routes(&["/zero"]).middleware_named("throttle:zero"))
        .merge(ok_routes(&["/nowindow"]).middleware_named("throttle:nowindow"))
        .merge(ok_routes(&["/mixed"]).middleware_named("throttle:mixed"))
        .merge(ok_routes(&["/free"]).middleware_named("throttle:free"))
        .merge(ok_routes(&["/long"]).middleware_named("throttle:long"))
        .merge(ok_routes(&["/uni"]).middleware_named("throttle:uni"));

    answers(
        &router,
        "/list",
        &[(200, Some("2"), Some("1")), (200, Some("2"), Some("0"))],
    )
    .await;
    let refused = get_as_guest(&router, "/list").await;
    assert_eq!(pair(&refused), (429, Some("2"), Some("0")));
    let retry: i64 = refused.header_str("retry-after").unwrap().parse().unwrap();
    assert!((29..=30).contains(&retry), "{retry}");
    assert_eq!(attempts("list:wide").await, 2);
    assert_eq!(attempts("list:narrow").await, 2);

    for _ in 0..3 {
        assert_eq!(
            pair(&get_as_guest(&router, "/zero").await),
            (429, Some("0"), Some("0"))
        );
    }
    assert_eq!(attempts("zero:z").await, 0);

    for _ in 0..5 {
        assert_eq!(
            pair(&get_as_guest(&router, "/nowindow").await),
            (200, Some("3"), Some("3"))
        );
    }
    assert_eq!(attempts("nowindow:a").await, 0);
    assert_eq!(attempts("nowindow:b").await, 0);

    answers(
        &router,
        "/mixed",
        &[
            (200, Some("2"), Some("1")),
            (200, Some("2"), Some("0")),
            (429, Some("2"), Some("0")),
        ],
    )
    .await;
    for _ in 0..5 {
        assert_eq!(
            pair(&get_as_guest(&router, "/free").await),
            (200, None, None)
        );
    }

    answers(
        &router,
        "/long",
        &[
            (200, Some("2"), Some("1")),
            (200, Some("2"), Some("0")),
            (429, Some("2"), Some("0")),
        ],
    )
    .await;
    assert_eq!(attempts(&format!("long:{long}")).await, 2);
    RateLimiter::clear(&format!("long:{long}")).await.unwrap();
    assert_eq!(
        pair(&get_as_guest(&router, "/long").await),
        (200, Some("2"), Some("1"))
    );

    assert_eq!(
        pair(&get_as_guest(&router, "/uni").await),
        (200, Some("3"), Some("2"))
    );
    assert_eq!(attempts("uni:Jose@example.com ½ 日本 😀").await, 1);

    assert_eq!(RateLimiter::increment("neg", 60, -3).await.unwrap(), -3);
    assert_eq!(RateLimiter::remaining("neg", 5).await.unwrap(), 8);
    assert!(RateLimiter::too_many_attempts("neg", -4).await.unwrap());
    assert_eq!(RateLimiter::decrement("neg", 60, -2).await.unwrap(), -1);
    let ran = RateLimiter::attempt("nothing", 0, || async { "ran" }, 60)
        .await
        .unwrap();
    assert_eq!(ran, None);
    assert_eq!(attempts("nothing").await, 0);
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_edges_hold_on_redis() {
    let redis = support::redis::RedisServer::start();
    let app = throttle_support::app_on_redis(&redis.url(), &support::unique_prefix("edges"));
    app.scope(edges_without_a_clock_step()).await;
}

#[cfg(feature = "redis")]
#[tokio::test]
async fn the_edges_hold_on_a_redis_cluster() {
    let cluster = support::redis::RedisCluster::start(3);
    let app = throttle_support::app_on_redis(&cluster.url(), &support::unique_prefix("edges"));
    app.scope(edges_without_a_clock_step()).await;
}

/// A burst of `guesses` failed logins sent at once over HTTP to a route
/// whose named limiter `login` is `limits`, with a handler that takes
/// 200 ms to check a password and answers 401: how many reached the
/// handler, and how many were refused.
async fn failed_login_burst(limits: fn(&Request) -> Vec<Limit>, guesses: usize) -> (usize, usize) {
    RateLimiter::define("login", move |req| limits(req).into());
    let reached = Arc::new(AtomicUsize::new(0));
    let seen = reached.clone();
    let router = Router::new()
        .post("/login", move |_req: Request| {
            let seen = seen.clone();
            async move {
                seen.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(200)).await;
                HttpResponse::text("these credentials do not match").status(401)
            }
        })
        .middleware_named("throttle:login");
    let server = support::http::TestServer::start(router).await;
    let burst = (0..guesses).map(|_| {
        let request = http::Request::post(server.url("/login"))
            .body(Full::new(Bytes::from_static(b"password=guess")))
            .unwrap();
        server.send(request)
    });
    let replies = support::within(
        "a burst of logins",
        Duration::from_secs(30),
        futures_util::future::join_all(burst),
    )
    .await;
    server.stop().await;
    let refused = replies.iter().filter(|r| r.status == 429).count();
    let failed = replies.iter().filter(|r| r.status == 401).count();
    assert_eq!(failed + refused, guesses);
    assert_eq!(failed, reached.load(Ordering::SeqCst));
    (failed, refused)
}

/// A limit that counts failed logins only (`after`) is checked before the
/// handler and counted after it, as in Laravel and as the docs say: a
/// burst in flight at once is checked against a count none of it has made
/// yet, so every guess reaches the handler, and the count stops at the
/// limit. A limit without `after` beside it, counted as each request
/// arrives, bounds the burst, as the docs advise.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_burst_of_failed_logins_is_bounded_by_a_limit_counted_on_arrival() {
    let clock = clock_at(12, 0, 0);
    let app = memory_app(&clock);
    app.clone()
        .scope(async move {
            let (reached, refused) = failed_login_burst(
                |req| {
                    let ip = req.ip().unwrap_or_default();
                    vec![
                        Limit::per_minute(5)
                            .by(ip)
                            .after(|r| r.status_code() >= 400),
                    ]
                },
                20,
            )
            .await;
            assert_eq!((reached, refused), (20, 0));
            assert_eq!(attempts("login:127.0.0.1").await, 5);

            let (reached, refused) = failed_login_burst(
                |req| {
                    let ip = req.ip().unwrap_or_default();
                    vec![
                        Limit::per_second(2, 1).by(format!("burst:{ip}")),
                        Limit::per_minute(5)
                            .by(format!("failed:{ip}"))
                            .after(|r| r.status_code() >= 400),
                    ]
                },
                20,
            )
            .await;
            assert_eq!((reached, refused), (2, 18));
            assert_eq!(attempts("login:burst:127.0.0.1").await, 2);
            assert_eq!(attempts("login:failed:127.0.0.1").await, 2);
        })
        .await;
}

/// A limit with a window of no time listed before a per-minute limit whose
/// key cleans to the same bucket: Laravel's first hit (decay 0) leaves
/// nothing, its second (decay 60) opens the minute and counts 1, so the
/// minute's limit of 3 admits two requests and refuses the third.
#[tokio::test]
async fn a_window_of_no_time_beside_a_minute_in_one_bucket_still_limits() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("api", |_req| {
                vec![
                    Limit::per_second(3, 0).by("caf\u{e9}"),
                    Limit::per_minute(3).by("cafe"),
                ]
                .into()
            });
            let router = ok_routes(&["/x"]).middleware(ThrottleRequestsMiddleware::by_name("api"));
            let mut statuses = Vec::new();
            for _ in 0..4 {
                statuses.push(get_as_guest(&router, "/x").await.status_code());
            }
            assert_eq!(statuses, [200, 200, 429, 429]);
            assert_eq!(RateLimiter::attempts("api:cafe").await.unwrap(), 3);
        })
        .await;
}
