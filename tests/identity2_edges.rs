//! How `RateLimitMiddleware` picks the key and the limit of a request, and
//! how `connections_per_ip` counts: exact counts under the seed's 20 x 50
//! shape by address (an IPv6 /64, and a loopback client over the wire), the
//! `Retry-After` and `X-RateLimit-Reset` of each refusal as the window
//! slides, a connection cap under a thousand concurrent requests,
//! forwarded headers a trusted proxy passes on malformed, and the mailbox a
//! per-recipient limit must find in a multipart body multer reads.

mod support;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use http_body_util::Full;
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{
    RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig, identity_key, names_identity,
};
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Request, Router};

use support::held::{Gate, entered};
use support::http::{TestServer, storm, tally};
use support::{clock_at, ip, peer};

const MINUTE: Duration = Duration::from_secs(60);

fn get(path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path).body(Full::default()).unwrap()
}

/// 2026-01-01 `h:m:s` UTC in Unix seconds: the time of [`clock_at`].
fn unix_at(h: u32, m: u32, s: u32) -> i64 {
    Utc.with_ymd_and_hms(2026, 1, 1, h, m, s)
        .unwrap()
        .timestamp()
}

/// An application with a memory driver on `clock` installed.
fn app_on(clock: &FakeClock) -> App {
    let app = App::new();
    let driver: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    app.install::<dyn RateLimiterDriver>(driver);
    app
}

/// `GET /hot` answering `ok`, behind `ip_based(max, window)`.
fn ip_based_route(max: u32, window: Duration) -> Router {
    Router::new()
        .get("/hot", |_req: Request| async { HttpResponse::text("ok") })
        .middleware(RateLimitMiddleware::ip_based(max, window))
}

fn header<'a>(r: &'a HttpResponse, name: &str) -> Option<&'a str> {
    r.header_str(name)
}

// ---------------------------------------------------------------------------
// The seed's 20 x 50 shape, keyed by address.

/// Twenty clients of one IPv6 /64, each at an address of its own, make
/// fifty requests each at once on a multi-threaded runtime: the /64 is one
/// client, so exactly 100 pass, each with its own `X-RateLimit-Remaining`,
/// and each of the 900 refusals asks for the whole window (the clock is
/// frozen, so every hit is at one instant).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_addresses_of_one_64_making_fifty_requests_each_get_exactly_100() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    let router = Arc::new(ip_based_route(100, MINUTE));
    let tasks: Vec<_> = (0..20)
        .map(|client| {
            let router = router.clone();
            let from = peer(&format!("[2001:db8:7:7:{client:x}::1]:4000"));
            tokio::spawn(app.scope(async move {
                let mut answers = Vec::with_capacity(50);
                for _ in 0..50 {
                    answers.push(handle_request_with_peer(&router, get("/hot"), from).await);
                }
                answers
            }))
        })
        .collect();
    let mut answers = Vec::new();
    for task in tasks {
        answers.extend(task.await.unwrap());
    }
    let mut remaining = Vec::new();
    let mut refusals = BTreeMap::new();
    for r in &answers {
        assert_eq!(header(r, "x-ratelimit-limit"), Some("100"));
        match r.status_code() {
            200 => {
                assert_eq!(header(r, "retry-after"), None);
                remaining.push(
                    header(r, "x-ratelimit-remaining")
                        .unwrap()
                        .parse::<u32>()
                        .unwrap(),
                );
            }
            429 => {
                assert_eq!(r.body_text(), "429 Too Many Requests");
                assert_eq!(header(r, "x-ratelimit-remaining"), Some("0"));
                let seen = (
                    header(r, "retry-after").unwrap().to_owned(),
                    header(r, "x-ratelimit-reset").unwrap().to_owned(),
                );
                *refusals.entry(seen).or_insert(0) += 1;
            }
            other => panic!("unexpected status {other}"),
        }
    }
    remaining.sort_unstable();
    assert_eq!(remaining, (0..100).collect::<Vec<u32>>());
    let reset = (unix_at(12, 0, 0) + 60).to_string();
    assert_eq!(
        refusals,
        BTreeMap::from([(("60".to_owned(), reset), 900)]),
        "(Retry-After, X-RateLimit-Reset) of the refusals"
    );
    // The next /64 is another client.
    let other = app
        .scope(handle_request_with_peer(
            &router,
            get("/hot"),
            peer("[2001:db8:7:8::1]:4000"),
        ))
        .await;
    assert_eq!(other.status_code(), 200);
    assert_eq!(header(&other, "x-ratelimit-remaining"), Some("99"));
}

/// The same shape through the crate's server: twenty keep-alive clients of
/// 127.0.0.1, fifty requests each, one per-address limit of 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_loopback_clients_over_the_wire_get_exactly_100() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let server = TestServer::start(ip_based_route(100, MINUTE)).await;
        let replies = storm(&server, 20, 50, "/hot").await;
        let t = tally(&replies);
        assert_eq!((t.admitted, t.refused), (100, 900));
        assert_eq!(t.remaining, (0..100).collect::<Vec<i64>>());
        assert_eq!(t.retry_after, ["60".to_owned()].into());
        assert_eq!(t.reset, [(unix_at(12, 0, 0) + 60).to_string()].into());
        assert_eq!(t.limits, ["100".to_owned()].into());
        assert_eq!(
            t.refusal_bodies,
            ["429 Too Many Requests".to_owned()].into()
        );
        // Another loopback address is another client.
        let r = server
            .send_from(ip("127.0.0.9"), get(&server.url("/hot")))
            .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("x-ratelimit-remaining"), Some("99"));
        server.stop().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Retry-After and X-RateLimit-Reset as the window slides.

/// Three a minute, hits at :00, :10 and :20. Each refusal waits for the hit
/// whose leaving frees a place, in whole seconds rounded up, and
/// `X-RateLimit-Reset` is when it leaves; a hit exactly one window old is
/// out.
#[tokio::test]
async fn each_refusal_waits_for_the_hit_whose_leaving_frees_a_place() {
    let clock = clock_at(9, 0, 0);
    let app = app_on(&clock);
    let router = ip_based_route(3, MINUTE);
    let from = peer("198.51.100.23:5000");
    let send = || app.scope(handle_request_with_peer(&router, get("/hot"), from));
    for (at, left) in [(0, "2"), (10, "1"), (20, "0")] {
        if at > 0 {
            clock.advance(Duration::from_secs(10));
        }
        let r = send().await;
        assert_eq!(
            (r.status_code(), header(&r, "x-ratelimit-remaining")),
            (200, Some(left)),
            ":{at}"
        );
    }
    let base = unix_at(9, 0, 0);
    let mut at = Duration::from_secs(20);
    for (to, retry_after, reset) in [
        (Duration::from_secs(30), "30", base + 60),
        (Duration::from_secs(45), "15", base + 60),
        (Duration::from_millis(59_500), "1", base + 60),
    ] {
        clock.advance(to - at);
        at = to;
        let r = send().await;
        assert_eq!(r.status_code(), 429, "{to:?}");
        assert_eq!(header(&r, "retry-after"), Some(retry_after), "{to:?}");
        assert_eq!(
            header(&r, "x-ratelimit-reset"),
            Some(reset.to_string().as_str()),
            "{to:?}"
        );
        assert_eq!(header(&r, "x-ratelimit-remaining"), Some("0"));
        assert_eq!(header(&r, "x-ratelimit-limit"), Some("3"));
    }
    // :60, the hit of :00 is out: one place, taken.
    clock.advance(Duration::from_millis(500));
    let r = send().await;
    assert_eq!(
        (r.status_code(), header(&r, "x-ratelimit-remaining")),
        (200, Some("0"))
    );
    // :61, the next place frees when the hit of :10 leaves, at 1:10.
    clock.advance(Duration::from_secs(1));
    let r = send().await;
    assert_eq!(r.status_code(), 429);
    assert_eq!(header(&r, "retry-after"), Some("9"));
    assert_eq!(
        header(&r, "x-ratelimit-reset"),
        Some((base + 70).to_string().as_str())
    );
}

// ---------------------------------------------------------------------------
// connections_per_ip under a thousand concurrent requests.

/// A thousand requests of one address arrive at once at a cap of 100 whose
/// handler holds them: exactly 100 run, 900 get the bare 429, and every
/// place comes back once the handlers return.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_thousand_concurrent_requests_of_one_address_hold_exactly_the_cap() {
    let cap = RateLimitMiddleware::connections_per_ip(100);
    let (gate, mut entered_rx) = Gate::new();
    let router = Arc::new(gate.router("/slow", &cap));
    let tasks: Vec<_> = (0..1000)
        .map(|n| {
            let router = router.clone();
            // Ports apart, one /64.
            let from = peer(&format!("[2001:db8:5:5::{:x}]:{}", n % 7 + 1, 1000 + n));
            tokio::spawn(async move { handle_request_with_peer(&router, get("/slow"), from).await })
        })
        .collect();
    for _ in 0..100 {
        entered(&mut entered_rx).await;
    }
    let held_at = ip("2001:db8:5:5::ab");
    support::held::open_becomes(&cap, held_at, 100).await;
    // The 900 refusals come back while the hundred are held.
    let started = std::time::Instant::now();
    while tasks.iter().filter(|t| t.is_finished()).count() < 900 {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the refusals did not come back"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(cap.open_for(held_at), 100);
    let mut answers = Vec::new();
    let mut pending = Vec::new();
    for task in tasks {
        if task.is_finished() {
            answers.push(task.await.unwrap());
        } else {
            pending.push(task);
        }
    }
    assert_eq!((answers.len(), pending.len()), (900, 100));
    gate.release(100);
    for task in pending {
        answers.push(
            support::within("a held request", Duration::from_secs(30), task)
                .await
                .unwrap(),
        );
    }
    let done = answers.iter().filter(|r| r.status_code() == 200).count();
    let refused: Vec<&HttpResponse> = answers.iter().filter(|r| r.status_code() == 429).collect();
    assert_eq!((done, refused.len()), (100, 900));
    for r in refused {
        assert_eq!(r.body_text(), "429 Too Many Requests");
        assert_eq!(header(r, "retry-after"), None);
        assert_eq!(header(r, "x-ratelimit-remaining"), None);
    }
    assert_eq!(cap.open_for(held_at), 0);
    assert_eq!(cap.addresses_open(), 0);
    assert!(
        entered_rx.try_recv().is_err(),
        "a refused request ran the handler"
    );
}

// ---------------------------------------------------------------------------
// Forwarded headers a trusted proxy passes on malformed.

/// What `Request::ip()` reads behind the trusted proxy 203.0.113.10 for
/// each `X-Forwarded-For` (the raw bytes of one line): an entry that is no
/// address ends the walk at the proxy that wrote it, and no spelling panics.
#[tokio::test]
async fn malformed_forwarded_entries_end_the_walk_at_their_writer() {
    let app = App::new();
    app.install(Arc::new(
        "203.0.113.10,10.0.0.0/8".parse::<TrustedProxies>().unwrap(),
    ));
    let router = Router::new().get("/ip", |req: Request| async move {
        HttpResponse::text(req.ip().unwrap_or_else(|| "none".into()))
    });
    let proxy = "203.0.113.10";
    let cases: Vec<(&[u8], &str)> = vec![
        (b"", proxy),
        (b",", proxy),
        (b" , ,", proxy),
        (b"unknown", proxy),
        (b"1.2.3.4.5", proxy),
        (b"256.1.1.1", proxy),
        (b"1.2.3.4:", proxy),
        (b":80", proxy),
        (b"[::1", proxy),
        (b"::1]", proxy),
        (b"[]", proxy),
        (b"[]:80", proxy),
        (b"[1.2.3.4]:80", proxy),
        (b"1.2.3.4:70000", proxy),
        (b"1.2.3.4 5.6.7.8", proxy),
        (b"\"198.51.100.7\"", proxy),
        (b"for=198.51.100.7", proxy),
        (b"198.51.100.7, \xff\xfe", proxy),
        (b"198.51.100.7, 10.0.0.1, nope", proxy),
        (b"198.51.100.7, nope, 10.0.0.1", "10.0.0.1"),
        (b"nope, 198.51.100.7", "198.51.100.7"),
        (b"198.51.100.7,,10.0.0.1", "10.0.0.1"),
        (b"\t198.51.100.7\t", "198.51.100.7"),
        (b"::FFFF:CB00:7101", "203.0.113.1"),
        (b"[2001:DB8::7]:443", "2001:db8::7"),
    ];
    // The address the route sees for `line`, from a trusted proxy.
    let seen = |line: Vec<u8>| {
        let request = http::Request::get("/ip")
            .header(
                "X-Forwarded-For",
                http::HeaderValue::from_bytes(&line).unwrap(),
            )
            .body(Full::<Bytes>::default())
            .unwrap();
        app.scope(handle_request_with_peer(
            &router,
            request,
            peer("203.0.113.10:443"),
        ))
    };
    for (line, want) in cases {
        let r = seen(line.to_vec()).await;
        assert_eq!(r.status_code(), 200, "{:?}", String::from_utf8_lossy(line));
        assert_eq!(r.body_text(), want, "{:?}", String::from_utf8_lossy(line));
    }
    let long = format!("{}, 198.51.100.7", "9".repeat(100_000));
    assert_eq!(seen(long.into_bytes()).await.body_text(), "198.51.100.7");
}

// ---------------------------------------------------------------------------
// A per-recipient limit and the multipart body a handler reads.

/// `POST /password/reset` behind the per-recipient limit of the docs (3 in
/// 15 minutes, `key_reads_body(4096)`, `only_when(names_identity)`), whose
/// handler reads the first `email` part with multer (the parser under
/// axum's `Multipart`) and records the mailbox it would send to.
fn multer_reset_route(sent_to: Arc<std::sync::Mutex<Vec<String>>>) -> Router {
    let limiter: Arc<dyn RateLimiterDriver> = Arc::new(InMemoryRateLimiter::new());
    let per_recipient = RateLimitMiddleware::new(
        limiter,
        SlidingWindowConfig::new(3, Duration::from_secs(900)),
        |req| identity_key(req, "email", "auth-issuance"),
    )
    .key_reads_body(4096)
    .only_when(|req| names_identity(req, "email"));
    Router::new()
        .post("/password/reset", move |mut req: Request| {
            let sent_to = sent_to.clone();
            async move {
                let label = req.header("content-type").unwrap_or("").to_owned();
                let body = req.bytes().await.unwrap();
                let Ok(boundary) = multer::parse_boundary(&label) else {
                    return HttpResponse::text("no boundary").status(400);
                };
                let stream =
                    futures_util::stream::once(
                        async move { Ok::<_, std::convert::Infallible>(body) },
                    );
                let mut multipart = multer::Multipart::new(stream, boundary);
                while let Ok(Some(field)) = multipart.next_field().await {
                    if field.name() == Some("email") {
                        let email = field.text().await.unwrap_or_default();
                        sent_to.lock().unwrap().push(email);
                        return HttpResponse::text("sent");
                    }
                }
                HttpResponse::text("no email").status(422)
            }
        })
        .middleware(per_recipient)
}

/// Ten requests from ten addresses posting `body` (labelled with the
/// boundary `real`) to [`multer_reset_route`]: the mailbox multer reads,
/// `victim`, gets exactly three messages.
async fn ten_posts_reach_the_mailbox_three_times(body: &'static str, victim: &str) {
    let sent_to = Arc::new(std::sync::Mutex::new(Vec::new()));
    let router = multer_reset_route(sent_to.clone());
    let mut statuses = Vec::new();
    for n in 0..10 {
        let request = http::Request::post("/password/reset")
            .header("content-type", "multipart/form-data; boundary=real")
            .body(Full::new(Bytes::from(body)))
            .unwrap();
        let from = peer(&format!("198.51.100.{}:4000", n + 1));
        statuses.push(
            handle_request_with_peer(&router, request, from)
                .await
                .status_code(),
        );
    }
    let sent = sent_to.lock().unwrap().clone();
    assert!(sent.iter().all(|s| s == victim), "{sent:?}");
    assert_eq!(
        statuses,
        [200, 200, 200, 429, 429, 429, 429, 429, 429, 429],
        "the victim's mailbox got {} messages",
        sent.len()
    );
    assert_eq!(sent.len(), 3);
}

/// A part whose header block holds a line that opens with `--real` (a
/// header named `--real-x`, which multer reads as a header like any other)
/// names the mailbox for multer all the same: the part's headers run to
/// their blank line, and ten requests from ten addresses reach the victim
/// three times, as every other spelling of the part does.
#[tokio::test]
async fn a_header_line_opening_with_the_boundary_does_not_hide_the_mailbox() {
    let body = "--real\r\n\
Content-Disposition: form-data; name=\"email\"\r\n\
--real-x: y\r\n\
\r\n\
victim@mail.test\r\n\
--real--\r\n";
    ten_posts_reach_the_mailbox_three_times(body, "victim@mail.test").await;
}

/// A value that opens with `--real` right after the blank line (the
/// mailbox `--real@mail.test`) is read whole, as multer reads it: the next
/// delimiter is looked for only after the part's headers.
#[tokio::test]
async fn a_value_opening_with_the_boundary_is_read_whole() {
    let body = "--real\r\n\
Content-Disposition: form-data; name=\"email\"\r\n\
\r\n\
--real@mail.test\r\n\
--real--\r\n";
    ten_posts_reach_the_mailbox_three_times(body, "--real@mail.test").await;
}
