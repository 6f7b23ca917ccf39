//! The server's HTTP/1.1 path driven over raw TCP, a byte at a time where
//! the framing matters: malformed heads, bodies over the cap, bodies cut
//! short or left unread on a kept-alive connection (whose bytes must never
//! be read as a next request), pipelining, `HEAD`, graceful shutdown, and
//! the client address the limiters see through forwarded headers.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig};
use suprnova::{HttpResponse, Request, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::clock_at;
use support::h1::*;
use support::http::{TestServer, TimedServer};

const MINUTE: Duration = Duration::from_secs(60);

// ---------------------------------------------------------------------------
// The routes.

/// `GET /` "hi", `/a` "alpha", `/b` "bravo", `/empty` an empty 200,
/// `/no-content` a 204 given a body, `/slow` "slow" after 800 ms,
/// `/smuggled` (counted in `smuggled`), `/ip` the client address,
/// `POST /echo` its body read with a cap of 16 bytes, and `POST /read` the
/// length of its body read with the default cap.
fn routes(smuggled: &Served) -> Router {
    let smuggled = smuggled.0.clone();
    Router::new()
        .get("/", |_req: Request| async { HttpResponse::text("hi") })
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") })
        .get("/b", |_req: Request| async { HttpResponse::text("bravo") })
        .get("/empty", |_req: Request| async { HttpResponse::new() })
        .get("/no-content", |_req: Request| async {
            HttpResponse::text("never sent").status(204)
        })
        .get("/slow", |_req: Request| async {
            tokio::time::sleep(Duration::from_millis(800)).await;
            HttpResponse::text("slow")
        })
        .get("/smuggled", move |_req: Request| {
            smuggled.fetch_add(1, Ordering::SeqCst);
            async { HttpResponse::text("smuggled") }
        })
        .get("/ip", |req: Request| async move {
            HttpResponse::text(req.ip().unwrap_or_else(|| "none".to_owned()))
        })
        .post("/echo", echo)
        .post("/read", |mut req: Request| async move {
            match req.bytes().await {
                Ok(body) => HttpResponse::text(format!("{} bytes", body.len())),
                Err(error) => error.to_response(),
            }
        })
}

/// `text` padded with `x` to `length` bytes.
fn padded(text: &str, length: usize) -> String {
    assert!(text.len() <= length);
    format!("{text}{}", "x".repeat(length - text.len()))
}

// ---------------------------------------------------------------------------
// Malformed request heads.

/// A head the grammar of RFC 9112 refuses gets `400 Bad Request` and the
/// connection closed; no route runs. Among them: a method that is not a
/// token, a header line without a colon, a folded line (obs-fold), a NUL or
/// a bare CR in a value, whitespace before a colon, an unknown version, and
/// `Transfer-Encoding` on HTTP/1.0 or without `chunked` last.
#[tokio::test]
async fn malformed_heads_get_400_and_the_connection_closed() {
    let smuggled = Served::default();
    let server = TestServer::start(routes(&smuggled)).await;
    let heads: &[&[u8]] = &[
        b"G(T /smuggled HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /smuggled HTTP/1.1\r\nHost: a\r\nNoColonHere\r\n\r\n",
        b"GET /smuggled HTTP/1.1\r\nHost: a\r\nX-Folded: one\r\n two\r\n\r\n",
        b"GET /smuggled HTTP/1.1\r\nHost: a\r\nX-Nul: a\0b\r\n\r\n",
        b"GET /smuggled HTTP/1.1\r\nHost: a\r\nX-Cr: a\rb\r\n\r\n",
        b"GET /smuggled HTTP/1.1\r\nHost : a\r\n\r\n",
        b"GET /smuggled HTTP/9.9\r\nHost: a\r\n\r\n",
        b"GET /smug gled HTTP/1.1\r\nHost: a\r\n\r\n",
        b"GET /smuggled\x7f HTTP/1.1\r\nHost: a\r\n\r\n",
        b"POST /echo HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: identity\r\n\r\n",
        b"POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked, gzip\r\n\r\n",
    ];
    for head in heads {
        let shown = String::from_utf8_lossy(head);
        let (mut conn, answer) = one_answer(server.addr(), head).await;
        let answer = answer.unwrap_or_else(|| panic!("no answer to {shown:?}"));
        assert_eq!(answer.status, 400, "{shown:?}: {answer:?}");
        assert!(conn.closed().await, "{shown:?}: the connection stays open");
    }
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

/// A target over 65,534 bytes gets `414 URI Too Long`; more than 100 header
/// lines, or a head larger than the server reads (about 400 KiB), get
/// `431 Request Header Fields Too Large`; each closes its connection.
#[tokio::test]
async fn overlong_targets_get_414_and_oversized_heads_431() {
    let smuggled = Served::default();
    let server = TestServer::start(routes(&smuggled)).await;

    let long_target = format!(
        "GET /smuggled?{} HTTP/1.1\r\nHost: a\r\n\r\n",
        "q".repeat(70_000)
    );
    let (mut conn, answer) = one_answer(server.addr(), long_target).await;
    assert_eq!(answer.unwrap().status, 414);
    assert!(conn.closed().await);

    let mut many = String::from("GET /smuggled HTTP/1.1\r\nHost: a\r\n");
    for i in 0..150 {
        many.push_str(&format!("X-H{i}: v\r\n"));
    }
    many.push_str("\r\n");
    let (mut conn, answer) = one_answer(server.addr(), many).await;
    assert_eq!(answer.unwrap().status, 431);
    assert!(conn.closed().await);

    // Written by a task of its own: the server answers before it has read
    // it all.
    let huge = format!(
        "GET /smuggled HTTP/1.1\r\nHost: a\r\nX-Big: {}\r\n\r\n",
        "b".repeat(500_000)
    );
    let stream = TcpStream::connect(server.addr()).await.unwrap();
    let (mut read, mut write) = stream.into_split();
    let writer = tokio::spawn(async move {
        let _ = write.write_all(huge.as_bytes()).await;
        write
    });
    let mut got = Vec::new();
    let _ = tokio::time::timeout(WAIT, read.read_to_end(&mut got)).await;
    let got = String::from_utf8_lossy(&got);
    assert!(
        got.starts_with("HTTP/1.1 431 Request Header Fields Too Large\r\n"),
        "{got:?}"
    );
    let _ = writer.await;
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

/// What RFC 9112 lets a server accept is served as its request and nothing
/// else: lines ended by a bare LF, a header value with bytes past ASCII
/// (obs-text; `Request::header` gives `None` for it), a target in absolute
/// form naming another host, and the same `Content-Length` twice.
#[tokio::test]
async fn lenient_heads_are_served_as_written() {
    let smuggled = Served::default();
    let router = routes(&smuggled).get("/header", |req: Request| async move {
        HttpResponse::text(format!(
            "{:?} {}",
            req.header("x-latin"),
            req.headers().get("x-latin").map_or(0, |v| v.len())
        ))
    });
    let server = TestServer::start(router).await;
    let cases: &[(&[u8], &str)] = &[
        (b"GET /a HTTP/1.1\nHost: a\n\n", "alpha"),
        (
            b"GET /header HTTP/1.1\r\nHost: a\r\nX-Latin: caf\xe9\xff\r\n\r\n",
            "None 5",
        ),
        (
            b"GET http://elsewhere.example/b?x=1 HTTP/1.1\r\nHost: a\r\n\r\n",
            "bravo",
        ),
        (
            b"POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\nContent-Length: 3\r\n\r\nabc",
            "abc",
        ),
    ];
    for (head, body) in cases {
        let shown = String::from_utf8_lossy(head);
        let (_conn, answer) = one_answer(server.addr(), head).await;
        let answer = answer.unwrap_or_else(|| panic!("no answer to {shown:?}"));
        assert_eq!(answer.status, 200, "{shown:?}: {answer:?}");
        assert_eq!(answer.text(), *body, "{shown:?}");
    }
    // The server-wide OPTIONS reaches no route here: a 4xx, never a 5xx.
    let (_conn, answer) = one_answer(server.addr(), "OPTIONS * HTTP/1.1\r\nHost: a\r\n\r\n").await;
    let status = answer.unwrap().status;
    assert!((400..500).contains(&status), "{status}");
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Bodies.

/// A `Content-Length` over the reader's cap gets `413` before a byte of the
/// body is read: a client that asked `Expect: 100-continue` gets the 413
/// and no `100 Continue` (so it never sends the body), and the connection,
/// whose body will not come, is closed. Through `key_reads_body` the same.
/// Within the cap the client is told to go on and its body is read.
#[tokio::test]
async fn a_length_over_the_cap_gets_413_without_100_continue() {
    let clock = clock_at(12, 0, 0);
    let driver: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let keyed = RateLimitMiddleware::new(driver, SlidingWindowConfig::new(100, MINUTE), |_req| {
        "all".to_owned()
    })
    .key_reads_body(16);
    let reached = Served::default();
    let counter = reached.0.clone();
    let smuggled = Served::default();
    let router = routes(&smuggled)
        .post("/keyed", move |_req: Request| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { HttpResponse::text("keyed") }
        })
        .middleware(keyed);
    let server = TestServer::start(router).await;

    for path in ["/echo", "/keyed"] {
        let head = format!(
            "POST {path} HTTP/1.1\r\nHost: a\r\nContent-Length: 1000\r\nExpect: 100-continue\r\n\r\n"
        );
        let (mut conn, answer) = one_answer(server.addr(), head).await;
        let answer = answer.expect("an answer");
        assert_eq!(answer.status, 413, "{path}: {answer:?}");
        assert_eq!(answer.text(), "413 Payload Too Large");
        assert!(conn.closed().await, "{path}: the connection stays open");
    }
    assert_eq!(reached.count(), 0);

    // Within the cap: 100, then the body, then the answer.
    let mut conn = Conn::open(server.addr()).await;
    conn.send(
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\nExpect: 100-continue\r\n\r\n",
    )
    .await
    .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().status, 100);
    conn.send("hello").await.unwrap();
    let answer = conn.answer(false).await.unwrap();
    assert_eq!((answer.status, answer.text().as_str()), (200, "hello"));
    server.stop().await;
}

/// An upload far over the cap, sent whole, gets its 413: through hyper's
/// client, and through a client that writes the whole request before it
/// reads (its write fails once the server stops reading, and the answer is
/// still there to read).
#[tokio::test]
async fn an_upload_far_over_the_cap_sent_whole_still_gets_its_413() {
    use http_body_util::{BodyExt, Full};
    use hyper_util::client::legacy::Client;
    use hyper_util::client::legacy::connect::HttpConnector;
    use hyper_util::rt::TokioExecutor;

    let smuggled = Served::default();
    let server = TestServer::start(routes(&smuggled)).await;
    let size = 8_000_000;
    for path in ["/echo", "/read"] {
        let client: Client<_, Full<bytes::Bytes>> =
            Client::builder(TokioExecutor::new()).build(HttpConnector::new());
        let request = http::Request::post(format!("http://{}{path}", server.addr()))
            .body(Full::new(bytes::Bytes::from(vec![b'x'; size])))
            .unwrap();
        let response = tokio::time::timeout(WAIT, client.request(request))
            .await
            .expect("an answer in time")
            .expect("an answer, not a reset");
        assert_eq!(response.status(), 413, "{path}");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        assert_eq!(body, "413 Payload Too Large", "{path}");
    }
    let mut conn = Conn::open(server.addr()).await;
    let head = format!("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: {size}\r\n\r\n");
    let _ = conn.send(format!("{head}{}", "x".repeat(size))).await;
    let answer = conn.answer(false).await.expect("the 413 is read");
    assert_eq!(answer.status, 413);
    server.stop().await;
}

/// A body the server refused without reading it whole (413 by its length,
/// 413 found as it arrived chunked, 429 from a limit) is never read as the
/// next request on its connection: a request written inside it never
/// reaches a route, whether the body came with its head or after the
/// refusal. The request after a body that did arrive whole is answered, or
/// the connection closed; never anything else.
#[tokio::test]
async fn a_refused_body_is_never_read_as_the_next_request() {
    let clock = clock_at(12, 0, 0);
    let driver: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let one_a_minute =
        RateLimitMiddleware::new(driver, SlidingWindowConfig::new(1, MINUTE), |_req| {
            "one".to_owned()
        });
    let smuggled = Served::default();
    let router = routes(&smuggled).merge(
        Router::new()
            .post("/limited", echo)
            .middleware(one_a_minute),
    );
    let server = TestServer::start(router).await;

    // 1. Over the cap by its length, the whole body sent with the head, and
    //    a real request after it.
    let body = padded(SMUGGLED, 60);
    let mut conn = Conn::open(server.addr()).await;
    conn.send(format!(
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 60\r\n\r\n{body}GET /a HTTP/1.1\r\nHost: a\r\n\r\n"
    ))
    .await
    .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().status, 413);
    if let Some(next) = conn.answer(false).await {
        assert_eq!((next.status, next.text().as_str()), (200, "alpha"));
    }

    // 2. Over the cap by its length, most of the body sent after the 413.
    let body = padded(&format!("{}{SMUGGLED}", "y".repeat(20)), 200);
    let mut conn = Conn::open(server.addr()).await;
    conn.send(format!(
        "POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 200\r\n\r\n{}",
        &body[..20]
    ))
    .await
    .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().status, 413);
    let _ = conn.send(&body[20..]).await;
    assert!(
        conn.answer(false).await.is_none(),
        "an answer to body bytes"
    );

    // 3. Chunked, found over the cap as it arrives, the rest (holding a
    //    request) after the refusal.
    let mut conn = Conn::open(server.addr()).await;
    conn.send(
        "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n10;n=v\r\n0123456789abcdef\r\n4\r\nwxyz\r\n",
    )
    .await
    .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().status, 413);
    let _ = conn
        .send(format!("{:x}\r\n{SMUGGLED}\r\n0\r\n\r\n", SMUGGLED.len()))
        .await;
    assert!(
        conn.answer(false).await.is_none(),
        "an answer to body bytes"
    );

    // 4. Refused by a limit (429) before its body is read, on a connection
    //    whose first request the limit admitted.
    let mut conn = Conn::open(server.addr()).await;
    let first = "POST /limited HTTP/1.1\r\nHost: a\r\nContent-Length: 3\r\n\r\nabc";
    conn.send(first).await.unwrap();
    let admitted = conn.answer(false).await.unwrap();
    assert_eq!((admitted.status, admitted.text().as_str()), (200, "abc"));
    conn.send(format!(
        "POST /limited HTTP/1.1\r\nHost: a\r\nContent-Length: {}\r\n\r\n",
        SMUGGLED.len()
    ))
    .await
    .unwrap();
    let refused = conn.answer(false).await.unwrap();
    assert_eq!(refused.status, 429);
    let _ = conn.send(SMUGGLED).await;
    assert!(
        conn.answer(false).await.is_none(),
        "an answer to body bytes"
    );

    assert_eq!(smuggled.count(), 0, "a body was read as a request");
    server.stop().await;
}

/// Chunk extensions and trailers are read past: the body is the chunks'
/// data and the next request on the connection is served. A chunk size
/// that overflows, is not hexadecimal or is negative gets `400`, and the
/// connection, whose framing is lost, is closed.
#[tokio::test]
async fn chunked_bodies_extensions_trailers_and_bad_sizes() {
    let smuggled = Served::default();
    let server = TestServer::start(routes(&smuggled)).await;

    let mut conn = Conn::open(server.addr()).await;
    conn.send(
        "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n\
         5;name=value;q=\"x y\"\r\nhello\r\n3\r\n, w\r\n0\r\nX-Trailer: t\r\nX-Other: u\r\n\r\n\
         GET /a HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await
    .unwrap();
    let echoed = conn.answer(false).await.unwrap();
    assert_eq!((echoed.status, echoed.text().as_str()), (200, "hello, w"));
    let next = conn.answer(false).await.unwrap();
    assert_eq!((next.status, next.text().as_str()), (200, "alpha"));

    for size in ["FFFFFFFFFFFFFFFFFFFF", "zz", "-1", "0x5"] {
        let mut conn = Conn::open(server.addr()).await;
        conn.send(format!(
            "POST /echo HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n\r\n{size}\r\nhello\r\n0\r\n\r\n{SMUGGLED}"
        ))
        .await
        .unwrap();
        let answer = conn.answer(false).await;
        let status = answer.as_ref().map(|a| a.status);
        assert_eq!(status, Some(400), "chunk size {size:?}: {answer:?}");
        assert!(conn.closed().await, "chunk size {size:?}: left open");
    }
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

/// A request with both `Content-Length` and `Transfer-Encoding: chunked`,
/// in either order, is read chunked (the length is not the body's: a large
/// one does not get 413) and its connection is closed after the answer, as
/// RFC 9112 section 6.3 asks, so that no bytes after it are read as a
/// request. Two different lengths get 400.
#[tokio::test]
async fn length_and_chunked_together_are_read_chunked_and_closed() {
    let smuggled = Served::default();
    let server = TestServer::start(routes(&smuggled)).await;
    for headers in [
        "Content-Length: 1000\r\nTransfer-Encoding: chunked",
        "Transfer-Encoding: chunked\r\nContent-Length: 1000",
        "Content-Length: 4\r\nTransfer-Encoding: chunked",
    ] {
        let mut conn = Conn::open(server.addr()).await;
        conn.send(format!(
            "POST /echo HTTP/1.1\r\nHost: a\r\n{headers}\r\n\r\n3\r\nabc\r\n0\r\n\r\n{SMUGGLED}"
        ))
        .await
        .unwrap();
        let answer = conn.answer(false).await.unwrap();
        assert_eq!(
            (answer.status, answer.text().as_str()),
            (200, "abc"),
            "{headers:?}"
        );
        assert!(conn.closed().await, "{headers:?}: left open");
    }
    for lengths in [
        "Content-Length: 3\r\nContent-Length: 4",
        "Content-Length: 3, 4",
        "Content-Length: -3",
        "Content-Length: 3e0",
        "Content-Length: +3",
    ] {
        let (mut conn, answer) = one_answer(
            server.addr(),
            format!("POST /echo HTTP/1.1\r\nHost: a\r\n{lengths}\r\n\r\nabcd{SMUGGLED}"),
        )
        .await;
        assert_eq!(answer.map(|a| a.status), Some(400), "{lengths:?}");
        assert!(conn.closed().await, "{lengths:?}: left open");
    }
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

/// A client that sends part of its body and then ends its side of the
/// connection is answered `400 Bad Request` (its body could not be read),
/// and the connection ends; it never hangs.
#[tokio::test]
async fn a_body_cut_short_by_the_clients_end_gets_400() {
    let smuggled = Served::default();
    let server = TestServer::start(routes(&smuggled)).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send("POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nabcd")
        .await
        .unwrap();
    conn.stream.shutdown().await.unwrap();
    let answer = conn.answer(false).await;
    assert_eq!(
        answer.as_ref().map(|a| (a.status, a.text())),
        Some((400, "400 Bad Request".to_owned())),
        "{answer:?}"
    );
    assert!(conn.closed().await);
    server.stop().await;
}

/// A body that stops coming on a kept-alive connection gets `408` once a
/// header read timeout passes, and the connection is closed: the rest of
/// the body, sent late, is not read as a request.
#[tokio::test]
async fn a_stalled_body_on_a_kept_alive_connection_gets_408_and_a_close() {
    let period = Duration::from_millis(300);
    let smuggled = Served::default();
    let server = TimedServer::start(routes(&smuggled), period).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send("GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().text(), "alpha");
    let body = padded(&format!("abcd{SMUGGLED}"), 60);
    conn.send(format!(
        "POST /read HTTP/1.1\r\nHost: a\r\nContent-Length: 60\r\n\r\n{}",
        &body[..4]
    ))
    .await
    .unwrap();
    let sent = Instant::now();
    let answer = conn.answer(false).await.unwrap();
    let waited = sent.elapsed();
    assert_eq!(
        (answer.status, answer.text().as_str()),
        (408, "408 Request Timeout")
    );
    assert!(waited >= period && waited < period * 4, "{waited:?}");
    let _ = conn.send(&body[4..]).await;
    assert!(
        conn.answer(false).await.is_none(),
        "an answer to body bytes"
    );
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Keep-alive and pipelining.

/// Requests written at once are answered in order, each with its exact
/// body: plain ones, one with a body, a `HEAD` (whose answer has a length
/// and no content, which must not swallow the next answer), and a 204 its
/// handler gave a body (which must not go out either).
#[tokio::test]
async fn pipelined_requests_are_answered_in_order_with_exact_bodies() {
    let smuggled = Served::default();
    let server = TestServer::start(routes(&smuggled)).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send(
        "GET /a HTTP/1.1\r\nHost: a\r\n\r\n\
         POST /echo HTTP/1.1\r\nHost: a\r\nContent-Length: 7\r\n\r\npayload\
         HEAD /b HTTP/1.1\r\nHost: a\r\n\r\n\
         GET /no-content HTTP/1.1\r\nHost: a\r\n\r\n\
         GET /slow HTTP/1.1\r\nHost: a\r\n\r\n\
         GET /b HTTP/1.1\r\nHost: a\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    for head in [false, false, true, false, false, false] {
        let answer = conn.answer(head).await.expect("an answer");
        got.push((
            answer.status,
            answer.text(),
            answer.header("content-length").map(str::to_owned),
        ));
    }
    assert_eq!(
        got,
        vec![
            (200, "alpha".to_owned(), Some("5".to_owned())),
            (200, "payload".to_owned(), Some("7".to_owned())),
            (200, String::new(), Some("5".to_owned())),
            (204, String::new(), None),
            (200, "slow".to_owned(), Some("4".to_owned())),
            (200, "bravo".to_owned(), Some("5".to_owned())),
        ]
    );
    // Nothing more: the connection is kept, and silent.
    assert!(conn.open_after(Duration::from_millis(300)).await);
    server.stop().await;
}

/// `Connection: close` is honoured: the answer says so, the connection is
/// closed after it, and a request pipelined behind it is not served.
/// HTTP/1.0 closes after its answer unless it asks `keep-alive`, when the
/// answer says `keep-alive` and the next request is served.
#[tokio::test]
async fn connection_close_and_http_1_0_close_the_connection() {
    let smuggled = Served::default();
    let server = TestServer::start(routes(&smuggled)).await;

    let mut conn = Conn::open(server.addr()).await;
    conn.send(format!(
        "GET /a HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n{SMUGGLED}"
    ))
    .await
    .unwrap();
    let answer = conn.answer(false).await.unwrap();
    assert_eq!(answer.text(), "alpha");
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(conn.closed().await);

    let mut conn = Conn::open(server.addr()).await;
    conn.send(format!("GET /a HTTP/1.0\r\n\r\n{SMUGGLED}"))
        .await
        .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().text(), "alpha");
    assert!(conn.closed().await);

    let mut conn = Conn::open(server.addr()).await;
    conn.send("GET /a HTTP/1.0\r\nConnection: keep-alive\r\n\r\n")
        .await
        .unwrap();
    let answer = conn.answer(false).await.unwrap();
    assert_eq!(answer.text(), "alpha");
    assert_eq!(answer.header("connection"), Some("keep-alive"));
    conn.send("GET /b HTTP/1.0\r\n\r\n").await.unwrap();
    assert_eq!(conn.answer(false).await.unwrap().text(), "bravo");
    assert!(conn.closed().await);

    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

/// An idle kept-alive connection is closed once it sends no next request
/// within the header read timeout (one to two periods), and so is one that
/// sends its next head a few bytes at a time.
#[tokio::test]
async fn an_idle_or_dribbling_kept_alive_connection_is_closed() {
    let period = Duration::from_millis(300);
    let smuggled = Served::default();
    let server = TimedServer::start(routes(&smuggled), period).await;

    let mut idle = Conn::open(server.addr()).await;
    idle.send("GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(idle.answer(false).await.unwrap().text(), "alpha");
    let answered = Instant::now();
    assert!(idle.closed().await);
    let after = answered.elapsed();
    assert!(
        after >= period && after < period * 2 + Duration::from_millis(700),
        "{after:?}"
    );

    let mut dribbling = Conn::open(server.addr()).await;
    dribbling
        .send("GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(dribbling.answer(false).await.unwrap().text(), "alpha");
    let answered = Instant::now();
    let mut ended = false;
    for byte in SMUGGLED.bytes() {
        if dribbling.send([byte]).await.is_err() {
            ended = true;
            break;
        }
        if !dribbling.open_after(Duration::from_millis(100)).await {
            ended = true;
            break;
        }
    }
    assert!(ended || dribbling.closed().await);
    assert!(answered.elapsed() < period * 3 + Duration::from_millis(700));
    assert_eq!(smuggled.count(), 0);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// HEAD.

/// `HEAD` gets the headers `GET` gets, its `Content-Length` included, and
/// no content: for a route with content, for one whose content is empty
/// (`GET` says `content-length: 0`), and for a 204 (which carries no
/// `Content-Length` on either, RFC 9110 section 8.6).
#[tokio::test]
async fn head_gets_the_headers_of_get_and_no_content() {
    let smuggled = Served::default();
    let router = routes(&smuggled).get("/typed", |_req: Request| async {
        HttpResponse::json(serde_json::json!({"a": 1})).header("X-Extra", "yes")
    });
    let server = TestServer::start(router).await;
    let mut conn = Conn::open(server.addr()).await;
    for path in ["/a", "/typed", "/empty", "/no-content"] {
        conn.send(format!("GET {path} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .await
            .unwrap();
        let get = conn.answer(false).await.unwrap();
        conn.send(format!("HEAD {path} HTTP/1.1\r\nHost: a\r\n\r\n"))
            .await
            .unwrap();
        let head = conn.answer(true).await.unwrap();
        assert_eq!(head.status, get.status, "{path}");
        for name in ["content-length", "content-type", "x-extra"] {
            assert_eq!(head.all(name), get.all(name), "{path}: {name}");
        }
        if get.status != 204 {
            assert_eq!(
                get.header("content-length")
                    .map(|v| v.parse::<usize>().unwrap()),
                Some(get.body.len()),
                "{path}"
            );
        }
    }
    // The answers to HEAD carried no content: the connection is in step.
    conn.send("GET /b HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().text(), "bravo");
    server.stop().await;
}

/// A `HEAD` refused by a limit gets the 429 a `GET` gets (its
/// `Retry-After`, its limit headers, the length of the refusal's content)
/// without the content, and the next request on the connection is read
/// in step.
#[tokio::test]
async fn head_refused_by_a_limit_gets_the_429_of_get_without_content() {
    let clock = clock_at(12, 0, 0);
    let driver: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let limit = RateLimitMiddleware::new(driver, SlidingWindowConfig::new(1, MINUTE), |_req| {
        "one".to_owned()
    });
    let router = Router::new()
        .get("/limited", |_req: Request| async {
            HttpResponse::text("ok")
        })
        .middleware(limit)
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") });
    let server = TestServer::start(router).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send("GET /limited HTTP/1.1\r\nHost: a\r\n\r\nGET /limited HTTP/1.1\r\nHost: a\r\n\r\nHEAD /limited HTTP/1.1\r\nHost: a\r\n\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(conn.answer(false).await.unwrap().status, 200);
    let get = conn.answer(false).await.unwrap();
    let head = conn.answer(true).await.unwrap();
    assert_eq!((get.status, head.status), (429, 429));
    for name in [
        "content-length",
        "content-type",
        "retry-after",
        "x-ratelimit-limit",
        "x-ratelimit-remaining",
        "x-ratelimit-reset",
    ] {
        assert_eq!(head.all(name), get.all(name), "{name}");
    }
    assert_eq!(
        get.header("content-length"),
        Some(get.body.len().to_string().as_str())
    );
    let next = conn.answer(false).await.unwrap();
    assert_eq!((next.status, next.text().as_str()), (200, "alpha"));
    server.stop().await;
}

/// A handler that sets `Content-Length` twice, the first value its body's
/// and the second not, gets its answer out with its body's length once; the
/// connection is not dropped and the next answer reads in step.
#[tokio::test]
async fn a_second_content_length_that_is_not_the_bodys_does_not_break_the_answer() {
    let router = Router::new()
        .get("/twice", |_req: Request| async {
            let mut answer = HttpResponse::text("hello");
            let headers = answer.headers_mut();
            headers.insert(http::header::CONTENT_LENGTH, http::HeaderValue::from(5));
            headers.append(http::header::CONTENT_LENGTH, http::HeaderValue::from(7));
            answer
        })
        .get("/a", |_req: Request| async { HttpResponse::text("alpha") });
    let server = TestServer::start(router).await;
    let mut conn = Conn::open(server.addr()).await;
    conn.send("GET /twice HTTP/1.1\r\nHost: a\r\n\r\nGET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let twice = conn.answer(false).await.expect("an answer to /twice");
    assert_eq!(twice.status, 200);
    assert_eq!(twice.all("content-length"), vec!["5"]);
    assert_eq!(twice.text(), "hello");
    let next = conn.answer(false).await.expect("an answer to /a");
    assert_eq!(next.text(), "alpha");
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Graceful shutdown.

/// At a shutdown an idle kept-alive connection is closed at once, and so is
/// one that has sent nothing; a request whose head was under way is served
/// as the connection's last; a request in flight finishes (its answer says `connection: close`), and a new
/// connection is refused; the server returns once the last one ends.
#[tokio::test]
async fn shutdown_closes_idle_connections_and_finishes_requests_in_flight() {
    let smuggled = Served::default();
    let server = TestServer::start(routes(&smuggled)).await;
    let addr = server.addr();

    let mut idle = Conn::open(addr).await;
    idle.send("GET /a HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    assert_eq!(idle.answer(false).await.unwrap().text(), "alpha");

    let mut busy = Conn::open(addr).await;
    busy.send("GET /slow HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    // A connection that has sent nothing, and one part of a head.
    let mut silent = Conn::open(addr).await;
    let mut heading = Conn::open(addr).await;
    heading
        .send("GET /a HTTP/1.1\r\nHost: a\r\nX-Part")
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;

    let started = Instant::now();
    let stopping = tokio::spawn(server.stop());
    assert!(idle.closed().await, "the idle connection stays open");
    assert!(
        started.elapsed() < Duration::from_millis(600),
        "the idle connection closed only after {:?}",
        started.elapsed()
    );
    assert!(silent.closed().await, "the silent connection stays open");
    assert!(
        started.elapsed() < Duration::from_millis(700),
        "the silent connection closed only after {:?}",
        started.elapsed()
    );
    // The request under way when the shutdown began is served, and is the
    // connection's last.
    heading.send(": 1\r\n\r\n").await.unwrap();
    let answer = heading
        .answer(false)
        .await
        .expect("the request under way is answered");
    assert_eq!((answer.status, answer.text().as_str()), (200, "alpha"));
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(heading.closed().await);
    let answer = busy
        .answer(false)
        .await
        .expect("the request in flight is answered");
    assert_eq!((answer.status, answer.text().as_str()), (200, "slow"));
    assert_eq!(answer.header("connection"), Some("close"));
    assert!(busy.closed().await);
    tokio::time::timeout(WAIT, stopping)
        .await
        .expect("the server returns")
        .unwrap();
    assert!(
        TcpStream::connect(addr).await.is_err(),
        "a connection after the shutdown was accepted"
    );
}

// ---------------------------------------------------------------------------
// The client address through forwarded headers, on the wire.

fn app_trusting(proxies: &str) -> App {
    let app = App::new();
    app.install(Arc::new(proxies.parse::<TrustedProxies>().unwrap()));
    app
}

/// `GET /ip` with `headers` (raw lines) on a new connection; the address the
/// route saw.
async fn ip_with(addr: SocketAddr, headers: &[u8]) -> String {
    let mut request = b"GET /ip HTTP/1.1\r\nHost: a\r\n".to_vec();
    request.extend_from_slice(headers);
    request.extend_from_slice(b"\r\n");
    let (_conn, answer) = one_answer(addr, request).await;
    let answer = answer.expect("an answer");
    assert_eq!(answer.status, 200, "{answer:?}");
    answer.text()
}

/// Behind a trusted proxy on loopback, the address is read from the right
/// of `X-Forwarded-For` as it arrives on the wire: bytes past ASCII or a
/// forged list on the left change nothing, several lines are one list, a
/// long list costs its right end, an entry that is no address (too long,
/// out of range, `unknown`) ends the walk at the proxy, `Forwarded` is not
/// read, and `X-Real-IP` only without `X-Forwarded-For`. Untrusted, the
/// peer is the address whatever the headers say.
#[tokio::test]
async fn forwarded_headers_on_the_wire() {
    let app = app_trusting("127.0.0.1, 10.0.0.0/8");
    let smuggled = Served::default();
    let server = app.scope(TestServer::start(routes(&smuggled))).await;
    let long_list = format!(
        "X-Forwarded-For: {}, 198.51.100.9, 10.0.0.2\r\n",
        vec!["203.0.113.1"; 5_000].join(", ")
    );
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (b"".to_vec(), "127.0.0.1"),
        (b"X-Forwarded-For: 203.0.113.7\r\n".to_vec(), "203.0.113.7"),
        (
            b"X-Forwarded-For: \xff\xfe garbage, 1.1.1.1, 203.0.113.7\r\n".to_vec(),
            "203.0.113.7",
        ),
        (
            b"X-Forwarded-For: 198.51.100.1\r\nX-Forwarded-For: 203.0.113.7, 10.1.2.3\r\n".to_vec(),
            "203.0.113.7",
        ),
        (long_list.into_bytes(), "198.51.100.9"),
        (b"X-Forwarded-For: unknown\r\n".to_vec(), "127.0.0.1"),
        (b"X-Forwarded-For: 999.0.0.1\r\n".to_vec(), "127.0.0.1"),
        (
            format!("X-Forwarded-For: {}\r\n", "1".repeat(100)).into_bytes(),
            "127.0.0.1",
        ),
        (
            b"X-Forwarded-For: 198.51.100.1, unknown, 10.0.0.9\r\n".to_vec(),
            "10.0.0.9",
        ),
        (
            b"X-Forwarded-For: [2001:db8::1]:443\r\n".to_vec(),
            "2001:db8::1",
        ),
        (
            b"X-Forwarded-For: ::ffff:203.0.113.5\r\n".to_vec(),
            "203.0.113.5",
        ),
        (b"Forwarded: for=203.0.113.9\r\n".to_vec(), "127.0.0.1"),
        (b"X-Real-IP: 203.0.113.8\r\n".to_vec(), "203.0.113.8"),
        (
            b"X-Forwarded-For: 203.0.113.7\r\nX-Real-IP: 203.0.113.8\r\n".to_vec(),
            "203.0.113.7",
        ),
        (
            b"X-Forwarded-For:\r\nX-Real-IP: 203.0.113.8\r\n".to_vec(),
            "127.0.0.1",
        ),
    ];
    for (headers, expected) in &cases {
        assert_eq!(
            ip_with(server.addr(), headers).await,
            *expected,
            "{:?}",
            String::from_utf8_lossy(headers)
        );
    }
    server.stop().await;

    // Trusting no one, the peer.
    let server = TestServer::start(routes(&smuggled)).await;
    for (headers, _) in &cases {
        assert_eq!(ip_with(server.addr(), headers).await, "127.0.0.1");
    }
    server.stop().await;
}

/// A server on `::1` sees its peer as `::1`, trusts it when listed, and an
/// address-based limit counts the peer's /64, or the forwarded client's.
#[tokio::test]
async fn an_ipv6_peer_on_loopback_is_its_address_and_its_bucket() {
    let Ok(probe) = std::net::TcpListener::bind("[::1]:0") else {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    };
    drop(probe);
    let clock: FakeClock = clock_at(12, 0, 0);
    let app = app_trusting("::1");
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    let router = Router::new()
        .get("/ip", |req: Request| async move {
            HttpResponse::text(req.ip().unwrap_or_else(|| "none".to_owned()))
        })
        .middleware(RateLimitMiddleware::ip_based(2, MINUTE));
    let server = app.scope(TestServer::start_on("[::1]:0", router)).await;
    let mut got = Vec::new();
    for headers in [
        &b""[..],
        b"",
        b"",
        b"X-Forwarded-For: 2001:db8:1:2::5\r\n",
        b"X-Forwarded-For: 2001:db8:1:2:ffff::6\r\n",
        b"X-Forwarded-For: 2001:db8:1:2::7\r\n",
        b"X-Forwarded-For: 2001:db8:1:3::7\r\n",
    ] {
        let mut request = b"GET /ip HTTP/1.1\r\nHost: [::1]\r\n".to_vec();
        request.extend_from_slice(headers);
        request.extend_from_slice(b"\r\n");
        let (_conn, answer) = one_answer(server.addr(), request).await;
        let answer = answer.unwrap();
        got.push((answer.status, answer.text()));
    }
    let ok = |ip: &str| (200, ip.to_owned());
    let refused = (429, "429 Too Many Requests".to_owned());
    assert_eq!(
        got,
        vec![
            ok("::1"),
            ok("::1"),
            refused.clone(),
            ok("2001:db8:1:2::5"),
            ok("2001:db8:1:2:ffff::6"),
            refused,
            ok("2001:db8:1:3::7"),
        ]
    );
    server.stop().await;
}

/// `POST /echo`: its body, read with a cap of 16 bytes.
async fn echo(mut req: Request) -> HttpResponse {
    match req.body_bytes(16).await {
        Ok(body) => HttpResponse::bytes(body),
        Err(error) => error.to_response(),
    }
}
