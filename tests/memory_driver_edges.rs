//! The in-memory sliding-window driver at its edges: threads started
//! together on hot and cold keys, sweeps running while keys are hit, window
//! boundaries to the nanosecond, extreme limits and windows, and every
//! field of every decision against a plain model of the sliding log.

mod support;

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use proptest::prelude::*;
use suprnova::clock::{Clock, FakeClock};
use suprnova::decision::Decision;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitError, SlidingWindowConfig};

const NANOS_PER_MILLI: u64 = 1_000_000;

fn per_ms(max_requests: u32, window_ms: u64) -> SlidingWindowConfig {
    SlidingWindowConfig::new(max_requests, Duration::from_millis(window_ms))
}

/// A limiter on a fake clock at 12:00:00, sweeping only when asked.
fn quiet_limiter() -> (FakeClock, InMemoryRateLimiter) {
    let clock = support::clock_at(12, 0, 0);
    let limiter =
        InMemoryRateLimiter::with_clock(clock.shared()).with_sweep_interval(Duration::MAX);
    (clock, limiter)
}

/// `work(thread)` on `count` threads released together by a barrier.
fn together<R: Send>(count: usize, work: impl Fn(usize) -> R + Sync) -> Vec<R> {
    let start = Barrier::new(count);
    std::thread::scope(|scope| {
        let (work, start) = (&work, &start);
        let threads: Vec<_> = (0..count)
            .map(|t| {
                scope.spawn(move || {
                    start.wait();
                    work(t)
                })
            })
            .collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

fn secs_up_from_ms(ms: u64) -> i64 {
    i64::try_from(ms.div_ceil(1_000)).unwrap()
}

// ---------------------------------------------------------------------------
// Threads racing on one key
// ---------------------------------------------------------------------------

// Eight threads released together, 60 windows in a row, a different limit
// each window: exactly the limit admitted, the admitted calls' places left
// are L-1 .. 0 each once, and every refusal carries the same wait and reset.
#[test]
fn threads_released_together_admit_exactly_the_limit_every_window() {
    let (clock, limiter) = quiet_limiter();
    for round in 0..60_u64 {
        let limit = [1_u32, 2, 3, 7, 64, 500][round as usize % 6];
        let cfg = per_ms(limit, 10_000);
        let start_ms = clock.unix_millis();
        let results = together(8, |_| {
            let mut seen = Vec::new();
            for _ in 0..200 {
                seen.push(limiter.acquire_now("hot", &cfg).unwrap());
            }
            seen
        });
        let decisions: Vec<Decision> = results.into_iter().flatten().collect();
        let mut remaining: Vec<u64> = decisions
            .iter()
            .filter(|d| d.allowed)
            .map(|d| d.remaining)
            .collect();
        remaining.sort_unstable();
        let expected: Vec<u64> = (0..u64::from(limit.min(1_600))).collect();
        assert_eq!(remaining, expected, "round {round}, limit {limit}");
        for d in decisions.iter().filter(|d| !d.allowed) {
            assert_eq!(
                d.retry_after,
                Some(Duration::from_secs(10)),
                "round {round}"
            );
            assert_eq!(d.reset_at, Some(secs_up_from_ms(start_ms + 10_000)));
            assert_eq!((d.limit, d.remaining), (u64::from(limit), 0));
        }
        // The whole window passes: every hit of this round leaves together.
        clock.advance(Duration::from_secs(10));
    }
}

// One hot key shared by every thread, while each thread also opens fresh
// cold keys in the same single shard (its table grows and is rehashed under
// the racing calls): the hot key admits exactly its limit, each cold key
// exactly its own, and the bucket count is exact.
#[test]
fn a_hot_key_stays_exact_while_cold_keys_grow_its_shard() {
    let clock = support::clock_at(12, 0, 0);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared())
        .with_shards(1)
        .with_sweep_interval(Duration::MAX);
    let hot = per_ms(50, 60_000);
    let cold = per_ms(2, 60_000);
    let results = together(6, |t| {
        let (mut hot_admitted, mut cold_admitted) = (0_u32, 0_u32);
        for i in 0..6_000 {
            hot_admitted += u32::from(limiter.acquire_now("hot", &hot).unwrap().allowed);
            // Each cold key is asked three times by its own thread.
            let key = format!("cold:{t}:{}", i / 3);
            cold_admitted += u32::from(limiter.acquire_now(&key, &cold).unwrap().allowed);
        }
        (hot_admitted, cold_admitted)
    });
    let hot_total: u32 = results.iter().map(|r| r.0).sum();
    let cold_total: u32 = results.iter().map(|r| r.1).sum();
    assert_eq!(hot_total, 50);
    assert_eq!(cold_total, 6 * 2_000 * 2);
    assert_eq!(limiter.bucket_count(), 1 + 6 * 2_000);
}

// The same cold keys asked by every thread at once (each key fresh to
// every thread in the same instant): each admits exactly its limit.
#[test]
fn fresh_keys_asked_by_every_thread_at_once_admit_exactly_their_limit() {
    let (_clock, limiter) = quiet_limiter();
    let cfg = per_ms(3, 60_000);
    let admitted = together(8, |_| {
        let mut admitted = vec![0_u32; 20_000];
        for (k, count) in admitted.iter_mut().enumerate() {
            let key = format!("ip:10.0.{}.{}", k / 256, k % 256);
            for _ in 0..2 {
                *count += u32::from(limiter.acquire_now(&key, &cfg).unwrap().allowed);
            }
        }
        admitted
    });
    for k in 0..20_000 {
        let total: u32 = admitted.iter().map(|a| a[k]).sum();
        assert_eq!(total, 3, "key {k}");
    }
}

// Threads on one key with two limits at once, 3 and 5 per window: the key
// ends with 5 hits, each refusal under 3 waits for the third-newest hit to
// leave and each under 5 for the oldest: the same window here.
#[test]
fn two_limits_racing_on_one_key_admit_up_to_the_higher() {
    let (clock, limiter) = quiet_limiter();
    for round in 0..50 {
        let start_ms = clock.unix_millis();
        let results = together(6, |t| {
            let cfg = if t % 2 == 0 {
                per_ms(3, 5_000)
            } else {
                per_ms(5, 5_000)
            };
            let mut admitted = 0_u32;
            for _ in 0..100 {
                let d = limiter.acquire_now("k", &cfg).unwrap();
                if d.allowed {
                    admitted += 1;
                } else {
                    assert_eq!(d.retry_after, Some(Duration::from_secs(5)));
                    assert_eq!(d.reset_at, Some(secs_up_from_ms(start_ms + 5_000)));
                }
            }
            admitted
        });
        assert_eq!(results.iter().sum::<u32>(), 5, "round {round}");
        clock.advance(Duration::from_secs(5));
    }
}

// `retry_after` calls (which forget a full key's note) racing with
// acquisitions on one key: exactly the limit admitted, and every wait
// reported by either is the one wait of the window.
#[test]
fn retry_after_racing_with_acquisitions_keeps_the_count_exact() {
    let (clock, limiter) = quiet_limiter();
    let cfg = per_ms(10, 1_000);
    for round in 0..100 {
        let results = together(6, |t| {
            let mut admitted = 0_u32;
            for _ in 0..300 {
                if t % 3 == 0 {
                    let wait = limiter.retry_after_now("k", &cfg).unwrap();
                    assert!(
                        wait.is_none() || wait == Some(Duration::from_secs(1)),
                        "{wait:?}"
                    );
                } else {
                    admitted += u32::from(limiter.acquire_now("k", &cfg).unwrap().allowed);
                }
            }
            admitted
        });
        assert_eq!(results.iter().sum::<u32>(), 10, "round {round}");
        clock.advance(Duration::from_secs(1));
    }
}

// ---------------------------------------------------------------------------
// Sweeps racing with hits
// ---------------------------------------------------------------------------

// A thread sweeps without a pause while others hit keys whose windows are
// about to end, at the end, and just past it: a full key is never dropped
// while it holds hits (it stays refused until the exact instant its oldest
// hit leaves), and then admits exactly its limit again.
#[test]
fn a_key_swept_while_it_is_hit_stays_full_until_its_hits_leave() {
    let (clock, limiter) = quiet_limiter();
    let cfg = per_ms(4, 1_000);
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        scope.spawn(|| {
            while !stop.load(Ordering::Relaxed) {
                limiter.sweep();
            }
        });
        for round in 0..200_u64 {
            // Fill the keys at the start of the window.
            for k in 0..8 {
                for _ in 0..4 {
                    assert!(limiter.acquire_now(&format!("k{k}"), &cfg).unwrap().allowed);
                }
            }
            // One nanosecond before the hits leave: every call refused
            // while the sweeper runs.
            clock.advance(Duration::from_millis(1_000) - Duration::from_nanos(1));
            let refused = together(4, |t| {
                let mut refused = 0;
                for i in 0..200 {
                    let d = limiter
                        .acquire_now(&format!("k{}", (i + t) % 8), &cfg)
                        .unwrap();
                    assert!(
                        !d.allowed,
                        "round {round}: admitted before the window ended"
                    );
                    assert_eq!(d.retry_after, Some(Duration::from_nanos(1)));
                    refused += 1;
                }
                refused
            });
            assert_eq!(refused.iter().sum::<u32>(), 800);
            // At the instant they leave: each key admits exactly 4.
            clock.advance(Duration::from_nanos(1));
            let admitted = together(4, |t| {
                let mut admitted = [0_u32; 8];
                for i in 0..200 {
                    let k = (i + t) % 8;
                    admitted[k] +=
                        u32::from(limiter.acquire_now(&format!("k{k}"), &cfg).unwrap().allowed);
                }
                admitted
            });
            for k in 0..8 {
                let total: u32 = admitted.iter().map(|a| a[k]).sum();
                assert_eq!(total, 4, "round {round}, key {k}");
            }
            // Past the window of those hits: the sweeper drops them all.
            clock.advance(Duration::from_secs(1));
        }
        stop.store(true, Ordering::Relaxed);
    });
    limiter.sweep();
    assert_eq!(limiter.bucket_count(), 0);
}

// Calls that each sweep (an interval of zero) on hot and cold keys while
// the clock moves on between windows: every window admits exactly the
// limit, and once every window is over nothing is left in memory.
#[test]
fn sweeping_on_every_call_over_many_windows_frees_everything_after() {
    let clock = support::clock_at(12, 0, 0);
    let limiter =
        InMemoryRateLimiter::with_clock(clock.shared()).with_sweep_interval(Duration::ZERO);
    let cfg = per_ms(3, 200);
    for round in 0..100 {
        let results = together(4, |t| {
            let mut hot = 0_u32;
            for i in 0..150 {
                hot += u32::from(limiter.acquire_now("hot", &cfg).unwrap().allowed);
                let cold = format!("r{round}:t{t}:{i}");
                assert!(limiter.acquire_now(&cold, &cfg).unwrap().allowed);
            }
            hot
        });
        assert_eq!(results.iter().sum::<u32>(), 3, "round {round}");
        clock.advance(Duration::from_millis(200));
    }
    limiter.acquire_now("last", &cfg).unwrap();
    assert_eq!(limiter.bucket_count(), 1);
}

// More refused keys in one shard than its notes hold (65,520): the keys
// past that count are decided under the lock, exactly; two threads over
// all of them admit each key's limit, and refuse with the exact wait.
#[test]
fn more_refused_keys_than_a_shard_notes_stay_exact() {
    let (clock, limiter) = quiet_limiter();
    let limiter = limiter.with_shards(1);
    let cfg = per_ms(1, 60_000);
    let keys = 70_000;
    for k in 0..keys {
        let key = format!("user:{k}");
        assert!(limiter.acquire_now(&key, &cfg).unwrap().allowed);
        assert!(!limiter.acquire_now(&key, &cfg).unwrap().allowed);
    }
    clock.advance(Duration::from_secs(30));
    let refused = together(2, |t| {
        let mut refused = 0;
        for k in 0..keys {
            let k = if t == 0 { k } else { keys - 1 - k };
            let d = limiter.acquire_now(&format!("user:{k}"), &cfg).unwrap();
            assert!(!d.allowed, "user:{k}");
            assert_eq!(d.retry_after, Some(Duration::from_secs(30)), "user:{k}");
            refused += 1;
        }
        refused
    });
    assert_eq!(refused.iter().sum::<usize>(), 2 * keys);
    clock.advance(Duration::from_secs(30));
    let admitted = together(2, |_| {
        (0..keys)
            .filter(|k| {
                limiter
                    .acquire_now(&format!("user:{k}"), &cfg)
                    .unwrap()
                    .allowed
            })
            .count()
    });
    assert_eq!(admitted.iter().sum::<usize>(), keys);
    clock.advance(Duration::from_secs(60));
    limiter.sweep();
    assert_eq!(limiter.bucket_count(), 0);
    // The notes freed by the sweep take new keys: still exact.
    for k in 0..keys {
        let key = format!("next:{k}");
        assert!(limiter.acquire_now(&key, &cfg).unwrap().allowed);
        let d = limiter.acquire_now(&key, &cfg).unwrap();
        assert_eq!(d.retry_after, Some(Duration::from_secs(60)), "{key}");
    }
}

// Keys a note cannot tell apart by a prefix: one byte longer, a trailing
// zero byte, 32 and 33 bytes, the empty key. A full key refuses; each of
// the others still has its places.
#[test]
fn keys_that_differ_only_at_their_end_are_limited_apart() {
    let (_clock, limiter) = quiet_limiter();
    let cfg = per_ms(1, 60_000);
    let k32 = "k".repeat(32);
    let k33 = "k".repeat(33);
    let keys = [
        "a".to_owned(),
        "a\0".to_owned(),
        "a\0\0".to_owned(),
        String::new(),
        "\0".to_owned(),
        k32.clone(),
        k33.clone(),
        format!("{}j", &k32[..31]),
        format!("{k32}\0"),
    ];
    for key in &keys {
        assert!(limiter.acquire_now(key, &cfg).unwrap().allowed, "{key:?}");
        assert!(!limiter.acquire_now(key, &cfg).unwrap().allowed, "{key:?}");
    }
    for key in &keys {
        assert!(!limiter.acquire_now(key, &cfg).unwrap().allowed, "{key:?}");
    }
    assert_eq!(limiter.bucket_count(), keys.len());
}

// ---------------------------------------------------------------------------
// Window boundaries and extreme values
// ---------------------------------------------------------------------------

// A hit at t (whole milliseconds): at t + window - 1 ns still refused, with
// a wait of 1 ns (Retry-After 1 s) and a reset at the end of the window; at
// t + window admitted. `retry_after` says the same at each point.
#[test]
fn a_hit_holds_its_place_until_exactly_one_window_later() {
    for window_ms in [1_u64, 2, 999, 1_000, 1_001, 60_000, 86_400_000] {
        let (clock, limiter) = quiet_limiter();
        let cfg = per_ms(1, window_ms);
        let t = clock.unix_millis();
        assert!(limiter.acquire_now("k", &cfg).unwrap().allowed);
        clock.advance(Duration::from_millis(window_ms) - Duration::from_nanos(1));
        assert_eq!(
            limiter.retry_after_now("k", &cfg).unwrap(),
            Some(Duration::from_nanos(1)),
            "window {window_ms} ms"
        );
        let refused = limiter.acquire_now("k", &cfg).unwrap();
        assert!(!refused.allowed);
        assert_eq!(refused.retry_after, Some(Duration::from_nanos(1)));
        assert_eq!(refused.retry_after_secs(), Some(1));
        assert_eq!(refused.reset_at, Some(secs_up_from_ms(t + window_ms)));
        clock.advance(Duration::from_nanos(1));
        assert_eq!(limiter.retry_after_now("k", &cfg).unwrap(), None);
        let admitted = limiter.acquire_now("k", &cfg).unwrap();
        assert!(admitted.allowed, "window {window_ms} ms");
        assert_eq!(admitted.remaining, 0);
    }
}

#[test]
fn a_window_under_a_millisecond_is_refused_with_its_message() {
    let (_clock, limiter) = quiet_limiter();
    for (window, shown) in [
        (Duration::ZERO, "0ns"),
        (Duration::from_nanos(1), "1ns"),
        (Duration::from_nanos(999_999), "999.999µs"),
    ] {
        let err = limiter
            .acquire_now("k", &per_ms(5, 0).with(window))
            .unwrap_err();
        assert!(matches!(err, RateLimitError::Config(_)));
        assert_eq!(
            err.to_string(),
            format!(
                "invalid rate limit configuration: the window must be at least 1 ms, got {shown}"
            )
        );
        let err = limiter
            .retry_after_now("k", &per_ms(5, 0).with(window))
            .unwrap_err();
        assert!(matches!(err, RateLimitError::Config(_)));
    }
    assert_eq!(limiter.bucket_count(), 0);
}

trait WithWindow {
    fn with(self, window: Duration) -> Self;
}

impl WithWindow for SlidingWindowConfig {
    fn with(mut self, window: Duration) -> Self {
        self.window = window;
        self
    }
}

// A window of 1 ms and 1 ns is held for 2 ms: rounded up, never down.
#[test]
fn a_window_just_over_a_millisecond_is_rounded_up() {
    let (clock, limiter) = quiet_limiter();
    let cfg = per_ms(1, 0).with(Duration::from_nanos(1_000_001));
    assert!(limiter.acquire_now("k", &cfg).unwrap().allowed);
    clock.advance(Duration::from_millis(1));
    let refused = limiter.acquire_now("k", &cfg).unwrap();
    assert_eq!(refused.retry_after, Some(Duration::from_millis(1)));
    clock.advance(Duration::from_millis(1));
    assert!(limiter.acquire_now("k", &cfg).unwrap().allowed);
}

#[test]
fn a_limit_of_zero_refuses_with_a_wait_of_one_window_and_records_nothing() {
    let (clock, limiter) = quiet_limiter();
    clock.advance(Duration::from_millis(500));
    let now_ms = clock.unix_millis();
    let cfg = per_ms(0, 60_000);
    for _ in 0..3 {
        let d = limiter.acquire_now("k", &cfg).unwrap();
        assert!(!d.allowed);
        assert_eq!((d.limit, d.remaining), (0, 0));
        assert_eq!(d.retry_after, Some(Duration::from_secs(60)));
        assert_eq!(d.reset_at, Some(secs_up_from_ms(now_ms + 60_000)));
    }
    assert_eq!(
        limiter.retry_after_now("k", &cfg).unwrap(),
        Some(Duration::from_secs(60))
    );
    assert_eq!(limiter.bucket_count(), 0);
}

#[test]
fn the_highest_limit_counts_down_from_its_top() {
    let (clock, limiter) = quiet_limiter();
    let cfg = per_ms(u32::MAX, 60_000);
    for i in 1..=1_000_u64 {
        let d = limiter.acquire_now("k", &cfg).unwrap();
        assert!(d.allowed);
        assert_eq!(d.limit, u64::from(u32::MAX));
        assert_eq!(d.remaining, u64::from(u32::MAX) - i);
    }
    assert_eq!(limiter.retry_after_now("k", &cfg).unwrap(), None);
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        limiter.acquire_now("k", &cfg).unwrap().remaining,
        u64::from(u32::MAX) - 1
    );
}

// The longest windows: `Duration::MAX`, and one of 100 years. A full key
// is refused for the rest of the window, with a wait and reset that do not
// overflow, even at the last instant the clock holds; the sweep keeps it.
#[test]
fn the_longest_windows_refuse_without_overflow() {
    let year = Duration::from_secs(365 * 86_400);
    for window in [
        Duration::MAX,
        year * 100,
        Duration::from_secs(u64::MAX / 1_000),
    ] {
        let (clock, limiter) = quiet_limiter();
        let cfg = per_ms(2, 0).with(window);
        let now = Duration::from_nanos(clock.unix_nanos());
        let stamp_ms = clock.unix_millis();
        assert_eq!(limiter.acquire_now("k", &cfg).unwrap().remaining, 1);
        assert_eq!(limiter.acquire_now("k", &cfg).unwrap().remaining, 0);
        let refused = limiter.acquire_now("k", &cfg).unwrap();
        assert!(!refused.allowed);
        let window_ms = u64::try_from(window.as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(u64::from(window.subsec_nanos() % 1_000_000 > 0));
        let frees_ms = stamp_ms.saturating_add(window_ms);
        let expected = Duration::from_millis(frees_ms) - now;
        assert_eq!(refused.retry_after, Some(expected), "{window:?}");
        assert_eq!(refused.reset_at, Some(secs_up_from_ms(frees_ms)));
        clock.advance(year * 50);
        limiter.sweep();
        assert_eq!(limiter.bucket_count(), 1, "{window:?}");
        assert!(!limiter.acquire_now("k", &cfg).unwrap().allowed);
        // The last instant the clock holds.
        clock.advance(Duration::MAX);
        let late = limiter.acquire_now("k", &cfg).unwrap();
        if window == year * 100 {
            assert!(late.allowed);
        } else {
            assert!(!late.allowed, "{window:?}");
        }
    }
}

// A window of 30 days, longer than the sweep keeps to the millisecond: the
// sweep keeps the bucket to the end of the window, and drops it after.
#[test]
fn a_window_of_thirty_days_is_swept_only_once_it_ends() {
    let (clock, limiter) = quiet_limiter();
    let day = Duration::from_secs(86_400);
    let cfg = per_ms(1, 0).with(day * 30 + Duration::from_millis(1));
    assert!(limiter.acquire_now("k", &cfg).unwrap().allowed);
    clock.advance(day * 30);
    limiter.sweep();
    assert_eq!(limiter.bucket_count(), 1);
    let refused = limiter.acquire_now("k", &cfg).unwrap();
    assert_eq!(refused.retry_after, Some(Duration::from_millis(1)));
    clock.advance(Duration::from_secs(2));
    limiter.sweep();
    assert_eq!(limiter.bucket_count(), 0);
}

// ---------------------------------------------------------------------------
// Every field against a plain model
// ---------------------------------------------------------------------------

/// The sliding log written plainly: every admitted time, in milliseconds,
/// stamped with the clock rounded up and evicted against it rounded down;
/// the window of the last call on a key kept for the sweep.
#[derive(Default)]
struct Model {
    keys: HashMap<u8, (Vec<u64>, u64)>,
}

impl Model {
    fn window_ms(window: Duration) -> u64 {
        window.as_secs() * 1_000 + u64::from(window.subsec_nanos().div_ceil(1_000_000))
    }

    fn acquire(&mut self, key: u8, now: u64, cfg: &SlidingWindowConfig) -> Decision {
        let max = cfg.max_requests;
        if max == 0 {
            return Decision::refused_under_zero(cfg.window, now);
        }
        let w = Self::window_ms(cfg.window);
        let (now_ms, stamp) = (now / NANOS_PER_MILLI, now.div_ceil(NANOS_PER_MILLI));
        let (hits, last) = self.keys.entry(key).or_default();
        hits.retain(|&t| t + w > now_ms);
        *last = w;
        let count = hits.len() as u32;
        if count < max {
            hits.push(stamp);
            Decision::allowed(u64::from(max), u64::from(max - count - 1))
                .with_reset_at(secs_up_from_ms(hits[0] + w))
        } else {
            let frees = hits[(count - max) as usize] + w;
            Decision::refused(
                u64::from(max),
                Duration::from_nanos((frees * NANOS_PER_MILLI).saturating_sub(now)),
            )
            .with_reset_at(secs_up_from_ms(frees))
        }
    }

    fn retry_after(&mut self, key: u8, now: u64, cfg: &SlidingWindowConfig) -> Option<Duration> {
        let max = cfg.max_requests;
        if max == 0 {
            return Some(cfg.window);
        }
        let w = Self::window_ms(cfg.window);
        let (hits, last) = self.keys.get_mut(&key)?;
        hits.retain(|&t| t + w > now / NANOS_PER_MILLI);
        *last = w;
        if hits.is_empty() {
            self.keys.remove(&key);
            return None;
        }
        let count = hits.len() as u32;
        (count >= max).then(|| {
            let frees = hits[(count - max) as usize] + w;
            Duration::from_nanos((frees * NANOS_PER_MILLI).saturating_sub(now))
        })
    }

    fn sweep(&mut self, now: u64) {
        let now_ms = now / NANOS_PER_MILLI;
        self.keys.retain(|_, (hits, w)| {
            hits.retain(|&t| t + *w > now_ms);
            !hits.is_empty()
        });
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    // Times anywhere inside a millisecond, a limit and a window that change
    // from call to call, `retry_after` and sweeps between the calls: every
    // field of every decision, every wait, and the count of buckets are the
    // model's.
    #[test]
    fn every_field_agrees_with_the_plain_model(
        steps in proptest::collection::vec(
            (0_u64..2_500_000_000, 0_u8..3, 0_u32..5, 1_u64..3_000_000_000, 0_u8..10),
            1..150,
        ),
    ) {
        let (clock, limiter) = quiet_limiter();
        let mut model = Model::default();
        for (advance, key, max, window_ns, op) in steps {
            clock.advance(Duration::from_nanos(advance));
            let now = clock.unix_nanos();
            let cfg = SlidingWindowConfig::new(max, Duration::from_nanos(window_ns.max(1_000_000)));
            let name = format!("key:{key}");
            match op {
                0 => {
                    limiter.sweep();
                    model.sweep(now);
                }
                1 | 2 => {
                    let got = limiter.retry_after_now(&name, &cfg).unwrap();
                    prop_assert_eq!(got, model.retry_after(key, now, &cfg));
                }
                _ => {
                    let got = limiter.acquire_now(&name, &cfg).unwrap();
                    prop_assert_eq!(got, model.acquire(key, now, &cfg), "op at {}", now);
                }
            }
            prop_assert_eq!(limiter.bucket_count(), model.keys.len());
        }
    }
}

// ---------------------------------------------------------------------------
// The clock stepped, with threads on the key
// ---------------------------------------------------------------------------

// Threads hammer one full key while the clock is stepped back and forward
// between rounds by up to two windows: no refusal ever waits longer than a
// window, and in each round, on its frozen clock, no more than the limit is
// admitted.
#[test]
fn steps_of_the_clock_between_rounds_never_admit_more_than_the_limit_in_one() {
    let (clock, limiter) = quiet_limiter();
    let cfg = per_ms(5, 10_000);
    let base = clock.unix_nanos();
    let mut offset: i64 = 0;
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    for round in 0..300 {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        offset += (state % 40_001) as i64 * 1_000_000 - 20_000_000_000;
        offset = offset.max(-3_600_000_000_000);
        let now = (base as i64 + offset) as u64;
        clock.set(chrono::DateTime::from_timestamp_nanos(now as i64));
        let admitted = together(4, |_| {
            let mut admitted = 0;
            for _ in 0..20 {
                let d = limiter.acquire_now("k", &cfg).unwrap();
                if d.allowed {
                    admitted += 1;
                } else {
                    let wait = d.retry_after.unwrap();
                    assert!(wait <= cfg.window, "round {round}: waits {wait:?}");
                    assert!(wait > Duration::ZERO, "round {round}");
                }
            }
            admitted
        });
        assert!(admitted.iter().sum::<u32>() <= 5, "round {round}");
    }
}

// ---------------------------------------------------------------------------
// The fixed window of the facade over the memory store, at its edges
// ---------------------------------------------------------------------------

// Eight tasks on worker threads released together at the instant the last
// window ended (timer and counter expire at that very instant), 40 windows
// in a row, some opening part-way through a second: each window counts
// exactly the limit, its count reads the limit, and it ends a whole decay
// after the call that opened it.
#[test]
fn the_fixed_window_counts_exactly_its_limit_from_the_instant_it_opens() {
    use suprnova::cache::MemoryStore;
    use suprnova::limiter::CacheRateLimiter;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(8)
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let clock = support::clock_at(12, 0, 0);
        let limiter = Arc::new(CacheRateLimiter::new(
            Arc::new(MemoryStore::with_clock(clock.shared())),
            clock.shared(),
        ));
        for round in 0..40_u64 {
            let limit = 1 + (round % 7) as i64 * 3;
            let start = Arc::new(tokio::sync::Barrier::new(8));
            let tasks: Vec<_> = (0..8)
                .map(|_| {
                    let (limiter, start) = (limiter.clone(), start.clone());
                    tokio::spawn(async move {
                        start.wait().await;
                        let mut counted = 0;
                        for _ in 0..30 {
                            let outcome =
                                limiter.increment_if_below("k", 10, 1, limit).await.unwrap();
                            counted += i64::from(outcome.counted);
                            assert!(outcome.count <= limit);
                        }
                        counted
                    })
                })
                .collect();
            let mut counted = 0;
            for task in tasks {
                counted += task.await.unwrap();
            }
            assert_eq!(counted, limit, "round {round}");
            assert_eq!(limiter.attempts("k").await.unwrap(), limit);
            assert!(limiter.too_many_attempts("k", limit).await.unwrap());
            assert_eq!(limiter.available_in("k").await.unwrap(), 10);
            // One nanosecond before the window ends: still full.
            clock.advance(Duration::from_secs(10) - Duration::from_nanos(1));
            assert!(
                !limiter
                    .increment_if_below("k", 10, 1, limit)
                    .await
                    .unwrap()
                    .counted,
                "round {round}"
            );
            clock.advance(Duration::from_nanos(1));
            // Every other window opens part-way through a second.
            if round % 2 == 0 {
                clock.advance(Duration::from_millis(500));
            }
        }
    });
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    // Buckets of up to 300 hits, gaps around the longest a two-byte word
    // holds (65,535 ms and either side), windows of up to 200 s, sweeps that
    // trim a bucket and give back its room between calls: every decision is
    // the model's.
    #[test]
    fn long_gaps_and_large_buckets_agree_with_the_plain_model(
        max in 1_u32..300,
        steps in proptest::collection::vec(
            (
                prop_oneof![
                    Just(0_u64),
                    1_u64..50,
                    Just(65_534),
                    Just(65_535),
                    Just(65_536),
                    65_000_u64..140_000,
                ],
                0_u8..2,
                prop_oneof![Just(65_535_u64), Just(65_536), 1_u64..200_000],
                0_u8..12,
            ),
            1..400,
        ),
    ) {
        let (clock, limiter) = quiet_limiter();
        let mut model = Model::default();
        for (advance_ms, key, window_ms, op) in steps {
            clock.advance(Duration::from_millis(advance_ms));
            let now = clock.unix_nanos();
            let cfg = per_ms(max, window_ms);
            let name = format!("key:{key}");
            if op == 0 {
                limiter.sweep();
                model.sweep(now);
            } else {
                // A run of calls at one instant, as a burst sends them.
                for _ in 0..(op as usize * 7) {
                    let got = limiter.acquire_now(&name, &cfg).unwrap();
                    prop_assert_eq!(got, model.acquire(key, now, &cfg));
                }
            }
            prop_assert_eq!(limiter.bucket_count(), model.keys.len());
        }
    }
}

// Four threads hammer one key while a fifth moves the clock a millisecond
// at a time through 2 s: 5 per 50 ms admits no more than 5 in each of the
// 40 windows the run spans, plus the 5 of the window it ends in.
#[test]
fn threads_on_a_moving_clock_never_admit_more_than_the_windows_hold() {
    let (clock, limiter) = quiet_limiter();
    let cfg = per_ms(5, 50);
    let done = AtomicBool::new(false);
    let admitted = std::thread::scope(|s| {
        let hammers: Vec<_> = (0..4)
            .map(|_| {
                s.spawn(|| {
                    let mut admitted = 0_u32;
                    while !done.load(Ordering::Relaxed) {
                        admitted += u32::from(limiter.acquire_now("k", &cfg).unwrap().allowed);
                    }
                    admitted
                })
            })
            .collect();
        for _ in 0..2_000 {
            clock.advance(Duration::from_millis(1));
            std::thread::yield_now();
        }
        done.store(true, Ordering::Relaxed);
        hammers.into_iter().map(|h| h.join().unwrap()).sum::<u32>()
    });
    assert!(admitted <= 5 * 41, "{admitted} admitted");
}

// The fixed window with the store swept on every call and by a thread of
// its own, while tasks race at the instant each window ends: every window
// counts exactly its limit, on hot and on fresh keys.
#[test]
fn the_fixed_window_stays_exact_while_the_store_is_swept() {
    use suprnova::cache::MemoryStore;
    use suprnova::limiter::CacheRateLimiter;

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(6)
        .enable_all()
        .build()
        .unwrap();
    let clock = support::clock_at(12, 0, 0);
    let store =
        Arc::new(MemoryStore::with_clock(clock.shared()).with_sweep_interval(Duration::ZERO));
    let limiter = Arc::new(CacheRateLimiter::new(store.clone(), clock.shared()));
    let stop = Arc::new(AtomicBool::new(false));
    let sweeper = {
        let (store, stop) = (store.clone(), stop.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                store.sweep();
            }
        })
    };
    runtime.block_on(async {
        for round in 0..60_u64 {
            let start = Arc::new(tokio::sync::Barrier::new(6));
            let tasks: Vec<_> = (0..6)
                .map(|t| {
                    let (limiter, start) = (limiter.clone(), start.clone());
                    tokio::spawn(async move {
                        start.wait().await;
                        let (mut hot, mut cold) = (0, 0);
                        for i in 0..40 {
                            hot += i64::from(
                                limiter
                                    .increment_if_below("hot", 2, 1, 7)
                                    .await
                                    .unwrap()
                                    .counted,
                            );
                            let key = format!("cold:{round}:{}", (i + t) % 10);
                            cold += i64::from(
                                limiter
                                    .increment_if_below(&key, 2, 1, 3)
                                    .await
                                    .unwrap()
                                    .counted,
                            );
                        }
                        (hot, cold)
                    })
                })
                .collect();
            let (mut hot, mut cold) = (0, 0);
            for task in tasks {
                let (h, c) = task.await.unwrap();
                hot += h;
                cold += c;
            }
            assert_eq!((hot, cold), (7, 30), "round {round}");
            clock.advance(Duration::from_secs(2));
        }
    });
    stop.store(true, Ordering::Relaxed);
    sweeper.join().unwrap();
}
