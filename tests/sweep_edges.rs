//! The sweep of expired entries in the in-memory limiter and the in-memory
//! cache store, and the sharded table under both: decisions a sweep must
//! not change, memory a sweep must give back, a sweep's schedule when the
//! clock is frozen, set back or set forward, and keys of every odd shape.

mod support;

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex, mpsc};
use std::time::Duration;

use suprnova::cache::{MemoryStore, Store};
use suprnova::clock::{Clock, FakeClock};
use suprnova::container::App;
use suprnova::decision::Decision;
use suprnova::limiter::CacheRateLimiter;
use suprnova::rate_limit::SlidingWindowConfig;
use suprnova::rate_limit::memory::InMemoryRateLimiter;

fn per_ms(max_requests: u32, window_ms: u64) -> SlidingWindowConfig {
    SlidingWindowConfig::new(max_requests, Duration::from_millis(window_ms))
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

thread_local! {
    /// Set on a thread whose next clock read holds it right after reading.
    static HOLD_AFTER_NEXT_READ: Cell<bool> = const { Cell::new(false) };
}

/// The crate's fake clock, counting its reads, whose next read on a marked
/// thread holds that thread right after the read (a thread preempted there)
/// until the test lets it go.
#[derive(Debug)]
struct HeldClock {
    inner: FakeClock,
    reads: AtomicU64,
    gate: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
}

impl HeldClock {
    fn new(inner: FakeClock) -> Arc<Self> {
        Arc::new(Self {
            inner,
            reads: AtomicU64::new(0),
            gate: Mutex::new(None),
        })
    }

    fn reads(&self) -> u64 {
        self.reads.load(Ordering::SeqCst)
    }

    /// Runs `call` on a thread of its own, holds it right after its first
    /// read of the clock, runs `meanwhile`, then lets the call go on and
    /// returns what it returned.
    fn hold<R: Send>(&self, call: impl FnOnce() -> R + Send, meanwhile: impl FnOnce()) -> R {
        let (read_tx, read_rx) = mpsc::channel();
        let (go_tx, go_rx) = mpsc::channel();
        *self.gate.lock().unwrap() = Some((read_tx, go_rx));
        std::thread::scope(|s| {
            let held = s.spawn(|| {
                HOLD_AFTER_NEXT_READ.with(|hold| hold.set(true));
                call()
            });
            read_rx.recv().unwrap();
            meanwhile();
            go_tx.send(()).unwrap();
            held.join().unwrap()
        })
    }
}

impl Clock for HeldClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.unix_nanos())
    }

    fn unix_nanos(&self) -> u64 {
        self.reads.fetch_add(1, Ordering::SeqCst);
        let nanos = self.inner.unix_nanos();
        if HOLD_AFTER_NEXT_READ.with(|hold| hold.replace(false)) {
            let (read, go) = self.gate.lock().unwrap().take().unwrap();
            read.send(()).unwrap();
            go.recv().unwrap();
        }
        nanos
    }
}

// ---------------------------------------------------------------------------
// A sweep never changes a decision
// ---------------------------------------------------------------------------

// Hits at +0, +400 and +800 ms on a limit of 3 a second, then calls at the
// instants around each hit's end: one limiter swept before every call (and
// by every call), one never swept. Every field of every decision is the
// same, the key's first hit ending exactly at the instant of a sweep
// included, and a sweep at the newest hit's end leaves no bucket.
#[test]
fn a_sweep_at_any_instant_of_a_full_keys_window_leaves_its_decisions_exact() {
    let clock = support::clock_at(12, 0, 0);
    let swept = InMemoryRateLimiter::with_clock(clock.shared()).with_sweep_interval(Duration::ZERO);
    let unswept =
        InMemoryRateLimiter::with_clock(clock.shared()).with_sweep_interval(Duration::MAX);
    let cfg = per_ms(3, 1_000);
    let start = clock.unix_millis();
    let mut at = 0;
    let mut step_to = |ms: u64| {
        clock.advance(Duration::from_millis(ms - at));
        at = ms;
    };
    for ms in [0, 400, 800] {
        step_to(ms);
        assert!(swept.acquire_now("k", &cfg).unwrap().allowed);
        assert!(unswept.acquire_now("k", &cfg).unwrap().allowed);
    }
    let mut admitted_at = Vec::new();
    for ms in [
        801, 999, 1_000, 1_001, 1_399, 1_400, 1_401, 1_799, 1_800, 1_999, 2_000, 2_399, 2_400,
    ] {
        step_to(ms);
        swept.sweep();
        let a = swept.acquire_now("k", &cfg).unwrap();
        let b = unswept.acquire_now("k", &cfg).unwrap();
        assert_eq!(a, b, "at +{ms} ms");
        if a.allowed {
            admitted_at.push(ms);
        }
    }
    // Each place frees exactly a window after the hit that held it.
    assert_eq!(admitted_at, [1_000, 1_400, 1_800, 2_000, 2_400]);
    // The newest hit (+2,400) ends at +3,400: a sweep at +3,399 keeps the
    // bucket, one at +3,400 drops it.
    step_to(3_399);
    swept.sweep();
    assert_eq!(swept.bucket_count(), 1);
    step_to(3_400);
    swept.sweep();
    assert_eq!(swept.bucket_count(), 0);
    let fresh = swept.acquire_now("k", &cfg).unwrap();
    assert_eq!(fresh, unswept.acquire_now("k", &cfg).unwrap());
    assert_eq!((fresh.allowed, fresh.remaining), (true, 2));
    assert_eq!(clock.unix_millis() - start, 3_400);
}

// Sixteen threads take one key (25 per 100 ms) while every call sweeps and
// a thread of its own sweeps without a pause; the clock moves 1 ms between
// rounds. The sliding window admits 25 in the round where the window
// opens and none in the 99 rounds after, round after round: exactly the
// limit, whatever the sweeps did between the take and the refusal's note.
#[test]
fn threads_taking_one_key_while_everything_sweeps_admit_exactly_the_limit() {
    let clock = support::clock_at(12, 0, 0);
    let limiter =
        InMemoryRateLimiter::with_clock(clock.shared()).with_sweep_interval(Duration::ZERO);
    let cfg = per_ms(25, 100);
    let stop = AtomicBool::new(false);
    let threads = 16;
    let per_round = 8;
    std::thread::scope(|s| {
        s.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                limiter.sweep();
            }
        });
        for round in 0..400_u64 {
            let start = Barrier::new(threads);
            let admitted: u32 = std::thread::scope(|r| {
                let handles: Vec<_> = (0..threads)
                    .map(|_| {
                        r.spawn(|| {
                            start.wait();
                            (0..per_round)
                                .map(|_| {
                                    u32::from(limiter.acquire_now("hot", &cfg).unwrap().allowed)
                                })
                                .sum::<u32>()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).sum()
            });
            let expected = if round % 100 == 0 { 25 } else { 0 };
            assert_eq!(admitted, expected, "round {round}");
            clock.advance(Duration::from_millis(1));
        }
        stop.store(true, Ordering::Relaxed);
    });
}

// ---------------------------------------------------------------------------
// Memory given back
// ---------------------------------------------------------------------------

// A new key every 10 ms for 60 s of clock time, each hit once under a
// window of 2 s, with the default sweep once a second: the buckets never
// exceed the keys of one window and one interval (300), and once every
// window has passed, one call leaves only its own bucket.
#[test]
fn a_steady_stream_of_new_keys_keeps_about_one_window_of_buckets() {
    let clock = support::clock_at(12, 0, 0);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let cfg = per_ms(5, 2_000);
    let mut most = 0;
    for i in 0..6_000 {
        assert!(
            limiter
                .acquire_now(&format!("stream:{i}"), &cfg)
                .unwrap()
                .allowed
        );
        most = most.max(limiter.bucket_count());
        clock.advance(Duration::from_millis(10));
    }
    assert!(most <= 301, "{most} buckets at most");
    assert!(most >= 200, "{most}: every key of the last window is held");
    clock.advance(Duration::from_secs(3));
    limiter.acquire_now("last", &cfg).unwrap();
    assert_eq!(limiter.bucket_count(), 1);
}

/// A memory store on `clock` behind the `RateLimiter` and `Cache` facades of
/// a new container.
fn app_with_store(clock: &FakeClock) -> (App, Arc<MemoryStore>) {
    let app = App::new();
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    app.install::<dyn Store>(store.clone());
    app.install(Arc::new(CacheRateLimiter::new(
        store.clone(),
        clock.shared(),
    )));
    (app, store)
}

// Ten minutes of a steady stream of new keys, none read again, through the
// facades: each 100 ms one `RateLimiter::hit` with a decay of 1 to 5 s (a
// counter and its timer) and one `Cache::put` with a time to live of 1 to
// 10 s. The store holds at most what the sweep interval (60 s) and the
// longest time to live (10 s) let through, about 70 s of keys (2,100
// entries); and once every entry has expired, one call leaves only its
// own.
#[tokio::test]
async fn a_steady_stream_of_hits_and_puts_keeps_the_store_bounded() {
    use suprnova::RateLimiter;
    use suprnova::cache::Cache;

    let clock = support::clock_at(12, 0, 0);
    let (app, store) = app_with_store(&clock);
    let most = app
        .scope(async {
            let mut most = 0;
            for i in 0..6_000_i64 {
                assert_eq!(
                    RateLimiter::hit(&format!("hit:{i}"), 1 + i % 5)
                        .await
                        .unwrap(),
                    1
                );
                Cache::put(
                    &format!("put:{i}"),
                    "v",
                    Duration::from_secs(1 + (i % 10) as u64),
                )
                .await
                .unwrap();
                most = most.max(store.len());
                clock.advance(Duration::from_millis(100));
            }
            clock.advance(Duration::from_secs(70));
            assert_eq!(Cache::get("nothing").await.unwrap(), None);
            most
        })
        .await;
    assert!(most <= 2_130, "{most} entries at most");
    assert_eq!(store.len(), 0, "every entry expired and was swept");
}

// The store's sweep keeps what is still alive: an entry whose time to live
// runs (to the millisecond), a counter `increment` made (no time to live:
// it stays until forgotten), and a window's counter and its `:timer` until
// the instant the window ends, whether the limiter or a Laravel
// application (plain `put`s) wrote them.
#[tokio::test]
async fn the_store_sweep_keeps_running_ttls_forever_entries_and_timers() {
    let clock = support::clock_at(12, 0, 0);
    let store =
        Arc::new(MemoryStore::with_clock(clock.shared()).with_sweep_interval(Duration::ZERO));
    let limiter = CacheRateLimiter::new(store.clone(), clock.shared());
    let start = clock.unix_seconds();
    store
        .put("short", "1", Duration::from_secs(10))
        .await
        .unwrap();
    store
        .put("ms", "1", Duration::from_millis(10_001))
        .await
        .unwrap();
    store
        .put("long", "1", Duration::from_secs(3_600))
        .await
        .unwrap();
    assert_eq!(store.increment("forever", 7).await.unwrap(), 7);
    assert_eq!(limiter.hit("login", 30).await.unwrap(), 1);
    // As Laravel writes a window: the timer holds its end.
    store
        .put(
            "laravel:timer",
            &(start + 20).to_string(),
            Duration::from_secs(20),
        )
        .await
        .unwrap();
    store
        .put("laravel", "3", Duration::from_secs(20))
        .await
        .unwrap();
    assert_eq!(store.len(), 8);

    clock.advance(Duration::from_secs(10));
    store.sweep();
    assert_eq!(store.len(), 7, "only the 10 s entry is gone");
    assert_eq!(store.get("ms").await.unwrap().as_deref(), Some("1"));
    clock.advance(Duration::from_millis(1));
    store.sweep();
    assert_eq!(store.len(), 6);

    // Just before the windows end, and at the instant they do.
    clock.advance(Duration::from_millis(9_998));
    store.sweep();
    assert_eq!(store.len(), 6);
    assert_eq!(
        store.get("laravel:timer").await.unwrap(),
        Some((start + 20).to_string())
    );
    clock.advance(Duration::from_millis(1));
    store.sweep();
    assert_eq!(store.len(), 4, "the Laravel window ends at +20 s");
    clock.advance(Duration::from_millis(9_999));
    store.sweep();
    assert_eq!(limiter.attempts("login").await.unwrap(), 1);
    assert_eq!(limiter.available_in("login").await.unwrap(), 1);
    clock.advance(Duration::from_millis(1));
    store.sweep();
    assert_eq!(store.len(), 2, "the limiter's window ends at +30 s");

    // An hour later: only the entry without a time to live.
    clock.advance(Duration::from_secs(3_600));
    store.sweep();
    assert_eq!(store.len(), 1);
    assert_eq!(store.get("forever").await.unwrap().as_deref(), Some("7"));
    assert_eq!(store.ttl("forever").await.unwrap(), None);
}

// ---------------------------------------------------------------------------
// The schedule of the sweep when the clock is frozen or stepped
// ---------------------------------------------------------------------------

// The limiter's clock is set back an hour, then forward ten years, then
// frozen: after each step the calls go on sweeping once an interval has
// passed on the clock as it now reads (a step back does not push the next
// sweep an hour away), and a frozen clock, on which nothing expires,
// drops nothing.
#[test]
fn the_limiter_sweeps_after_its_clock_is_set_back_or_forward() {
    let clock = support::clock_at(12, 0, 0);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let short = per_ms(1, 100);
    for i in 0..50 {
        limiter.acquire_now(&format!("before:{i}"), &short).unwrap();
    }
    // Back an hour: the keys stamped before the step stay (their hits have
    // not left the window as they were stamped), the ones stamped after it
    // are swept within an interval.
    clock.set(clock.now_utc() - chrono::Duration::hours(1));
    for i in 0..50 {
        limiter.acquire_now(&format!("after:{i}"), &short).unwrap();
    }
    assert_eq!(limiter.bucket_count(), 100);
    clock.advance(Duration::from_millis(1_000));
    limiter.acquire_now("tick", &short).unwrap();
    assert_eq!(
        limiter.bucket_count(),
        51,
        "the keys made after the step are swept"
    );
    // Ten years forward: every hit has left; one call sweeps them all.
    clock.advance(Duration::from_secs(10 * 365 * 86_400));
    let d = limiter.acquire_now("before:0", &short).unwrap();
    assert_eq!((d.allowed, d.remaining), (true, 0));
    assert_eq!(limiter.bucket_count(), 1);
    // Frozen: the key stays full and kept, however many calls come.
    for _ in 0..10_000 {
        assert!(!limiter.acquire_now("before:0", &short).unwrap().allowed);
    }
    assert_eq!(limiter.bucket_count(), 1);
    clock.advance(Duration::from_millis(1_000));
    limiter.acquire_now("tick", &short).unwrap();
    assert_eq!(limiter.bucket_count(), 1, "only the tick's own bucket");
}

/// How many sweeps `n` calls on `store` ran: each call reads the clock
/// once, and a sweep once more.
async fn sweeps_in(store: &MemoryStore, clock: &HeldClock, n: u64) -> u64 {
    let before = clock.reads();
    for i in 0..n {
        store.get(&format!("k{}", i % 7)).await.unwrap();
    }
    clock.reads() - before - n
}

// The store's sweep reads the clock once more than the call that runs it,
// so the reads count the sweeps: none on a frozen clock however many calls
// come, one once the interval has passed, one right after the clock is
// set back an hour and then none until an interval has passed again, one
// after a step forward of ten years.
#[tokio::test]
async fn the_store_sweeps_once_per_interval_and_not_on_every_call_whatever_the_clock_does() {
    let fake = support::clock_at(12, 0, 0);
    let clock = HeldClock::new(fake.clone());
    let store = MemoryStore::with_clock(clock.clone());
    let calls = |n: u64| sweeps_in(&store, &clock, n);
    assert_eq!(calls(10_000).await, 0, "frozen: no sweep");
    fake.advance(Duration::from_secs(59));
    assert_eq!(calls(100).await, 0);
    fake.advance(Duration::from_secs(1));
    assert_eq!(calls(100).await, 1, "one sweep once a minute has passed");
    fake.set(fake.now_utc() - chrono::Duration::hours(1));
    assert_eq!(calls(100).await, 1, "one sweep right after the step back");
    fake.advance(Duration::from_secs(59));
    assert_eq!(calls(100).await, 0);
    fake.advance(Duration::from_secs(1));
    assert_eq!(calls(100).await, 1);
    fake.advance(Duration::from_secs(10 * 365 * 86_400));
    assert_eq!(calls(100).await, 1, "one sweep after ten years forward");
}

// A call reads the clock at +500 ms and is held (its thread preempted)
// while the clock reaches +1 s and another call runs the sweep that was
// due then. The held call then goes on. `with_sweep_interval` promises
// at most one sweep per interval of clock time, so the next sweep is due
// at +2 s: buckets whose window ended at +1.01 s are still counted at
// +1.5 s. The held call's stale reading makes it sweep again and puts the
// next sweep at +1.5 s, a second one within the same interval.
#[test]
fn a_call_that_read_the_clock_before_the_last_sweep_does_not_sweep_again() {
    let fake = support::clock_at(12, 0, 0);
    let clock = HeldClock::new(fake.clone());
    let limiter = InMemoryRateLimiter::with_clock(clock.clone());
    let cfg = per_ms(5, 10);
    fake.advance(Duration::from_millis(500));
    let held = clock.hold(
        || limiter.acquire_now("held", &cfg).unwrap(),
        || {
            fake.advance(Duration::from_millis(500));
            // The sweep due at +1 s runs in this call.
            limiter.acquire_now("due", &cfg).unwrap();
            for i in 0..100 {
                limiter.acquire_now(&format!("short:{i}"), &cfg).unwrap();
            }
            assert_eq!(limiter.bucket_count(), 101);
        },
    );
    assert!(held.allowed);
    assert_eq!(limiter.bucket_count(), 102);
    fake.advance(Duration::from_millis(500));
    limiter.acquire_now("later", &cfg).unwrap();
    assert_eq!(
        limiter.bucket_count(),
        103,
        "a sweep ran at +1.5 s, half an interval after the one at +1 s"
    );
}

// The same on the store (a sweep once a minute): a call reads the clock at
// +59 s and is held; the clock reaches +60 s, where another call runs the
// sweep that was due, and an entry of one second is put. At +61 s the held
// call goes on: no sweep is due before +120 s, yet it sweeps the whole
// store again, taking the expired entry that nobody read.
#[test]
fn a_call_that_read_the_clock_before_the_last_sweep_does_not_sweep_the_store_again() {
    let fake = support::clock_at(12, 0, 0);
    let clock = HeldClock::new(fake.clone());
    let store = MemoryStore::with_clock(clock.clone());
    fake.advance(Duration::from_secs(59));
    let reads_before = std::cell::Cell::new(0);
    let found = clock.hold(
        || block_on(store.get("held")).unwrap(),
        || {
            fake.advance(Duration::from_secs(1));
            block_on(store.get("due")).unwrap();
            block_on(store.put("one-second", "1", Duration::from_secs(1))).unwrap();
            fake.advance(Duration::from_secs(1));
            assert_eq!(store.len(), 1);
            reads_before.set(clock.reads());
        },
    );
    assert_eq!(found, None);
    // Its reading predates the sweep: it reads the clock once more, to act
    // at the time the key's lock is taken, and sweeps nothing (a sweep
    // reads it again, and takes the expired entry).
    assert_eq!(
        clock.reads(),
        reads_before.get() + 1,
        "the held call read the clock more than once again: it ran a sweep"
    );
    assert_eq!(store.len(), 1, "no sweep is due before +120 s");
}

// The clock at the last instant it holds (the year 2554): the limiter
// still admits, refuses with the wait and sweeps; the store still stores,
// expires and sweeps; nothing overflows.
#[tokio::test]
async fn at_the_clocks_last_instant_decisions_and_sweeps_still_work() {
    let clock = FakeClock::at_unix(u64::MAX / 1_000_000_000);
    clock.advance(Duration::MAX);
    let limiter =
        InMemoryRateLimiter::with_clock(clock.shared()).with_sweep_interval(Duration::ZERO);
    let cfg = per_ms(1, 1_000);
    assert!(limiter.acquire_now("k", &cfg).unwrap().allowed);
    let refused = limiter.acquire_now("k", &cfg).unwrap();
    assert!(!refused.allowed);
    assert!(refused.retry_after.unwrap() >= Duration::from_millis(999));
    limiter.sweep();
    assert_eq!(limiter.bucket_count(), 1);
    let store = MemoryStore::with_clock(clock.shared()).with_sweep_interval(Duration::ZERO);
    store.put("k", "v", Duration::from_secs(60)).await.unwrap();
    assert_eq!(store.get("k").await.unwrap().as_deref(), Some("v"));
    let cache_limiter = CacheRateLimiter::new(Arc::new(store), clock.shared());
    assert_eq!(cache_limiter.hit("h", 60).await.unwrap(), 1);
    assert_eq!(cache_limiter.attempts("h").await.unwrap(), 1);
}

// ---------------------------------------------------------------------------
// Keys of every shape in one shard
// ---------------------------------------------------------------------------

/// Keys that share their first bytes, differ in a zero byte or in their
/// last byte, are empty, or are not ASCII, inline in a slot or on the heap,
/// and one of a megabyte.
fn odd_keys() -> Vec<String> {
    let long = "x".repeat(1 << 20);
    vec![
        String::new(),
        "\0".to_owned(),
        "\0\0".to_owned(),
        "a".to_owned(),
        "a\0".to_owned(),
        "\0a".to_owned(),
        "é".to_owned(),
        "e\u{301}".to_owned(),
        "日本語のキー".to_owned(),
        "🔑".repeat(6),
        "🔑".repeat(7),
        "k".repeat(24),
        "k".repeat(25),
        format!("{}\0", "k".repeat(24)),
        "k".repeat(31) + "é",
        "k".repeat(33),
        long.clone(),
        format!("{long}\0"),
        format!("{}y", &long[1..]),
    ]
}

// Every odd key in the one shard of a limiter (2 per second each): each
// admits 2 and refuses the third with the whole wait, the others left
// alone; a sweep after the window drops them all, and each then admits
// its 2 again.
#[test]
fn odd_keys_in_one_shard_of_the_limiter_are_limited_apart_and_swept() {
    let clock = support::clock_at(12, 0, 0);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared())
        .with_shards(1)
        .with_sweep_interval(Duration::from_secs(3_600));
    let cfg = per_ms(2, 1_000);
    let keys = odd_keys();
    for round in 0..2 {
        for (i, key) in keys.iter().enumerate() {
            let first = limiter.acquire_now(key, &cfg).unwrap();
            assert_eq!(
                (first.allowed, first.remaining),
                (true, 1),
                "round {round}, key {i}"
            );
            assert!(limiter.acquire_now(key, &cfg).unwrap().allowed, "key {i}");
            let refused: Decision = limiter.acquire_now(key, &cfg).unwrap();
            assert!(!refused.allowed, "key {i}");
            assert_eq!(refused.retry_after, Some(Duration::from_secs(1)), "key {i}");
        }
        for (i, key) in keys.iter().enumerate() {
            assert!(!limiter.acquire_now(key, &cfg).unwrap().allowed, "key {i}");
            assert_eq!(
                limiter.retry_after_now(key, &cfg).unwrap(),
                Some(Duration::from_secs(1)),
                "key {i}"
            );
        }
        assert_eq!(limiter.bucket_count(), keys.len());
        clock.advance(Duration::from_secs(1));
        limiter.sweep();
        assert_eq!(limiter.bucket_count(), 0, "round {round}");
    }
}

// The same keys in the store: each holds its own value and time to live,
// counts apart, and is swept only when its own time is up.
#[tokio::test]
async fn odd_keys_in_the_store_are_kept_apart_and_swept_on_time() {
    let clock = support::clock_at(12, 0, 0);
    let store = MemoryStore::with_clock(clock.shared()).with_sweep_interval(Duration::ZERO);
    let keys = odd_keys();
    for (i, key) in keys.iter().enumerate() {
        store
            .put(key, &format!("v{i}"), Duration::from_secs(1 + i as u64))
            .await
            .unwrap();
    }
    for (i, key) in keys.iter().enumerate() {
        assert_eq!(
            store.get(key).await.unwrap(),
            Some(format!("v{i}")),
            "key {i}"
        );
        assert_eq!(
            store
                .increment(&format!("{key}:n"), i as i64 + 1)
                .await
                .unwrap(),
            i as i64 + 1
        );
    }
    assert_eq!(store.len(), 2 * keys.len());
    for (i, key) in keys.iter().enumerate() {
        clock.advance(Duration::from_secs(1));
        store.sweep();
        assert_eq!(store.get(key).await.unwrap(), None, "key {i}");
        if let Some(next) = keys.get(i + 1) {
            assert_eq!(store.get(next).await.unwrap(), Some(format!("v{}", i + 1)));
        }
        assert_eq!(store.len(), 2 * keys.len() - i - 1);
    }
}
