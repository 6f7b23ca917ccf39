//! Statements of the README and the guides under docs/, checked as written.
//!
//! Each test quotes the sentence it checks. Memory backends run on a frozen
//! clock; nothing here sleeps to pass a window.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use support::boot::{plan, refusal};
use suprnova::cache::MemoryStore;
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver};
use suprnova::server::handle_request_with_peer;
use suprnova::{GlobalLimit, HttpResponse, Limit, Request, Router, ThrottleRequestsMiddleware};

const DEPLOYMENT: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/deployment.md"));
const RATE_LIMITING: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/docs/rate-limiting.md"
));
const MIGRATION: &str = include_str!(concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/docs/migration-from-laravel.md"
));
const README: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md"));
const ENV_EXAMPLE: &str = include_str!(concat!(env!("CARGO_MANIFEST_DIR"), "/.env.example"));

/// The blocks fenced as `fence` (```text, ```sh) of a guide, in order,
/// without their fences and their indentation.
fn blocks<'a>(guide: &'a str, fence: &str) -> Vec<String> {
    let mut found = Vec::new();
    let mut current: Option<Vec<&'a str>> = None;
    for line in guide.lines() {
        let bare = line.trim_start();
        match &mut current {
            None if bare == format!("```{fence}") => current = Some(Vec::new()),
            None => {}
            Some(lines) if bare == "```" => {
                found.push(lines.join("\n"));
                current = None;
            }
            Some(lines) => lines.push(bare),
        }
    }
    found
}

/// The one ```text block of `guide` that starts with `start`.
fn quoted(guide: &str, start: &str) -> String {
    let found: Vec<String> = blocks(guide, "text")
        .into_iter()
        .filter(|b| b.starts_with(start))
        .collect();
    assert_eq!(found.len(), 1, "one block starting {start:?}");
    found.into_iter().next().unwrap()
}

const START: u64 = 1_767_268_800; // 2026-01-01T12:00:00Z

/// An application with the memory driver and the memory cache, both on
/// `clock`.
fn app_on(clock: &FakeClock) -> App {
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    app.install(Arc::new(CacheRateLimiter::new(store, clock.shared())));
    app
}

async fn get(router: &Router, uri: &str, peer: &str) -> HttpResponse {
    let request = http::Request::get(uri)
        .body(Full::<Bytes>::default())
        .unwrap();
    handle_request_with_peer(router, request, peer.parse::<SocketAddr>().unwrap()).await
}

fn ok(path: &str) -> Router {
    Router::new().get(path, |_req: Request| async { HttpResponse::text("ok") })
}

fn header<'a>(r: &'a HttpResponse, name: &str) -> Option<&'a str> {
    r.header_str(name)
}

// ---------------------------------------------------------------------------
// rate-limiting.md, "Limit": "`.by(key)` sets the bucket key. An empty key is
// one bucket for every caller." (The API reference: "Empty key is "global"
// (every caller shares one bucket).")
#[tokio::test]
async fn a_limit_with_an_empty_key_is_one_bucket_for_every_caller() {
    let clock = FakeClock::at_unix(START);
    let app = app_on(&clock);
    app.scope(async {
        let router = ok("/global").middleware(ThrottleRequestsMiddleware::with_limits(vec![
            Limit::per_minute(2),
        ]));
        assert_eq!(
            get(&router, "/global", "203.0.113.5:1").await.status_code(),
            200
        );
        assert_eq!(
            get(&router, "/global", "198.51.100.7:1")
                .await
                .status_code(),
            200
        );
        let third = get(&router, "/global", "192.0.2.9:1").await;
        assert_eq!(third.status_code(), 429);
        assert_eq!(third.body_text(), "Too Many Attempts.");
    })
    .await;
}

// rate-limiting.md, "Limit": "`Limit::none()` returns `Unlimited`, a
// `GlobalLimit` of `i64::MAX` attempts ... `GlobalLimit::new(max,
// decay_seconds)` is a limit with an empty key, one bucket for every caller."
// migration-from-laravel.md: "`new GlobalLimit(1000)` | `GlobalLimit::new(1_000, 60)`".
#[test]
fn global_and_unlimited_limits_have_the_documented_shape() {
    let global = GlobalLimit::new(1_000, 60).into_limit();
    assert_eq!(global.key, "");
    assert_eq!((global.max_attempts, global.decay_seconds), (1_000, 60));
    let none = Limit::none();
    assert_eq!(none.max_attempts, i64::MAX);
    assert_eq!(none.key, "");
}

// rate-limiting.md, "Per address: ip_based": "With no driver installed the
// lookup fails as a backend error (`RateLimitError::NotInstalled`), and the
// backend-error policy decides." "When the backend fails": FailOpen "passes
// to the handler, without rate-limit headers"; FailClosed "`503 Service
// Unavailable` with `Retry-After: 1`".
#[tokio::test]
async fn ip_based_with_no_driver_installed_follows_the_policy() {
    App::new()
        .scope(async {
            let open =
                ok("/open").middleware(RateLimitMiddleware::ip_based(1, Duration::from_secs(60)));
            let closed = ok("/closed").middleware(
                RateLimitMiddleware::ip_based(1, Duration::from_secs(60))
                    .on_backend_error(BackendErrorPolicy::FailClosed),
            );
            let router = open.merge(closed);
            for _ in 0..3 {
                let passed = get(&router, "/open", "203.0.113.5:1").await;
                assert_eq!(passed.status_code(), 200);
                assert_eq!(passed.body_text(), "ok");
                assert_eq!(header(&passed, "x-ratelimit-limit"), None);
                assert_eq!(header(&passed, "x-ratelimit-remaining"), None);
                let refused = get(&router, "/closed", "203.0.113.5:1").await;
                assert_eq!(refused.status_code(), 503);
                assert_eq!(refused.body_text(), "503 Service Unavailable");
                assert_eq!(header(&refused, "retry-after"), Some("1"));
            }
        })
        .await;
}

// rate-limiting.md, "RateLimitMiddleware": "Over quota: `429` with the body
// `429 Too Many Requests`, `Retry-After` (whole seconds, rounded up, at least
// 1), `X-RateLimit-Limit`, `X-RateLimit-Remaining: 0` and
// `X-RateLimit-Reset`." "Admitted: the handler's response with
// `X-RateLimit-Limit` and `X-RateLimit-Remaining`."
#[tokio::test]
async fn an_ip_based_refusal_carries_every_documented_header() {
    let clock = FakeClock::at_unix(START);
    let app = app_on(&clock);
    app.scope(async {
        let router =
            ok("/login").middleware(RateLimitMiddleware::ip_based(2, Duration::from_secs(10)));
        let first = get(&router, "/login", "203.0.113.5:1").await;
        assert_eq!(header(&first, "x-ratelimit-limit"), Some("2"));
        assert_eq!(header(&first, "x-ratelimit-remaining"), Some("1"));
        assert_eq!(header(&first, "retry-after"), None);
        assert_eq!(header(&first, "x-ratelimit-reset"), None);
        clock.advance(Duration::from_millis(3_500));
        let second = get(&router, "/login", "203.0.113.5:1").await;
        assert_eq!(header(&second, "x-ratelimit-remaining"), Some("0"));
        let refused = get(&router, "/login", "203.0.113.5:1").await;
        assert_eq!(refused.status_code(), 429);
        assert_eq!(refused.body_text(), "429 Too Many Requests");
        assert_eq!(header(&refused, "x-ratelimit-limit"), Some("2"));
        assert_eq!(header(&refused, "x-ratelimit-remaining"), Some("0"));
        // The first hit leaves the window 6.5 s from now: 7 whole seconds.
        assert_eq!(header(&refused, "retry-after"), Some("7"));
        assert_eq!(
            header(&refused, "x-ratelimit-reset"),
            Some((START + 10).to_string().as_str())
        );
    })
    .await;
}

// rate-limiting.md, "RateLimitMiddleware": "The limit is invalid (a zero
// window): `500` and an `error` log line." "The sliding-window driver": the
// `Config` error is for "a limit that makes no sense (`Config`, such as a
// window shorter than a millisecond)".
#[tokio::test]
async fn a_window_under_a_millisecond_answers_500_without_running_the_handler() {
    let clock = FakeClock::at_unix(START);
    let app = app_on(&clock);
    app.scope(async {
        for window in [Duration::ZERO, Duration::from_micros(500)] {
            let ran = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let seen = ran.clone();
            let router = Router::new()
                .get("/x", move |_req: Request| {
                    let seen = seen.clone();
                    async move {
                        seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                        HttpResponse::text("ok")
                    }
                })
                .middleware(
                    RateLimitMiddleware::ip_based(5, window)
                        .on_backend_error(BackendErrorPolicy::FailOpen),
                );
            let answer = get(&router, "/x", "203.0.113.5:1").await;
            assert_eq!(answer.status_code(), 500, "{window:?}");
            assert_eq!(
                ran.load(std::sync::atomic::Ordering::SeqCst),
                0,
                "{window:?}"
            );
        }
    })
    .await;
}

// rate-limiting.md, "The sliding-window driver": "`max_requests: 0` refuses
// everything." (InMemoryRateLimiter: "its `retry_after` is the window
// length, since no place will ever free up.")
#[tokio::test]
async fn a_limit_of_zero_refuses_everything_for_a_whole_window() {
    let clock = FakeClock::at_unix(START);
    let app = app_on(&clock);
    app.scope(async {
        let router =
            ok("/none").middleware(RateLimitMiddleware::ip_based(0, Duration::from_secs(60)));
        for _ in 0..3 {
            let refused = get(&router, "/none", "203.0.113.5:1").await;
            assert_eq!(refused.status_code(), 429);
            assert_eq!(header(&refused, "retry-after"), Some("60"));
            assert_eq!(header(&refused, "x-ratelimit-limit"), Some("0"));
            clock.advance(Duration::from_secs(61));
        }
    })
    .await;
}

// The guides bound a window only from below (at least a millisecond) on the
// memory driver; a long window is a valid limit ("a lifetime's limit").
#[tokio::test]
async fn a_very_long_window_on_the_memory_driver_admits_then_refuses() {
    let clock = FakeClock::at_unix(START);
    let app = app_on(&clock);
    app.scope(async {
        for window in [Duration::from_secs(100 * 365 * 86_400), Duration::MAX] {
            let router = ok("/long").middleware(RateLimitMiddleware::ip_based(1, window));
            assert_eq!(
                get(&router, "/long", "203.0.113.5:1").await.status_code(),
                200,
                "{window:?}"
            );
            let refused = get(&router, "/long", "203.0.113.5:1").await;
            assert_eq!(refused.status_code(), 429, "{window:?}");
            assert!(header(&refused, "retry-after").is_some());
        }
    })
    .await;
}

// rate-limiting.md, "Composing limits": "Two limits on one bucket key do not
// add up: every call trims the bucket to its own window, so the shorter
// window drops hits the longer one still counts (one request a second under
// 10 a second and 30 a minute on one key passes 60 a minute)."
#[tokio::test]
async fn two_limits_on_one_key_pass_sixty_a_minute_at_one_a_second() {
    use suprnova::rate_limit::SlidingWindowConfig;
    let clock = FakeClock::at_unix(START);
    let driver: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let router = ok("/k")
        .middleware(RateLimitMiddleware::new(
            driver.clone(),
            SlidingWindowConfig::new(10, Duration::from_secs(1)),
            |_req| "same".to_owned(),
        ))
        .middleware(RateLimitMiddleware::new(
            driver,
            SlidingWindowConfig::new(30, Duration::from_secs(60)),
            |_req| "same".to_owned(),
        ));
    let mut passed = 0;
    for _ in 0..60 {
        if get(&router, "/k", "203.0.113.5:1").await.status_code() == 200 {
            passed += 1;
        }
        clock.advance(Duration::from_secs(1));
    }
    assert_eq!(passed, 60);
}

// ---------------------------------------------------------------------------
// The messages the guides quote, compared with the ones the crate gives.

// deployment.md, "Production fails closed on the in-memory driver": the
// quoted refusal of an unset RATE_LIMIT_DRIVER.
#[test]
fn the_production_refusal_quoted_in_deployment_md_is_the_one_boot_gives() {
    let quoted = quoted(
        DEPLOYMENT,
        "refusing to boot in production: RATE_LIMIT_DRIVER is unset",
    );
    assert_eq!(refusal(&[]), quoted);
    assert_eq!(
        refusal(&[("APP_ENV", "production"), ("RATE_LIMIT_DRIVER", "")]),
        quoted
    );
}

// deployment.md: "The message names the value it got:" followed by the
// refusal of `RATE_LIMIT_DRIVER=Redis`, cut at "Per-process buckets mean ...".
#[test]
fn the_capitalised_driver_refusal_quoted_in_deployment_md_is_the_one_boot_gives() {
    let quoted = quoted(
        DEPLOYMENT,
        "refusing to boot in production: RATE_LIMIT_DRIVER=\"Redis\"",
    );
    let shown = quoted
        .strip_suffix(" ...")
        .expect("the quote is cut with ...");
    let refused = refusal(&[("RATE_LIMIT_DRIVER", "Redis")]);
    assert!(refused.starts_with(shown), "{refused}");
    assert_eq!(refused, refusal(&[]).replacen(
        "RATE_LIMIT_DRIVER is unset, which defaults to the in-memory limiter.",
        "RATE_LIMIT_DRIVER=\"Redis\" is not a driver (did you mean redis?): the drivers are memory and redis, spelled exactly, and an unrecognised value falls back to the in-memory limiter.",
        1,
    ));
}

// deployment.md, "Redis": "A missing or malformed RATE_LIMIT_REDIS_URL
// refuses boot in every environment ... The message shows an example".
#[test]
fn the_missing_redis_url_message_quoted_in_deployment_md_is_the_one_boot_gives() {
    let quoted = quoted(DEPLOYMENT, "RATE_LIMIT_REDIS_URL is unset:");
    for env in ["production", "local", "staging"] {
        assert_eq!(
            refusal(&[("APP_ENV", env), ("RATE_LIMIT_DRIVER", "redis")]),
            quoted,
            "{env}"
        );
    }
}

// deployment.md, "The client address behind proxies": "An entry that is
// neither an address nor a range refuses boot, and so does a range of every
// address. The message names the entry:"
#[test]
fn the_proxy_refusal_quoted_in_deployment_md_is_the_one_boot_gives() {
    let quoted = quoted(DEPLOYMENT, "APP_TRUSTED_PROXIES=");
    assert_eq!(
        refusal(&[
            ("APP_ENV", "local"),
            ("APP_TRUSTED_PROXIES", "10.0.0.5, 0.0.0.0/0")
        ]),
        quoted
    );
}

// deployment.md, "Checking the setup": the summary line's proxies, and the
// "sh" blocks of APP_TRUSTED_PROXIES that the guide gives for nginx, an ALB
// and Cloudflare, each accepted as written.
#[test]
fn every_proxy_list_the_guides_give_boots() {
    let lists: Vec<String> = [DEPLOYMENT, RATE_LIMITING]
        .iter()
        .flat_map(|guide| blocks(guide, "sh"))
        .flat_map(|block| {
            block
                .split('\n')
                .filter_map(|l| l.strip_prefix("APP_TRUSTED_PROXIES="))
                .map(str::to_owned)
                .collect::<Vec<_>>()
        })
        .collect();
    assert!(lists.len() >= 4, "{lists:?}");
    for list in &lists {
        let plan = plan(&[("APP_ENV", "local"), ("APP_TRUSTED_PROXIES", list)])
            .unwrap_or_else(|e| panic!("{list}: {e}"));
        assert_eq!(
            plan.trusted_proxies.to_string(),
            list.replace(' ', ""),
            "{list}"
        );
    }
}

// deployment.md: "`.env.example` at the root of the repository lists every
// variable with its default, but for `APP_ENV`". Every variable of the two
// tables of "The variables" is in it, with the table's default.
#[test]
fn env_example_lists_every_variable_of_the_deployment_tables_with_its_default() {
    let section = DEPLOYMENT
        .split("## The variables")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    let mut seen = 0;
    for row in section.lines().filter(|l| l.starts_with("| `")) {
        let cells: Vec<&str> = row.split(" | ").collect();
        let names: Vec<&str> = cells[0].split('`').skip(1).step_by(2).collect();
        let defaults: Vec<&str> = cells[1].split('`').skip(1).step_by(2).collect();
        for (i, name) in names.iter().enumerate() {
            seen += 1;
            let line = ENV_EXAMPLE
                .lines()
                .position(|l| {
                    l.trim_start_matches("# ")
                        .strip_prefix(name)
                        .is_some_and(|r| r.starts_with('='))
                })
                .unwrap_or_else(|| panic!("{name} is not in .env.example"));
            if *name == "APP_ENV" {
                continue;
            }
            let comment = ENV_EXAMPLE.lines().nth(line - 1).unwrap();
            let comment = if comment.starts_with("# Set blank") {
                ENV_EXAMPLE.lines().nth(line - 2).unwrap()
            } else {
                comment
            };
            match defaults.get(i) {
                Some(default) => assert!(
                    comment.contains(&format!("Default: {default}")),
                    "{name}: the table says {default}, .env.example says {comment:?}"
                ),
                None => assert!(
                    comment.contains("Default: none") || comment.contains("Default: unset"),
                    "{name}: the table gives no default, .env.example says {comment:?}"
                ),
            }
        }
    }
    assert!(seen >= 20, "{seen} variables read from the tables");
}

// ---------------------------------------------------------------------------
// rate-limiting.md, "Limiting per recipient": "The value is normalised and
// hashed. It is trimmed of whitespace and of what Laravel's `TrimStrings`
// middleware trims besides (U+FEFF, a byte order mark; U+200B, zero width
// space; U+200E, left-to-right mark) at either end, so a value a
// Laravel-ported handler reads trimmed shares its bucket".
//
// TrimStrings trims `~^[\s\x{FEFF}\x{200B}\x{200E}]+|[\s\x{FEFF}\x{200B}\x{200E}]+$~u`,
// and PHP's `/u` turns on PCRE2_UCP, under which `\s` is `\p{Z}`, `\h` and
// `\v`: `\h` holds U+180E (Mongolian vowel separator), which is not
// Unicode White_Space, so `char::is_whitespace` keeps it. A handler that
// trims as TrimStrings does sends "victim@mail.test\u{180E}" to the victim,
// and each extra U+180E opens a fresh bucket for the same mailbox.
#[tokio::test]
async fn a_mongolian_vowel_separator_trimmed_by_trim_strings_shares_the_recipients_bucket() {
    use suprnova::keys::sha256_hex;
    use suprnova::rate_limit::{SlidingWindowConfig, identity_key};

    let named = |value: &str| {
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("email", value)
            .finish();
        Request::new(
            http::Request::get(format!("/reset?{query}"))
                .body(Full::<Bytes>::default())
                .unwrap(),
        )
        .with_peer("203.0.113.50:4000".parse().unwrap())
    };
    let victim = format!("auth-issuance:id:{}", sha256_hex("victim@mail.test"));
    for value in [
        "victim@mail.test\u{180E}",
        "\u{180E}victim@mail.test",
        "victim@mail.test\u{180E}\u{180E}",
    ] {
        assert_eq!(
            identity_key(&named(value), "email", "auth-issuance"),
            victim,
            "{value:?}"
        );
    }

    // Through the middleware: three resets a quarter hour for one mailbox.
    let clock = FakeClock::at_unix(START);
    let driver: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    let router = Router::new()
        .get("/reset", |_req: Request| async {
            HttpResponse::text("sent")
        })
        .middleware(RateLimitMiddleware::new(
            driver,
            SlidingWindowConfig::new(3, Duration::from_secs(900)),
            |req| identity_key(req, "email", "auth-issuance"),
        ));
    let mut sent = 0;
    for extra in 0..8 {
        let value = format!("victim@mail.test{}", "\u{180E}".repeat(extra));
        let query = form_urlencoded::Serializer::new(String::new())
            .append_pair("email", &value)
            .finish();
        let answer = get(
            &router,
            &format!("/reset?{query}"),
            &format!("198.51.100.{}:1", extra + 1),
        )
        .await;
        if answer.status_code() == 200 {
            sent += 1;
        }
    }
    assert_eq!(sent, 3, "one mailbox, three resets a quarter hour");
}

// rate-limiting.md, "Limit": `Limit::new(123, Duration::from_secs(45)); //
// 123 per 45 seconds`: `Limit::new(max, window)` is `max` per `window`. A
// window under a second is dropped to 0 s, which "opens none ... and never
// limits" (rate-limiting.md, "Storage layout"): `Limit::new(2,
// Duration::from_millis(500))` admits every request, where a Rust caller
// who passed a `Duration` expects 2 per half second, or a refusal.
#[tokio::test]
async fn a_limit_of_two_per_half_second_refuses_the_third_request_at_once() {
    let clock = FakeClock::at_unix(START);
    let app = app_on(&clock);
    app.scope(async {
        let router = ok("/half").middleware(ThrottleRequestsMiddleware::with_limits(vec![
            Limit::new(2, Duration::from_millis(500)).by("k"),
        ]));
        let mut admitted = 0;
        for _ in 0..10 {
            if get(&router, "/half", "203.0.113.5:1").await.status_code() == 200 {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 2, "10 requests in one instant under 2 per 500 ms");
    })
    .await;
}

// ---------------------------------------------------------------------------
// deployment.md, "Booting": "`serve` and `bind` ask the kernel to hold up to
// 1,024 connections the server has not accepted yet
// (`server::LISTEN_BACKLOG`) ... Linux caps the queue at
// `net.core.somaxconn`", and "Every accepted connection has TCP keep-alive
// (`server::KEEPALIVE_IDLE`): a peer that vanishes without a word is found
// gone, and its connection closed, about 90 seconds after it fell silent".
// Read off the kernel with `ss`; skipped where `ss` is missing.
#[tokio::test]
async fn the_listen_queue_and_keep_alive_are_the_kernels_as_deployment_md_says() {
    use suprnova::server::{KEEPALIVE_IDLE, KEEPALIVE_INTERVAL, KEEPALIVE_PROBES, LISTEN_BACKLOG};
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    assert_eq!(LISTEN_BACKLOG, 1_024);
    let found_gone_after = KEEPALIVE_IDLE + KEEPALIVE_INTERVAL * KEEPALIVE_PROBES;
    assert_eq!(found_gone_after, Duration::from_secs(90));

    let ss = |args: &[&str]| {
        std::process::Command::new("ss")
            .args(args)
            .output()
            .ok()
            .filter(|o| o.status.success())
            .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
    };
    if ss(&["-V"]).is_none() {
        eprintln!("ss is missing; skipped");
        return;
    }
    let server = suprnova::server::bind("127.0.0.1:0").await.unwrap();
    let addr = server.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve_with_shutdown(ok("/"), async {
        let _ = stopped.await;
    }));
    let port = addr.port().to_string();
    let filter = format!("sport = :{port}");

    let listening = ss(&["-tnH", "state", "listening", &filter]).unwrap();
    let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(4_096);
    let queue: u32 = listening
        .split_whitespace()
        .nth(1)
        .and_then(|q| q.parse().ok())
        .unwrap_or_else(|| panic!("{listening:?}"));
    assert_eq!(queue, LISTEN_BACKLOG.min(somaxconn), "{listening:?}");

    let mut client = tokio::net::TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nHost: a\r\n\r\n")
        .await
        .unwrap();
    let mut answer = [0_u8; 256];
    let read = client.read(&mut answer).await.unwrap();
    assert!(answer[..read].starts_with(b"HTTP/1.1 200"));
    let established = ss(&["-tnoH", "state", "established", &filter]).unwrap();
    // `ss` writes the time left as `59sec`, or `1min` for a whole minute.
    let idle = established
        .split("timer:(keepalive,")
        .nth(1)
        .and_then(|rest| rest.split(',').next())
        .and_then(|left| match left.strip_suffix("sec") {
            Some(secs) => secs.parse::<u64>().ok(),
            None => left
                .strip_suffix("min")
                .and_then(|m| m.parse::<u64>().ok())
                .map(|m| m * 60),
        })
        .unwrap_or_else(|| panic!("no keep-alive timer: {established:?}"));
    assert!(
        idle <= KEEPALIVE_IDLE.as_secs() && idle + 5 >= KEEPALIVE_IDLE.as_secs(),
        "{established:?}"
    );
    drop(client);
    let _ = stop.send(());
    let _ = tokio::time::timeout(Duration::from_secs(10), serving).await;
}

// deployment.md, "Redis": "A missing or malformed `RATE_LIMIT_REDIS_URL`
// refuses boot in every environment ... The message shows an example, and
// it hides credentials". A URL whose `://` is mistyped (`redis:/`,
// `redis//`) or missing (`app:s3cret@host:6379`) is malformed, and its
// refusal, which goes to the boot log, must hide the password as the
// refusal of a well-formed URL does; the same for the cache's `REDIS_URL`.
// So must a password given in a query pair the connection does not read
// (`?password=`, where only `?pass=` is read after a socket's path): the
// refusal hides `?pass=` and `?user=`, and shows `?password=` whole.
#[test]
fn a_malformed_redis_url_never_shows_its_password() {
    for url in [
        "redis:/:s3cret@cache.internal:6379",
        "redis//:s3cret@cache.internal:6379",
        "redis:s3cret@cache.internal:6379",
        "app:s3cret@cache.internal:6379",
        "redis://cache.internal:6379/?password=s3cret",
        "unix:///run/redis/redis.sock?password=s3cret",
    ] {
        for pairs in [
            [
                ("APP_ENV", "local"),
                ("RATE_LIMIT_DRIVER", "redis"),
                ("RATE_LIMIT_REDIS_URL", url),
            ],
            [
                ("APP_ENV", "local"),
                ("CACHE_STORE", "redis"),
                ("REDIS_URL", url),
            ],
        ] {
            let refused = refusal(&pairs);
            assert!(!refused.contains("s3cret"), "{refused}");
            assert!(refused.contains("***"), "{refused}");
        }
    }
    // A well-formed URL that is refused shows it hidden, as the guide says.
    let refused = refusal(&[
        ("APP_ENV", "local"),
        ("RATE_LIMIT_DRIVER", "redis"),
        (
            "RATE_LIMIT_REDIS_URL",
            "redis://:s3cret@cache.internal:6379?db=3",
        ),
    ]);
    assert!(!refused.contains("s3cret"), "{refused}");
}

// deployment.md, "The variables": APP_TRUSTED_PROXIES: "An IPv4 part with a
// leading zero (`010.0.0.5`, which some tools read as octal) is refused, in
// a range as in an address." "Spaces around entries are ignored".
#[test]
fn an_ipv4_part_with_a_leading_zero_is_refused_in_an_address_and_a_range() {
    for entry in [
        "010.0.0.5",
        "10.0.0.05",
        "010.0.0.0/8",
        "10.00.0.0/16",
        "::ffff:010.0.0.5",
    ] {
        let refused = refusal(&[
            ("APP_ENV", "local"),
            ("APP_TRUSTED_PROXIES", &format!("10.0.0.6, {entry}")),
        ]);
        assert!(
            refused.starts_with("APP_TRUSTED_PROXIES=") && refused.contains(&format!("{entry:?}")),
            "{refused}"
        );
    }
    let plan = plan(&[
        ("APP_ENV", "local"),
        ("APP_TRUSTED_PROXIES", " 10.0.0.5 ,  10.0.0.0/8 "),
    ])
    .unwrap();
    assert_eq!(plan.trusted_proxies.to_string(), "10.0.0.5,10.0.0.0/8");
}

// deployment.md, "The variables": "`RATE_LIMIT_REDIS_URL` and
// `RATE_LIMIT_REDIS_PREFIX` are read only when the driver is `redis`;
// `REDIS_URL`, `REDIS_HOST`, `REDIS_PORT`, `REDIS_USERNAME`,
// `REDIS_PASSWORD` and `REDIS_CACHE_DB` only when `CACHE_STORE` (or
// `CACHE_DRIVER`) is `redis`; the two `RATE_LIMIT_REDIS_*_MS` timeouts when
// the driver or `CACHE_STORE` is `redis`, and a malformed one then refuses
// boot even on the in-memory driver. The other variables are checked in
// every environment".
#[test]
fn each_variable_is_read_only_where_deployment_md_says() {
    let unread = [
        ("RATE_LIMIT_REDIS_URL", "not a url"),
        ("RATE_LIMIT_REDIS_PREFIX", "app\u{FFFD}:"),
        ("REDIS_URL", "not a url"),
        ("REDIS_HOST", "bad host"),
        ("REDIS_PORT", "0"),
        ("REDIS_USERNAME", "u\u{FFFD}"),
        ("REDIS_PASSWORD", "p\u{FFFD}"),
        ("REDIS_CACHE_DB", "-1"),
        ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", "1s"),
        ("RATE_LIMIT_REDIS_TIMEOUT_MS", "0"),
    ];
    // Neither side on Redis: none of them is read.
    for pair in unread {
        assert!(plan(&[("APP_ENV", "local"), pair]).is_ok(), "{pair:?}");
    }
    // The cache on Redis, the driver in memory: a malformed timeout refuses,
    // and the driver's URL and prefix are still not read.
    for timeout in [
        "RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS",
        "RATE_LIMIT_REDIS_TIMEOUT_MS",
    ] {
        let refused = refusal(&[
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            (timeout, "1s"),
        ]);
        assert!(
            refused.starts_with(&format!("{timeout}=\"1s\" is invalid")),
            "{refused}"
        );
    }
    for pair in [unread[0], unread[1]] {
        assert!(
            plan(&[("APP_ENV", "local"), ("CACHE_DRIVER", "redis"), pair]).is_ok(),
            "{pair:?}"
        );
    }
    // The driver on Redis, the cache in memory: the cache's variables are
    // not read.
    for pair in &unread[2..8] {
        assert!(
            plan(&[
                ("APP_ENV", "local"),
                ("RATE_LIMIT_DRIVER", "redis"),
                ("RATE_LIMIT_REDIS_URL", "redis://cache.internal:6379"),
                *pair
            ])
            .is_ok(),
            "{pair:?}"
        );
    }
    // The others are checked in every environment, off Redis too.
    for pair in [
        ("RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION", "maybe"),
        ("APP_TRUSTED_PROXIES", "unknown"),
        ("CACHE_STORE", "file"),
        ("APP_ENV", "prod"),
        ("CACHE_PREFIX", "p\u{FFFD}"),
        ("REDIS_PREFIX", "p\u{FFFD}"),
        ("APP_NAME", "a\u{FFFD}"),
    ] {
        for env in ["local", "staging", "testing", "development"] {
            let pairs = if pair.0 == "APP_ENV" {
                vec![pair]
            } else {
                vec![("APP_ENV", env), pair]
            };
            let refused = refusal(&pairs);
            assert!(refused.starts_with(&format!("{}=", pair.0)), "{refused}");
        }
    }
}

// migration-from-laravel.md, "Prefixes": "The full Redis key of a counter is
// `<REDIS_PREFIX><CACHE_PREFIX><key>`" with the table of each Laravel
// version's prefixes and "a counter's key"; "Suprnova's defaults are the
// first row's, derived from `APP_NAME` (`Laravel`)".
#[test]
fn each_row_of_the_migration_prefix_table_gives_its_counters_key() {
    use suprnova::cache::CacheConfig;
    use suprnova::config::Env;

    let rows: Vec<Vec<String>> = MIGRATION
        .split("### Prefixes")
        .nth(1)
        .unwrap()
        .lines()
        .filter(|l| l.starts_with("| ") && l.contains("login:42"))
        .map(|l| {
            l.split(" | ")
                .map(|cell| {
                    cell.trim_matches(|c| c == '|' || c == ' ' || c == '`')
                        .to_owned()
                })
                .collect()
        })
        .collect();
    assert_eq!(rows.len(), 3, "{rows:?}");
    for (i, row) in rows.iter().enumerate() {
        let (redis_prefix, cache_prefix, key) = (&row[1], &row[2], &row[3]);
        let config = if i == 0 {
            CacheConfig::from_env(&Env::from_pairs::<&str, &str>([])).unwrap()
        } else {
            CacheConfig::from_env(&Env::from_pairs([
                ("REDIS_PREFIX", redis_prefix.as_str()),
                ("CACHE_PREFIX", cache_prefix.as_str()),
            ]))
            .unwrap()
        };
        assert_eq!(format!("{}login:42", config.key_prefix()), *key, "{row:?}");
    }
}

// README.md: "The other examples (`laravel_migration`, `login_protection`,
// `websocket_caps`, `redis_cluster`) run the same way, with `cargo run
// --example NAME`; the first lines of each say what it shows and what it
// needs."
#[test]
fn every_example_the_readme_names_exists_and_opens_with_what_it_needs() {
    let names = [
        "quickstart",
        "laravel_migration",
        "login_protection",
        "websocket_caps",
        "redis_cluster",
    ];
    for name in names {
        assert!(README.contains(&format!("`{name}`")), "{name}");
        let path = format!("{}/examples/{name}.rs", env!("CARGO_MANIFEST_DIR"));
        let source = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
        let head: String = source
            .lines()
            .take_while(|l| l.starts_with("//!"))
            .collect::<Vec<_>>()
            .join(" ");
        assert!(head.contains("It needs"), "{name}: {head}");
    }
}

// deployment.md, "Cloudflare in front of a proxy of your own": the list to
// set is "your proxy, and every Cloudflare edge range", and "These are
// Cloudflare's published edge ranges:" follows as a table. The list holds
// exactly the table's ranges besides the proxy.
#[test]
fn the_cloudflare_list_holds_every_range_of_the_cloudflare_table() {
    let section = DEPLOYMENT
        .split("### Cloudflare in front of a proxy of your own")
        .nth(1)
        .unwrap()
        .split("\n## ")
        .next()
        .unwrap();
    let list: Vec<&str> = section
        .lines()
        .find_map(|l| l.strip_prefix("APP_TRUSTED_PROXIES="))
        .unwrap()
        .split(',')
        .collect();
    let mut table: Vec<&str> = section
        .lines()
        .filter(|l| l.starts_with("| `"))
        .flat_map(|l| l.split('`').skip(1).step_by(2))
        .collect();
    assert_eq!(table.len(), 22, "{table:?}");
    table.insert(0, "10.0.0.5");
    let (mut listed, mut tabled) = (list.clone(), table.clone());
    listed.sort_unstable();
    tabled.sort_unstable();
    assert_eq!(listed, tabled);
}
