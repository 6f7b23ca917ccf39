//! The in-memory sliding-window driver at more of its edges: the longest
//! windows a configuration takes, a key's limit or window changed between
//! calls, keys that a refusal notes beside keys it cannot note, and the
//! clock moved far or back.

mod support;

use std::collections::HashMap;
use std::time::Duration;

use suprnova::clock::{Clock, FakeClock};
use suprnova::decision::Decision;
use suprnova::rate_limit::SlidingWindowConfig;
use suprnova::rate_limit::memory::InMemoryRateLimiter;

/// A limiter on a fake clock at 12:00:00, sweeping only when asked.
fn quiet_limiter() -> (FakeClock, InMemoryRateLimiter) {
    let clock = support::clock_at(12, 0, 0);
    let limiter =
        InMemoryRateLimiter::with_clock(clock.shared()).with_sweep_interval(Duration::MAX);
    (clock, limiter)
}

/// A key of more than 32 bytes: refusals on it are always decided under
/// the shard's lock, never read from a note, so it shows what the lock
/// decides.
fn long_key(short: &str) -> String {
    format!("{short}:{}", "x".repeat(40))
}

/// The windows of a few hundred million years and more that a
/// configuration accepts (anything of a millisecond or more is valid).
fn longest_windows() -> [Duration; 3] {
    [
        Duration::MAX,
        Duration::from_secs(u64::MAX / 1_000),
        Duration::from_millis(u64::MAX),
    ]
}

// Limit 2 over the longest windows: hits at 0 s and 10 s, a refusal (which
// notes the key as full), then `retry_after` asked under a 5 s window at
// 12 s trims the hit of 0 s and forgets the note. The key holds one hit:
// under 2 per the longest window it has a place, and the next call is
// admitted, as it is on a key too long to be noted (a forgotten note frees
// at 0, which a window this long once took for a place freeing within it).
#[test]
fn a_key_with_room_under_the_longest_window_is_admitted_after_its_note_is_forgotten() {
    for window in longest_windows() {
        let (clock, limiter) = quiet_limiter();
        let long = SlidingWindowConfig::new(2, window);
        let short = SlidingWindowConfig::new(2, Duration::from_secs(5));
        let mut answers = Vec::new();
        for key in ["user:1".to_owned(), long_key("user:1")] {
            let start = clock.unix_nanos();
            let at = |secs: u64| {
                clock.set(chrono::DateTime::from_timestamp_nanos(
                    (start + secs * 1_000_000_000) as i64,
                ))
            };
            at(0);
            assert!(limiter.acquire_now(&key, &long).unwrap().allowed);
            at(10);
            assert!(limiter.acquire_now(&key, &long).unwrap().allowed);
            assert!(!limiter.acquire_now(&key, &long).unwrap().allowed);
            at(12);
            assert_eq!(limiter.retry_after_now(&key, &short).unwrap(), None);
            let next = limiter.acquire_now(&key, &long).unwrap();
            answers.push(next);
            clock.set(chrono::DateTime::from_timestamp_nanos(start as i64));
        }
        let (noted, unnoted) = (answers[0], answers[1]);
        assert!(unnoted.allowed, "{window:?}: {unnoted:?}");
        assert_eq!(unnoted.remaining, 0);
        assert!(
            noted.allowed,
            "{window:?}: the key holds one hit of 2 and is refused: {noted:?}"
        );
    }
}

// Limit 2 over the longest windows, full and refused (noted); a call under
// limit 3 is admitted and forgets the note; a call under limit 2 again is
// refused, and its one place frees only when a hit leaves a window of some
// hundreds of million years: the wait is that long, and the reset that far
// away, as the lock says on a key too long to be noted (read from the
// forgotten note, it once said a wait of 0 and a reset in 1970).
#[test]
fn a_full_key_under_the_longest_window_is_not_told_to_retry_at_once_after_its_note_is_forgotten() {
    for window in longest_windows() {
        let (_clock, limiter) = quiet_limiter();
        let two = SlidingWindowConfig::new(2, window);
        let three = SlidingWindowConfig::new(3, window);
        let mut refusals = Vec::new();
        for key in ["user:2".to_owned(), long_key("user:2")] {
            assert!(limiter.acquire_now(&key, &two).unwrap().allowed);
            assert!(limiter.acquire_now(&key, &two).unwrap().allowed);
            assert!(!limiter.acquire_now(&key, &two).unwrap().allowed);
            assert!(limiter.acquire_now(&key, &three).unwrap().allowed);
            refusals.push(limiter.acquire_now(&key, &two).unwrap());
        }
        let (noted, unnoted) = (refusals[0], refusals[1]);
        assert!(!unnoted.allowed);
        let year = Duration::from_secs(365 * 86_400);
        assert!(
            unnoted.retry_after.unwrap() > year * 1_000_000,
            "{unnoted:?}"
        );
        assert!(!noted.allowed);
        assert_eq!(
            (noted.retry_after, noted.reset_at),
            (unnoted.retry_after, unnoted.reset_at),
            "{window:?}: noted {noted:?} against the lock's {unnoted:?}"
        );
    }
}

// Keys of up to 32 bytes are refused from their notes, longer ones under
// the lock; with the limit and the window both changing from call to call
// (windows from 1 ms to 100 years), the clock moving by up to a few
// years, `retry_after` and sweeps between the calls, both decide alike.
#[test]
fn noted_and_unnoted_keys_decide_alike_when_limit_and_window_both_change() {
    let (clock, limiter) = quiet_limiter();
    let mut state = 0x2545_f491_4f6c_dd1d_u64;
    let mut next = |below: u64| {
        state ^= state << 13;
        state ^= state >> 7;
        state ^= state << 17;
        state % below
    };
    let year = 365 * 86_400 * 1_000_000_000_u64;
    for step in 0..60_000 {
        let advance = match next(6) {
            0 => 0,
            1 => next(1_000_000),
            2 => next(50_000_000),
            3 => next(2_000_000_000),
            4 => next(40 * 86_400 * 1_000_000_000),
            _ => {
                if next(100) == 0 {
                    next(3 * year)
                } else {
                    0
                }
            }
        };
        clock.advance(Duration::from_nanos(advance));
        let k = next(3);
        let short_key = format!("k{k}");
        let long_key = long_key(&short_key);
        let max = [1, 2, 3, 5][next(4) as usize];
        let window = [
            Duration::from_millis(1),
            Duration::from_millis(7),
            Duration::from_secs(1),
            Duration::from_secs(30 * 86_400) + Duration::from_millis(1),
            Duration::from_secs(100 * 365 * 86_400),
        ][next(5) as usize];
        let cfg = SlidingWindowConfig::new(max, window);
        if next(50) == 0 {
            limiter.sweep();
        }
        if next(10) == 0 {
            let a = limiter.retry_after_now(&short_key, &cfg).unwrap();
            let b = limiter.retry_after_now(&long_key, &cfg).unwrap();
            assert_eq!(a, b, "retry_after at step {step}");
        } else {
            let a = limiter.acquire_now(&short_key, &cfg).unwrap();
            let b = limiter.acquire_now(&long_key, &cfg).unwrap();
            assert_eq!(a, b, "acquire at step {step} under {cfg:?}");
        }
    }
}

// ---------------------------------------------------------------------------
// Against a plain model: long windows, far jumps and steps back
// ---------------------------------------------------------------------------

const NANOS_PER_MILLI: u64 = 1_000_000;

fn window_ms(window: Duration) -> u64 {
    window
        .as_secs()
        .saturating_mul(1_000)
        .saturating_add(u64::from(window.subsec_nanos().div_ceil(1_000_000)))
}

/// The time from `now` (Unix nanoseconds) until `at_ms`.
fn until(at_ms: u64, now: u64) -> Duration {
    Duration::from_millis(at_ms).saturating_sub(Duration::from_nanos(now))
}

fn secs_up_from_ms(ms: u64) -> i64 {
    i64::try_from(ms.div_ceil(1_000)).unwrap_or(i64::MAX)
}

/// The window the sweep reads back for a call's window: exact up to
/// 2^31 ms, whole seconds rounded up above, and no end past about 68
/// years.
fn swept_window_ms(window_ms: u64) -> u64 {
    const SECONDS: u64 = (1 << 31) - 1;
    if window_ms < 1 << 31 {
        window_ms
    } else if window_ms.div_ceil(1_000) >= SECONDS {
        u64::MAX
    } else {
        window_ms.div_ceil(1_000) * 1_000
    }
}

/// The sliding log written plainly, with the documented step back: when a
/// key's newest hit is later than the call's stamp, every hit moves back
/// by the same amount so that the newest is the stamp (the oldest no
/// earlier than 0).
#[derive(Default)]
struct Model {
    keys: HashMap<u64, (Vec<u64>, u64)>,
}

impl Model {
    fn catch_up(hits: &mut [u64], stamp: u64) {
        if let (Some(&oldest), Some(&newest)) = (hits.first(), hits.last())
            && newest > stamp
        {
            let moved = oldest - stamp.saturating_sub(newest - oldest);
            hits.iter_mut().for_each(|hit| *hit -= moved);
        }
    }

    fn acquire(&mut self, key: u64, now: u64, cfg: &SlidingWindowConfig) -> Decision {
        let max = cfg.max_requests;
        if max == 0 {
            return Decision::refused_under_zero(cfg.window, now);
        }
        let w = window_ms(cfg.window);
        let (now_ms, stamp) = (now / NANOS_PER_MILLI, now.div_ceil(NANOS_PER_MILLI));
        let (hits, last) = self.keys.entry(key).or_default();
        *last = w;
        Self::catch_up(hits, stamp);
        hits.retain(|&t| t.saturating_add(w) > now_ms);
        let count = hits.len() as u32;
        if count < max {
            let stamp = stamp.max(hits.last().copied().unwrap_or(0));
            hits.push(stamp);
            Decision::allowed(u64::from(max), u64::from(max - count - 1))
                .with_reset_at(secs_up_from_ms(hits[0].saturating_add(w)))
        } else {
            let frees = hits[(count - max) as usize].saturating_add(w);
            Decision::refused(u64::from(max), until(frees, now))
                .with_reset_at(secs_up_from_ms(frees))
        }
    }

    fn retry_after(&mut self, key: u64, now: u64, cfg: &SlidingWindowConfig) -> Option<Duration> {
        let max = cfg.max_requests;
        if max == 0 {
            return Some(cfg.window);
        }
        let w = window_ms(cfg.window);
        let (hits, last) = self.keys.get_mut(&key)?;
        *last = w;
        Self::catch_up(hits, now.div_ceil(NANOS_PER_MILLI));
        hits.retain(|&t| t.saturating_add(w) > now / NANOS_PER_MILLI);
        if hits.is_empty() {
            self.keys.remove(&key);
            return None;
        }
        let count = hits.len() as u32;
        (count >= max).then(|| until(hits[(count - max) as usize].saturating_add(w), now))
    }

    fn sweep(&mut self, now: u64) {
        let now_ms = now / NANOS_PER_MILLI;
        self.keys.retain(|_, (hits, last)| {
            let w = swept_window_ms(*last);
            hits.retain(|&t| t.saturating_add(w) > now_ms);
            !hits.is_empty()
        });
    }
}

// Keys decided under the lock (too long for a note), limits of 0 to 7,
// windows from 1 ms (and 1.5 ms) through the edges of the sweep's exact
// and whole-second forms to 100 years, the clock jumping by up to two
// years and stepped back by up to 40 days, with sweeps and `retry_after`
// between the calls: every field of every decision, every wait, and the
// count of buckets are the model's.
#[test]
fn long_windows_far_jumps_and_steps_back_agree_with_the_plain_model() {
    let day = 86_400 * 1_000_000_000_u64;
    for seed in 1..=8_u64 {
        let (clock, limiter) = quiet_limiter();
        let mut model = Model::default();
        let mut state = 0x2545_f491_4f6c_dd1d_u64 ^ seed.wrapping_mul(0x9e37_79b9);
        let mut next = |below: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % below
        };
        for step in 0..20_000 {
            if next(15) == 0 {
                let back = [next(2_000_000), next(3_000_000_000), next(40 * day)][next(3) as usize];
                let to = clock.unix_nanos().saturating_sub(back);
                clock.set(chrono::DateTime::from_timestamp_nanos(to as i64));
            } else {
                let advance = match next(7) {
                    0 | 6 => 0,
                    1 => next(2_000_000),
                    2 => next(3_000_000_000),
                    3 => next(40 * day),
                    4 => next(800 * day),
                    _ => (1 << 31) * NANOS_PER_MILLI - 1 + next(3),
                };
                clock.advance(Duration::from_nanos(advance));
            }
            let now = clock.unix_nanos();
            let key = next(3);
            let name = long_key(&format!("key:{key}"));
            let max = [0, 1, 2, 3, 7][next(5) as usize];
            let window = [
                Duration::from_millis(1),
                Duration::from_nanos(1_500_000),
                Duration::from_millis((1 << 31) - 1),
                Duration::from_millis(1 << 31),
                Duration::from_millis((1 << 31) + 1),
                Duration::from_secs(30 * 86_400),
                Duration::from_secs(100 * 365 * 86_400),
            ][next(7) as usize];
            let cfg = SlidingWindowConfig::new(max, window);
            if next(10) == 0 {
                limiter.sweep();
                model.sweep(now);
            }
            if next(8) == 0 {
                let got = limiter.retry_after_now(&name, &cfg).unwrap();
                let want = model.retry_after(key, now, &cfg);
                assert_eq!(got, want, "seed {seed}, step {step}, {cfg:?}");
            } else {
                let got = limiter.acquire_now(&name, &cfg).unwrap();
                let want = model.acquire(key, now, &cfg);
                assert_eq!(got, want, "seed {seed}, step {step}, {cfg:?}");
            }
            assert_eq!(
                limiter.bucket_count(),
                model.keys.len(),
                "seed {seed}, step {step}"
            );
        }
    }
}
