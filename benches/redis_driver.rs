//! The Redis side, side by side with `redis-benchmark` in one run:
//!
//! ```text
//! cargo bench --bench redis_driver
//! ```
//!
//! The bench starts its own `redis-server` on a free loopback port, then:
//!
//! 1. **criterion**: decisions per second of `RedisRateLimiter::acquire`, and
//!    of the facade's `CacheRateLimiter::hit_and_check` on a `RedisStore`,
//!    each from 64 concurrent tasks sharing one multiplexed
//!    `RedisConnection`.
//! 2. **the comparison**: a fixed count of decisions over a keyspace, then
//!    `redis-benchmark -c 50 -P 1 -n <count> -r <keyspace>` running the
//!    crate's own script with `EVALSHA` on the same keyspace, on a flushed
//!    server each time; it prints both rates and their ratio. The round
//!    trips come from `INFO commandstats` before and after: every command a
//!    client sent, so a decision that took two would show.
//! 3. **memory per key**: `MEMORY USAGE` of a bucket holding 100 hits,
//!    beside a sorted set of 100 UUID members with the same scores.
//!
//! `REDIS_BENCH_COUNT` (default 200000) sets the count of the comparison.
//! The tasks and the decisions run on a tokio runtime of two workers, as a
//! server on this machine would.

mod support;

use std::collections::HashMap;
use std::process::Command;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use criterion::{Criterion, Throughput};
use support::redis::{RedisProcess, calls_between};
use suprnova::cache::{RedisStore, Store};
use suprnova::clock;
use suprnova::limiter::CacheRateLimiter;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};

const TASKS: u64 = 64;
const LIMIT: u32 = 100;
const WINDOW: Duration = Duration::from_secs(60);
const DRIVER_PREFIX: &str = "bench:";
/// The keyspaces of the comparison: wide (nearly every call admitted) and
/// narrow (after the first 10,000 calls nearly every call refused).
const KEYSPACES: [u64; 2] = [100_000, 100];

/// The crate's scripts, read from the files the crate builds them from.
const SLIDING_WINDOW_LUA: &str = include_str!("../src/rate_limit/sliding_window.lua");
const INCREMENT_IF_BELOW_LUA: &str = include_str!("../src/cache/increment_if_below.lua");

/// What the bench drives: the sliding-window driver or the facade.
#[derive(Clone)]
enum Subject {
    Driver(Arc<RedisRateLimiter>),
    Facade(Arc<CacheRateLimiter>),
}

impl Subject {
    /// One decision on key `n`; `true` when admitted.
    async fn decide(&self, n: u64) -> bool {
        // The same 12-digit form as redis-benchmark's __rand_int__.
        let key = format!("user:{n:012}");
        match self {
            Self::Driver(limiter) => {
                limiter
                    .acquire(&key, &SlidingWindowConfig::new(LIMIT, WINDOW))
                    .await
                    .expect("a decision")
                    .allowed
            }
            Self::Facade(limiter) => !limiter
                .hit_and_check(&key, i64::from(LIMIT), WINDOW.as_secs() as i64)
                .await
                .expect("a decision"),
        }
    }
}

/// A small xorshift, so each task walks its own random keys without a lock.
fn next_random(state: &mut u64) -> u64 {
    *state ^= *state << 13;
    *state ^= *state >> 7;
    *state ^= *state << 17;
    *state
}

/// `count` decisions from `TASKS` concurrent tasks on random keys of
/// `keyspace`; the wall time and how many were admitted.
async fn run_tasks(subject: &Subject, count: u64, keyspace: u64) -> (Duration, u64) {
    let admitted = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|t| {
            let subject = subject.clone();
            let admitted = admitted.clone();
            // The first tasks take the remainder, so exactly `count` run.
            let share = count / TASKS + u64::from(t < count % TASKS);
            tokio::spawn(async move {
                let mut state = 0x9E37_79B9_7F4A_7C15 ^ (t + 1).wrapping_mul(0xA076_1D64_78BD_642F);
                for _ in 0..share {
                    if subject.decide(next_random(&mut state) % keyspace).await {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.expect("a bench task");
    }
    (start.elapsed(), admitted.load(Ordering::Relaxed))
}

/// Runs `redis-benchmark` with one command and returns its requests per
/// second.
fn redis_benchmark(port: u16, count: u64, keyspace: u64, command: &[&str]) -> f64 {
    let out = Command::new("redis-benchmark")
        .args(["-h", "127.0.0.1", "-p", &port.to_string()])
        .args(["-c", "50", "-P", "1", "-n", &count.to_string()])
        .args(["-r", &keyspace.to_string(), "--csv"])
        .args(command)
        .output()
        .expect("could not run redis-benchmark: apt-get install redis-tools");
    let csv = String::from_utf8_lossy(&out.stdout);
    // "test","rps",... then one line per test.
    csv.lines()
        .filter(|l| !l.starts_with("\"test\""))
        .find_map(|l| l.split(',').nth(1)?.trim_matches('"').parse().ok())
        .unwrap_or_else(|| panic!("no rate in redis-benchmark's output: {csv}"))
}

/// Loads a script and returns its SHA1, as the crate's own invocation sends.
fn script_load(redis: &RedisProcess, script: &str) -> String {
    let sha = redis::Script::new(script).get_hash().to_owned();
    let escaped = script
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n");
    let reply = redis.command(&format!("SCRIPT LOAD \"{escaped}\""));
    assert!(
        reply.contains(&sha),
        "SCRIPT LOAD answered {reply:?}, expected {sha}"
    );
    sha
}

fn criterion_part(
    c: &mut Criterion,
    runtime: &tokio::runtime::Runtime,
    subjects: &[(&str, Subject)],
) {
    let mut group = c.benchmark_group("redis_64_tasks");
    group.throughput(Throughput::Elements(1));
    for (name, subject) in subjects {
        group.bench_function(*name, |b| {
            b.iter_custom(|iters| runtime.block_on(run_tasks(subject, iters, KEYSPACES[0])).0)
        });
    }
    group.finish();
}

/// The commands the crate's clients send; every other command Redis counts
/// ran inside a script.
const CLIENT_COMMANDS: [&str; 3] = ["evalsha", "eval", "script"];

/// The fixed-count comparison with redis-benchmark, printed as a table.
fn comparison(
    runtime: &tokio::runtime::Runtime,
    redis: &RedisProcess,
    subjects: &[(&str, Subject)],
    count: u64,
) {
    println!(
        "\n== redis_driver: {count} decisions, 64 tasks on one connection vs redis-benchmark -c 50 -P 1 =="
    );
    println!("machine: {}", support::machine::describe());
    println!(
        "{:<14} {:>9} {:>10} {:>12} {:>16} {:>7} {:>20}",
        "subject",
        "keyspace",
        "admitted",
        "ours dec/s",
        "redis-bench r/s",
        "ratio",
        "round trips/decision"
    );
    for keyspace in KEYSPACES {
        for (name, subject) in subjects {
            redis.command("FLUSHALL");
            // Warm the connection and the script cache outside the count.
            runtime.block_on(subject.decide(u64::MAX));
            redis.command("FLUSHALL");
            let before = redis.command_calls();
            let (elapsed, admitted) = runtime.block_on(run_tasks(subject, count, keyspace));
            let sent = calls_between(&before, &redis.command_calls());
            let ours = count as f64 / elapsed.as_secs_f64();
            // Commands a client sent: EVALSHA (and EVAL, SCRIPT on a reload).
            // The commands a script runs are counted by Redis too, under
            // their own names; they are no round trip.
            let round_trips: u64 = CLIENT_COMMANDS.iter().filter_map(|c| sent.get(*c)).sum();
            let reference = match subject {
                Subject::Driver(_) => {
                    let sha = script_load(redis, SLIDING_WINDOW_LUA);
                    redis.command("FLUSHALL");
                    redis_benchmark(
                        redis.port(),
                        count,
                        keyspace,
                        &[
                            "EVALSHA",
                            &sha,
                            "1",
                            &format!("{DRIVER_PREFIX}user:__rand_int__"),
                            &LIMIT.to_string(),
                            &WINDOW.as_micros().to_string(),
                            "1",
                        ],
                    )
                }
                Subject::Facade(_) => {
                    // The facade's decision is one script given the counter
                    // and its window's timer: the timer written when
                    // missing, then the conditional count. (redis-benchmark
                    // draws each `__rand_int__` on its own, so the timer is
                    // another user's: the same work for Redis.)
                    let prefix = RedisStore::DEFAULT_PREFIX;
                    let incr = script_load(redis, INCREMENT_IF_BELOW_LUA);
                    redis.command("FLUSHALL");
                    redis_benchmark(
                        redis.port(),
                        count,
                        keyspace,
                        &[
                            "EVALSHA",
                            &incr,
                            "2",
                            &format!("{prefix}user:__rand_int__"),
                            &format!("{prefix}user:__rand_int__:timer"),
                            "60",
                            "1",
                            &i64::MAX.to_string(),
                            "1700000000",
                        ],
                    )
                }
            };
            println!(
                "{:<14} {:>9} {:>10} {:>12.0} {:>16.0} {:>6.2}x {:>20.3}",
                name,
                keyspace,
                admitted,
                ours,
                reference,
                ours / reference,
                round_trips as f64 / count as f64
            );
            use support::targets::{Bound, Unit, check};
            check(
                &format!("Redis {name} / redis-benchmark -c 50 -P 1, {keyspace} keys"),
                ours / reference,
                Bound::AtLeast(1.0),
                Unit::Ratio,
            );
            check(
                &format!("round trips per decision, Redis {name}, {keyspace} keys"),
                round_trips as f64 / count as f64,
                Bound::AtMost(1.0),
                Unit::Plain,
            );
            let others: HashMap<_, _> = sent
                .iter()
                // INFO is the bench's own snapshot.
                .filter(|(c, _)| !CLIENT_COMMANDS.contains(&c.as_str()) && c.as_str() != "info")
                .collect();
            println!("{:<14} commands run inside the scripts: {others:?}", "");
        }
    }
}

/// `MEMORY USAGE` of a bucket of 100 hits, against a sorted set of 100 UUID
/// members with the same scores, averaged over many keys.
fn memory_per_key(
    runtime: &tokio::runtime::Runtime,
    redis: &RedisProcess,
    driver: &RedisRateLimiter,
) {
    const KEYS: u64 = 1_000;
    redis.command("FLUSHALL");
    let cfg = SlidingWindowConfig::new(LIMIT, WINDOW);
    runtime.block_on(async {
        for k in 0..KEYS {
            for _ in 0..LIMIT {
                assert!(
                    driver
                        .acquire(&format!("mem:{k}"), &cfg)
                        .await
                        .unwrap()
                        .allowed
                );
            }
        }
    });
    let usage = |key: &str| -> u64 {
        let reply = redis.command(&format!("MEMORY USAGE {key} SAMPLES 0"));
        reply
            .trim_start_matches(':')
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("MEMORY USAGE {key}: {reply:?}"))
    };
    let ours: u64 = (0..KEYS)
        .map(|k| usage(&format!("{DRIVER_PREFIX}mem:{k}")))
        .sum();
    // The same hits, each a UUID member: what a sliding log keyed by
    // request id stores.
    let mut state = 0x1234_5678_9ABC_DEF1_u64;
    for k in 0..KEYS {
        let scores = redis.command(&format!("ZRANGE {DRIVER_PREFIX}mem:{k} 0 -1 WITHSCORES"));
        let scores: Vec<&str> = scores
            .lines()
            .filter(|l| !l.starts_with(['*', '$']))
            .collect();
        let mut zadd = format!("ZADD uuid:{k}");
        for pair in scores.chunks(2) {
            let uuid = format!(
                "{:08x}-{:04x}-4{:03x}-{:04x}-{:012x}",
                next_random(&mut state) as u32,
                next_random(&mut state) as u16,
                next_random(&mut state) as u16 & 0xfff,
                (next_random(&mut state) as u16 & 0x3fff) | 0x8000,
                next_random(&mut state) & 0xffff_ffff_ffff
            );
            zadd.push_str(&format!(" {} {uuid}", pair[1]));
        }
        assert!(
            redis.command(&zadd).starts_with(":100"),
            "ZADD of 100 UUIDs"
        );
    }
    let uuids: u64 = (0..KEYS).map(|k| usage(&format!("uuid:{k}"))).sum();
    println!("\n== Redis memory per key at {LIMIT} hits (MEMORY USAGE, mean of {KEYS} keys) ==");
    println!(
        "driver bucket (integer members): {:.0} B",
        ours as f64 / KEYS as f64
    );
    println!(
        "ZSET of UUID members:            {:.0} B",
        uuids as f64 / KEYS as f64
    );
    println!("ratio: {:.3}", ours as f64 / uuids as f64);
    support::targets::check(
        "Redis memory per key at 100 hits, driver / ZSET of UUID members",
        ours as f64 / uuids as f64,
        support::targets::Bound::AtMost(0.5),
        support::targets::Unit::Plain,
    );
}

fn main() {
    let since = SystemTime::now();
    let count = support::env_number("REDIS_BENCH_COUNT", 200_000);
    let redis = RedisProcess::start();
    let runtime = support::two_worker_runtime();
    let conn = redis.connection(&runtime);
    let driver = Arc::new(RedisRateLimiter::new(conn.clone()).with_prefix(DRIVER_PREFIX));
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(conn));
    let facade = Arc::new(CacheRateLimiter::new(store, clock::system()));
    let subjects = [
        ("driver", Subject::Driver(driver.clone())),
        ("facade", Subject::Facade(facade)),
    ];

    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5))
        .sample_size(20)
        .configure_from_args();
    criterion_part(&mut criterion, &runtime, &subjects);
    criterion.final_summary();
    for (name, _) in &subjects {
        if let Some(ns) = support::estimates::nanos_per_iter("redis_64_tasks", name, since) {
            println!("criterion, {name}: {:.0} decisions/s", 1e9 / ns);
        }
    }

    comparison(&runtime, &redis, &subjects, count);
    memory_per_key(&runtime, &redis, &driver);
}
