//! The scenarios of the algorithm comparison replayed through the crate's
//! own fixed window: the Laravel-shape limiter ([`CacheRateLimiter`]) over
//! the memory store, on the test clock. Each request is counted with
//! `increment_if_below`, the step the throttle middleware counts with, so a
//! refused request is not counted.
//!
//! The window opens at a key's first request, not on the clock minute: that
//! is where these counts differ from a clock-aligned fixed window, and
//! docs/algorithms.md quotes them. Windows aligned on the clock minute
//! (`hit_until` the next minute) give the comparison's own counts.

mod support;

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};

use support::load::{CLIENTS, Profile, arrivals};
use suprnova::cache::MemoryStore;
use suprnova::clock::{Clock, FakeClock};
use suprnova::limiter::CacheRateLimiter;

/// A fixed-window limiter on a test clock frozen at 12:00:00.
fn fixed_window() -> (FakeClock, CacheRateLimiter) {
    let clock = support::clock_at(12, 0, 0);
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    (clock.clone(), CacheRateLimiter::new(store, clock.shared()))
}

/// One request on `key` under `max` per `decay_seconds`: admitted (and
/// counted) only while the window has room.
async fn admits(limiter: &CacheRateLimiter, key: &str, max: i64, decay_seconds: i64) -> bool {
    limiter
        .increment_if_below(key, decay_seconds, 1, max)
        .await
        .unwrap()
        .counted
}

/// Sends `n` requests `every` apart at 10 per 10 s and returns the clock
/// times (ms) of the admitted ones.
async fn send(
    clock: &FakeClock,
    limiter: &CacheRateLimiter,
    n: usize,
    every: Duration,
) -> Vec<u64> {
    let mut admitted = Vec::new();
    for _ in 0..n {
        if admits(limiter, "key", 10, 10).await {
            admitted.push(clock.unix_millis());
        }
        clock.advance(every);
    }
    admitted
}

// Scenario A, 10 per 10 s, with no earlier request: 10 requests from
// 12:00:09.500 and 10 from 12:00:10.000, 40 ms apart. The first of them
// opens the window, so it ends at 12:00:19.500, not at 12:00:10: 10 admitted.
#[tokio::test]
async fn a_burst_across_the_clock_boundary_opens_one_window_and_admits_10() {
    let (clock, limiter) = fixed_window();
    clock.advance(Duration::from_millis(9_500));
    let before = send(&clock, &limiter, 10, Duration::from_millis(40)).await;
    clock.advance(Duration::from_millis(100));
    let after = send(&clock, &limiter, 10, Duration::from_millis(40)).await;
    assert_eq!((before.len(), after.len()), (10, 0));
}

// Scenario A after one request at 12:00:00 opened the window: it ends at
// 12:00:10, so 9 of the 10 before it pass and all 10 after it: 19 admitted
// between 12:00:09.500 and 12:00:10.360, under a limit of 10 per 10 s.
#[tokio::test]
async fn a_burst_across_the_window_end_admits_19_within_one_second() {
    let (clock, limiter) = fixed_window();
    assert!(admits(&limiter, "key", 10, 10).await);
    clock.advance(Duration::from_millis(9_500));
    let before = send(&clock, &limiter, 10, Duration::from_millis(40)).await;
    clock.advance(Duration::from_millis(100));
    let after = send(&clock, &limiter, 10, Duration::from_millis(40)).await;
    assert_eq!((before.len(), after.len()), (9, 10));
    // The 19 span 12:00:09.500 to 12:00:10.360: under one second.
    let (first, last) = (before[0], after[after.len() - 1]);
    assert_eq!(last - first, 860);
}

// Scenario B: 100 requests a second for 30 s. Windows open at 0 s, 10 s and
// 20 s and each admits its first ten requests: 30 admitted, never more than
// 10 in any 10 s, because every window starts with the request that opens
// it.
#[tokio::test]
async fn a_flood_admits_30_in_30_seconds_and_10_in_any_10() {
    let (clock, limiter) = fixed_window();
    let start = clock.unix_millis();
    let admitted: Vec<u64> = send(&clock, &limiter, 3_000, Duration::from_millis(10))
        .await
        .into_iter()
        .map(|t| t - start)
        .collect();
    let expected: Vec<u64> = [0, 10_000, 20_000]
        .iter()
        .flat_map(|&w| (0..10).map(move |i| w + i * 10))
        .collect();
    assert_eq!(admitted, expected);
}

// Scenario C: quiet for 60 s, then 30 at once: 10 admitted.
#[tokio::test]
async fn idle_then_burst_admits_10() {
    let (clock, limiter) = fixed_window();
    assert_eq!(send(&clock, &limiter, 1, Duration::ZERO).await.len(), 1);
    clock.advance(Duration::from_secs(60));
    assert_eq!(send(&clock, &limiter, 30, Duration::ZERO).await.len(), 10);
}

/// (requests sent, requests refused) for one client replayed on a fresh
/// fixed window, `admits` deciding each request given the limiter, the
/// replay's start and the request's time from it.
async fn replay_by<F: Future<Output = bool>>(
    profile: Profile,
    admits: impl Fn(CacheRateLimiter, DateTime<Utc>, Duration) -> F,
) -> (u32, u32) {
    let (clock, limiter) = fixed_window();
    let start = clock.now_utc();
    let (mut sent, mut refused) = (0, 0);
    for at in arrivals(profile) {
        clock.set(start + at);
        sent += 1;
        if !admits(limiter.clone(), start, at).await {
            refused += 1;
        }
    }
    (sent, refused)
}

/// (requests sent, requests refused) for one client at 600 a minute.
async fn replay(profile: Profile) -> (u32, u32) {
    replay_by(profile, |limiter, _, _| async move {
        admits(&limiter, "client", 600, 60).await
    })
    .await
}

// The five-minute load at 600 a minute through the fixed window. Per client
// (in the order of the load) it cuts 0, 360, 45, 0, 0, 4,800 and 960: it
// catches 5,760, misses 6,900 and falsely blocks 405. The login series'
// two peaks start at 0:40 and 2:40, and each opens a window of its own:
// each 60-second peak falls inside one window and loses 480 of its 1,080. A
// window aligned on the clock minute would split each peak 20 s / 40 s
// across two windows and cut only 120 of each.
#[tokio::test]
async fn the_five_minute_load_through_the_fixed_window_at_600_a_minute() {
    let (cuts, counts) = through(replay).await;
    assert_eq!(cuts, vec![0, 360, 45, 0, 0, 4_800, 960]);
    assert_eq!(counts, (5_760, 6_900, 405));
}

/// The five-minute load, each client replayed by `replay`: the requests cut
/// from each client, in the order of the load, and the requests caught,
/// missed and falsely blocked.
async fn through<F: Future<Output = (u32, u32)>>(
    replay: impl Fn(Profile) -> F,
) -> (Vec<u32>, (u32, u32, u32)) {
    let mut cuts = Vec::new();
    let (mut caught, mut missed, mut falsely) = (0, 0, 0);
    for client in CLIENTS {
        let (sent, refused) = replay(client.profile).await;
        cuts.push(refused);
        if client.legitimate {
            falsely += refused;
        } else {
            caught += refused;
            missed += sent - refused;
        }
    }
    (cuts, (caught, missed, falsely))
}

/// (requests sent, requests refused) for one client at 600 a minute, each
/// window aligned on the clock minute: every hit counts in the window that
/// ends at the next minute ([`CacheRateLimiter::hit_until`]), checked first
/// as Laravel's `tooManyAttempts` checks.
async fn replay_on_clock_minutes(profile: Profile) -> (u32, u32) {
    replay_by(profile, |limiter, start, at| async move {
        if limiter.too_many_attempts("client", 600).await.unwrap() {
            return false;
        }
        let minute_ends = start + Duration::from_secs((at.as_secs() / 60 + 1) * 60);
        limiter.hit_until("client", minute_ends).await.unwrap();
        true
    })
    .await
}

// The five-minute load with windows aligned on the clock minute, as the
// algorithm comparison's fixed window resets its counter: its counts
// exactly. The login series' peaks (0:40 to 1:40 and 2:40 to 3:40) are
// split 20 s and 40 s across two windows, and each loses only 120: 240 cut
// where a window opened by a key's first request cuts 960.
#[tokio::test]
async fn the_five_minute_load_through_windows_aligned_on_the_clock_minute() {
    let (cuts, counts) = through(replay_on_clock_minutes).await;
    assert_eq!(cuts, vec![0, 360, 45, 0, 0, 4_800, 240]);
    assert_eq!(counts, (5_040, 7_620, 405));
}
