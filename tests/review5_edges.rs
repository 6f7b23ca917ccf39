//! Edges of the Redis credentials merged into `REDIS_URL`, of hits in no
//! window on the memory store, one Redis node and a Redis Cluster, and of
//! the `throttle` alias's saturated numbers.
#![cfg(feature = "redis")]

mod support;
mod throttle_support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::boot::plan;
use support::clock_at;
use support::redis::{RedisCluster, RedisServer, connect};
use support::unique_prefix;
use suprnova::cache::{MemoryStore, RedisStore, Store};
use suprnova::limiter::CacheRateLimiter;
use throttle_support::{get_as_guest, memory_app, ok_routes};

/// Runs `future` bounded in time.
async fn bounded<T>(what: &str, future: impl std::future::Future<Output = T>) -> T {
    support::within(what, Duration::from_secs(20), future).await
}

// ---------------------------------------------------------------------------
// Credentials beside REDIS_URL.

/// A URL that names its own username and password is used as written:
/// "credentials written in the URL win" (docs/deployment.md). A
/// `REDIS_USERNAME` beside it is never sent, so the reason the crate gives
/// for refusing a lone username ("every call is made as the default user")
/// does not hold: every call is made as the URL's user. Laravel merges the
/// URL's user and password over the connection's and connects as `me`.
/// Before credentials were merged into REDIS_URL, this configuration booted.
#[test]
fn a_redis_url_with_its_own_credentials_boots_beside_a_lone_redis_username() {
    let pairs = [
        ("APP_ENV", "local"),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", "redis://me:mine@127.0.0.1:6390"),
        ("REDIS_USERNAME", "app"),
    ];
    match plan(&pairs) {
        Ok(plan) => {
            let nodes = plan.cache.redis.expect("a Redis cache").nodes().to_vec();
            assert_eq!(nodes, ["redis://me:mine@127.0.0.1:6390/1"]);
        }
        Err(refused) => panic!("a URL with its own credentials was refused: {refused}"),
    }
}

/// REDIS_PASSWORD merged into a node of REDIS_URL (a TCP URL, a socket's
/// query, every seed of a cluster) never shows in a refusal or in the
/// printed plan, however it is spelt.
#[test]
fn a_merged_redis_password_never_shows_in_a_refusal_or_the_printed_plan() {
    let secret = "Zq9&pass=w,x@y/z%41#";
    let needle = "Zq9";
    for url in [
        "redis://127.0.0.1:6390",
        "rediss://cache.internal:6390/2",
        "unix:///run/redis/redis.sock",
        "redis+unix:///run/redis/redis.sock?db=3",
        "redis+cluster://a.internal:7000,b.internal:7001",
        "redis://a.internal:7000,redis://b.internal:7001",
    ] {
        for user in [None, Some("app")] {
            let mut pairs = vec![
                ("APP_ENV", "local"),
                ("CACHE_STORE", "redis"),
                ("REDIS_URL", url),
                ("REDIS_PASSWORD", secret),
            ];
            if let Some(user) = user {
                pairs.push(("REDIS_USERNAME", user));
            }
            let plan = plan(&pairs).unwrap_or_else(|e| panic!("{url}: {e}"));
            let redis = plan.cache.redis.clone().expect("a Redis cache");
            // The password is what the connection is given.
            assert!(
                redis.nodes().iter().all(|node| node.contains(needle)),
                "{url}: {:?}",
                redis.nodes()
            );
            let printed = format!("{plan:?} {}", redis.redacted());
            assert!(!printed.contains(needle), "{url}: {printed}");
        }
    }
    // Refused nodes: the refusal shows none of the password merged in.
    for url in [
        "redis://127.0.0.1:0",
        "redis+cluster://a.internal:7000,b.internal:0",
        "redis://a.internal:7000/1,redis://b.internal:7001",
        "unix:///run/redis/redis.sock?db=x",
    ] {
        let refused = plan(&[
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            ("REDIS_URL", url),
            ("REDIS_USERNAME", "app"),
            ("REDIS_PASSWORD", secret),
        ])
        .map(|_| ())
        .expect_err(url)
        .to_string();
        assert!(!refused.contains(needle), "{url}: {refused}");
    }
}

// ---------------------------------------------------------------------------
// Hits in no window, alike on every store.

/// What a limiter answers on a sequence of hits in no window: on a key
/// whose window was reset (its counter removed, its timer standing), on a
/// key whose count was taken back to 0, and on a key with no window.
async fn no_window_transcript(limiter: &CacheRateLimiter) -> Vec<String> {
    let mut out = Vec::new();
    // A window reset: the hit counts in it, and the count ends with it.
    out.push(format!("open {}", limiter.hit("reset", 60).await.unwrap()));
    limiter.reset_attempts("reset").await.unwrap();
    out.push(format!("hit0 {}", limiter.hit("reset", 0).await.unwrap()));
    out.push(format!("hit0 {}", limiter.hit("reset", 0).await.unwrap()));
    out.push(format!(
        "attempts {}",
        limiter.attempts("reset").await.unwrap()
    ));
    let wait = limiter.available_in("reset").await.unwrap();
    out.push(format!("wait in 59..=60 {}", (59..=60).contains(&wait)));
    // A count taken back to 0 in its window.
    out.push(format!("open {}", limiter.hit("zero", 60).await.unwrap()));
    out.push(format!(
        "back {}",
        limiter.decrement("zero", 60, 1).await.unwrap()
    ));
    out.push(format!(
        "inc0 {}",
        limiter.increment("zero", 0, 3).await.unwrap()
    ));
    out.push(format!(
        "attempts {}",
        limiter.attempts("zero").await.unwrap()
    ));
    // No window: every hit counts alone and nothing stays.
    for _ in 0..3 {
        out.push(format!("none {}", limiter.hit("none", 0).await.unwrap()));
    }
    out.push(format!(
        "neg {}",
        limiter.increment("none", 0, -2).await.unwrap()
    ));
    out.push(format!(
        "attempts {}",
        limiter.attempts("none").await.unwrap()
    ));
    out
}

/// Twenty callers of `hit_and_check(key, 1, 0)`, ten calls each: how many
/// were refused, and the count left.
async fn refused_in_no_window(limiter: impl Fn() -> CacheRateLimiter) -> (usize, i64) {
    let refused = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let limiter = limiter();
            let refused = refused.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    if limiter.hit_and_check("burst", 1, 0).await.unwrap() {
                        refused.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        bounded("a caller", task).await.unwrap();
    }
    let left = limiter().attempts("burst").await.unwrap();
    (refused.load(Ordering::SeqCst), left)
}

/// The count in no window answers alike on the memory store, one Redis
/// node and a Redis Cluster (where the counter and its timer are read in
/// two steps), and on each callers at one moment never limit one another.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hits_in_no_window_answer_alike_on_memory_one_node_and_a_cluster() {
    let clock = clock_at(12, 0, 0);
    let memory: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.shared()));
    let on_memory = || CacheRateLimiter::new(Arc::clone(&memory), clock.shared());
    let expected = bounded("memory", no_window_transcript(&on_memory())).await;
    assert_eq!(
        bounded("memory burst", refused_in_no_window(on_memory)).await,
        (0, 0)
    );

    let server = RedisServer::start();
    let cluster = RedisCluster::start(3);
    for (name, url) in [("one node", server.url()), ("cluster", cluster.url())] {
        let prefix = unique_prefix("nowindow5");
        let limiter = || {
            CacheRateLimiter::new(
                Arc::new(RedisStore::new(connect(&url)).with_prefix(prefix.clone())),
                suprnova::clock::system(),
            )
        };
        let seen = bounded(name, no_window_transcript(&limiter())).await;
        assert_eq!(seen, expected, "{name}");
        assert_eq!(
            bounded(name, refused_in_no_window(limiter)).await,
            (0, 0),
            "{name}: (refused of 200, count left)"
        );
    }
}

// ---------------------------------------------------------------------------
// The throttle alias's saturated numbers.

/// A window past the largest `i64` is read as the largest, as a limit is:
/// the route registers, counts, refuses the second request, and its
/// refusal carries a wait and a reset that are whole, non-negative numbers.
#[tokio::test]
async fn a_window_past_the_largest_integer_counts_and_refuses_with_sane_headers() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = ok_routes(&["/slow"])
                .try_middleware_named("throttle:1,99999999999999999999")
                .unwrap_or_else(|err| panic!("a window larger than i64 refused: {err}"));
            let first = bounded("first", get_as_guest(&router, "/slow")).await;
            assert_eq!(first.status_code(), 200);
            let second = bounded("second", get_as_guest(&router, "/slow")).await;
            assert_eq!(second.status_code(), 429);
            for header in ["retry-after", "x-ratelimit-reset"] {
                let value = second.header_str(header);
                assert!(
                    value.is_some_and(|v| v.parse::<u64>().is_ok_and(|n| n > 0)),
                    "{header}: {value:?}"
                );
            }
        })
        .await;
}

// ---------------------------------------------------------------------------
// A refused count that opens a window, on a cluster.

/// A count that opens a window and is refused gives a counter with no time
/// to live the window's, on every store: "Refused when it opened the
/// window, it gives a full count with no time to live (a plain increment
/// wrote it, here or in a Laravel application) the window's, so that it
/// ends with this window" (`add_then_increment_if_below`, and
/// `Store::increment_in_window`). A counter a plain increment and decrement
/// left at 0 is such a count: the memory store and one Redis node give it
/// the window's time to live, and so does a Redis Cluster (it left it for
/// ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_opener_gives_a_counter_at_zero_the_window_on_a_cluster_too() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start(3);
    let clock = suprnova::clock::FakeClock::at_unix(1_000);
    let stores: [(&str, Arc<dyn Store>); 3] = [
        ("memory", Arc::new(MemoryStore::with_clock(clock.shared()))),
        (
            "one node",
            Arc::new(RedisStore::new(connect(&server.url())).with_prefix(unique_prefix("z5"))),
        ),
        (
            "cluster",
            Arc::new(RedisStore::new(connect(&cluster.url())).with_prefix(unique_prefix("z5"))),
        ),
    ];
    let mut seen = Vec::new();
    for (name, store) in &stores {
        for (key, first) in [("zero", 1), ("below", -1)] {
            // A plain increment (and decrement): no time to live.
            store.increment(key, first).await.unwrap();
            if first > 0 {
                store.increment(key, -first).await.unwrap();
            }
            let timer_key = format!("{key}:timer");
            // An amount above the ceiling: refused at 0 or below, and the
            // call opens the window's timer.
            let outcome = bounded(
                name,
                store.increment_in_window(suprnova::cache::WindowIncrement {
                    key,
                    timer_key: &timer_key,
                    ends_at: 1_060,
                    decay_seconds: 60,
                    amount: 5,
                    ceiling: 3,
                }),
            )
            .await
            .unwrap();
            let ttl = support::ttl_seconds(store.as_ref(), key).await.unwrap();
            seen.push(format!(
                "{name} {key}: counted {} count {} ttl {ttl:?}",
                outcome.counted, outcome.count
            ));
        }
    }
    let want: Vec<String> = ["memory", "one node", "cluster"]
        .iter()
        .flat_map(|name| {
            [
                format!("{name} zero: counted false count 0 ttl Some(60)"),
                format!("{name} below: counted false count -1 ttl Some(60)"),
            ]
        })
        .collect();
    assert_eq!(seen, want);
}
