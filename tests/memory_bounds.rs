//! Memory stays bounded under floods of distinct keys and addresses, and
//! hostile requests get a clear status, in bounded time, never a panic.
//!
//! Sizes are read through what the types expose (bucket, entry and address
//! counts) and, where nothing is exposed, from the resident memory of the
//! process (`/proc/self/statm`) with generous margins. The tests of this
//! file run one at a time, so that one flood does not show in another's
//! measurement.

mod support;
mod throttle_support;

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use suprnova::cache::{MemoryStore, Store};
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::limiter::CacheRateLimiter;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{
    RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig, identity_key,
};
use suprnova::server::{handle_request, handle_request_with_peer};
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router, ThrottleRequestsMiddleware};

use support::http::TestServer;

/// One flood at a time in this process.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The turn of a test that runs on no runtime.
fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.blocking_lock()
}

/// The turn of a test that runs on a runtime.
async fn one_at_a_time_async() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_AT_A_TIME.lock().await
}

/// The resident memory of this process, in bytes.
fn resident_bytes() -> usize {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap();
    let pages: usize = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

const MIB: usize = 1 << 20;

fn v4(n: u32) -> IpAddr {
    IpAddr::V4(Ipv4Addr::from(0x0a00_0000 | n))
}

fn v6(n: u32) -> IpAddr {
    // A /64 of its own for each.
    IpAddr::V6(Ipv6Addr::new(
        0x2001,
        0xdb8,
        (n >> 16) as u16,
        n as u16,
        0,
        0,
        0,
        1,
    ))
}

fn get(uri: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(uri).body(Full::default()).unwrap()
}

fn post(uri: &str, content_type: &str, body: Vec<u8>) -> http::Request<Full<Bytes>> {
    http::Request::post(uri)
        .header("content-type", content_type)
        .body(Full::new(Bytes::from(body)))
        .unwrap()
}

fn ok_route(path: &str) -> Router {
    Router::new().get(path, |_req: Request| async { HttpResponse::text("ok") })
}

// ---------------------------------------------------------------------------
// The memory driver and its sweep.
// ---------------------------------------------------------------------------

/// 300,000 keys, each admitted once and refused once, leave 300,000
/// buckets; once their window has passed, the first call after the sweep
/// interval drops every one of them.
#[test]
fn a_flood_of_distinct_keys_on_the_memory_driver_is_swept_after_its_window() {
    let _one = one_at_a_time();
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let config = SlidingWindowConfig::new(1, Duration::from_secs(10));
    let keys = 300_000;
    let started = Instant::now();
    for k in 0..keys {
        let key = format!("user:{k}");
        assert!(limiter.acquire_now(&key, &config).unwrap().allowed);
        assert!(!limiter.acquire_now(&key, &config).unwrap().allowed);
    }
    assert_eq!(limiter.bucket_count(), keys);
    clock.advance(Duration::from_secs(11));
    assert!(limiter.acquire_now("after", &config).unwrap().allowed);
    assert_eq!(limiter.bucket_count(), 1, "only the key of the last call");
    assert!(started.elapsed() < Duration::from_secs(60));
}

/// Long keys (1 KiB each, past what a refusal note holds) are dropped as
/// short ones are.
#[test]
fn a_flood_of_long_keys_on_the_memory_driver_is_swept_after_its_window() {
    let _one = one_at_a_time();
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let config = SlidingWindowConfig::new(1, Duration::from_secs(10));
    let pad = "x".repeat(1024);
    let keys = 100_000;
    for k in 0..keys {
        let key = format!("{pad}{k}");
        assert!(limiter.acquire_now(&key, &config).unwrap().allowed);
        assert!(!limiter.acquire_now(&key, &config).unwrap().allowed);
    }
    assert_eq!(limiter.bucket_count(), keys);
    clock.advance(Duration::from_secs(11));
    limiter.acquire_now("after", &config).unwrap();
    assert_eq!(limiter.bucket_count(), 1);
}

/// Asking when a place frees on keys that hold nothing creates nothing.
#[test]
fn retry_after_on_unknown_keys_creates_no_bucket() {
    let _one = one_at_a_time();
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let config = SlidingWindowConfig::new(3, Duration::from_secs(10));
    for k in 0..200_000 {
        assert_eq!(
            limiter
                .retry_after_now(&format!("nobody:{k}"), &config)
                .unwrap(),
            None
        );
    }
    assert_eq!(limiter.bucket_count(), 0);
}

/// Round after round of new keys, each round refused and swept, the
/// process does not grow with the keys seen: what the sweep frees is used
/// again. Five rounds of 200,000 keys; growth past the second round is
/// held under what one round's buckets alone would keep.
#[test]
fn rounds_of_new_keys_on_the_memory_driver_do_not_grow_the_process() {
    let _one = one_at_a_time();
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let config = SlidingWindowConfig::new(1, Duration::from_secs(10));
    let per_round = 200_000;
    let mut after_round = Vec::new();
    for round in 0..5 {
        for k in 0..per_round {
            let key = format!("r{round}:k{k}");
            limiter.acquire_now(&key, &config).unwrap();
            assert!(!limiter.acquire_now(&key, &config).unwrap().allowed);
        }
        clock.advance(Duration::from_secs(11));
        limiter.acquire_now("tick", &config).unwrap();
        assert!(limiter.bucket_count() <= 1);
        after_round.push(resident_bytes());
    }
    let growth = after_round[4].saturating_sub(after_round[1]);
    assert!(
        growth < 24 * MIB,
        "grew {} MiB over three rounds of {per_round} new keys (rounds: {:?} MiB)",
        growth / MIB,
        after_round.iter().map(|b| b / MIB).collect::<Vec<_>>()
    );
}

/// Through `ip_based` on the installed memory driver, 100,000 addresses
/// (half IPv4, half IPv6 /64s) leave a bucket each, and none once the
/// window has passed and a request triggers the sweep.
#[tokio::test]
async fn a_flood_of_addresses_through_ip_based_is_swept_after_its_window() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter = Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(limiter.clone());
    app.scope(async {
        let router =
            ok_route("/").middleware(RateLimitMiddleware::ip_based(5, Duration::from_secs(60)));
        let addresses = 100_000u32;
        for n in 0..addresses {
            let ip = if n % 2 == 0 { v4(n) } else { v6(n) };
            let r = handle_request_with_peer(&router, get("/"), SocketAddr::new(ip, 4000)).await;
            assert_eq!(r.status_code(), 200);
        }
        assert_eq!(limiter.bucket_count(), addresses as usize);
        clock.advance(Duration::from_secs(61));
        let r = handle_request_with_peer(&router, get("/"), "192.0.2.1:1".parse().unwrap()).await;
        assert_eq!(r.status_code(), 200);
        assert_eq!(limiter.bucket_count(), 1);
    })
    .await;
}

// ---------------------------------------------------------------------------
// The memory cache store, the rate limiter over it, and the throttle.
// ---------------------------------------------------------------------------

fn store_and_limiter(clock: &FakeClock) -> (Arc<MemoryStore>, CacheRateLimiter) {
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let limiter = CacheRateLimiter::new(store.clone(), clock.shared());
    (store, limiter)
}

/// 200,000 keys hit once leave a counter and a timer each; after the
/// window and the sweep interval, the next call leaves only its own two.
#[tokio::test]
async fn a_flood_of_hits_on_the_memory_store_is_swept_after_its_window() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let (store, limiter) = store_and_limiter(&clock);
    let keys = 200_000;
    for k in 0..keys {
        assert_eq!(limiter.hit(&format!("login:{k}"), 60).await.unwrap(), 1);
    }
    assert_eq!(store.len(), 2 * keys);
    clock.advance(MemoryStore::DEFAULT_SWEEP_INTERVAL + Duration::from_secs(61));
    limiter.hit("after", 60).await.unwrap();
    assert_eq!(store.len(), 2, "only the counter and timer of the last hit");
}

/// Reading counts, asking whether a key is full, when it frees, what is
/// left, clearing it, and counting in a window of no time (or one that has
/// ended, or an amount over the ceiling on a fresh key) store nothing.
#[tokio::test]
async fn reads_and_counts_that_open_no_window_store_nothing() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let (store, limiter) = store_and_limiter(&clock);
    let past = chrono::DateTime::from_timestamp(1_700_000_000, 0).unwrap();
    for k in 0..50_000 {
        let key = format!("nobody:{k}");
        assert_eq!(limiter.attempts(&key).await.unwrap(), 0);
        assert!(!limiter.too_many_attempts(&key, 1).await.unwrap());
        assert_eq!(limiter.available_in(&key).await.unwrap(), 0);
        assert_eq!(limiter.remaining(&key, 3).await.unwrap(), 3);
        assert!(!limiter.reset_attempts(&key).await.unwrap());
        limiter.clear(&key).await.unwrap();
        limiter.hit(&key, 0).await.unwrap();
        limiter.hit_until(&key, past).await.unwrap();
        let ran = limiter.attempt(&key, 5, || async {}, 0).await.unwrap();
        assert!(ran.is_some());
        let outcome = limiter.increment_if_below(&key, 60, 5, 1).await.unwrap();
        assert!(!outcome.counted);
        assert!(!store.has(&key).await.unwrap());
    }
    assert_eq!(store.len(), 0, "{} entries left", store.len());
}

/// The throttle from 100,000 addresses leaves a counter and a timer for
/// each, and only the last request's once the window has passed.
#[tokio::test]
async fn a_flood_of_addresses_through_the_throttle_is_swept_after_its_window() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let app = throttle_support::limiter_app(store.clone(), clock.shared());
    app.scope(async {
        let router = ok_route("/").middleware(ThrottleRequestsMiddleware::with(5, 1, "api"));
        let addresses = 100_000u32;
        for n in 0..addresses {
            let ip = if n % 2 == 0 { v4(n) } else { v6(n) };
            let r = handle_request_with_peer(&router, get("/"), SocketAddr::new(ip, 4000)).await;
            assert_eq!(r.status_code(), 200);
        }
        assert_eq!(store.len(), 2 * addresses as usize);
        swept_to_one_bucket(&router, &clock, &store).await;
    })
    .await;
}

/// Past the store's sweep interval and every window: one more request
/// leaves the store its own bucket (a counter and its timer) and nothing
/// else.
async fn swept_to_one_bucket(router: &Router, clock: &FakeClock, store: &MemoryStore) {
    clock.advance(MemoryStore::DEFAULT_SWEEP_INTERVAL + Duration::from_secs(61));
    let r = handle_request_with_peer(router, get("/"), "192.0.2.1:1".parse().unwrap()).await;
    assert_eq!(r.status_code(), 200);
    assert_eq!(store.len(), 2);
}

/// Requests with no address each get a bucket of their own; those buckets
/// go with their window as any other.
#[tokio::test]
async fn buckets_of_requests_without_an_address_are_swept_after_their_window() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let app = throttle_support::limiter_app(store.clone(), clock.shared());
    app.scope(async {
        let router = ok_route("/").middleware(ThrottleRequestsMiddleware::with(5, 1, "api"));
        for _ in 0..20_000 {
            assert_eq!(handle_request(&router, get("/")).await.status_code(), 200);
        }
        assert_eq!(store.len(), 40_000);
        clock.advance(MemoryStore::DEFAULT_SWEEP_INTERVAL + Duration::from_secs(61));
        assert_eq!(handle_request(&router, get("/")).await.status_code(), 200);
        assert_eq!(store.len(), 2);
    })
    .await;
}

/// A named limiter keyed by what the caller sends (a header of 1 MiB)
/// answers, and its entry goes with its window.
#[tokio::test]
async fn a_throttle_key_of_a_megabyte_is_served_and_swept() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let app = throttle_support::limiter_app(store.clone(), clock.shared());
    app.scope(async {
        RateLimiter::define("by-token", |req: &Request| {
            Limit::per_minute(2)
                .by(req.header("x-token").unwrap_or("none"))
                .into()
        });
        let router = ok_route("/").middleware(ThrottleRequestsMiddleware::by_name("by-token"));
        let started = Instant::now();
        // Marks that clean to four different keys (`&` cleans to `a`).
        for (n, mark) in ["b", "&", "é", "'"].iter().enumerate() {
            let token = mark.repeat((1 << 20) / mark.len());
            let mut statuses = Vec::new();
            for _ in 0..3 {
                let request = http::Request::get("/")
                    .header(
                        "x-token",
                        http::HeaderValue::from_bytes(token.as_bytes()).unwrap(),
                    )
                    .body(Full::<Bytes>::default())
                    .unwrap();
                let r =
                    handle_request_with_peer(&router, request, SocketAddr::new(v4(n as u32), 1))
                        .await;
                statuses.push(r.status_code());
            }
            assert_eq!(statuses, [200, 200, 429], "token of {mark:?}");
        }
        assert!(started.elapsed() < Duration::from_secs(30));
        assert_eq!(store.len(), 8);
        swept_to_one_bucket(&router, &clock, &store).await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// ConnectionsPerIp.
// ---------------------------------------------------------------------------

/// 100,000 addresses, each served, refused by an inner limit, or failing
/// in a panicking handler: every place is given back, and the map holds
/// no address.
#[tokio::test]
async fn connections_per_ip_holds_no_address_after_a_flood() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let refusing = RateLimitMiddleware::new(
        limiter,
        SlidingWindowConfig::new(0, Duration::from_secs(60)),
        |_req: &Request| "all".to_owned(),
    );
    let router = Router::new()
        .merge(ok_route("/ok"))
        .merge(ok_route("/refused").middleware(refusing))
        .merge(Router::new().get("/panics", |_req: Request| async {
            if true {
                panic!("a bug any caller can reach");
            }
            HttpResponse::text("never")
        }))
        .middleware(cap.clone());
    let addresses = 100_000u32;
    for n in 0..addresses {
        let ip = if n % 2 == 0 { v4(n) } else { v6(n) };
        let (path, status) = match n % 3 {
            0 => ("/ok", 200),
            1 => ("/refused", 429),
            _ => ("/panics", 500),
        };
        let r = handle_request_with_peer(&router, get(path), SocketAddr::new(ip, 4000)).await;
        assert_eq!(r.status_code(), status, "{path}");
    }
    assert_eq!(cap.addresses_open(), 0);
    // A cap of zero refuses and keeps nothing.
    let none = RateLimitMiddleware::connections_per_ip(0);
    let router = ok_route("/").middleware(none.clone());
    for n in 0..10_000 {
        let r = handle_request_with_peer(&router, get("/"), SocketAddr::new(v4(n), 1)).await;
        assert_eq!(r.status_code(), 429);
    }
    assert_eq!(none.addresses_open(), 0);
}

// ---------------------------------------------------------------------------
// Hostile requests, in process.
// ---------------------------------------------------------------------------

/// The router every hostile request is sent to: a per-address limit and a
/// throttle, a per-identity limit that reads the body, and a handler that
/// reads the query.
fn hostile_router(limiter: Arc<dyn RateLimiterDriver>) -> Router {
    let per_identity = RateLimitMiddleware::new(
        limiter.clone(),
        SlidingWindowConfig::new(5, Duration::from_secs(60)),
        |req: &Request| identity_key(req, "email", "reset"),
    )
    .key_reads_body(8 << 20);
    let per_address = RateLimitMiddleware::new(
        limiter,
        SlidingWindowConfig::new(1_000, Duration::from_secs(60)),
        |req: &Request| format!("ip:{}", req.ip().unwrap_or_default()),
    );
    Router::new()
        .get("/", |req: Request| async move {
            HttpResponse::text(format!("{}", req.query_params("a").len()))
        })
        .merge(
            Router::new()
                .get("/reset", |_req: Request| async {
                    HttpResponse::text("sent")
                })
                .post("/reset", |_req: Request| async {
                    HttpResponse::text("sent")
                })
                .middleware(per_identity),
        )
        .middleware(ThrottleRequestsMiddleware::with(1_000, 1, "any"))
        .middleware(per_address)
}

/// In process, every hostile request is answered with a status, within a
/// few seconds, and the process does not grow by more than a few times
/// what the requests themselves weigh.
#[tokio::test]
async fn hostile_requests_in_process_get_a_status_in_bounded_time() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let app = throttle_support::limiter_app(store, clock.shared());
    app.install(Arc::new("10.0.0.0/8".parse::<TrustedProxies>().unwrap()));
    app.scope(async {
        let router = hostile_router(limiter);
        let peer: SocketAddr = "10.0.0.1:4000".parse().unwrap();
        let mut cases: Vec<(&str, http::Request<Full<Bytes>>)> = Vec::new();

        // X-Forwarded-For: 100,000 trusted entries, and one line of 1 MiB.
        let trusted: Vec<String> = (0..100_000u32).map(|n| v4(n).to_string()).collect();
        let mut request = get("/");
        request.headers_mut().insert(
            "x-forwarded-for",
            http::HeaderValue::from_str(&trusted.join(", ")).unwrap(),
        );
        cases.push(("x-forwarded-for of 100,000 entries", request));
        let mut request = get("/");
        request.headers_mut().insert(
            "x-forwarded-for",
            http::HeaderValue::from_str(&format!("{}, 203.0.113.9", "9".repeat(1 << 20))).unwrap(),
        );
        cases.push(("x-forwarded-for of 1 MiB", request));
        // 100,000 lines of X-Forwarded-For.
        let mut request = get("/");
        for n in 0..100_000u32 {
            request.headers_mut().append(
                "x-forwarded-for",
                http::HeaderValue::from_str(&v4(n).to_string()).unwrap(),
            );
        }
        cases.push(("100,000 x-forwarded-for lines", request));

        // A query of 30,000 parameters (as many as a URI the `http` crate
        // builds holds; over the wire, hyper refuses longer heads).
        cases.push(("30,000 parameters", get(&format!("/?{}", "a&".repeat(30_000)))));
        cases.push((
            "30,000 email parameters",
            get(&format!("/reset?{}", "email&".repeat(10_000))),
        ));
        // The longest URI the `http` crate builds is under 64 KiB.
        cases.push(("a URL of 60 KiB", get(&format!("/{}", "p".repeat(60 << 10)))));
        cases.push((
            "a query of 60 KiB",
            get(&format!("/reset?email={}", "e".repeat(60 << 10))),
        ));

        // 10,000 headers.
        let mut request = get("/");
        for n in 0..10_000 {
            request.headers_mut().append(
                http::HeaderName::from_bytes(format!("x-h{n}").as_bytes()).unwrap(),
                http::HeaderValue::from_static("v"),
            );
        }
        cases.push(("10,000 headers", request));

        // JSON nested 100,000 deep, beside the field and as its value.
        let deep = |n: usize| format!("{}{}", "[".repeat(n), "]".repeat(n));
        cases.push((
            "JSON nested 100,000 deep beside the field",
            post(
                "/reset",
                "application/json",
                format!(r#"{{"email":"a@b.c","x":{}}}"#, deep(100_000)).into_bytes(),
            ),
        ));
        cases.push((
            "JSON nested 100,000 deep as the field",
            post(
                "/reset",
                "application/json",
                format!(r#"{{"email":{}}}"#, deep(100_000)).into_bytes(),
            ),
        ));
        let mut objects = String::new();
        for _ in 0..100_000 {
            objects.push_str(r#"{"email":"#);
        }
        objects.push('1');
        objects.push_str(&"}".repeat(100_000));
        cases.push((
            "JSON objects nested 100,000 deep",
            post("/reset", "application/json", objects.into_bytes()),
        ));

        // Multipart with 100,000 parts: unnamed, and each naming a mailbox.
        for (what, named) in [("100,000 parts", false), ("100,000 named parts", true)] {
            let mut body = Vec::new();
            for n in 0..100_000 {
                let name = if named { "email" } else { "other" };
                body.extend_from_slice(
                    format!(
                        "--b\r\nContent-Disposition: form-data; name=\"{name}\"\r\n\r\nu{n}@m.test\r\n"
                    )
                    .as_bytes(),
                );
            }
            body.extend_from_slice(b"--b--\r\n");
            cases.push((what, post("/reset", "multipart/form-data; boundary=b", body)));
        }
        // A form of 100,000 pairs.
        let form: Vec<String> = (0..100_000).map(|n| format!("email=u{n}%40m.test")).collect();
        cases.push((
            "a form of 100,000 pairs",
            post(
                "/reset",
                "application/x-www-form-urlencoded",
                form.join("&").into_bytes(),
            ),
        ));

        for (what, request) in cases {
            let before = resident_bytes();
            let started = Instant::now();
            let answer = tokio::time::timeout(
                Duration::from_secs(20),
                handle_request_with_peer(&router, request, peer),
            )
            .await
            .unwrap_or_else(|_| panic!("{what}: no answer in 20 s"));
            let took = started.elapsed();
            let grew = resident_bytes().saturating_sub(before);
            let status = answer.status_code();
            assert!(
                [200, 400, 404, 413, 414, 429, 431, 503].contains(&status),
                "{what}: {status} {}",
                answer.body_text()
            );
            assert!(took < Duration::from_secs(10), "{what}: took {took:?}");
            assert!(grew < 256 * MIB, "{what}: grew {} MiB", grew / MIB);
            eprintln!("{what}: {status} in {took:?}, grew {} MiB", grew / MIB);
        }
    })
    .await;
}

// ---------------------------------------------------------------------------
// Hostile requests over the wire.
// ---------------------------------------------------------------------------

/// Sends `head` (a request's head, without the blank line that ends it)
/// and the body on one connection and reads the status line.
async fn raw_status(addr: SocketAddr, head: &[u8], body: &[u8]) -> Option<u16> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
    let write = async {
        let _ = stream.write_all(head).await;
        let _ = stream
            .write_all(
                format!(
                    "Connection: close\r\nContent-Length: {}\r\n\r\n",
                    body.len()
                )
                .as_bytes(),
            )
            .await;
        let _ = stream.write_all(body).await;
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), write).await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), stream.read_to_end(&mut answer)).await;
    let line = String::from_utf8_lossy(&answer);
    line.strip_prefix("HTTP/1.1 ")
        .and_then(|rest| rest.get(..3))
        .and_then(|code| code.parse().ok())
}

/// Over loopback, what hyper reads before the crate does is bounded by
/// hyper; every hostile request gets a status (or its connection is
/// closed), and the server still answers afterwards.
#[tokio::test]
async fn hostile_requests_over_the_wire_get_a_status_and_the_server_lives() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let app = throttle_support::limiter_app(store, clock.shared());
    app.install(Arc::new("127.0.0.0/8".parse::<TrustedProxies>().unwrap()));
    app.scope(async {
        let server = TestServer::start(hostile_router(limiter)).await;
        let addr = server.addr();
        let trusted: Vec<String> = (0..100_000u32).map(|n| v4(n).to_string()).collect();
        let query: Vec<String> = (0..100_000).map(|n| format!("a={n}")).collect();
        let many_headers: String = (0..10_000).map(|n| format!("x-h{n}: v\r\n")).collect();
        let deep = format!(
            r#"{{"email":"a@b.c","x":{}{}}}"#,
            "[".repeat(100_000),
            "]".repeat(100_000)
        );
        let mut parts = Vec::new();
        for n in 0..100_000 {
            parts.extend_from_slice(
                format!("--b\r\nContent-Disposition: form-data; name=\"email\"\r\n\r\nu{n}@m.test\r\n")
                    .as_bytes(),
            );
        }
        parts.extend_from_slice(b"--b--\r\n");
        let cases: Vec<(&str, String, Vec<u8>)> = vec![
            (
                "x-forwarded-for of 100,000 entries",
                format!("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: {}\r\n", trusted.join(",")),
                Vec::new(),
            ),
            (
                "x-forwarded-for of 1 MiB",
                format!("GET / HTTP/1.1\r\nHost: a\r\nX-Forwarded-For: {}\r\n", "9".repeat(1 << 20)),
                Vec::new(),
            ),
            (
                "100,000 parameters",
                format!("GET /?{} HTTP/1.1\r\nHost: a\r\n", query.join("&")),
                Vec::new(),
            ),
            (
                "a URL of 1 MiB",
                format!("GET /{} HTTP/1.1\r\nHost: a\r\n", "p".repeat(1 << 20)),
                Vec::new(),
            ),
            (
                "10,000 headers",
                format!("GET / HTTP/1.1\r\nHost: a\r\n{many_headers}"),
                Vec::new(),
            ),
            (
                "JSON nested 100,000 deep",
                "POST /reset HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n".to_owned(),
                deep.into_bytes(),
            ),
            (
                "100,000 named parts",
                "POST /reset HTTP/1.1\r\nHost: a\r\nContent-Type: multipart/form-data; boundary=b\r\n"
                    .to_owned(),
                parts,
            ),
        ];
        for (what, head, body) in cases {
            let started = Instant::now();
            let status = raw_status(addr, head.as_bytes(), &body).await;
            let took = started.elapsed();
            eprintln!("{what}: {status:?} in {took:?}");
            if let Some(status) = status {
                assert!(
                    [200, 400, 404, 413, 414, 429, 431, 503].contains(&status),
                    "{what}: {status}"
                );
            }
            assert!(took < Duration::from_secs(15), "{what}: took {took:?}");
            assert_eq!(server.get("/").await.status, 200, "after {what}");
        }
        server.stop().await;
    })
    .await;
}

/// Requests naming three mailboxes or more are refused and counted in no
/// bucket: 20,000 of them, from as many addresses, leave none.
#[tokio::test]
async fn requests_naming_many_mailboxes_leave_no_bucket() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter = Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let per_identity = RateLimitMiddleware::new(
        limiter.clone(),
        SlidingWindowConfig::new(5, Duration::from_secs(60)),
        |req: &Request| identity_key(req, "email", "reset"),
    )
    .key_reads_body(4096);
    let router = Router::new()
        .post("/reset", |_req: Request| async {
            HttpResponse::text("sent")
        })
        .middleware(per_identity);
    for n in 0..20_000u32 {
        let body = format!("email=a{n}%40m.test&email=b{n}%40m.test&email=c{n}%40m.test");
        let request = post(
            "/reset",
            "application/x-www-form-urlencoded",
            body.into_bytes(),
        );
        let r = handle_request_with_peer(&router, request, SocketAddr::new(v4(n), 1)).await;
        assert_eq!(r.status_code(), 429);
    }
    assert_eq!(limiter.bucket_count(), 0);
}

/// Connections opened and closed one after another do not grow the
/// process with their count: 1,000 and then 3,000 more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_connections_do_not_grow_the_process() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _one = one_at_a_time_async().await;
    let server = TestServer::start(ok_route("/")).await;
    let addr = server.addr();
    let connect = |n: usize| async move {
        for _ in 0..n {
            let mut stream = tokio::net::TcpStream::connect(addr).await.unwrap();
            stream
                .write_all(b"GET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            let mut answer = Vec::new();
            stream.read_to_end(&mut answer).await.unwrap();
            assert!(answer.starts_with(b"HTTP/1.1 200"));
        }
    };
    connect(1_000).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let before = resident_bytes();
    connect(3_000).await;
    tokio::time::sleep(Duration::from_millis(200)).await;
    let grew = resident_bytes().saturating_sub(before);
    assert!(grew < 8 * MIB, "3,000 connections grew {} MiB", grew / MIB);
    server.stop().await;
}

/// Round after round of new keys on the memory store, each round swept,
/// the process does not grow with the keys seen.
#[tokio::test]
async fn rounds_of_new_keys_on_the_memory_store_do_not_grow_the_process() {
    let _one = one_at_a_time_async().await;
    let clock = FakeClock::at_unix(1_800_000_000);
    let (store, limiter) = store_and_limiter(&clock);
    let per_round = 150_000;
    let mut after_round = Vec::new();
    for round in 0..5 {
        for k in 0..per_round {
            limiter.hit(&format!("r{round}:k{k}"), 10).await.unwrap();
        }
        // With the last round's tick, until its sweep.
        assert!((2 * per_round..=2 * per_round + 2).contains(&store.len()));
        clock.advance(MemoryStore::DEFAULT_SWEEP_INTERVAL + Duration::from_secs(11));
        limiter.hit("tick", 10).await.unwrap();
        assert_eq!(store.len(), 2);
        after_round.push(resident_bytes());
    }
    let growth = after_round[4].saturating_sub(after_round[1]);
    assert!(
        growth < 24 * MIB,
        "grew {} MiB over three rounds of {per_round} new keys (rounds: {:?} MiB)",
        growth / MIB,
        after_round.iter().map(|b| b / MIB).collect::<Vec<_>>()
    );
}

/// Reads until the peer goes.
struct Drain;

#[suprnova::async_trait]
impl suprnova::ws::WebSocketHandler for Drain {
    async fn on_socket(&self, mut socket: suprnova::ws::WebSocket) {
        while let Some(Ok(_)) = socket.recv().await {}
    }
}

/// 300 WebSocket clients from as many addresses, which leave without a
/// close (after the 101, before reading it, or after sending a frame that
/// is not one), give their places back: the cap holds no address after.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_clients_that_vanish_give_their_places_back() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let _one = one_at_a_time_async().await;
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = suprnova::ws!("/ws", Drain).middleware(cap.clone());
    let server = TestServer::start(router).await;
    let addr = server.addr();
    const HANDSHAKE: &[u8] = b"GET /ws HTTP/1.1\r\nHost: a\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\r\n";
    let mut held = Vec::new();
    for n in 0..300u32 {
        let local = IpAddr::V4(Ipv4Addr::new(127, 1, (n / 200) as u8, (n % 200) as u8 + 1));
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(SocketAddr::new(local, 0)).unwrap();
        let mut stream = socket.connect(addr).await.unwrap();
        stream.write_all(HANDSHAKE).await.unwrap();
        match n % 3 {
            0 => {
                let mut head = [0u8; 12];
                stream.read_exact(&mut head).await.unwrap();
                assert_eq!(&head, b"HTTP/1.1 101");
                held.push(stream);
            }
            1 => drop(stream),
            _ => {
                let mut head = [0u8; 12];
                stream.read_exact(&mut head).await.unwrap();
                // An unmasked frame of a reserved opcode: not a client's.
                stream.write_all(&[0x83, 0x01, 0x00]).await.unwrap();
                held.push(stream);
            }
        }
    }
    drop(held);
    let deadline = Instant::now() + Duration::from_secs(15);
    while cap.addresses_open() > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(cap.addresses_open(), 0);
    server.stop().await;
}

/// HTTP/2 connections opened and dropped one after another do not grow
/// the process with their count: 300 and then 1,200 more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_http2_connections_do_not_grow_the_process() {
    let _one = one_at_a_time_async().await;
    let server = TestServer::start(ok_route("/")).await;
    let url = server.url("/");
    let connect = |n: usize| {
        let url = url.clone();
        let server = &server;
        async move {
            for _ in 0..n {
                let reply = server
                    .send_h2(
                        http::Request::get(url.as_str())
                            .body(Full::default())
                            .unwrap(),
                    )
                    .await;
                assert_eq!(reply.status, 200);
            }
        }
    };
    connect(300).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = resident_bytes();
    connect(1_200).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let grew = resident_bytes().saturating_sub(before);
    assert!(grew < 8 * MIB, "1,200 connections grew {} MiB", grew / MIB);
    server.stop().await;
}

/// The peak resident memory since the last [`reset_peak`], in bytes.
fn peak_resident_bytes() -> usize {
    let status = std::fs::read_to_string("/proc/self/status").unwrap();
    let line = status.lines().find(|l| l.starts_with("VmHWM:")).unwrap();
    let kib: usize = line.split_whitespace().nth(1).unwrap().parse().unwrap();
    kib * 1024
}

/// Starts measuring the peak resident memory afresh.
fn reset_peak() {
    std::fs::write("/proc/self/clear_refs", "5").unwrap();
}

/// The labels `encoding_rs` knows, each a text encoding of its own.
const CHARSETS: [&str; 37] = [
    "windows-1252",
    "iso-8859-2",
    "iso-8859-3",
    "iso-8859-4",
    "iso-8859-5",
    "iso-8859-6",
    "iso-8859-7",
    "iso-8859-8",
    "iso-8859-10",
    "iso-8859-13",
    "iso-8859-14",
    "iso-8859-15",
    "iso-8859-16",
    "koi8-r",
    "koi8-u",
    "macintosh",
    "x-mac-cyrillic",
    "ibm866",
    "windows-874",
    "windows-1250",
    "windows-1251",
    "windows-1253",
    "windows-1254",
    "windows-1255",
    "windows-1256",
    "windows-1257",
    "windows-1258",
    "gbk",
    "gb18030",
    "big5",
    "euc-jp",
    "shift_jis",
    "euc-kr",
    "utf-16be",
    "utf-16le",
    "x-user-defined",
    "iso-8859-8-i",
];

/// A multipart body of `size` bytes with one part named `email`, whose
/// headers give `charsets` charsets, opened by the first-line boundary `f`
/// and, on its second line, by each boundary `content_type` labels.
fn one_part_read_many_ways(size: usize, charsets: usize) -> Vec<u8> {
    let mut head = String::from("--f\r\n--ab--a\\b--cd--c\\d--e\r\n");
    head.push_str("Content-Disposition: form-data; name=\"email\"\r\n");
    for charset in &CHARSETS[..charsets] {
        head.push_str(&format!("Content-Type: text/plain; charset={charset}\r\n"));
    }
    head.push_str("\r\n");
    let mut body = head.into_bytes();
    let tail = b"\r\n--f--\r\n";
    body.push(0xe9);
    body.resize(size - tail.len(), b'a');
    body.extend_from_slice(tail);
    body
}

/// The `Content-Type` that labels the boundaries `ab`, `a\b`, `cd`, `c\d`
/// (a quoted value read with its escapes undone and as written, first and
/// last) and `e` (RFC 2231).
const MANY_BOUNDARIES: &str =
    "multipart/form-data; boundary=\"a\\b\"; boundary=\"c\\d\"; boundary*=utf-8''e";

async fn peak_of_one_request(
    size: usize,
    charsets: usize,
    content_type: &str,
) -> (u16, Duration, usize) {
    let clock = FakeClock::at_unix(1_800_000_000);
    let limiter = Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let per_identity = RateLimitMiddleware::new(
        limiter.clone(),
        SlidingWindowConfig::new(5, Duration::from_secs(60)),
        |req: &Request| identity_key(req, "email", "reset"),
    )
    .key_reads_body(size);
    let router = Router::new()
        .post("/reset", |_req: Request| async {
            HttpResponse::text("sent")
        })
        .middleware(per_identity);
    let body = one_part_read_many_ways(size, charsets);
    let before = resident_bytes();
    reset_peak();
    let started = Instant::now();
    let r = handle_request_with_peer(
        &router,
        post("/reset", content_type, body),
        "203.0.113.1:1".parse().unwrap(),
    )
    .await;
    let took = started.elapsed();
    let peak = peak_resident_bytes().saturating_sub(before);
    (r.status_code(), took, peak)
}

/// `key_reads_body(256 KiB)`: one part named `email`, found by the six
/// boundaries its label and first lines give, with 37 charsets listed in
/// its headers, is read once, in at most four decodings, and the reading
/// stops once three identities are found. A body the cap admits must not
/// cost more than a small multiple of the cap: a plain one of the same size
/// costs about 2 MiB here.
#[tokio::test]
async fn a_body_read_by_many_boundaries_and_charsets_costs_a_small_multiple_of_the_cap() {
    let _one = one_at_a_time_async().await;
    let size = 256 << 10;
    let bound = 32 * size;
    let (status, took, peak) =
        peak_of_one_request(size, 0, "multipart/form-data; boundary=f").await;
    assert_eq!(status, 200);
    assert!(
        peak < bound,
        "a plain body: +{} MiB in {took:?}",
        peak / MIB
    );
    let (status, took, peak) = peak_of_one_request(size, CHARSETS.len(), MANY_BOUNDARIES).await;
    assert!([200, 413, 429].contains(&status), "{status}");
    assert!(
        peak < bound,
        "one request of {} KiB took +{} MiB at its peak, in {took:?}",
        size >> 10,
        peak / MIB
    );
}
