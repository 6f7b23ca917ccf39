//! The cache store, the facade and the throttle on a 3-master Redis
//! Cluster, where a counter `K` and its window's timer `K:timer` live in
//! different slots: what a window counts when one of the two ends before
//! the other (compared with the same calls on one redis-server), the
//! commands a decision sends each master, and seed 001's twenty clients of
//! fifty requests over HTTP.

#![cfg(feature = "redis")]

mod support;
mod throttle_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::redis::{RedisCluster, RedisServer, connect};
use suprnova::cache::{IncrementOutcome, RedisStore, Store, WindowIncrement};
use suprnova::clock::{self, Clock, SystemClock};
use suprnova::limiter::CacheRateLimiter;

const MINUTE: Duration = Duration::from_secs(60);

/// A store with no prefix on the Redis at `url` (one node or a cluster).
fn store_on(url: &str) -> RedisStore {
    RedisStore::new(connect(url)).with_prefix("")
}

/// One count of 1 in a window of a minute on `key`, up to `ceiling`.
async fn count_in_a_minute(store: &RedisStore, key: &str, ceiling: i64) -> IncrementOutcome {
    let timer = format!("{key}:timer");
    store
        .increment_in_window(WindowIncrement {
            key,
            timer_key: &timer,
            ends_at: SystemClock.unix_seconds() + 60,
            decay_seconds: 60,
            amount: 1,
            ceiling,
        })
        .await
        .unwrap()
}

// The counter of a window that ended after its timer (the two were written
// by two calls to two masters, the counter a little later; or the timer was
// evicted or removed alone) still holds a count under its ceiling, with a
// second or so to live. The call that opens the next window counts on it:
// the store's own contract (cache/increment_if_below.lua, ARGV[1], and the
// memory store) is that such a counter then lives at least as long as the
// new window, "ending first, it would start the window's count again
// before the window ends". One redis-server does that in its script; on a
// cluster the opening call's third call does (it left the counter its old
// second).
#[tokio::test]
async fn a_counter_counted_on_by_the_call_that_opens_its_window_lives_as_long_as_the_window() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start(3);
    for url in [server.url(), cluster.url()] {
        let store = store_on(&url);
        let key = "short-lived:203.0.113.5";
        store.put(key, "1", Duration::from_secs(2)).await.unwrap();
        assert!(!store.has(&format!("{key}:timer")).await.unwrap());
        assert_eq!(
            count_in_a_minute(&store, key, 5).await,
            IncrementOutcome {
                counted: true,
                count: 2
            },
            "{url}"
        );
        // The window was opened by this call.
        let timer_ttl = store.ttl(&format!("{key}:timer")).await.unwrap().unwrap();
        assert!(timer_ttl > Duration::from_secs(55), "{url}: {timer_ttl:?}");
        let ttl = store.ttl(key).await.unwrap().unwrap();
        assert!(
            ttl <= MINUTE && ttl > Duration::from_secs(55),
            "{url}: the counter the window counts on ends in {ttl:?}, its window in {timer_ttl:?}"
        );
    }
}

/// Runs `attempt(key, 3, .., 60)` `times` times; how many callbacks ran.
async fn attempts(limiter: &CacheRateLimiter, key: &str, times: usize) -> usize {
    let ran = AtomicUsize::new(0);
    for _ in 0..times {
        limiter
            .attempt(
                key,
                3,
                || async {
                    ran.fetch_add(1, Ordering::SeqCst);
                },
                60,
            )
            .await
            .unwrap();
    }
    ran.load(Ordering::SeqCst)
}

// `attempt`'s docs: "callers ... never run more than `max_attempts`
// callbacks in a window". A counter left at 2 of 3 by a window whose timer
// ended first (1 s left on the counter) is counted on by the attempt that
// opens the next window of a minute: that window runs 1 callback and
// refuses for its whole minute, on one node and on a cluster. (On a cluster
// the counter ended after 1 s while the window's timer stood, and the same
// window ran 3 callbacks more: 4 in one window of at most 3.)
#[tokio::test]
async fn attempt_runs_no_more_than_its_maximum_in_a_window_whose_counter_it_carried_over() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start(3);
    for url in [server.url(), cluster.url()] {
        let store = Arc::new(store_on(&url));
        let limiter = CacheRateLimiter::new(store.clone(), clock::system());
        let key = "exports:user:7";
        let timer = format!("{key}:timer");
        store.put(key, "2", Duration::from_secs(1)).await.unwrap();
        let mut ran = attempts(&limiter, key, 3).await;
        assert_eq!(ran, 1, "{url}");
        let window_end = store.get(&timer).await.unwrap().expect("a window opened");
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        ran += attempts(&limiter, key, 4).await;
        // Still the same window: its timer holds the same end.
        assert_eq!(
            store.get(&timer).await.unwrap().as_deref(),
            Some(window_end.as_str()),
            "{url}"
        );
        assert!(
            ran <= 3,
            "{url}: {ran} callbacks ran in one window of attempt(.., 3, .., 60)"
        );
        assert!(limiter.too_many_attempts(key, 3).await.unwrap(), "{url}");
    }
}

/// Polls `ready` every 5 ms for at most `limit`.
async fn wait_for<F, Fut>(what: &str, limit: Duration, mut ready: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = std::time::Instant::now();
    while !ready().await {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// The key of the stalled-master tests: it and its timer live on two
/// masters.
const STALLED: &str = "stalled:user:9";

/// A 3-master cluster and a store and a limiter on it (calls bounded to 2 s),
/// both masters of [`STALLED`] and its timer connected and the count's
/// script loaded, so that a master stopped afterwards stalls a call and
/// nothing else.
async fn stall_ready() -> (RedisCluster, Arc<RedisStore>, Arc<CacheRateLimiter>) {
    use suprnova::redis_client::{RedisConfig, RedisConnection};
    let cluster = RedisCluster::start(3);
    let timer = format!("{STALLED}:timer");
    assert_ne!(
        cluster.node_of(STALLED),
        cluster.node_of(&timer),
        "two masters"
    );
    let config = RedisConfig::from_url(&cluster.url())
        .unwrap()
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(2));
    let store = Arc::new(RedisStore::new(RedisConnection::new(config).unwrap()).with_prefix(""));
    let limiter = Arc::new(CacheRateLimiter::new(store.clone(), clock::system()));
    assert!(!store.has(&timer).await.unwrap());
    assert_eq!(
        store
            .increment_if_below(STALLED, 1, 0, 3)
            .await
            .unwrap()
            .count,
        0
    );
    store.forget(STALLED).await.unwrap();
    (cluster, store, limiter)
}

/// One `attempt` of at most 3 in a window of one second on [`STALLED`],
/// counting the callbacks it runs in `ran`: whether it ran.
async fn three_a_second(limiter: Arc<CacheRateLimiter>, ran: Arc<AtomicUsize>) -> bool {
    limiter
        .attempt(
            STALLED,
            3,
            || async {
                ran.fetch_add(1, Ordering::SeqCst);
            },
            1,
        )
        .await
        .unwrap()
        .is_some()
}

// No key removed or rewritten by hand: the counter's master answers 300 ms
// late once (a stall well inside the call's deadline and the cluster's node
// timeout), so the first attempt of a window of one second writes the
// timer at once and the counter 300 ms later. The timer ends first; the
// attempt that finds it gone opens the next window and counts on the
// counter, which must then live as long as that window: it ended 300 ms
// into it, and the window counted from 0 again (attempt(key, 3, .., 1)
// ran 4 callbacks in one window).
// On one node the script writes both keys in one step and this cannot
// happen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_counter_master_does_not_let_the_next_window_run_more_than_its_maximum() {
    let (cluster, store, limiter) = stall_ready().await;
    let timer = format!("{STALLED}:timer");
    let key = STALLED;
    let ran = Arc::new(AtomicUsize::new(0));
    let attempt = three_a_second;
    let pid = cluster.pid_of(cluster.node_of(key));
    assert!(support::signal(pid, "STOP"));
    let _resume = support::Resume(pid);
    let first = tokio::spawn(attempt(limiter.clone(), ran.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(support::signal(pid, "CONT"));
    assert!(first.await.unwrap(), "the first attempt of the window runs");
    assert!(attempt(limiter.clone(), ran.clone()).await);

    // The first window ends with its timer.
    wait_for(
        "the first window's timer to end",
        Duration::from_secs(3),
        || {
            let store = store.clone();
            let timer = timer.clone();
            async move { !store.has(&timer).await.unwrap() }
        },
    )
    .await;
    ran.store(0, Ordering::SeqCst);
    attempt(limiter.clone(), ran.clone()).await;
    let window_end = store.get(&timer).await.unwrap().expect("the next window");
    // The carried-over counter ends no earlier than the window it is
    // counted in (it ended 300 ms into it).
    let timer_left = store.ttl(&timer).await.unwrap().expect("the timer's time");
    let counter_left = store.ttl(key).await.unwrap().expect("the counter's time");
    assert!(
        counter_left + Duration::from_millis(50) >= timer_left,
        "the counter ends {counter_left:?} from now, its window {timer_left:?}"
    );
    for _ in 0..4 {
        attempt(limiter.clone(), ran.clone()).await;
    }
    // Within the window of one second, which four calls take far less of.
    if store.get(&timer).await.unwrap() == Some(window_end) {
        let ran = ran.load(Ordering::SeqCst);
        assert!(
            ran <= 3,
            "{ran} callbacks ran in one window of attempt(.., 3, .., 1)"
        );
    }
}

// The other order: the timer's master answers 300 ms late once, so the
// first attempt of a window of one second writes the counter at once and
// the timer 300 ms later. The counter must end no earlier than the timer:
// it ended first, and while the window's timer stood the attempts that
// followed counted on a new counter from 0 (the window ran 2 + 3 = 5
// callbacks where its maximum is 3).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_timer_master_does_not_let_its_window_run_more_than_its_maximum() {
    let (cluster, store, limiter) = stall_ready().await;
    let timer = format!("{STALLED}:timer");
    let key = STALLED;
    let ran = Arc::new(AtomicUsize::new(0));
    let attempt = three_a_second;
    let pid = cluster.pid_of(cluster.node_of(&timer));
    assert!(support::signal(pid, "STOP"));
    let _resume = support::Resume(pid);
    let first = tokio::spawn(attempt(limiter.clone(), ran.clone()));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(support::signal(pid, "CONT"));
    assert!(first.await.unwrap(), "the first attempt of the window runs");
    let window_end = store.get(&timer).await.unwrap().expect("the window");
    // The counter, written 300 ms before its timer, ends no earlier than it.
    let timer_left = store.ttl(&timer).await.unwrap().expect("the timer's time");
    let counter_left = store.ttl(key).await.unwrap().expect("the counter's time");
    assert!(
        counter_left + Duration::from_millis(50) >= timer_left,
        "the counter ends {counter_left:?} from now, its window {timer_left:?}"
    );
    assert!(attempt(limiter.clone(), ran.clone()).await);
    for _ in 0..4 {
        attempt(limiter.clone(), ran.clone()).await;
    }
    // Within the window of one second, which these calls take far less of.
    if store.get(&timer).await.unwrap() != Some(window_end) {
        return;
    }
    let ran = ran.load(Ordering::SeqCst);
    assert!(
        ran <= 3,
        "{ran} callbacks ran in one window of attempt(.., 3, .., 1)"
    );
}

// The carried-over counter seen over HTTP: `throttle:3,1` on a route, on a
// cluster, where the route's counter was left at 2 with a second to live
// by a window whose timer has ended. The first request opens a window of a
// minute and is let through; the second gets a 429 saying to retry in about
// 60 seconds, and the route keeps refusing in that window (a second and a
// bit later it let 3 more requests through).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_throttled_route_keeps_its_429_for_the_window_it_reported() {
    use suprnova::RateLimiter;

    let cluster = RedisCluster::start(3);
    let prefix = support::unique_prefix("carried");
    let app = throttle_support::app_on_redis(&cluster.url(), &prefix);
    app.scope(async {
        let router = throttle_support::ok_routes(&["/t"]).middleware_named("throttle:3,1");
        let http = support::http::TestServer::start(router).await;
        let key = RateLimiter::clean_rate_limiter_key("ip:127.0.0.1:path:/t");
        RateLimiter::instance()
            .store()
            .put(&key, "2", Duration::from_secs(1))
            .await
            .unwrap();
        assert_eq!(http.get("/t").await.status, 200);
        let refused = http.get("/t").await;
        assert_eq!(refused.status, 429);
        let retry_after: u64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((59..=60).contains(&retry_after), "{retry_after}");
        tokio::time::sleep(Duration::from_millis(1_300)).await;
        let mut through = 0;
        for _ in 0..3 {
            if http.get("/t").await.status == 200 {
                through += 1;
            }
        }
        assert_eq!(
            through, 0,
            "{through} requests went through in the window a 429 said lasts {retry_after} s more"
        );
        http.stop().await;
    })
    .await;
}

/// `MONITOR` on every master of a cluster: the commands clients (not
/// scripts) send each master while a call runs.
struct Monitors(Vec<(u16, std::io::BufReader<std::net::TcpStream>)>);

impl Monitors {
    fn start(ports: &[u16]) -> Self {
        use std::io::{BufRead, Write};
        Self(
            ports
                .iter()
                .map(|&port| {
                    let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
                    stream
                        .set_read_timeout(Some(Duration::from_secs(5)))
                        .unwrap();
                    stream.write_all(b"MONITOR\r\n").unwrap();
                    let mut lines = std::io::BufReader::new(stream);
                    let mut ok = String::new();
                    lines.read_line(&mut ok).unwrap();
                    assert_eq!(ok, "+OK\r\n");
                    (port, lines)
                })
                .collect(),
        )
    }

    /// The `(port, command)` pairs seen, lower-case, in each master's order.
    fn finish(self) -> Vec<(u16, String)> {
        use std::io::BufRead;
        let mut seen = Vec::new();
        for (port, mut lines) in self.0 {
            support::redis::raw_command(port, "ECHO end-of-run").unwrap();
            loop {
                let mut line = String::new();
                lines.read_line(&mut line).expect("the end marker");
                let Some((_, after)) = line.split_once(" [") else {
                    continue;
                };
                let (client, command) = after.split_once("] ").unwrap();
                let name = command.split('"').nth(1).unwrap().to_lowercase();
                if name == "echo" && command.contains("end-of-run") {
                    break;
                }
                if !client.ends_with(" lua") {
                    seen.push((port, name));
                }
            }
        }
        seen
    }
}

// A decision is one round trip, on a cluster too: the sliding-window
// driver's `acquire` is one EVALSHA to the key's master (rate-limiting.md:
// "Each request makes one call to `acquire` (one round trip on Redis)"),
// and the cache store's count in an open window is the timer's SET NX EX
// and the counter's script, one to each master, sent at once (RedisStore's
// docs: "on a cluster it is `SET NX EX` and the script sent at once, in one
// round trip").
#[tokio::test]
async fn a_decision_on_a_cluster_sends_one_command_to_each_master_it_needs() {
    use suprnova::rate_limit::redis::RedisRateLimiter;
    use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
    let cluster = RedisCluster::start(3);
    let driver = RedisRateLimiter::new(connect(&cluster.url())).with_prefix("");
    let store = store_on(&cluster.url());
    let cfg = SlidingWindowConfig::new(5, MINUTE);
    let key = "user:42";
    // Connected, scripts loaded, window open.
    driver.acquire(key, &cfg).await.unwrap();
    count_in_a_minute(&store, "count:42", 5).await;

    let monitors = Monitors::start(&cluster.ports());
    assert!(driver.acquire(key, &cfg).await.unwrap().allowed);
    let seen = monitors.finish();
    assert_eq!(seen, vec![(cluster.node_of(key), "evalsha".to_owned())]);

    let monitors = Monitors::start(&cluster.ports());
    let counted = count_in_a_minute(&store, "count:42", 5).await;
    assert_eq!(counted.count, 2);
    let mut seen = monitors.finish();
    seen.sort();
    let mut expected = vec![
        (cluster.node_of("count:42"), "evalsha".to_owned()),
        (cluster.node_of("count:42:timer"), "set".to_owned()),
    ];
    expected.sort();
    assert_eq!(seen, expected);
}

// Seed 001's concurrency scenario over HTTP on a cluster: twenty servers,
// each with its own connection to the cluster (as twenty replicas of an
// application would be), one route `throttle:100,1`, and a client per
// server making fifty requests one after another: exactly 100 are let
// through, and the other 900 are 429s.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_servers_on_a_cluster_let_exactly_100_of_1000_requests_through() {
    let cluster = RedisCluster::start(3);
    let prefix = support::unique_prefix("twenty");
    let mut servers = Vec::new();
    for _ in 0..20 {
        let app = throttle_support::app_on_redis(&cluster.url(), &prefix);
        let server = app.scope(async {
            let router = throttle_support::ok_routes(&["/t"]).middleware_named("throttle:100,1");
            support::http::TestServer::start(router).await
        });
        servers.push(server.await);
    }
    let servers: Vec<Arc<support::http::TestServer>> = servers.into_iter().map(Arc::new).collect();
    let clients: Vec<_> = servers
        .iter()
        .map(|server| {
            let server = server.clone();
            tokio::spawn(async move {
                let mut statuses = Vec::with_capacity(50);
                for _ in 0..50 {
                    statuses.push(server.get("/t").await.status);
                }
                statuses
            })
        })
        .collect();
    let mut through = 0;
    let mut refused = 0;
    for client in clients {
        let statuses = support::within("fifty requests", Duration::from_secs(60), client)
            .await
            .unwrap();
        for status in statuses {
            match status {
                200 => through += 1,
                429 => refused += 1,
                other => panic!("status {other}"),
            }
        }
    }
    assert_eq!((through, refused), (100, 900));
}
