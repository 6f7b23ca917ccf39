//! The cache-backed rate limiter and its stores, on sequences the other
//! tests leave out: values a Laravel application wrote, amounts and windows
//! of 0, below 0 and at the ends of a 64-bit integer, time passing, and
//! callers at the same moment, run on the memory store and on a real
//! redis-server with every answer compared; and what the facades and the
//! store trait promise about them.
#![cfg(feature = "redis")]

mod support;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::redis::{RedisServer, connect};
use support::two_steps::TwoSteps;
use support::unique_prefix;
use suprnova::RateLimiter;
use suprnova::cache::{Cache, MemoryStore, RedisStore, Store, WindowIncrement};
use suprnova::chrono::{DateTime, Utc};
use suprnova::clock::{Clock, FakeClock, SystemClock};
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;

/// Runs `future` bounded in time.
async fn bounded<T>(what: &str, future: impl Future<Output = T>) -> T {
    support::within(what, Duration::from_secs(20), future).await
}

/// A memory store on `clock` and a Redis store on `server` with a prefix
/// of its own.
fn both_stores(
    server: &RedisServer,
    name: &str,
    clock: &FakeClock,
) -> [(&'static str, Arc<dyn Store>); 2] {
    let memory = MemoryStore::with_clock(clock.shared());
    let redis = RedisStore::new(connect(&server.url())).with_prefix(unique_prefix(name));
    [
        ("memory", Arc::new(memory) as Arc<dyn Store>),
        ("redis", Arc::new(redis) as Arc<dyn Store>),
    ]
}

/// The lines on which two transcripts differ.
fn differences(memory: &[String], redis: &[String]) -> Vec<String> {
    assert_eq!(memory.len(), redis.len());
    memory
        .iter()
        .zip(redis)
        .filter(|(m, r)| m != r)
        .map(|(m, r)| format!("memory {m}\n redis {r}"))
        .collect()
}

/// The current Unix second, once a second has just begun (so that a short
/// test on Redis, whose times to live run on the real clock, stays in the
/// seconds a fake clock started at it counts).
async fn start_of_a_second() -> u64 {
    let into = SystemClock.unix_millis() % 1_000;
    tokio::time::sleep(Duration::from_millis(1_000 - into + 20)).await;
    u64::try_from(SystemClock.unix_seconds()).unwrap()
}

/// What `store` holds under `keys`, with times to live in whole seconds,
/// rounded up.
async fn dump(store: &dyn Store, keys: &[&str], out: &mut Vec<String>) {
    for key in keys {
        let value = store.get(key).await;
        let ttl = support::ttl_seconds(store, key).await;
        out.push(format!("  {key} = {value:?} ttl {ttl:?}"));
    }
}

/// Laravel-written entries, counts below zero, amounts of 0, amounts and
/// windows at the ends of a 64-bit integer and a window that ends far
/// ahead: each answer of the rate limiter, and what the store holds after
/// it.
async fn odd_values_transcript(limiter: &CacheRateLimiter, now: i64) -> Vec<String> {
    let store = limiter.store().clone();
    let keys = [
        "lw",
        "lw:timer",
        "np",
        "np:timer",
        "neg",
        "neg:timer",
        "z",
        "z:timer",
        "h",
        "h:timer",
        "d",
        "d:timer",
        "u",
        "u:timer",
    ];
    let mut out = Vec::new();
    macro_rules! step {
        ($what:expr, $call:expr) => {{
            let answer = bounded($what, $call).await;
            out.push(format!("{}: {:?}", $what, answer));
            dump(store.as_ref(), &keys, &mut out).await;
        }};
    }
    // A window a Laravel application opened, its timer serialized by
    // phpredis (`i:<n>;`).
    step!("lw put", store.put("lw", "3", Duration::from_secs(30)));
    step!(
        "lw put timer",
        store.put(
            "lw:timer",
            &format!("i:{};", now + 30),
            Duration::from_secs(30)
        )
    );
    step!("lw attempts", limiter.attempts("lw"));
    step!("lw available_in", limiter.available_in("lw"));
    step!("lw too many at 3", limiter.too_many_attempts("lw", 3));
    step!(
        "lw attempt of 3",
        limiter.attempt("lw", 3, || async { 1 }, 60)
    );
    step!(
        "lw attempt of 4",
        limiter.attempt("lw", 4, || async { 1 }, 60)
    );
    step!("lw 2 below 5", limiter.increment_if_below("lw", 60, 2, 5));
    step!("lw hit", limiter.hit("lw", 60));
    // A count a plain INCRBY made: no time to live, no timer.
    step!("np incrby", store.increment("np", 5));
    step!("np too many at 6", limiter.too_many_attempts("np", 6));
    step!(
        "np attempt of 5",
        limiter.attempt("np", 5, || async { 1 }, 60)
    );
    step!("np increment 0", limiter.increment("np", 60, 0));
    step!("np hit in no window", limiter.hit("np", 0));
    // Below zero.
    step!("neg decrement 3", limiter.decrement("neg", 60, 3));
    step!(
        "neg attempt of 1",
        limiter.attempt("neg", 1, || async { 1 }, 60)
    );
    step!("neg 5 below 1", limiter.increment_if_below("neg", 60, 5, 1));
    step!(
        "neg 5 below 1 in no window",
        limiter.increment_if_below("neg", 0, 5, 1)
    );
    step!("neg remaining of 2", limiter.remaining("neg", 2));
    // Amounts of 0.
    step!("z increment 0", limiter.increment("z", 60, 0));
    step!("z 0 below 0", limiter.increment_if_below("z", 60, 0, 0));
    step!("z 0 below -1", limiter.increment_if_below("z", 60, 0, -1));
    step!("z decrement 0", limiter.decrement("z", 60, 0));
    step!("z increment 0 in no window", limiter.increment("z", 0, 0));
    step!("z clear", limiter.clear("z"));
    step!(
        "z increment 0 in no window, fresh",
        limiter.increment("z", 0, 0)
    );
    step!(
        "z 0 below 0 in no window, fresh",
        limiter.increment_if_below("z", 0, 0, 0)
    );
    // The ends of a 64-bit count.
    step!("h increment max", limiter.increment("h", 60, i64::MAX));
    step!("h hit past max", limiter.hit("h", 60));
    step!(
        "h attempt of max",
        limiter.attempt("h", i64::MAX, || async { 1 }, 60)
    );
    step!("h decrement max", limiter.decrement("h", 60, i64::MAX));
    step!(
        "h decrement max again",
        limiter.decrement("h", 60, i64::MAX)
    );
    step!("h decrement 2 past min", limiter.decrement("h", 60, 2));
    step!("h remaining of max", limiter.remaining("h", i64::MAX));
    // Long windows, and windows below zero on an open one.
    step!("d hit a long window", limiter.hit("d", 1_000_000));
    step!("d available_in", limiter.available_in("d"));
    step!("d hit decay min", limiter.hit("d", i64::MIN));
    step!(
        "d 1 below 3 decay min",
        limiter.increment_if_below("d", i64::MIN, 1, 3)
    );
    step!(
        "d attempt of 3 decay min",
        limiter.attempt("d", 3, || async { 1 }, i64::MIN)
    );
    // A window that ends a day ahead, at half a second.
    let far = DateTime::<Utc>::from_timestamp(now + 86_400, 500_000_000).unwrap();
    step!("u hit_until a day ahead", limiter.hit_until("u", far));
    step!("u available_in", limiter.available_in("u"));
    step!("u too many at 1", limiter.too_many_attempts("u", 1));
    step!(
        "u attempt of 1 in no window",
        limiter.attempt("u", 1, || async { 1 }, 0)
    );
    step!(
        "u attempt of 2 in no window",
        limiter.attempt("u", 2, || async { 1 }, 0)
    );
    step!("u reset", limiter.reset_attempts("u"));
    step!(
        "u attempt of 2 in no window after reset",
        limiter.attempt("u", 2, || async { 1 }, 0)
    );
    step!(
        "u attempt of 2 decay -1",
        limiter.attempt("u", 2, || async { 1 }, -1)
    );
    step!(
        "u attempt of 2 decay -1 again",
        limiter.attempt("u", 2, || async { 1 }, -1)
    );
    out
}

// Checked and right: the memory store and Redis answer alike, and leave
// alike entries, on Laravel-written values (a phpredis-serialized timer, a
// count without time to live), counts below zero, amounts of 0, counts and
// windows at the ends of a 64-bit integer, and a window a day long.
#[tokio::test]
async fn odd_values_answer_alike_on_both_stores() {
    let server = RedisServer::start();
    let now = start_of_a_second().await;
    let clock = FakeClock::at_unix(now);
    let mut transcripts = Vec::new();
    for (_, store) in both_stores(&server, "odd", &clock) {
        let limiter = CacheRateLimiter::new(store, clock.shared());
        transcripts.push(odd_values_transcript(&limiter, now as i64).await);
    }
    let differences = differences(&transcripts[0], &transcripts[1]);
    assert!(differences.is_empty(), "{}", differences.join("\n"));
    // And as Laravel answers: the serialized timer is read, a full count
    // without a timer is reset by the attempt that opens a window.
    let memory = &transcripts[0];
    assert!(memory.contains(&"lw available_in: Ok(30)".to_owned()));
    assert!(memory.contains(&"lw attempt of 3: Ok(None)".to_owned()));
    assert!(memory.contains(&"np attempt of 5: Ok(Some(1))".to_owned()));
}

/// How far a transcript's clock moves: the fake clock, and on Redis the
/// real time too.
type Advance = dyn Fn(u64) -> Pin<Box<dyn Future<Output = ()> + Send>> + Sync;

/// Windows of one to five seconds, with time passing between the calls.
async fn windows_ending_transcript(limiter: &CacheRateLimiter, advance: &Advance) -> Vec<String> {
    let store = limiter.store().clone();
    let keys = ["a", "a:timer", "b", "b:timer", "c", "c:timer"];
    let mut out = Vec::new();
    macro_rules! step {
        ($what:expr, $call:expr) => {{
            let answer = bounded($what, $call).await;
            out.push(format!("{}: {:?}", $what, answer));
            for key in keys {
                out.push(format!("  {key} = {:?}", store.get(key).await.unwrap()));
            }
        }};
    }
    // A count made after reset_attempts outlives its timer.
    step!("a hit 1s", limiter.hit("a", 1));
    step!("a reset", limiter.reset_attempts("a"));
    step!("a hit 3s", limiter.hit("a", 3));
    step!("a hit 3s", limiter.hit("a", 3));
    step!(
        "b attempt of 2 1s",
        limiter.attempt("b", 2, || async { 1 }, 1)
    );
    step!(
        "b attempt of 2 1s",
        limiter.attempt("b", 2, || async { 1 }, 1)
    );
    step!("b hit in no window", limiter.hit("b", 0));
    step!("c decrement 1s", limiter.decrement("c", 1, 1));
    step!("c hit in no window", limiter.hit("c", 0));
    step!("c hit in no window", limiter.hit("c", 0));
    advance(1_200).await;
    step!("a too many at 2", limiter.too_many_attempts("a", 2));
    step!("a attempts", limiter.attempts("a"));
    step!("a available_in", limiter.available_in("a"));
    step!("b attempts", limiter.attempts("b"));
    step!(
        "b attempt of 2 in no window",
        limiter.attempt("b", 2, || async { 1 }, 0)
    );
    step!("c attempts", limiter.attempts("c"));
    step!("c hit in no window", limiter.hit("c", 0));
    step!("a hit 1s", limiter.hit("a", 1));
    step!(
        "a attempt of 2 1s",
        limiter.attempt("a", 2, || async { 1 }, 1)
    );
    advance(1_000).await;
    step!("a attempts", limiter.attempts("a"));
    step!(
        "a attempt of 1 5s",
        limiter.attempt("a", 1, || async { 1 }, 5)
    );
    step!(
        "a attempt of 1 5s",
        limiter.attempt("a", 1, || async { 1 }, 5)
    );
    step!("a too many at 1", limiter.too_many_attempts("a", 1));
    out
}

// Checked and right: windows that end between calls (a count that
// outlives its timer, a hit in no window on an ended one, a window opened
// again) answer alike on the memory store, on a fake clock, and on Redis,
// in real time.
#[tokio::test]
async fn windows_that_end_answer_alike_on_both_stores() {
    let server = RedisServer::start();
    let now = start_of_a_second().await;
    let mut transcripts = Vec::new();
    for name in ["memory", "redis"] {
        let clock = FakeClock::at_unix(now);
        let [(_, memory), (_, redis)] = both_stores(&server, "ending", &clock);
        let moved = clock.clone();
        let (store, advance): (Arc<dyn Store>, Box<Advance>) = if name == "memory" {
            let advance = move |ms: u64| {
                moved.advance(Duration::from_millis(ms));
                Box::pin(async {}) as Pin<Box<dyn Future<Output = ()> + Send>>
            };
            (memory, Box::new(advance))
        } else {
            let advance = move |ms: u64| {
                moved.advance(Duration::from_millis(ms));
                Box::pin(tokio::time::sleep(Duration::from_millis(ms)))
                    as Pin<Box<dyn Future<Output = ()> + Send>>
            };
            (redis, Box::new(advance))
        };
        let limiter = CacheRateLimiter::new(store, clock.shared());
        transcripts.push(windows_ending_transcript(&limiter, advance.as_ref()).await);
    }
    let differences = differences(&transcripts[0], &transcripts[1]);
    assert!(differences.is_empty(), "{}", differences.join("\n"));
}

/// Twenty callers making ten calls each on `key`, at the same moment;
/// how many counted.
async fn counted_by_twenty(
    client: impl Fn() -> Arc<CacheRateLimiter>,
    key: &str,
    attempt_in_no_window: bool,
) -> usize {
    let counted = Arc::new(AtomicUsize::new(0));
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let limiter = client();
            let key = key.to_owned();
            let counted = counted.clone();
            tokio::spawn(async move {
                for _ in 0..10 {
                    if attempt_in_no_window {
                        let ran = limiter
                            .attempt(&key, 5, tokio::task::yield_now, 0)
                            .await
                            .unwrap();
                        if ran.is_some() {
                            counted.fetch_add(1, Ordering::SeqCst);
                        }
                    } else {
                        let outcome = limiter.increment_if_below(&key, 60, 3, 100).await.unwrap();
                        if outcome.counted {
                            counted.fetch_add(1, Ordering::SeqCst);
                        }
                    }
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for task in tasks {
        bounded("a caller", task).await.unwrap();
    }
    counted.load(Ordering::SeqCst)
}

// Checked and right: callers at the same moment get exactly the maximum,
// on both stores, with an attempt in no window counting in a window whose
// count was reset or taken back to 0, and with a count of 3 at a time.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn callers_at_one_moment_get_exactly_the_maximum_on_both_stores() {
    let server = RedisServer::start();
    let clock = FakeClock::at_unix(u64::try_from(SystemClock.unix_seconds()).unwrap());
    let memory = Arc::new(CacheRateLimiter::new(
        Arc::new(MemoryStore::with_clock(clock.shared())),
        clock.shared(),
    ));
    let url = server.url();
    let prefix = unique_prefix("moment");
    // A connection for each caller, as separate processes have.
    let redis = || {
        Arc::new(CacheRateLimiter::new(
            Arc::new(RedisStore::new(connect(&url)).with_prefix(prefix.clone())),
            clock.shared(),
        ))
    };
    for in_no_window in [true, false] {
        for pinned_by_reset in [true, false] {
            let key = format!("k:{in_no_window}:{pinned_by_reset}");
            for name in ["memory", "redis"] {
                let limiter = if name == "memory" {
                    memory.clone()
                } else {
                    redis()
                };
                limiter.hit(&key, 60).await.unwrap();
                if pinned_by_reset {
                    limiter.reset_attempts(&key).await.unwrap();
                } else {
                    limiter.decrement(&key, 60, 1).await.unwrap();
                }
                let counted = if name == "memory" {
                    counted_by_twenty(|| memory.clone(), &key, in_no_window).await
                } else {
                    counted_by_twenty(redis, &key, in_no_window).await
                };
                let (want, left) = if in_no_window { (5, 5) } else { (33, 99) };
                assert_eq!(counted, want, "{name} {key}");
                assert_eq!(limiter.attempts(&key).await.unwrap(), left, "{name} {key}");
            }
        }
    }
}

// With a CacheRateLimiter installed alone, the Cache facade reads its store
// (it counted in a second, new memory store).
#[tokio::test]
async fn the_cache_facade_reads_the_store_of_the_installed_rate_limiter() {
    // As the guide's "Testing your application" installs the facade's
    // limiter: `app.install(Arc::new(CacheRateLimiter::new(store, clock)))`.
    let clock = FakeClock::at_unix(1_767_268_800);
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let app = App::new();
    app.install(Arc::new(CacheRateLimiter::new(
        store.clone(),
        clock.shared(),
    )));
    app.scope(async {
        assert_eq!(RateLimiter::hit("login:42", 60).await.unwrap(), 1);
        // The RateLimiter facade is built on the Cache facade: both name
        // one store, so the count is read, and forgotten, through either.
        let through_cache = Cache::get("login:42").await.unwrap();
        let forgotten = Cache::forget("login:42").await.unwrap();
        let left = RateLimiter::attempts("login:42").await.unwrap();
        assert_eq!(
            (through_cache.as_deref(), forgotten, left),
            (Some("1"), true, 0)
        );
    })
    .await;
}

// attempt with a maximum of 0 runs no callback, also once a decrement left
// the count below zero (it ran one).
#[tokio::test]
async fn attempt_with_a_maximum_of_zero_runs_no_callback_after_a_decrement() {
    let clock = FakeClock::at_unix(1_767_268_800);
    let limiter = CacheRateLimiter::new(
        Arc::new(MemoryStore::with_clock(clock.shared())),
        clock.shared(),
    );
    assert_eq!(limiter.decrement("otp:42", 60, 3).await.unwrap(), -3);
    let runs = AtomicUsize::new(0);
    for max in [0, -1] {
        let ran = limiter
            .attempt(
                "otp:42",
                max,
                || async {
                    runs.fetch_add(1, Ordering::SeqCst);
                },
                60,
            )
            .await
            .unwrap();
        assert_eq!(ran, None, "a maximum of {max}");
    }
    // "A maximum below 1 runs no callback"; "A maximum of 0 (a Limit or an
    // attempt with no attempts) refuses every request and runs no callback".
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    assert_eq!(limiter.attempts("otp:42").await.unwrap(), -3);
}

// A refused count that opens a window treats the counter's time to live
// alike on every store (memory lengthened it; one Redis node left a counter
// without one for ever).
#[tokio::test]
async fn a_refused_count_that_opens_a_window_treats_the_counter_alike_on_every_store() {
    let server = RedisServer::start();
    let clock = FakeClock::at_unix(1_000);
    let [memory, redis] = both_stores(&server, "refused", &clock);
    let stores = [
        memory,
        redis,
        (
            "two steps",
            Arc::new(TwoSteps(MemoryStore::with_clock(clock.shared()))) as Arc<dyn Store>,
        ),
    ];
    // An amount above the ceiling: refused on any count at or above 0, and
    // the call opens the window's timer.
    let count = |key| WindowIncrement {
        key,
        timer_key: if key == "short" {
            "short:timer"
        } else {
            "plain:timer"
        },
        ends_at: 1_060,
        decay_seconds: 60,
        amount: 5,
        ceiling: 3,
    };
    let mut seen = Vec::new();
    for (name, store) in &stores {
        // One counter with ten seconds to live, one a plain INCRBY made.
        store
            .put("short", "1", Duration::from_secs(10))
            .await
            .unwrap();
        store.increment("plain", 1).await.unwrap();
        let mut line = vec![name.to_string()];
        for key in ["short", "plain"] {
            let outcome = bounded("count", store.increment_in_window(count(key)))
                .await
                .unwrap();
            let ttl = support::ttl_seconds(store.as_ref(), key).await.unwrap();
            let timer = store.get(&format!("{key}:timer")).await.unwrap();
            line.push(format!("{key}: {outcome:?} timer {timer:?} ttl {ttl:?}"));
        }
        seen.push(line);
    }
    // As `Store::increment_in_window`'s provided method says: "Refused when
    // it opened the window, it gives a full count with no time to live ...
    // the window's ...; one with a time to live keeps it".
    let want = [
        "short: IncrementOutcome { counted: false, count: 1 } timer Some(\"1060\") ttl Some(10)",
        "plain: IncrementOutcome { counted: false, count: 1 } timer Some(\"1060\") ttl Some(60)",
    ];
    let wrong: Vec<String> = seen
        .iter()
        .filter(|line| line[1..] != want)
        .map(|line| line.join("\n  "))
        .collect();
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}
