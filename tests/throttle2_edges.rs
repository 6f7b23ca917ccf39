//! Edges of the throttle middleware: `throttle` alias arguments as Laravel
//! reads them, and the headers of refusals answered by `response`
//! callbacks, on a limit counted after the response and over the wire.
//! Memory store on a frozen clock, in process through
//! `handle_request_with_peer` and over a real server on 127.0.0.1.

mod support;
mod throttle_support;

use std::time::Duration;

use support::clock_at;
use support::http::TestServer;
use suprnova::clock::Clock;
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router, ThrottleRequestsMiddleware};
use throttle_support::{
    SignIn, get_as_guest, get_as_user, memory_app, ok_routes, status_and_counts as pair,
};

/// Answers with the status of `?status=` (200 without one).
async fn status_from_query(req: Request) -> HttpResponse {
    let status = req
        .query_param("status")
        .and_then(|s| s.parse().ok())
        .unwrap_or(200);
    HttpResponse::text("done").status(status)
}

// ---------------------------------------------------------------------------
// Alias arguments.

/// The alias trims the blanks around each argument (`throttle: 2 , 1`
/// counts 2 a minute), and `is_numeric` takes `10 ` and ` 60` for numbers,
/// so `throttle:10 | 60,1` is a guest limit of 10 and a user limit of 60,
/// as Laravel's `(int)` reads each half.
#[tokio::test]
async fn blanks_around_the_bar_of_guest_and_user_limits_are_trimmed() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = ok_routes(&["/feed"])
                .middleware(SignIn)
                .try_middleware_named("throttle:10 | 60,1");
            let router = match router {
                Ok(router) => router,
                Err(err) => panic!("`throttle:10 | 60,1` refused: {err}"),
            };
            assert_eq!(
                pair(&get_as_guest(&router, "/feed").await),
                (200, Some("10"), Some("9"))
            );
            assert_eq!(
                pair(&get_as_user(&router, "/feed", "7").await),
                (200, Some("60"), Some("59"))
            );
        })
        .await;
}

/// A limit past `i64::MAX` is a whole, positive number: the docs refuse
/// only numbers that are not whole, a zero, and a fourth argument. Laravel
/// reads it with `(int)` as `PHP_INT_MAX`, a limit that never refuses.
#[tokio::test]
async fn a_limit_past_the_largest_integer_is_read_as_the_largest() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router =
                ok_routes(&["/big"]).try_middleware_named("throttle:99999999999999999999,1");
            let router = match router {
                Ok(router) => router,
                Err(err) => panic!("a limit larger than i64 refused: {err}"),
            };
            assert_eq!(
                pair(&get_as_guest(&router, "/big").await),
                (
                    200,
                    Some("9223372036854775807"),
                    Some("9223372036854775806")
                )
            );
        })
        .await;
}

// ---------------------------------------------------------------------------
// `after` limits and response callbacks.

/// A limit counted after the response (failed logins) whose window is full
/// refuses before the handler with its `response` callback's answer, as
/// Laravel honours the callback of an `after` limit, and the refusal gets
/// the four headers the callback did not set: the limit, 0 left, the wait
/// until the window's timer and the second it ends.
#[tokio::test]
async fn an_after_limit_refuses_with_its_callback_and_the_four_headers() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("login", |_req| {
                Limit::per_minute(2)
                    .by("alice")
                    .after(|r| r.status_code() >= 400)
                    .response(|req| {
                        HttpResponse::json(
                            serde_json::json!({"message": format!("wait on {}", req.path())}),
                        )
                        .status(429)
                    })
                    .into()
            });
            let router = Router::new()
                .get("/login", status_from_query)
                .middleware(ThrottleRequestsMiddleware::by_name("login"));
            let send = |uri: &'static str| get_as_guest(&router, uri);
            assert_eq!(pair(&send("/login").await), (200, Some("2"), Some("2")));
            assert_eq!(
                pair(&send("/login?status=401").await),
                (401, Some("2"), Some("1"))
            );
            clock.advance(Duration::from_secs(5));
            assert_eq!(
                pair(&send("/login?status=401").await),
                (401, Some("2"), Some("0"))
            );
            clock.advance(Duration::from_secs(10));
            let refused = send("/login").await;
            assert_eq!(refused.status_code(), 429);
            assert_eq!(refused.body_text(), r#"{"message":"wait on /login"}"#);
            assert_eq!(refused.header_str("x-ratelimit-limit"), Some("2"));
            assert_eq!(refused.header_str("x-ratelimit-remaining"), Some("0"));
            assert_eq!(refused.header_str("retry-after"), Some("45"));
            let reset = (t0 + 60).to_string();
            assert_eq!(
                refused.header_str("x-ratelimit-reset"),
                Some(reset.as_str())
            );
            assert_eq!(RateLimiter::attempts("login:alice").await.unwrap(), 2);
        })
        .await;
}

/// Over a real server: the callback's JSON refusal carries the four
/// headers on the wire, and its own content type.
#[tokio::test]
async fn a_callback_refusal_carries_its_headers_over_http() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    let app = memory_app(&clock);
    app.scope(async {
        RateLimiter::define("api", |req| {
            Limit::per_minute(1)
                .by(req.ip().unwrap_or_default())
                .response(|_req| {
                    HttpResponse::json(serde_json::json!({"message": "Too Many Attempts."}))
                        .status(429)
                })
                .into()
        });
        let router = ok_routes(&["/api"]).middleware_named("throttle:api");
        let server = TestServer::start(router).await;
        let first = server.get("/api").await;
        assert_eq!(first.status, 200);
        assert_eq!(first.header("x-ratelimit-remaining"), Some("0"));
        clock.advance(Duration::from_secs(1));
        let r = server.get("/api").await;
        assert_eq!(r.status, 429);
        assert_eq!(r.body, r#"{"message":"Too Many Attempts."}"#);
        assert!(
            r.header("content-type")
                .is_some_and(|t| t.starts_with("application/json")),
            "{:?}",
            r.headers
        );
        assert_eq!(r.header("x-ratelimit-limit"), Some("1"));
        assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
        assert_eq!(r.header("retry-after"), Some("59"));
        let reset = (t0 + 60).to_string();
        assert_eq!(r.header("x-ratelimit-reset"), Some(reset.as_str()));
        assert_eq!(RateLimiter::attempts("api:127.0.0.1").await.unwrap(), 1);
        server.stop().await;
    })
    .await;
}
