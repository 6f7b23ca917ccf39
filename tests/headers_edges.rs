//! The rate-limit headers a client reads, value for value, at the edges of
//! a window: `throttle:60,1` and the sliding-window driver at exact clock
//! offsets, several limits, limits of zero and of the largest numbers, a
//! limit that counts after the response, `HEAD`, handlers that set their
//! own headers or answer 429 themselves, and named limiters' own answers.
//! Memory backends on a frozen clock, in process through
//! `handle_request_with_peer` and over real connections on 127.0.0.1.

mod support;
mod throttle_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use support::clock_at;
use support::http::{Reply, TestServer};
use suprnova::clock::{Clock, FakeClock};
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig};
use suprnova::{
    HttpResponse, Limit, RateLimiter, Request, Response, Router, ThrottleRequestsMiddleware,
};
use throttle_support::{get_as_guest, memory_app, ok_routes, send_as_guest};

const MINUTE: Duration = Duration::from_secs(60);

/// `(status, X-RateLimit-Limit, X-RateLimit-Remaining, Retry-After,
/// X-RateLimit-Reset)` of an in-process response.
fn heads(
    r: &HttpResponse,
) -> (
    u16,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    let h = |name: &str| r.header_str(name).map(str::to_owned);
    (
        r.status_code(),
        h("x-ratelimit-limit"),
        h("x-ratelimit-remaining"),
        h("retry-after"),
        h("x-ratelimit-reset"),
    )
}

/// The same five of a reply read off the wire.
fn wire(
    r: &Reply,
) -> (
    u16,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    let h = |name: &str| r.header(name).map(str::to_owned);
    (
        r.status,
        h("x-ratelimit-limit"),
        h("x-ratelimit-remaining"),
        h("retry-after"),
        h("x-ratelimit-reset"),
    )
}

fn ok(
    limit: &str,
    remaining: &str,
) -> (
    u16,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    (200, Some(limit.into()), Some(remaining.into()), None, None)
}

fn refused(
    limit: &str,
    retry_after: &str,
    reset: i64,
) -> (
    u16,
    Option<String>,
    Option<String>,
    Option<String>,
    Option<String>,
) {
    (
        429,
        Some(limit.into()),
        Some("0".into()),
        Some(retry_after.into()),
        Some(reset.to_string()),
    )
}

fn memory_driver(clock: &FakeClock) -> Arc<dyn RateLimiterDriver> {
    Arc::new(InMemoryRateLimiter::with_clock(clock.shared()))
}

// ---------------------------------------------------------------------------
// `throttle:60,1` at exact offsets.

/// 60 requests at 12:00:00 (Remaining 59 on the first, 1 on the 59th, 0 on
/// the 60th); the 61st at 12:00:00, 12:00:00.001 and 12:00:59.999 is
/// refused with Laravel's `Retry-After` (`timer - floor(now)`: 60, 60, 1)
/// and `X-RateLimit-Reset` 12:01:00 each time; at 12:01:00.000 exactly the
/// window is gone and the request passes with 59 left. Over real
/// connections, from 127.0.0.1.
#[tokio::test]
async fn throttle_60_1_over_http_at_each_offset_of_the_window() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            let server =
                TestServer::start(ok_routes(&["/api"]).middleware_named("throttle:60,1")).await;
            for n in 1..=60 {
                let r = server.get("/api").await;
                let left = (60 - n).to_string();
                assert_eq!(wire(&r), ok("60", &left), "request {n}");
            }
            let r = server.get("/api").await;
            assert_eq!(wire(&r), refused("60", "60", t0 + 60));
            assert_eq!(r.body, "Too Many Attempts.");
            clock.advance(Duration::from_millis(1));
            assert_eq!(
                wire(&server.get("/api").await),
                refused("60", "60", t0 + 60)
            );
            clock.advance(Duration::from_millis(59_998));
            assert_eq!(wire(&server.get("/api").await), refused("60", "1", t0 + 60));
            clock.advance(Duration::from_millis(1));
            assert_eq!(wire(&server.get("/api").await), ok("60", "59"));
            assert_eq!(
                RateLimiter::attempts("ip:127.0.0.1:path:/api")
                    .await
                    .unwrap(),
                1
            );
            server.stop().await;
        })
        .await;
}

/// A window opened at 12:00:00.500 holds its timer at 12:01:00 and its
/// count until 12:01:00.500. At 12:01:00.200 Laravel answers `Retry-After:
/// 0`; this throttle answers 1, and the reset is `now + Retry-After`,
/// 12:01:01. At 12:01:00.500 the request passes.
#[tokio::test]
async fn a_window_opened_inside_a_second_is_refused_with_at_least_one_second() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    clock.advance(Duration::from_millis(500));
    memory_app(&clock)
        .scope(async {
            let router = ok_routes(&["/api"]).middleware_named("throttle:2,1");
            assert_eq!(heads(&get_as_guest(&router, "/api").await), ok("2", "1"));
            assert_eq!(heads(&get_as_guest(&router, "/api").await), ok("2", "0"));
            clock.advance(Duration::from_millis(100)); // 12:00:00.600
            assert_eq!(
                heads(&get_as_guest(&router, "/api").await),
                refused("2", "60", t0 + 60)
            );
            clock.advance(Duration::from_millis(59_600)); // 12:01:00.200
            assert_eq!(
                heads(&get_as_guest(&router, "/api").await),
                refused("2", "1", t0 + 61)
            );
            clock.advance(Duration::from_millis(299)); // 12:01:00.499
            assert_eq!(
                heads(&get_as_guest(&router, "/api").await),
                refused("2", "1", t0 + 61)
            );
            clock.advance(Duration::from_millis(1)); // 12:01:00.500
            assert_eq!(heads(&get_as_guest(&router, "/api").await), ok("2", "1"));
        })
        .await;
}

// ---------------------------------------------------------------------------
// The sliding window at the same points.

/// 60 a minute on the sliding window: the same points as the throttle's.
/// The 61st at 12:00:00 waits the whole window; at 12:00:00.001, 59.999 s
/// (60 rounded up); at 12:00:59.999, 1 ms (1 rounded up); the reset is
/// 12:01:00 throughout, and at 12:01:00.000 every hit has left.
#[tokio::test]
async fn the_sliding_window_over_http_at_each_offset_of_the_window() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    let router = ok_routes(&["/api"]).middleware(RateLimitMiddleware::new(
        memory_driver(&clock),
        SlidingWindowConfig::new(60, MINUTE),
        |_| "one".to_owned(),
    ));
    let server = TestServer::start(router).await;
    for n in 1..=60 {
        let r = server.get("/api").await;
        let left = (60 - n).to_string();
        assert_eq!(wire(&r), ok("60", &left), "request {n}");
    }
    let r = server.get("/api").await;
    assert_eq!(wire(&r), refused("60", "60", t0 + 60));
    assert_eq!(r.body, "429 Too Many Requests");
    clock.advance(Duration::from_millis(1));
    assert_eq!(
        wire(&server.get("/api").await),
        refused("60", "60", t0 + 60)
    );
    clock.advance(Duration::from_millis(59_998));
    assert_eq!(wire(&server.get("/api").await), refused("60", "1", t0 + 60));
    clock.advance(Duration::from_millis(1));
    assert_eq!(wire(&server.get("/api").await), ok("60", "59"));
    server.stop().await;
}

/// Two a 10 s window, hits at 12:00:00.250 and 12:00:01: the oldest leaves
/// at 12:00:10.250. Refused at 12:00:05 it waits 5.25 s, so `Retry-After:
/// 6` and a reset of 12:00:11 (the second the place frees in, rounded up);
/// at 12:00:10.249, 1 ms, so 1, same reset; at 12:00:10.250 the place is
/// free and the hit of 12:00:01 is the one left.
#[tokio::test]
async fn the_sliding_window_when_the_oldest_hit_leaves_inside_a_second() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    let router = ok_routes(&["/s"]).middleware(RateLimitMiddleware::new(
        memory_driver(&clock),
        SlidingWindowConfig::new(2, Duration::from_secs(10)),
        |_| "s".to_owned(),
    ));
    clock.advance(Duration::from_millis(250));
    assert_eq!(heads(&get_as_guest(&router, "/s").await), ok("2", "1"));
    clock.advance(Duration::from_millis(750));
    assert_eq!(heads(&get_as_guest(&router, "/s").await), ok("2", "0"));
    clock.advance(Duration::from_secs(4));
    assert_eq!(
        heads(&get_as_guest(&router, "/s").await),
        refused("2", "6", t0 + 11)
    );
    clock.advance(Duration::from_millis(5_249));
    assert_eq!(
        heads(&get_as_guest(&router, "/s").await),
        refused("2", "1", t0 + 11)
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(heads(&get_as_guest(&router, "/s").await), ok("2", "0"));
    // Full again: the hit of 12:00:01 leaves at 12:00:11.
    assert_eq!(
        heads(&get_as_guest(&router, "/s").await),
        refused("2", "1", t0 + 11)
    );
}

// ---------------------------------------------------------------------------
// Several limits.

/// Two limits full at once: the 429 is the first full one's, in list
/// order, as Laravel's check loop throws at the first; reversing the list
/// reverses the answer. Before that, the pair is the one with the fewest
/// left, the earlier on a tie.
#[tokio::test]
async fn two_full_limits_refuse_with_the_first_in_list_order() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("minute-first", |_req| {
                vec![
                    Limit::per_minute(2).by("m1"),
                    Limit::per_second(2, 10).by("s1"),
                ]
                .into()
            });
            RateLimiter::define("ten-first", |_req| {
                vec![
                    Limit::per_second(2, 10).by("s2"),
                    Limit::per_minute(2).by("m2"),
                ]
                .into()
            });
            let router = ok_routes(&["/a"])
                .middleware_named("throttle:minute-first")
                .merge(ok_routes(&["/b"]).middleware_named("throttle:ten-first"));
            for uri in ["/a", "/b"] {
                assert_eq!(
                    heads(&get_as_guest(&router, uri).await),
                    ok("2", "1"),
                    "{uri}"
                );
                assert_eq!(
                    heads(&get_as_guest(&router, uri).await),
                    ok("2", "0"),
                    "{uri}"
                );
            }
            assert_eq!(
                heads(&get_as_guest(&router, "/a").await),
                refused("2", "60", t0 + 60)
            );
            assert_eq!(
                heads(&get_as_guest(&router, "/b").await),
                refused("2", "10", t0 + 10)
            );
            // Nothing was counted by the refusals.
            for key in [
                "minute-first:m1",
                "minute-first:s1",
                "ten-first:s2",
                "ten-first:m2",
            ] {
                assert_eq!(RateLimiter::attempts(key).await.unwrap(), 2, "{key}");
            }
            // After the ten seconds only the minute refuses, on both.
            clock.advance(Duration::from_secs(10));
            assert_eq!(
                heads(&get_as_guest(&router, "/a").await),
                refused("2", "50", t0 + 60)
            );
            assert_eq!(
                heads(&get_as_guest(&router, "/b").await),
                refused("2", "50", t0 + 60)
            );
        })
        .await;
}

/// A named limiter returning three limits, one of them unlimited: the
/// pair follows the limit with the fewest places left as they run down,
/// and the unlimited one (counted, as Laravel counts an `Unlimited` inside
/// a list) never shows.
#[tokio::test]
async fn the_reported_pair_follows_the_limit_with_the_fewest_places() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("three", |_req| {
                vec![
                    Limit::none().into(),
                    Limit::per_minute(5).by("wide"),
                    Limit::per_second(3, 20).by("narrow"),
                ]
                .into()
            });
            let router = ok_routes(&["/t"]).middleware_named("throttle:three");
            // wide 4 left, narrow 2: narrow.
            assert_eq!(heads(&get_as_guest(&router, "/t").await), ok("3", "2"));
            assert_eq!(heads(&get_as_guest(&router, "/t").await), ok("3", "1"));
            assert_eq!(heads(&get_as_guest(&router, "/t").await), ok("3", "0"));
            assert_eq!(
                heads(&get_as_guest(&router, "/t").await),
                refused("3", "20", t0 + 20)
            );
            clock.advance(Duration::from_secs(20));
            // wide 1 left, narrow 2: wide.
            assert_eq!(heads(&get_as_guest(&router, "/t").await), ok("5", "1"));
            // wide 0, narrow 1: wide.
            assert_eq!(heads(&get_as_guest(&router, "/t").await), ok("5", "0"));
            assert_eq!(
                heads(&get_as_guest(&router, "/t").await),
                refused("5", "40", t0 + 60)
            );
            let unlimited = format!("three:attempts:{}:decay:60", i64::MAX);
            assert_eq!(RateLimiter::attempts(&unlimited).await.unwrap(), 0);
            assert_eq!(RateLimiter::attempts("three:").await.unwrap(), 5);
        })
        .await;
}

// ---------------------------------------------------------------------------
// Limits of zero, and the largest numbers.

/// A limit of 0 that counts after the response (`after`): the migration
/// guide says a maximum of 0 refuses every request; Laravel lets the first
/// of each window through and refuses the rest. Either way the second
/// failed login of a minute must be refused.
#[tokio::test]
async fn a_limit_of_zero_that_counts_after_the_response_still_refuses() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let runs = Arc::new(AtomicUsize::new(0));
            RateLimiter::define("locked", |_req| {
                Limit::per_minute(0)
                    .by("alice")
                    .after(|r| r.status_code() >= 400)
                    .into()
            });
            let handled = runs.clone();
            let router = Router::new()
                .get("/login", move |_req: Request| {
                    let handled = handled.clone();
                    async move {
                        handled.fetch_add(1, Ordering::SeqCst);
                        HttpResponse::text("wrong password").status(401)
                    }
                })
                .middleware_named("throttle:locked");
            let mut statuses = Vec::new();
            for _ in 0..5 {
                statuses.push(get_as_guest(&router, "/login").await.status_code());
            }
            assert!(
                runs.load(Ordering::SeqCst) <= 1,
                "the handler ran {} times under a limit of 0: {statuses:?}",
                runs.load(Ordering::SeqCst)
            );
            assert_eq!(&statuses[1..], &[429, 429, 429, 429], "{statuses:?}");
        })
        .await;
}

/// A limit of 0 on the fixed window refuses every request (the migration
/// guide), and nothing will ever free a place. The sliding window says so
/// with a whole window (`Retry-After` the window, the reset its end); the
/// throttle tells the client to come back in one second, and at that
/// second it is refused again, for ever.
#[tokio::test]
async fn a_limit_of_zero_tells_the_client_to_wait_a_whole_window() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("zero", |_req| Limit::per_minute(0).by("z").into());
            let throttled = ok_routes(&["/zero"]).middleware_named("throttle:zero");
            let sliding = ok_routes(&["/slide"]).middleware(RateLimitMiddleware::new(
                memory_driver(&clock),
                SlidingWindowConfig::new(0, MINUTE),
                |_| "z".to_owned(),
            ));
            assert_eq!(
                heads(&get_as_guest(&sliding, "/slide").await),
                refused("0", "60", t0 + 60)
            );
            let first = get_as_guest(&throttled, "/zero").await;
            // The client obeys the reset and comes back then: refused again.
            clock.advance(Duration::from_secs(1));
            let again = get_as_guest(&throttled, "/zero").await;
            assert_eq!(again.status_code(), 429);
            assert_eq!(heads(&first), refused("0", "60", t0 + 60));
        })
        .await;
}

/// The largest limits each side takes: `u32::MAX` on the sliding window,
/// `i64::MAX` on the throttle (which is `Limit::none()`'s number, counted
/// when it comes from `with`). The headers carry every digit.
#[tokio::test]
async fn the_largest_limits_carry_every_digit() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let sliding = ok_routes(&["/u32"]).middleware(RateLimitMiddleware::new(
                memory_driver(&clock),
                SlidingWindowConfig::new(u32::MAX, MINUTE),
                |_| "big".to_owned(),
            ));
            assert_eq!(
                heads(&get_as_guest(&sliding, "/u32").await),
                ok("4294967295", "4294967294")
            );
            assert_eq!(
                heads(&get_as_guest(&sliding, "/u32").await),
                ok("4294967295", "4294967293")
            );
            let throttled =
                ok_routes(&["/i64"]).middleware(ThrottleRequestsMiddleware::with(i64::MAX, 1, ""));
            assert_eq!(
                heads(&get_as_guest(&throttled, "/i64").await),
                ok("9223372036854775807", "9223372036854775806")
            );
            let alias = ok_routes(&["/alias"]).middleware_named("throttle:9223372036854775807,1");
            assert_eq!(
                heads(&get_as_guest(&alias, "/alias").await),
                ok("9223372036854775807", "9223372036854775806")
            );
        })
        .await;
}

/// A window as long as the numbers go: refused with a `Retry-After` of the
/// seconds to the end of time the timer holds, the reset that end, and no
/// panic.
#[tokio::test]
async fn a_window_as_long_as_the_numbers_go_refuses_without_overflow() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            let router =
                ok_routes(&["/long"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                    Limit::per_second(1, i64::MAX).by("long"),
                ]));
            assert_eq!(heads(&get_as_guest(&router, "/long").await), ok("1", "0"));
            let r = get_as_guest(&router, "/long").await;
            let wait = (i64::MAX - t0).to_string();
            assert_eq!(heads(&r), refused("1", &wait, i64::MAX));
        })
        .await;
}

// ---------------------------------------------------------------------------
// What the handler says, and which requests pass.

/// A handler's own `Retry-After` on a 200 and its own 429 (without a
/// remaining count): the throttle adds its pair and leaves the handler's
/// `Retry-After` and status alone, as Laravel adds only the pair to a
/// response it let through; the handler's 429 is counted like any other.
#[tokio::test]
async fn a_handlers_own_retry_after_and_429_keep_their_values() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = Router::new()
                .get("/busy", |req: Request| async move {
                    let status = if req.query_param("full").is_some() {
                        429
                    } else {
                        200
                    };
                    HttpResponse::text("come back later")
                        .status(status)
                        .header("Retry-After", "3600")
                        .header("X-RateLimit-Reset", "42")
                })
                .middleware_named("throttle:3,1");
            let r = get_as_guest(&router, "/busy").await;
            assert_eq!(
                heads(&r),
                (
                    200,
                    Some("3".into()),
                    Some("2".into()),
                    Some("3600".into()),
                    Some("42".into())
                )
            );
            let r = get_as_guest(&router, "/busy?full=1").await;
            assert_eq!(
                heads(&r),
                (
                    429,
                    Some("3".into()),
                    Some("1".into()),
                    Some("3600".into()),
                    Some("42".into())
                )
            );
            assert_eq!(r.body_text(), "come back later");
            let r = get_as_guest(&router, "/busy?full=1").await;
            assert_eq!(heads(&r).2.as_deref(), Some("0"));
            // The throttle's own refusal now: its values, not the handler's.
            let t0 = clock.unix_seconds();
            assert_eq!(
                heads(&get_as_guest(&router, "/busy").await),
                refused("3", "60", t0 + 60)
            );
        })
        .await;
}

/// The same on the sliding window.
#[tokio::test]
async fn a_handlers_own_429_passes_the_sliding_window_with_its_pair() {
    let clock = clock_at(12, 0, 0);
    let router = Router::new()
        .get("/busy", |_req: Request| async {
            Response::Err(
                HttpResponse::text("busy")
                    .status(429)
                    .header("Retry-After", "7"),
            )
        })
        .middleware(RateLimitMiddleware::new(
            memory_driver(&clock),
            SlidingWindowConfig::new(2, MINUTE),
            |_| "busy".to_owned(),
        ));
    let r = get_as_guest(&router, "/busy").await;
    assert_eq!(
        heads(&r),
        (
            429,
            Some("2".into()),
            Some("1".into()),
            Some("7".into()),
            None
        )
    );
    assert_eq!(r.body_text(), "busy");
}

/// `HEAD` on a `GET` route passes the throttle as the `GET` does: counted
/// in the same bucket, with the pair on its answer and the four headers on
/// its refusal, over the wire with no body. Responses of other statuses
/// (404 from the handler) carry the pair too.
#[tokio::test]
async fn head_and_other_statuses_carry_the_headers_over_http() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            let router = Router::new()
                .get("/doc", |req: Request| async move {
                    if req.query_param("missing").is_some() {
                        HttpResponse::text("no such doc").status(404)
                    } else {
                        HttpResponse::text("the doc")
                    }
                })
                .middleware_named("throttle:3,1");
            let server = TestServer::start(router).await;
            let head = || {
                http::Request::head(server.url("/doc"))
                    .body(Full::<Bytes>::default())
                    .unwrap()
            };
            let r = server.send(head()).await;
            assert_eq!(wire(&r), ok("3", "2"));
            assert_eq!(r.body, "");
            let r = server.get("/doc?missing=1").await;
            assert_eq!(
                wire(&r),
                (404, Some("3".into()), Some("1".into()), None, None)
            );
            assert_eq!(wire(&server.get("/doc").await), ok("3", "0"));
            let r = server.send(head()).await;
            assert_eq!(wire(&r), refused("3", "60", t0 + 60));
            assert_eq!(r.body, "");
            assert_eq!(r.header("content-length"), Some("18"));
            assert_eq!(
                RateLimiter::attempts("ip:127.0.0.1:path:/doc")
                    .await
                    .unwrap(),
                3
            );
            server.stop().await;
        })
        .await;
}

/// `OPTIONS` on a route that has none is answered by the router (405 with
/// `Allow`) before any route middleware: not counted, no headers, as
/// Laravel answers it before the route's middleware.
#[tokio::test]
async fn options_is_answered_before_the_throttle_and_not_counted() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = ok_routes(&["/o"]).middleware_named("throttle:1,1");
            for _ in 0..3 {
                let r = send_as_guest(&router, http::Method::OPTIONS, "/o").await;
                assert_eq!(r.status_code(), 405);
                assert_eq!(r.header_str("x-ratelimit-limit"), None);
            }
            assert_eq!(heads(&get_as_guest(&router, "/o").await), ok("1", "0"));
        })
        .await;
}

// ---------------------------------------------------------------------------
// Named limiters' own answers.

/// A named limiter's `.response(...)` on the refusing limit of a list: the
/// callback's status and body, its own `Retry-After`, and the headers it
/// did not set added with the refusing limit's numbers. The limit that did
/// not refuse adds nothing to the refusal.
#[tokio::test]
async fn a_custom_refusal_gets_the_refusing_limits_missing_headers() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("custom", |_req| {
                vec![
                    Limit::per_minute(10).by("wide"),
                    Limit::per_second(1, 30).by("narrow").response(|req| {
                        HttpResponse::json(serde_json::json!({"slow": req.path()}))
                            .status(429)
                            .header("X-RateLimit-Limit", "one")
                    }),
                ]
                .into()
            });
            let router = ok_routes(&["/c"]).middleware_named("throttle:custom");
            assert_eq!(heads(&get_as_guest(&router, "/c").await), ok("1", "0"));
            clock.advance(Duration::from_secs(5));
            let r = get_as_guest(&router, "/c").await;
            assert_eq!(
                heads(&r),
                (
                    429,
                    Some("one".into()),
                    Some("0".into()),
                    Some("25".into()),
                    Some((t0 + 30).to_string())
                )
            );
            assert_eq!(r.body_text(), r#"{"slow":"/c"}"#);
            assert_eq!(r.header_str("content-type"), Some("application/json"));
        })
        .await;
}

/// A named limiter that answers with a response of its own, or with
/// `Limit::none()`, adds no header to that answer or to the handler's,
/// even when the handler sets a remaining count of its own.
#[tokio::test]
async fn a_named_limiters_own_answer_and_none_carry_no_headers() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            RateLimiter::define("gate", |req| {
                if req.query_param("blocked").is_some() {
                    HttpResponse::text("blocked").status(429).into()
                } else {
                    Limit::none().into()
                }
            });
            let router = Router::new()
                .get("/g", |_req: Request| async {
                    HttpResponse::text("mine").header("X-RateLimit-Remaining", "99")
                })
                .middleware_named("throttle:gate");
            for _ in 0..3 {
                let r = get_as_guest(&router, "/g").await;
                assert_eq!(heads(&r), (200, None, Some("99".into()), None, None));
                let r = get_as_guest(&router, "/g?blocked=1").await;
                assert_eq!(heads(&r), (429, None, None, None, None));
                assert_eq!(r.body_text(), "blocked");
            }
        })
        .await;
}

// ---------------------------------------------------------------------------
// The `throttle` alias with odd arguments.

/// Blanks around the arguments are trimmed (`throttle: 2 , 1 , pre `
/// counts 2 a minute under the prefix `pre`); a fractional window, which
/// Laravel reads as 30 seconds, and a negative one refuse the route when it
/// registers, naming the argument.
#[tokio::test]
async fn odd_alias_arguments_are_trimmed_or_refused_by_name() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            let spaced = ok_routes(&["/s"]).middleware_named("throttle: 2 , 1 , pre ");
            assert!(spaced.validate().is_ok());
            assert_eq!(heads(&get_as_guest(&spaced, "/s").await), ok("2", "1"));
            assert_eq!(heads(&get_as_guest(&spaced, "/s").await), ok("2", "0"));
            assert_eq!(
                heads(&get_as_guest(&spaced, "/s").await),
                refused("2", "60", t0 + 60)
            );
            assert_eq!(
                RateLimiter::attempts("pre:ip:203.0.113.5:path:/s")
                    .await
                    .unwrap(),
                2
            );
            for (alias, reason) in [
                (
                    "throttle:60,0.5",
                    "the window of `throttle` must be a whole number, got `0.5`",
                ),
                (
                    "throttle:60,-1",
                    "the window of `throttle` must be a whole number, got `-1`",
                ),
                (
                    "throttle:60, 0 ",
                    "the window of `throttle` must be at least 1 minute, got `0`",
                ),
            ] {
                let err = ok_routes(&["/x"])
                    .try_middleware_named(alias)
                    .unwrap_err()
                    .to_string();
                assert!(err.contains(reason), "{alias}: {err}");
            }
        })
        .await;
}
