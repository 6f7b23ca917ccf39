//! The Redis connection under failures, seen over the crate's HTTP server on
//! 127.0.0.1, as a user of a limited route sees them: a Redis killed and
//! started again on its port, a Redis stopped (`SIGSTOP`) past the deadline,
//! a Redis answering errors (`OOM`, `READONLY`, `LOADING`, `NOSCRIPT`, a
//! deleted ACL user), and a burst of requests while the connection is made
//! again.
//!
//! Every Redis here is a `redis-server` the test starts on a free loopback
//! port. The routes are limited by `RateLimitMiddleware` on
//! `RedisRateLimiter`, keyed by the request's path, with a 200 ms connect
//! timeout and a 200 ms response timeout: a deadline of 400 ms.
#![cfg(feature = "redis")]

mod support;
mod throttle_support;

use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::http::{Reply, TestServer};
use support::redis::{RedisServer, free_port, raw_command};
use support::unique_prefix;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig,
};
use suprnova::redis_client::{RedisConfig, RedisConnection};
use suprnova::{HttpResponse, Request, Router};

const CONNECT: Duration = Duration::from_millis(200);
const RESPONSE: Duration = Duration::from_millis(200);
const DEADLINE: Duration = Duration::from_millis(400);
/// What an answer may take past the deadline over loopback HTTP on a busy
/// machine.
const SLACK: Duration = Duration::from_millis(600);

fn config(url: &str) -> RedisConfig {
    RedisConfig::from_url(url)
        .unwrap()
        .with_timeouts(CONNECT, RESPONSE)
}

fn limiter(url: &str, name: &str) -> RedisRateLimiter {
    RedisRateLimiter::new(RedisConnection::new(config(url)).unwrap())
        .with_prefix(unique_prefix(name))
}

/// A router answering `ok` on each path of `paths`, each path its own
/// bucket of `limit` a minute on `driver`, under `policy`.
fn routes(
    driver: Arc<dyn RateLimiterDriver>,
    paths: &[String],
    limit: u32,
    policy: BackendErrorPolicy,
) -> Router {
    let router = paths.iter().fold(Router::new(), |router, path| {
        router.get(path, |_req: Request| async { HttpResponse::text("ok") })
    });
    router.middleware(
        RateLimitMiddleware::new(
            driver,
            SlidingWindowConfig::new(limit, Duration::from_secs(60)),
            |req| req.path().to_owned(),
        )
        .on_backend_error(policy),
    )
}

/// A `GET` and how long it took.
async fn timed(http: &TestServer, path: &str) -> (Reply, Duration) {
    let sent = Instant::now();
    let reply = http.get(path).await;
    (reply, sent.elapsed())
}

/// `FailClosed`'s answer, exactly: 503, `Retry-After: 1`, its body, and no
/// rate-limit header.
fn assert_fail_closed(reply: &Reply, what: &str) {
    assert_eq!(
        (reply.status, reply.body.as_str()),
        (503, "503 Service Unavailable"),
        "{what}"
    );
    assert_eq!(reply.header("retry-after"), Some("1"), "{what}");
    assert_eq!(reply.header("x-ratelimit-limit"), None, "{what}");
    assert_eq!(reply.header("x-ratelimit-remaining"), None, "{what}");
}

/// `FailOpen`'s answer: the handler's, with no rate-limit header.
fn assert_fail_open(reply: &Reply, what: &str) {
    assert_eq!((reply.status, reply.body.as_str()), (200, "ok"), "{what}");
    assert_eq!(reply.header("x-ratelimit-limit"), None, "{what}");
    assert_eq!(reply.header("retry-after"), None, "{what}");
}

/// A decided admission: 200 with the limit and `remaining`.
fn assert_admitted(reply: &Reply, limit: u32, remaining: u64, what: &str) {
    assert_eq!(
        (
            reply.status,
            reply.header("x-ratelimit-limit"),
            reply.header("x-ratelimit-remaining"),
        ),
        (
            200,
            Some(limit.to_string().as_str()),
            Some(remaining.to_string().as_str())
        ),
        "{what}: {}",
        reply.body
    );
}

fn within_deadline(took: Duration, what: &str) {
    assert!(
        took <= DEADLINE + SLACK,
        "{what} took {took:?}, past the deadline {DEADLINE:?} + {SLACK:?}"
    );
}

/// The hits Redis holds in `prefix` + `path`'s bucket.
fn zcard(port: u16, key: &str) -> u64 {
    let reply = raw_command(port, &format!("ZCARD {key}")).expect("Redis answers ZCARD");
    reply
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap_or_else(|_| panic!("ZCARD answered {reply:?}"))
}

/// A field of `INFO` on `port`, as a number.
fn info_number(port: u16, section: &str, field: &str) -> u64 {
    let info = raw_command(port, &format!("INFO {section}")).expect("Redis answers INFO");
    info.lines()
        .find_map(|line| line.strip_prefix(&format!("{field}:")))
        .unwrap_or_else(|| panic!("no {field} in {info}"))
        .trim()
        .parse()
        .unwrap()
}

fn pid_of(port: u16) -> u32 {
    info_number(port, "server", "process_id") as u32
}

// ---- a Redis killed, then started again on its port -------------------------

// A login route on FailClosed. Redis dies; a request during the outage gets
// 503 at once. Redis starts again and answers PING; a while later the next
// request should be decided, as the docs say ("until Redis answers, each
// limited request gets what its policy says").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_first_request_after_redis_is_back_is_decided_even_when_one_failed_during_the_outage() {
    let mut server = RedisServer::start();
    let driver = limiter(&server.url(), "back");
    let paths = vec!["/login".to_owned()];
    let http = TestServer::start(routes(
        Arc::new(driver),
        &paths,
        5,
        BackendErrorPolicy::FailClosed,
    ))
    .await;
    assert_admitted(&http.get("/login").await, 5, 4, "before the outage");

    server.stop();
    let (refused, took) = timed(&http, "/login").await;
    assert_fail_closed(&refused, "during the outage");
    within_deadline(took, "during the outage");
    // The outage lasts a second: every reconnect the request started has
    // given up by then.
    tokio::time::sleep(Duration::from_millis(1_000)).await;

    server.restart();
    assert!(server.command("PING").starts_with("+PONG"));
    // Long after Redis is back: no connection attempt is still running.
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    let (back, took) = timed(&http, "/login").await;
    // The restarted Redis is empty: the bucket starts again.
    assert_admitted(&back, 5, 4, "the first request after Redis is back");
    within_deadline(took, "the first request after Redis is back");
}

// Redis starts after the application, as the deployment guide says it
// often does: boot's PING finds nothing on the port, boot goes on, and "the
// connection retries in the background. Until Redis answers, each limited
// request gets what its middleware's backend-error policy says". Redis then
// starts and answers; a second later the first request should be decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_starts_after_boot_decides_the_first_request_once_it_answers() {
    use suprnova::bootstrap::bootstrap;
    use suprnova::bootstrap::variables::{
        RATE_LIMIT_DRIVER, RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS, RATE_LIMIT_REDIS_PREFIX,
        RATE_LIMIT_REDIS_TIMEOUT_MS, RATE_LIMIT_REDIS_URL,
    };
    use suprnova::config::Env;
    let mut server = RedisServer::start();
    server.stop();
    let env = Env::from_pairs([
        ("APP_ENV", "production".to_owned()),
        (RATE_LIMIT_DRIVER, "redis".to_owned()),
        (RATE_LIMIT_REDIS_URL, server.url()),
        (RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS, "200".to_owned()),
        (RATE_LIMIT_REDIS_TIMEOUT_MS, "200".to_owned()),
        (RATE_LIMIT_REDIS_PREFIX, unique_prefix("late-start")),
    ]);
    suprnova::container::App::new()
        .scope(async {
            let summary = bootstrap(&env).await.unwrap();
            assert_eq!(summary.redis_answered, Some(false));
            let router = throttle_support::ok_routes(&["/login"]).middleware(
                RateLimitMiddleware::ip_based(5, Duration::from_secs(60))
                    .on_backend_error(BackendErrorPolicy::FailClosed),
            );
            let http = TestServer::start(router).await;
            // Redis comes up a second after boot.
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            server.restart();
            assert!(server.command("PING").starts_with("+PONG"));
            tokio::time::sleep(Duration::from_millis(1_000)).await;
            let (first, took) = timed(&http, "/login").await;
            assert_admitted(&first, 5, 4, "the first request once Redis answers");
            within_deadline(took, "the first request once Redis answers");
            http.stop().await;
        })
        .await;
}

// Four clients send requests one after another, each on its own path, while
// Redis is killed and started again. Every request is answered within the
// deadline; during the outage with exactly FailClosed's answer; after the
// restart each path's admissions are exactly the hits Redis holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_killed_mid_traffic_gives_503_in_time_and_exact_counts_after_the_restart() {
    let mut server = RedisServer::start();
    let port = server.port();
    let driver = limiter(&server.url(), "killed");
    let prefix = driver.prefix().to_owned();
    let paths: Vec<String> = (0..4).map(|i| format!("/c{i}")).collect();
    let http = Arc::new(
        TestServer::start(routes(
            Arc::new(driver),
            &paths,
            10_000,
            BackendErrorPolicy::FailClosed,
        ))
        .await,
    );
    let phase = Arc::new(std::sync::atomic::AtomicU8::new(0));
    let mut clients = Vec::new();
    for path in paths.clone() {
        let (http, phase) = (http.clone(), phase.clone());
        clients.push(tokio::spawn(async move {
            // Every reply, with the phase it was sent in and the phase it
            // came back in.
            let mut replies = Vec::new();
            loop {
                let now = phase.load(std::sync::atomic::Ordering::SeqCst);
                if now == 3 {
                    return replies;
                }
                let (reply, took) = timed(&http, &path).await;
                within_deadline(took, &format!("{path} in phase {now}"));
                let after = phase.load(std::sync::atomic::Ordering::SeqCst);
                replies.push((now, after, reply));
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        }));
    }
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.stop();
    phase.store(1, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    server.restart();
    phase.store(2, std::sync::atomic::Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_500)).await;
    phase.store(3, std::sync::atomic::Ordering::SeqCst);
    for (client, path) in clients.into_iter().zip(&paths) {
        let replies = client.await.unwrap();
        for (sent, _, reply) in &replies {
            match reply.status {
                200 => assert!(reply.header("x-ratelimit-remaining").is_some()),
                503 => assert_fail_closed(reply, &format!("{path} sent in phase {sent}")),
                other => panic!("{path}: status {other}"),
            }
        }
        let outage: Vec<u16> = replies
            .iter()
            .filter(|(sent, answered, _)| (*sent, *answered) == (1, 1))
            .map(|(.., reply)| reply.status)
            .collect();
        assert!(outage.contains(&503), "{path}: no request met the outage");
        let late: Vec<u16> = replies
            .iter()
            .filter(|(sent, ..)| *sent == 2)
            .map(|(.., reply)| reply.status)
            .collect();
        assert!(
            late.len() >= 5 && late.iter().rev().take(5).all(|&s| s == 200),
            "{path}: not decided again after the restart: {late:?}"
        );
        // Sent after the kill, a request admitted was counted by the new
        // Redis; sent before it and answered after, it may have been
        // counted by either.
        let admitted = |keep: &dyn Fn(u8, u8) -> bool| {
            replies
                .iter()
                .filter(|(sent, answered, reply)| reply.status == 200 && keep(*sent, *answered))
                .count() as u64
        };
        let surely = admitted(&|sent, _| sent >= 1);
        let maybe = admitted(&|sent, answered| sent == 0 && answered >= 1);
        let held = zcard(port, &format!("{prefix}{path}"));
        assert!(
            (surely..=surely + maybe).contains(&held),
            "{path}: Redis holds {held} hits after the restart, for {surely} admissions (and {maybe} that may be either side)"
        );
    }
}

// ---- a Redis stopped past the deadline --------------------------------------

/// Requests on each of `paths` at once, each answered with exactly
/// FailClosed's answer within the deadline.
async fn wave_meets_a_stopped_redis(http: &Arc<TestServer>, paths: &[String], what: &str) {
    let sent: Vec<_> = paths
        .iter()
        .map(|path| {
            let (http, path) = (http.clone(), path.clone());
            tokio::spawn(async move { (timed(&http, &path).await, path) })
        })
        .collect();
    for request in sent {
        let ((reply, took), path) = request.await.unwrap();
        assert_fail_closed(&reply, &format!("{what}, {path}"));
        within_deadline(took, &format!("{what}, {path}"));
    }
}

// Twenty routes, each its own bucket, hold 1 to 4 hits. Redis is stopped
// (SIGSTOP) for 2.5 s, five times the deadline: waves of requests on every
// route meet it, and each is answered 503 within the deadline. Once Redis
// runs again, each route's next answer reports its own bucket: its
// remaining places are the limit less the hits Redis holds for that route,
// read just after. And what the stop left behind is cleaned up: one
// connection to Redis, not one per request or per timeout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_redis_gets_503_in_time_and_each_route_then_reads_its_own_bucket() {
    const LIMIT: u32 = 50;
    let server = RedisServer::start();
    let port = server.port();
    let driver = limiter(&server.url(), "stopped");
    let prefix = driver.prefix().to_owned();
    let paths: Vec<String> = (0..20).map(|i| format!("/s{i}")).collect();
    let http = Arc::new(
        TestServer::start(routes(
            Arc::new(driver),
            &paths,
            LIMIT,
            BackendErrorPolicy::FailClosed,
        ))
        .await,
    );
    for (i, path) in paths.iter().enumerate() {
        for hit in 0..(i % 4 + 1) {
            let left = u64::from(LIMIT) - hit as u64 - 1;
            assert_admitted(&http.get(path).await, LIMIT, left, path);
        }
    }
    let connections_before = info_number(port, "stats", "total_connections_received");

    let pid = pid_of(port);
    assert!(support::signal(pid, "STOP"));
    let resume = support::Resume(pid);
    let stopped = Instant::now();
    let mut waves = 0;
    while stopped.elapsed() < Duration::from_millis(2_000) {
        wave_meets_a_stopped_redis(&http, &paths, &format!("wave {waves}")).await;
        waves += 1;
    }
    assert!(waves >= 3, "{waves} waves");
    tokio::time::sleep_until((stopped + Duration::from_millis(2_500)).into()).await;
    drop(resume);
    // Redis runs what it had read before it stopped, and closes the
    // connections given up on.
    tokio::time::sleep(Duration::from_millis(500)).await;

    let mut late_hits = 0;
    for (i, path) in paths.iter().enumerate() {
        let reply = http.get(path).await;
        let held = zcard(port, &format!("{prefix}{path}"));
        let before = (i % 4 + 1) as u64;
        assert!(
            held > before,
            "{path}: {held} hits for {before} before the stop and one after"
        );
        late_hits += held - before - 1;
        assert_admitted(&reply, LIMIT, u64::from(LIMIT) - held, path);
    }
    let opened = info_number(port, "stats", "total_connections_received") - connections_before;
    let open = info_number(port, "clients", "connected_clients");
    eprintln!(
        "{waves} waves; {late_hits} hits of requests answered 503 counted late; {opened} connections opened; {open} open"
    );
    // The limiter's one connection, and the INFO's own.
    assert!(open <= 2, "{open} connections open after the stop");
}

// ---- a Redis answering errors -----------------------------------------------

/// Puts `port`'s Redis out of memory: a 1 MB value written, then a
/// `maxmemory` under what it uses, with `noeviction`. Reads are answered;
/// a command that may grow memory is refused with `OOM`.
fn out_of_memory(port: u16) {
    let filled = raw_command(port, "SETRANGE filler 1000000 x").unwrap();
    assert!(filled.starts_with(':'), "{filled}");
    let used = info_number(port, "memory", "used_memory");
    for set in [
        "CONFIG SET maxmemory-policy noeviction".to_owned(),
        format!("CONFIG SET maxmemory {}", used - 200_000),
    ] {
        let reply = raw_command(port, &set).unwrap();
        assert!(reply.starts_with("+OK"), "{set}: {reply}");
    }
    let refused = raw_command(port, "SET another 1").unwrap();
    assert!(refused.starts_with("-OOM"), "{refused}");
}

fn assert_refused(reply: &Reply, limit: u32, what: &str) {
    assert_eq!(
        (
            reply.status,
            reply.header("x-ratelimit-limit"),
            reply.header("x-ratelimit-remaining"),
        ),
        (429, Some(limit.to_string().as_str()), Some("0")),
        "{what}: {}",
        reply.body
    );
    let wait: u64 = reply
        .header("retry-after")
        .expect("Retry-After")
        .parse()
        .unwrap();
    assert!((59..=60).contains(&wait), "{what}: Retry-After {wait}");
}

// The sliding-window driver on a Redis out of memory (`noeviction`): its
// script's first write removes the hits that left the window, which never
// grows memory, so Redis lets the script's hit through as part of it. Every
// request is still decided as on a Redis with room: admitted with its
// count, and a full bucket 429 under either policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_the_driver_still_decides_every_request() {
    let server = RedisServer::start();
    let driver = limiter(&server.url(), "oom-driver");
    let prefix = driver.prefix().to_owned();
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(driver);
    let paths = vec!["/full".to_owned(), "/fresh".to_owned()];
    let closed = TestServer::start(routes(
        driver.clone(),
        &paths,
        2,
        BackendErrorPolicy::FailClosed,
    ))
    .await;
    let open = TestServer::start(routes(driver, &paths, 2, BackendErrorPolicy::FailOpen)).await;
    assert_admitted(&closed.get("/full").await, 2, 1, "first");
    assert_admitted(&closed.get("/full").await, 2, 0, "second");

    out_of_memory(server.port());
    assert_admitted(
        &closed.get("/fresh").await,
        2,
        1,
        "FailClosed, a bucket with room",
    );
    assert_admitted(
        &open.get("/fresh").await,
        2,
        0,
        "FailOpen, a bucket with room",
    );
    assert_refused(
        &closed.get("/fresh").await,
        2,
        "FailClosed, a bucket just filled",
    );
    assert_refused(&closed.get("/full").await, 2, "FailClosed, a full bucket");
    assert_refused(&open.get("/full").await, 2, "FailOpen, a full bucket");
    assert_eq!(zcard(server.port(), &format!("{prefix}/fresh")), 2);
    assert_eq!(zcard(server.port(), &format!("{prefix}/full")), 2);
}

/// A throttled router in the current container: `/open` fails open,
/// `/closed` closed, both counting the bucket `key` at `limit` a minute.
fn throttled(key: &str, limit: i64) -> Router {
    use suprnova::{Limit, ThrottleRequestsMiddleware};
    let open = throttle_support::ok_routes(&["/open"]).middleware(
        ThrottleRequestsMiddleware::with_limits(vec![Limit::per_minute(limit).by(key.to_owned())]),
    );
    let closed = throttle_support::ok_routes(&["/closed"]).middleware(
        ThrottleRequestsMiddleware::with_limits(vec![Limit::per_minute(limit).by(key.to_owned())])
            .on_backend_error(BackendErrorPolicy::FailClosed),
    );
    open.merge(closed)
}

// The throttle (Laravel's fixed window in the cache store) on a Redis out
// of memory. A bucket that is full needs no write to be refused: Laravel's
// `tooManyAttempts` reads the counter and the timer and answers 429. Over
// quota is 429 whatever the policy, the docs say.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn out_of_memory_a_full_throttle_bucket_is_still_429_under_either_policy() {
    let server = RedisServer::start();
    let prefix = unique_prefix("oom-throttle");
    let store =
        suprnova::cache::RedisStore::new(RedisConnection::new(config(&server.url())).unwrap())
            .with_prefix(prefix);
    let app = throttle_support::limiter_app(Arc::new(store), suprnova::clock::system());
    app.scope(async {
        let http = TestServer::start(throttled("k", 2)).await;
        assert_eq!(http.get("/open").await.status, 200);
        assert_eq!(http.get("/closed").await.status, 200);
        assert_refused(
            &http.get("/open").await,
            2,
            "full, before Redis is out of memory",
        );

        out_of_memory(server.port());
        let (open, closed) = (http.get("/open").await, http.get("/closed").await);
        assert_eq!(
            [(open.status, &open.body), (closed.status, &closed.body)],
            [(429, &open.body), (429, &closed.body)],
            "a full bucket on a Redis out of memory, FailOpen then FailClosed"
        );
        assert_refused(&open, 2, "FailOpen, full, out of memory");
        assert_refused(&closed, 2, "FailClosed, full, out of memory");
    })
    .await;
}

// A replica given as the address (a URL left on the old primary after a
// failover): every decision is refused `READONLY`, so FailClosed answers
// 503 to each, in time, and never lets one through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replica_answering_readonly_gets_503_and_never_admits() {
    let primary = RedisServer::start();
    let replica = RedisServer::start();
    let follows = replica.command(&format!("REPLICAOF 127.0.0.1 {}", primary.port()));
    assert!(follows.starts_with("+OK"), "{follows}");
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(limiter(&replica.url(), "readonly"));
    let paths = vec!["/r".to_owned()];
    let http = TestServer::start(routes(driver, &paths, 5, BackendErrorPolicy::FailClosed)).await;
    for i in 0..10 {
        let (reply, took) = timed(&http, "/r").await;
        assert_fail_closed(&reply, &format!("request {i}"));
        within_deadline(took, &format!("request {i}"));
    }
}

// A Redis loading its data set from disk after a restart answers `LOADING`
// to every command: FailClosed answers 503 in time, and once the data is
// loaded the next request is decided on the hits loaded back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_loading_its_data_gets_503_then_decides_on_the_loaded_hits() {
    let mut node = LoadingNode::start();
    let driver = limiter(&node.url(), "loading");
    let prefix = driver.prefix().to_owned();
    let paths = vec!["/l".to_owned(), "/other".to_owned()];
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(driver);
    let http = TestServer::start(routes(
        driver.clone(),
        &paths,
        10,
        BackendErrorPolicy::FailClosed,
    ))
    .await;
    let open = TestServer::start(routes(driver, &paths, 10, BackendErrorPolicy::FailOpen)).await;
    for left in [9, 8, 7] {
        assert_admitted(&http.get("/l").await, 10, left, "before the restart");
    }
    node.fill_and_restart_loading();
    let mut loading = 0;
    loop {
        let (reply, took) = timed(&http, "/l").await;
        within_deadline(took, "while Redis loads");
        if reply.status == 503 {
            assert_fail_closed(&reply, "while Redis loads");
            let passed = open.get("/other").await;
            if !node.loaded() {
                assert_fail_open(&passed, "FailOpen while Redis loads");
            }
            loading += 1;
            assert!(loading < 200, "Redis still loading after 200 requests");
            tokio::time::sleep(Duration::from_millis(20)).await;
            continue;
        }
        assert!(node.loaded(), "decided while Redis was loading");
        assert_admitted(&reply, 10, 6, "the first request after the load");
        break;
    }
    assert!(loading >= 3, "only {loading} requests met the load");
    assert_eq!(zcard(node.port, &format!("{prefix}/l")), 4);
}

/// A `redis-server` of this test's own that keeps its data on disk, and
/// loads it back slowly (`key-load-delay`) when started again, so that it
/// answers `LOADING` for a while.
struct LoadingNode {
    child: Option<Child>,
    port: u16,
    dir: std::path::PathBuf,
}

impl LoadingNode {
    fn start() -> Self {
        let port = free_port();
        let dir = std::env::temp_dir().join(format!("suprnova-loading-{}", unique_prefix("l")));
        std::fs::create_dir_all(&dir).unwrap();
        let mut node = Self {
            child: None,
            port,
            dir,
        };
        node.launch(&[]);
        node
    }

    fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn launch(&mut self, extra: &[&str]) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args([
                "--dir",
                self.dir.to_str().unwrap(),
                "--dbfilename",
                "dump.rdb",
            ])
            .args(["--logfile", "redis.log"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server");
        self.child = Some(child);
        let started = Instant::now();
        while raw_command(self.port, "PING").is_none() {
            assert!(
                started.elapsed() < Duration::from_secs(10),
                "redis-server did not start"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Writes 20,000 keys, saves, kills the server, and starts it again
    /// loading them at 100 µs each: about two seconds of `LOADING`.
    fn fill_and_restart_loading(&mut self) {
        let filled = raw_command(self.port, "DEBUG POPULATE 20000 filler 10").unwrap_or_default();
        if !filled.starts_with("+OK") {
            // DEBUG is refused by default since Redis 7: write them by Lua.
            let script = "for i=1,20000 do redis.call('SET','filler:'..i,'x') end return 1";
            let eval = raw_command(self.port, &format!("EVAL \"{script}\" 0")).unwrap();
            assert!(eval.starts_with(":1"), "{eval}");
        }
        let saved = raw_command(self.port, "SAVE").unwrap();
        assert!(saved.starts_with("+OK"), "{saved}");
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        while std::net::TcpStream::connect(("127.0.0.1", self.port)).is_ok() {
            std::thread::sleep(Duration::from_millis(10));
        }
        self.launch(&[
            "--key-load-delay",
            "100",
            "--loading-process-events-interval-bytes",
            "1024",
        ]);
        let answer = raw_command(self.port, "GET x").unwrap_or_default();
        assert!(answer.starts_with("-LOADING"), "not loading: {answer}");
    }

    fn loaded(&self) -> bool {
        !raw_command(self.port, "GET x")
            .unwrap_or_default()
            .starts_with("-LOADING")
    }
}

impl Drop for LoadingNode {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// The limiter's ACL user is deleted while it runs (Redis closes its
// connections, and refuses its password from then on): FailClosed answers
// 503 in time and never admits; once the user is back, the first request
// after the refusal's 250 ms hold is decided on the bucket's hits, none
// added while it was refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_acl_user_gets_503_and_the_recreated_one_is_decided() {
    let server = RedisServer::start();
    let create = "ACL SETUSER app on >secret ~* +@all";
    assert!(server.command(create).starts_with("+OK"));
    let url = format!("redis://app:secret@127.0.0.1:{}", server.port());
    let driver = limiter(&url, "acl");
    let prefix = driver.prefix().to_owned();
    let paths = vec!["/a".to_owned()];
    let http = TestServer::start(routes(
        Arc::new(driver),
        &paths,
        10,
        BackendErrorPolicy::FailClosed,
    ))
    .await;
    for left in [9, 8, 7] {
        assert_admitted(
            &http.get("/a").await,
            10,
            left,
            "before the user is deleted",
        );
    }
    assert!(server.command("ACL DELUSER app").starts_with(":1"));
    for i in 0..5 {
        let (reply, took) = timed(&http, "/a").await;
        assert_fail_closed(&reply, &format!("request {i} with the user deleted"));
        within_deadline(took, &format!("request {i} with the user deleted"));
    }
    assert!(server.command(create).starts_with("+OK"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (reply, took) = timed(&http, "/a").await;
    assert_admitted(&reply, 10, 6, "the first request once the user is back");
    within_deadline(took, "the first request once the user is back");
    assert_eq!(zcard(server.port(), &format!("{prefix}/a")), 4);
}

// `SCRIPT FLUSH` while thirty requests race on a bucket of ten: each
// `EVALSHA` answered `NOSCRIPT` is sent as `EVAL`, once, and exactly ten
// are admitted, twenty refused, and ten hits held.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_script_flush_a_burst_admits_exactly_the_limit() {
    let server = RedisServer::start();
    let driver = limiter(&server.url(), "flush");
    let prefix = driver.prefix().to_owned();
    let paths = vec!["/f".to_owned(), "/warm".to_owned()];
    let http = Arc::new(
        TestServer::start(routes(
            Arc::new(driver),
            &paths,
            10,
            BackendErrorPolicy::FailClosed,
        ))
        .await,
    );
    assert_admitted(&http.get("/warm").await, 10, 9, "warm");
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    let burst: Vec<_> = (0..30)
        .map(|_| {
            let http = http.clone();
            tokio::spawn(async move { http.get("/f").await })
        })
        .collect();
    let mut statuses = std::collections::BTreeMap::new();
    for request in burst {
        let reply = request.await.unwrap();
        *statuses.entry(reply.status).or_insert(0) += 1;
    }
    assert_eq!(statuses, [(200, 10), (429, 20)].into_iter().collect());
    assert_eq!(zcard(server.port(), &format!("{prefix}/f")), 10);
}

// ---- many requests while the connection is made again -----------------------

// Redis is killed; for two seconds sixty clients send requests one after
// another, each on its own route, and Redis starts again on its port after
// 700 ms. Every request is answered in time, 503 exactly while Redis is
// down; the new Redis sees a handful of connections, not one per request;
// and each route's admissions are exactly the hits the new Redis holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_while_the_connection_is_made_again_opens_few_connections_and_counts_exactly() {
    let mut server = RedisServer::start();
    let port = server.port();
    let driver = limiter(&server.url(), "burst");
    let prefix = driver.prefix().to_owned();
    let paths: Vec<String> = (0..60).map(|i| format!("/b{i}")).collect();
    let http = Arc::new(
        TestServer::start(routes(
            Arc::new(driver),
            &paths,
            10_000,
            BackendErrorPolicy::FailClosed,
        ))
        .await,
    );
    assert_admitted(&http.get("/b0").await, 10_000, 9_999, "before the kill");
    server.stop();
    let started = Instant::now();
    let clients: Vec<_> = paths
        .iter()
        .map(|path| {
            let (http, path) = (http.clone(), path.clone());
            tokio::spawn(async move {
                let mut replies = Vec::new();
                while started.elapsed() < Duration::from_secs(2) {
                    let (reply, took) = timed(&http, &path).await;
                    within_deadline(took, &path);
                    replies.push(reply);
                }
                replies
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(700)).await;
    let server = tokio::task::spawn_blocking(move || {
        server.restart();
        server
    })
    .await
    .unwrap();
    let mut all = Vec::new();
    for client in clients {
        all.push(client.await.unwrap());
    }
    // Read before any connection of the test's own: the limiter's, and
    // the ones the restart's readiness checks opened.
    let opened = info_number(port, "stats", "total_connections_received");
    let mut total = (0, 0);
    for (replies, path) in all.into_iter().zip(&paths) {
        let mut admitted = 0;
        for reply in &replies {
            match reply.status {
                200 => admitted += 1,
                503 => assert_fail_closed(reply, path),
                other => panic!("{path}: {other} {}", reply.body),
            }
        }
        assert!(admitted > 0, "{path}: never decided after the restart");
        total.0 += admitted;
        total.1 += replies.len() - admitted;
        assert_eq!(
            zcard(port, &format!("{prefix}{path}")),
            admitted as u64,
            "{path}: hits held after the restart against its admissions"
        );
    }
    eprintln!(
        "{} admitted, {} refused; {opened} connections to the new Redis",
        total.0, total.1
    );
    assert!(opened <= 5, "{opened} connections to the new Redis");
    drop(server);
}

// ---- a connection Redis closed between two requests -------------------------

/// A throttled router in the current container, on FailClosed: `/two`
/// counts two limits (60 a minute and 1,000 a day, keyed `k`), `/one` the
/// minute's alone (keyed `j`).
fn throttled_two_limits() -> Router {
    use suprnova::{Limit, ThrottleRequestsMiddleware};
    let two = throttle_support::ok_routes(&["/two"]).middleware(
        ThrottleRequestsMiddleware::with_limits(vec![
            Limit::per_minute(60).by("k"),
            Limit::per_day(1_000).by("k-day"),
        ])
        .on_backend_error(BackendErrorPolicy::FailClosed),
    );
    let one = throttle_support::ok_routes(&["/one"]).middleware(
        ThrottleRequestsMiddleware::with_limits(vec![Limit::per_minute(60).by("j")])
            .on_backend_error(BackendErrorPolicy::FailClosed),
    );
    two.merge(one)
}

/// Runs `between` between two rounds of requests on a throttle counting in
/// `server`'s Redis: `/two` and `/one` once each before, then each once
/// after; returns the replies after.
async fn throttle_around(
    server: &mut RedisServer,
    between: impl FnOnce(&mut RedisServer),
) -> (Reply, Reply) {
    let store =
        suprnova::cache::RedisStore::new(RedisConnection::new(config(&server.url())).unwrap())
            .with_prefix(unique_prefix("closed-between"));
    let app = throttle_support::limiter_app(Arc::new(store), suprnova::clock::system());
    app.scope(async {
        let http = TestServer::start(throttled_two_limits()).await;
        assert_eq!(http.get("/two").await.status, 200);
        assert_eq!(http.get("/one").await.status, 200);
        between(server);
        let two = http.get("/two").await;
        let one = http.get("/one").await;
        http.stop().await;
        (two, one)
    })
    .await
}

// Redis restarts between two requests (its data kept, as with an AOF or a
// snapshot, or lost, as here: either way the connection is closed). The
// docs: "a decision that finds its connection closed is sent again once,
// on a new connection, within the same deadline, and decided". A throttle
// of one limit is; one of two limits reads each limit's count first
// (`GET`), which is not sent again, and the request gets the policy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttle_of_two_limits_decides_the_first_request_after_a_restart() {
    let mut server = RedisServer::start();
    let (two, one) = throttle_around(&mut server, |server| server.restart()).await;
    assert_eq!(
        (two.status, one.status),
        (200, 200),
        "after a restart, /two: {}, /one: {}",
        two.body,
        one.body
    );
    assert_eq!(two.header("x-ratelimit-limit"), Some("60"));
    assert_eq!(two.header("x-ratelimit-remaining"), Some("59"));
}

// Redis closes connections idle longer than its `timeout` (1 s here; a
// managed Redis often sets one). A route used less often than that finds
// its connection closed on every request. The sliding-window driver's
// decision is sent again and decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_closes_an_idle_connection_the_driver_decides_the_next_request() {
    let server = RedisServer::start();
    assert!(server.command("CONFIG SET timeout 1").starts_with("+OK"));
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(limiter(&server.url(), "idle"));
    let paths = vec!["/i".to_owned()];
    let http = TestServer::start(routes(driver, &paths, 10, BackendErrorPolicy::FailClosed)).await;
    for left in [9, 8, 7] {
        assert_admitted(
            &http.get("/i").await,
            10,
            left,
            "a request after an idle close",
        );
        tokio::time::sleep(Duration::from_millis(2_500)).await;
    }
}

// The same idle close under a throttle of two limits: each request after
// an idle second and a half reads the counts on the closed connection.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_redis_closes_an_idle_connection_a_throttle_of_two_limits_decides_the_next_request() {
    let mut server = RedisServer::start();
    assert!(server.command("CONFIG SET timeout 1").starts_with("+OK"));
    let (two, one) = throttle_around(&mut server, |_| {
        std::thread::sleep(Duration::from_millis(2_500))
    })
    .await;
    assert_eq!(
        (two.status, one.status),
        (200, 200),
        "after an idle close, /two: {}, /one: {}",
        two.body,
        one.body
    );
    assert_eq!(two.header("x-ratelimit-remaining"), Some("58"));
}
