//! The server over HTTP/2, with a real client on loopback: request bodies
//! over the cap or at odds with their declared length, HEAD, many streams
//! and reset streams, `connections_per_ip` and the throttle counted per
//! stream, a graceful shutdown, and malformed requests.

mod support;
mod throttle_support;

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::client::conn::http2::SendRequest;
use hyper_util::rt::{TokioExecutor, TokioIo};
use suprnova::rate_limit::RateLimitMiddleware;
use suprnova::{HttpResponse, Request, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::task::JoinHandle;

use support::h2::*;
use support::held::{Gate, entered, open_becomes};
use support::http::{Reply, TestServer};

type Body = BoxBody<Bytes, Infallible>;

/// An HTTP/2 client connection (prior knowledge) to `addr`, its task
/// spawned.
async fn h2(addr: SocketAddr) -> (SendRequest<Body>, JoinHandle<hyper::Result<()>>) {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    (sender, tokio::spawn(connection))
}

fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into()).boxed()
}

/// A body of `chunks` parts of `size` bytes with no length known ahead, so
/// that the request carries no `content-length`.
fn unsized_body(chunks: usize, size: usize) -> Body {
    let parts = (0..chunks)
        .map(move |_| Ok::<_, Infallible>(http_body::Frame::data(Bytes::from(vec![b'x'; size]))));
    StreamBody::new(futures_util::stream::iter(parts)).boxed()
}

fn request(method: &str, addr: SocketAddr, path: &str, body: Body) -> http::Request<Body> {
    http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .body(body)
        .unwrap()
}

/// Sends `request` on `sender` and reads the reply whole, within 5 s.
async fn ask(sender: &mut SendRequest<Body>, request: http::Request<Body>) -> Reply {
    support::within("an HTTP/2 reply", Duration::from_secs(5), async {
        sender.ready().await.expect("the connection is open");
        let response = sender.send_request(request).await.expect("answered");
        assert_eq!(response.version(), http::Version::HTTP_2);
        Reply::read(response).await
    })
    .await
}

/// `POST /echo` reads its body with a cap of 1 KiB and says how long it
/// was; `GET /hi` answers "hi".
fn echo_routes() -> Router {
    Router::new()
        .post("/echo", |mut req: Request| async move {
            match req.body_bytes(1024).await {
                Ok(body) => HttpResponse::text(format!("{} bytes", body.len())),
                Err(e) => e.to_response(),
            }
        })
        .get("/hi", |_req: Request| async { HttpResponse::text("hi") })
}

// ---------------------------------------------------------------------------
// Bodies.

/// A body over the cap gets 413 on its stream, whether it declares its
/// length or not, and the connection serves on: even after more than the
/// connection's whole flow-control window (1 MiB) was sent in bodies the
/// handlers refused, a later request's body is read.
#[tokio::test]
async fn h2_bodies_over_the_cap_get_413_and_the_connection_serves_on() {
    let server = TestServer::start(echo_routes()).await;
    let addr = server.addr();
    let (mut sender, connection) = h2(addr).await;

    let declared = ask(
        &mut sender,
        request("POST", addr, "/echo", full(vec![b'x'; 5000])),
    )
    .await;
    assert_eq!(
        (declared.status, declared.body.as_str()),
        (413, "413 Payload Too Large")
    );

    // 24 bodies of 64 KiB, none declaring its length: 1.5 MiB in all.
    for round in 0..24 {
        let refused = ask(
            &mut sender,
            request("POST", addr, "/echo", unsized_body(4, 16 * 1024)),
        )
        .await;
        assert_eq!(
            (refused.status, refused.body.as_str()),
            (413, "413 Payload Too Large"),
            "round {round}"
        );
    }

    let small = ask(
        &mut sender,
        request("POST", addr, "/echo", unsized_body(2, 300)),
    )
    .await;
    assert_eq!((small.status, small.body.as_str()), (200, "600 bytes"));
    let hi = ask(&mut sender, request("GET", addr, "/hi", full(""))).await;
    assert_eq!((hi.status, hi.body.as_str()), (200, "hi"));
    assert!(!connection.is_finished(), "the connection ended");
    server.stop().await;
}

/// A body whose DATA frames run past its declared `content-length`, or end
/// short of it, is malformed (RFC 9113, section 8.1.1): its stream is
/// reset with PROTOCOL_ERROR and never answered 200; the connection's next
/// stream is served. The DATA a client sends on a stream already answered
/// 413 (it had not seen the answer yet) is dropped and breaks nothing.
#[tokio::test]
async fn h2_data_at_odds_with_the_declared_length_resets_only_its_stream() {
    let server = TestServer::start(echo_routes()).await;
    let addr = server.addr();
    let post = |length: &'static str| {
        let mut fields = request_fields("POST", "/echo");
        fields.push(("content-length", length));
        headers(1, &fields, false)
    };
    for (declared, sent) in [("5", 10usize), ("10", 5)] {
        let mut raw = Raw::open(addr).await;
        let mut bytes = post(declared);
        bytes.extend(frame(DATA, END_STREAM, 1, &vec![b'x'; sent]));
        bytes.extend(get(3, "/hi"));
        assert!(raw.send(&bytes).await);
        let mut log = Log::default();
        raw.until(&mut log, Duration::from_secs(3), |log| {
            log.ended(1) && log.ended(3)
        })
        .await;
        assert_eq!(
            log.reset(1),
            Some(PROTOCOL_ERROR),
            "declared {declared}, sent {sent}: {log:?}"
        );
        assert_ne!(
            log.status(1),
            Some(STATUS_200),
            "declared {declared}, sent {sent}"
        );
        assert_eq!(
            log.status(3),
            Some(STATUS_200),
            "declared {declared}, sent {sent}: {log:?}"
        );
        assert_eq!(log.body(3), b"hi");
        assert!(log.goaways().is_empty(), "{log:?}");
    }

    // Over the cap by its declared length: answered before its data comes.
    let mut raw = Raw::open(addr).await;
    assert!(raw.send(&post("5000")).await);
    let mut log = Log::default();
    assert!(
        raw.until(&mut log, Duration::from_secs(3), |log| log.ended(1))
            .await
    );
    assert_ne!(log.status(1), Some(STATUS_200));
    // Answered whole, then told to stop sending (RFC 9113, section 8.1).
    assert_eq!(log.reset(1), Some(0), "{log:?}");
    // The data comes anyway, then the next request.
    let mut bytes = Vec::new();
    for _ in 0..4 {
        bytes.extend(frame(DATA, 0, 1, &[b'x'; 1250]));
    }
    bytes.extend(frame(DATA, END_STREAM, 1, &[]));
    bytes.extend(get(3, "/hi"));
    raw.send(&bytes).await;
    raw.until(&mut log, Duration::from_secs(3), |log| log.ended(3))
        .await;
    assert_eq!(log.status(3), Some(STATUS_200), "{log:?}");
    assert_eq!(log.body(3), b"hi");
    assert!(log.goaways().is_empty(), "{log:?}");
    drop(raw);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// HEAD.

/// Over HTTP/2 a HEAD gets the status and `content-length` a GET gets, and
/// no content: for a 200 with content, a 204, and a throttle's 429.
#[tokio::test]
async fn h2_head_gets_the_head_of_get_and_no_content() {
    let clock = support::clock_at(12, 0, 0);
    let app = throttle_support::memory_app(&clock);
    app.scope(async {
        let router = Router::new()
            .get("/limited", |_req: Request| async {
                HttpResponse::text("ok")
            })
            .middleware_named("throttle:1,1")
            .get("/hi", |_req: Request| async { HttpResponse::text("hi") })
            .get("/gone", |_req: Request| async {
                HttpResponse::new().status(204)
            });
        let server = TestServer::start(router).await;
        let addr = server.addr();
        let (mut sender, _connection) = h2(addr).await;
        let first = ask(&mut sender, request("GET", addr, "/limited", full(""))).await;
        assert_eq!(first.status, 200);
        for path in ["/hi", "/gone", "/limited"] {
            let got = ask(&mut sender, request("GET", addr, path, full(""))).await;
            let head = ask(&mut sender, request("HEAD", addr, path, full(""))).await;
            assert_eq!(head.status, got.status, "{path}");
            assert_eq!(head.body, "", "{path}");
            assert_eq!(
                head.header("content-length"),
                got.header("content-length"),
                "{path}: HEAD's content-length against GET's"
            );
            if got.status == 204 {
                assert_eq!(got.header("content-length"), None, "{path}");
                assert_eq!(got.body, "", "{path}: a 204 with content");
            } else {
                assert_eq!(
                    got.header("content-length"),
                    Some(got.body.len().to_string().as_str()),
                    "{path}"
                );
            }
        }
        let limited = ask(&mut sender, request("HEAD", addr, "/limited", full(""))).await;
        assert_eq!(limited.status, 429);
        assert!(limited.header("retry-after").is_some());
        server.stop().await;
    })
    .await;
}

/// An empty 200 answers HEAD and GET with the same `content-length` over
/// HTTP/2 (RFC 9110, section 9.3.2), as over HTTP/1, where both say `0`.
#[tokio::test]
async fn h2_an_empty_answer_has_the_same_length_for_head_and_get() {
    let router = Router::new().get("/empty", |_req: Request| async { HttpResponse::new() });
    let server = TestServer::start(router).await;
    let addr = server.addr();
    let over_http1 = |method: &str| {
        http::Request::builder()
            .method(method)
            .uri(server.url("/empty"))
            .body(Full::default())
            .unwrap()
    };
    let (get1, head1) = (
        server.send(over_http1("GET")).await,
        server.send(over_http1("HEAD")).await,
    );
    assert_eq!(get1.header("content-length"), Some("0"));
    assert_eq!(head1.header("content-length"), Some("0"));
    let (mut sender, _connection) = h2(addr).await;
    let got = ask(&mut sender, request("GET", addr, "/empty", full(""))).await;
    let head = ask(&mut sender, request("HEAD", addr, "/empty", full(""))).await;
    assert_eq!((got.status, head.status), (200, 200));
    assert_eq!((got.body.as_str(), head.body.as_str()), ("", ""));
    assert_eq!(
        (got.header("content-length"), head.header("content-length")),
        (Some("0"), Some("0")),
        "GET's and HEAD's content-length over HTTP/2"
    );
    server.stop().await;
}

/// A 204 or a 304 whose handler left content on it has no content on the
/// wire (RFC 9110, sections 15.3.5 and 15.4.5: neither can contain
/// content): over HTTP/1 the content is left out, and so it must be over
/// HTTP/2, where a 204 carries no `content-length` either (RFC 9110,
/// section 8.6: a server must not send one in a 204).
#[tokio::test]
async fn h2_a_204_or_304_with_content_left_on_it_sends_no_content() {
    let router = Router::new()
        .get("/gone", |_req: Request| async {
            HttpResponse::text("deleted").status(204)
        })
        .get("/same", |_req: Request| async {
            HttpResponse::text("cached").status(304)
        });
    let server = TestServer::start(router).await;
    let addr = server.addr();
    for path in ["/gone", "/same"] {
        let http1 = server.get(path).await;
        assert_eq!(http1.body, "", "{path} over HTTP/1");
        if http1.status == 204 {
            assert_eq!(http1.header("content-length"), None, "{path} over HTTP/1");
        }
    }
    let mut outcomes = Vec::new();
    for path in ["/gone", "/same"] {
        let (mut sender, _connection) = h2(addr).await;
        let outcome = tokio::time::timeout(Duration::from_secs(3), async {
            let response = sender
                .send_request(request("GET", addr, path, full("")))
                .await?;
            let status = response.status().as_u16();
            let length = response
                .headers()
                .get("content-length")
                .map(|v| v.to_str().unwrap().to_owned());
            let body = response.into_body().collect().await?.to_bytes();
            Ok::<_, hyper::Error>((status, length, String::from_utf8_lossy(&body).into_owned()))
        })
        .await
        .expect("answered within 3 s");
        outcomes.push((path, outcome.map_err(|e| e.to_string())));
    }
    // A 304 may carry the length a 200 would have; its content is none.
    let seen: Vec<_> = outcomes
        .iter()
        .map(|(path, outcome)| match outcome {
            Ok((204, length, body)) => (*path, Ok((204, length.clone(), body.clone()))),
            Ok((status, _, body)) => (*path, Ok((*status, None, body.clone()))),
            Err(e) => (*path, Err(e.clone())),
        })
        .collect();
    assert_eq!(
        seen,
        [
            ("/gone", Ok((204, None, String::new()))),
            ("/same", Ok((304, None, String::new()))),
        ],
        "as sent: {outcomes:?}"
    );
    server.stop().await;
}

/// A handler that answers with a 1xx status, which is no final answer,
/// gets `500` over HTTP/2 as over HTTP/1 (where hyper answers `500` for
/// it). Sent as it is over HTTP/2, it is an interim response that ends its
/// stream (and a 103's content follows it as DATA): a malformed answer
/// (RFC 9113, section 8.1) that the client fails on, with no status at all.
#[tokio::test]
async fn h2_a_handlers_1xx_status_gets_500_as_over_http1() {
    let router = Router::new()
        .get("/continue", |_req: Request| async {
            HttpResponse::new().status(100)
        })
        .get("/early", |_req: Request| async {
            HttpResponse::text("early").status(103)
        });
    let server = TestServer::start(router).await;
    let addr = server.addr();
    for path in ["/continue", "/early"] {
        assert_eq!(server.get(path).await.status, 500, "{path} over HTTP/1");
    }
    let mut outcomes = Vec::new();
    for path in ["/continue", "/early"] {
        let (mut sender, _connection) = h2(addr).await;
        let outcome = tokio::time::timeout(Duration::from_secs(3), async {
            let response = sender
                .send_request(request("GET", addr, path, full("")))
                .await?;
            let status = response.status().as_u16();
            response.into_body().collect().await?;
            Ok::<_, hyper::Error>(status)
        })
        .await
        .map_err(|_| "no answer within 3 s".to_owned())
        .and_then(|answer| answer.map_err(|e| e.to_string()));
        outcomes.push((path, outcome));
    }
    assert_eq!(outcomes, [("/continue", Ok(500)), ("/early", Ok(500))]);
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Many streams.

/// A handler that counts the runs under way (`running`, and the most ever
/// at once in `peak`), and the runs begun (`begun`), and waits until it is
/// released or dropped.
#[derive(Clone)]
struct Gauge {
    running: Arc<AtomicUsize>,
    peak: Arc<AtomicUsize>,
    begun: Arc<AtomicUsize>,
    release: Arc<tokio::sync::Semaphore>,
}

impl Default for Gauge {
    fn default() -> Self {
        Self {
            running: Arc::default(),
            peak: Arc::default(),
            begun: Arc::default(),
            release: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

struct Running(Arc<AtomicUsize>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.fetch_sub(1, SeqCst);
    }
}

impl Gauge {
    fn route(&self, router: Router, path: &str) -> Router {
        let gauge = self.clone();
        router.get(path, move |_req: Request| {
            let gauge = gauge.clone();
            async move {
                gauge.begun.fetch_add(1, SeqCst);
                let now = gauge.running.fetch_add(1, SeqCst) + 1;
                gauge.peak.fetch_max(now, SeqCst);
                let _running = Running(gauge.running.clone());
                let _permit = gauge.release.acquire().await.unwrap();
                HttpResponse::text("done")
            }
        })
    }

    async fn running_becomes(&self, want: usize) {
        let start = Instant::now();
        while self.running.load(SeqCst) != want {
            assert!(
                start.elapsed() < Duration::from_secs(5),
                "{} handlers running instead of {want}",
                self.running.load(SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }
}

/// The server says how many streams a client may have open at once
/// (SETTINGS_MAX_CONCURRENT_STREAMS), and holds to it: the stream past it
/// is refused (REFUSED_STREAM) without running its handler, and the ones
/// within it are all answered.
#[tokio::test]
async fn h2_max_concurrent_streams_is_advertised_and_honoured() {
    let gauge = Gauge::default();
    let server = TestServer::start(gauge.route(Router::new(), "/held")).await;
    let mut raw = Raw::open(server.addr()).await;
    let mut log = Log::default();
    let raw_settings = |raw: &Raw| raw.settings.iter().find(|(id, _)| *id == 3).map(|s| s.1);
    raw.until(&mut log, Duration::from_secs(2), |log| {
        log.on(0, SETTINGS).any(|f| f.flags & ACK == 0)
    })
    .await;
    let max = raw_settings(&raw).expect("SETTINGS_MAX_CONCURRENT_STREAMS advertised");
    assert!(max > 0 && max <= 1000, "{max}");
    let mut bytes = Vec::new();
    for i in 0..=max {
        bytes.extend(get(2 * i + 1, "/held"));
    }
    assert!(raw.send(&bytes).await);
    let over = 2 * max + 1;
    raw.until(&mut log, Duration::from_secs(3), |log| {
        log.reset(over).is_some()
    })
    .await;
    assert_eq!(log.reset(over), Some(REFUSED_STREAM), "{:?}", log.goaways());
    gauge.running_becomes(max as usize).await;
    assert_eq!(gauge.begun.load(SeqCst), max as usize);
    gauge.release.add_permits(max as usize);
    let answered = raw
        .until(&mut log, Duration::from_secs(5), |log| {
            (0..max).all(|i| log.ended(2 * i + 1))
        })
        .await;
    assert!(answered);
    assert!((0..max).all(|i| log.status(2 * i + 1) == Some(STATUS_200)));
    drop(raw);
    server.stop().await;
}

/// A client that opens streams and resets each at once (the rapid reset
/// attack) gets no more handlers running at once than streams it may keep
/// open, and every reset stream's handler is dropped: none is left running
/// afterwards. The server still serves other clients.
#[tokio::test]
async fn h2_rapid_reset_leaves_no_handler_running() {
    let gauge = Gauge::default();
    let router = gauge
        .route(Router::new(), "/held")
        .get("/hi", |_req: Request| async { HttpResponse::text("hi") });
    let server = TestServer::start(router).await;
    let mut raw = Raw::open(server.addr()).await;
    let mut log = Log::default();
    let mut stream = 1;
    'bursts: for _ in 0..50 {
        let mut bytes = Vec::new();
        for _ in 0..100 {
            bytes.extend(get(stream, "/held"));
            bytes.extend(frame(RST_STREAM, 0, stream, &CANCEL.to_be_bytes()));
            stream += 2;
        }
        if !raw.send(&bytes).await {
            break 'bursts;
        }
        raw.until(&mut log, Duration::from_millis(5), |_| false)
            .await;
        if log.closed {
            break;
        }
    }
    raw.until(&mut log, Duration::from_millis(300), |_| false)
        .await;
    gauge.running_becomes(0).await;
    let peak = gauge.peak.load(SeqCst);
    assert!(peak <= 200, "{peak} handlers ran at once");
    let hi = support::http::TestServer::send_h2(
        &server,
        http::Request::get(server.url("/hi"))
            .body(Full::default())
            .unwrap(),
    )
    .await;
    assert_eq!((hi.status, hi.body.as_str()), (200, "hi"));
    eprintln!(
        "streams sent {}, handlers begun {}, peak {peak}, goaways {:?}",
        stream / 2,
        gauge.begun.load(SeqCst),
        log.goaways()
    );
    drop(raw);
    server.stop().await;
}

/// Streams reset once their handlers have begun: each handler is dropped
/// with its stream, so that a client opening and resetting streams as fast
/// as the server takes them never has more handlers running than streams
/// it may keep open (200), and none is left running.
#[tokio::test]
async fn h2_streams_reset_while_handled_drop_their_handlers() {
    let gauge = Gauge::default();
    let server = TestServer::start(gauge.route(Router::new(), "/held")).await;
    let mut raw = Raw::open(server.addr()).await;
    let mut log = Log::default();
    let mut next = 1u32;
    for round in 0..10u32 {
        let first = next;
        let mut bytes = Vec::new();
        for _ in 0..150 {
            bytes.extend(get(next, "/held"));
            next += 2;
        }
        assert!(raw.send(&bytes).await);
        gauge.running_becomes(150).await;
        let mut resets = Vec::new();
        for stream in (first..next).step_by(2) {
            resets.extend(frame(RST_STREAM, 0, stream, &CANCEL.to_be_bytes()));
        }
        assert!(raw.send(&resets).await);
        gauge.running_becomes(0).await;
        raw.until(&mut log, Duration::from_millis(1), |_| false)
            .await;
        assert!(
            !log.closed && log.goaways().is_empty(),
            "round {round}: {log:?}"
        );
    }
    assert_eq!(gauge.begun.load(SeqCst), 1500);
    assert!(
        gauge.peak.load(SeqCst) <= 200,
        "{}",
        gauge.peak.load(SeqCst)
    );
    drop(raw);
    server.stop().await;
}

/// `throttle:5,1` counts each stream of one HTTP/2 connection once: of 12
/// requests in flight together, exactly 5 are admitted.
#[tokio::test]
async fn h2_streams_of_one_connection_are_each_counted_once_by_the_throttle() {
    let clock = support::clock_at(12, 0, 0);
    let app = throttle_support::memory_app(&clock);
    app.scope(async {
        let router = Router::new()
            .get("/api", |_req: Request| async { HttpResponse::text("ok") })
            .middleware_named("throttle:5,1");
        let server = TestServer::start(router).await;
        let addr = server.addr();
        let (sender, _connection) = h2(addr).await;
        let asks = (0..12).map(|_| {
            let mut sender = sender.clone();
            async move { ask(&mut sender, request("GET", addr, "/api", full(""))).await }
        });
        let replies = futures_util::future::join_all(asks).await;
        let admitted = replies.iter().filter(|r| r.status == 200).count();
        let refused = replies.iter().filter(|r| r.status == 429).count();
        assert_eq!((admitted, refused), (5, 7));
        let mut remaining: Vec<_> = replies
            .iter()
            .filter(|r| r.status == 200)
            .map(|r| r.header("x-ratelimit-remaining").unwrap().to_owned())
            .collect();
        remaining.sort();
        assert_eq!(remaining, ["0", "1", "2", "3", "4"]);
        server.stop().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// connections_per_ip.

/// Over HTTP/2 `connections_per_ip` counts requests (streams) while they
/// are handled, as the docs say of any route that is not a WebSocket: two
/// streams of one connection hold two places and a third is refused with
/// 429; a stream the client resets gives its place back, and so does a
/// stream whose connection the client drops.
#[tokio::test]
async fn h2_connections_per_ip_counts_streams_and_frees_them_on_reset_and_drop() {
    let cap = RateLimitMiddleware::connections_per_ip(2);
    let (gate, mut rx) = Gate::new();
    let server = TestServer::start(gate.router("/slow", &cap)).await;
    let addr = server.addr();
    let local = support::ip("127.0.0.1");
    let (sender, connection) = h2(addr).await;
    let spawn = |sender: &SendRequest<Body>| {
        let mut sender = sender.clone();
        tokio::spawn(async move {
            sender.ready().await.unwrap();
            let response = sender
                .send_request(request("GET", addr, "/slow", full("")))
                .await;
            match response {
                Ok(response) => Ok(Reply::read(response).await),
                Err(e) => Err(e),
            }
        })
    };
    let first = spawn(&sender);
    entered(&mut rx).await;
    let second = spawn(&sender);
    entered(&mut rx).await;
    assert_eq!(cap.open_for(local), 2);
    let mut third_sender = sender.clone();
    let third = ask(&mut third_sender, request("GET", addr, "/slow", full(""))).await;
    assert_eq!(
        (third.status, third.body.as_str()),
        (429, "429 Too Many Requests")
    );
    assert_eq!(third.header("retry-after"), None);

    // The client gives up on the first: its stream is reset.
    first.abort();
    open_becomes(&cap, local, 1).await;
    // The second is answered.
    gate.release(1);
    let second = second.await.unwrap().unwrap();
    assert_eq!((second.status, second.body.as_str()), (200, "done"));
    open_becomes(&cap, local, 0).await;
    drop((sender, third_sender, connection));

    // A client whose connection goes (its socket closed) with a stream in
    // flight gives the place back.
    // (A gate of its own: a released one lets every later request by.)
    server.stop().await;
    let (gate, mut rx) = Gate::new();
    let server = TestServer::start(gate.router("/slow", &cap)).await;
    let addr = server.addr();
    let mut raw = Raw::open(addr).await;
    assert!(raw.send(&get(1, "/slow")).await);
    entered(&mut rx).await;
    assert_eq!(cap.open_for(local), 1);
    drop(raw);
    open_becomes(&cap, local, 0).await;
    assert_eq!(cap.addresses_open(), 0);
    // A fresh connection is served.
    gate.release(1);
    let (mut sender, _connection) = h2(addr).await;
    let again = ask(&mut sender, request("GET", addr, "/slow", full(""))).await;
    assert_eq!((again.status, again.body.as_str()), (200, "done"));
    open_becomes(&cap, local, 0).await;
    server.stop().await;
}

/// A WebSocket route asked over HTTP/2 (which cannot carry an HTTP/1.1
/// upgrade, and the server offers no extended CONNECT) answers `426`
/// without the connection-specific headers HTTP/2 forbids, and its
/// `connections_per_ip` place is given back at once.
#[tokio::test]
async fn h2_a_websocket_route_answers_426_and_gives_its_place_back() {
    struct Silent;
    #[suprnova::async_trait]
    impl suprnova::ws::WebSocketHandler for Silent {
        async fn on_socket(&self, _socket: suprnova::ws::WebSocket) {}
    }
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let server = TestServer::start(suprnova::ws!("/ws", Silent).middleware(cap.clone())).await;
    let addr = server.addr();
    let (mut sender, _connection) = h2(addr).await;
    for _ in 0..3 {
        let reply = ask(&mut sender, request("GET", addr, "/ws", full(""))).await;
        assert_eq!(reply.status, 426);
        assert!(
            reply.body.starts_with("426 Upgrade Required"),
            "{}",
            reply.body
        );
        assert_eq!(reply.header("connection"), None);
        assert_eq!(reply.header("upgrade"), None);
        assert_eq!(cap.open_for(support::ip("127.0.0.1")), 0);
    }
    server.stop().await;
}

/// An HTTP/1.1 request asking to upgrade to h2c is answered over HTTP/1.1
/// (the server speaks HTTP/2 with prior knowledge only), not switched to
/// HTTP/2, and its connection serves the next HTTP/1.1 request.
#[tokio::test]
async fn an_h2c_upgrade_is_answered_over_http1() {
    let server = TestServer::start(echo_routes()).await;
    let mut io = TcpStream::connect(server.addr()).await.unwrap();
    io.write_all(
        b"GET /hi HTTP/1.1\r\nHost: a\r\nConnection: Upgrade, HTTP2-Settings\r\n\
          Upgrade: h2c\r\nHTTP2-Settings: AAMAAABkAAQAAP__\r\n\r\n",
    )
    .await
    .unwrap();
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    let read = tokio::time::timeout(Duration::from_secs(3), async {
        while !got.ends_with(b"hi") {
            let n = io.read(&mut chunk).await.unwrap();
            assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
            got.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert!(read.is_ok(), "{}", String::from_utf8_lossy(&got));
    let text = String::from_utf8_lossy(&got).into_owned();
    assert!(text.starts_with("HTTP/1.1 200 OK\r\n"), "{text}");
    io.write_all(b"GET /hi HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    got.clear();
    let read = tokio::time::timeout(Duration::from_secs(3), async {
        while !got.ends_with(b"hi") {
            let n = io.read(&mut chunk).await.unwrap();
            assert!(n > 0);
            got.extend_from_slice(&chunk[..n]);
        }
    })
    .await;
    assert!(read.is_ok());
    assert!(got.starts_with(b"HTTP/1.1 200 OK\r\n"));
    server.stop().await;
}

// ---------------------------------------------------------------------------
// Shutdown.

/// A graceful shutdown with an HTTP/2 stream in flight: the server sends
/// GOAWAY, refuses a stream opened after it (it is never answered), lets
/// the one in flight finish with its whole answer, and returns soon after.
#[tokio::test]
async fn h2_graceful_shutdown_finishes_the_stream_in_flight_and_refuses_new_ones() {
    let gauge = Gauge::default();
    let router = gauge
        .route(Router::new(), "/held")
        .get("/hi", |_req: Request| async { HttpResponse::text("hi") });
    let server = TestServer::start(router).await;
    let mut raw = Raw::open(server.addr()).await;
    assert!(raw.send(&get(1, "/held")).await);
    gauge.running_becomes(1).await;
    let stopping = Instant::now();
    let stopped = tokio::spawn(server.stop());
    let mut log = Log::default();
    assert!(
        raw.until(&mut log, Duration::from_secs(2), |log| !log
            .goaways()
            .is_empty())
            .await,
        "no GOAWAY: {log:?}"
    );
    // A stream opened after the GOAWAY.
    raw.send(&get(3, "/hi")).await;
    raw.until(&mut log, Duration::from_millis(300), |_| false)
        .await;
    gauge.release.add_permits(1);
    raw.until(&mut log, Duration::from_secs(3), |log| log.ended(1))
        .await;
    assert_eq!(log.status(1), Some(STATUS_200), "{log:?}");
    assert_eq!(log.body(1), b"done");
    assert!(
        log.status(3).is_none(),
        "a stream after the GOAWAY was answered"
    );
    assert!(
        log.goaways()
            .iter()
            .all(|(last, code)| *code == 0 && *last >= 1)
    );
    assert_eq!(
        log.goaways().last().map(|g| g.0),
        Some(1),
        "{:?}",
        log.goaways()
    );
    raw.until(&mut log, Duration::from_secs(3), |log| log.closed)
        .await;
    assert!(log.closed, "the connection is still open");
    support::within("the server's return", Duration::from_secs(3), stopped)
        .await
        .unwrap();
    assert!(
        stopping.elapsed() < Duration::from_secs(3),
        "{:?}",
        stopping.elapsed()
    );
    assert_eq!(gauge.begun.load(SeqCst), 1);
}

/// A shutdown with an idle HTTP/2 connection whose client answers the
/// GOAWAY (any client library does) returns at once, not a header read
/// timeout later.
#[tokio::test]
async fn h2_shutdown_with_an_idle_well_behaved_client_returns_at_once() {
    let server = TestServer::start(echo_routes()).await;
    let addr = server.addr();
    let (mut sender, connection) = h2(addr).await;
    let hi = ask(&mut sender, request("GET", addr, "/hi", full(""))).await;
    assert_eq!(hi.status, 200);
    let stopping = Instant::now();
    server.stop().await;
    assert!(
        stopping.elapsed() < Duration::from_secs(2),
        "returned {:?} after the shutdown began",
        stopping.elapsed()
    );
    let ended = tokio::time::timeout(Duration::from_secs(2), connection).await;
    assert!(ended.is_ok(), "the client's connection is still open");
}

// ---------------------------------------------------------------------------
// Malformed requests.

/// A malformed request (RFC 9113, section 8.1.1: an uppercase header name,
/// a connection-specific header, a `te` other than `trailers`, a pseudo
/// header missing, unknown or after a regular one) is a stream error: the
/// stream is reset (or refused with a 4xx), its handler never runs, no
/// panic, no hang, and the connection's next stream is served.
#[tokio::test]
async fn h2_malformed_requests_reset_their_stream_and_the_connection_serves_on() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let router = Router::new()
        .get("/bad", move |_req: Request| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, SeqCst);
                HttpResponse::text("ran")
            }
        })
        .get("/hi", |_req: Request| async { HttpResponse::text("hi") });
    let server = TestServer::start(router).await;
    let base = request_fields("GET", "/bad");
    let with = |extra: (&'static str, &'static str)| {
        let mut fields = base.clone();
        fields.push(extra);
        fields
    };
    let without = |name: &str| {
        base.iter()
            .copied()
            .filter(|(n, _)| *n != name)
            .collect::<Vec<_>>()
    };
    let cases: Vec<(&str, Vec<(&str, &str)>)> = vec![
        ("an uppercase name", with(("X-Upper", "1"))),
        ("connection: keep-alive", with(("connection", "keep-alive"))),
        ("transfer-encoding", with(("transfer-encoding", "chunked"))),
        ("keep-alive", with(("keep-alive", "timeout=5"))),
        ("upgrade", with(("upgrade", "websocket"))),
        ("te: gzip", with(("te", "gzip"))),
        ("no :path", without(":path")),
        ("no :method", without(":method")),
        ("no :scheme", without(":scheme")),
        ("an empty :path", {
            let mut fields = without(":path");
            fields.push((":path", ""));
            fields
        }),
        ("an unknown pseudo header", with((":foo", "bar"))),
        ("a pseudo header after a regular one", {
            let mut fields = vec![("x-a", "1")];
            fields.extend(base.iter().copied());
            fields
        }),
    ];
    let mut outcomes = Vec::new();
    for (what, fields) in &cases {
        let mut raw = Raw::open(server.addr()).await;
        let mut bytes = headers(1, fields, true);
        bytes.extend(get(3, "/hi"));
        assert!(raw.send(&bytes).await, "{what}");
        let mut log = Log::default();
        let done = raw
            .until(&mut log, Duration::from_secs(3), |log| {
                log.ended(1) && log.ended(3)
            })
            .await;
        outcomes.push(format!(
            "{what}: stream 1 status {:?} reset {:?}; stream 3 status {:?}; goaways {:?}; closed {}",
            log.status(1),
            log.reset(1),
            log.status(3),
            log.goaways(),
            log.closed
        ));
        assert!(
            done || log.closed,
            "{what}: no answer and no close within 3 s: {log:?}"
        );
    }
    eprintln!("{}", outcomes.join("\n"));
    assert_eq!(ran.load(SeqCst), 0, "a malformed request ran its handler");
    for outcome in &outcomes {
        // An uppercase name and an unknown pseudo header end the whole
        // connection (GOAWAY with PROTOCOL_ERROR, before any answer): a
        // clean connection error, which the protocol allows too.
        let connection_error = outcome.starts_with("an uppercase name")
            || outcome.starts_with("an unknown pseudo header");
        if connection_error {
            assert!(
                outcome.contains("goaways [(0, 1)]; closed true"),
                "{outcome}"
            );
            continue;
        }
        assert!(
            outcome.contains("reset Some(1); stream 3 status Some(136)"),
            "the connection's next stream was not served: {outcome}"
        );
        assert!(
            !outcome.contains("stream 1 status Some(136)"),
            "a malformed request was answered 200: {outcome}"
        );
    }

    // A bad preface: closed (or answered as HTTP/1 with an error), at once.
    let mut io = TcpStream::connect(server.addr()).await.unwrap();
    io.write_all(b"PRI * HTTP/2.0\r\n\r\nXY\r\n\r\n")
        .await
        .unwrap();
    let mut got = Vec::new();
    let closed = tokio::time::timeout(Duration::from_secs(2), io.read_to_end(&mut got)).await;
    assert!(closed.is_ok(), "still open after a bad preface");
    let text = String::from_utf8_lossy(&got);
    assert!(!text.contains(" 200 "), "{text}");
    assert_eq!(ran.load(SeqCst), 0);
    // The server still serves.
    let hi = server
        .send_h2(
            http::Request::get(server.url("/hi"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(hi.status, 200);
    server.stop().await;
}

/// A header block larger than the server takes (16 KiB of fields) gets its
/// stream refused (431, or a reset), not an answer from the handler, and
/// the connection serves on; a header block that never ends (CONTINUATION
/// after CONTINUATION) is cut off, the connection closed, long before the
/// client has sent 8 MiB of it.
#[tokio::test]
async fn h2_oversized_and_endless_header_blocks_are_cut_off() {
    let ran = Arc::new(AtomicUsize::new(0));
    let counted = ran.clone();
    let router = Router::new()
        .get("/big", move |_req: Request| {
            let counted = counted.clone();
            async move {
                counted.fetch_add(1, SeqCst);
                HttpResponse::text("ran")
            }
        })
        .get("/hi", |_req: Request| async { HttpResponse::text("hi") });
    let server = TestServer::start(router).await;
    let big = "v".repeat(20_000);
    let mut fields = request_fields("GET", "/big");
    fields.push(("x-big", big.as_str()));
    let mut raw = Raw::open(server.addr()).await;
    let mut log = Log::default();
    raw.until(&mut log, Duration::from_secs(1), |log| {
        log.on(0, SETTINGS).any(|f| f.flags & ACK != 0)
    })
    .await;
    // In two frames, each within the largest frame the server takes.
    let whole = block(&fields);
    let mut bytes = frame(HEADERS, END_STREAM, 1, &whole[..16_000]);
    bytes.extend(frame(9, END_HEADERS, 1, &whole[16_000..]));
    bytes.extend(get(3, "/hi"));
    assert!(raw.send(&bytes).await);
    raw.until(&mut log, Duration::from_secs(3), |log| {
        log.ended(1) && log.ended(3)
    })
    .await;
    assert!(log.ended(1), "{log:?}");
    assert_ne!(log.status(1), Some(STATUS_200));
    assert_eq!(log.status(3), Some(STATUS_200), "{log:?}");
    assert_eq!(ran.load(SeqCst), 0);
    drop(raw);

    // HEADERS without END_HEADERS, then CONTINUATION frames of 8 KiB of
    // fields each, up to 8 MiB.
    let mut raw = Raw::open(server.addr()).await;
    let mut first = block(&request_fields("GET", "/big"));
    first.extend(block(&[("x-a", "1")]));
    let mut sent = frame(HEADERS, END_STREAM, 1, &first);
    let filler = "f".repeat(100);
    let chunk = block(
        &(0..78)
            .map(|_| ("x-f", filler.as_str()))
            .collect::<Vec<_>>(),
    );
    let continuation = frame(9, 0, 1, &chunk);
    let started = Instant::now();
    let mut total = 0usize;
    let mut cut_off = false;
    while total < 8 << 20 {
        sent.extend_from_slice(&continuation);
        if !raw.send(&sent).await {
            cut_off = true;
            break;
        }
        total += sent.len();
        sent.clear();
        raw.until(&mut log, Duration::from_millis(0), |_| false)
            .await;
        if log.closed {
            cut_off = true;
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(10));
    }
    if !cut_off {
        let mut log = Log::default();
        raw.until(&mut log, Duration::from_secs(2), |log| log.closed)
            .await;
        cut_off = log.closed;
    }
    assert!(cut_off, "the server took {total} bytes of one header block");
    assert!(
        total < 1 << 20,
        "the server took {total} bytes of one header block"
    );
    assert_eq!(ran.load(SeqCst), 0);
    drop(raw);
    let hi = server
        .send_h2(
            http::Request::get(server.url("/hi"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(hi.status, 200);
    server.stop().await;
}
