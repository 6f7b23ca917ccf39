//! The Redis client and the Redis sliding-window driver at their edges:
//! unusual keys, limits of one and of `u32::MAX` under concurrency, keys of
//! another type, replies that come late, databases and protocols in the
//! URL, and URLs that must be refused.
#![cfg(feature = "redis")]

mod support;
mod throttle_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::redis::{RedisCluster, RedisServer, connect};
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimitError, RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::{RedisConfig, RedisConnection};

fn per_minute(max_requests: u32) -> SlidingWindowConfig {
    SlidingWindowConfig::new(max_requests, Duration::from_secs(60))
}

fn limiter_on(url: &str, name: &str) -> RedisRateLimiter {
    RedisRateLimiter::new(connect(url)).with_prefix(support::unique_prefix(name))
}

fn short_conn(url: &str, millis: u64) -> RedisConnection {
    let config = RedisConfig::from_url(url)
        .unwrap()
        .with_timeouts(Duration::from_millis(millis), Duration::from_millis(millis));
    RedisConnection::new(config).unwrap()
}

async fn raw(url: &str) -> redis::aio::MultiplexedConnection {
    redis::Client::open(url)
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Admits `calls` times on `key` and returns how many were admitted.
async fn admitted(
    limiter: &RedisRateLimiter,
    key: &str,
    cfg: &SlidingWindowConfig,
    calls: usize,
) -> usize {
    let mut n = 0;
    for _ in 0..calls {
        if limiter.acquire(key, cfg).await.unwrap().allowed {
            n += 1;
        }
    }
    n
}

/// Keys that differ only in bytes a careless encoder could fold together.
fn unusual_keys() -> Vec<String> {
    vec![
        String::new(),
        " ".to_owned(),
        "a b".to_owned(),
        "a\tb".to_owned(),
        "a\r\nb".to_owned(),
        "a\0b".to_owned(),
        "{tag}one".to_owned(),
        "{tag}two".to_owned(),
        "{}".to_owned(),
        "{".to_owned(),
        "ü".to_owned(),
        "u\u{308}".to_owned(),
        "日本".to_owned(),
        "\"quoted\"".to_owned(),
        "*".to_owned(),
        "x".repeat(100_000),
        format!("{}y", "x".repeat(99_999)),
    ]
}

// ---- keys ------------------------------------------------------------------

// Every key is its own bucket, whatever bytes it holds: a limit of 2 on
// each admits two calls per key, stored under exactly `<prefix><key>`.
#[tokio::test]
async fn keys_of_unusual_bytes_are_separate_buckets_stored_under_their_exact_names() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server.url(), "bytes");
    let cfg = per_minute(2);
    for key in unusual_keys() {
        assert_eq!(
            admitted(&limiter, &key, &cfg, 3).await,
            2,
            "key {:?}",
            &key[..key.len().min(20)]
        );
    }
    let mut conn = raw(&server.url()).await;
    for key in unusual_keys() {
        let full = format!("{}{key}", limiter.prefix());
        let card: u64 = redis::cmd("ZCARD")
            .arg(&full)
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(card, 2, "key {:?}", &key[..key.len().min(20)]);
    }
}

// On a cluster each bucket lives on the master that serves its slot
// (hash tags included), and nowhere else.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_keys_of_unusual_bytes_land_on_their_slots_master() {
    let cluster = RedisCluster::start(3);
    let limiter = limiter_on(&cluster.url(), "slots");
    let cfg = per_minute(2);
    let keys = unusual_keys();
    for key in &keys {
        assert_eq!(
            admitted(&limiter, key, &cfg, 3).await,
            2,
            "key {:?}",
            &key[..key.len().min(20)]
        );
    }
    let mut nodes = Vec::new();
    for port in cluster.ports() {
        nodes.push(raw(&format!("redis://127.0.0.1:{port}")).await);
    }
    for key in &keys {
        let full = format!("{}{key}", limiter.prefix());
        let slot: u16 = redis::cmd("CLUSTER")
            .arg("KEYSLOT")
            .arg(&full)
            .query_async(&mut nodes[0])
            .await
            .unwrap();
        let mut holders = 0;
        for conn in &mut nodes {
            let here: u64 = redis::cmd("CLUSTER")
                .arg("COUNTKEYSINSLOT")
                .arg(slot)
                .query_async(conn)
                .await
                .unwrap();
            if here > 0 {
                let card: Result<u64, _> = redis::cmd("ZCARD").arg(&full).query_async(conn).await;
                assert_eq!(card.unwrap(), 2, "key {:?}", &key[..key.len().min(20)]);
                holders += 1;
            }
        }
        assert_eq!(holders, 1, "key {:?}", &key[..key.len().min(20)]);
    }
}

// ---- exact limits under concurrency --------------------------------------

async fn concurrent_admits(
    limiter: Arc<RedisRateLimiter>,
    key: &str,
    cfg: SlidingWindowConfig,
) -> Vec<u64> {
    let mut tasks = Vec::new();
    for _ in 0..20 {
        let limiter = Arc::clone(&limiter);
        let key = key.to_owned();
        tasks.push(tokio::spawn(async move {
            let mut remaining = Vec::new();
            for _ in 0..50 {
                let d = limiter.acquire(&key, &cfg).await.unwrap();
                if d.allowed {
                    remaining.push(d.remaining);
                }
            }
            remaining
        }));
    }
    let mut all = Vec::new();
    for task in tasks {
        all.extend(task.await.unwrap());
    }
    all
}

// A limit of 1: of 1,000 concurrent calls, exactly one is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_limit_of_one_admits_exactly_one_of_a_thousand_concurrent_calls() {
    let server = RedisServer::start();
    let limiter = Arc::new(limiter_on(&server.url(), "one"));
    let admitted = concurrent_admits(Arc::clone(&limiter), "k", per_minute(1)).await;
    assert_eq!(admitted, vec![0]);
    let after = limiter.acquire("k", &per_minute(1)).await.unwrap();
    assert!(!after.allowed);
    let wait = after.retry_after.unwrap();
    assert!(
        wait > Duration::from_secs(55) && wait <= Duration::from_secs(60),
        "{wait:?}"
    );
}

// The largest limit: every one of 1,000 concurrent calls is admitted, and
// each is told a different number of places left, u32::MAX - 1 down to
// u32::MAX - 1000.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_largest_limit_admits_every_concurrent_call_with_distinct_remainders() {
    let server = RedisServer::start();
    let limiter = Arc::new(limiter_on(&server.url(), "max"));
    let remaining = concurrent_admits(limiter, "k", per_minute(u32::MAX)).await;
    assert_eq!(remaining.len(), 1000);
    let distinct: BTreeSet<u64> = remaining.into_iter().collect();
    let max = u64::from(u32::MAX);
    let expected: BTreeSet<u64> = (1..=1000).map(|n| max - n).collect();
    assert_eq!(distinct, expected);
}

// A window of one second: 1,000 concurrent calls under a limit of 100,
// finished well within the second, admit exactly 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_one_second_window_admits_exactly_its_limit_of_a_burst() {
    let server = RedisServer::start();
    let limiter = Arc::new(limiter_on(&server.url(), "second"));
    // Warm the connection so that the burst is not slowed by connecting.
    limiter.acquire("warm", &per_minute(1)).await.unwrap();
    let started = Instant::now();
    let cfg = SlidingWindowConfig::new(100, Duration::from_secs(1));
    let admitted = concurrent_admits(limiter, "k", cfg).await;
    let took = started.elapsed();
    if took < Duration::from_millis(900) {
        assert_eq!(admitted.len(), 100, "took {took:?}");
    } else {
        assert!(admitted.len() >= 100, "took {took:?}: {}", admitted.len());
    }
}

// ---- keys of another type ------------------------------------------------

// A key that something else wrote with another type is an error for both
// calls, never a decision, and is left as it was.
#[tokio::test]
async fn keys_of_other_types_are_backend_errors_for_acquire_and_retry_after() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server.url(), "types");
    let mut conn = raw(&server.url()).await;
    let p = limiter.prefix().to_owned();
    let () = redis::cmd("SET")
        .arg(format!("{p}string"))
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: i64 = redis::cmd("SADD")
        .arg(format!("{p}set"))
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    let _: String = redis::cmd("XADD")
        .arg(format!("{p}stream"))
        .arg("*")
        .arg("f")
        .arg("v")
        .query_async(&mut conn)
        .await
        .unwrap();
    for key in ["string", "set", "stream"] {
        let e = limiter.acquire(key, &per_minute(5)).await.unwrap_err();
        assert!(matches!(e, RateLimitError::Backend(_)), "{key}: {e:?}");
        assert!(e.to_string().contains("WRONGTYPE"), "{key}: {e}");
        let e = limiter.retry_after(key, &per_minute(5)).await.unwrap_err();
        assert!(matches!(e, RateLimitError::Backend(_)), "{key}: {e:?}");
    }
    let kind: String = redis::cmd("TYPE")
        .arg(format!("{p}string"))
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kind, "string");
}

// A sorted set that something else wrote, whose members are words and
// whose scores lie in the future, is an error and not a decision.
#[tokio::test]
async fn a_foreign_sorted_set_of_words_is_an_error_not_a_decision() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server.url(), "foreign");
    let mut conn = raw(&server.url()).await;
    let key = format!("{}board", limiter.prefix());
    let _: i64 = redis::cmd("ZADD")
        .arg(&key)
        .arg("9000000000000000")
        .arg("alice")
        .arg("9000000000000001")
        .arg("bob")
        .query_async(&mut conn)
        .await
        .unwrap();
    let result = limiter.acquire("board", &per_minute(5)).await;
    assert!(result.is_err(), "{result:?}");
}

// ---- late replies ----------------------------------------------------------

// A call that gave up on a paused Redis must not leave its reply to be
// read as the answer of the next call once Redis runs again.
#[tokio::test]
async fn a_reply_that_comes_after_its_call_gave_up_never_answers_the_next_call() {
    let server = RedisServer::start();
    let conn = short_conn(&server.url(), 200);
    let () = conn
        .query(redis::cmd("SET").arg("a").arg("A"))
        .await
        .unwrap();
    let () = conn
        .query(redis::cmd("SET").arg("b").arg("B"))
        .await
        .unwrap();
    assert!(server.command("CLIENT PAUSE 1000 ALL").starts_with("+OK"));
    let late: Result<String, _> = conn.query(redis::cmd("GET").arg("a")).await;
    assert!(late.is_err(), "{late:?}");
    tokio::time::sleep(Duration::from_millis(1100)).await;
    for _ in 0..5 {
        let b: String = conn.query(redis::cmd("GET").arg("b")).await.unwrap();
        assert_eq!(b, "B");
    }
}

// The same for decisions: a decision that timed out on a paused Redis,
// whose script runs once Redis resumes, never lends its reply to the next
// decision of another key.
#[tokio::test]
async fn a_late_decision_reply_never_answers_the_next_decision() {
    let server = RedisServer::start();
    let limiter = RedisRateLimiter::new(short_conn(&server.url(), 200))
        .with_prefix(support::unique_prefix("late"));
    // "full" is full: a late refusal read as another key's decision would
    // refuse it.
    assert_eq!(admitted(&limiter, "full", &per_minute(1), 1).await, 1);
    assert!(server.command("CLIENT PAUSE 1000 ALL").starts_with("+OK"));
    assert!(limiter.acquire("full", &per_minute(1)).await.is_err());
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let fresh = limiter.acquire("fresh", &per_minute(3)).await.unwrap();
    assert!(fresh.allowed);
    assert_eq!(fresh.remaining, 2);
}

// ---- the URL's database, socket, credentials and protocol -----------------

async fn zcard_in(url: &str, key: &str) -> u64 {
    let mut conn = raw(url).await;
    redis::cmd("ZCARD")
        .arg(key)
        .query_async(&mut conn)
        .await
        .unwrap()
}

// A database named in the URL is the one decisions count in, before and
// after Redis restarts under the connection.
#[tokio::test]
async fn the_urls_database_is_kept_across_a_restart() {
    let mut server = RedisServer::start();
    let url = format!("{}/3", server.url());
    let limiter = RedisRateLimiter::new(short_conn(&url, 500)).with_prefix("db:");
    assert_eq!(admitted(&limiter, "k", &per_minute(5), 2).await, 2);
    assert_eq!(zcard_in(&url, "db:k").await, 2);
    assert_eq!(zcard_in(&server.url(), "db:k").await, 0);
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match limiter.acquire("k", &per_minute(5)).await {
            Ok(d) => {
                assert!(d.allowed);
                assert_eq!(d.remaining, 4);
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "{e}"),
        }
    }
    assert_eq!(zcard_in(&url, "db:k").await, 1);
    assert_eq!(zcard_in(&server.url(), "db:k").await, 0);
}

// A socket URL with a database and an ACL user: decisions count in that
// database, as that user.
#[tokio::test]
async fn a_socket_url_with_a_database_and_credentials_counts_there() {
    let server = RedisServer::start();
    assert!(
        server
            .command("ACL SETUSER app on >s3cret ~* &* +@all")
            .starts_with("+OK")
    );
    assert!(server.command("ACL SETUSER default off").starts_with("+OK"));
    let url = format!("{}?db=2&user=app&pass=s3cret", server.socket_url());
    let limiter = RedisRateLimiter::new(short_conn(&url, 500)).with_prefix("sock:");
    assert_eq!(admitted(&limiter, "k", &per_minute(3), 5).await, 3);
    let tcp = format!("redis://app:s3cret@127.0.0.1:{}/2", server.port());
    assert_eq!(zcard_in(&tcp, "sock:k").await, 3);
}

// RESP3, asked with `?protocol=resp3`, decides as RESP2 does.
#[tokio::test]
async fn resp3_decides_exactly() {
    let server = RedisServer::start();
    let url = format!("{}?protocol=resp3", server.url());
    let limiter = limiter_on(&url, "resp3");
    assert_eq!(admitted(&limiter, "k", &per_minute(4), 6).await, 4);
    let wait = limiter
        .retry_after("k", &per_minute(4))
        .await
        .unwrap()
        .unwrap();
    assert!(wait <= Duration::from_secs(60) && wait > Duration::from_secs(55));
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    assert!(!limiter.acquire("k", &per_minute(4)).await.unwrap().allowed);
}

// `rediss://` to a Redis that speaks plain TCP fails within the deadline,
// and does not hang or panic.
#[tokio::test]
async fn tls_to_a_plain_redis_fails_within_the_deadline() {
    let server = RedisServer::start();
    let url = format!("rediss://localhost:{}", server.port());
    let conn = short_conn(&url, 300);
    let deadline = conn.deadline();
    let limiter = RedisRateLimiter::new(conn);
    let started = Instant::now();
    let result = limiter.acquire("k", &per_minute(5)).await;
    assert!(result.is_err(), "{result:?}");
    assert!(
        started.elapsed() < deadline + Duration::from_millis(250),
        "{:?}",
        started.elapsed()
    );
}

// ---- retry_after after a flushed script cache -----------------------------

// `retry_after`, which only reads, goes on after `SCRIPT FLUSH` too.
#[tokio::test]
async fn retry_after_goes_on_after_a_script_flush() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server.url(), "flushread");
    assert_eq!(admitted(&limiter, "k", &per_minute(2), 2).await, 2);
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    let wait = limiter.retry_after("k", &per_minute(2)).await.unwrap();
    assert!(wait.is_some());
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    assert_eq!(admitted(&limiter, "other", &per_minute(2), 3).await, 2);
}

// ---- URLs ---------------------------------------------------------------------

// No text, however malformed, panics the URL parser: each is a config or
// an error.
#[test]
fn no_url_text_panics_the_parser() {
    let pieces = [
        "redis://",
        "rediss://",
        "unix://",
        "redis+unix://",
        "redis+cluster://",
        "rediss+cluster://",
        "/",
        "//",
        ":",
        "@",
        "?",
        "#",
        ",",
        "[",
        "]",
        "::1",
        "h",
        "ü",
        "日",
        "%",
        "%zz",
        "0",
        "65536",
        "-1",
        "db=",
        "pass=",
        "&",
        "=",
        " ",
        "\t",
        "insecure",
        "a:7000",
        "user:p@ss",
        "127.0.0.1",
        ":6379",
        "/2147483648",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..20_000 {
        let mut url = String::new();
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        let len = 1 + (seed % 7) as usize;
        for i in 0..len {
            let pick = (seed >> (i * 8)) as usize % pieces.len();
            url.push_str(pieces[pick]);
        }
        let result = std::panic::catch_unwind(|| RedisConfig::from_url(&url));
        assert!(result.is_ok(), "{url:?} panicked");
    }
}

// `#insecure` (TLS without checking the certificate) is refused however it
// is written: the URL parser drops tabs and newlines anywhere in a URL, so
// `#insec<TAB>ure` is the same fragment.
#[test]
fn insecure_tls_is_refused_however_it_is_written() {
    let mut accepted = Vec::new();
    for url in [
        "rediss://cache.internal:6380#insecure",
        "rediss://cache.internal:6380/0#insecure",
        "rediss://cache.internal:6380#insec\ture",
        "rediss://cache.internal:6380#insecure\n/",
        "rediss://cache.internal:6380#\ninsecure",
    ] {
        if RedisConfig::from_url(url).is_ok() {
            accepted.push(url);
        }
    }
    assert!(accepted.is_empty(), "accepted: {accepted:?}");
}

// At boot, the same URL is refused naming its variable, as `#insecure` is.
#[test]
fn boot_refuses_insecure_tls_written_with_a_tab() {
    for url in [
        "rediss://cache.internal:6380#insecure",
        "rediss://cache.internal:6380#insec\ture",
    ] {
        let planned = support::boot::plan(&[
            ("APP_ENV", "production"),
            ("RATE_LIMIT_DRIVER", "redis"),
            ("RATE_LIMIT_REDIS_URL", url),
        ]);
        let refused = planned.map(drop).map_err(|e| e.to_string());
        assert!(
            refused
                .as_ref()
                .is_err_and(|e| e.starts_with("RATE_LIMIT_REDIS_URL=")),
            "{url:?}: {refused:?}"
        );
    }
}

// A ping on a handle made for a Redis that is not there fails within the
// deadline.
#[tokio::test]
async fn a_missing_socket_fails_within_the_deadline() {
    let conn = short_conn("unix:///nonexistent/dir/redis.sock", 200);
    let deadline = conn.deadline();
    let started = Instant::now();
    assert!(conn.ping().await.is_err());
    assert!(started.elapsed() < deadline + Duration::from_millis(200));
}

// ---- timeouts -------------------------------------------------------------

// Timeouts are public fields and `with_timeouts` takes any `Duration`:
// `Duration::MAX`, the usual way to say "no limit", must not panic a call
// (the deadline is their sum, which should saturate).
#[tokio::test]
async fn timeouts_of_duration_max_do_not_panic_a_call() {
    let server = RedisServer::start();
    let config = RedisConfig::from_url(&server.url())
        .unwrap()
        .with_timeouts(Duration::MAX, Duration::MAX);
    let conn = RedisConnection::new(config).unwrap();
    let ping = tokio::spawn(async move { conn.ping().await });
    let answered = ping.await;
    assert!(
        answered.as_ref().is_ok_and(|r| r.is_ok()),
        "the ping panicked or failed: {answered:?}"
    );
}

// The same on a cluster URL: building the handle must not panic.
#[tokio::test]
async fn cluster_timeouts_of_duration_max_do_not_panic_the_handle() {
    let built = tokio::spawn(async {
        let config = RedisConfig::from_url("redis://127.0.0.1:1,redis://127.0.0.1:2")
            .unwrap()
            .with_timeouts(Duration::MAX, Duration::from_secs(1));
        RedisConnection::new(config).map(drop)
    })
    .await;
    assert!(
        built.as_ref().is_ok_and(|r| r.is_ok()),
        "building the handle panicked or failed: {built:?}"
    );
}

// ---- connections across an outage -----------------------------------------

fn connected_clients(server: &RedisServer) -> u64 {
    let info = server.command("INFO clients");
    info.lines()
        .find_map(|l| l.strip_prefix("connected_clients:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

// Many refused calls during an outage each make a new connection; once
// Redis is back, the calls share one, and none of the outage's leaves a
// socket open.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_outage_of_many_refused_calls_leaves_one_connection_after_the_restart() {
    let mut server = RedisServer::start();
    let limiter = Arc::new(
        RedisRateLimiter::new(short_conn(&server.url(), 200))
            .with_prefix(support::unique_prefix("outage")),
    );
    assert!(
        limiter
            .acquire("k", &per_minute(1000))
            .await
            .unwrap()
            .allowed
    );
    server.stop();
    let mut calls = Vec::new();
    for _ in 0..100 {
        let limiter = Arc::clone(&limiter);
        calls.push(tokio::spawn(async move {
            limiter.acquire("k", &per_minute(1000)).await.is_err()
        }));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    for call in calls {
        assert!(call.await.unwrap());
    }
    server.restart();
    let deadline = Instant::now() + Duration::from_secs(5);
    while limiter.acquire("k", &per_minute(1000)).await.is_err() {
        assert!(Instant::now() < deadline, "never decided after the restart");
    }
    let admitted = concurrent_admits(Arc::clone(&limiter), "k", per_minute(1000)).await;
    assert_eq!(admitted.len(), 999);
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The limiter's one connection, and the one asking.
    assert!(
        connected_clients(&server) <= 2,
        "{}",
        connected_clients(&server)
    );
}

// Timeouts far past any wait, whose sum still fits a `Duration`, are
// taken as they are: a call answers.
#[tokio::test]
async fn timeouts_of_years_let_calls_answer() {
    let server = RedisServer::start();
    let years = Duration::from_secs(u64::MAX / 4);
    let config = RedisConfig::from_url(&server.url())
        .unwrap()
        .with_timeouts(years, years);
    let conn = RedisConnection::new(config).unwrap();
    conn.ping().await.unwrap();
    let limiter = RedisRateLimiter::new(conn);
    assert!(limiter.acquire("k", &per_minute(1)).await.unwrap().allowed);
}

// ---- socket paths ---------------------------------------------------------

// A socket whose path holds a space, written as is or percent-encoded,
// reaches its server.
#[tokio::test]
async fn a_socket_path_with_a_space_reaches_its_server() {
    let server = RedisServer::start();
    let real = server.socket_url();
    let real = real.strip_prefix("unix://").unwrap();
    let dir = std::env::temp_dir().join(format!("redisdrv sock {}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let link = dir.join("redis.sock");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink(real, &link).unwrap();
    let plain = format!("unix://{}", link.display());
    let encoded = plain.replace(' ', "%20");
    for url in [plain, encoded] {
        let conn = short_conn(&url, 500);
        let answer = conn.ping().await;
        assert!(answer.is_ok(), "{url}: {answer:?}");
    }
    let _ = std::fs::remove_dir_all(&dir);
}

// ---- credentials ----------------------------------------------------------

// A URL that names an ACL user without a password (a `nopass` user) either
// connects as that user or is refused: never as another user, without a
// word, as a dropped query pair would be.
#[tokio::test]
async fn a_username_without_a_password_is_used_or_refused() {
    let server = RedisServer::start();
    assert!(
        server
            .command("ACL SETUSER app on nopass ~* &* +@all")
            .starts_with("+OK")
    );
    let urls = [
        format!("redis://app@127.0.0.1:{}", server.port()),
        format!("redis://app@127.0.0.1:{}?protocol=resp3", server.port()),
        format!("{}?user=app", server.socket_url()),
    ];
    let mut wrong = Vec::new();
    for url in urls {
        let Ok(config) = RedisConfig::from_url(&url) else {
            continue;
        };
        let conn = RedisConnection::new(config).unwrap();
        let whoami: String = conn.query(redis::cmd("ACL").arg("WHOAMI")).await.unwrap();
        if whoami != "app" {
            wrong.push(format!("{url} runs as {whoami}"));
        }
    }
    assert!(wrong.is_empty(), "{wrong:?}");
}

// ---- a full Redis -----------------------------------------------------------

/// Connects a plain socket to `server` and holds it, taking one of its
/// client places.
fn hold_a_place(server: &RedisServer) -> std::net::TcpStream {
    let stream = std::net::TcpStream::connect(("127.0.0.1", server.port())).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    std::thread::sleep(Duration::from_millis(50));
    stream
}

/// Calls `ping` on `conn` until it answers, for at most `limit`.
async fn answers_within(conn: &RedisConnection, limit: Duration) -> Result<(), String> {
    let ends = Instant::now() + limit;
    loop {
        match conn.ping().await {
            Ok(()) => return Ok(()),
            Err(e) if Instant::now() >= ends => return Err(e.to_string()),
            Err(_) => tokio::time::sleep(Duration::from_millis(50)).await,
        }
    }
}

/// A Redis that has reached `maxclients` refuses the connection a call
/// makes; once a place frees up, calls are answered again.
async fn maxclients_then_room(url_of: impl Fn(&RedisServer) -> String) -> Result<(), String> {
    let server = RedisServer::start();
    assert!(server.command("CONFIG SET maxclients 1").starts_with("+OK"));
    let blocker = hold_a_place(&server);
    let conn = short_conn(&url_of(&server), 200);
    let refused = conn.ping().await;
    assert!(refused.is_err(), "{refused:?}");
    drop(blocker);
    tokio::time::sleep(Duration::from_millis(200)).await;
    answers_within(&conn, Duration::from_secs(3)).await
}

// Database 0, no password: the connection sends nothing before the call.
#[tokio::test]
async fn after_maxclients_the_default_database_is_answered_again() {
    maxclients_then_room(|s| s.url()).await.unwrap();
}

// A database in the URL: the connection selects it before the call, and
// the refused connection is taken up again once a place frees up.
#[tokio::test]
async fn after_maxclients_a_named_database_is_answered_again() {
    maxclients_then_room(|s| format!("{}/2", s.url()))
        .await
        .unwrap();
}

// ---- a refusal while the connection is made again ------------------------

/// An ACL user's `SELECT` taken away while the connection is made again
/// (as when an operator rebuilds the user in two steps), then given back:
/// whether calls are answered again within three seconds.
async fn select_refused_then_allowed(db: &str) -> Result<(), String> {
    let server = RedisServer::start();
    assert!(
        server
            .command("ACL SETUSER app on >pw ~* &* +@all")
            .starts_with("+OK")
    );
    let url = format!("redis://app:pw@127.0.0.1:{}{db}", server.port());
    let conn = short_conn(&url, 300);
    conn.ping().await.unwrap();
    assert!(server.command("ACL SETUSER app -select").starts_with("+OK"));
    assert!(server.command("CLIENT KILL USER app").starts_with(':'));
    // Calls while the user may not select: each fails.
    for _ in 0..3 {
        let _ = conn.ping().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(server.command("ACL SETUSER app +select").starts_with("+OK"));
    answers_within(&conn, Duration::from_secs(3)).await
}

// Database 0: the connection selects nothing, and calls go on once the
// user is whole again.
#[tokio::test]
async fn a_user_refused_select_for_a_moment_is_answered_again_on_database_0() {
    select_refused_then_allowed("").await.unwrap();
}

// A database in the URL: the connection's own `SELECT` is refused for a
// moment; once the user may select again, calls must be answered again.
#[tokio::test]
async fn a_user_refused_select_for_a_moment_is_answered_again_on_a_named_database() {
    select_refused_then_allowed("/2").await.unwrap();
}

// ---- a Redis busy with a slow script --------------------------------------

/// Runs a read-only script that spins for `millis` on `port`, as another
/// application's slow script would, and waits for its answer.
fn slow_script(port: u16, millis: u64) -> std::thread::JoinHandle<String> {
    use std::io::{Read, Write};
    std::thread::spawn(move || {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(20)))
            .unwrap();
        let script = format!(
            "local s = redis.call('TIME') local start = s[1] * 1000000 + s[2] \
             for i = 1, 2000000000 do local t = redis.call('TIME') \
             if t[1] * 1000000 + t[2] - start > {} then return i end end return 0",
            millis * 1000
        );
        let command = format!(
            "*3\r\n$4\r\nEVAL\r\n${}\r\n{script}\r\n$1\r\n0\r\n",
            script.len()
        );
        stream.write_all(command.as_bytes()).unwrap();
        let mut reply = vec![0_u8; 256];
        let n = stream.read(&mut reply).unwrap_or(0);
        String::from_utf8_lossy(&reply[..n]).into_owned()
    })
}

/// Calls made while Redis is busy with a slow script, long enough that
/// the connection is made again meanwhile: whether calls are answered
/// again within three seconds of the script's end.
async fn busy_then_free(db: &str) -> Result<(), String> {
    let server = RedisServer::start();
    assert!(
        server
            .command("CONFIG SET busy-reply-threshold 500")
            .starts_with("+OK")
    );
    let conn = short_conn(&format!("{}{db}", server.url()), 200);
    conn.ping().await.unwrap();
    let script = slow_script(server.port(), 2500);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let busy_ends = Instant::now() + Duration::from_millis(2300);
    while Instant::now() < busy_ends {
        let _ = conn.ping().await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let ran = tokio::task::spawn_blocking(move || script.join().unwrap())
        .await
        .unwrap();
    assert!(ran.starts_with(':'), "the slow script answered {ran:?}");
    answers_within(&conn, Duration::from_secs(3)).await
}

// Database 0: once the script ends, calls are answered again.
#[tokio::test]
async fn after_a_slow_script_calls_are_answered_again_on_database_0() {
    busy_then_free("").await.unwrap();
}

// A database in the URL: the connection made while Redis answers BUSY has
// its `SELECT` refused; once the script ends, calls must be answered again.
#[tokio::test]
async fn after_a_slow_script_calls_are_answered_again_on_a_named_database() {
    busy_then_free("/2").await.unwrap();
}

// ---- a password taken away for a moment, over RESP3 ---------------------

/// The user's password taken away while the connection is made again (a
/// rotation done in the wrong order, or the user disabled for a moment),
/// then given back: whether calls are answered again within three seconds.
async fn password_refused_then_taken(query: &str) -> Result<(), String> {
    let server = RedisServer::start();
    assert!(
        server
            .command("ACL SETUSER app on >secret ~* &* +@all")
            .starts_with("+OK")
    );
    let url = format!("redis://app:secret@127.0.0.1:{}{query}", server.port());
    let conn = short_conn(&url, 300);
    conn.ping().await.unwrap();
    assert!(server.command("ACL SETUSER app <secret").starts_with("+OK"));
    assert!(server.command("CLIENT KILL USER app").starts_with(':'));
    for _ in 0..3 {
        let refused = conn.ping().await;
        assert!(refused.is_err(), "{refused:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(server.command("ACL SETUSER app >secret").starts_with("+OK"));
    answers_within(&conn, Duration::from_secs(3)).await
}

// Over RESP2 the password goes in `AUTH`: once Redis takes it again, calls
// are answered again.
#[tokio::test]
async fn over_resp2_a_password_refused_for_a_moment_is_tried_again() {
    password_refused_then_taken("").await.unwrap();
}

// Over RESP3 (`?protocol=resp3`) the password goes in `HELLO`, whose
// refusal is the server's `WRONGPASS`: the same must hold.
#[tokio::test]
async fn over_resp3_a_password_refused_for_a_moment_is_tried_again() {
    password_refused_then_taken("?protocol=resp3")
        .await
        .unwrap();
}

/// `GET /r` from one client through `router`: its status.
async fn get_r(router: &suprnova::Router) -> u16 {
    let request = http::Request::get("/r")
        .body(http_body_util::Full::<bytes::Bytes>::default())
        .unwrap();
    suprnova::server::handle_request_with_peer(
        router,
        request,
        "203.0.113.5:40000".parse().unwrap(),
    )
    .await
    .status_code()
}

// Over HTTP: a route limited to 2 a minute, failing open, on a Redis URL
// that names a database. Redis is busy with another application's slow
// script for a moment; once it is free again, the route is limited
// again: of 6 requests, the last 4 are refused.
#[tokio::test]
async fn after_a_slow_script_a_route_failing_open_is_limited_again() {
    use suprnova::rate_limit::{BackendErrorPolicy, RateLimitMiddleware};

    let server = RedisServer::start();
    assert!(
        server
            .command("CONFIG SET busy-reply-threshold 500")
            .starts_with("+OK")
    );
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(
        RedisRateLimiter::new(short_conn(&format!("{}/2", server.url()), 200))
            .with_prefix(support::unique_prefix("busyhttp")),
    );
    let router = throttle_support::ok_routes(&["/r"]).middleware(
        RateLimitMiddleware::new(driver, per_minute(2), |req| format!("route:{}", req.path()))
            .on_backend_error(BackendErrorPolicy::FailOpen),
    );
    let script = slow_script(server.port(), 2500);
    tokio::time::sleep(Duration::from_millis(50)).await;
    let busy_ends = Instant::now() + Duration::from_millis(2300);
    while Instant::now() < busy_ends {
        let _ = get_r(&router).await;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    tokio::task::spawn_blocking(move || script.join().unwrap())
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let mut statuses = Vec::new();
    for _ in 0..6 {
        statuses.push(get_r(&router).await);
    }
    // Limited again: at most the 2 of the window admitted (a call the
    // busy Redis ran after its caller gave up may have taken one), and
    // the rest refused; failing open, all 6 would be 200.
    let admitted = statuses.iter().filter(|&&status| status == 200).count();
    assert!(
        (1..=2).contains(&admitted) && statuses[2..].iter().all(|&status| status == 429),
        "{statuses:?}"
    );
}

// ---- a limit of zero ---------------------------------------------------------

// A limit of 0 refuses without asking Redis: a stopped Redis changes
// nothing, and the wait is the whole window.
#[tokio::test]
async fn a_limit_of_zero_refuses_at_once_with_redis_stopped() {
    let mut server = RedisServer::start();
    let limiter = RedisRateLimiter::new(short_conn(&server.url(), 300));
    server.stop();
    let started = Instant::now();
    let refused = limiter.acquire("k", &per_minute(0)).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Some(Duration::from_secs(60)));
    assert_eq!(
        limiter.retry_after("k", &per_minute(0)).await.unwrap(),
        Some(Duration::from_secs(60))
    );
    assert!(started.elapsed() < Duration::from_millis(100));
}
