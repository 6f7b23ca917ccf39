//! Exact counts under concurrency, on the memory backends (frozen clock),
//! one redis-server and a three-master Redis Cluster.
//!
//! - Over real HTTP (the crate's server on 127.0.0.1), twenty clients on
//!   their own keep-alive connections send fifty requests each to one
//!   bucket: `throttle:100,1`, `RateLimitMiddleware` (sliding window, 100 a
//!   minute) and a named limiter of two stacked limits. Exactly 100 are
//!   admitted, each with its own `X-RateLimit-Remaining`, and every refusal
//!   points at the one end of the window (`X-RateLimit-Reset`, read from
//!   the store, not a range).
//! - The same named limiter with two stacked limits over several windows
//!   (memory, the clock advanced between rounds): the per-second limit
//!   admits exactly its limit in each second, and the per-minute limit
//!   exactly its limit in the minute, never fewer.
//! - The facade from many tasks: `hit`, `attempt`, `too_many_attempts`,
//!   `remaining`, `clear`, with exact counts.
//! - A window's edge on Redis (windows of one second, Redis's clock for the
//!   sliding window): clients hammering across window ends get exactly the
//!   limit in every window that opened, no more and no fewer.

mod support;
mod throttle_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::rt::TokioIo;
use support::clock_at;
use support::http::{Reply, TestServer};
use suprnova::cache::{MemoryStore, Store};
use suprnova::clock::{self, FakeClock, SharedClock};
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig};
use suprnova::{Limit, RateLimiter, Router};
use throttle_support::{limiter_app, ok_routes};
use tokio::net::TcpStream;
use tokio::sync::Barrier;

const CLIENTS: usize = 20;
const ATTEMPTS: usize = 50;
const LIMIT: usize = 100;
const PATH: &str = "/hot";

// ---------------------------------------------------------------------------
// Backends
// ---------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq)]
enum Backend {
    Memory,
    #[cfg(feature = "redis")]
    Redis,
    #[cfg(feature = "redis")]
    Cluster,
}

/// A running backend: its Redis processes (kept alive while it lives), and
/// for memory the frozen clock.
struct Running {
    backend: Backend,
    fake: Option<FakeClock>,
    #[cfg(feature = "redis")]
    _server: Option<support::redis::RedisServer>,
    #[cfg(feature = "redis")]
    _cluster: Option<support::redis::RedisCluster>,
    url: Option<String>,
}

impl Running {
    fn start(backend: Backend) -> Self {
        let mut running = Running {
            backend,
            fake: None,
            #[cfg(feature = "redis")]
            _server: None,
            #[cfg(feature = "redis")]
            _cluster: None,
            url: None,
        };
        match backend {
            Backend::Memory => running.fake = Some(clock_at(12, 0, 0)),
            #[cfg(feature = "redis")]
            Backend::Redis => {
                let server = support::redis::RedisServer::start();
                running.url = Some(server.url());
                running._server = Some(server);
            }
            #[cfg(feature = "redis")]
            Backend::Cluster => {
                let cluster = support::redis::RedisCluster::start(3);
                running.url = Some(cluster.url());
                running._cluster = Some(cluster);
            }
        }
        running
    }

    fn clock(&self) -> SharedClock {
        match &self.fake {
            Some(fake) => fake.shared(),
            None => clock::system(),
        }
    }

    /// A cache store on this backend (a fresh connection each call).
    fn store(&self, prefix: &str) -> Arc<dyn Store> {
        match self.backend {
            Backend::Memory => Arc::new(MemoryStore::with_clock(self.clock())),
            #[cfg(feature = "redis")]
            _ => Arc::new(
                suprnova::cache::RedisStore::new(support::redis::connect(
                    self.url.as_ref().unwrap(),
                ))
                .with_prefix(prefix),
            ),
        }
    }

    /// A sliding-window driver on this backend.
    fn driver(&self, prefix: &str) -> Arc<dyn RateLimiterDriver> {
        let _ = prefix;
        match self.backend {
            Backend::Memory => Arc::new(InMemoryRateLimiter::with_clock(self.clock())),
            #[cfg(feature = "redis")]
            _ => Arc::new(
                suprnova::rate_limit::redis::RedisRateLimiter::new(support::redis::connect(
                    self.url.as_ref().unwrap(),
                ))
                .with_prefix(prefix),
            ),
        }
    }

    /// A container whose facade counts on this backend, `throttle` alias
    /// registered, plus the store it counts in.
    fn app(&self, prefix: &str) -> (App, Arc<dyn Store>) {
        let store = self.store(prefix);
        (limiter_app(store.clone(), self.clock()), store)
    }
}

// ---------------------------------------------------------------------------
// Twenty clients over HTTP
// ---------------------------------------------------------------------------

/// Every reply of `CLIENTS` concurrent clients to `server`, `ATTEMPTS`
/// each, one after the other on a keep-alive connection of its own.
async fn storm(server: &TestServer) -> Vec<Reply> {
    support::http::storm(server, CLIENTS, ATTEMPTS, PATH).await
}

/// What the storm's replies say.
#[derive(Debug)]
struct Outcome {
    admitted: usize,
    refused: usize,
    other: Vec<u16>,
    remaining: Vec<usize>,
    limits: BTreeSet<String>,
    refused_remaining: BTreeSet<String>,
    resets: BTreeSet<i64>,
    /// Each refusal's `X-RateLimit-Reset` minus its `Retry-After`: the
    /// second the refusal was made in, which can only be a second of the
    /// storm.
    made_at: BTreeSet<i64>,
}

fn outcome(replies: &[Reply]) -> Outcome {
    let mut o = Outcome {
        admitted: 0,
        refused: 0,
        other: Vec::new(),
        remaining: Vec::new(),
        limits: BTreeSet::new(),
        refused_remaining: BTreeSet::new(),
        resets: BTreeSet::new(),
        made_at: BTreeSet::new(),
    };
    for r in replies {
        match r.status {
            200 => {
                o.admitted += 1;
                o.remaining
                    .push(r.header("x-ratelimit-remaining").unwrap().parse().unwrap());
            }
            429 => {
                o.refused += 1;
                o.refused_remaining
                    .insert(r.header("x-ratelimit-remaining").unwrap_or("-").into());
                let reset: i64 = r.header("x-ratelimit-reset").unwrap().parse().unwrap();
                let retry: i64 = r.header("retry-after").unwrap().parse().unwrap();
                o.resets.insert(reset);
                o.made_at.insert(reset - retry);
            }
            other => o.other.push(other),
        }
        o.limits
            .insert(r.header("x-ratelimit-limit").unwrap_or("-").to_owned());
    }
    o.remaining.sort_unstable();
    o
}

/// Exactly `LIMIT` admitted of the storm, remaining `0..LIMIT` once each,
/// every refusal with `X-RateLimit-Remaining: 0` and the limit, and every
/// refusal made in a second between `from` and `to` (Unix seconds).
fn assert_exact(o: &Outcome, what: &str, (from, to): (i64, i64)) {
    assert_eq!(
        o.other,
        Vec::<u16>::new(),
        "{what}: statuses other than 200/429"
    );
    assert_eq!(
        (o.admitted, o.refused),
        (LIMIT, CLIENTS * ATTEMPTS - LIMIT),
        "{what}: (admitted, refused)"
    );
    assert_eq!(
        o.remaining,
        (0..LIMIT).collect::<Vec<_>>(),
        "{what}: remaining"
    );
    assert_eq!(
        o.limits,
        BTreeSet::from(["100".to_owned()]),
        "{what}: limit"
    );
    assert_eq!(
        o.refused_remaining,
        BTreeSet::from(["0".to_owned()]),
        "{what}: refusals' remaining"
    );
    assert!(
        o.made_at.iter().all(|s| (from..=to).contains(s)),
        "{what}: reset - retry-after {:?} outside the storm's seconds {from}..={to}",
        o.made_at
    );
}

fn now_secs(clock: &SharedClock) -> i64 {
    clock.unix_seconds()
}

/// `throttle:100,1` over HTTP: exactly 100, every refusal pointing at the
/// window's timer.
async fn throttle_storm(backend: Backend) {
    let running = Running::start(backend);
    let prefix = support::unique_prefix("thr");
    let (app, store) = running.app(&prefix);
    let clock = running.clock();
    app.scope(async {
        let server = TestServer::start(ok_routes(&[PATH]).middleware_named("throttle:100,1")).await;
        // One request on another path opens the connections.
        let from = now_secs(&clock);
        let replies = storm(&server).await;
        let to = now_secs(&clock);
        let o = outcome(&replies);
        assert_exact(&o, &format!("{backend:?} throttle:100,1"), (from, to));
        let key = "ip:127.0.0.1:path:/hot";
        let timer: i64 = store
            .get(&format!("{key}:timer"))
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            o.resets,
            BTreeSet::from([timer]),
            "{backend:?}: reset = the timer"
        );
        assert_eq!(
            RateLimiter::attempts(key).await.unwrap(),
            100,
            "{backend:?}"
        );
        server.stop().await;
    })
    .await;
}

/// `RateLimitMiddleware` (sliding window, 100 a minute) over HTTP: exactly
/// 100; every refusal waits for the oldest hit, so all point at one reset.
async fn sliding_storm(backend: Backend) {
    let running = Running::start(backend);
    let driver = running.driver(&support::unique_prefix("sl"));
    let clock = running.clock();
    let router: Router = ok_routes(&[PATH]).middleware(RateLimitMiddleware::new(
        driver,
        SlidingWindowConfig::new(100, Duration::from_secs(60)),
        |_req| "one-key".into(),
    ));
    let server = TestServer::start(router).await;
    let from = now_secs(&clock);
    let replies = storm(&server).await;
    let to = now_secs(&clock);
    let o = outcome(&replies);
    // Both headers round up the instant the oldest hit leaves: the reset
    // less the wait is the second of the refusal, or the one after it.
    assert_exact(&o, &format!("{backend:?} sliding window"), (from, to + 1));
    assert_eq!(
        o.resets.len(),
        1,
        "{backend:?}: one oldest hit, one reset: {:?}",
        o.resets
    );
    let reset = *o.resets.iter().next().unwrap();
    assert!(
        (from + 60..=to + 61).contains(&reset),
        "{backend:?}: reset {reset}, storm {from}..={to}"
    );
    server.stop().await;
}

/// A named limiter of two stacked limits on one address (per minute 100,
/// per hour 150; they count under their fallback keys): exactly 100, the
/// refusals counted in neither bucket.
async fn stacked_storm(backend: Backend) {
    let running = Running::start(backend);
    let prefix = support::unique_prefix("two");
    let (app, store) = running.app(&prefix);
    let clock = running.clock();
    app.scope(async {
        RateLimiter::define("two", |req| {
            let ip = req.ip().unwrap_or_default();
            vec![
                Limit::per_minute(100).by(ip.clone()),
                Limit::per_hour(150).by(ip),
            ]
            .into()
        });
        let server = TestServer::start(ok_routes(&[PATH]).middleware_named("throttle:two")).await;
        let from = now_secs(&clock);
        let replies = storm(&server).await;
        let to = now_secs(&clock);
        let o = outcome(&replies);
        assert_exact(&o, &format!("{backend:?} two stacked limits"), (from, to));
        let minute = "two:127.0.0.1:attempts:100:decay:60";
        let hour = "two:127.0.0.1:attempts:150:decay:3600";
        let timer: i64 = store
            .get(&format!("{minute}:timer"))
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            o.resets,
            BTreeSet::from([timer]),
            "{backend:?}: reset = the minute's timer"
        );
        assert_eq!(
            (
                RateLimiter::attempts(minute).await.unwrap(),
                RateLimiter::attempts(hour).await.unwrap()
            ),
            (100, 100),
            "{backend:?}: (per minute, per hour) counts"
        );
        server.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_throttle_100_1_admits_exactly_100_of_1000_over_http() {
    throttle_storm(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_sliding_window_admits_exactly_100_of_1000_over_http() {
    sliding_storm(Backend::Memory).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_two_stacked_limits_admit_exactly_100_of_1000_over_http() {
    stacked_storm(Backend::Memory).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_throttle_100_1_admits_exactly_100_of_1000_over_http() {
    throttle_storm(Backend::Redis).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_sliding_window_admits_exactly_100_of_1000_over_http() {
    sliding_storm(Backend::Redis).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_two_stacked_limits_admit_exactly_100_of_1000_over_http() {
    stacked_storm(Backend::Redis).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_throttle_100_1_admits_exactly_100_of_1000_over_http() {
    throttle_storm(Backend::Cluster).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_sliding_window_admits_exactly_100_of_1000_over_http() {
    sliding_storm(Backend::Cluster).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_two_stacked_limits_admit_exactly_100_of_1000_over_http() {
    stacked_storm(Backend::Cluster).await;
}

// ---------------------------------------------------------------------------
// Two stacked limits across windows (memory, frozen clock advanced)
// ---------------------------------------------------------------------------

/// Rounds of twenty concurrent clients, five requests each, the clock one
/// second further each round, against a named limiter of 10 a second and
/// 25 a minute on different keys. Each second admits what both leave:
/// 10, 10, 5, then 0; the minute's bucket holds exactly 25, the second's
/// exactly what it admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_stacked_limits_admit_exactly_their_limits_in_every_window_over_http() {
    for (first, second) in [("s", "m"), ("m", "s")] {
        let clock = clock_at(12, 0, 0);
        let app = throttle_support::memory_app(&clock);
        app.scope(async {
            let keys = (first, second);
            RateLimiter::define("pair", move |_req| {
                let limit = |k: &str| {
                    if k == "s" {
                        Limit::per_second(10, 1).by("s")
                    } else {
                        Limit::per_minute(25).by("m")
                    }
                };
                vec![limit(keys.0), limit(keys.1)].into()
            });
            let server =
                TestServer::start(ok_routes(&[PATH]).middleware_named("throttle:pair")).await;
            let mut per_round = Vec::new();
            for _ in 0..4 {
                let replies: Vec<Reply> =
                    futures_util::future::join_all((0..CLIENTS * 5).map(|_| server.get(PATH)))
                        .await;
                per_round.push(replies.iter().filter(|r| r.status == 200).count());
                clock.advance(Duration::from_secs(1));
            }
            assert_eq!(per_round, vec![10, 10, 5, 0], "order {keys:?}");
            assert_eq!(
                RateLimiter::attempts("pair:m").await.unwrap(),
                25,
                "order {keys:?}: the minute's bucket"
            );
            server.stop().await;
        })
        .await;
    }
}

// ---------------------------------------------------------------------------
// The facade from many tasks
// ---------------------------------------------------------------------------

/// Runs `CLIENTS` tasks of `ATTEMPTS` calls of `call` in `app`, each task
/// with the others interleaving between its calls; every call's answer.
async fn from_many_tasks<T, F, Fut>(app: &App, call: F) -> Vec<T>
where
    T: Send + 'static,
    F: Fn() -> Fut + Send + Sync + Clone + 'static,
    Fut: std::future::Future<Output = T> + Send,
{
    let start = Arc::new(Barrier::new(CLIENTS));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (call, start) = (call.clone(), start.clone());
            tokio::spawn(app.clone().scope(async move {
                start.wait().await;
                let mut out = Vec::with_capacity(ATTEMPTS);
                for _ in 0..ATTEMPTS {
                    out.push(call().await);
                    tokio::task::yield_now().await;
                }
                out
            }))
        })
        .collect();
    let mut all = Vec::with_capacity(CLIENTS * ATTEMPTS);
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

async fn facade_counts(backend: Backend) {
    let running = Running::start(backend);
    let (app, _store) = running.app(&support::unique_prefix("facade"));
    // hit: every concurrent hit gets a count of its own, 1 to 1000.
    let mut hits = from_many_tasks(&app, || async {
        RateLimiter::hit("hits", 60).await.unwrap()
    })
    .await;
    hits.sort_unstable();
    assert_eq!(
        hits,
        (1..=1000).collect::<Vec<i64>>(),
        "{backend:?}: hit counts"
    );
    app.scope(async {
        assert_eq!(RateLimiter::attempts("hits").await.unwrap(), 1000);
        assert_eq!(RateLimiter::remaining("hits", 1500).await.unwrap(), 500);
        assert_eq!(RateLimiter::remaining("hits", 900).await.unwrap(), 0);
        assert!(RateLimiter::too_many_attempts("hits", 1000).await.unwrap());
        assert!(!RateLimiter::too_many_attempts("hits", 1001).await.unwrap());
    })
    .await;

    // attempt: exactly 100 callbacks of 1000, counted once each.
    let ran = Arc::new(AtomicUsize::new(0));
    let runs = ran.clone();
    let answers = from_many_tasks(&app, move || {
        let runs = runs.clone();
        async move {
            RateLimiter::attempt(
                "attempts",
                100,
                || async move {
                    runs.fetch_add(1, Ordering::SeqCst);
                    tokio::task::yield_now().await;
                },
                60,
            )
            .await
            .unwrap()
            .is_some()
        }
    })
    .await;
    let admitted = answers.iter().filter(|a| **a).count();
    assert_eq!(
        (admitted, ran.load(Ordering::SeqCst)),
        (100, 100),
        "{backend:?}: attempt"
    );
    app.scope(async {
        assert_eq!(RateLimiter::attempts("attempts").await.unwrap(), 100);
        assert_eq!(RateLimiter::remaining("attempts", 100).await.unwrap(), 0);
        assert!(
            RateLimiter::too_many_attempts("attempts", 100)
                .await
                .unwrap()
        );
        // clear: the window is gone; the next thousand attempts admit 100 again.
        RateLimiter::clear("attempts").await.unwrap();
        assert_eq!(RateLimiter::attempts("attempts").await.unwrap(), 0);
        assert_eq!(RateLimiter::available_in("attempts").await.unwrap(), 0);
        assert!(
            !RateLimiter::too_many_attempts("attempts", 100)
                .await
                .unwrap()
        );
    })
    .await;
    let again = from_many_tasks(&app, || async {
        RateLimiter::attempt("attempts", 100, || async {}, 60)
            .await
            .unwrap()
            .is_some()
    })
    .await;
    assert_eq!(
        again.iter().filter(|a| **a).count(),
        100,
        "{backend:?}: attempt after clear"
    );

    // too_many_attempts checked by every task while others hit: the answers
    // only ever go from false to true for one task, and the count ends at
    // exactly the hits made.
    let checks = from_many_tasks(&app, || async {
        let full = RateLimiter::too_many_attempts("mixed", 500).await.unwrap();
        let count = RateLimiter::hit("mixed", 60).await.unwrap();
        (full, count)
    })
    .await;
    let mut counts: Vec<i64> = checks.iter().map(|c| c.1).collect();
    counts.sort_unstable();
    assert_eq!(
        counts,
        (1..=1000).collect::<Vec<i64>>(),
        "{backend:?}: mixed hit counts"
    );
    app.scope(async {
        assert_eq!(RateLimiter::remaining("mixed", 1200).await.unwrap(), 200);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_facade_counts_exactly_from_many_tasks() {
    facade_counts(Backend::Memory).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_facade_counts_exactly_from_many_tasks() {
    facade_counts(Backend::Redis).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_facade_counts_exactly_from_many_tasks() {
    facade_counts(Backend::Cluster).await;
}

// ---------------------------------------------------------------------------
// A window's edge on Redis
// ---------------------------------------------------------------------------

#[cfg(feature = "redis")]
mod window_edges {
    use super::*;
    use support::redis::connect;

    const MAX: usize = 3;
    const CLIENTS: usize = 12;
    const RUN: Duration = Duration::from_millis(3_300);

    /// Twelve clients, each on its own connection, hammer one key through
    /// `attempt(key, 3, .., 1)` for 3.3 s; a poller notes every timer value
    /// (each window's own end). Every window that opened ran exactly 3
    /// callbacks: none counted in a window that ended, none lost.
    async fn attempt_edges(backend: Backend) {
        let running = Running::start(backend);
        let url = running.url.clone().unwrap();
        let prefix = support::unique_prefix("edge");
        let key = "edge";
        let ran = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let timers = Arc::new(parking_lot::Mutex::new(BTreeSet::new()));
        let poller = {
            let (stop, timers) = (stop.clone(), timers.clone());
            let conn = connect(&url);
            let timer = format!("{prefix}{key}:timer");
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let found: Option<String> =
                        conn.query(redis::cmd("GET").arg(&timer)).await.unwrap();
                    if let Some(found) = found {
                        timers.lock().insert(found);
                    }
                    tokio::time::sleep(Duration::from_millis(2)).await;
                }
            })
        };
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let store = suprnova::cache::RedisStore::new(connect(&url)).with_prefix(&prefix);
                let limiter = CacheRateLimiter::new(Arc::new(store), clock::system());
                let (stop, ran) = (stop.clone(), ran.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let admitted = limiter
                            .attempt(key, MAX as i64, || async {}, 1)
                            .await
                            .unwrap()
                            .is_some();
                        if admitted {
                            ran.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(RUN).await;
        stop.store(true, Ordering::SeqCst);
        for c in clients {
            c.await.unwrap();
        }
        poller.await.unwrap();
        let windows = timers.lock().len();
        let ran = ran.load(Ordering::SeqCst);
        assert!(windows >= 3, "{backend:?}: {windows} windows in {RUN:?}");
        assert_eq!(
            ran,
            windows * MAX,
            "{backend:?}: {ran} callbacks in {windows} windows of exactly {MAX}"
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_attempt_runs_exactly_the_limit_in_every_window_across_its_end() {
        attempt_edges(Backend::Redis).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cluster_attempt_runs_exactly_the_limit_in_every_window_across_its_end() {
        attempt_edges(Backend::Cluster).await;
    }

    /// Twelve clients hammer one key of a sliding window of 5 a second on
    /// Redis (its TIME) for 2.5 s; a poller reads the bucket's hits (their
    /// Redis times) every 3 ms. Every admitted call is one hit seen, no
    /// second holds six hits, and every place a hit frees is taken again
    /// within 100 ms (the clients never stop asking).
    async fn sliding_edges(backend: Backend) {
        let running = Running::start(backend);
        let url = running.url.clone().unwrap();
        let prefix = support::unique_prefix("sedge");
        let config = SlidingWindowConfig::new(5, Duration::from_secs(1));
        let admitted = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let stamps = Arc::new(parking_lot::Mutex::new(BTreeSet::<u64>::new()));
        // The driver keeps each key as `<prefix><key>`.
        let bucket = Some(format!("{prefix}k"));
        let poller = bucket.map(|bucket| {
            let (stop, stamps) = (stop.clone(), stamps.clone());
            let conn = connect(&url);
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let hits: Vec<u64> = conn
                        .query(redis::cmd("ZRANGE").arg(&bucket).arg(0).arg(-1))
                        .await
                        .unwrap();
                    stamps.lock().extend(hits);
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            })
        });
        let clients: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let driver = suprnova::rate_limit::redis::RedisRateLimiter::new(connect(&url))
                    .with_prefix(&prefix);
                let (stop, admitted, config) = (stop.clone(), admitted.clone(), config);
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        if driver.acquire("k", &config).await.unwrap().allowed {
                            admitted.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                })
            })
            .collect();
        tokio::time::sleep(Duration::from_millis(2_500)).await;
        stop.store(true, Ordering::SeqCst);
        for c in clients {
            c.await.unwrap();
        }
        let admitted = admitted.load(Ordering::SeqCst);
        // Windows open at 0, 1 and 2 s: three windows' worth.
        assert_eq!(admitted, 15, "{backend:?}: admitted in 2.5 s at 5 a second");
        if let Some(poller) = poller {
            poller.await.unwrap();
            let stamps: Vec<u64> = stamps.lock().iter().copied().collect();
            assert_eq!(stamps.len(), admitted, "{backend:?}: hits seen");
            for pair in stamps.windows(6) {
                assert!(
                    pair[5] - pair[0] >= 1_000_000,
                    "{backend:?}: six hits within one second: {pair:?}"
                );
                assert!(
                    pair[5] - pair[0] < 1_100_000,
                    "{backend:?}: a freed place left unused: {pair:?}"
                );
            }
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_sliding_window_admits_exactly_the_limit_across_window_ends() {
        sliding_edges(Backend::Redis).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cluster_sliding_window_admits_exactly_the_limit_across_window_ends() {
        sliding_edges(Backend::Cluster).await;
    }

    /// A throttle of 3 a second (named limiter, and a per-minute limit
    /// beside it) over HTTP, twelve clients hammering for 3.3 s: exactly 3
    /// in every window of the per-second bucket, and the per-minute bucket
    /// holds exactly the requests admitted.
    async fn throttle_edges(backend: Backend) {
        let running = Running::start(backend);
        let prefix = support::unique_prefix("tedge");
        let (app, store) = running.app(&prefix);
        let url = running.url.clone().unwrap();
        app.scope(async {
            RateLimiter::define("edge", |_req| {
                vec![
                    Limit::per_second(MAX as i64, 1).by("sec"),
                    Limit::per_minute(100_000).by("min"),
                ]
                .into()
            });
            let server =
                TestServer::start(ok_routes(&[PATH]).middleware_named("throttle:edge")).await;
            let ok = Arc::new(AtomicUsize::new(0));
            let other = Arc::new(parking_lot::Mutex::new(Vec::<u16>::new()));
            let stop = Arc::new(AtomicBool::new(false));
            let timers = Arc::new(parking_lot::Mutex::new(BTreeSet::new()));
            let poller = {
                let (stop, timers) = (stop.clone(), timers.clone());
                let conn = connect(&url);
                let timer = format!("{prefix}edge:sec:timer");
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let found: Option<String> =
                            conn.query(redis::cmd("GET").arg(&timer)).await.unwrap();
                        if let Some(found) = found {
                            timers.lock().insert(found);
                        }
                        tokio::time::sleep(Duration::from_millis(2)).await;
                    }
                })
            };
            let addr = server.addr();
            let clients: Vec<_> = (0..CLIENTS)
                .map(|_| {
                    let (stop, ok, other) = (stop.clone(), ok.clone(), other.clone());
                    tokio::spawn(async move {
                        let stream = TcpStream::connect(addr).await.unwrap();
                        stream.set_nodelay(true).unwrap();
                        let (mut sender, conn) =
                            hyper::client::conn::http1::handshake(TokioIo::new(stream))
                                .await
                                .unwrap();
                        let conn = tokio::spawn(conn);
                        while !stop.load(Ordering::SeqCst) {
                            let request = http::Request::get(PATH)
                                .header(http::header::HOST, addr.to_string())
                                .body(Full::<Bytes>::default())
                                .unwrap();
                            let reply =
                                Reply::read(sender.send_request(request).await.unwrap()).await;
                            match reply.status {
                                200 => {
                                    ok.fetch_add(1, Ordering::SeqCst);
                                }
                                429 => {}
                                s => other.lock().push(s),
                            }
                        }
                        drop(sender);
                        let _ = conn.await;
                    })
                })
                .collect();
            tokio::time::sleep(RUN).await;
            stop.store(true, Ordering::SeqCst);
            for c in clients {
                c.await.unwrap();
            }
            poller.await.unwrap();
            let windows = timers.lock().len();
            let ok = ok.load(Ordering::SeqCst);
            assert_eq!(*other.lock(), Vec::<u16>::new(), "{backend:?}");
            assert_eq!(
                ok,
                windows * MAX,
                "{backend:?}: {ok} admitted in {windows} windows"
            );
            let minute: i64 = store
                .get("edge:min")
                .await
                .unwrap()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(minute as usize, ok, "{backend:?}: the per-minute bucket");
            server.stop().await;
        })
        .await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn redis_throttle_admits_exactly_the_limit_in_every_window_across_its_end() {
        throttle_edges(Backend::Redis).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn cluster_throttle_admits_exactly_the_limit_in_every_window_across_its_end() {
        throttle_edges(Backend::Cluster).await;
    }
}

// ---------------------------------------------------------------------------
// A window's edge on memory: the frozen clock stepped while clients hammer
// ---------------------------------------------------------------------------

mod memory_edges {
    use super::*;

    const MAX: usize = 3;
    const HAMMERERS: usize = 12;
    /// Steps of a quarter second: a window of one second holds four.
    const STEP: Duration = Duration::from_millis(250);
    const STEPS: usize = 14;

    /// Twelve keep-alive clients hammer `PATH` on `server` until `stop`;
    /// the number of 200s, and any status other than 200 and 429.
    fn hammer(
        addr: SocketAddr,
        stop: Arc<AtomicBool>,
        ok: Arc<AtomicUsize>,
        other: Arc<parking_lot::Mutex<Vec<u16>>>,
    ) -> Vec<tokio::task::JoinHandle<()>> {
        (0..HAMMERERS)
            .map(|_| {
                let (stop, ok, other) = (stop.clone(), ok.clone(), other.clone());
                tokio::spawn(async move {
                    let stream = TcpStream::connect(addr).await.unwrap();
                    stream.set_nodelay(true).unwrap();
                    let (mut sender, conn) =
                        hyper::client::conn::http1::handshake(TokioIo::new(stream))
                            .await
                            .unwrap();
                    let conn = tokio::spawn(conn);
                    while !stop.load(Ordering::SeqCst) {
                        let request = http::Request::get(PATH)
                            .header(http::header::HOST, addr.to_string())
                            .body(Full::<Bytes>::default())
                            .unwrap();
                        let reply = Reply::read(sender.send_request(request).await.unwrap()).await;
                        match reply.status {
                            200 => {
                                ok.fetch_add(1, Ordering::SeqCst);
                            }
                            429 => {}
                            s => other.lock().push(s),
                        }
                    }
                    drop(sender);
                    let _ = conn.await;
                })
            })
            .collect()
    }

    /// Steps `clock` `STEPS` times while the clients hammer, letting them
    /// run 40 ms of real time at each instant; after each instant, `seen`
    /// records what it needs (a window's timer).
    async fn step_clock(clock: &FakeClock, mut seen: impl FnMut()) {
        for step in 0..STEPS {
            if step > 0 {
                clock.advance(STEP);
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
            seen();
        }
    }

    /// `throttle` of 3 a second (a named limiter with a per-minute limit
    /// beside it) on the memory store: exactly 3 in every window that
    /// opened, while the clock turns under the clients' feet.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_throttle_admits_exactly_the_limit_in_every_window_as_the_clock_turns() {
        let clock = clock_at(12, 0, 0);
        let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.shared()));
        let app = limiter_app(store.clone(), clock.shared());
        app.scope(async {
            RateLimiter::define("edge", |_req| {
                vec![
                    Limit::per_second(MAX as i64, 1).by("sec"),
                    Limit::per_minute(100_000).by("min"),
                ]
                .into()
            });
            let server =
                TestServer::start(ok_routes(&[PATH]).middleware_named("throttle:edge")).await;
            let (stop, ok) = (
                Arc::new(AtomicBool::new(false)),
                Arc::new(AtomicUsize::new(0)),
            );
            let other = Arc::new(parking_lot::Mutex::new(Vec::new()));
            let clients = hammer(server.addr(), stop.clone(), ok.clone(), other.clone());
            let timers = parking_lot::Mutex::new(BTreeSet::new());
            let handle = tokio::runtime::Handle::current();
            step_clock(&clock, || {
                let store = store.clone();
                let found = tokio::task::block_in_place(|| {
                    handle.block_on(async move { store.get("edge:sec:timer").await.unwrap() })
                });
                if let Some(found) = found {
                    timers.lock().insert(found);
                }
            })
            .await;
            stop.store(true, Ordering::SeqCst);
            for c in clients {
                c.await.unwrap();
            }
            let windows = timers.lock().len();
            let ok = ok.load(Ordering::SeqCst);
            assert_eq!(*other.lock(), Vec::<u16>::new());
            assert_eq!(ok, windows * MAX, "{ok} admitted in {windows} windows");
            let minute: i64 = store
                .get("edge:min")
                .await
                .unwrap()
                .unwrap()
                .parse()
                .unwrap();
            assert_eq!(minute as usize, ok, "the per-minute bucket");
            server.stop().await;
        })
        .await;
    }

    /// `RateLimitMiddleware`, 3 a second, on the memory driver, while the
    /// clock steps a quarter second at a time: hits made at one instant
    /// leave together one window later, so exactly 3 are admitted at every
    /// fourth instant, and `STEPS` instants admit 3 x ceil(STEPS / 4).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn memory_sliding_window_admits_exactly_the_limit_as_the_clock_turns() {
        let clock = clock_at(12, 0, 0);
        let driver: Arc<dyn RateLimiterDriver> =
            Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
        let router: Router = ok_routes(&[PATH]).middleware(RateLimitMiddleware::new(
            driver,
            SlidingWindowConfig::new(MAX as u32, Duration::from_secs(1)),
            |_req| "one-key".into(),
        ));
        let server = TestServer::start(router).await;
        let (stop, ok) = (
            Arc::new(AtomicBool::new(false)),
            Arc::new(AtomicUsize::new(0)),
        );
        let other = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let clients = hammer(server.addr(), stop.clone(), ok.clone(), other.clone());
        step_clock(&clock, || {}).await;
        stop.store(true, Ordering::SeqCst);
        for c in clients {
            c.await.unwrap();
        }
        assert_eq!(*other.lock(), Vec::<u16>::new());
        assert_eq!(ok.load(Ordering::SeqCst), MAX * STEPS.div_ceil(4));
        server.stop().await;
    }
}

// ---------------------------------------------------------------------------
// The memory sliding window against a plain log, step by step
// ---------------------------------------------------------------------------

/// A small deterministic generator (no seed crate needed).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % below
    }
}

/// The sliding log of the seeds, in whole milliseconds: a call at `now` is
/// admitted when fewer than `max` admitted hits lie in (now - window, now];
/// a refusal waits until the hit at index `count - max` leaves.
struct Log {
    hits: Vec<u64>,
    max: usize,
    window: u64,
}

impl Log {
    fn acquire(&mut self, now: u64) -> (bool, usize, Option<u64>) {
        self.hits.retain(|&h| h + self.window > now);
        if self.hits.len() < self.max {
            self.hits.push(now);
            return (true, self.max - self.hits.len(), None);
        }
        let gate = self.hits[self.hits.len() - self.max];
        (false, 0, Some(gate + self.window - now))
    }
}

/// Random walks of the clock (steps of 0 to 3 ms, and steps landing on or
/// one millisecond beside a window's edge), with bursts of calls at each
/// instant, on several keys: every decision of the memory driver equals
/// the log's (admitted, remaining, retry after).
#[tokio::test]
async fn memory_sliding_window_decides_as_the_log_on_random_walks_and_window_edges() {
    for (max, window_ms) in [
        (1, 1_000),
        (2, 1_000),
        (3, 1_500),
        (7, 60_000),
        (64, 2_000),
        (100, 60_000),
    ] {
        let clock = clock_at(12, 0, 0);
        let driver = InMemoryRateLimiter::with_clock(clock.shared());
        let config = SlidingWindowConfig::new(max as u32, Duration::from_millis(window_ms));
        let mut logs: Vec<Log> = (0..3)
            .map(|_| Log {
                hits: Vec::new(),
                max,
                window: window_ms,
            })
            .collect();
        let mut rng = Lcg(max as u64 * 7919 + window_ms);
        let mut now = 0_u64;
        for step in 0..4_000 {
            let advance = match rng.next(10) {
                0 => window_ms - 1,
                1 => window_ms,
                2 => window_ms + 1,
                3 => window_ms / 2,
                _ => rng.next(4),
            };
            now += advance;
            clock.advance(Duration::from_millis(advance));
            let calls = rng.next(max as u64 * 2 + 2);
            for _ in 0..calls {
                let k = rng.next(3) as usize;
                let d = driver.acquire(&format!("k{k}"), &config).await.unwrap();
                let (allowed, remaining, wait) = logs[k].acquire(now);
                assert_eq!(
                    (d.allowed, d.remaining, d.retry_after),
                    (allowed, remaining as u64, wait.map(Duration::from_millis)),
                    "limit {max} per {window_ms} ms, step {step}, key k{k}, at +{now} ms"
                );
            }
        }
    }
}

/// Laravel's fixed window, in whole milliseconds: a window opens at the
/// first hit and lives `decay` seconds; its timer holds the whole second
/// it opened in plus `decay`.
struct Fixed {
    opened: Option<u64>,
    count: i64,
    decay: u64,
}

impl Fixed {
    fn open_at(&self, now: u64) -> bool {
        self.opened.is_some_and(|o| o + self.decay * 1_000 > now)
    }

    /// `attempt(max)`: whether the callback runs.
    fn attempt(&mut self, now: u64, max: i64) -> bool {
        if !self.open_at(now) {
            self.opened = Some(now);
            self.count = 0;
        }
        if self.count >= max {
            return false;
        }
        self.count += 1;
        true
    }

    fn attempts(&self, now: u64) -> i64 {
        if self.open_at(now) { self.count } else { 0 }
    }

    /// `available_in`: the timer's second less the current second.
    fn available_in(&self, start_secs: u64, now: u64) -> i64 {
        match self.opened {
            Some(o) if self.open_at(now) => {
                let ends = (start_secs * 1_000 + o) / 1_000 + self.decay;
                (ends as i64 - ((start_secs * 1_000 + now) / 1_000) as i64).max(0)
            }
            _ => 0,
        }
    }
}

/// The memory store's fixed window against the model above, on random
/// walks of the clock that land on and beside window ends: `attempt`,
/// `attempts`, `remaining`, `too_many_attempts` and `available_in` agree
/// at every step.
#[tokio::test]
async fn memory_fixed_window_decides_as_laravel_on_random_walks_and_window_edges() {
    for (max, decay) in [(1_i64, 1_u64), (3, 1), (5, 2), (60, 60)] {
        let clock = clock_at(12, 0, 0);
        let start_secs = suprnova::clock::Clock::unix_seconds(&clock_at(12, 0, 0)) as u64;
        let store = Arc::new(MemoryStore::with_clock(clock.shared()));
        let limiter = CacheRateLimiter::new(store, clock.shared());
        let mut model = Fixed {
            opened: None,
            count: 0,
            decay,
        };
        let mut rng = Lcg(max as u64 * 31 + decay);
        let mut now = 0_u64;
        for step in 0..3_000 {
            let window = decay * 1_000;
            let advance = match rng.next(10) {
                0 => window - 1,
                1 => window,
                2 => window + 1,
                3 => 999 - (now % 1_000),
                _ => rng.next(300),
            };
            now += advance;
            clock.advance(Duration::from_millis(advance));
            let what = format!("max {max}, decay {decay}, step {step}, +{now} ms");
            for _ in 0..rng.next(max as u64 * 2 + 1) {
                let ran = limiter
                    .attempt("k", max, || async {}, decay as i64)
                    .await
                    .unwrap()
                    .is_some();
                assert_eq!(ran, model.attempt(now, max), "attempt: {what}");
            }
            assert_eq!(
                limiter.attempts("k").await.unwrap(),
                model.attempts(now),
                "attempts: {what}"
            );
            assert_eq!(
                limiter.remaining("k", max).await.unwrap(),
                (max - model.attempts(now)).max(0),
                "remaining: {what}"
            );
            assert_eq!(
                limiter.too_many_attempts("k", max).await.unwrap(),
                model.attempts(now) >= max,
                "too_many_attempts: {what}"
            );
            assert_eq!(
                limiter.available_in("k").await.unwrap(),
                model.available_in(start_secs, now),
                "available_in: {what}"
            );
        }
    }
}

// ---------------------------------------------------------------------------
// HTTP/2: fifty requests at once on each of twenty connections
// ---------------------------------------------------------------------------

/// Twenty HTTP/2 connections (prior knowledge), each sending its fifty
/// requests at once as concurrent streams.
async fn h2_storm(addr: SocketAddr) -> Vec<Reply> {
    let start = Arc::new(Barrier::new(CLIENTS));
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let start = start.clone();
            tokio::spawn(async move {
                let stream = TcpStream::connect(addr).await.unwrap();
                stream.set_nodelay(true).unwrap();
                let (sender, conn) = hyper::client::conn::http2::handshake(
                    hyper_util::rt::TokioExecutor::new(),
                    TokioIo::new(stream),
                )
                .await
                .unwrap();
                let conn = tokio::spawn(conn);
                start.wait().await;
                let replies = futures_util::future::join_all((0..ATTEMPTS).map(|_| {
                    let mut sender = sender.clone();
                    async move {
                        let request = http::Request::get(format!("http://{addr}{PATH}"))
                            .body(Full::<Bytes>::default())
                            .unwrap();
                        Reply::read(sender.send_request(request).await.unwrap()).await
                    }
                }))
                .await;
                drop(sender);
                let _ = conn.await;
                replies
            })
        })
        .collect();
    let mut replies = Vec::with_capacity(CLIENTS * ATTEMPTS);
    for task in tasks {
        let one = support::within("a connection's streams", Duration::from_secs(30), task);
        replies.extend(one.await.unwrap());
    }
    replies
}

async fn throttle_h2_storm(backend: Backend) {
    let running = Running::start(backend);
    let (app, store) = running.app(&support::unique_prefix("h2"));
    let clock = running.clock();
    app.scope(async {
        let server = TestServer::start(ok_routes(&[PATH]).middleware_named("throttle:100,1")).await;
        let from = now_secs(&clock);
        let replies = h2_storm(server.addr()).await;
        let to = now_secs(&clock);
        let o = outcome(&replies);
        assert_exact(
            &o,
            &format!("{backend:?} throttle:100,1 over HTTP/2"),
            (from, to),
        );
        let key = "ip:127.0.0.1:path:/hot";
        let timer: i64 = store
            .get(&format!("{key}:timer"))
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(o.resets, BTreeSet::from([timer]), "{backend:?}");
        assert_eq!(
            RateLimiter::attempts(key).await.unwrap(),
            100,
            "{backend:?}"
        );
        server.stop().await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_throttle_100_1_admits_exactly_100_of_1000_streams_over_http2() {
    throttle_h2_storm(Backend::Memory).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_throttle_100_1_admits_exactly_100_of_1000_streams_over_http2() {
    throttle_h2_storm(Backend::Redis).await;
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_throttle_100_1_admits_exactly_100_of_1000_streams_over_http2() {
    throttle_h2_storm(Backend::Cluster).await;
}

// ---------------------------------------------------------------------------
// Every refusal of one window points at that window's end
// ---------------------------------------------------------------------------

/// A clock that moves on by `tick` each time it is read, as real time moves
/// on while a request is handled.
#[derive(Debug)]
struct Ticking {
    at: parking_lot::Mutex<Duration>,
    tick: Duration,
}

impl suprnova::clock::Clock for Ticking {
    fn now(&self) -> Duration {
        let mut at = self.at.lock();
        let now = *at;
        *at += self.tick;
        now
    }
}

/// Seed 000: "Every caller refused inside one window is given the same end
/// time"; the throttle's docs: `X-RateLimit-Reset` is "the timer's second"
/// (outside the window's last second). A throttle of two limits (60 a
/// minute, 1000 an hour) on the memory store, its limiter on a clock that
/// moves 7 ms at each read (the store's own clock is frozen, so no entry
/// expires): 60 admitted, then 2000 refusals within the first 30 seconds
/// of the window. Each must carry `X-RateLimit-Reset` = the timer (12:01:00)
/// and a `Retry-After` that reaches exactly it.
#[tokio::test]
async fn every_refusal_of_a_window_points_at_its_end_when_a_second_turns_mid_request() {
    use suprnova::ThrottleRequestsMiddleware;
    use suprnova::server::handle_request_with_peer;

    let frozen = clock_at(12, 0, 0);
    let noon = suprnova::clock::Clock::now(&frozen);
    let ticking: SharedClock = Arc::new(Ticking {
        at: parking_lot::Mutex::new(noon),
        tick: Duration::from_millis(7),
    });
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(frozen.shared()));
    let app = limiter_app(store.clone(), ticking.clone());
    app.scope(async {
        let router = ok_routes(&[PATH]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
            Limit::per_minute(60).by("a"),
            Limit::per_hour(1_000).by("b"),
        ]));
        let peer: SocketAddr = "203.0.113.5:40000".parse().unwrap();
        let mut admitted = 0;
        let mut resets = BTreeSet::new();
        let mut wrong = Vec::new();
        for i in 0..2_060 {
            let request = http::Request::get(PATH)
                .body(Full::<Bytes>::default())
                .unwrap();
            let r = handle_request_with_peer(&router, request, peer).await;
            match r.status_code() {
                200 => admitted += 1,
                429 => {
                    let reset: i64 = r.header_str("x-ratelimit-reset").unwrap().parse().unwrap();
                    resets.insert(reset);
                    if reset != noon.as_secs() as i64 + 60 && wrong.len() < 3 {
                        wrong.push((i, r.header_str("retry-after").unwrap().to_owned(), reset));
                    }
                }
                other => panic!("status {other}"),
            }
        }
        let timer: i64 = store
            .get("a:timer")
            .await
            .unwrap()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(
            timer,
            noon.as_secs() as i64 + 60,
            "the window ends at 12:01:00"
        );
        assert_eq!(admitted, 60);
        assert_eq!(
            resets,
            BTreeSet::from([timer]),
            "refusals pointing past 12:01:00 (request, Retry-After, reset): {wrong:?}"
        );
    })
    .await;
}
