//! The in-memory driver when a call is held between its read of the clock
//! and its shard's lock (a thread preempted there) while other calls run
//! with a later time: the held call decides at a time no earlier than
//! theirs, so a hit it admits holds its place a whole window from then.

use std::cell::Cell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::time::Duration;

use suprnova::clock::Clock;
use suprnova::decision::Decision;
use suprnova::rate_limit::SlidingWindowConfig;
use suprnova::rate_limit::memory::InMemoryRateLimiter;

thread_local! {
    /// Set on a thread whose next clock read holds it right after reading.
    static HOLD_AFTER_NEXT_READ: Cell<bool> = const { Cell::new(false) };
}

/// A frozen clock whose next read on a marked thread holds that thread,
/// right after the read, until the test lets it go.
#[derive(Debug)]
struct GateClock {
    nanos: AtomicU64,
    gate: Mutex<Option<(mpsc::Sender<()>, mpsc::Receiver<()>)>>,
}

impl GateClock {
    fn at_ms(ms: u64) -> Arc<Self> {
        Arc::new(Self {
            nanos: AtomicU64::new(ms * 1_000_000),
            gate: Mutex::new(None),
        })
    }

    fn set_ms(&self, ms: u64) {
        self.nanos.store(ms * 1_000_000, Ordering::SeqCst);
    }
}

impl Clock for GateClock {
    fn now(&self) -> Duration {
        Duration::from_nanos(self.unix_nanos())
    }

    fn unix_nanos(&self) -> u64 {
        let nanos = self.nanos.load(Ordering::SeqCst);
        if HOLD_AFTER_NEXT_READ.with(|hold| hold.replace(false)) {
            let (read, go) = self.gate.lock().unwrap().take().unwrap();
            read.send(()).unwrap();
            go.recv().unwrap();
        }
        nanos
    }
}

const T0: u64 = 1_700_000_000_000;

/// One hit a second on `k`, hit at T0; then a call on `k` reads the clock
/// at T0 + 999 ms and is held while the clock moves to T0 + 1000 ms and
/// `meanwhile` runs. Returns the limiter, the clock and whether the held
/// call was admitted.
fn hold_a_call(
    sweep_interval: Duration,
    meanwhile: impl FnOnce(&InMemoryRateLimiter),
) -> (InMemoryRateLimiter, Arc<GateClock>, bool) {
    let clock = GateClock::at_ms(T0);
    let limiter =
        InMemoryRateLimiter::with_clock(clock.clone()).with_sweep_interval(sweep_interval);
    let config = SlidingWindowConfig::new(1, Duration::from_secs(1));
    assert!(limiter.acquire_now("k", &config).unwrap().allowed);
    let (read_tx, read_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    *clock.gate.lock().unwrap() = Some((read_tx, go_rx));
    clock.set_ms(T0 + 999);
    let admitted = std::thread::scope(|s| {
        let held = s.spawn(|| {
            HOLD_AFTER_NEXT_READ.with(|hold| hold.set(true));
            limiter.acquire_now("k", &config).unwrap().allowed
        });
        read_rx.recv().unwrap();
        clock.set_ms(T0 + 1_000);
        meanwhile(&limiter);
        go_tx.send(()).unwrap();
        held.join().unwrap()
    });
    (limiter, clock, admitted)
}

/// The held call was admitted at T0 + 1000 ms, when the first hit had left:
/// the next place frees a whole window later, at T0 + 2000 ms, not at
/// T0 + 1999 ms, where a hit stamped with the held call's stale time
/// would have left.
fn assert_the_held_hit_holds_a_whole_window(
    limiter: &InMemoryRateLimiter,
    clock: &GateClock,
    admitted: bool,
) {
    let config = SlidingWindowConfig::new(1, Duration::from_secs(1));
    assert!(admitted, "the first hit left the window at T0 + 1000 ms");
    clock.set_ms(T0 + 1_999);
    let early = limiter.acquire_now("k", &config).unwrap();
    assert!(!early.allowed, "two hits 999 ms apart under 1 a second");
    assert_eq!(early.retry_after, Some(Duration::from_millis(1)));
    clock.set_ms(T0 + 2_000);
    assert!(limiter.acquire_now("k", &config).unwrap().allowed);
}

#[test]
fn a_held_call_after_a_sweep_dropped_its_bucket_stamps_the_later_time() {
    let config = SlidingWindowConfig::new(1, Duration::from_secs(1));
    let (limiter, clock, admitted) = hold_a_call(Duration::from_secs(1), |limiter| {
        // A call on another key runs the sweep that is due, which drops
        // k's bucket: its only hit left at T0 + 1000 ms.
        assert!(limiter.acquire_now("other", &config).unwrap().allowed);
        assert_eq!(limiter.bucket_count(), 1);
    });
    assert_the_held_hit_holds_a_whole_window(&limiter, &clock, admitted);
}

#[test]
fn a_held_call_after_retry_after_dropped_its_bucket_stamps_the_later_time() {
    let config = SlidingWindowConfig::new(1, Duration::from_secs(1));
    let (limiter, clock, admitted) = hold_a_call(Duration::from_secs(3_600), |limiter| {
        assert_eq!(limiter.retry_after_now("k", &config).unwrap(), None);
        assert_eq!(limiter.bucket_count(), 0);
    });
    assert_the_held_hit_holds_a_whole_window(&limiter, &clock, admitted);
}

/// The control: where another call took the place meanwhile, the held call
/// is refused, with or without a second read of the clock.
#[test]
fn a_held_call_after_another_admission_is_refused() {
    let config = SlidingWindowConfig::new(1, Duration::from_secs(1));
    let (_, _, admitted) = hold_a_call(Duration::from_secs(3_600), |limiter| {
        assert!(limiter.acquire_now("k", &config).unwrap().allowed);
    });
    assert!(!admitted, "the place was taken at T0 + 1000 ms");
}

/// 2 per 10 s on `key`, a hit at T0. At T0 + 5 s a call reads the clock
/// and is held there; meanwhile the clock reads T0 + 6 s and another call
/// takes the last place and is refused. Returns the held call's decision,
/// once let go, and the other refusal.
fn held_while_the_key_fills(key: &str) -> (Decision, Decision) {
    let clock = GateClock::at_ms(T0);
    let limiter = InMemoryRateLimiter::with_clock(clock.clone()).with_sweep_interval(Duration::MAX);
    let config = SlidingWindowConfig::new(2, Duration::from_secs(10));
    assert!(limiter.acquire_now(key, &config).unwrap().allowed);
    clock.set_ms(T0 + 5_000);
    let (read_tx, read_rx) = mpsc::channel();
    let (go_tx, go_rx) = mpsc::channel();
    *clock.gate.lock().unwrap() = Some((read_tx, go_rx));
    std::thread::scope(|s| {
        let held = s.spawn(|| {
            HOLD_AFTER_NEXT_READ.with(|hold| hold.set(true));
            limiter.acquire_now(key, &config).unwrap()
        });
        read_rx.recv().unwrap();
        clock.set_ms(T0 + 6_000);
        assert!(limiter.acquire_now(key, &config).unwrap().allowed);
        let other = limiter.acquire_now(key, &config).unwrap();
        go_tx.send(()).unwrap();
        (held.join().unwrap(), other)
    })
}

/// The held call is refused, and told the reset the other call at 6 s is
/// told: the place frees at 10 s. A key too long to be noted full is
/// decided under its shard's lock, which reads the clock again, and says
/// 4 s; a short key, refused from its note without a second reading, says
/// the wait from the call's own reading at 5 s, as the docs say: longer by
/// the time the call was held, never shorter.
#[test]
fn a_call_held_before_a_full_keys_refusal_is_told_the_same_reset() {
    let long_key = "user:0123456789abcdef0123456789abcdef";
    for (key, wait) in [(long_key, 4), ("k", 5)] {
        let (held, other) = held_while_the_key_fills(key);
        assert!(!other.allowed);
        assert_eq!(other.retry_after, Some(Duration::from_secs(4)), "{key}");
        assert!(!held.allowed, "{key}");
        assert_eq!(held.reset_at, other.reset_at, "{key}");
        assert_eq!(held.retry_after, Some(Duration::from_secs(wait)), "{key}");
    }
}
