//! `RateLimitMiddleware` and `connections_per_ip` at their edges: a driver
//! that fails, key functions that panic or return nothing, bodies read by
//! the key and the handler, dual-stack peers, proxy chains, HTTP/1
//! keep-alive and HTTP/2 streams, panics and disconnects, stacked limits and
//! the exact headers of each answer.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use support::{ip, peer};

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::{TokioExecutor, TokioIo};
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::decision::Decision;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitError, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig,
};
use suprnova::server::{handle_request, handle_request_with_peer};
use suprnova::{HttpResponse, Request, Router, async_trait};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};

use support::clock_at;
use support::held::{Gate, entered, open_becomes};
use support::http::{Reply, TestServer};

const MINUTE: Duration = Duration::from_secs(60);

fn get(path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path).body(Full::default()).unwrap()
}

fn memory(clock: &FakeClock) -> Arc<dyn RateLimiterDriver> {
    Arc::new(InMemoryRateLimiter::with_clock(clock.shared()))
}

/// A driver whose backend never answers: every call fails with `error`.
#[derive(Debug)]
struct Failing {
    calls: AtomicUsize,
    error: fn() -> RateLimitError,
}

impl Failing {
    fn backend() -> Arc<Self> {
        Arc::new(Self {
            calls: AtomicUsize::new(0),
            error: || RateLimitError::Backend("connection refused".into()),
        })
    }

    fn timeout() -> Arc<Self> {
        Arc::new(Self {
            calls: AtomicUsize::new(0),
            error: || RateLimitError::Timeout(Duration::from_millis(250)),
        })
    }

    fn config() -> Arc<Self> {
        Arc::new(Self {
            calls: AtomicUsize::new(0),
            error: || RateLimitError::Config("window too long".into()),
        })
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }
}

#[async_trait]
impl RateLimiterDriver for Failing {
    async fn acquire(
        &self,
        _key: &str,
        _config: &SlidingWindowConfig,
    ) -> Result<Decision, RateLimitError> {
        self.calls.fetch_add(1, Ordering::SeqCst);
        Err((self.error)())
    }

    async fn retry_after(
        &self,
        _key: &str,
        _config: &SlidingWindowConfig,
    ) -> Result<Option<Duration>, RateLimitError> {
        Err((self.error)())
    }

    fn name(&self) -> &'static str {
        "failing"
    }
}

/// `GET /r` that counts its runs and answers `ok`.
fn counted_route(runs: &Arc<AtomicUsize>) -> Router {
    let runs = runs.clone();
    Router::new().get("/r", move |_req: Request| {
        runs.fetch_add(1, Ordering::SeqCst);
        async { HttpResponse::text("ok") }
    })
}

/// A limit of `config` on `driver` that counts every request in the
/// bucket `key`.
fn on_key(
    driver: &Arc<dyn RateLimiterDriver>,
    config: SlidingWindowConfig,
    key: &'static str,
) -> RateLimitMiddleware {
    RateLimitMiddleware::new(driver.clone(), config, move |_| key.to_owned())
}

fn no_rate_limit_headers(r: &HttpResponse) -> bool {
    r.header_str("x-ratelimit-limit").is_none()
        && r.header_str("x-ratelimit-remaining").is_none()
        && r.header_str("x-ratelimit-reset").is_none()
}

// ---------------------------------------------------------------------------
// The backend-error policy, with a driver that fails.

#[tokio::test]
async fn a_failing_driver_fails_open_by_default_with_no_headers() {
    for driver in [Failing::backend(), Failing::timeout()] {
        let runs = Arc::new(AtomicUsize::new(0));
        let router = counted_route(&runs).middleware(RateLimitMiddleware::new(
            driver.clone(),
            SlidingWindowConfig::new(1, MINUTE),
            |_req| "k".to_owned(),
        ));
        for n in 1..=3 {
            let r = handle_request_with_peer(&router, get("/r"), peer("192.0.2.1:1")).await;
            assert_eq!(r.status_code(), 200);
            assert_eq!(r.body_text(), "ok");
            assert!(no_rate_limit_headers(&r));
            assert_eq!(r.header_str("retry-after"), None);
            assert_eq!(runs.load(Ordering::SeqCst), n);
            assert_eq!(driver.calls(), n, "one backend call a request");
        }
        // Through the real server too.
        let server = TestServer::start(router).await;
        let reply = server.get("/r").await;
        assert_eq!(reply.status, 200);
        assert_eq!(reply.body, "ok");
        assert_eq!(reply.header("x-ratelimit-limit"), None);
    }
}

#[tokio::test]
async fn a_failing_driver_fails_closed_with_503_and_retry_after_1() {
    for driver in [Failing::backend(), Failing::timeout()] {
        let runs = Arc::new(AtomicUsize::new(0));
        let router = counted_route(&runs).middleware(
            RateLimitMiddleware::new(
                driver.clone(),
                SlidingWindowConfig::new(5, MINUTE),
                |_req| "k".to_owned(),
            )
            .on_backend_error(BackendErrorPolicy::FailClosed),
        );
        let r = handle_request_with_peer(&router, get("/r"), peer("192.0.2.1:1")).await;
        assert_eq!(r.status_code(), 503);
        assert_eq!(r.body_text(), "503 Service Unavailable");
        assert_eq!(r.header_str("retry-after"), Some("1"));
        assert!(no_rate_limit_headers(&r));
        assert_eq!(runs.load(Ordering::SeqCst), 0);

        let server = TestServer::start(router).await;
        let reply = server.get("/r").await;
        assert_eq!(reply.status, 503);
        assert_eq!(reply.body, "503 Service Unavailable");
        assert_eq!(reply.header("retry-after"), Some("1"));
        assert_eq!(reply.header("x-ratelimit-remaining"), None);
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }
}

#[tokio::test]
async fn a_driver_that_rejects_the_limit_answers_500_under_either_policy() {
    for policy in [BackendErrorPolicy::FailOpen, BackendErrorPolicy::FailClosed] {
        let runs = Arc::new(AtomicUsize::new(0));
        let router = counted_route(&runs).middleware(
            RateLimitMiddleware::new(
                Failing::config(),
                SlidingWindowConfig::new(5, MINUTE),
                |_| "k".to_owned(),
            )
            .on_backend_error(policy),
        );
        let r = handle_request(&router, get("/r")).await;
        assert_eq!(r.status_code(), 500, "{policy:?}");
        assert_eq!(r.body_text(), "500 Internal Server Error");
        assert_eq!(runs.load(Ordering::SeqCst), 0);
    }
}

// ---------------------------------------------------------------------------
// Key functions.

#[tokio::test]
async fn a_key_function_that_panics_answers_500_and_the_server_serves_on() {
    let clock = clock_at(9, 0, 0);
    let runs = Arc::new(AtomicUsize::new(0));
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = counted_route(&runs)
        .middleware(cap.clone())
        .middleware(RateLimitMiddleware::new(
            memory(&clock),
            SlidingWindowConfig::new(5, MINUTE),
            |req| {
                if req.query_param("boom").is_some() {
                    panic!("no key for this request");
                }
                "k".to_owned()
            },
        ));
    let r = handle_request_with_peer(&router, get("/r?boom=1"), peer("192.0.2.3:1")).await;
    assert_eq!(r.status_code(), 500);
    assert_eq!(r.body_text(), "500 Internal Server Error");
    assert_eq!(
        cap.open_for(ip("192.0.2.3")),
        0,
        "the panic gave the place back"
    );

    let server = TestServer::start(router).await;
    let reply = server.get("/r?boom=1").await;
    assert_eq!(reply.status, 500);
    assert_eq!(cap.open_for(ip("127.0.0.1")), 0);
    let reply = server.get("/r").await;
    assert_eq!(reply.status, 200);
    // The panicking requests counted nothing.
    assert_eq!(reply.header("x-ratelimit-remaining"), Some("4"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn an_empty_key_is_still_a_bucket_and_limits() {
    let clock = clock_at(9, 0, 0);
    let runs = Arc::new(AtomicUsize::new(0));
    let router = counted_route(&runs).middleware(RateLimitMiddleware::new(
        memory(&clock),
        SlidingWindowConfig::new(2, MINUTE),
        |_req| String::new(),
    ));
    let mut statuses = Vec::new();
    for from in ["192.0.2.1:1", "192.0.2.2:1", "[2001:db8::1]:1"] {
        statuses.push(
            handle_request_with_peer(&router, get("/r"), peer(from))
                .await
                .status_code(),
        );
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

// ---------------------------------------------------------------------------
// only_when and key_reads_body.

#[tokio::test]
async fn only_when_reads_the_buffered_body_and_skipped_requests_count_nothing() {
    let clock = clock_at(9, 0, 0);
    let router = Router::new()
        .post("/p", |mut req: Request| async move {
            let body = req.text().await.unwrap();
            HttpResponse::text(body)
        })
        .middleware(
            RateLimitMiddleware::new(memory(&clock), SlidingWindowConfig::new(1, MINUTE), |_| {
                "one".to_owned()
            })
            .key_reads_body(64)
            .only_when(|req| {
                req.buffered_body()
                    .is_some_and(|b| b.starts_with(b"limited"))
            }),
        );
    let server = TestServer::start(router).await;
    let post = |body: &'static str| {
        http::Request::post(server.url("/p"))
            .body(Full::new(Bytes::from_static(body.as_bytes())))
            .unwrap()
    };
    for _ in 0..3 {
        let r = server.send(post("free")).await;
        assert_eq!((r.status, r.body.as_str()), (200, "free"));
        assert_eq!(r.header("x-ratelimit-limit"), None);
    }
    let r = server.send(post("limited 1")).await;
    assert_eq!((r.status, r.body.as_str()), (200, "limited 1"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    let r = server.send(post("limited 2")).await;
    assert_eq!(r.status, 429);
    assert_eq!(r.body, "429 Too Many Requests");
}

#[tokio::test]
async fn a_body_is_read_by_the_key_and_again_by_the_handler_over_the_wire() {
    let clock = clock_at(9, 0, 0);
    let seen_by_key = Arc::new(std::sync::Mutex::new(Vec::<Bytes>::new()));
    let seen = seen_by_key.clone();
    let router = Router::new()
        .post("/twice", |mut req: Request| async move {
            let first = req.bytes().await.unwrap();
            let second = req.text().await.unwrap();
            assert_eq!(first, second.as_bytes());
            let small = req.body_bytes(4).await;
            let owned = req.into_bytes(1 << 20).await.unwrap();
            HttpResponse::text(format!(
                "{}|{}|{}",
                second,
                small.map_or_else(|e| e.to_response().status_code(), |_| 0),
                owned.len()
            ))
        })
        .middleware(
            RateLimitMiddleware::new(
                memory(&clock),
                SlidingWindowConfig::new(10, MINUTE),
                move |req| {
                    seen.lock()
                        .unwrap()
                        .push(req.buffered_body().cloned().unwrap_or_default());
                    "body".to_owned()
                },
            )
            .key_reads_body(32),
        );
    let server = TestServer::start(router).await;
    // Chunked (no Content-Length) and with a Content-Length.
    let addr = server.addr();
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream
        .write_all(
            b"POST /twice HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        )
        .await
        .unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(reply.ends_with("\r\n\r\nhello world|413|11"), "{reply}");
    let sized = server
        .send(
            http::Request::post(server.url("/twice"))
                .body(Full::new(Bytes::from_static(b"12345")))
                .unwrap(),
        )
        .await;
    assert_eq!(sized.status, 200);
    assert_eq!(sized.body, "12345|413|5");
    assert_eq!(sized.header("x-ratelimit-remaining"), Some("8"));
    assert_eq!(
        *seen_by_key.lock().unwrap(),
        [
            Bytes::from_static(b"hello world"),
            Bytes::from_static(b"12345")
        ]
    );
}

#[tokio::test]
async fn a_body_over_the_cap_gets_413_and_is_not_counted() {
    let clock = clock_at(9, 0, 0);
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let router = Router::new()
        .post("/p", move |_req: Request| {
            counter.fetch_add(1, Ordering::SeqCst);
            async { HttpResponse::text("ok") }
        })
        .middleware(
            RateLimitMiddleware::new(memory(&clock), SlidingWindowConfig::new(3, MINUTE), |_| {
                "p".to_owned()
            })
            .key_reads_body(8),
        );
    let server = TestServer::start(router).await;
    // Announced over the cap, and chunked over the cap.
    let r = server
        .send(
            http::Request::post(server.url("/p"))
                .body(Full::new(Bytes::from_static(b"123456789")))
                .unwrap(),
        )
        .await;
    assert_eq!((r.status, r.body.as_str()), (413, "413 Payload Too Large"));
    assert_eq!(r.header("x-ratelimit-limit"), None);
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(b"POST /p HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\n5\r\n12345\r\n5\r\n67890\r\n0\r\n\r\n")
        .await
        .unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut reply))
        .await
        .unwrap()
        .unwrap();
    assert!(reply.starts_with("HTTP/1.1 413 "), "{reply}");
    assert!(reply.ends_with("\r\n\r\n413 Payload Too Large"), "{reply}");
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    // Neither refusal spent the bucket.
    let r = server
        .send(
            http::Request::post(server.url("/p"))
                .body(Full::new(Bytes::from_static(b"1234")))
                .unwrap(),
        )
        .await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));
}

// ---------------------------------------------------------------------------
// Addresses: dual-stack peers, IPv6 loopback, proxy chains.

/// A server on `[::]:0`, where IPv4 clients arrive as `::ffff:a.b.c.d`.
async fn dual_stack(router: Router) -> (SocketAddr, tokio::sync::oneshot::Sender<()>) {
    let server = suprnova::server::bind("[::]:0").await.unwrap();
    let port = server.local_addr().unwrap().port();
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let app = App::current();
    tokio::spawn(app.scope(async move {
        let _ = server
            .serve_with_shutdown(router, async {
                let _ = rx.await;
            })
            .await;
    }));
    (SocketAddr::from(([127, 0, 0, 1], port)), tx)
}

/// One `GET path` on a connection of its own from `local` to `to`
/// (`Connection: close`); the whole reply as text.
async fn raw_get(local: IpAddr, to: SocketAddr, path: &str) -> String {
    let socket = if local.is_ipv4() {
        TcpSocket::new_v4().unwrap()
    } else {
        TcpSocket::new_v6().unwrap()
    };
    socket.bind(SocketAddr::new(local, 0)).unwrap();
    let mut stream = socket.connect(to).await.unwrap();
    stream
        .write_all(
            format!("GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").as_bytes(),
        )
        .await
        .unwrap();
    let mut reply = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut reply))
        .await
        .expect("no reply in time")
        .unwrap();
    reply
}

fn status_of(reply: &str) -> u16 {
    reply[9..12].parse().unwrap()
}

fn header_of<'a>(reply: &'a str, name: &str) -> Option<&'a str> {
    let head = reply.split("\r\n\r\n").next().unwrap();
    head.lines().skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

#[tokio::test]
async fn on_a_dual_stack_listener_ipv4_clients_count_as_ipv4_and_ipv6_by_64() {
    let clock = clock_at(9, 0, 0);
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(memory(&clock));
    app.scope(async {
        let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = seen.clone();
        let router = Router::new()
            .get("/r", move |req: Request| {
                record.lock().unwrap().push(req.ip().unwrap_or_default());
                async { HttpResponse::text("ok") }
            })
            .middleware(RateLimitMiddleware::ip_based(2, MINUTE));
        let (v4, _stop) = dual_stack(router).await;
        let v6 = SocketAddr::from((std::net::Ipv6Addr::LOCALHOST, v4.port()));

        let one = ip("127.0.0.1");
        let two = ip("127.0.0.2");
        let r = raw_get(one, v4, "/r").await;
        assert_eq!(status_of(&r), 200, "{r}");
        assert_eq!(header_of(&r, "x-ratelimit-remaining"), Some("1"));
        assert_eq!(status_of(&raw_get(one, v4, "/r").await), 200);
        let r = raw_get(one, v4, "/r").await;
        assert_eq!(status_of(&r), 429, "{r}");
        assert!(r.ends_with("\r\n\r\n429 Too Many Requests"), "{r}");
        // Another IPv4 address is another bucket, though both arrive as
        // addresses of one IPv6 /64 (::ffff:0:0/96).
        let r = raw_get(two, v4, "/r").await;
        assert_eq!(status_of(&r), 200, "{r}");
        assert_eq!(header_of(&r, "x-ratelimit-remaining"), Some("1"));
        // ::1 is a client of its own.
        let r = raw_get(ip("::1"), v6, "/r").await;
        assert_eq!(status_of(&r), 200, "{r}");
        assert_eq!(header_of(&r, "x-ratelimit-remaining"), Some("1"));
        assert_eq!(
            *seen.lock().unwrap(),
            ["127.0.0.1", "127.0.0.1", "127.0.0.2", "::1"]
        );
    })
    .await;
}

#[tokio::test]
async fn connections_per_ip_on_a_dual_stack_listener_counts_ipv4_clients_apart() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let (gate, mut entered_rx) = Gate::new();
    let (v4, _stop) = dual_stack(gate.router("/slow", &cap)).await;
    let held = tokio::spawn(raw_get(ip("127.0.0.1"), v4, "/slow"));
    entered(&mut entered_rx).await;
    assert_eq!(cap.open_for(ip("127.0.0.1")), 1);
    assert_eq!(cap.open_for(ip("::ffff:127.0.0.1")), 1);
    let refused = raw_get(ip("127.0.0.1"), v4, "/slow").await;
    assert_eq!(status_of(&refused), 429);
    assert_eq!(header_of(&refused, "retry-after"), None);
    let other = tokio::spawn(raw_get(ip("127.0.0.3"), v4, "/slow"));
    entered(&mut entered_rx).await;
    assert_eq!(cap.open_for(ip("127.0.0.3")), 1);
    gate.release(2);
    assert_eq!(status_of(&held.await.unwrap()), 200);
    assert_eq!(status_of(&other.await.unwrap()), 200);
    assert_eq!(cap.addresses_open(), 0);
}

#[tokio::test]
async fn ip_based_walks_a_trusted_proxy_chain_and_groups_forwarded_ipv6_by_64() {
    let clock = clock_at(9, 0, 0);
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(memory(&clock));
    app.install(Arc::new(
        "127.0.0.1,10.0.0.0/8,2001:db8:ffff::/48"
            .parse::<TrustedProxies>()
            .unwrap(),
    ));
    app.scope(async {
        let router = Router::new()
            .get("/r", |req: Request| async move {
                HttpResponse::text(req.ip().unwrap_or_default())
            })
            .middleware(RateLimitMiddleware::ip_based(1, MINUTE));
        let server = TestServer::start(router).await;
        let via = |xff: &str| {
            http::Request::get(server.url("/r"))
                .header("X-Forwarded-For", xff)
                .body(Full::default())
                .unwrap()
        };
        let r = server.send(via("203.0.113.9, 10.1.1.1, 10.2.2.2")).await;
        assert_eq!((r.status, r.body.as_str()), (200, "203.0.113.9"));
        let r = server
            .send(via("198.51.100.1, 203.0.113.9:4711, 10.3.3.3"))
            .await;
        assert_eq!(r.status, 429, "the same client through another hop");
        // A mapped address in the header counts as the IPv4 client.
        let r = server.send(via("::ffff:203.0.113.9")).await;
        assert_eq!(r.status, 429);
        // An IPv6 client counts with its /64, through an IPv6 proxy hop.
        let r = server
            .send(via("2001:db8:1:2::1, [2001:db8:ffff:1::5]:443"))
            .await;
        assert_eq!((r.status, r.body.as_str()), (200, "2001:db8:1:2::1"));
        let r = server.send(via("2001:db8:1:2:ffff::9")).await;
        assert_eq!(r.status, 429, "same /64");
        let r = server.send(via("2001:db8:1:3::1")).await;
        assert_eq!(r.status, 200, "next /64");
        // Every hop trusted: the leftmost proxy is the client.
        let r = server.send(via("10.9.9.9, 10.8.8.8")).await;
        assert_eq!((r.status, r.body.as_str()), (200, "10.9.9.9"));
        // A peer nobody trusts is counted by itself, whatever it writes.
        let r = server.send_from(ip("127.0.0.5"), via("192.0.2.200")).await;
        assert_eq!((r.status, r.body.as_str()), (200, "127.0.0.5"));
        let r = server.send_from(ip("127.0.0.5"), via("192.0.2.201")).await;
        assert_eq!(r.status, 429);
    })
    .await;
}

// ---------------------------------------------------------------------------
// connections_per_ip: what one connection is, and when places come back.

#[tokio::test]
async fn one_keep_alive_connection_makes_many_requests_under_a_cap_of_one() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = Router::new()
        .get("/", |_req: Request| async { HttpResponse::text("hi") })
        .middleware(cap.clone());
    let server = TestServer::start(router).await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    // Fifty requests one after the other, then eight pipelined at once.
    for n in 0..50 {
        stream
            .write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        let mut buf = vec![0; 4096];
        let mut got = String::new();
        while !got.ends_with("\r\n\r\nhi") {
            let read = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf))
                .await
                .unwrap()
                .unwrap();
            assert!(read > 0, "closed after {n} requests");
            got.push_str(std::str::from_utf8(&buf[..read]).unwrap());
        }
        assert!(got.starts_with("HTTP/1.1 200 OK\r\n"), "request {n}: {got}");
    }
    stream
        .write_all(&b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".repeat(7))
        .await
        .unwrap();
    stream
        .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut rest = String::new();
    tokio::time::timeout(Duration::from_secs(10), stream.read_to_string(&mut rest))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(rest.matches("HTTP/1.1 200 OK").count(), 8, "{rest}");
    assert_eq!(rest.matches("HTTP/1.1 429").count(), 0, "{rest}");
    assert_eq!(cap.addresses_open(), 0);
}

/// An HTTP/2 client on one connection.
async fn h2_client(addr: SocketAddr) -> hyper::client::conn::http2::SendRequest<Full<Bytes>> {
    let stream = TcpStream::connect(addr).await.unwrap();
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender
}

fn h2_get(addr: SocketAddr, path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(format!("http://{addr}{path}"))
        .body(Full::default())
        .unwrap()
}

#[tokio::test]
async fn each_http2_stream_in_flight_counts_and_gives_its_place_back() {
    let cap = RateLimitMiddleware::connections_per_ip(2);
    let (gate, mut rx) = Gate::new();
    let server = TestServer::start(gate.router("/slow", &cap)).await;
    let addr = server.addr();
    let mut sender = h2_client(addr).await;
    sender.ready().await.unwrap();

    let mut held = Vec::new();
    for _ in 0..2 {
        let fut = sender.send_request(h2_get(addr, "/slow"));
        held.push(tokio::spawn(fut));
        entered(&mut rx).await;
    }
    assert_eq!(cap.open_for(ip("127.0.0.1")), 2);
    // A third stream on the same connection is over the cap.
    let third = sender.send_request(h2_get(addr, "/slow")).await.unwrap();
    let third = Reply::read(third).await;
    assert_eq!(third.status, 429);
    assert_eq!(third.body, "429 Too Many Requests");
    assert_eq!(third.header("retry-after"), None);

    gate.release(2);
    for task in held {
        let reply = Reply::read(task.await.unwrap().unwrap()).await;
        assert_eq!(reply.status, 200);
    }
    assert_eq!(cap.open_for(ip("127.0.0.1")), 0);
    // Many streams one after the other on the same connection.
    gate.release(20);
    for _ in 0..20 {
        let reply = Reply::read(sender.send_request(h2_get(addr, "/slow")).await.unwrap()).await;
        assert_eq!(reply.status, 200);
    }
    assert_eq!(cap.addresses_open(), 0);
}

#[tokio::test]
async fn a_cancelled_http2_stream_gives_its_place_back() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let (gate, mut rx) = Gate::new();
    let server = TestServer::start(gate.router("/slow", &cap)).await;
    let addr = server.addr();
    let mut sender = h2_client(addr).await;
    sender.ready().await.unwrap();
    let pending = tokio::spawn(sender.send_request(h2_get(addr, "/slow")));
    entered(&mut rx).await;
    assert_eq!(cap.open_for(ip("127.0.0.1")), 1);
    // Dropping the response future resets the stream.
    pending.abort();
    open_becomes(&cap, ip("127.0.0.1"), 0).await;
    gate.release(1);
    let reply = Reply::read(sender.send_request(h2_get(addr, "/slow")).await.unwrap()).await;
    assert_eq!(reply.status, 200);
}

#[tokio::test]
async fn a_client_that_disconnects_mid_request_gives_its_place_back() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let (gate, mut rx) = Gate::new();
    let server = TestServer::start(gate.router("/slow", &cap)).await;
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream
        .write_all(b"GET /slow HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    entered(&mut rx).await;
    assert_eq!(cap.open_for(ip("127.0.0.1")), 1);
    drop(stream);
    open_becomes(&cap, ip("127.0.0.1"), 0).await;
    gate.release(1);
    assert_eq!(server.get("/slow").await.status, 200);
}

#[tokio::test]
async fn a_handler_that_panics_gives_its_place_back() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = Router::new()
        .get("/boom", |req: Request| async move {
            let _held = req;
            tokio::task::yield_now().await;
            if _held.path() == "/boom" {
                panic!("the handler failed");
            }
            HttpResponse::text("never")
        })
        .get(
            "/sync-boom",
            |_req: Request| -> std::future::Ready<HttpResponse> {
                panic!("failed before its future")
            },
        )
        .middleware(cap.clone());
    for path in ["/boom", "/sync-boom"] {
        let r = handle_request_with_peer(&router, get(path), peer("192.0.2.4:1")).await;
        assert_eq!(r.status_code(), 500, "{path}");
        assert_eq!(cap.open_for(ip("192.0.2.4")), 0, "{path}");
    }
    let server = TestServer::start(router).await;
    for path in ["/boom", "/sync-boom", "/boom"] {
        assert_eq!(server.get(path).await.status, 500);
        assert_eq!(cap.open_for(ip("127.0.0.1")), 0, "{path}");
    }
}

/// The API reference: "The place is given back when the handler drops or
/// consumes the request, and reading the body consumes it." A limiter that
/// reads the body for its key, between the cap and the handler, buffers it
/// before the handler runs: the place stays taken until the handler reads
/// the body itself.
#[tokio::test]
async fn the_handlers_reading_of_the_body_gives_the_place_back() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let (gate, mut rx) = Gate::new();
    let handler_gate = gate.clone();
    let router = Router::new()
        .post("/upload", move |mut req: Request| {
            let gate = handler_gate.clone();
            async move {
                let _ = gate.entered.send(());
                gate.release.acquire().await.unwrap().forget();
                let body = req.bytes().await.unwrap();
                let _ = gate.entered.send(());
                gate.release.acquire().await.unwrap().forget();
                HttpResponse::text(format!("{} bytes", body.len()))
            }
        })
        .middleware(cap.clone())
        .middleware(RateLimitMiddleware::ip_based(100, Duration::from_secs(60)).key_reads_body(64));
    let router = Arc::new(router);
    let upload = tokio::spawn({
        let router = router.clone();
        async move {
            let req = http::Request::post("/upload")
                .body(Full::new(Bytes::from_static(b"12345")))
                .unwrap();
            handle_request_with_peer(&router, req, peer("192.0.2.9:1")).await
        }
    });
    entered(&mut rx).await;
    let before_reading = cap.open_for(ip("192.0.2.9"));
    gate.release(1);
    entered(&mut rx).await;
    let after_reading = cap.open_for(ip("192.0.2.9"));
    gate.release(1);
    assert_eq!(upload.await.unwrap().body_text(), "5 bytes");
    assert_eq!(
        (before_reading, after_reading),
        (1, 0),
        "places taken before and after the handler read the body"
    );
}

#[tokio::test]
async fn a_thousand_connections_opened_and_closed_leave_no_place_taken() {
    let cap = RateLimitMiddleware::connections_per_ip(3);
    let router = Router::new()
        .get("/", |_req: Request| async { HttpResponse::text("hi") })
        .post("/read", |mut req: Request| async move {
            match req.bytes().await {
                Ok(b) => HttpResponse::text(format!("{}", b.len())),
                Err(e) => e.to_response(),
            }
        })
        .middleware(cap.clone());
    let server = TestServer::start(router).await;
    let addr = server.addr();
    let started = Instant::now();
    for n in 0..1000 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        match n % 4 {
            // A whole request, its answer read.
            0 | 1 => {
                stream
                    .write_all(b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                    .await
                    .unwrap();
                let mut reply = String::new();
                tokio::time::timeout(Duration::from_secs(5), stream.read_to_string(&mut reply))
                    .await
                    .unwrap()
                    .unwrap();
                assert!(reply.starts_with("HTTP/1.1 200 OK"), "{n}: {reply}");
            }
            // A body cut off half way.
            2 => {
                stream
                    .write_all(b"POST /read HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nabc")
                    .await
                    .unwrap();
            }
            // Half a request head.
            _ => {
                stream.write_all(b"GET / HTTP/1.1\r\nHo").await.unwrap();
            }
        }
        drop(stream);
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "too slow at {n}"
        );
    }
    open_becomes(&cap, ip("127.0.0.1"), 0).await;
    assert_eq!(cap.addresses_open(), 0);
    // And the cap still admits its three.
    assert_eq!(server.get("/").await.status, 200);
}

// ---------------------------------------------------------------------------
// Headers.

#[tokio::test]
async fn the_exact_headers_of_an_admission_and_of_a_refusal_over_the_wire() {
    // 09:00:00.250: the reset falls inside a second.
    let clock = clock_at(9, 0, 0);
    clock.advance(Duration::from_millis(250));
    let router = Router::new()
        .get("/r", |_req: Request| async { HttpResponse::text("ok") })
        .middleware(RateLimitMiddleware::new(
            memory(&clock),
            SlidingWindowConfig::new(2, MINUTE),
            |_| "h".to_owned(),
        ));
    let server = TestServer::start(router).await;
    let r = server.get("/r").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("1"));
    assert_eq!(r.header("retry-after"), None);
    assert_eq!(r.header("x-ratelimit-reset"), None);
    clock.advance(Duration::from_secs(20));
    assert_eq!(
        server.get("/r").await.header("x-ratelimit-remaining"),
        Some("0")
    );

    // Exactly 40 s to wait: 40, not 41.
    let r = server.get("/r").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.body, "429 Too Many Requests");
    assert_eq!(r.header("x-ratelimit-limit"), Some("2"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(r.header("retry-after"), Some("40"));
    // The first hit leaves at 09:01:00.250: the next whole second.
    let nine = 1_767_258_000_i64;
    assert_eq!(
        r.header("x-ratelimit-reset"),
        Some(&*(nine + 61).to_string())
    );

    clock.advance(Duration::from_millis(1));
    let r = server.get("/r").await;
    assert_eq!(r.header("retry-after"), Some("40"), "39.999 s rounds up");
    clock.advance(Duration::from_millis(39_998));
    let r = server.get("/r").await;
    assert_eq!(r.header("retry-after"), Some("1"), "1 ms rounds up to 1");
    assert_eq!(
        r.header("x-ratelimit-reset"),
        Some(&*(nine + 61).to_string())
    );
    clock.advance(Duration::from_millis(1));
    let r = server.get("/r").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
}

#[tokio::test]
async fn a_limit_of_zero_refuses_with_a_whole_window() {
    let clock = clock_at(9, 0, 0);
    let runs = Arc::new(AtomicUsize::new(0));
    let router = counted_route(&runs).middleware(RateLimitMiddleware::new(
        memory(&clock),
        SlidingWindowConfig::new(0, Duration::from_millis(1500)),
        |_| "z".to_owned(),
    ));
    let r = handle_request_with_peer(&router, get("/r"), peer("192.0.2.1:1")).await;
    assert_eq!(r.status_code(), 429);
    assert_eq!(r.header_str("x-ratelimit-limit"), Some("0"));
    assert_eq!(r.header_str("x-ratelimit-remaining"), Some("0"));
    assert_eq!(r.header_str("retry-after"), Some("2"));
    assert_eq!(r.header_str("x-ratelimit-reset"), Some("1767258002"));
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

/// Outer `a` (5 a minute on one key) and inner `b` (3 a minute on
/// another): the pair is the one with the fewest left; a refusal by either
/// carries that limit's headers.
#[tokio::test]
async fn stacked_limits_report_the_one_with_the_fewest_left() {
    let clock = clock_at(9, 0, 0);
    let driver = memory(&clock);
    let runs = Arc::new(AtomicUsize::new(0));
    let router = counted_route(&runs)
        .middleware(on_key(
            &driver,
            SlidingWindowConfig::new(5, MINUTE),
            "outer",
        ))
        .middleware(RateLimitMiddleware::new(
            driver.clone(),
            SlidingWindowConfig::new(3, Duration::from_secs(10)),
            |req| format!("inner:{}", req.query_param("who").unwrap_or_default()),
        ));
    let server = TestServer::start(router).await;
    let pair = |r: &Reply| {
        (
            r.status,
            r.header("x-ratelimit-limit").map(str::to_owned),
            r.header("x-ratelimit-remaining").map(str::to_owned),
            r.header("retry-after").map(str::to_owned),
        )
    };
    let s = |v: &str| Some(v.to_owned());
    // outer 4 left, inner 2: inner's.
    assert_eq!(
        pair(&server.get("/r?who=a").await),
        (200, s("3"), s("2"), None)
    );
    // outer 3, inner 1.
    assert_eq!(
        pair(&server.get("/r?who=a").await),
        (200, s("3"), s("1"), None)
    );
    // outer 2, inner (b) 2: a tie keeps the inner's.
    assert_eq!(
        pair(&server.get("/r?who=b").await),
        (200, s("3"), s("2"), None)
    );
    // outer 1, inner (c) 2: outer's.
    assert_eq!(
        pair(&server.get("/r?who=c").await),
        (200, s("5"), s("1"), None)
    );
    // outer 0, inner (a) 0.
    assert_eq!(
        pair(&server.get("/r?who=a").await),
        (200, s("3"), s("0"), None)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 5);
    // The outer refuses: the inner never runs, its headers are the outer's.
    let r = server.get("/r?who=d").await;
    assert_eq!(pair(&r), (429, s("5"), s("0"), s("60")));
    assert_eq!(r.header("x-ratelimit-reset"), Some("1767258060"));

    // 09:01:00: every hit of both limits has left its window.
    clock.advance(MINUTE);
    for left in ["2", "1", "0"] {
        assert_eq!(
            pair(&server.get("/r?who=z").await),
            (200, s("3"), s(left), None)
        );
    }
    // The inner refuses while the outer admits (1 left): the inner's
    // refusal whole.
    let r = server.get("/r?who=z").await;
    assert_eq!(pair(&r), (429, s("3"), s("0"), s("10")));
    assert_eq!(r.header("x-ratelimit-reset"), Some("1767258070"));
    // That refusal was counted by the outer limit: it has none left now.
    assert_eq!(
        pair(&server.get("/r?who=y").await),
        (200, s("5"), s("0"), None)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 9);
}

#[tokio::test]
async fn an_inner_refusal_carries_the_inner_headers_whole() {
    let clock = clock_at(9, 0, 0);
    let driver = memory(&clock);
    let runs = Arc::new(AtomicUsize::new(0));
    let router = counted_route(&runs)
        .middleware(on_key(
            &driver,
            SlidingWindowConfig::new(100, MINUTE),
            "wide",
        ))
        .middleware(on_key(
            &driver,
            SlidingWindowConfig::new(1, Duration::from_millis(2500)),
            "tight",
        ));
    let server = TestServer::start(router).await;
    let r = server.get("/r").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-limit"), Some("1"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    let r = server.get("/r").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.body, "429 Too Many Requests");
    assert_eq!(r.header("x-ratelimit-limit"), Some("1"));
    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    assert_eq!(r.header("retry-after"), Some("3"));
    assert_eq!(r.header("x-ratelimit-reset"), Some("1767258003"));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    clock.advance(Duration::from_secs(3));
    let r = server.get("/r").await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-limit"), Some("1"));
    // The wide bucket counted all three, the refused one too.
    let wide_only = counted_route(&runs).middleware(on_key(
        &driver,
        SlidingWindowConfig::new(100, MINUTE),
        "wide",
    ));
    let r = handle_request(&wide_only, get("/r")).await;
    assert_eq!(r.header_str("x-ratelimit-remaining"), Some("96"));
}

#[tokio::test]
async fn a_connection_cap_refusal_inside_a_limit_carries_no_retry_after() {
    let clock = clock_at(9, 0, 0);
    let cap = RateLimitMiddleware::connections_per_ip(0);
    let router = Router::new()
        .get("/r", |_req: Request| async { HttpResponse::text("ok") })
        .middleware(RateLimitMiddleware::new(
            memory(&clock),
            SlidingWindowConfig::new(10, MINUTE),
            |_| "k".to_owned(),
        ))
        .middleware(cap.clone());
    let server = TestServer::start(router).await;
    let r = server.get("/r").await;
    assert_eq!(r.status, 429);
    assert_eq!(r.body, "429 Too Many Requests");
    assert_eq!(r.header("retry-after"), None);
    assert_eq!(r.header("x-ratelimit-reset"), None);
    // The admitting limit outside writes its pair on the cap's refusal.
    assert_eq!(r.header("x-ratelimit-remaining"), Some("9"));
}

#[tokio::test]
async fn an_http2_connection_that_drops_with_streams_in_flight_gives_every_place_back() {
    let cap = RateLimitMiddleware::connections_per_ip(3);
    let (gate, mut rx) = Gate::new();
    let server = TestServer::start(gate.router("/slow", &cap)).await;
    let addr = server.addr();
    let stream = TcpStream::connect(addr).await.unwrap();
    // A second handle on the same socket, to cut it under the client.
    let std_stream = stream.into_std().unwrap();
    let cutter = std_stream.try_clone().unwrap();
    let stream = TcpStream::from_std(std_stream).unwrap();
    let (mut sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(stream))
            .await
            .unwrap();
    tokio::spawn(connection);
    sender.ready().await.unwrap();
    let mut pending = Vec::new();
    for _ in 0..3 {
        pending.push(tokio::spawn(sender.send_request(h2_get(addr, "/slow"))));
        entered(&mut rx).await;
    }
    assert_eq!(cap.open_for(ip("127.0.0.1")), 3);
    // The socket closes under the streams.
    cutter.shutdown(std::net::Shutdown::Both).unwrap();
    open_becomes(&cap, ip("127.0.0.1"), 0).await;
    for task in pending {
        let _ = task.await;
    }
    gate.release(1);
    assert_eq!(server.get("/slow").await.status, 200);
}

#[tokio::test]
async fn an_idle_kept_alive_connection_holds_no_place() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = Router::new()
        .get("/", |_req: Request| async { HttpResponse::text("hi") })
        .middleware(cap.clone());
    let server = TestServer::start(router).await;
    let mut idle = TcpStream::connect(server.addr()).await.unwrap();
    idle.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        .await
        .unwrap();
    let mut buf = vec![0; 4096];
    let mut got = String::new();
    while !got.ends_with("\r\n\r\nhi") {
        let n = tokio::time::timeout(Duration::from_secs(5), idle.read(&mut buf))
            .await
            .unwrap()
            .unwrap();
        assert!(n > 0);
        got.push_str(std::str::from_utf8(&buf[..n]).unwrap());
    }
    assert_eq!(cap.open_for(ip("127.0.0.1")), 0);
    // Another connection from the same address is served beside it.
    assert_eq!(server.get("/").await.status, 200);
    drop(idle);
}

/// Sends every text message back.
struct Echo;

#[async_trait]
impl suprnova::ws::WebSocketHandler for Echo {
    async fn on_socket(&self, mut socket: suprnova::ws::WebSocket) {
        while let Some(Ok(message)) = socket.recv().await {
            if let suprnova::ws::Message::Text(text) = message
                && socket
                    .send(suprnova::ws::Message::Text(text))
                    .await
                    .is_err()
            {
                break;
            }
        }
    }
}

const HANDSHAKE: &[u8] = b"GET /ws HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";

#[tokio::test]
async fn a_thousand_sockets_opened_and_closed_every_way_leave_no_place_taken() {
    use futures_util::{SinkExt, StreamExt};
    let cap = RateLimitMiddleware::connections_per_ip(2);
    let router = Router::new()
        .get("/", |_req: Request| async { HttpResponse::text("hi") })
        .merge(suprnova::ws!("/ws", Echo).middleware(cap.clone()));
    let server = TestServer::start(router).await;
    let addr = server.addr();
    let local = ip("127.0.0.1");
    let started = Instant::now();
    for n in 0..1000 {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        match n % 4 {
            // A whole socket, closed by the client.
            0 => {
                let (mut client, _) = tokio::time::timeout(
                    Duration::from_secs(5),
                    tokio_tungstenite::client_async(format!("ws://{addr}/ws"), stream),
                )
                .await
                .unwrap()
                .unwrap();
                client.send("ping".into()).await.unwrap();
                let echoed = tokio::time::timeout(Duration::from_secs(5), client.next())
                    .await
                    .unwrap()
                    .unwrap()
                    .unwrap();
                assert_eq!(echoed.into_text().unwrap().as_str(), "ping");
                client.close(None).await.unwrap();
                while let Ok(Some(Ok(_))) =
                    tokio::time::timeout(Duration::from_secs(5), client.next()).await
                {
                }
            }
            // Upgraded, then the socket dropped without a close frame.
            1 => {
                let (client, _) =
                    tokio_tungstenite::client_async(format!("ws://{addr}/ws"), stream)
                        .await
                        .unwrap();
                drop(client);
            }
            // The handshake sent, the connection closed before the 101.
            2 => {
                stream.write_all(HANDSHAKE).await.unwrap();
                drop(stream);
            }
            // The handshake sent, the 101 read, a half frame, then gone.
            _ => {
                stream.write_all(HANDSHAKE).await.unwrap();
                let mut buf = [0u8; 512];
                let _ = tokio::time::timeout(Duration::from_secs(5), stream.read(&mut buf)).await;
                stream.write_all(&[0x81, 0x85, 1, 2]).await.unwrap();
                drop(stream);
            }
        }
        open_becomes(&cap, local, 0).await;
        assert!(
            started.elapsed() < Duration::from_secs(120),
            "too slow at {n}"
        );
    }
    assert_eq!(cap.addresses_open(), 0);
}

/// Reads the whole body before the handler, as a middleware that checks a
/// signature or logs the body does.
struct ReadsTheBody;

#[suprnova::async_trait]
impl suprnova::Middleware for ReadsTheBody {
    async fn handle(
        &self,
        mut request: suprnova::Request,
        next: suprnova::Next,
    ) -> suprnova::Response {
        let _ = request.text().await;
        next(request).await
    }
}

/// Keeps the socket open until the peer closes it.
struct Stay;

#[suprnova::async_trait]
impl suprnova::ws::WebSocketHandler for Stay {
    async fn on_socket(&self, mut socket: suprnova::ws::WebSocket) {
        while let Some(Ok(_)) = socket.recv().await {}
    }
}

/// "A socket counts from the moment the middleware lets the upgrade pass
/// until the session of the socket ends": a later middleware on the route
/// that reads the (empty) body of the handshake does not give the socket's
/// place back, and a second socket from the address is refused.
#[tokio::test]
async fn a_socket_keeps_its_place_when_a_middleware_reads_the_handshake_body() {
    use std::time::Duration;
    use suprnova::rate_limit::RateLimitMiddleware;
    use tokio::net::TcpSocket;

    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = suprnova::ws!("/ws", Stay)
        .middleware(cap.clone())
        .middleware(ReadsTheBody);
    let server = support::http::TestServer::start(router).await;
    let addr = server.addr();
    let open = || async move {
        let socket = TcpSocket::new_v4().unwrap();
        socket.bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let stream = socket.connect(addr).await.unwrap();
        tokio::time::timeout(
            Duration::from_secs(5),
            tokio_tungstenite::client_async(format!("ws://{addr}/ws"), stream),
        )
        .await
        .expect("the handshake did not finish in time")
    };
    let first = open().await.expect("the first socket opens");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 1);
    let second = open().await;
    let status = match &second {
        Err(tokio_tungstenite::tungstenite::Error::Http(response)) => response.status().as_u16(),
        Err(other) => panic!("{other}"),
        Ok(_) => 101,
    };
    assert_eq!(status, 429);
    drop(second);
    drop(first);
    server.stop().await;
}

/// "A request, while it is handled. The place is given back when the
/// handler drops or consumes the request": a middleware that reads the body
/// before the handler is not the handler, and a request the handler still
/// holds keeps its place, so a second request from the address is refused.
#[tokio::test]
async fn a_request_keeps_its_place_when_a_middleware_reads_its_body() {
    use support::held::{Gate, entered};

    let cap = suprnova::rate_limit::RateLimitMiddleware::connections_per_ip(1);
    let (gate, mut started) = Gate::new();
    let router = std::sync::Arc::new(gate.router("/slow", &cap).middleware(ReadsTheBody));
    let first = tokio::spawn({
        let router = router.clone();
        async move {
            handle_request_with_peer(&router, get("/slow"), peer("203.0.113.5:40000"))
                .await
                .status_code()
        }
    });
    entered(&mut started).await;
    assert_eq!(cap.open_for("203.0.113.5".parse().unwrap()), 1);
    assert_eq!(
        handle_request_with_peer(&router, get("/slow"), peer("203.0.113.5:40000"))
            .await
            .status_code(),
        429
    );
    gate.release(2);
    assert_eq!(first.await.unwrap(), 200);
}
