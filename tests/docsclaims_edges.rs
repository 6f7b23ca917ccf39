//! Statements of the README, the guides under docs/ and the API reference,
//! checked as written. Memory backends run on a frozen clock.

mod support;
mod throttle_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use support::boot::{plan, refusal};
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver};
use suprnova::server::{handle_request, handle_request_with_peer};
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router, ThrottleRequestsMiddleware};
use throttle_support::{SignIn, memory_app, status_and_counts as pair};

const START: u64 = 1_767_268_800; // 2026-01-01T12:00:00Z

async fn send(router: &Router, uri: &str, peer: &str, user: Option<&str>) -> HttpResponse {
    let mut builder = http::Request::get(uri);
    if let Some(user) = user {
        builder = builder.header("x-user", user);
    }
    let request = builder.body(Full::<Bytes>::default()).unwrap();
    handle_request_with_peer(router, request, peer.parse::<SocketAddr>().unwrap()).await
}

/// Asserts that `refused` is a 429 with `body`, no request left, and a wait
/// of `retry_after` seconds to `START + ends_after`.
fn assert_refused(refused: &HttpResponse, body: &str, retry_after: &str, ends_after: u64) {
    let reset = (START + ends_after).to_string();
    assert_eq!(
        (
            refused.status_code(),
            refused.body_text(),
            refused.header_str("x-ratelimit-remaining"),
            refused.header_str("retry-after"),
            refused.header_str("x-ratelimit-reset"),
        ),
        (
            429,
            body.to_owned(),
            Some("0"),
            Some(retry_after),
            Some(reset.as_str())
        )
    );
}

fn ok(path: &str) -> Router {
    Router::new().get(path, |_req: Request| async { HttpResponse::text("ok") })
}

// rate-limiting.md, "Aliases": "A first argument of two whole numbers joined
// by | is the guest's limit and the signed-in user's ... The numeric forms
// count each signed-in user in a bucket of their own on each path, whatever
// address they connect from, and each guest by address."
#[tokio::test]
async fn guest_and_user_limits_of_the_alias_apply_to_each() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let router = ok("/items").middleware_named("throttle:2|3,1").wrap(SignIn);
        // A guest: two a minute.
        assert_eq!(
            pair(&send(&router, "/items", "203.0.113.5:1", None).await),
            (200, Some("2"), Some("1"))
        );
        assert_eq!(
            pair(&send(&router, "/items", "203.0.113.5:1", None).await),
            (200, Some("2"), Some("0"))
        );
        assert_eq!(
            send(&router, "/items", "203.0.113.5:1", None)
                .await
                .status_code(),
            429
        );
        // A signed-in user from that address: three, in a bucket of its own,
        // followed across addresses.
        assert_eq!(
            pair(&send(&router, "/items", "203.0.113.5:1", Some("7")).await),
            (200, Some("3"), Some("2"))
        );
        assert_eq!(
            pair(&send(&router, "/items", "198.51.100.9:1", Some("7")).await),
            (200, Some("3"), Some("1"))
        );
        assert_eq!(
            pair(&send(&router, "/items", "192.0.2.1:1", Some("7")).await),
            (200, Some("3"), Some("0"))
        );
        let refused = send(&router, "/items", "192.0.2.77:1", Some("7")).await;
        assert_eq!(refused.status_code(), 429);
        assert_eq!(refused.header_str("x-ratelimit-limit"), Some("3"));
        assert_eq!(
            RateLimiter::attempts("user:7:path:/items").await.unwrap(),
            3
        );
        assert_eq!(
            RateLimiter::attempts("ip:203.0.113.5:path:/items")
                .await
                .unwrap(),
            2
        );
    })
    .await;
}

// rate-limiting.md, "The default limit": "The two are spelled apart, as
// user:<id> and ip:<address>, so a user whose id reads like an address shares
// no bucket with it. The user's bucket follows the user across routes and
// across addresses, and the address's bucket is shared by every route."
#[tokio::test]
async fn the_default_limit_keeps_a_user_named_like_an_address_apart() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let router = ok("/a")
            .merge(ok("/b"))
            .middleware(ThrottleRequestsMiddleware::default())
            .wrap(SignIn);
        let guest = send(&router, "/a", "203.0.113.5:1", None).await;
        assert_eq!(pair(&guest), (200, Some("60"), Some("59")));
        let guest = send(&router, "/b", "203.0.113.5:2", None).await;
        assert_eq!(pair(&guest), (200, Some("60"), Some("58")));
        let user = send(&router, "/b", "198.51.100.1:1", Some("203.0.113.5")).await;
        assert_eq!(pair(&user), (200, Some("60"), Some("59")));
        assert_eq!(RateLimiter::attempts("ip:203.0.113.5").await.unwrap(), 2);
        assert_eq!(RateLimiter::attempts("user:203.0.113.5").await.unwrap(), 1);
    })
    .await;
}

// rate-limiting.md, "Open connections": "An IPv4 address written in IPv6
// form, ::ffff:203.0.113.1, counts as the IPv4 address"; the throttle keys
// an address as `bucket_address` groups it. A dual-stack listener sees an
// IPv4 client in that form: it must share the IPv4 client's bucket.
#[tokio::test]
async fn an_ipv4_client_seen_in_ipv6_form_counts_as_the_ipv4_address() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    app.scope(async {
        let router = ok("/t").middleware(ThrottleRequestsMiddleware::default());
        send(&router, "/t", "203.0.113.5:1", None).await;
        let mapped = send(&router, "/t", "[::ffff:203.0.113.5]:1", None).await;
        assert_eq!(pair(&mapped), (200, Some("60"), Some("58")));
        assert_eq!(RateLimiter::attempts("ip:203.0.113.5").await.unwrap(), 2);

        let sliding =
            ok("/s").middleware(RateLimitMiddleware::ip_based(1, Duration::from_secs(60)));
        assert_eq!(
            send(&sliding, "/s", "203.0.113.5:1", None)
                .await
                .status_code(),
            200
        );
        assert_eq!(
            send(&sliding, "/s", "[::ffff:203.0.113.5]:9", None)
                .await
                .status_code(),
            429
        );
    })
    .await;
}

// rate-limiting.md, "Response headers": a 429 carries "Retry-After - seconds
// until the window reopens" and "X-RateLimit-Reset - unix-seconds-since-epoch
// when the bucket reopens", with X-RateLimit-Remaining 0.
#[tokio::test]
async fn a_refusal_reports_when_the_window_reopens() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let router = ok("/r").middleware_named("throttle:1,2");
        assert_eq!(
            send(&router, "/r", "203.0.113.5:1", None)
                .await
                .status_code(),
            200
        );
        clock.advance(Duration::from_secs(45));
        let refused = send(&router, "/r", "203.0.113.5:1", None).await;
        assert_refused(&refused, "Too Many Attempts.", "75", 120);
        assert_eq!(refused.header_str("x-ratelimit-limit"), Some("1"));
        clock.advance(Duration::from_secs(75));
        assert_eq!(
            send(&router, "/r", "203.0.113.5:1", None)
                .await
                .status_code(),
            200
        );
    })
    .await;
}

// Reference, "Named limiters": a callback may return "An HttpResponse -
// short-circuit immediately with this response"; "Limit::none() ...
// Returning it from a named limiter is the Laravel pattern for bypass." The
// type docs: "both without rate-limit headers".
#[tokio::test]
async fn a_named_limiter_can_answer_or_step_aside() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        RateLimiter::r#for("gate", |req| {
            if req.path() == "/closed" {
                HttpResponse::text("closed for today").status(451).into()
            } else {
                Limit::none().into()
            }
        });
        let router = ok("/closed")
            .merge(ok("/open"))
            .middleware_named("throttle:gate");
        let closed = send(&router, "/closed", "203.0.113.5:1", None).await;
        assert_eq!(closed.status_code(), 451);
        assert_eq!(closed.body_text(), "closed for today");
        assert_eq!(closed.header_str("x-ratelimit-limit"), None);
        for _ in 0..3 {
            let open = send(&router, "/open", "203.0.113.5:1", None).await;
            assert_eq!(pair(&open), (200, None, None));
        }
        assert_eq!(RateLimiter::attempts("gate:").await.unwrap(), 0);
    })
    .await;
}

// rate-limiting.md / reference, "A missing named limiter": "answers 503 with
// the body Rate limiter [reports] is not defined." for `throttle:reports`.
#[tokio::test]
async fn a_missing_limiter_named_through_the_alias_answers_503() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let router = ok("/reports").middleware_named("throttle:reports");
        let answer = send(&router, "/reports", "203.0.113.5:1", None).await;
        assert_eq!(answer.status_code(), 503);
        assert_eq!(answer.body_text(), "Rate limiter [reports] is not defined.");
    })
    .await;
}

// Reference, "Counter API": "A time that has already passed opens no window:
// the hit counts in a window that is already open, and leaves no count behind
// otherwise." "Number of seconds until the window reopens (0 when no window
// open)."
#[tokio::test]
async fn a_hit_until_a_passed_time_leaves_no_count_on_a_fresh_key() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let past = suprnova::chrono::DateTime::from_timestamp(START as i64 - 10, 0).unwrap();
        RateLimiter::hit_until("exports:user:1", past)
            .await
            .unwrap();
        assert_eq!(RateLimiter::attempts("exports:user:1").await.unwrap(), 0);
        assert_eq!(
            RateLimiter::available_in("exports:user:1").await.unwrap(),
            0
        );
        assert!(
            !RateLimiter::too_many_attempts("exports:user:1", 1)
                .await
                .unwrap()
        );
        // In an open window it counts there.
        RateLimiter::hit("exports:user:1", 60).await.unwrap();
        RateLimiter::hit_until("exports:user:1", past)
            .await
            .unwrap();
        assert_eq!(RateLimiter::attempts("exports:user:1").await.unwrap(), 2);
    })
    .await;
}

// rate-limiting.md, "Limit": "Limit::per_minutes(5, 100); // 100 per 5
// minutes (decay-first, Laravel signature)", and the rest of the shorthands.
#[test]
fn the_limit_shorthands_have_the_documented_numbers() {
    let cases = [
        (Limit::per_second(10, 1), 10, 1),
        (Limit::per_minute(60), 60, 60),
        (Limit::per_minutes(5, 100), 100, 300),
        (Limit::per_hour(1_000), 1_000, 3_600),
        (Limit::per_hours(6, 5_000), 5_000, 21_600),
        (Limit::per_day(10_000), 10_000, 86_400),
        (Limit::per_days(7, 50_000), 50_000, 604_800),
        (Limit::new(123, Duration::from_secs(45)), 123, 45),
    ];
    for (limit, max, decay) in cases {
        assert_eq!((limit.max_attempts, limit.decay_seconds), (max, decay));
    }
}

// deployment.md, "The variables": APP_ENV is "production, staging, testing,
// local or development (any case). Unset means production. Only production is
// gated. Any other value refuses boot." RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION
// "Accepts true/false, 1/0, yes/no, on/off. Any other value refuses boot."
#[test]
fn the_environment_and_the_override_are_read_as_documented() {
    let gated = refusal(&[("APP_ENV", "PRODUCTION")]);
    assert!(
        gated.starts_with("refusing to boot in production: RATE_LIMIT_DRIVER is unset"),
        "{gated}"
    );
    let blank = refusal(&[("APP_ENV", "production"), ("RATE_LIMIT_DRIVER", "")]);
    assert!(
        blank.starts_with("refusing to boot in production: RATE_LIMIT_DRIVER is unset"),
        "{blank}"
    );
    for env in ["Staging", "testing", "LOCAL", "development"] {
        assert!(plan(&[("APP_ENV", env)]).is_ok(), "{env}");
    }
    for env in ["prod", "dev", "stage"] {
        let refused = refusal(&[("APP_ENV", env)]);
        assert!(refused.contains("APP_ENV"), "{env}: {refused}");
    }
    for yes in ["true", "1", "yes", "on"] {
        assert!(
            plan(&[("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", yes)]).is_ok(),
            "{yes}"
        );
    }
    for no in ["false", "0", "no", "off"] {
        assert!(
            plan(&[("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", no)]).is_err(),
            "{no}"
        );
    }
    let bad = refusal(&[
        ("APP_ENV", "local"),
        ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", "maybe"),
    ]);
    assert!(
        bad.contains("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION"),
        "{bad}"
    );
}

// deployment.md: "any value other than memory or redis, such as Redis with a
// capital R ... The message names the value it got: refusing to boot in
// production: RATE_LIMIT_DRIVER="Redis" is not a driver (did you mean
// redis?)".
#[test]
fn a_capitalised_driver_is_refused_with_a_hint() {
    let refused = refusal(&[("RATE_LIMIT_DRIVER", "Redis")]);
    assert!(
        refused.starts_with(
            "refusing to boot in production: RATE_LIMIT_DRIVER=\"Redis\" is not a driver (did you mean redis?)"
        ),
        "{refused}"
    );
    // Outside production it falls back to memory with a warning naming it.
    let local = plan(&[("APP_ENV", "local"), ("RATE_LIMIT_DRIVER", "Redis")]).unwrap();
    assert!(
        local.warnings.iter().any(|w| w.contains("Redis")),
        "{:?}",
        local.warnings
    );
}

// rate-limiting.md, "The client address behind proxies": "/0 is refused ...
// Boot fails on it, as it does on an entry that is neither an address nor a
// range"; "The other variables are checked in every environment".
#[test]
fn a_proxy_list_of_every_address_is_refused_outside_production_too() {
    for list in ["0.0.0.0/0", "10.0.0.5, ::/0", "unknown", "10.0.0.5:80"] {
        let refused = refusal(&[("APP_ENV", "local"), ("APP_TRUSTED_PROXIES", list)]);
        assert!(refused.contains("APP_TRUSTED_PROXIES"), "{list}: {refused}");
    }
    assert!(
        plan(&[
            ("APP_ENV", "local"),
            (
                "APP_TRUSTED_PROXIES",
                "10.0.0.5,173.245.48.0/20,2400:cb00::/32"
            ),
        ])
        .is_ok()
    );
}

/// `req.ip()` of a request from `peer` with `headers`, trusting `list`.
async fn ip_through(list: &str, peer: &str, headers: &[(&str, &str)]) -> String {
    let app = App::new();
    app.install(Arc::new(list.parse::<TrustedProxies>().unwrap()));
    app.scope(async {
        let router = Router::new().get("/ip", |req: Request| async move {
            HttpResponse::text(req.ip().unwrap_or_else(|| "none".to_owned()))
        });
        let mut builder = http::Request::get("/ip");
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(Full::<Bytes>::default()).unwrap();
        handle_request_with_peer(&router, request, peer.parse().unwrap())
            .await
            .body_text()
    })
    .await
}

// rate-limiting.md, "The client address behind proxies": the walk from the
// right, each trusted entry skipped; "An entry that is not an address, such
// as unknown, ends the walk, and req.ip() returns the proxy that wrote that
// entry"; "X-Real-IP is read only when there is no X-Forwarded-For".
#[tokio::test]
async fn the_forwarded_walk_follows_the_documented_rules() {
    let trusted = "10.0.0.0/8";
    assert_eq!(
        ip_through(
            trusted,
            "10.0.0.5:1",
            &[("x-forwarded-for", "6.6.6.6, 198.51.100.7, 10.0.0.9")]
        )
        .await,
        "198.51.100.7"
    );
    assert_eq!(
        ip_through(
            trusted,
            "10.0.0.5:1",
            &[("x-forwarded-for", "198.51.100.7, unknown, 10.0.0.9")]
        )
        .await,
        "10.0.0.9"
    );
    assert_eq!(
        ip_through(
            trusted,
            "10.0.0.5:1",
            &[
                ("x-forwarded-for", "198.51.100.7"),
                ("x-real-ip", "192.0.2.44")
            ]
        )
        .await,
        "198.51.100.7"
    );
    assert_eq!(
        ip_through(trusted, "10.0.0.5:1", &[("x-real-ip", "192.0.2.44")]).await,
        "192.0.2.44"
    );
    // A trusted proxy seen by a dual-stack listener in IPv6 form, and
    // entries written with ports.
    assert_eq!(
        ip_through(
            trusted,
            "[::ffff:10.0.0.5]:1",
            &[("x-forwarded-for", "198.51.100.7:5555")]
        )
        .await,
        "198.51.100.7"
    );
    assert_eq!(
        ip_through(
            trusted,
            "10.0.0.5:1",
            &[("x-forwarded-for", "[2001:db8::1]:443, 10.0.0.9")]
        )
        .await,
        "2001:db8::1"
    );
    // An untrusted peer is the client, whatever it writes.
    assert_eq!(
        ip_through(
            trusted,
            "198.51.100.1:1",
            &[("x-forwarded-for", "192.0.2.44")]
        )
        .await,
        "198.51.100.1"
    );
    // The RFC 7239 header is not read.
    assert_eq!(
        ip_through(trusted, "10.0.0.5:1", &[("forwarded", "for=192.0.2.44")]).await,
        "10.0.0.5"
    );
}

// rate-limiting.md, "Per address: ip_based": "A request with no address gets
// a bucket of its own. One shared bucket for all such requests would let one
// caller use it up and lock the others out."
#[tokio::test]
async fn requests_without_an_address_do_not_share_one_bucket() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    app.scope(async {
        let sliding =
            ok("/s").middleware(RateLimitMiddleware::ip_based(1, Duration::from_secs(60)));
        let throttled = ok("/t").middleware_named("throttle:1,1");
        for _ in 0..3 {
            let request = http::Request::get("/s")
                .body(Full::<Bytes>::default())
                .unwrap();
            assert_eq!(handle_request(&sliding, request).await.status_code(), 200);
            let request = http::Request::get("/t")
                .body(Full::<Bytes>::default())
                .unwrap();
            assert_eq!(handle_request(&throttled, request).await.status_code(), 200);
        }
    })
    .await;
}

// rate-limiting.md, "Response headers": "When your handler sets
// X-RateLimit-Remaining itself, at or below that count, the middleware leaves
// your headers alone; above it, the middleware replaces them."
#[tokio::test]
async fn a_handler_reporting_fewer_retries_keeps_its_headers() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let router = Router::new()
            .get("/low", |_req: Request| async {
                HttpResponse::text("ok")
                    .header("X-RateLimit-Limit", "3")
                    .header("X-RateLimit-Remaining", "1")
            })
            .get("/high", |_req: Request| async {
                HttpResponse::text("ok")
                    .header("X-RateLimit-Limit", "1000")
                    .header("X-RateLimit-Remaining", "999")
            })
            .middleware_named("throttle:10,1");
        let low = send(&router, "/low", "203.0.113.5:1", None).await;
        assert_eq!(pair(&low), (200, Some("3"), Some("1")));
        let high = send(&router, "/high", "203.0.113.5:1", None).await;
        assert_eq!(pair(&high), (200, Some("10"), Some("9")));
    })
    .await;
}

// rate-limiting.md, "Refused requests": "a burst of concurrent requests
// admits at most the limit" - here with two limits on one caller, checked
// and counted on a multi-threaded runtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_burst_under_two_limits_admits_at_most_the_tighter() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let router = Arc::new(
            ok("/burst").middleware(ThrottleRequestsMiddleware::with_limits(vec![
                Limit::per_hour(100).by("user:1"),
                Limit::per_minute(5).by("user:1"),
            ])),
        );
        let mut tasks = Vec::new();
        for i in 0..40u16 {
            let router = router.clone();
            let app = App::current();
            tasks.push(tokio::spawn(app.scope(async move {
                send(
                    &router,
                    "/burst",
                    &format!("203.0.113.5:{}", 1000 + i),
                    None,
                )
                .await
                .status_code()
            })));
        }
        let mut admitted = 0;
        for task in tasks {
            if task.await.unwrap() == 200 {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 5);
        assert_eq!(
            RateLimiter::attempts("user:1:attempts:5:decay:60")
                .await
                .unwrap(),
            5
        );
    })
    .await;
}

// rate-limiting.md, "The default limit": one bucket for each signed-in user,
// `user:<id>`, and under `with(...)` one for each user on each path,
// `user:<id>:path:<path>`; migration-from-laravel.md: keys are readable,
// yet "no key a client chooses can name another bucket". A user id holding
// `:path:` names another user's bucket on that path: user
// `7:path:/login`, browsing a route under the default limit, spends user
// 7's login attempts.
#[tokio::test]
async fn a_user_id_cannot_name_another_users_bucket_on_a_path() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let router = ok("/login")
            .middleware_named("throttle:3,1")
            .merge(ok("/feed").middleware(ThrottleRequestsMiddleware::default()))
            .wrap(SignIn);
        for _ in 0..3 {
            let feed = send(&router, "/feed", "198.51.100.66:1", Some("7:path:/login")).await;
            assert_eq!(feed.status_code(), 200);
        }
        let login = send(&router, "/login", "203.0.113.5:1", Some("7")).await;
        assert_eq!(pair(&login), (200, Some("3"), Some("2")));
    })
    .await;
}

// rate-limiting.md, "RateLimitMiddleware": on a refusal, "Retry-After (whole
// seconds, rounded up, at least 1)" and X-RateLimit-Reset; the two agree,
// so a client that comes back at the reset is admitted.
#[tokio::test]
async fn a_sliding_refusal_rounds_the_wait_up_and_the_reset_agrees() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    app.scope(async {
        let router = ok("/s").middleware(RateLimitMiddleware::ip_based(2, Duration::from_secs(10)));
        clock.advance(Duration::from_millis(300));
        assert_eq!(
            send(&router, "/s", "203.0.113.5:1", None)
                .await
                .status_code(),
            200
        );
        clock.advance(Duration::from_millis(3_700));
        assert_eq!(
            send(&router, "/s", "203.0.113.5:1", None)
                .await
                .status_code(),
            200
        );
        let refused = send(&router, "/s", "203.0.113.5:1", None).await;
        assert_refused(&refused, "429 Too Many Requests", "7", 11);
        clock.advance(Duration::from_secs(7));
        assert_eq!(
            send(&router, "/s", "203.0.113.5:1", None)
                .await
                .status_code(),
            200
        );
    })
    .await;
}

// rate-limiting.md, "RateLimitMiddleware": "The limit is invalid (a window
// under 1 ms): 500 and an error log line." A window of 1 ms is a window.
#[tokio::test]
async fn a_window_under_a_millisecond_is_an_invalid_limit() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    app.scope(async {
        let zero = ok("/z").middleware(RateLimitMiddleware::ip_based(1, Duration::ZERO));
        assert_eq!(
            send(&zero, "/z", "203.0.113.5:1", None).await.status_code(),
            500
        );
        let short =
            ok("/h").middleware(RateLimitMiddleware::ip_based(1, Duration::from_micros(500)));
        assert_eq!(
            send(&short, "/h", "203.0.113.5:1", None)
                .await
                .status_code(),
            500
        );
        let one = ok("/m").middleware(RateLimitMiddleware::ip_based(1, Duration::from_millis(1)));
        assert_eq!(
            send(&one, "/m", "203.0.113.5:1", None).await.status_code(),
            200
        );
    })
    .await;
}

// Reference, "Counter API": hit_and_check "Returns true when this hit pushed
// the bucket over max ... i64::MAX as the max means unlimited - always
// admits, still counts"; reset_attempts "Drop only the counter (timer stays -
// the window is still pinned)"; clear "Drop both counter and timer";
// retries_left "is the Laravel-spelt alias of remaining".
#[tokio::test]
async fn the_counter_api_keeps_its_documented_promises() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let key = "login:1.2.3.4";
        assert!(!RateLimiter::hit_and_check(key, 2, 60).await.unwrap());
        assert!(!RateLimiter::hit_and_check(key, 2, 60).await.unwrap());
        assert!(RateLimiter::hit_and_check(key, 2, 60).await.unwrap());
        assert_eq!(RateLimiter::attempts(key).await.unwrap(), 3);
        assert_eq!(RateLimiter::remaining(key, 2).await.unwrap(), 0);
        assert_eq!(RateLimiter::retries_left(key, 5).await.unwrap(), 2);
        assert!(RateLimiter::too_many_attempts(key, 3).await.unwrap());

        clock.advance(Duration::from_secs(20));
        assert_eq!(RateLimiter::available_in(key).await.unwrap(), 40);
        assert!(RateLimiter::reset_attempts(key).await.unwrap());
        assert_eq!(RateLimiter::attempts(key).await.unwrap(), 0);
        // The window is still pinned: the next hit counts in it.
        assert_eq!(RateLimiter::available_in(key).await.unwrap(), 40);
        assert_eq!(RateLimiter::hit(key, 60).await.unwrap(), 1);
        assert_eq!(RateLimiter::available_in(key).await.unwrap(), 40);

        RateLimiter::clear(key).await.unwrap();
        assert_eq!(RateLimiter::attempts(key).await.unwrap(), 0);
        assert_eq!(RateLimiter::available_in(key).await.unwrap(), 0);

        for _ in 0..5 {
            assert!(
                !RateLimiter::hit_and_check("unlimited", i64::MAX, 60)
                    .await
                    .unwrap()
            );
        }
        assert_eq!(RateLimiter::attempts("unlimited").await.unwrap(), 5);

        // increment by N, decrement by N.
        assert_eq!(
            RateLimiter::increment("api:user:1", 60, 5).await.unwrap(),
            5
        );
        assert_eq!(
            RateLimiter::decrement("api:user:1", 60, 2).await.unwrap(),
            3
        );
        assert_eq!(RateLimiter::hit_for_minute("api:user:1").await.unwrap(), 4);
    })
    .await;
}

// Reference, "attempt() workflow": "Run a callback only when the bucket is
// under quota"; migration-from-laravel.md: "A maximum of 0 ... refuses every
// request and runs no callback".
#[tokio::test]
async fn attempt_runs_the_callback_only_under_quota() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let first = RateLimiter::attempt("otp:1", 1, || async { 7 }, 60)
            .await
            .unwrap();
        assert_eq!(first, Some(7));
        let second = RateLimiter::attempt("otp:1", 1, || async { 8 }, 60)
            .await
            .unwrap();
        assert_eq!(second, None);
        let none = RateLimiter::attempt("otp:2", 0, || async { 9 }, 60)
            .await
            .unwrap();
        assert_eq!(none, None);
        assert_eq!(RateLimiter::attempts("otp:2").await.unwrap(), 0);
        clock.advance(Duration::from_secs(60));
        let again = RateLimiter::attempt("otp:1", 1, || async { 10 }, 60)
            .await
            .unwrap();
        assert_eq!(again, Some(10));
    })
    .await;
}

// migration-from-laravel.md, "Other differences": a limit of 0 "refuses
// every request ... the 429 asks the client to wait a whole window
// (Retry-After the limit's decay)".
#[tokio::test]
async fn a_limit_of_zero_asks_for_a_whole_window() {
    let clock = FakeClock::at_unix(START);
    let app = memory_app(&clock);
    app.scope(async {
        let router = ok("/z").middleware(ThrottleRequestsMiddleware::with_limits(vec![
            Limit::per_minutes(2, 0).by("z"),
        ]));
        let refused = send(&router, "/z", "203.0.113.5:1", None).await;
        assert_eq!(refused.status_code(), 429);
        assert_eq!(refused.header_str("retry-after"), Some("120"));
        let reset = (START + 120).to_string();
        assert_eq!(
            refused.header_str("x-ratelimit-reset"),
            Some(reset.as_str())
        );
        assert_eq!(RateLimiter::attempts("z").await.unwrap(), 0);
    })
    .await;
}
