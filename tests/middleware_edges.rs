//! `RateLimitMiddleware`, `ip_based`, `identity_key` and `connections_per_ip`
//! stacked on one route, fed malformed and oversized input, and on a Redis
//! that is stopped mid-run.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig, identity_key,
    names_identity,
};
use suprnova::redis_client::{RedisConfig, RedisConnection};
use suprnova::server::{handle_request, handle_request_with_peer};
use suprnova::{HttpResponse, Request, Router};

use support::http::TestServer;
use support::redis::RedisServer;
use support::{clock_at, peer, unique_prefix, within};

const MINUTE: Duration = Duration::from_secs(60);
const FORM: &str = "application/x-www-form-urlencoded";

fn ok(_req: Request) -> std::future::Ready<HttpResponse> {
    std::future::ready(HttpResponse::text("ok"))
}

fn get(path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path).body(Full::default()).unwrap()
}

fn post(uri: &str, content_type: &str, body: &str) -> http::Request<Full<Bytes>> {
    http::Request::post(uri)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body.to_owned())))
        .unwrap()
}

fn memory(clock: &FakeClock) -> Arc<dyn RateLimiterDriver> {
    Arc::new(InMemoryRateLimiter::with_clock(clock.shared()))
}

fn pair(r: &HttpResponse) -> (Option<&str>, Option<&str>) {
    (
        r.header_str("x-ratelimit-limit"),
        r.header_str("x-ratelimit-remaining"),
    )
}

/// A tiny deterministic generator, so a failing case can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
}

// ---------------------------------------------------------------------------
// Malformed input never panics the identity readers.

const BODY_PIECES: &[&[u8]] = &[
    b"--",
    b"\r\n",
    b"\r\n\r\n",
    b"B",
    b"--B\r\n",
    b"\r\n--B",
    b"\r\n--B--",
    b"email",
    b"name=",
    b"name=\"email\"",
    b"name=email x",
    b"name=\"em\\\"ail\"",
    b"Content-Disposition: form-data; ",
    b"Content-Type: text/plain; charset=",
    b"utf-16le",
    b"utf-16be",
    b"iso-8859-1",
    b"shift_jis",
    b"\"",
    b"\\",
    b";",
    b"=",
    b"&",
    b"%",
    b"%2",
    b"%zz",
    b"%C3",
    b"%FF",
    b"+",
    b"{",
    b"}",
    b"[",
    b"]",
    b":",
    b",",
    b"\"email\"",
    b"{\"email\":\"",
    b"a@b.c",
    b"Victim@Example.COM",
    b"\xEF\xBB\xBF",
    b"\xFF\xFE",
    b"\xFE\xFF",
    b"\xC3",
    b"\xE2\x80",
    b"\0",
    b" ",
    b"\t",
    b"filename=",
    b"'",
    "é".as_bytes(),
    "ǰ".as_bytes(),
    "J\u{30C}".as_bytes(),
    "\u{200B}".as_bytes(),
];

const LABEL_PIECES: &[&str] = &[
    "multipart/form-data",
    "multipart/",
    "multipart",
    "application/json",
    FORM,
    "; ",
    ";",
    "boundary=",
    "boundary=B",
    "boundary=\"B\"",
    "boundary=\"B\\\"",
    "boundary*=utf-8''B",
    "boundary*0=B",
    "boundary*1*=%21",
    "boundary*x=",
    "boundary*=''",
    "charset=utf-16",
    "\"",
    "\\",
    "=",
    "B",
    " ",
    "%",
    "'",
];

const QUERY_PIECES: &[&str] = &[
    "email=",
    "email",
    "&",
    "=",
    "%",
    "%4",
    "%41",
    "%zz",
    "%C3",
    "%FF",
    "+",
    "a@b.c",
    "%20",
    "%00",
    "%EF%BB%BF",
    ";",
    "x",
];

fn pieces<T: ?Sized>(rng: &mut Rng, from: &[&T], max: usize) -> Vec<usize> {
    let n = rng.below(max + 1);
    (0..n).map(|_| rng.below(from.len())).collect()
}

/// 20,000 requests built from the pieces that the body, label and query
/// readers split on (boundaries, quotes, escapes, charsets, byte order
/// marks, truncated UTF-8 and percent-escapes): each gets a key, and the
/// answer to `names_identity`, without a panic.
#[tokio::test]
async fn malformed_bodies_labels_and_queries_never_panic_the_identity_readers() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for case in 0..20_000 {
        let mut body = Vec::new();
        for i in pieces(&mut rng, BODY_PIECES, 24) {
            body.extend_from_slice(BODY_PIECES[i]);
        }
        let label: String = pieces(&mut rng, LABEL_PIECES, 8)
            .into_iter()
            .map(|i| LABEL_PIECES[i])
            .collect();
        let query: String = pieces(&mut rng, QUERY_PIECES, 8)
            .into_iter()
            .map(|i| QUERY_PIECES[i])
            .collect();
        let uri = format!("/reset?{query}");
        let mut builder = http::Request::post(uri.as_str());
        if rng.below(4) > 0 {
            builder = builder.header("content-type", label.as_str());
        }
        let Ok(request) = builder.body(Full::new(Bytes::from(body.clone()))) else {
            continue;
        };
        let mut req = Request::new(request).with_peer(peer("203.0.113.9:1"));
        req.body_bytes(1 << 16).await.unwrap();
        let key = identity_key(&req, "email", "ns");
        let named = names_identity(&req, "email");
        assert!(key.starts_with("ns:"), "case {case}: {key}");
        assert_eq!(
            named,
            !key.starts_with("ns:ip:"),
            "case {case}: {uri} {label:?} {body:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// Stacked on one route.

/// The reference's password-reset route: a per-address limit of 5 a minute
/// stacked on a per-recipient limit of 3 in 15 minutes, both on one driver.
fn reset_route(driver: Arc<dyn RateLimiterDriver>) -> Router {
    let per_recipient = RateLimitMiddleware::new(
        driver.clone(),
        SlidingWindowConfig::new(3, Duration::from_secs(900)),
        |req| identity_key(req, "email", "auth-issuance"),
    )
    .key_reads_body(4096)
    .only_when(|req| names_identity(req, "email"))
    .on_backend_error(BackendErrorPolicy::FailClosed);
    let per_ip = RateLimitMiddleware::new(driver, SlidingWindowConfig::new(5, MINUTE), |req| {
        format!("reset:ip:{}", req.ip().unwrap_or_default())
    });
    Router::new()
        .post("/password/reset", |mut req: Request| async move {
            let body = req.text().await.unwrap_or_default();
            HttpResponse::text(format!("sent {body}"))
        })
        .middleware(per_ip)
        .middleware(per_recipient)
}

/// Over HTTP/1.1 and HTTP/2: each answer carries the pair of the limit with
/// the fewest places left, the handler reads the body the key read, and a
/// refusal carries the refusing limit's whole set.
#[tokio::test]
async fn stacked_limits_over_both_protocols_report_the_tightest_pair() {
    for http2 in [false, true] {
        let clock = clock_at(9, 0, 0);
        let app = App::new();
        app.scope(async {
            let server = TestServer::start(reset_route(memory(&clock))).await;
            let send = |body: &str| {
                let request = post(&server.url("/password/reset"), FORM, body);
                let server = &server;
                async move {
                    if http2 {
                        server.send_h2(request).await
                    } else {
                        server.send(request).await
                    }
                }
            };
            // Per recipient: 2, 1, 0 left; per address: 4, 3, 2.
            for left in ["2", "1", "0"] {
                let r = send("email=Victim%40Example.com").await;
                assert_eq!(r.status, 200, "http2={http2}");
                assert_eq!(r.body, "sent email=Victim%40Example.com");
                assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
                assert_eq!(r.header("x-ratelimit-remaining"), Some(left));
            }
            // The fourth for the mailbox: the per-recipient refusal, whole.
            let r = send("email=victim@example.com").await;
            assert_eq!(r.status, 429, "http2={http2}");
            assert_eq!(r.header("x-ratelimit-limit"), Some("3"));
            assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
            assert_eq!(r.header("retry-after"), Some("900"));
            // A request naming nobody skips the per-recipient limit: the
            // address has 1 place left of 5 (four requests counted).
            let r = send("note=hello").await;
            assert_eq!(r.status, 200, "http2={http2}");
            assert_eq!(r.header("x-ratelimit-limit"), Some("5"));
            assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
            let r = send("note=again").await;
            assert_eq!(r.status, 429, "http2={http2}");
            assert_eq!(r.header("x-ratelimit-limit"), Some("5"));
            assert_eq!(r.header("retry-after"), Some("60"));
            server.stop().await;
        })
        .await;
    }
}

/// `connections_per_ip` outside an address limit: a request the cap refuses
/// never reaches the limit, so it spends none of the address's budget.
#[tokio::test]
async fn a_request_the_connection_cap_refuses_spends_nothing_of_an_inner_limit() {
    let clock = clock_at(9, 0, 0);
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(memory(&clock));
    app.scope(async {
        let cap = RateLimitMiddleware::connections_per_ip(1);
        let (gate, mut entered) = support::held::Gate::new();
        let router = gate
            .router("/held", &cap)
            .middleware(RateLimitMiddleware::ip_based(3, MINUTE));
        let router = Arc::new(router);
        let from = peer("198.51.100.1:1");
        let held =
            {
                let router = router.clone();
                tokio::spawn(App::current().scope(async move {
                    handle_request_with_peer(&router, get("/held"), from).await
                }))
            };
        support::held::entered(&mut entered).await;
        for _ in 0..5 {
            let r = handle_request_with_peer(&router, get("/held"), from).await;
            assert_eq!(r.status_code(), 429);
            assert_eq!(r.header_str("retry-after"), None);
        }
        gate.release(10);
        let first = within("the held request", Duration::from_secs(5), held)
            .await
            .unwrap();
        assert_eq!(pair(&first), (Some("3"), Some("2")));
        let r = handle_request_with_peer(&router, get("/held"), from).await;
        assert_eq!(r.status_code(), 200);
        assert_eq!(pair(&r), (Some("3"), Some("1")));
    })
    .await;
}

// ---------------------------------------------------------------------------
// Odd and oversized values.

/// A key read from a header as large as the server takes (here 60 KB) is a
/// bucket like any other, on memory and on Redis; and a header of odd bytes
/// (obs-text) is not text, so every such request shares the key function's
/// fallback.
#[tokio::test]
async fn a_huge_header_keyed_bucket_limits_on_memory_and_redis() {
    let redis = RedisServer::start();
    let clock = clock_at(9, 0, 0);
    let conn = RedisConnection::new(
        RedisConfig::from_url(&redis.url())
            .unwrap()
            .with_timeouts(Duration::from_millis(500), Duration::from_millis(500)),
    )
    .unwrap();
    let on_redis: Arc<dyn RateLimiterDriver> =
        Arc::new(RedisRateLimiter::new(conn).with_prefix(unique_prefix("mw-huge")));
    for driver in [memory(&clock), on_redis] {
        let router = Router::new()
            .get("/r", ok)
            .middleware(RateLimitMiddleware::new(
                driver,
                SlidingWindowConfig::new(2, MINUTE),
                |req| format!("key:{}", req.header("x-api-key").unwrap_or("none")),
            ));
        let server = TestServer::start(router).await;
        let with_key = |key: &str| {
            http::Request::get(server.url("/r"))
                .header("x-api-key", key)
                .body(Full::default())
                .unwrap()
        };
        let big = "k".repeat(60 * 1024);
        let mut other = big.clone();
        other.push('2');
        let statuses = [
            server.send(with_key(&big)).await.status,
            server.send(with_key(&big)).await.status,
            server.send(with_key(&big)).await.status,
            server.send(with_key(&other)).await.status,
        ];
        assert_eq!(statuses, [200, 200, 429, 200]);
        server.stop().await;
    }
}

/// A request with no peer, through `handle_request`, gets a bucket of its own
/// under `ip_based` and is not counted by `connections_per_ip`; a stack of
/// both admits every such request with the pair of a fresh bucket.
#[tokio::test]
async fn requests_with_no_peer_through_a_stack_of_cap_and_limit() {
    let clock = clock_at(9, 0, 0);
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(memory(&clock));
    app.scope(async {
        let cap = RateLimitMiddleware::connections_per_ip(0);
        let router = Router::new()
            .get("/r", ok)
            .middleware(RateLimitMiddleware::ip_based(1, MINUTE))
            .middleware(cap.clone());
        for _ in 0..3 {
            let r = handle_request(&router, get("/r")).await;
            assert_eq!(r.status_code(), 200);
            assert_eq!(pair(&r), (Some("1"), Some("0")));
        }
        assert_eq!(cap.addresses_open(), 0);
        // With a peer, a cap of 0 refuses.
        let r = handle_request_with_peer(&router, get("/r"), peer("192.0.2.1:1")).await;
        assert_eq!(r.status_code(), 429);
    })
    .await;
}

// ---------------------------------------------------------------------------
// Redis stopped mid-run.

fn redis_driver(url: &str, name: &str) -> Arc<dyn RateLimiterDriver> {
    let conn = RedisConnection::new(
        RedisConfig::from_url(url)
            .unwrap()
            .with_timeouts(Duration::from_millis(200), Duration::from_millis(200)),
    )
    .unwrap();
    Arc::new(RedisRateLimiter::new(conn).with_prefix(unique_prefix(name)))
}

/// An ambiguous request (query and body name two mailboxes) asks three
/// buckets; with Redis gone it is answered within one deadline, not three,
/// under either policy; and once Redis is back the same request is decided
/// again, against empty buckets.
#[tokio::test]
async fn an_ambiguous_request_with_redis_stopped_is_answered_within_one_deadline() {
    let mut redis = RedisServer::start();
    let driver = redis_driver(&redis.url(), "mw-ambiguous");
    let limit = |policy| {
        RateLimitMiddleware::new(
            driver.clone(),
            SlidingWindowConfig::new(3, Duration::from_secs(900)),
            |req| identity_key(req, "email", "auth"),
        )
        .key_reads_body(4096)
        .on_backend_error(policy)
    };
    let router = Router::new()
        .post("/open", ok)
        .middleware(limit(BackendErrorPolicy::FailOpen))
        .merge(
            Router::new()
                .post("/closed", ok)
                .middleware(limit(BackendErrorPolicy::FailClosed)),
        );
    let server = TestServer::start(router).await;
    let ambiguous = |path: &str| {
        post(
            &server.url(&format!("{path}?email=a@example.com")),
            FORM,
            "email=b@example.com",
        )
    };

    let r = server.send(ambiguous("/open")).await;
    assert_eq!(r.status, 200);
    assert_eq!(r.header("x-ratelimit-remaining"), Some("2"));

    redis.stop();
    for (path, status) in [("/open", 200), ("/closed", 503)] {
        for _ in 0..3 {
            let started = Instant::now();
            let r = server.send(ambiguous(path)).await;
            let took = started.elapsed();
            assert_eq!(r.status, status, "{path}");
            assert!(
                took < Duration::from_millis(1_000),
                "{path} took {took:?}, past one deadline of 400 ms"
            );
            if status == 503 {
                assert_eq!(r.header("retry-after"), Some("1"));
            }
            assert_eq!(r.header("x-ratelimit-remaining"), None);
        }
    }

    redis.restart();
    let decided = within(
        "a decision after the restart",
        Duration::from_secs(10),
        async {
            loop {
                let r = server.send(ambiguous("/closed")).await;
                if r.status != 503 {
                    return r;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        },
    )
    .await;
    assert_eq!(decided.status, 200);
    assert_eq!(decided.header("x-ratelimit-remaining"), Some("2"));
    server.stop().await;
}

// ---------------------------------------------------------------------------
// A limit the driver refuses.

/// A window longer than the Redis driver takes (2^50 microseconds, about 35
/// years) is an invalid limit there: every request the driver is asked about
/// answers `500`. The middleware's own comment on a request naming more than
/// two identities says that it "must be caught here to answer as it does for
/// every other request", but it checks only `SlidingWindowConfig::validate`,
/// not the driver's own bounds, so that request is refused with `429` and a
/// `Retry-After` of forty years instead.
#[tokio::test]
async fn a_limit_the_redis_driver_refuses_answers_500_to_a_request_naming_three_identities_too() {
    let redis = RedisServer::start();
    let driver = redis_driver(&redis.url(), "mw-long-window");
    let forty_years = Duration::from_secs(40 * 365 * 24 * 3600);
    let router = Router::new().post("/reset", ok).middleware(
        RateLimitMiddleware::new(driver, SlidingWindowConfig::new(3, forty_years), |req| {
            identity_key(req, "email", "auth")
        })
        .key_reads_body(4096),
    );
    let send = |uri: &str, body: &str| {
        handle_request_with_peer(&router, post(uri, FORM, body), peer("203.0.113.4:1"))
    };

    let one = send("/reset", "email=a@example.com").await;
    assert_eq!(one.status_code(), 500, "{}", one.body_text());
    let two = send("/reset?email=b@example.com", "email=a@example.com").await;
    assert_eq!(two.status_code(), 500, "{}", two.body_text());
    let three = send(
        "/reset?email=b@example.com&email=c@example.com",
        "email=a@example.com",
    )
    .await;
    assert_eq!(
        (three.status_code(), three.header_str("retry-after")),
        (500, None),
        "{}",
        three.body_text()
    );
}

// ---------------------------------------------------------------------------
// The seed's concurrency scenario over one HTTP/2 connection.

/// 20 clients of 50 attempts each, limit 100, all on one HTTP/2 connection
/// (1,000 streams multiplexed) through `ip_based` on the installed Redis
/// driver: exactly 100 admitted, each with its own `X-RateLimit-Remaining`,
/// and 900 refused with the whole set of headers.
#[tokio::test]
async fn twenty_by_fifty_over_one_http2_connection_admit_exactly_100_on_redis() {
    let redis = RedisServer::start();
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(redis_driver(&redis.url(), "mw-h2-storm"));
    app.scope(async {
        let router = Router::new()
            .get("/r", ok)
            .middleware(RateLimitMiddleware::ip_based(100, MINUTE));
        let server = TestServer::start(router).await;
        let stream = tokio::net::TcpStream::connect(server.addr()).await.unwrap();
        let (sender, connection) = hyper::client::conn::http2::handshake(
            hyper_util::rt::TokioExecutor::new(),
            hyper_util::rt::TokioIo::new(stream),
        )
        .await
        .unwrap();
        tokio::spawn(connection);
        let start = Arc::new(tokio::sync::Barrier::new(20));
        let url = server.url("/r");
        let clients: Vec<_> = (0..20)
            .map(|_| {
                let (mut sender, start, url) = (sender.clone(), start.clone(), url.clone());
                tokio::spawn(async move {
                    start.wait().await;
                    let mut replies = Vec::new();
                    for _ in 0..50 {
                        sender.ready().await.unwrap();
                        let response = sender.send_request(get(&url)).await.unwrap();
                        replies.push(support::http::Reply::read(response).await);
                    }
                    replies
                })
            })
            .collect();
        let mut replies = Vec::new();
        for client in clients {
            replies.extend(
                within("a client's 50 requests", Duration::from_secs(60), client)
                    .await
                    .unwrap(),
            );
        }
        let tally = support::http::tally(&replies);
        assert_eq!((tally.admitted, tally.refused), (100, 900));
        assert_eq!(tally.remaining, (0..100).collect::<Vec<i64>>());
        assert_eq!(tally.limits.len(), 1);
        drop(sender);
        server.stop().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Capitalisation of an identity.

/// The query string naming `value` as `email`.
fn naming(value: &str) -> String {
    let query = form_urlencoded::Serializer::new(String::new())
        .append_pair("email", value)
        .finish();
    format!("/reset?{query}")
}

/// The API reference: "Alice@Example.com and alice@example.com reach the same
/// mailbox and must share a bucket, or the limit is bypassed by changing
/// capitalisation." Lowercasing is not a case-insensitive comparison: `ß`
/// capitalises to `SS`, which lowercases to `ss`; a `σ` at the end of a word
/// capitalises to `Σ`, which lowercases there to `ς`. So an address and its
/// own capitals (`straße@mail.test` and `STRASSE@MAIL.TEST`, `οδοσ@mail.test`
/// and `ΟΔΟΣ@MAIL.TEST`, `ılgın@mail.test` and `ILGIN@MAIL.TEST`) get two
/// buckets, and two budgets, through `identity_key` and the per-recipient
/// limit built on it.
#[tokio::test]
async fn an_address_and_its_capitals_share_one_bucket() {
    let clock = clock_at(9, 0, 0);
    let router = Router::new().post("/reset", ok).middleware(
        RateLimitMiddleware::new(
            memory(&clock),
            SlidingWindowConfig::new(1, Duration::from_secs(900)),
            |req| identity_key(req, "email", "auth-issuance"),
        )
        .only_when(|req| names_identity(req, "email")),
    );
    let mut split = Vec::new();
    for lower in ["straße@mail.test", "οδοσ@mail.test", "ılgın@mail.test"] {
        let upper = lower.to_uppercase();
        let key_of = |value: &str| {
            let req = Request::new(
                http::Request::post(naming(value))
                    .body(String::new())
                    .unwrap(),
            );
            identity_key(&req, "email", "auth-issuance")
        };
        if key_of(lower) != key_of(&upper) {
            split.push(format!("{lower} / {upper}"));
        }
        // Through the limit of one reset per mailbox: the capitals of a
        // spent address must be refused.
        let first = post(&naming(lower), FORM, "");
        let again = post(&naming(&upper), FORM, "");
        let from = peer("198.51.100.20:1");
        assert_eq!(
            handle_request_with_peer(&router, first, from)
                .await
                .status_code(),
            200
        );
        let second = handle_request_with_peer(&router, again, from)
            .await
            .status_code();
        if second != 429 {
            split.push(format!("{upper} admitted after {lower} spent the bucket"));
        }
    }
    assert!(split.is_empty(), "{split:#?}");
}

// ---------------------------------------------------------------------------
// A phone number written as a JSON number.

/// A domain written as its Unicode labels and as their ASCII form (IDNA,
/// RFC 5890: `bücher.example` is `xn--bcher-kva.example`) is one domain,
/// so `victim@bücher.example` and `victim@xn--bcher-kva.example` reach one
/// mailbox. The reference: addresses that reach the same mailbox "must
/// share a bucket", or the limit is bypassed by respelling the address; the
/// two spellings get two buckets.
#[tokio::test]
async fn an_address_with_its_domain_in_punycode_shares_its_bucket() {
    let key_of = |value: &str| {
        let req = Request::new(
            http::Request::post(naming(value))
                .body(String::new())
                .unwrap(),
        );
        identity_key(&req, "email", "auth-issuance")
    };
    assert_eq!(
        key_of("victim@b\u{fc}cher.example"),
        key_of("victim@xn--bcher-kva.example")
    );
}
