//! The Redis sliding-window driver against real `redis-server` processes:
//! the shared behaviour on short real windows, exactness across connections
//! and across OS processes, the key layout, and faults (a stopped server, a
//! hung one, a flushed script cache).
#![cfg(feature = "redis")]

mod conformance;
mod support;

use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::redis::{RedisServer, connect};
use suprnova::decision::Decision;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimitError, RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::{RedisConfig, RedisConnection};

async fn redis() -> conformance::RealTime<RedisServer> {
    let server = RedisServer::start();
    let driver = Arc::new(limiter_on(&server.url(), "conformance"));
    conformance::RealTime::new(server, driver)
}

conformance::driver_tests!(redis);

/// A limiter on its own connection to `url`, under a prefix no other test
/// uses.
fn limiter_on(url: &str, name: &str) -> RedisRateLimiter {
    RedisRateLimiter::new(connect(url)).with_prefix(support::unique_prefix(name))
}

/// A limiter whose calls give up after 300 ms to connect plus 300 ms to
/// answer, and that deadline.
fn limiter_with_short_timeouts(server: &RedisServer, name: &str) -> (RedisRateLimiter, Duration) {
    let config = RedisConfig::from_url(&server.url())
        .unwrap()
        .with_timeouts(Duration::from_millis(300), Duration::from_millis(300));
    let conn = RedisConnection::new(config).unwrap();
    let deadline = conn.deadline();
    let limiter = RedisRateLimiter::new(conn).with_prefix(support::unique_prefix(name));
    (limiter, deadline)
}

fn per_minute(max_requests: u32) -> SlidingWindowConfig {
    SlidingWindowConfig::new(max_requests, Duration::from_secs(60))
}

// 20 tasks, each on its own connection (its own TCP socket), 50 attempts
// each on one key with a limit of 100: exactly 100 admitted, three runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_connections_of_fifty_admit_exactly_100() {
    let server = RedisServer::start();
    twenty_of_fifty_three_times(&server, &server.url()).await;
}

// The same over the server's Unix socket: twenty socket connections, TCP
// to count.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_unix_socket_connections_of_fifty_admit_exactly_100() {
    let server = RedisServer::start();
    twenty_of_fifty_three_times(&server, &server.socket_url()).await;
}

/// Three runs of twenty connections to `url`, an address of `server`,
/// making fifty attempts each on one key limited to 100.
async fn twenty_of_fifty_three_times(server: &RedisServer, url: &str) {
    for run in 0..3 {
        let prefix = support::unique_prefix("exact");
        let drivers: Vec<Arc<dyn RateLimiterDriver>> = (0..20)
            .map(|_| {
                Arc::new(RedisRateLimiter::new(connect(url)).with_prefix(&prefix))
                    as Arc<dyn RateLimiterDriver>
            })
            .collect();
        let admitted =
            conformance::admitted_by_contenders(drivers, 50, "hot", per_minute(100)).await;
        assert_eq!(admitted, 100, "run {run}");
        let stored = server.command(&format!("ZCARD {prefix}hot"));
        assert_eq!(stored.trim(), ":100", "run {run}");
    }
}

const WORKER_URL: &str = "SUPRNOVA_TEST_WORKER_REDIS_URL";
const WORKER_PREFIX: &str = "SUPRNOVA_TEST_WORKER_PREFIX";
const WORKER_START_MS: &str = "SUPRNOVA_TEST_WORKER_START_MS";

fn unix_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

// 4 OS processes (this test binary, run again as workers), each with 5
// connections of 50 attempts, on one key with a limit of 100: exactly 100
// admitted across the processes, three runs.
#[test]
fn four_processes_sharing_one_redis_admit_exactly_100() {
    let server = RedisServer::start();
    let exe = std::env::current_exe().unwrap();
    for run in 0..3 {
        let prefix = support::unique_prefix("processes");
        // The workers start together at a moment after all of them are up.
        let start_ms = unix_ms() + 1_500;
        let workers: Vec<_> = (0..4)
            .map(|_| {
                Command::new(&exe)
                    .args(["--ignored", "--exact", "process_worker", "--nocapture"])
                    .env(WORKER_URL, server.url())
                    .env(WORKER_PREFIX, &prefix)
                    .env(WORKER_START_MS, start_ms.to_string())
                    .stdout(Stdio::piped())
                    .stderr(Stdio::inherit())
                    .spawn()
                    .unwrap()
            })
            .collect();
        let mut admitted = 0;
        for worker in workers {
            let output = worker.wait_with_output().unwrap();
            assert!(output.status.success(), "a worker failed in run {run}");
            let stdout = String::from_utf8_lossy(&output.stdout);
            let counts: Vec<u32> = stdout
                .lines()
                // Anywhere in its line: a worker that runs its tests on one
                // thread prints its count after `test process_worker ... `.
                .filter_map(|l| l.split_once("admitted=").map(|(_, n)| n))
                .map(|n| n.trim().parse().unwrap())
                .collect();
            assert_eq!(counts.len(), 1, "worker output: {stdout}");
            admitted += counts[0];
        }
        assert_eq!(admitted, 100, "run {run}");
    }
}

// The worker of the test above; does nothing when run without its
// environment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "a worker process of four_processes_sharing_one_redis_admit_exactly_100"]
async fn process_worker() {
    let (Ok(url), Ok(prefix), Ok(start_ms)) = (
        std::env::var(WORKER_URL),
        std::env::var(WORKER_PREFIX),
        std::env::var(WORKER_START_MS),
    ) else {
        return;
    };
    let drivers: Vec<Arc<dyn RateLimiterDriver>> = (0..5)
        .map(|_| {
            Arc::new(RedisRateLimiter::new(connect(&url)).with_prefix(&prefix))
                as Arc<dyn RateLimiterDriver>
        })
        .collect();
    // Connect before the start, so the start is the contention.
    for driver in &drivers {
        driver.retry_after("hot", &per_minute(100)).await.unwrap();
    }
    let wait = start_ms.parse::<u64>().unwrap().saturating_sub(unix_ms());
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let admitted = conformance::admitted_by_contenders(drivers, 50, "hot", per_minute(100)).await;
    println!("admitted={admitted}");
}

// The bucket is a sorted set under `suprnova_rate_limit:<key>` whose members
// are the integer Redis TIME of each hit in microseconds, equal to their
// scores, and which expires when its newest hit leaves the window.
#[tokio::test]
async fn a_bucket_is_a_sorted_set_of_redis_time_stamps_under_the_default_prefix() {
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let limiter = RedisRateLimiter::new(conn.clone());
    assert_eq!(limiter.prefix(), "suprnova_rate_limit:");
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(2));
    for _ in 0..3 {
        assert!(limiter.try_acquire("user:42", &cfg).await.unwrap());
    }
    let key = "suprnova_rate_limit:user:42";
    let kind: String = conn.query(redis::cmd("TYPE").arg(key)).await.unwrap();
    assert_eq!(kind, "zset");
    let hits = hits_in(&conn, key, 0, -1).await;
    let redis_now = redis_time_us(&conn).await;
    assert_eq!(hits.len(), 3);
    let mut previous = 0;
    for &(member, score) in &hits {
        assert_eq!(member, score, "member and score are the same integer");
        let stamp = member;
        assert!(stamp > previous, "stamps are unique and increasing");
        assert!(
            redis_now - stamp < 2_000_000,
            "{stamp} is not Redis TIME {redis_now}"
        );
        previous = stamp;
    }
    let ttl: i64 = conn.query(redis::cmd("PTTL").arg(key)).await.unwrap();
    assert!(ttl > 1_000 && ttl <= 2_000, "PTTL {ttl}");

    let custom = RedisRateLimiter::new(conn.clone()).with_prefix("app:rl:");
    assert!(custom.try_acquire("user:42", &cfg).await.unwrap());
    assert_eq!(server.command("ZCARD app:rl:user:42").trim(), ":1");
    assert_eq!(server.command(&format!("ZCARD {key}")).trim(), ":3");
}

// One decision is one request to Redis, refusals included: a limit of 3,
// five calls, three admitted and two refused with the time to come back,
// and Redis saw five EVALSHA from the client and nothing else.
#[tokio::test]
async fn a_decision_is_one_evalsha_refusals_included() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server.url(), "one_round_trip");
    let cfg = per_minute(3);
    // The first call loads the script.
    assert!(limiter.acquire("warm", &cfg).await.unwrap().allowed);
    let mut decisions = Vec::new();
    let sent = server
        .commands_sent_during(async {
            for _ in 0..5 {
                decisions.push(limiter.acquire("k", &cfg).await.unwrap());
            }
        })
        .await;
    assert_eq!(sent, ["evalsha"; 5]);
    let allowed: Vec<bool> = decisions.iter().map(|d| d.allowed).collect();
    assert_eq!(allowed, [true, true, true, false, false]);
    let remaining: Vec<u64> = decisions.iter().map(|d| d.remaining).collect();
    assert_eq!(remaining, [2, 1, 0, 0, 0]);
    for refused in &decisions[3..] {
        let wait = refused
            .retry_after
            .expect("a refusal says when to come back");
        assert!(
            wait > Duration::from_secs(59) && wait <= Duration::from_secs(60),
            "{wait:?}"
        );
    }
}

// What the script runs on a key whose clock has not stepped: a call on a
// key that holds hits reads the newest to see whether it is later than
// TIME, which under a limit of 1 is also the hit a refusal waits for, and
// under a higher limit is one read more; a call on a key with no hit runs
// what it ran before the script learned of clock steps.
#[tokio::test]
async fn the_script_reads_the_newest_hit_of_a_key_that_holds_hits() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server.url(), "script_commands");
    assert!(
        limiter
            .acquire("warm", &per_minute(1))
            .await
            .unwrap()
            .allowed
    );
    let run = async |key: &'static str, max: u32| {
        server
            .script_commands_during(async {
                let _ = limiter.acquire(key, &per_minute(max)).await.unwrap();
            })
            .await
    };
    let admitted = ["time", "zremrangebyscore", "zcard", "zadd", "pexpire"];
    assert_eq!(run("one", 1).await, admitted);
    assert_eq!(
        run("one", 1).await,
        ["time", "zremrangebyscore", "zcard", "zrange"]
    );
    assert_eq!(run("two", 2).await, admitted);
    assert_eq!(
        run("two", 2).await,
        [
            "time",
            "zremrangebyscore",
            "zcard",
            "zrange",
            "zadd",
            "pexpire"
        ]
    );
    assert_eq!(
        run("two", 2).await,
        ["time", "zremrangebyscore", "zcard", "zrange", "zrange"]
    );
}

/// The hits of the bucket `key` from index `from` to `to` (ZRANGE's
/// indexes, oldest first), each its member and its score: the same stamp.
async fn hits_in(conn: &RedisConnection, key: &str, from: i64, to: i64) -> Vec<(u64, u64)> {
    conn.query(
        redis::cmd("ZRANGE")
            .arg(key)
            .arg(from)
            .arg(to)
            .arg("WITHSCORES"),
    )
    .await
    .unwrap()
}

/// Redis `TIME` in microseconds.
async fn redis_time_us(conn: &RedisConnection) -> u64 {
    let (secs, micros): (u64, u64) = conn.query(&redis::cmd("TIME")).await.unwrap();
    secs * 1_000_000 + micros
}

// The window is half-open at the script's resolution: a call at Redis time
// `now` drops the hit stamped `now - window` and keeps the one stamped a
// microsecond later. The bucket is seeded with a hit at every microsecond of
// a 100 ms span, and the call is made when its boundary falls in the middle
// of that span; afterwards the oldest hit left must be exactly one
// microsecond inside the window of the new hit.
#[tokio::test]
async fn the_window_is_half_open_to_the_microsecond() {
    const WINDOW_US: u64 = 1_000_000;
    const SEEDED: u64 = 100_000;
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let limiter = RedisRateLimiter::new(conn.clone()).with_prefix("edge:");
    let cfg = SlidingWindowConfig::new(1_000_000, Duration::from_micros(WINDOW_US));
    let score = async |index: i64| -> u64 { hits_in(&conn, "edge:k", index, index).await[0].1 };
    // The call is planned 600 ms ahead, time enough to seed on a quiet
    // machine. On a busy one, where the seeding outlasts that or the call
    // comes so late that its boundary leaves the seeded span, the bucket
    // is emptied and all of it done again with twice the time.
    let mut ahead = 600_000;
    let (first, decision, now, oldest) = loop {
        assert!(ahead <= 4_800_000, "four tries, each too slow or too late");
        let call_at = redis_time_us(&conn).await + ahead;
        ahead *= 2;
        let first = call_at - WINDOW_US - SEEDED / 2;
        // In slices, each well inside a call's deadline on a busy machine;
        // a slice that fails anyway sends this try to the next one.
        let mut seeded = true;
        for slice in (first..first + SEEDED).step_by(10_000) {
            let mut seed = redis::cmd("ZADD");
            seed.arg("edge:k");
            for stamp in slice..(slice + 10_000).min(first + SEEDED) {
                seed.arg(stamp).arg(stamp);
            }
            if conn.query::<u64>(&seed).await.is_err() {
                seeded = false;
                break;
            }
        }
        let on_time = if seeded {
            call_at.checked_sub(redis_time_us(&conn).await)
        } else {
            None
        };
        if let Some(early) = on_time {
            tokio::time::sleep(Duration::from_micros(early)).await;
            let decision = limiter.acquire("k", &cfg).await.unwrap();
            assert!(decision.allowed);
            let (now, oldest) = (score(-1).await, score(0).await);
            // The boundary, now - window, must fall inside the seeded span.
            if (first..first + SEEDED - 1).contains(&(now - WINDOW_US)) {
                break (first, decision, now, oldest);
            }
        }
        let _: u64 = conn.query(redis::cmd("DEL").arg("edge:k")).await.unwrap();
    };
    assert_eq!(oldest, now - WINDOW_US + 1);
    let held = first + SEEDED - oldest + 1;
    assert_eq!(decision.remaining, 1_000_000 - held);
}

// The wait is the time from the script's Redis TIME until the oldest hit
// leaves: it lies between the values computed from Redis TIME read just
// before and just after the call, to the microsecond.
#[tokio::test]
async fn retry_after_is_exact_to_redis_time() {
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let limiter = RedisRateLimiter::new(conn.clone()).with_prefix("wait:");
    let cfg = SlidingWindowConfig::new(2, Duration::from_secs(2));
    assert!(limiter.try_acquire("k", &cfg).await.unwrap());
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(limiter.try_acquire("k", &cfg).await.unwrap());
    let frees_at = hits_in(&conn, "wait:k", 0, 0).await[0].1 + 2_000_000;
    let bounds = |before: u64, after: u64| {
        Duration::from_micros(frees_at - after)..=Duration::from_micros(frees_at - before)
    };

    let before = redis_time_us(&conn).await;
    let wait = limiter.retry_after("k", &cfg).await.unwrap().unwrap();
    let after = redis_time_us(&conn).await;
    assert!(bounds(before, after).contains(&wait), "{wait:?}");

    let before = redis_time_us(&conn).await;
    let refused = limiter.acquire("k", &cfg).await.unwrap();
    let after = redis_time_us(&conn).await;
    assert!(!refused.allowed);
    let wait = refused.retry_after.unwrap();
    assert!(bounds(before, after).contains(&wait), "{wait:?}");
    assert_eq!(refused.reset_at, Some(frees_at.div_ceil(1_000_000) as i64));
}

// 100 hits cost less than half of what the same 100 hits cost with UUID
// members (the usual way to make members unique).
#[tokio::test]
async fn a_bucket_of_100_hits_takes_under_half_the_memory_of_uuid_members() {
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let limiter = RedisRateLimiter::new(conn.clone()).with_prefix("mem:");
    for _ in 0..100 {
        assert!(limiter.try_acquire("ours", &per_minute(100)).await.unwrap());
    }
    let hits = hits_in(&conn, "mem:ours", 0, -1).await;
    let mut uuids = redis::cmd("ZADD");
    uuids.arg("mem:uuid");
    for (i, (_, score)) in hits.iter().enumerate() {
        uuids.arg(score).arg(format!(
            "{:08x}-5f1c-4b9a-9d2e-{:012x}",
            i * 7_919,
            i * 104_729
        ));
    }
    let added: u32 = conn.query(&uuids).await.unwrap();
    assert_eq!(added, 100);
    let usage = async |key: &str| -> u64 {
        conn.query(redis::cmd("MEMORY").arg("USAGE").arg(key))
            .await
            .unwrap()
    };
    let (ours, uuid) = (usage("mem:ours").await, usage("mem:uuid").await);
    assert!(ours * 2 <= uuid, "ours {ours} B, UUID members {uuid} B");
    assert_eq!(
        server.command("OBJECT ENCODING mem:ours").trim(),
        "$8\r\nlistpack"
    );
}

/// Makes one call that must fail as a backend error within `deadline` (and
/// a little scheduling slack).
async fn fails_within(limiter: &RedisRateLimiter, deadline: Duration) -> RateLimitError {
    let started = Instant::now();
    let err = limiter.acquire("k", &per_minute(100)).await.unwrap_err();
    let took = started.elapsed();
    assert!(
        took <= deadline + Duration::from_millis(200),
        "took {took:?}"
    );
    assert!(err.is_backend(), "{err:?}");
    err
}

/// Calls until a call succeeds, for at most 5 s, and returns its decision.
async fn first_success(limiter: &RedisRateLimiter) -> Decision {
    let started = Instant::now();
    loop {
        match limiter.acquire("k", &per_minute(100)).await {
            Ok(decision) => return decision,
            Err(e) if started.elapsed() < Duration::from_secs(5) => {
                assert!(e.is_backend(), "{e:?}");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Err(e) => panic!("no recovery within 5 s: {e}"),
        }
    }
}

// Redis stopped mid-run: each call fails within the connection's deadline
// (300 ms to connect + 300 ms to answer), as a backend error; once Redis is
// back, calls succeed again, with the script loaded again on the fresh
// server.
#[tokio::test]
async fn a_stopped_redis_errors_within_the_timeout_and_a_restart_recovers() {
    let mut server = RedisServer::start();
    let (limiter, deadline) = limiter_with_short_timeouts(&server, "fault");
    let cfg = per_minute(100);
    assert_eq!(limiter.acquire("k", &cfg).await.unwrap().remaining, 99);

    server.stop();
    for _ in 0..5 {
        fails_within(&limiter, deadline).await;
        let err = limiter.retry_after("k", &cfg).await.unwrap_err();
        assert!(err.is_backend(), "{err:?}");
    }

    server.restart();
    // The restarted server is empty: the count starts again.
    assert_eq!(first_success(&limiter).await.remaining, 99);
    for remaining in [98, 97, 96] {
        assert_eq!(
            limiter.acquire("k", &cfg).await.unwrap().remaining,
            remaining
        );
    }
}

// Redis alive but not answering (every client paused): a call gives up
// within the deadline instead of hanging the request, and once Redis
// answers again, so does the limiter.
#[tokio::test]
async fn a_hung_redis_times_out_within_the_deadline() {
    let server = RedisServer::start();
    let (limiter, deadline) = limiter_with_short_timeouts(&server, "hung");
    assert!(limiter.try_acquire("k", &per_minute(100)).await.unwrap());
    assert!(server.command("CLIENT PAUSE 1500 ALL").starts_with("+OK"));
    let err = fails_within(&limiter, deadline).await;
    // Whichever timer fires first (the connection's response timeout or
    // the overall deadline), the error says the wait ran out.
    let text = err.to_string();
    assert!(
        matches!(err, RateLimitError::Timeout(_)) || text.contains("timed out"),
        "{text}"
    );
    tokio::time::sleep(Duration::from_millis(1_600)).await;
    assert!(first_success(&limiter).await.allowed);
}

// SCRIPT FLUSH between calls: the next call finds NOSCRIPT, is sent as EVAL
// of the script, and the count goes on where it was.
#[tokio::test]
async fn script_flush_between_calls_does_not_break_the_driver() {
    let server = RedisServer::start();
    let limiter = limiter_on(&server.url(), "flush");
    let cfg = per_minute(5);
    for remaining in [4, 3, 2] {
        assert_eq!(
            limiter.acquire("k", &cfg).await.unwrap().remaining,
            remaining
        );
        assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    }
    assert_eq!(limiter.retry_after("k", &cfg).await.unwrap(), None);
    assert!(server.command("SCRIPT FLUSH").starts_with("+OK"));
    assert_eq!(limiter.acquire("k", &cfg).await.unwrap().remaining, 1);
}

// SCRIPT FLUSH over and over while twenty connections decide fifty times
// each: a call that meets NOSCRIPT is sent as EVAL of the script, so every
// decision is made (none fails) and exactly 100 are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn decisions_made_through_repeated_script_flushes_are_exact() {
    use std::sync::atomic::{AtomicBool, Ordering};

    let server = RedisServer::start();
    let prefix = support::unique_prefix("flushed");
    let stop = Arc::new(AtomicBool::new(false));
    let port = server.port();
    let flusher = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            let mut flushes = 0;
            while !stop.load(Ordering::Relaxed) {
                assert!(
                    support::redis::raw_command(port, "SCRIPT FLUSH")
                        .unwrap()
                        .starts_with("+OK")
                );
                flushes += 1;
                std::thread::sleep(Duration::from_micros(500));
            }
            flushes
        })
    };
    let cfg = per_minute(100);
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let limiter = RedisRateLimiter::new(connect(&server.url())).with_prefix(&prefix);
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..50 {
                    if limiter.acquire("hot", &cfg).await.unwrap().allowed {
                        admitted += 1;
                    }
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    stop.store(true, Ordering::Relaxed);
    let flushes = flusher.join().unwrap();
    assert!(flushes > 10, "{flushes} flushes");
    assert_eq!(admitted, 100);
    assert_eq!(server.command(&format!("ZCARD {prefix}hot")).trim(), ":100");
}

#[tokio::test]
async fn a_key_of_another_type_is_a_backend_error() {
    let server = RedisServer::start();
    let limiter = RedisRateLimiter::new(connect(&server.url())).with_prefix("typed:");
    assert!(server.command("SET typed:k plain").starts_with("+OK"));
    let err = limiter.acquire("k", &per_minute(5)).await.unwrap_err();
    assert!(matches!(err, RateLimitError::Backend(_)), "{err:?}");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
}

// A window longer than the script keeps exact is refused before any call to
// Redis, so even with no Redis at all it is a configuration error.
#[tokio::test]
async fn a_window_past_the_scripts_range_is_a_config_error() {
    let limiter = RedisRateLimiter::new(connect("redis://127.0.0.1:1"));
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(100 * 365 * 24 * 3_600));
    let err = limiter.acquire("k", &cfg).await.unwrap_err();
    assert!(matches!(err, RateLimitError::Config(_)), "{err:?}");
    assert_eq!(limiter.name(), "redis");
}

// Redis's clock stepped back an hour: what the script wrote before the step
// (hits stamped an hour ahead of Redis TIME now, and the expiry it set) is
// written here by hand, since a test cannot step Redis's clock.

/// Writes `count` hits into `key`, `spacing_us` apart, the newest `ahead_us`
/// later than Redis TIME now, with the expiry the script gave them for
/// `window_us`. Returns the stamps, oldest first.
async fn hits_from_before_a_step_back(
    conn: &RedisConnection,
    key: &str,
    ahead_us: u64,
    spacing_us: u64,
    count: u64,
    window_us: u64,
) -> Vec<u64> {
    let newest = redis_time_us(conn).await + ahead_us;
    let stamps: Vec<u64> = (0..count)
        .map(|i| newest - (count - 1 - i) * spacing_us)
        .collect();
    let mut add = redis::cmd("ZADD");
    add.arg(key);
    for stamp in &stamps {
        add.arg(stamp).arg(stamp);
    }
    let _: u64 = conn.query(&add).await.unwrap();
    let _: u64 = conn
        .query(
            redis::cmd("PEXPIRE")
                .arg(key)
                .arg((ahead_us + window_us) / 1_000),
        )
        .await
        .unwrap();
    stamps
}

/// The scores of `key`, oldest first.
async fn scores(conn: &RedisConnection, key: &str) -> Vec<u64> {
    let hits = hits_in(conn, key, 0, -1).await;
    hits.into_iter().map(|(_, score)| score).collect()
}

// A full key of 5 per 2 s whose hits are stamped an hour ahead (100 ms
// apart) is refused for what its hits hold from now: they are moved back so
// that the newest is the script's TIME, their spacing and count kept, the
// oldest leaves 1.6 s later (Retry-After: 2, not 3602), the key expires
// with its newest hit, and a call after 1.7 s is admitted. A key of 1 per
// 60 s whose one hit is an hour ahead is refused for 60 s, not 3660.
#[tokio::test]
async fn a_redis_clock_stepped_back_an_hour_refuses_a_full_key_for_one_window_at_most() {
    const HOUR_US: u64 = 3_600_000_000;
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let limiter = RedisRateLimiter::new(conn.clone()).with_prefix("step:");
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(2));
    let seeded =
        hits_from_before_a_step_back(&conn, "step:k", HOUR_US, 100_000, 5, 2_000_000).await;

    let refused = limiter.acquire("k", &cfg).await.unwrap();
    let after = redis_time_us(&conn).await;
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Some(Duration::from_millis(1_600)));
    assert_eq!(refused.retry_after_secs(), Some(2));
    let moved = scores(&conn, "step:k").await;
    assert_eq!(moved.len(), 5, "no hit is lost");
    let shift = seeded[4] - moved[4];
    assert!(moved[4] <= after, "{} later than TIME {after}", moved[4]);
    assert_eq!(
        moved,
        seeded.iter().map(|s| s - shift).collect::<Vec<_>>(),
        "the spacing is kept"
    );
    let ttl: i64 = conn.query(redis::cmd("PTTL").arg("step:k")).await.unwrap();
    assert!(ttl > 0 && ttl <= 2_000, "PTTL {ttl}");

    tokio::time::sleep(Duration::from_millis(1_700)).await;
    assert!(limiter.acquire("k", &cfg).await.unwrap().allowed);

    let one = SlidingWindowConfig::new(1, Duration::from_secs(60));
    hits_from_before_a_step_back(&conn, "step:one", HOUR_US, 0, 1, 60_000_000).await;
    let refused = limiter.acquire("one", &one).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Some(Duration::from_secs(60)));
    assert_eq!(
        limiter
            .retry_after("one", &one)
            .await
            .unwrap()
            .map(|w| w <= Duration::from_secs(60)),
        Some(true)
    );
}

// The same step on a key that is not full: 3 hits an hour ahead, 100 ms
// apart, under 5 per 2 s. Two calls are admitted, the first moving the
// three back (the newest to its TIME); the third finds the key full and
// waits 1.8 s, less the time since the first, for the oldest of them. Once
// a window has passed, all five places are free again: no hit holds a
// place for the step.
#[tokio::test]
async fn a_redis_clock_stepped_back_leaves_no_hit_holding_a_place_for_the_step() {
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let limiter = RedisRateLimiter::new(conn.clone()).with_prefix("step:");
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(2));
    hits_from_before_a_step_back(&conn, "step:k", 3_600_000_000, 100_000, 3, 2_000_000).await;

    let remaining: Vec<u64> = [
        limiter.acquire("k", &cfg).await.unwrap(),
        limiter.acquire("k", &cfg).await.unwrap(),
    ]
    .iter()
    .map(|d| d.remaining)
    .collect();
    assert_eq!(remaining, [1, 0]);
    let refused = limiter.acquire("k", &cfg).await.unwrap();
    assert!(!refused.allowed);
    let wait = refused
        .retry_after
        .expect("a refusal says when to come back");
    assert!(
        wait > Duration::from_millis(1_700) && wait <= Duration::from_millis(1_800),
        "{wait:?}"
    );
    let after = redis_time_us(&conn).await;
    let moved = scores(&conn, "step:k").await;
    assert_eq!(moved.len(), 5, "no hit is lost");
    assert!(
        moved.iter().all(|&s| s <= after),
        "{moved:?} against {after}"
    );

    tokio::time::sleep(Duration::from_millis(2_100)).await;
    let mut remaining = Vec::new();
    for _ in 0..5 {
        let d = limiter.acquire("k", &cfg).await.unwrap();
        assert!(d.allowed, "refused for {:?}", d.retry_after);
        remaining.push(d.remaining);
    }
    assert_eq!(remaining, [4, 3, 2, 1, 0]);
}

// The same 3 hits an hour ahead under 5 per 2 s, with a call every 500 ms
// (4 in any 2 s, under the limit): the first call that finds the key full
// moves them back, and a window later no call is refused. Had they stayed
// ahead, every admission would renew the key's expiry and they would hold
// 3 of the 5 places for the hour of the step.
#[tokio::test]
async fn a_redis_clock_stepped_back_moves_hits_under_steady_traffic() {
    let server = RedisServer::start();
    let conn = connect(&server.url());
    let limiter = RedisRateLimiter::new(conn.clone()).with_prefix("step:");
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(2));
    hits_from_before_a_step_back(&conn, "step:k", 3_600_000_000, 100_000, 3, 2_000_000).await;

    let start = std::time::Instant::now();
    let mut refused_a_window_on = Vec::new();
    while start.elapsed() < Duration::from_secs(6) {
        let d = limiter.acquire("k", &cfg).await.unwrap();
        let at = start.elapsed();
        if !d.allowed && at > Duration::from_millis(3_000) {
            refused_a_window_on.push(format!("{:.1}s", at.as_secs_f64()));
        }
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    assert!(
        refused_a_window_on.is_empty(),
        "4 calls in 2 s refused under a limit of 5, a window after the step, at {refused_a_window_on:?}"
    );
}
