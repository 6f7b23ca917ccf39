//! The Redis cache store against real redis-server processes (one node and
//! a three-master cluster), its layout as Laravel's, and the facade's
//! counters on it: the boundary burst of a fixed window and exact counts
//! under concurrency.
#![cfg(feature = "redis")]

mod limiter_concurrency;
mod store_conformance;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use store_conformance::store_conformance_tests;
use support::redis::{RedisCluster, RedisServer, connect};
use support::unique_prefix;
use suprnova::RateLimiter;
use suprnova::cache::{CacheConfig, CacheError, IncrementOutcome, RedisStore, Store};
use suprnova::clock::{self, Clock, FakeClock, SystemClock};
use suprnova::config::Env;
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;
use suprnova::redis_client::{RedisConfig, RedisConnection};

async fn redis_store() -> (RedisServer, Arc<dyn Store>) {
    let server = RedisServer::start();
    let store = RedisStore::new(connect(&server.url()));
    (server, Arc::new(store))
}

store_conformance_tests!(redis_store);

/// The facade's limiter on `server`'s database 0, with the store's default
/// prefix and the system clock.
fn limiter_on(server: &RedisServer) -> CacheRateLimiter {
    CacheRateLimiter::new(
        Arc::new(RedisStore::new(connect(&server.url()))),
        clock::system(),
    )
}

/// A plain client on database `db`, to read what the store wrote.
async fn raw(url: &str, db: u8) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(format!("{url}/{db}")).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

async fn raw_get(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Option<String> {
    redis::cmd("GET").arg(key).query_async(conn).await.unwrap()
}

async fn raw_ttl(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> i64 {
    redis::cmd("TTL").arg(key).query_async(conn).await.unwrap()
}

async fn raw_keys(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let mut keys: Vec<String> = redis::cmd("KEYS").arg("*").query_async(conn).await.unwrap();
    keys.sort();
    keys
}

#[tokio::test]
async fn conformance_on_a_three_master_cluster() {
    let cluster = RedisCluster::start(3);
    let store = RedisStore::new(connect(&cluster.url())).with_prefix("");
    store_conformance::run_all(&store, "conf:").await;
    // A key and its timer hash to different slots, on a cluster too.
    let limiter = CacheRateLimiter::new(Arc::new(store.clone()), clock::system());
    for key in ["login:203.0.113.5", "api:user:1", "exports:7", "café"] {
        assert_eq!(limiter.hit(key, 60).await.unwrap(), 1);
        assert_eq!(limiter.hit(key, 60).await.unwrap(), 2);
        assert!(limiter.too_many_attempts(key, 2).await.unwrap());
        assert!((59..=60).contains(&limiter.available_in(key).await.unwrap()));
        limiter.clear(key).await.unwrap();
        assert_eq!(limiter.attempts(key).await.unwrap(), 0);
        assert_eq!(limiter.available_in(key).await.unwrap(), 0);
    }
    let port = cluster.ports()[0];
    let slot =
        |key: &str| support::redis::raw_command(port, &format!("CLUSTER KEYSLOT {key}")).unwrap();
    assert_ne!(slot("login:203.0.113.5"), slot("login:203.0.113.5:timer"));
    // The entries are spread over the masters.
    let holders = cluster
        .ports()
        .into_iter()
        .filter(|p| support::redis::raw_command(*p, "DBSIZE").is_some_and(|r| r.trim() != ":0"))
        .count();
    assert!(holders >= 2, "every entry landed on one master");
}

/// A window of 0 seconds on Redis opens none, but counts in the one an
/// earlier hit opened, as Laravel's `hit` with a decay of 0 increments a
/// counter that exists: up to the maximum, keeping its time to live, and
/// refusing while its timer is there. A full counter whose timer is gone
/// is removed; a key with no counter is left with none.
#[tokio::test]
async fn a_window_of_zero_seconds_counts_in_an_open_window() {
    let server = RedisServer::start();
    let now = SystemClock.unix_seconds();
    let clock = FakeClock::at_unix(u64::try_from(now).unwrap());
    let limiter = CacheRateLimiter::new(
        Arc::new(RedisStore::new(connect(&server.url())).with_prefix("")),
        clock.shared(),
    );
    let mut conn = raw(&server.url(), 0).await;
    let outcome = |counted, count| IncrementOutcome { counted, count };
    let runs = AtomicUsize::new(0);
    let attempt =
        |key: &'static str, max| support::attempt_with_no_window(&limiter, &runs, key, max);

    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    assert_eq!(attempt("k", 5).await, Some("ran"));
    assert_eq!(limiter.attempts("k").await.unwrap(), 2);
    assert_eq!(
        limiter.increment_if_below("k", 0, 1, 3).await.unwrap(),
        outcome(true, 3)
    );
    assert_eq!(raw_get(&mut conn, "k").await.as_deref(), Some("3"));
    let ttl = raw_ttl(&mut conn, "k").await;
    assert!((59..=60).contains(&ttl), "TTL {ttl}");
    let ends_at = (now + 60).to_string();
    assert_eq!(
        raw_get(&mut conn, "k:timer").await.as_deref(),
        Some(ends_at.as_str())
    );
    assert_eq!(
        limiter.increment_if_below("k", 0, 1, 3).await.unwrap(),
        outcome(false, 3)
    );
    assert_eq!(
        limiter.increment_if_below("k", 60, 1, 3).await.unwrap(),
        outcome(false, 3)
    );
    assert_eq!(attempt("k", 3).await, None);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(limiter.attempts("k").await.unwrap(), 3);

    // Full without its timer: removed, and counted as on no counter.
    assert_eq!(limiter.hit("k", 0).await.unwrap(), 4);
    redis::cmd("DEL")
        .arg("k:timer")
        .query_async::<i64>(&mut conn)
        .await
        .unwrap();
    assert_eq!(
        limiter.increment_if_below("k", 0, 1, 4).await.unwrap(),
        outcome(true, 1)
    );
    assert!(raw_keys(&mut conn).await.is_empty());

    // A key with no counter: counted every time, nothing stored.
    for _ in 0..3 {
        assert_eq!(attempt("none", 1).await, Some("ran"));
        assert_eq!(
            limiter.increment_if_below("none", -1, 1, 1).await.unwrap(),
            outcome(true, 1)
        );
    }
    assert_eq!(runs.load(Ordering::SeqCst), 4);
    assert!(raw_keys(&mut conn).await.is_empty());
}

#[tokio::test]
async fn entries_expire_after_their_time_to_live() {
    let (_server, store) = redis_store().await;
    store.put("p", "1", Duration::from_secs(1)).await.unwrap();
    assert!(store.add("a", "1", Duration::from_secs(1)).await.unwrap());
    assert!(
        store
            .increment_if_below("c", 1, 1, 5)
            .await
            .unwrap()
            .counted
    );
    assert_eq!(store.increment("n", 1).await.unwrap(), 1);
    tokio::time::sleep(Duration::from_millis(1_150)).await;
    for key in ["p", "a", "c"] {
        assert_eq!(store.get(key).await.unwrap(), None, "{key}");
    }
    assert!(store.add("a", "2", Duration::from_secs(1)).await.unwrap());
    // INCRBY gave "n" no time to live.
    assert_eq!(store.get("n").await.unwrap().as_deref(), Some("1"));
}

#[tokio::test]
async fn a_few_hits_leave_laravels_keys_values_and_times_to_live() {
    let server = RedisServer::start();
    // Laravel's cache lives in database 1 of the skeleton's connections.
    let conn = connect(&format!("{}/1", server.url()));
    let prefix = "laravel_database_laravel_cache_";
    let limiter = CacheRateLimiter::new(
        Arc::new(RedisStore::new(conn).with_prefix(prefix)),
        clock::system(),
    );
    let before = SystemClock.unix_seconds();
    limiter.hit("k", 60).await.unwrap();
    limiter.hit("k", 60).await.unwrap();
    limiter.hit("jôhn", 60).await.unwrap();
    let after = SystemClock.unix_seconds();

    let mut db1 = raw(&server.url(), 1).await;
    assert_eq!(
        raw_keys(&mut db1).await,
        [
            "laravel_database_laravel_cache_john",
            "laravel_database_laravel_cache_john:timer",
            "laravel_database_laravel_cache_k",
            "laravel_database_laravel_cache_k:timer",
        ]
    );
    assert_eq!(
        raw_get(&mut db1, "laravel_database_laravel_cache_k")
            .await
            .as_deref(),
        Some("2")
    );
    assert_eq!(
        raw_get(&mut db1, "laravel_database_laravel_cache_john")
            .await
            .as_deref(),
        Some("1")
    );
    let timer: i64 = raw_get(&mut db1, "laravel_database_laravel_cache_k:timer")
        .await
        .unwrap()
        .parse()
        .expect("the timer is a plain decimal Unix time");
    assert!((before + 60..=after + 60).contains(&timer), "{timer}");
    for key in [
        "laravel_database_laravel_cache_k",
        "laravel_database_laravel_cache_k:timer",
    ] {
        let ttl = raw_ttl(&mut db1, key).await;
        assert!((59..=60).contains(&ttl), "{key}: {ttl}");
        let kind: String = redis::cmd("TYPE")
            .arg(key)
            .query_async(&mut db1)
            .await
            .unwrap();
        assert_eq!(kind, "string");
    }
    // Nothing went to database 0.
    assert!(raw_keys(&mut raw(&server.url(), 0).await).await.is_empty());
}

// The throttle's count of a request (the window's timer when missing, then
// the conditional increment) is one script call on one node: one command
// for Redis to run, not a SET beside it.
#[tokio::test]
async fn a_hit_is_one_script_call_on_one_node() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server);
    // The first call loads the script.
    limiter.hit("warm", 60).await.unwrap();
    let sent = server
        .commands_sent_during(async {
            for _ in 0..5 {
                limiter.hit("k", 60).await.unwrap();
            }
            // The throttle's call: counted up to its maximum, then refused.
            for _ in 0..3 {
                limiter.increment_if_below("t", 60, 1, 2).await.unwrap();
            }
        })
        .await;
    assert_eq!(sent, ["evalsha"; 8]);
    assert_eq!(limiter.attempts("k").await.unwrap(), 5);
    assert_eq!(limiter.attempts("t").await.unwrap(), 2);
}

#[tokio::test]
async fn counters_a_laravel_application_wrote_are_read_and_counted() {
    let server = RedisServer::start();
    let mut db = raw(&server.url(), 1).await;
    let now = SystemClock.unix_seconds();
    // As Laravel 13 writes them, one with a timer serialized by phpredis.
    let _: () = redis::pipe()
        .cmd("SET")
        .arg("laravel-database-laravel-cache-login")
        .arg("3")
        .arg("EX")
        .arg(60)
        .cmd("SET")
        .arg("laravel-database-laravel-cache-login:timer")
        .arg(now + 60)
        .arg("EX")
        .arg(60)
        .cmd("SET")
        .arg("laravel-database-laravel-cache-php")
        .arg("1")
        .arg("EX")
        .arg(30)
        .cmd("SET")
        .arg("laravel-database-laravel-cache-php:timer")
        .arg(format!("i:{};", now + 30))
        .arg("EX")
        .arg(30)
        .query_async(&mut db)
        .await
        .unwrap();
    let conn = connect(&format!("{}/1", server.url()));
    let limiter = CacheRateLimiter::new(Arc::new(RedisStore::new(conn)), clock::system());
    assert_eq!(limiter.attempts("login").await.unwrap(), 3);
    assert!(limiter.too_many_attempts("login", 3).await.unwrap());
    assert!((59..=60).contains(&limiter.available_in("login").await.unwrap()));
    assert_eq!(limiter.hit("login", 60).await.unwrap(), 4);
    assert_eq!(
        raw_get(&mut db, "laravel-database-laravel-cache-login")
            .await
            .as_deref(),
        Some("4")
    );
    assert!((29..=30).contains(&limiter.available_in("php").await.unwrap()));
    assert_eq!(limiter.remaining("php", 5).await.unwrap(), 4);
}

#[tokio::test]
async fn the_env_config_installs_a_redis_store_in_the_cache_database() {
    let server = RedisServer::start();
    counts_in_the_cache_database(&server, ("REDIS_URL", &server.url())).await;
}

#[tokio::test]
async fn a_unix_socket_url_takes_the_cache_database_too() {
    let server = RedisServer::start();
    counts_in_the_cache_database(&server, ("REDIS_URL", &server.socket_url())).await;
}

#[tokio::test]
async fn a_socket_path_in_redis_host_is_reached_as_phpredis_reaches_it() {
    let server = RedisServer::start();
    let url = server.socket_url();
    let path = url.strip_prefix("unix://").unwrap();
    counts_in_the_cache_database(&server, ("REDIS_HOST", path)).await;
}

/// Boots a Redis store from `address`, a variable naming an address of
/// `server` and no database, and checks that it counts in database 1.
async fn counts_in_the_cache_database(server: &RedisServer, address: (&str, &str)) {
    let env = Env::from_pairs([("CACHE_STORE", "redis"), address]);
    let config = CacheConfig::from_env(&env).unwrap();
    let app = App::new();
    let store = config.install(&app).unwrap();
    assert_eq!(store.name(), "redis");
    app.scope(async {
        assert_eq!(RateLimiter::hit("api:1", 60).await.unwrap(), 1);
        assert_eq!(RateLimiter::attempts("api:1").await.unwrap(), 1);
    })
    .await;
    let mut db1 = raw(&server.url(), 1).await;
    assert_eq!(
        raw_keys(&mut db1).await,
        [
            "laravel-database-laravel-cache-api:1",
            "laravel-database-laravel-cache-api:1:timer"
        ]
    );
    assert!(raw_keys(&mut raw(&server.url(), 0).await).await.is_empty());
}

#[tokio::test]
async fn scripts_are_reloaded_after_a_flush() {
    let (server, store) = redis_store().await;
    assert!(store.add("a", "1", Duration::from_secs(60)).await.unwrap());
    assert!(
        store
            .increment_if_below("c", 60, 1, 2)
            .await
            .unwrap()
            .counted
    );
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    assert!(store.add("b", "1", Duration::from_secs(60)).await.unwrap());
    assert_eq!(
        store.increment_if_below("c", 60, 1, 2).await.unwrap().count,
        2
    );
}

#[tokio::test]
async fn a_dead_redis_fails_fast_with_a_backend_error() {
    let mut server = RedisServer::start();
    let config = RedisConfig::from_url(&server.url())
        .unwrap()
        .with_timeouts(Duration::from_millis(200), Duration::from_millis(200));
    let store = RedisStore::new(RedisConnection::new(config).unwrap());
    store.put("k", "1", Duration::from_secs(60)).await.unwrap();
    server.stop();
    let started = Instant::now();
    let err: CacheError = store.get("k").await.unwrap_err();
    assert!(err.is_backend(), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(2),
        "{:?}",
        started.elapsed()
    );
}

/// Laravel's own limiter on Redis, 5 per 2 seconds: one request at 0.0 s,
/// four at 1.9 s, a sixth refused; at 2.1 s the window has expired and five
/// more pass. Nine admitted in about 0.2 s.
#[tokio::test]
async fn the_fixed_window_admits_nine_in_two_tenths_of_a_second_around_its_boundary() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server);
    let key = "boundary";
    let request = || limiter.attempt(key, 5, || async {}, 2);
    // Connected, and the script loaded, before the clock starts.
    limiter.attempt("warm-up", 5, || async {}, 2).await.unwrap();
    // The window opens during the first request: it ends no sooner than two
    // seconds after `start` and no later than two seconds after
    // `opened_by`, whatever the first connection to Redis took.
    let start = Instant::now();
    assert!(
        request().await.unwrap().is_some(),
        "the first request opens the window"
    );
    let opened_by = Instant::now();
    tokio::time::sleep_until((start + Duration::from_millis(1_900)).into()).await;
    let mut admitted_in_burst = 0;
    for _ in 0..4 {
        admitted_in_burst += usize::from(request().await.unwrap().is_some());
    }
    assert!(
        request().await.unwrap().is_none(),
        "the sixth request is refused"
    );
    assert!(
        start.elapsed() < Duration::from_millis(2_000),
        "too slow: {:?}",
        start.elapsed()
    );
    tokio::time::sleep_until((opened_by + Duration::from_millis(2_100)).into()).await;
    for _ in 0..5 {
        admitted_in_burst += usize::from(request().await.unwrap().is_some());
    }
    assert!(
        request().await.unwrap().is_none(),
        "the new window is full after five"
    );
    assert_eq!(admitted_in_burst, 9);
    assert!(
        opened_by.elapsed() < Duration::from_millis(2_400),
        "{:?}",
        opened_by.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_connections_admit_exactly_the_limit() {
    let server = RedisServer::start();
    // A connection for each client, as 20 separate processes would have.
    let client = || {
        let store = RedisStore::new(connect(&server.url()));
        Arc::new(CacheRateLimiter::new(Arc::new(store), clock::system()))
    };
    for decide in limiter_concurrency::EVERY_WAY {
        for run in 0..3 {
            let key = format!("{}{decide:?}", unique_prefix("concurrency"));
            let admitted = limiter_concurrency::admitted(client, &key, decide).await;
            assert_eq!(admitted, 100, "{decide:?}, run {run}");
        }
    }
}
