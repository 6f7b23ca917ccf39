//! More of the server's HTTP/1.1 path over raw TCP on 127.0.0.1: how the
//! limiters count pipelined, HTTP/1.0 and absolute-form requests; request
//! framing shapes (`Transfer-Encoding` lists, `Expect`, bare line ends in
//! chunks) read one way only; methods beside `GET` and `POST`; a head cut
//! by the header read timeout; and answers a handler makes odd (a `1xx`,
//! thousands of headers).

mod support;
mod throttle_support;

use std::time::{Duration, Instant};

use suprnova::clock::Clock;
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, RateLimiter, Request, Router};

use support::clock_at;
use support::h1::*;
use support::http::{TestServer, TimedServer};
use throttle_support::memory_app;

// ---------------------------------------------------------------------------
// A client that writes its own bytes and reads answers as they come.

// ---------------------------------------------------------------------------
// What the limiters count.

/// `throttle:3,1` over one connection that writes five requests at once,
/// each spelling the path its own way (`//login/`, an absolute-form target
/// naming another host, an escaped letter): each is counted, in order, in
/// the path's one bucket: three 200s counting down, then two 429s, and the
/// connection stays in step for a request after them.
#[tokio::test]
async fn a_pipeline_is_counted_request_by_request_in_one_bucket() {
    let clock = clock_at(12, 0, 0);
    let t0 = clock.unix_seconds();
    memory_app(&clock)
        .scope(async {
            let login = Served::default();
            let router = Router::new()
                .get("/login", login.route("in"))
                .middleware_named("throttle:3,1")
                .get("/free", |_req: Request| async {
                    HttpResponse::text("free")
                });
            let server = TestServer::start(router).await;
            let mut conn = Conn::open(server.addr()).await;
            conn.send(
                "GET /login HTTP/1.1\r\nHost: a\r\n\r\n\
                 GET //login/ HTTP/1.1\r\nHost: a\r\n\r\n\
                 GET http://elsewhere.example/login?x=1 HTTP/1.1\r\nHost: a\r\n\r\n\
                 GET /%6cogin HTTP/1.1\r\nHost: a\r\n\r\n\
                 GET /login HTTP/1.1\r\nHost: a\r\n\r\n\
                 GET /free HTTP/1.1\r\nHost: a\r\n\r\n",
            )
            .await
            .unwrap();
            let mut got = Vec::new();
            for _ in 0..5 {
                let a = conn.answer(false).await.expect("an answer");
                got.push((
                    a.status,
                    a.header("x-ratelimit-remaining").map(str::to_owned),
                    a.header("retry-after").map(str::to_owned),
                    a.header("x-ratelimit-reset").map(str::to_owned),
                ));
            }
            let ok = |left: &str| (200, Some(left.to_owned()), None, None);
            let refused = (
                429,
                Some("0".to_owned()),
                Some("60".to_owned()),
                Some((t0 + 60).to_string()),
            );
            assert_eq!(
                got,
                vec![ok("2"), ok("1"), ok("0"), refused.clone(), refused]
            );
            let free = conn.answer(false).await.unwrap();
            assert_eq!((free.status, free.text().as_str()), (200, "free"));
            assert_eq!(login.count(), 3);
            assert_eq!(
                RateLimiter::attempts("ip:127.0.0.1:path:/login")
                    .await
                    .unwrap(),
                3,
                "a refused request is not counted, as in Laravel"
            );
            server.stop().await;
        })
        .await;
}

/// `throttle:200,1` over a pipeline of 250 requests written at once (the
/// path's raw UTF-8 and escaped spellings alternating, both one route and
/// one bucket): exactly the first 200 are served, in order, and the last
/// 50 refused; no request is lost or counted twice.
#[tokio::test]
async fn a_long_pipeline_is_counted_exactly() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let served = Served::default();
            let router = Router::new()
                .get("/caf\u{e9}", served.route("cafe"))
                .middleware_named("throttle:200,1");
            let server = TestServer::start(router).await;
            let mut conn = Conn::open(server.addr()).await;
            let mut pipeline = Vec::new();
            for i in 0..250 {
                let target: &[u8] = if i % 2 == 0 {
                    b"/caf\xc3\xa9"
                } else {
                    b"/caf%C3%A9"
                };
                pipeline.extend_from_slice(b"GET ");
                pipeline.extend_from_slice(target);
                pipeline.extend_from_slice(b" HTTP/1.1\r\nHost: a\r\n\r\n");
            }
            conn.send(&pipeline).await.unwrap();
            let mut statuses = Vec::new();
            let mut remaining = Vec::new();
            for _ in 0..250 {
                let a = conn.answer(false).await.expect("an answer");
                statuses.push(a.status);
                if a.status == 200 {
                    remaining.push(
                        a.header("x-ratelimit-remaining")
                            .unwrap()
                            .parse::<u32>()
                            .unwrap(),
                    );
                }
            }
            let mut expected = vec![200; 200];
            expected.extend([429; 50]);
            assert_eq!(statuses, expected);
            assert_eq!(remaining, (0..200).rev().collect::<Vec<u32>>());
            assert_eq!(served.count(), 200);
            assert!(conn.open_after(Duration::from_millis(200)).await);
            server.stop().await;
        })
        .await;
}

/// A handler that runs longer than the header read timeout is answered,
/// and the request pipelined behind it is read and answered after it: a
/// request in flight is no idle connection.
#[tokio::test]
async fn a_handler_slower_than_the_header_read_timeout_is_answered_and_the_pipeline_goes_on() {
    let period = Duration::from_millis(200);
    let router = Router::new()
        .get("/slow", |_req: Request| async {
            tokio::time::sleep(Duration::from_millis(700)).await;
            HttpResponse::text("slow")
        })
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") });
    let server = TimedServer::start(router, period).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let slow = conn.answer(false).await.expect("the slow answer");
    assert_eq!((slow.status, slow.text().as_str()), (200, "slow"));
    let next = conn.answer(false).await.expect("the pipelined answer");
    assert_eq!((next.status, next.text().as_str()), (200, "alpha"));
    server.stop().await;
}

/// HTTP/1.0 requests, which need no `Host`, are served and counted like
/// any other: one a connection (each closed after its answer), and two on
/// a connection kept alive with `Connection: keep-alive`.
#[tokio::test]
async fn http_1_0_requests_without_a_host_are_served_and_counted() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let served = Served::default();
            let router = Router::new()
                .get("/old", served.route("old"))
                .middleware_named("throttle:3,1");
            let server = TestServer::start(router).await;
            let mut statuses = Vec::new();
            for _ in 0..2 {
                let mut conn = Conn::open(server.addr()).await;
                conn.send("GET /old HTTP/1.0\r\n\r\n").await.unwrap();
                let a = conn.answer(false).await.unwrap();
                assert!(a.head.starts_with("HTTP/1.0 "), "{:?}", a.head);
                statuses.push(a.status);
                assert!(conn.closed().await);
            }
            let mut conn = Conn::open(server.addr()).await;
            conn.send(
                "GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n\
                 GET /old HTTP/1.0\r\nConnection: keep-alive\r\n\r\n",
            )
            .await
            .unwrap();
            for _ in 0..2 {
                statuses.push(conn.answer(false).await.unwrap().status);
            }
            assert_eq!(statuses, vec![200, 200, 200, 429]);
            assert_eq!(served.count(), 3);
            server.stop().await;
        })
        .await;
}

/// A head the header read timeout cuts (sent a few bytes at a time, its
/// blank line never in time) reaches no route and is counted by no limit:
/// the connection is closed, and the bytes sent after are not read.
#[tokio::test]
async fn a_head_cut_by_the_header_read_timeout_is_neither_served_nor_counted() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let period = Duration::from_millis(300);
            let served = Served::default();
            let router = Router::new()
                .get("/slow-head", served.route("served"))
                .middleware_named("throttle:5,1");
            let server = TimedServer::start(router, period).await;
            let started = Instant::now();
            let mut conn = Conn::open(server.addr()).await;
            let head = "GET /slow-head HTTP/1.1\r\nHost: a\r\nX-Long: aaaaaaaaaaaaaaaaaaaa";
            let mut cut = false;
            for byte in head.bytes() {
                if conn.send([byte]).await.is_err()
                    || !conn.open_after(Duration::from_millis(50)).await
                {
                    cut = true;
                    break;
                }
            }
            if !cut {
                let _ = conn.send("\r\n\r\n").await;
                let answer = conn.answer(false).await;
                assert!(answer.is_none(), "a late head was answered: {answer:?}");
            }
            assert!(
                started.elapsed() < period * 3 + Duration::from_millis(700),
                "{:?}",
                started.elapsed()
            );
            assert_eq!(served.count(), 0);
            assert_eq!(
                RateLimiter::attempts("ip:127.0.0.1:path:/slow-head")
                    .await
                    .unwrap(),
                0
            );
            server.stop().await;
        })
        .await;
}

/// A request a limit refuses while its client waits for `100 Continue`
/// gets its 429 and no `100`; the body its client sends anyway (holding a
/// request) is never read as a request that would skip the limit; nor is
/// the body of a request refused before any limit (a second `Host`, no
/// route, a method the route has not). The same request within the limit
/// is told to go on, and its body read.
#[tokio::test]
async fn a_refused_expect_100_continue_body_is_never_read_as_a_request() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let smuggled = Served::default();
            let router = Router::new()
                .post("/upload", echo)
                .middleware_named("throttle:1,1")
                .get("/smuggled", smuggled.route("smuggled"));
            let server = TestServer::start(router).await;
            let head = format!(
                "POST /upload HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\nExpect: 100-continue\r\n\r\n",
                SMUGGLED.len()
            );
            let mut conn = Conn::open(server.addr()).await;
            conn.send(&head).await.unwrap();
            assert_eq!(conn.answer(false).await.unwrap().status, 100);
            conn.send(SMUGGLED).await.unwrap();
            let admitted = conn.answer(false).await.unwrap();
            assert_eq!((admitted.status, admitted.text()), (200, SMUGGLED.to_owned()));

            // Refused: on the same connection, and on a new one.
            for fresh in [false, true] {
                if fresh {
                    conn = Conn::open(server.addr()).await;
                }
                conn.send(&head).await.unwrap();
                let refused = conn.answer(false).await.unwrap();
                assert_eq!(refused.status, 429, "{refused:?}");
                let _ = conn.send(SMUGGLED).await;
                let after = conn.answer(false).await;
                assert!(after.is_none(), "the body was answered: {after:?}");
            }
            // Refused before any limit: a second Host (400), no route
            // (404), a method the route has not (405).
            for head in [
                "POST /upload HTTP/1.1\r\nHost: a\r\nHost: b\r\n",
                "POST /nowhere HTTP/1.1\r\nHost: a\r\n",
                "PUT /upload HTTP/1.1\r\nHost: a\r\n",
            ] {
                let mut conn = Conn::open(server.addr()).await;
                conn.send(format!(
                    "{head}Content-Length: {}\r\nExpect: 100-continue\r\n\r\n",
                    SMUGGLED.len()
                ))
                .await
                .unwrap();
                let refused = conn.answer(false).await.unwrap();
                assert!(
                    [400, 404, 405].contains(&refused.status),
                    "{head:?}: {refused:?}"
                );
                let _ = conn.send(SMUGGLED).await;
                let after = conn.answer(false).await;
                assert!(after.is_none(), "{head:?}: the body was answered: {after:?}");
            }
            assert_eq!(smuggled.count(), 0);
            server.stop().await;
        })
        .await;
}

/// An answer given before its request's body came whole (the handler did
/// not read it, no route, a second `Host`, a limit's 429 or its admitted
/// answer) closes the connection after it: the rest of the body is never
/// read as a request. Without a limit in the way the answer says
/// `Connection: close` too.
#[tokio::test]
async fn an_answer_before_the_body_came_closes_the_connection() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = Router::new()
                .post("/limited", |_req: Request| async {
                    HttpResponse::text("limited")
                })
                .middleware_named("throttle:1,1")
                .post("/free", |_req: Request| async { HttpResponse::text("free") });
            let server = TestServer::start(router).await;
            let cases = [
                ("POST /free HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc", 200, true),
                ("POST /free HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\nExpect: 100-continue\r\n\r\n", 200, true),
                ("POST /nowhere HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc", 404, true),
                ("POST /free HTTP/1.1\r\nHost: a\r\nHost: b\r\nContent-Length: 100\r\n\r\nabc", 400, true),
                ("POST /free HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n", 200, true),
                ("POST /limited HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc", 200, false),
                ("POST /limited HTTP/1.1\r\nHost: a\r\nContent-Length: 100\r\n\r\nabc", 429, false),
            ];
            for (request, status, says_close) in cases {
                let mut conn = Conn::open(server.addr()).await;
                conn.send(format!("{request}{SMUGGLED}")).await.unwrap();
                let a = conn.answer(false).await.expect("an answer");
                assert_eq!(a.status, status, "{request:?}: {a:?}");
                if says_close {
                    assert_eq!(a.header("connection"), Some("close"), "{request:?}: {a:?}");
                }
                assert!(conn.closed().await, "{request:?}: left open");
            }
            server.stop().await;
        })
        .await;
}

// ---------------------------------------------------------------------------
// Framing read one way only.

/// An expectation other than `100-continue` asks nothing of the server:
/// the body is read at once. On HTTP/1.0 `100-continue` is ignored (RFC
/// 9110, 10.1.1): no `100` goes out, and the body sent with the head is
/// read.
#[tokio::test]
async fn other_expectations_and_http_1_0_continue_read_the_body_at_once() {
    let server = TestServer::start(Router::new().post("/echo", echo)).await;
    for (request, version) in [
        (
            "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 200-ok\r\nContent-Length: 3\r\n\r\nabc",
            "HTTP/1.1 ",
        ),
        (
            "POST /echo HTTP/1.1\r\nHost: a\r\nExpect: 100-continue, x\r\nContent-Length: 3\r\n\r\nabc",
            "HTTP/1.1 ",
        ),
        (
            "POST /echo HTTP/1.0\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\nabc",
            "HTTP/1.0 ",
        ),
    ] {
        let mut conn = Conn::open(server.addr()).await;
        conn.send(request).await.unwrap();
        let a = conn.answer(false).await.unwrap();
        assert!(a.head.starts_with(version), "{request:?}: {a:?}");
        assert_eq!((a.status, a.text().as_str()), (200, "abc"), "{request:?}");
    }
    server.stop().await;
}

/// `Transfer-Encoding` lists: one whose last coding is not `chunked`
/// (`chunked, identity`, `chunked` then `identity` on two lines, a
/// trailing comma, a vertical tab before `chunked`) gets 400 and the
/// connection closed, the bytes after never read; `Chunked` in any case,
/// `chunked` given on two lines, or after an empty member, is read chunked
/// once and the next request served in step.
#[tokio::test]
async fn transfer_encoding_lists_are_read_chunked_or_refused() {
    let smuggled = Served::default();
    let router = Router::new()
        .post("/echo", echo)
        .get("/smuggled", smuggled.route("smuggled"))
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") });
    let server = TestServer::start(router).await;
    let body = format!("3\r\nabc\r\n0\r\n\r\n{SMUGGLED}");
    for te in [
        "Transfer-Encoding: chunked, identity",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: identity",
        "Transfer-Encoding: chunked,",
        "Transfer-Encoding: \x0bchunked",
        "Transfer-Encoding: chunked\r\nContent-Length: 3\r\nTransfer-Encoding: identity",
    ] {
        let mut conn = Conn::open(server.addr()).await;
        conn.send(format!(
            "POST /echo HTTP/1.1\r\nHost: a\r\n{te}\r\n\r\n{body}"
        ))
        .await
        .unwrap();
        let a = conn.answer(false).await;
        assert_eq!(a.map(|a| a.status), Some(400), "{te:?}");
        assert!(conn.closed().await, "{te:?}: left open");
    }
    for te in [
        "Transfer-Encoding: Chunked",
        "Transfer-Encoding: CHUNKED",
        "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: ,chunked",
    ] {
        let mut conn = Conn::open(server.addr()).await;
        conn.send(format!(
            "POST /echo HTTP/1.1\r\nHost: a\r\n{te}\r\n\r\n3\r\nabc\r\n0\r\n\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n"
        ))
        .await
        .unwrap();
        let a = conn.answer(false).await.unwrap();
        assert_eq!((a.status, a.text().as_str()), (200, "abc"), "{te:?}");
        let next = conn.answer(false).await.unwrap();
        assert_eq!(next.text(), "alpha", "{te:?}");
    }
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

/// Inside a chunked body only CRLF ends a line: a size line or a chunk's
/// data ended by a bare LF, or data longer than its size, ends the read
/// with 400 and closes the connection; nothing after it is read as a
/// request.
#[tokio::test]
async fn a_chunk_framed_with_bare_line_feeds_gets_400_and_a_close() {
    let smuggled = Served::default();
    let router = Router::new()
        .post("/echo", echo)
        .get("/smuggled", smuggled.route("smuggled"));
    let server = TestServer::start(router).await;
    for chunks in [
        "3\nabc\n0\n\n",
        "3\r\nabc\n0\r\n\r\n",
        "3\r\nabcXX0\r\n\r\n",
        "3\r\nabcd\r\n0\r\n\r\n",
    ] {
        let mut conn = Conn::open(server.addr()).await;
        conn.send(format!(
            "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{chunks}{SMUGGLED}"
        ))
        .await
        .unwrap();
        let a = conn.answer(false).await.unwrap();
        assert_eq!(a.status, 400, "{chunks:?}: {a:?}");
        assert!(conn.closed().await, "{chunks:?}: left open");
    }
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

/// A head of exactly 100 lines is served; one of 101 gets 431 and a close.
/// A request line with a doubled space, or a space before its line end,
/// and a bare CR ending it, get 400 and a close.
#[tokio::test]
async fn header_count_edges_and_request_line_spacing() {
    let smuggled = Served::default();
    let router = Router::new()
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") })
        .get("/smuggled", smuggled.route("smuggled"));
    let server = TestServer::start(router).await;
    let head_of = |lines: usize| {
        let mut head = String::from("GET /a HTTP/1.1\r\nHost: a\r\n");
        for i in 1..lines {
            head.push_str(&format!("X-{i}: v\r\n"));
        }
        head.push_str("\r\n");
        head
    };
    let mut conn = Conn::open(server.addr()).await;
    conn.send(head_of(100)).await.unwrap();
    assert_eq!(conn.answer(false).await.unwrap().text(), "alpha");
    let mut conn = Conn::open(server.addr()).await;
    conn.send(format!("{}{SMUGGLED}", head_of(101)))
        .await
        .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().status, 431);
    assert!(conn.closed().await);
    for line in [
        "GET  /smuggled HTTP/1.1\r\n",
        "GET /smuggled  HTTP/1.1\r\n",
        "GET /smuggled HTTP/1.1 \r\n",
        "GET /smuggled HTTP/1.1\r",
    ] {
        let mut conn = Conn::open(server.addr()).await;
        conn.send(format!("{line}Host: a\r\n\r\n")).await.unwrap();
        let a = conn.answer(false).await;
        assert_eq!(a.map(|a| a.status), Some(400), "{line:?}");
        assert!(conn.closed().await, "{line:?}");
    }
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Methods.

/// `OPTIONS` and `TRACE` routes are served; on a `GET` route they get 405
/// with `Allow`, as does a method in lower case (methods are
/// case-sensitive). `CONNECT host:port` reaches no route (404) and the
/// connection goes on.
#[tokio::test]
async fn options_trace_and_connect_on_the_wire() {
    let router = Router::new()
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") })
        .route(http::Method::OPTIONS, "/o", |_req: Request| async {
            HttpResponse::text("options")
        })
        .route(http::Method::TRACE, "/t", |_req: Request| async {
            HttpResponse::text("trace")
        });
    let server = TestServer::start(router).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send(
        "OPTIONS /o HTTP/1.1\r\nHost: a\r\n\r\n\
         TRACE /t HTTP/1.1\r\nHost: a\r\n\r\n\
         TRACE /a HTTP/1.1\r\nHost: a\r\n\r\n\
         get /a HTTP/1.1\r\nHost: a\r\n\r\n\
         CONNECT a.example:443 HTTP/1.1\r\nHost: a.example:443\r\n\r\n\
         GET /a HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    for _ in 0..6 {
        let a = conn.answer(false).await.expect("an answer");
        got.push((a.status, a.text(), a.header("allow").map(str::to_owned)));
    }
    let allow = Some("GET, HEAD".to_owned());
    assert_eq!(
        got,
        vec![
            (200, "options".to_owned(), None),
            (200, "trace".to_owned(), None),
            (405, "405 Method Not Allowed".to_owned(), allow.clone()),
            (405, "405 Method Not Allowed".to_owned(), allow),
            (404, "404 Not Found".to_owned(), None),
            (200, "alpha".to_owned(), None),
        ]
    );
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Answers a handler makes odd.

/// Thousands of headers set by a handler (some 400 KiB of head), and one
/// value of 1 MiB, go out whole, and the next answer on the connection is
/// read in step.
#[tokio::test]
async fn a_huge_head_set_by_a_handler_goes_out_whole() {
    let router = Router::new()
        .get("/many", |_req: Request| async {
            let mut answer = HttpResponse::text("many");
            for i in 0..6000 {
                answer.set_header(format!("x-h{i}"), "v".repeat(60));
            }
            answer.set_header("x-huge", "h".repeat(1 << 20));
            answer
        })
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") });
    let server = TestServer::start(router).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send("GET /many HTTP/1.1\r\nHost: a\r\n\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let many = conn.answer(false).await.unwrap();
    assert_eq!((many.status, many.text().as_str()), (200, "many"));
    assert_eq!(many.header("x-h5999").map(str::len), Some(60));
    assert_eq!(many.header("x-huge").map(str::len), Some(1 << 20));
    assert_eq!(
        many.headers
            .iter()
            .filter(|(n, _)| n.starts_with("x-h"))
            .count(),
        6001
    );
    assert_eq!(conn.answer(false).await.unwrap().text(), "alpha");
    server.stop().await;
}

/// The router for a handler's `1xx`: `/hint` answers 103, `/continue` 100.
fn informational_routes() -> Router {
    Router::new()
        .get("/hint", |_req: Request| async {
            HttpResponse::text("early").status(103)
        })
        .get("/continue", |_req: Request| async {
            HttpResponse::text("go on").status(100)
        })
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") })
}

#[tokio::test]
async fn a_handlers_1xx_over_http1_is_the_same_answer_in_process_and_on_the_wire() {
    let router = informational_routes();
    let server = TestServer::start(informational_routes()).await;
    for path in ["/hint", "/continue"] {
        let mut conn = Conn::open(server.addr()).await;
        conn.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .await
            .unwrap();
        let wire = conn.answer(false).await.unwrap();
        let request = http::Request::get(path)
            .version(http::Version::HTTP_11)
            .body(String::new())
            .unwrap();
        let in_process =
            handle_request_with_peer(&router, request, "127.0.0.1:4000".parse().unwrap()).await;
        assert_eq!(wire.status, 500, "{path}");
        assert_eq!(in_process.status_code(), wire.status, "{path}");
    }
    server.stop().await;
}

#[tokio::test]
async fn a_handlers_1xx_over_http1_leaves_the_connection_serving() {
    let server = TestServer::start(informational_routes()).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send("GET /hint HTTP/1.1\r\nHost: a\r\n\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let hint = conn.answer(false).await.unwrap();
    assert_eq!(hint.status, 500);
    let next = conn.answer(false).await;
    if hint.header("connection") != Some("close") {
        assert_eq!(
            next.map(|a| (a.status, a.text())),
            Some((200, "alpha".to_owned())),
            "the pipelined request after a 500 without `Connection: close`"
        );
    }
    server.stop().await;
}

#[tokio::test]
async fn connect_with_a_path_for_its_target_gets_400() {
    let router = Router::new()
        .route(http::Method::CONNECT, "/tunnel", |_req: Request| async {
            HttpResponse::text("tunnel")
        })
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") });
    let server = TestServer::start(router).await;
    for target in ["/tunnel", "http://a.example/tunnel"] {
        let mut conn = Conn::open(server.addr()).await;
        conn.send(format!(
            "CONNECT {target} HTTP/1.1\r\nHost: a.example\r\n\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n"
        ))
        .await
        .unwrap();
        let answer = conn.answer(false).await.expect("an answer");
        assert_eq!(answer.status, 400, "{target}: {answer:?}");
    }
    server.stop().await;
}

/// `POST /echo`: its body, read with a cap of 64 bytes.
async fn echo(mut req: Request) -> HttpResponse {
    match req.body_bytes(64).await {
        Ok(body) => HttpResponse::bytes(body),
        Err(error) => error.to_response(),
    }
}
