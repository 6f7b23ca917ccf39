//! The Redis conditional count beside the memory store's at every sign and
//! length and at the ends of a 64-bit integer; credentials in refused
//! Redis URLs; answers with no content
//! and several lengths over HTTP/1 and HTTP/2; an accept loop of one's own
//! over HTTP/2.
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use support::redis::{RedisServer, connect};
use suprnova::cache::{IncrementOutcome, MemoryStore, RedisStore, Store};

const PREFIX: &str = "edge:";

async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(server.url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

async fn set(conn: &mut redis::aio::MultiplexedConnection, key: &str, value: i64) {
    support::redis::set_for_a_minute(conn, &format!("{PREFIX}{key}"), value).await;
}

/// What the memory store decides for `start`, `amount` and `ceiling`.
async fn memory_outcome(start: Option<i64>, amount: i64, ceiling: i64) -> IncrementOutcome {
    let memory = MemoryStore::new();
    if let Some(start) = start {
        memory
            .put("k", &start.to_string(), Duration::from_secs(60))
            .await
            .unwrap();
    }
    memory
        .increment_if_below("k", 60, amount, ceiling)
        .await
        .unwrap()
}

fn cases() -> Vec<(Option<i64>, i64, i64)> {
    let p53: i64 = 1 << 53;
    let mut cases = Vec::new();
    let starts = [
        None,
        Some(0),
        Some(1),
        Some(-1),
        Some(9),
        Some(10),
        Some(-10),
        Some(p53 - 1),
        Some(p53),
        Some(p53 + 1),
        Some(-p53 - 1),
        Some(i64::MAX),
        Some(i64::MAX - 1),
        Some(i64::MIN + 1),
        Some(999_999_999_999_999_999),
        Some(1_000_000_000_000_000_000),
        Some(-999_999_999_999_999_999),
        Some(-1_000_000_000_000_000_000),
    ];
    let amounts = [0, 1, -1, 2, 10, -10, i64::MAX, i64::MIN + 1, p53];
    let ceilings = [
        0,
        1,
        -1,
        10,
        -10,
        p53,
        p53 + 1,
        i64::MAX,
        i64::MAX - 1,
        i64::MIN,
        1_000_000_000_000_000_000,
        -1_000_000_000_000_000_000,
    ];
    for start in starts {
        for amount in amounts {
            for ceiling in ceilings {
                // A sum below i64::MIN: see the test of its own below.
                if start.unwrap_or(0).checked_add(amount).is_none() && amount < 0 {
                    continue;
                }
                cases.push((start, amount, ceiling));
            }
        }
    }
    cases
}

/// Every sign and length of count, amount and ceiling: the Redis store
/// decides as the memory store does, exactly.
#[tokio::test]
async fn redis_conditional_count_decides_as_memory_at_every_sign_and_length() {
    let server = RedisServer::start();
    let store = RedisStore::new(connect(&server.url())).with_prefix(PREFIX);
    let mut conn = raw(&server).await;
    let mut wrong = Vec::new();
    for (i, (start, amount, ceiling)) in cases().into_iter().enumerate() {
        let key = format!("c{i}");
        if let Some(start) = start {
            set(&mut conn, &key, start).await;
        }
        let redis = store.increment_if_below(&key, 60, amount, ceiling).await;
        let memory = memory_outcome(start, amount, ceiling).await;
        match redis {
            Ok(outcome) if outcome == memory => {}
            other => wrong.push(format!(
                "start {start:?} amount {amount} ceiling {ceiling}: redis {other:?}, memory {memory:?}"
            )),
        }
    }
    assert!(
        wrong.is_empty(),
        "{} differ:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
}

#[tokio::test]
async fn redis_conditional_decrement_below_i64_min_is_refused_as_on_memory() {
    let server = RedisServer::start();
    let store = RedisStore::new(connect(&server.url())).with_prefix(PREFIX);
    let mut conn = raw(&server).await;
    let mut wrong = Vec::new();
    for (i, (start, amount, ceiling)) in [
        (i64::MIN, -1, 0),
        (i64::MIN, -1, i64::MAX),
        (i64::MIN + 1, -2, -5),
        (-5, i64::MIN, 0),
        (-1, i64::MIN, i64::MAX),
    ]
    .into_iter()
    .enumerate()
    {
        let key = format!("d{i}");
        set(&mut conn, &key, start).await;
        let memory = memory_outcome(Some(start), amount, ceiling).await;
        assert_eq!(
            memory,
            IncrementOutcome {
                counted: false,
                count: start
            }
        );
        let redis = store.increment_if_below(&key, 60, amount, ceiling).await;
        if !matches!(&redis, Ok(outcome) if *outcome == memory) {
            wrong.push(format!(
                "start {start} amount {amount} ceiling {ceiling}: redis {redis:?}, memory {memory:?}"
            ));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[tokio::test]
async fn own_accept_loop_answers_an_http2_head_without_content() {
    use std::convert::Infallible;
    use std::sync::Arc;

    use bytes::Bytes;
    use http_body_util::BodyExt;
    use http_body_util::Full;
    use hyper_util::rt::{TokioExecutor, TokioIo};
    use suprnova::server::handle_request_with_peer;
    use suprnova::{HttpResponse, Request, Router};

    let router = Arc::new(Router::new().get("/hi", |_request: Request| async {
        HttpResponse::text("hello")
    }));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepting = tokio::spawn(async move {
        loop {
            let (stream, peer) = listener.accept().await.unwrap();
            let router = Arc::clone(&router);
            tokio::spawn(async move {
                let service = hyper::service::service_fn(
                    move |request: http::Request<hyper::body::Incoming>| {
                        let router = Arc::clone(&router);
                        async move {
                            let answer = handle_request_with_peer(&router, request, peer).await;
                            Ok::<_, Infallible>(answer.into_http())
                        }
                    },
                );
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let mut seen = Vec::new();
    for method in ["GET", "HEAD"] {
        let request = http::Request::builder()
            .method(method)
            .uri(format!("http://{addr}/hi"))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let reply = tokio::time::timeout(Duration::from_secs(5), async {
            let response = sender
                .send_request(request)
                .await
                .map_err(|e| e.to_string())?;
            let status = response.status().as_u16();
            let length = response
                .headers()
                .get("content-length")
                .map(|v| v.to_str().unwrap().to_owned());
            let body = response
                .into_body()
                .collect()
                .await
                .map_err(|e| e.to_string())?
                .to_bytes();
            Ok::<_, String>((status, length, body.len()))
        })
        .await
        .expect("answered within 5 s");
        seen.push((method, reply));
    }
    accepting.abort();
    assert_eq!(
        seen,
        vec![
            ("GET", Ok((200, Some("5".to_owned()), 5))),
            ("HEAD", Ok((200, Some("5".to_owned()), 0))),
        ]
    );
}

#[test]
fn a_password_in_a_tcp_urls_query_is_hidden_whole_in_the_boot_refusal() {
    for pairs in [
        [
            ("APP_ENV", "local"),
            ("RATE_LIMIT_DRIVER", "redis"),
            (
                "RATE_LIMIT_REDIS_URL",
                "redis://10.0.0.2:6379/?password=admin@Sup3rS3cret",
            ),
        ],
        [
            ("APP_ENV", "local"),
            ("RATE_LIMIT_DRIVER", "redis"),
            (
                "RATE_LIMIT_REDIS_URL",
                "redis://10.0.0.1:6379,redis://10.0.0.2:6379/?password=admin@Sup3rS3cret",
            ),
        ],
        [
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            (
                "REDIS_URL",
                "redis://10.0.0.1:6379,redis://10.0.0.2:6379/?password=admin@Sup3rS3cret",
            ),
        ],
    ] {
        let refused = support::boot::refusal(&pairs);
        assert!(
            !refused.contains("Sup3rS3cret") && !refused.contains("admin"),
            "{refused}"
        );
    }
}

#[test]
fn redis_config_refusal_does_not_show_the_password() {
    use suprnova::redis_client::RedisConfig;

    for url in [
        "redis://:s3cret@cache.internal:0",
        "redis://app:s3cret@cache.internal:6379/-1",
        "redis://cache.internal:6379/?password=s3cret",
        "redis:/:s3cret@cache.internal:6379",
    ] {
        let refusal = RedisConfig::from_url(url).expect_err(url);
        let shown = format!("{refusal} {refusal:?}");
        assert!(!shown.contains("s3cret"), "{shown}");
    }
}

/// Sends `method path` over HTTP/2 (prior knowledge) and reads the answer:
/// status, its `content-length` values, and the content's length; the
/// client's error when the stream broke.
async fn h2_answer(
    addr: std::net::SocketAddr,
    method: &str,
    path: &str,
) -> Result<(u16, Vec<String>, usize), String> {
    use bytes::Bytes;
    use http_body_util::{BodyExt, Full};
    use hyper_util::rt::{TokioExecutor, TokioIo};

    let stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::handshake::<_, _, Full<Bytes>>(
        TokioExecutor::new(),
        TokioIo::new(stream),
    )
    .await
    .unwrap();
    tokio::spawn(connection);
    let request = http::Request::builder()
        .method(method)
        .uri(format!("http://{addr}{path}"))
        .body(Full::new(Bytes::new()))
        .unwrap();
    tokio::time::timeout(Duration::from_secs(5), async {
        let response = sender
            .send_request(request)
            .await
            .map_err(|e| format!("{e:?}"))?;
        let status = response.status().as_u16();
        let lengths = response
            .headers()
            .get_all("content-length")
            .iter()
            .map(|v| v.to_str().unwrap().to_owned())
            .collect();
        let body = response
            .into_body()
            .collect()
            .await
            .map_err(|e| format!("{e:?}"))?
            .to_bytes();
        Ok((status, lengths, body.len()))
    })
    .await
    .expect("answered within 5 s")
}

/// Sends raw HTTP/1.1 bytes and reads until the server closes (the request
/// asks it to), within 5 s.
async fn h1_raw(addr: std::net::SocketAddr, request: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(5), stream.read_to_end(&mut out)).await;
    String::from_utf8_lossy(&out).into_owned()
}

/// A handler's answer with no content that carries two `Content-Length`
/// values, `0` first.
fn two_lengths_route() -> suprnova::Router {
    use suprnova::{HttpResponse, Request, Router};

    Router::new().get("/two", |_request: Request| async {
        let mut answer = HttpResponse::new().header("Content-Length", "0");
        answer.headers_mut().append(
            http::header::CONTENT_LENGTH,
            http::HeaderValue::from_static("5"),
        );
        answer
    })
}

#[tokio::test]
async fn h2_an_empty_answer_with_a_second_length_is_answered_whole() {
    let server = support::http::TestServer::start(two_lengths_route()).await;
    let addr = server.addr();
    let get = h2_answer(addr, "GET", "/two").await;
    let head = h2_answer(addr, "HEAD", "/two").await;
    server.stop().await;
    assert_eq!(
        (get, head),
        (
            Ok((200, vec!["0".to_owned()], 0)),
            Ok((200, vec!["0".to_owned()], 0))
        )
    );
}

#[tokio::test]
async fn h1_head_of_an_empty_answer_carries_one_length() {
    let server = support::http::TestServer::start(two_lengths_route()).await;
    let addr = server.addr();
    let head = h1_raw(
        addr,
        "HEAD /two HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n",
    )
    .await;
    server.stop().await;
    let lengths: Vec<&str> = head
        .lines()
        .filter(|line| line.to_ascii_lowercase().starts_with("content-length:"))
        .collect();
    assert!(
        head.starts_with("HTTP/1.1 200"),
        "no answer to HEAD: {head:?}"
    );
    assert_eq!(lengths, vec!["content-length: 0"], "{head}");
}
