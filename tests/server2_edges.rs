//! The server and its router at more of their edges: what a handler's odd
//! status leaves of the rate-limit headers, the headers every answer
//! carries, and requests shaped oddly, in process and over 127.0.0.1.

mod support;
mod throttle_support;

use std::time::{Duration, Instant};

use http::Method;
use http_body_util::Full;
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router};

use support::clock_at;
use support::h1::{Conn, one_answer};
use support::http::{TestServer, TimedServer};
use throttle_support::{memory_app, send_as_guest, status_and_counts};

// ---------------------------------------------------------------------------
// The rate-limit headers on every way a request ends.

/// Behind `throttle:2,1` (a bucket a path): `/boom` panics in its future,
/// `/hint` answers `103`.
fn throttled_odd_routes() -> Router {
    Router::new()
        .get("/boom", |_req: Request| async {
            if std::hint::black_box(true) {
                panic!("handler failed");
            }
            HttpResponse::text("never")
        })
        .get("/hint", |_req: Request| async {
            HttpResponse::text("early").status(103)
        })
        .try_middleware_named("throttle:2,1")
        .unwrap()
}

/// The `500` that replaces a handler's `1xx` is made inside the route's
/// middleware, as a panic's is: the throttle's `X-RateLimit-*` headers are
/// on both.
#[tokio::test]
async fn a_handlers_1xx_turned_500_keeps_the_throttles_headers_as_a_panic_does() {
    let app = memory_app(&clock_at(12, 0, 0));
    app.scope(async {
        let router = throttled_odd_routes();
        let boom = send_as_guest(&router, Method::GET, "/boom").await;
        assert_eq!(status_and_counts(&boom), (500, Some("2"), Some("1")));
        let hint = send_as_guest(&router, Method::GET, "/hint").await;
        assert_eq!(status_and_counts(&hint), (500, Some("2"), Some("1")));
    })
    .await;
}

/// The request whose handler answered a `1xx` is counted all the same:
/// `/hint`'s third request within the window is refused.
#[tokio::test]
async fn a_handlers_1xx_turned_500_is_counted_by_its_throttle() {
    let app = memory_app(&clock_at(12, 0, 0));
    app.scope(async {
        let router = throttled_odd_routes();
        for _ in 0..2 {
            let hint = send_as_guest(&router, Method::GET, "/hint").await;
            assert_eq!(hint.status_code(), 500);
        }
        let refused = send_as_guest(&router, Method::GET, "/hint").await;
        assert_eq!(status_and_counts(&refused), (429, Some("2"), Some("0")));
    })
    .await;
}

/// A limit counted `after` its response sees the `500` the client gets for
/// a handler's `103`, not the `103`, and counts it as the failure it is.
#[tokio::test]
async fn a_limit_counted_after_its_response_sees_the_500_a_1xx_becomes() {
    let app = memory_app(&clock_at(12, 0, 0));
    app.scope(async {
        RateLimiter::define("failures", |_req| {
            Limit::per_minute(1)
                .by("guest")
                .after(|r| r.status_code() >= 500)
                .into()
        });
        let router = Router::new()
            .get("/hint", |_req: Request| async {
                HttpResponse::text("early").status(103)
            })
            .try_middleware_named("throttle:failures")
            .unwrap();
        let first = send_as_guest(&router, Method::GET, "/hint").await;
        assert_eq!(first.status_code(), 500);
        let second = send_as_guest(&router, Method::GET, "/hint").await;
        assert_eq!(second.status_code(), 429);
    })
    .await;
}

/// Over HTTP/1 too the `500` sent for a handler's `103` carries the
/// throttle's `X-RateLimit-*` headers.
#[tokio::test]
async fn a_handlers_1xx_turned_500_on_the_wire_keeps_the_throttles_headers() {
    let app = memory_app(&clock_at(12, 0, 0));
    app.scope(async {
        let server = TestServer::start(throttled_odd_routes()).await;
        let (_conn, hint) =
            one_answer(server.addr(), "GET /hint HTTP/1.1\r\nHost: a\r\n\r\n").await;
        let hint = hint.unwrap();
        assert_eq!(
            (
                hint.status,
                hint.header("x-ratelimit-limit"),
                hint.header("x-ratelimit-remaining")
            ),
            (500, Some("2"), Some("1"))
        );
        server.stop().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Headers every answer carries.

/// `GET /a` answers "alpha"; `/boom` panics in its future.
fn alpha_and_boom() -> Router {
    Router::new()
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") })
        .get("/boom", |_req: Request| async {
            if std::hint::black_box(true) {
                panic!("handler failed");
            }
            HttpResponse::new()
        })
}

/// Whether `date` is an IMF-fixdate (`Sun, 06 Nov 1994 08:49:37 GMT`).
fn is_http_date(date: Option<&str>) -> bool {
    date.is_some_and(|date| {
        date.len() == 29 && date.ends_with(" GMT") && date.as_bytes()[3] == b','
    })
}

/// Every answer over HTTP/1 carries a `Date` and the `Content-Length` of
/// its content: a route's, a panicking handler's 500, the router's 404 and
/// 405, the server's 400 for a bad `Host`, and hyper's own 400 for a head
/// it cannot parse; a `HEAD` gets the length with no content.
#[tokio::test]
async fn every_answer_over_http1_carries_a_date_and_its_length() {
    let server = TestServer::start(alpha_and_boom()).await;
    for (request, status, length) in [
        ("GET /a HTTP/1.1\r\nHost: a\r\n\r\n", 200, 5),
        ("GET /boom HTTP/1.1\r\nHost: a\r\n\r\n", 500, 25),
        ("GET /nope HTTP/1.1\r\nHost: a\r\n\r\n", 404, 13),
        ("DELETE /a HTTP/1.1\r\nHost: a\r\n\r\n", 405, 22),
        ("GET /a HTTP/1.1\r\nHost: u@a\r\n\r\n", 400, 20),
        ("GET /a HTTP/1.1\r\nHost a\r\n\r\n", 400, 0),
    ] {
        let (_conn, answer) = one_answer(server.addr(), request).await;
        let answer = answer.unwrap();
        assert_eq!(answer.status, status, "{request:?}");
        assert!(
            is_http_date(answer.header("date")),
            "{request:?}: {answer:?}"
        );
        assert_eq!(
            (answer.header("content-length"), answer.body.len()),
            (Some(length.to_string().as_str()), length),
            "{request:?}"
        );
    }
    let mut conn = Conn::open(server.addr()).await;
    conn.send("HEAD /boom HTTP/1.1\r\nHost: a\r\n\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let head = conn.answer(true).await.unwrap();
    assert_eq!(
        (head.status, head.header("content-length")),
        (500, Some("25"))
    );
    assert!(is_http_date(head.header("date")));
    assert_eq!(conn.answer(false).await.unwrap().text(), "alpha");
    server.stop().await;
}

/// Over HTTP/2 (prior knowledge) the same answers carry a `date` and the
/// `content-length` of their content, and a panicking handler's 500 leaves
/// the connection serving.
#[tokio::test]
async fn every_answer_over_http2_carries_a_date_and_its_length() {
    let server = TestServer::start(alpha_and_boom()).await;
    for (method, path, status, length) in [
        ("GET", "/a", 200, "5"),
        ("GET", "/boom", 500, "25"),
        ("HEAD", "/boom", 500, "25"),
        ("GET", "/nope", 404, "13"),
        ("DELETE", "/a", 405, "22"),
        ("GET", "/a", 200, "5"),
    ] {
        let request = http::Request::builder()
            .method(method)
            .uri(server.url(path))
            .body(Full::default())
            .unwrap();
        let reply = server.send_h2(request).await;
        assert_eq!(reply.status, status, "{method} {path}");
        assert!(is_http_date(reply.header("date")), "{method} {path}");
        assert_eq!(
            reply.header("content-length"),
            Some(length),
            "{method} {path}"
        );
        let content = if method == "HEAD" {
            0
        } else {
            length.parse().unwrap()
        };
        assert_eq!(reply.body.len(), content, "{method} {path}");
    }
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Slow heads on a kept-alive connection.

/// The header read timeout runs on HTTP/1 from the end of a response to
/// the blank line of the next head: a next head begun within the period
/// but not ended by its end is cut there, the connection closed with no
/// answer.
#[tokio::test]
async fn a_next_head_begun_in_time_but_ended_late_is_cut_at_the_period() {
    let period = Duration::from_secs(2);
    let server = TimedServer::start(alpha_and_boom(), period).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send("GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().text(), "alpha");
    let answered = Instant::now();
    tokio::time::sleep(period * 4 / 5).await;
    conn.send("GET /a HTTP/1.1\r\n").await.unwrap();
    assert_eq!(
        conn.more(period * 3).await,
        Some(false),
        "the connection stays open"
    );
    let closed = answered.elapsed();
    assert!(
        closed + Duration::from_millis(100) >= period
            && closed < period + Duration::from_millis(700),
        "closed {closed:?} after the answer"
    );
    server.stop().await;
}
