//! The server and its request and response types at their edges: bodies at
//! and past the cap on every way a body arrives, the timeouts that bound
//! slow clients, statuses with no content, and invalid heads.

mod support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use suprnova::{HttpResponse, Request, Response, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use support::h2::*;
use support::http::{Reply, TestServer, TimedServer};

/// How long any one answer, or the close of a connection, may take.
const WAIT: Duration = Duration::from_secs(5);

// ---------------------------------------------------------------------------
// A raw HTTP/1 client.

/// Everything the server sends on a new connection after `bytes`, until it
/// closes the connection or `wait` passes with nothing more; and whether it
/// closed.
async fn exchange(addr: SocketAddr, bytes: &[u8], wait: Duration) -> (Vec<u8>, bool) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    stream.write_all(bytes).await.unwrap();
    let mut got = Vec::new();
    let mut chunk = vec![0; 64 * 1024];
    loop {
        match tokio::time::timeout(wait, stream.read(&mut chunk)).await {
            Err(_) => return (got, false),
            Ok(Ok(0)) | Ok(Err(_)) => return (got, true),
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
        }
    }
}

/// The status of the first answer in `bytes`.
fn first_status(bytes: &[u8]) -> Option<u16> {
    let text = String::from_utf8_lossy(bytes);
    text.split(' ').nth(1).and_then(|s| s.parse().ok())
}

/// The head (up to the blank line) and what follows it, of the first answer
/// in `bytes`.
fn split_answer(bytes: &[u8]) -> (String, Vec<u8>) {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a whole head");
    (
        String::from_utf8_lossy(&bytes[..end]).into_owned(),
        bytes[end + 4..].to_vec(),
    )
}

/// The value of header `name` in `head`, case-insensitively.
fn head_value<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

// ---------------------------------------------------------------------------
// Routes.

/// What each read of a body gave: `"<n> bytes"`, or the error's status.
type Outcomes = Arc<Mutex<Vec<String>>>;

fn outcome(read: Result<Bytes, suprnova::http::BodyError>) -> String {
    match read {
        Ok(body) => format!("{} bytes", body.len()),
        Err(error) => error.to_response().status_code().to_string(),
    }
}

/// `POST /cap16` reads its body with a cap of 16 bytes and answers its
/// length, `POST /read` with the default cap, noting each outcome in
/// `outcomes`.
fn body_routes(outcomes: &Outcomes) -> Router {
    let noted = outcomes.clone();
    Router::new()
        .post("/cap16", |mut req: Request| async move {
            match req.body_bytes(16).await {
                Ok(body) => HttpResponse::text(format!("{} bytes", body.len())),
                Err(error) => error.to_response(),
            }
        })
        .post("/read", move |mut req: Request| {
            let noted = noted.clone();
            async move {
                let read = req.bytes().await;
                let answer = match &read {
                    Ok(body) => HttpResponse::text(format!("{} bytes", body.len())),
                    Err(error) => error.to_response(),
                };
                noted.lock().unwrap().push(outcome(read));
                answer
            }
        })
}

type Body = BoxBody<Bytes, Infallible>;

/// A body of `parts`, each of `size` bytes, with no length known ahead.
fn unsized_body(parts: usize, size: usize) -> Body {
    let parts = (0..parts)
        .map(move |_| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(vec![b'x'; size]))));
    StreamBody::new(futures_util::stream::iter(parts)).boxed()
}

/// `request` sent on a new HTTP/2 connection (prior knowledge) to `addr`.
async fn send_h2_body(addr: SocketAddr, request: http::Request<Body>) -> Reply {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    let connection = tokio::spawn(connection);
    let reply = support::within("an HTTP/2 reply", WAIT, async {
        let response = sender.send_request(request).await.expect("answered");
        Reply::read(response).await
    })
    .await;
    connection.abort();
    reply
}

// ---------------------------------------------------------------------------
// Bodies at the cap.

/// A body of exactly the cap is read, and one byte more gets 413, however
/// it arrives: with a `Content-Length`, chunked, and over HTTP/2 with and
/// without a declared length.
#[tokio::test]
async fn a_body_at_the_cap_is_read_and_a_byte_more_gets_413_every_way() {
    let outcomes = Outcomes::default();
    let server = TestServer::start(body_routes(&outcomes)).await;
    let addr = server.addr();
    for (size, want) in [
        (16, (200, "16 bytes")),
        (17, (413, "413 Payload Too Large")),
    ] {
        // HTTP/1.1, Content-Length.
        let reply = server
            .send(
                http::Request::post(server.url("/cap16"))
                    .body(Full::new(Bytes::from(vec![b'x'; size])))
                    .unwrap(),
            )
            .await;
        assert_eq!((reply.status, reply.body.as_str()), want, "length {size}");

        // HTTP/1.1, chunked in parts of one byte.
        let mut raw = b"POST /cap16 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n".to_vec();
        for _ in 0..size {
            raw.extend_from_slice(b"1\r\nx\r\n");
        }
        raw.extend_from_slice(b"0\r\n\r\n");
        let (got, _) = exchange(addr, &raw, WAIT).await;
        let (head, body) = split_answer(&got);
        assert_eq!(first_status(&got), Some(want.0), "chunked {size}: {head}");
        assert_eq!(body, want.1.as_bytes(), "chunked {size}");

        // HTTP/2, declared.
        let reply = server
            .send_h2(
                http::Request::post(server.url("/cap16"))
                    .body(Full::new(Bytes::from(vec![b'x'; size])))
                    .unwrap(),
            )
            .await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            want,
            "h2 declared {size}"
        );

        // HTTP/2, undeclared, one byte a DATA frame.
        let request = http::Request::post(server.url("/cap16"))
            .body(unsized_body(size, 1))
            .unwrap();
        let reply = send_h2_body(addr, request).await;
        assert_eq!(
            (reply.status, reply.body.as_str()),
            want,
            "h2 undeclared {size}"
        );
    }
    server.stop().await;
}

/// A body a middleware found over its small cap is still there, whole, for
/// the handler's larger one, over the wire as in process.
#[tokio::test]
async fn a_body_read_twice_over_the_wire_reaches_the_second_reader_whole() {
    #[derive(Clone)]
    struct SmallPeek;
    #[suprnova::async_trait]
    impl suprnova::Middleware for SmallPeek {
        async fn handle(&self, mut req: Request, next: suprnova::Next) -> Response {
            let peeked = req.body_bytes(4).await;
            assert!(
                matches!(
                    peeked,
                    Err(suprnova::http::BodyError::TooLarge { limit: 4 })
                ),
                "{peeked:?}"
            );
            next(req).await
        }
    }
    let router = Router::new()
        .post("/twice", |mut req: Request| async move {
            match req.body_bytes(1 << 20).await {
                Ok(body) => HttpResponse::bytes(body),
                Err(error) => error.to_response(),
            }
        })
        .middleware(SmallPeek);
    let server = TestServer::start(router).await;
    let body: Vec<u8> = (0..100_000u32).map(|i| b'a' + (i % 26) as u8).collect();
    for h2 in [false, true] {
        let request = http::Request::post(server.url("/twice"))
            .body(Full::new(Bytes::from(body.clone())))
            .unwrap();
        let reply = if h2 {
            send_h2_body(server.addr(), request.map(|b| b.boxed())).await
        } else {
            server.send(request).await
        };
        assert_eq!(reply.status, 200, "h2: {h2}");
        assert!(reply.body.as_bytes() == body, "h2: {h2}");
    }
    server.stop().await;
}

/// `Expect: 100-continue` with a chunked body over the cap: the server asks
/// for the body (its length is not known), reads up to the cap and answers
/// 413; over HTTP/2 a declared length over the cap gets 413 with no body
/// sent at all.
#[tokio::test]
async fn expect_100_continue_bodies_over_the_cap_get_413() {
    let outcomes = Outcomes::default();
    let server = TestServer::start(body_routes(&outcomes)).await;
    let addr = server.addr();

    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(b"POST /cap16 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nExpect: 100-continue\r\n\r\n")
        .await
        .unwrap();
    let mut got = vec![0; 1024];
    let n = tokio::time::timeout(WAIT, stream.read(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert!(
        got[..n].starts_with(b"HTTP/1.1 100 Continue\r\n"),
        "{:?}",
        String::from_utf8_lossy(&got[..n])
    );
    stream
        .write_all(b"10\r\n0123456789abcdef\r\n1\r\nx\r\n")
        .await
        .unwrap();
    let n = tokio::time::timeout(WAIT, stream.read(&mut got))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(first_status(&got[..n]), Some(413));

    // HTTP/2: the stream's answer comes before any DATA.
    let mut raw = Raw::open(addr).await;
    assert!(
        raw.send(&request_headers(
            1,
            "POST",
            "/cap16",
            &[("content-length", "5000"), ("expect", "100-continue")],
            false,
        ))
        .await
    );
    let mut log = Log::default();
    raw.read_for(&mut log, Duration::from_secs(1)).await;
    assert!(log.has(1, HEADERS), "no answer: {log:?}");
    drop((raw, stream));
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Slow bodies.

/// A client that sends no byte of its body gets 408 however it frames the
/// nothing it sends: over HTTP/2, empty DATA frames (no END_STREAM) carry
/// no part of the body, as no bytes at all do over HTTP/1.
#[tokio::test]
async fn h2_empty_data_frames_do_not_keep_a_body_waiting_for_ever() {
    let period = Duration::from_millis(300);
    let outcomes = Outcomes::default();
    let server = TimedServer::start(body_routes(&outcomes), period).await;
    let mut raw = Raw::open(server.addr()).await;
    assert!(
        raw.send(&request_headers(1, "POST", "/read", &[], false))
            .await
    );
    let mut log = Log::default();
    // Ten periods of empty DATA frames, three a period.
    for _ in 0..30 {
        if !raw.send(&frame(DATA, 0, 1, &[])).await {
            break;
        }
        raw.read_for(&mut log, period / 3).await;
        if log.has(1, HEADERS) || log.has(1, RST_STREAM) || log.closed {
            break;
        }
    }
    let read = outcomes.lock().unwrap().clone();
    assert_eq!(read, vec!["408".to_owned()], "{log:?}");
    drop(raw);
    server.stop().await;
}

/// Padding is no part of a body either: DATA frames of padding alone (whose
/// window the server gives back at once) keep no body waiting.
#[tokio::test]
async fn h2_padding_alone_does_not_keep_a_body_waiting_for_ever() {
    const PADDED: u8 = 0x8;
    let period = Duration::from_millis(300);
    let outcomes = Outcomes::default();
    let server = TimedServer::start(body_routes(&outcomes), period).await;
    let mut raw = Raw::open(server.addr()).await;
    assert!(
        raw.send(&request_headers(1, "POST", "/read", &[], false))
            .await
    );
    let mut log = Log::default();
    let mut padding = vec![16u8];
    padding.extend([0u8; 16]);
    for _ in 0..30 {
        if !raw.send(&frame(DATA, PADDED, 1, &padding)).await {
            break;
        }
        raw.read_for(&mut log, period / 3).await;
        if log.has(1, HEADERS) || log.has(1, RST_STREAM) || log.closed {
            break;
        }
    }
    let read = outcomes.lock().unwrap().clone();
    assert_eq!(read, vec!["408".to_owned()], "{log:?}");
    drop(raw);
    server.stop().await;
}

/// Over HTTP/2 a stream whose client sends no DATA at all, with room in
/// its windows, gets 408 within a few periods.
#[tokio::test]
async fn h2_a_body_that_sends_nothing_gets_408() {
    let period = Duration::from_millis(300);
    let outcomes = Outcomes::default();
    let server = TimedServer::start(body_routes(&outcomes), period).await;
    let mut raw = Raw::open(server.addr()).await;
    assert!(
        raw.send(&request_headers(1, "POST", "/read", &[], false))
            .await
    );
    let mut log = Log::default();
    for _ in 0..30 {
        raw.read_for(&mut log, period / 3).await;
        if log.has(1, HEADERS) || log.closed {
            break;
        }
    }
    assert!(log.has(1, HEADERS), "{log:?}");
    assert_eq!(*outcomes.lock().unwrap(), vec!["408".to_owned()]);
    drop(raw);
    server.stop().await;
}

/// The same client over HTTP/1 (no bytes of its body) gets its 408 in one
/// to two periods.
#[tokio::test]
async fn http1_a_body_that_sends_nothing_gets_408() {
    let period = Duration::from_millis(300);
    let outcomes = Outcomes::default();
    let server = TimedServer::start(body_routes(&outcomes), period).await;
    let (got, _) = exchange(
        server.addr(),
        b"POST /read HTTP/1.1\r\nHost: a\r\nContent-Length: 10\r\n\r\nab",
        period * 4,
    )
    .await;
    assert_eq!(first_status(&got), Some(408));
    assert_eq!(*outcomes.lock().unwrap(), vec!["408".to_owned()]);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Connections without requests.

/// An HTTP/2 connection that sent the preface and no request is closed
/// after the header read timeout with a GOAWAY first (RFC 9113, section
/// 6.8: an endpoint should send GOAWAY before it closes a connection), as
/// an idle one is: a client whose first request crosses the close learns
/// that it was not processed and may retry it.
#[tokio::test]
async fn h2_a_connection_without_a_request_gets_goaway_before_its_close() {
    let period = Duration::from_millis(300);
    let server = TimedServer::hi(period).await;
    let mut raw = Raw::open(server.addr()).await;
    let mut log = Log::default();
    raw.read_for(&mut log, period * 5).await;
    assert!(log.closed, "not closed in five periods: {log:?}");
    assert!(log.has(0, GOAWAY), "closed with no GOAWAY: {log:?}");
    drop(raw);
    server.stop().await;
}

/// An HTTP/2 connection that served a request and went idle gets a GOAWAY
/// and is closed.
#[tokio::test]
async fn h2_an_idle_connection_gets_goaway_before_its_close() {
    let period = Duration::from_millis(300);
    let server = TimedServer::hi(period).await;
    let mut raw = Raw::open(server.addr()).await;
    assert!(raw.send(&request_headers(1, "GET", "/", &[], true)).await);
    let mut log = Log::default();
    raw.read_for(&mut log, period * 6).await;
    assert!(log.has(1, HEADERS), "{log:?}");
    assert!(log.has(0, GOAWAY), "{log:?}");
    assert!(log.closed, "{log:?}");
    drop(raw);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Statuses with no content.

/// A plain route's `101` (a handler's mistake: no upgrade was asked for, and
/// none is made) goes out over HTTP/1 as it does over HTTP/2: as `500`.
/// Sent as a `101`, it tells the client the connection switched protocols
/// when it did not (RFC 9110, section 15.2.2: a server must not switch to a
/// protocol the request did not name in `Upgrade`).
#[tokio::test]
async fn http1_a_plain_routes_101_gets_500_as_over_http2() {
    let router = Router::new().get("/switch", |_req: Request| async {
        HttpResponse::text("no").status(101)
    });
    let server = TestServer::start(router).await;
    let h2 = server
        .send_h2(
            http::Request::get(server.url("/switch"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(h2.status, 500);
    let (got, _) = exchange(
        server.addr(),
        b"GET /switch HTTP/1.1\r\nHost: a\r\n\r\n",
        Duration::from_secs(2),
    )
    .await;
    assert_eq!(
        first_status(&got),
        Some(500),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    server.stop().await;
}

/// A `205 Reset Content` has no content (RFC 9110, section 15.3.6: a server
/// must not generate content in it), as a `204` has none: a body a handler
/// left on it is left out, on either protocol.
#[tokio::test]
async fn a_205_goes_out_without_content() {
    let router = Router::new().get("/reset", |_req: Request| async {
        HttpResponse::text("oops").status(205)
    });
    let server = TestServer::start(router).await;
    let (got, _) = exchange(
        server.addr(),
        b"GET /reset HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
        WAIT,
    )
    .await;
    let (head, body) = split_answer(&got);
    assert_eq!(first_status(&got), Some(205), "{head}");
    assert!(
        body.is_empty(),
        "{head} / {:?}",
        String::from_utf8_lossy(&body)
    );
    assert!(
        matches!(head_value(&head, "content-length"), None | Some("0")),
        "{head}"
    );
    let h2 = server
        .send_h2(
            http::Request::get(server.url("/reset"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!((h2.status, h2.body.as_str()), (205, ""));
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Invalid heads.

/// A `Host` with bytes past ASCII, or control-free but not a host, gets 400
/// before routing, and the server serves on.
#[tokio::test]
async fn a_host_past_ascii_or_with_a_bad_port_gets_400() {
    let server = TimedServer::hi(Duration::from_secs(5)).await;
    for host in [
        &b"b\xc3\xbccher.example"[..],
        b"caf\xe9",
        b"a.example:8o",
        b"a.example:80/x",
        b"[::1]]",
    ] {
        let mut request = b"GET / HTTP/1.1\r\nHost: ".to_vec();
        request.extend_from_slice(host);
        request.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
        let (got, _) = exchange(server.addr(), &request, WAIT).await;
        assert_eq!(
            first_status(&got),
            Some(400),
            "{:?}: {:?}",
            String::from_utf8_lossy(host),
            String::from_utf8_lossy(&got)
        );
    }
    let (got, _) = exchange(
        server.addr(),
        b"GET / HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
        WAIT,
    )
    .await;
    assert_eq!(first_status(&got), Some(200));
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Lengths a handler set.

/// A `Content-Length` that is not a length (`abc`) is left out as an invalid
/// header is: the answer to `HEAD` then carries the length `GET`'s carries
/// (0), and the HTTP/2 client, which refuses a stream whose length it cannot
/// read, gets its answer.
#[tokio::test]
async fn a_content_length_that_is_not_a_number_never_reaches_the_wire() {
    let router = Router::new().get("/odd", |_req: Request| async {
        HttpResponse::new().header("Content-Length", "abc")
    });
    let server = TestServer::start(router).await;
    for method in ["GET", "HEAD"] {
        let request = format!("{method} /odd HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let (got, _) = exchange(server.addr(), request.as_bytes(), WAIT).await;
        let (head, _) = split_answer(&got);
        assert_eq!(first_status(&got), Some(200), "{method}: {head}");
        assert_eq!(
            head_value(&head, "content-length"),
            Some("0"),
            "{method}: {head}"
        );
    }
    let stream = TcpStream::connect(server.addr()).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake(
        hyper_util::rt::TokioExecutor::new(),
        hyper_util::rt::TokioIo::new(stream),
    )
    .await
    .unwrap();
    let connection = tokio::spawn(connection);
    for method in [http::Method::GET, http::Method::HEAD] {
        let request = http::Request::builder()
            .method(method.clone())
            .uri(server.url("/odd"))
            .body(Full::<Bytes>::default())
            .unwrap();
        let answered = support::within("an HTTP/2 reply", WAIT, sender.send_request(request)).await;
        let response = answered.unwrap_or_else(|e| panic!("{method} over HTTP/2: {e}"));
        assert_eq!(response.status(), 200, "{method}");
    }
    connection.abort();
    server.stop().await;
}

// ---------------------------------------------------------------------------
// The authority.

/// HTTP/2 names in `:authority` what HTTP/1.1 names in `Host`, and the same
/// rule holds for it: userinfo in it (RFC 9113, section 8.3.1: it must not
/// be there) gets 400, as `Host: user@a.example` does over HTTP/1.1, and no
/// route runs.
#[tokio::test]
async fn h2_userinfo_in_the_authority_gets_400_as_in_a_host() {
    let reached = Arc::new(Mutex::new(Vec::<String>::new()));
    let seen = reached.clone();
    let router = Router::new().get("/", move |req: Request| {
        let seen = seen.clone();
        async move {
            let authority = req.uri().authority().map(|a| a.to_string());
            seen.lock().unwrap().push(authority.unwrap_or_default());
            HttpResponse::text("hi")
        }
    });
    let server = TestServer::start(router).await;
    let (got, _) = exchange(
        server.addr(),
        b"GET / HTTP/1.1\r\nHost: user:secret@a.example\r\nConnection: close\r\n\r\n",
        WAIT,
    )
    .await;
    assert_eq!(first_status(&got), Some(400));

    let mut raw = Raw::open(server.addr()).await;
    let fields = [
        (":method", "GET"),
        (":scheme", "http"),
        (":path", "/"),
        (":authority", "user:secret@a.example"),
    ];
    assert!(
        raw.send(&frame(
            HEADERS,
            END_HEADERS | END_STREAM,
            1,
            &block(&fields)
        ))
        .await
    );
    let mut log = Log::default();
    for _ in 0..10 {
        raw.read_for(&mut log, Duration::from_millis(100)).await;
        if log.has(1, HEADERS) || log.has(1, RST_STREAM) || log.closed {
            break;
        }
    }
    assert!(log.has(1, HEADERS) || log.has(1, RST_STREAM), "{log:?}");
    assert_eq!(*reached.lock().unwrap(), Vec::<String>::new());
    drop(raw);
    server.stop().await;
}

/// Over HTTP/1.1 a target in absolute form carries its own authority, and
/// userinfo there is refused as it is in `Host` (RFC 9110, section 4.2.4:
/// a recipient should treat it as an error).
#[tokio::test]
async fn http1_userinfo_in_an_absolute_target_gets_400() {
    let server = TimedServer::hi(Duration::from_secs(5)).await;
    let (got, _) = exchange(
        server.addr(),
        b"GET http://user:secret@a.example/ HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n",
        WAIT,
    )
    .await;
    assert_eq!(
        first_status(&got),
        Some(400),
        "{:?}",
        String::from_utf8_lossy(&got)
    );
    server.stop().await;
}

/// A request refused for its `Host` before routing has its body skipped as
/// a body, never read as the next request: a request written inside it
/// reaches no route.
#[tokio::test]
async fn a_body_after_a_refused_host_is_never_read_as_a_request() {
    let reached = Arc::new(Mutex::new(0usize));
    let counter = reached.clone();
    let router = Router::new().get("/smuggled", move |_req: Request| {
        *counter.lock().unwrap() += 1;
        async { HttpResponse::text("smuggled") }
    });
    let server = TestServer::start(router).await;
    let inner = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
    for host in ["", "Host: a\r\nHost: b\r\n", "Host: u@a\r\n"] {
        let request = format!(
            "POST /smuggled HTTP/1.1\r\n{host}Content-Length: {}\r\n\r\n{inner}",
            inner.len()
        );
        let (got, _) = exchange(server.addr(), request.as_bytes(), Duration::from_secs(1)).await;
        let text = String::from_utf8_lossy(&got);
        assert_eq!(first_status(&got), Some(400), "{host:?}: {text:?}");
        assert_eq!(text.matches("HTTP/1.1 ").count(), 1, "{host:?}: {text:?}");
    }
    assert_eq!(*reached.lock().unwrap(), 0);
    server.stop().await;
}

/// An absolute target with an empty path names the root (RFC 9112, section
/// 3.2.2; RFC 3986, section 6.2.3): it reaches the `/` route, with or
/// without a query.
#[tokio::test]
async fn an_absolute_target_with_an_empty_path_reaches_the_root() {
    let server = TimedServer::hi(Duration::from_secs(5)).await;
    for target in [
        "http://a.example",
        "http://a.example?x=1",
        "http://a.example:80",
    ] {
        let request =
            format!("GET {target} HTTP/1.1\r\nHost: a.example\r\nConnection: close\r\n\r\n");
        let (got, _) = exchange(server.addr(), request.as_bytes(), WAIT).await;
        let (head, body) = split_answer(&got);
        assert_eq!(first_status(&got), Some(200), "{target}: {head}");
        assert_eq!(body, b"hi", "{target}");
    }
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Reading a body in process.

/// A read of the body that is given up before the body has all come (a
/// reader that stopped waiting, as `tokio::time::timeout` around it does)
/// leaves the body to the next reader, the part already read included:
/// nothing consumed it.
#[tokio::test]
async fn a_read_given_up_part_way_leaves_the_whole_body_to_the_next_reader() {
    use futures_util::{FutureExt, StreamExt};

    let (send_rest, rest) = tokio::sync::oneshot::channel::<()>();
    let parts = futures_util::stream::once(async {
        Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(b"abc")))
    })
    .chain(futures_util::stream::once(async move {
        let _ = rest.await;
        Ok::<_, Infallible>(http_body::Frame::data(Bytes::from_static(b"def")))
    }));
    let mut req = Request::new(
        http::Request::post("/p")
            .body(StreamBody::new(parts))
            .unwrap(),
    );
    // The first part comes, then the read waits: given up there.
    assert!(req.body_bytes(100).now_or_never().is_none());
    let _ = send_rest.send(());
    let read = support::within("the second read", WAIT, req.body_bytes(100)).await;
    assert_eq!(read.unwrap(), "abcdef");
}
