//! HTTP/2 connections under the header read timeout, over real TCP on
//! loopback: a peer's PINGs (and the server's answers to them) are not
//! requests, so they keep no connection open, and a request body that
//! never comes is timed as an HTTP/1 one is.

mod support;

use support::http::TimedServer;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use suprnova::{HttpResponse, Request, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// The header read timeout of every test here.
const PERIOD: Duration = Duration::from_millis(300);

/// An HTTP/2 client connection to `addr`, its task spawned; with a PING
/// every 100 ms (a third of the period) when `pinging`.
async fn connect(
    addr: SocketAddr,
    pinging: bool,
) -> (
    hyper::client::conn::http2::SendRequest<Full<Bytes>>,
    tokio::task::JoinHandle<hyper::Result<()>>,
) {
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let mut builder = hyper::client::conn::http2::Builder::new(TokioExecutor::new());
    if pinging {
        builder
            .timer(TokioTimer::new())
            .keep_alive_interval(Duration::from_millis(100))
            .keep_alive_while_idle(true);
    }
    let (sender, connection) = builder.handshake(TokioIo::new(stream)).await.unwrap();
    (sender, tokio::spawn(connection))
}

fn get(addr: SocketAddr, path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(format!("http://{addr}{path}"))
        .body(Full::default())
        .unwrap()
}

/// An HTTP/2 peer that makes a request and then only sends PINGs (the
/// keep-alive any HTTP/2 client library offers) is closed as one that
/// sends nothing is, between one and two periods after its last answer:
/// the server's PING acknowledgements are not answers. The same client
/// without PINGs is closed alike.
#[tokio::test]
async fn an_http2_peer_that_only_pings_is_closed_as_an_idle_one_is() {
    let server = TimedServer::hi(PERIOD).await;
    for pinging in [false, true] {
        let (mut sender, connection) = connect(server.addr, pinging).await;
        let reply = sender.send_request(get(server.addr, "/")).await.unwrap();
        assert_eq!(reply.status(), 200);
        let answered = Instant::now();
        let ended = tokio::time::timeout(Duration::from_secs(3), connection).await;
        let after = answered.elapsed();
        assert!(
            ended.is_ok(),
            "pinging: {pinging}; still open {after:?} after its answer, with a {PERIOD:?} timeout"
        );
        support::http::assert_closed_one_to_two_periods_after(
            after,
            PERIOD,
            &format!("pinging: {pinging}"),
        );
    }
    server.stop().await;
}

/// An HTTP/2 peer that asks for a large answer, reads none of it (so it
/// makes no room in its flow-control window) but pings, does not hold the
/// connection and the answer for ever: it is dropped.
#[tokio::test]
async fn an_http2_peer_that_reads_nothing_of_its_answer_but_pings_is_dropped() {
    let server = TimedServer::hi(PERIOD).await;
    let (mut sender, connection) = connect(server.addr, true).await;
    let response = sender.send_request(get(server.addr, "/big")).await.unwrap();
    assert_eq!(response.status(), 200);
    let asked = Instant::now();
    let ended = tokio::time::timeout(Duration::from_secs(3), connection).await;
    assert!(
        ended.is_ok(),
        "a peer that read none of its answer for {:?}, pinging, is still connected",
        asked.elapsed()
    );
    drop(response);
    server.stop().await;
}

/// A shutdown does not wait for an HTTP/2 peer that made a request, has
/// nothing in flight, and keeps sending PINGs but never acknowledges the
/// server's own PING (which a graceful HTTP/2 close waits for): the server
/// returns and the peer is dropped within a period or two, not at the end
/// of the shutdown's grace.
#[tokio::test]
async fn a_shutdown_does_not_wait_for_a_pinging_http2_peer() {
    let server = TimedServer::hi(PERIOD).await;
    let mut stream = tokio::net::TcpStream::connect(server.addr).await.unwrap();
    // Preface and empty SETTINGS.
    stream
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00")
        .await
        .unwrap();
    let mut buf = vec![0_u8; 65536];
    assert!(stream.read(&mut buf).await.unwrap() > 0);
    // SETTINGS ACK, then GET / (HPACK: :method GET, :scheme http, :path /,
    // :authority a) with END_STREAM | END_HEADERS on stream 1.
    stream
        .write_all(b"\x00\x00\x00\x04\x01\x00\x00\x00\x00")
        .await
        .unwrap();
    stream
        .write_all(b"\x00\x00\x06\x01\x05\x00\x00\x00\x01\x82\x86\x84\x41\x01a")
        .await
        .unwrap();
    let (mut reader, mut writer) = stream.into_split();
    // Reads (and never acknowledges) whatever the server sends, until it
    // closes.
    let reading = tokio::spawn(async move { while let Ok(1..) = reader.read(&mut buf).await {} });
    let pinging = tokio::spawn(async move {
        while writer
            .write_all(b"\x00\x00\x08\x06\x00\x00\x00\x00\x00pingpong")
            .await
            .is_ok()
        {
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let asked = Instant::now();
    server.stop().await;
    let dropped = tokio::time::timeout(Duration::from_secs(1), reading).await;
    pinging.abort();
    assert!(
        dropped.is_ok(),
        "the peer is still connected {:?} after the shutdown",
        asked.elapsed()
    );
    assert!(
        asked.elapsed() < Duration::from_secs(3),
        "{:?}",
        asked.elapsed()
    );
}

/// A body that never comes over HTTP/2 (a POST's headers and no DATA, the
/// server's windows open) gets 408 after a period, through
/// `key_reads_body` as through a handler reading it, as over HTTP/1; a
/// body sent slowly, a DATA frame within each period, is read whole.
#[tokio::test]
async fn an_http2_body_that_never_comes_gets_408_through_key_reads_body() {
    use http_body_util::BodyExt;
    use std::sync::Arc;
    use suprnova::rate_limit::memory::InMemoryRateLimiter;
    use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig};

    type Paced = http_body_util::StreamBody<
        futures_util::stream::BoxStream<
            'static,
            Result<http_body::Frame<Bytes>, std::convert::Infallible>,
        >,
    >;
    /// `parts` of a body, each after 100 ms, or no part ever.
    fn paced(parts: Option<&'static [&'static str]>) -> Paced {
        use futures_util::StreamExt;
        let Some(parts) = parts else {
            return http_body_util::StreamBody::new(futures_util::stream::pending().boxed());
        };
        http_body_util::StreamBody::new(
            futures_util::stream::iter(parts)
                .then(|part| async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    Ok(http_body::Frame::data(Bytes::from_static(part.as_bytes())))
                })
                .boxed(),
        )
    }

    let driver: Arc<dyn RateLimiterDriver> = Arc::new(InMemoryRateLimiter::new());
    let router = Router::new()
        .post("/login", |req: Request| async move {
            let length = req.buffered_body().map_or(0, |body| body.len());
            HttpResponse::text(format!("{length} bytes"))
        })
        .middleware(
            RateLimitMiddleware::new(
                driver,
                SlidingWindowConfig::new(100, Duration::from_secs(60)),
                |req| format!("len:{}", req.buffered_body().map_or(0, |b| b.len())),
            )
            .key_reads_body(4096),
        )
        .post("/echo", |mut req: Request| async move {
            match req.bytes().await {
                Ok(body) => HttpResponse::text(format!("{} bytes", body.len())),
                Err(e) => e.to_response(),
            }
        });
    let server = TimedServer::start(router, PERIOD).await;
    let addr = server.addr;
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (sender, connection) = hyper::client::conn::http2::handshake::<_, _, Paced>(
        TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let ask = |path: &'static str, parts: Option<&'static [&'static str]>| {
        let mut sender = sender.clone();
        async move {
            let request = http::Request::post(format!("http://{addr}{path}"))
                .header("content-length", "20")
                .body(paced(parts))
                .unwrap();
            let started = Instant::now();
            let answer = tokio::time::timeout(Duration::from_secs(3), async {
                let response = sender.send_request(request).await?;
                let status = response.status().as_u16();
                let body = response.into_body().collect().await?.to_bytes();
                Ok::<_, hyper::Error>((status, String::from_utf8_lossy(&body).into_owned()))
            })
            .await;
            (answer, started.elapsed())
        }
    };

    for path in ["/login", "/echo"] {
        let (answer, waited) = ask(path, None).await;
        let Ok(Ok((status, body))) = answer else {
            panic!("{path}: no answer {waited:?} after a body that never came: {answer:?}");
        };
        assert_eq!(
            (status, body.as_str()),
            (408, "408 Request Timeout"),
            "{path}"
        );
        assert!(
            waited >= PERIOD && waited < 3 * PERIOD,
            "{path}: answered after {waited:?}"
        );
    }

    // 20 bytes, 2 every 100 ms: a second, over three periods.
    const SLOW: &[&str] = &["01", "23", "45", "67", "89", "ab", "cd", "ef", "gh", "ij"];
    for path in ["/login", "/echo"] {
        let (answer, waited) = ask(path, Some(SLOW)).await;
        let Ok(Ok((status, body))) = answer else {
            panic!("{path}: no answer to a slow body: {answer:?}");
        };
        assert_eq!((status, body.as_str()), (200, "20 bytes"), "{path}");
        assert!(waited > 3 * PERIOD, "{path}: read in {waited:?}");
    }
    server.stop().await;
}
