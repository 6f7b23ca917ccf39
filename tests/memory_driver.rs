//! The in-memory sliding-window driver, on a frozen clock that the tests
//! move: the measured scenarios of the references, exactness under
//! concurrency, exact waits, and bounded memory.

mod conformance;
mod support;

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use chrono::{TimeZone, Utc};
use http_body_util::Full;
use proptest::prelude::*;
use suprnova::clock::{Clock, FakeClock};
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig};
use suprnova::server::handle_request;
use suprnova::{HttpResponse, Request, Router};

use conformance::Harness;

struct Memory {
    clock: FakeClock,
    driver: Arc<dyn RateLimiterDriver>,
}

impl Harness for Memory {
    fn driver(&self) -> &Arc<dyn RateLimiterDriver> {
        &self.driver
    }

    async fn pass(&self, by: Duration) {
        self.clock.advance(by);
    }

    fn window(&self) -> Duration {
        Duration::from_secs(10)
    }

    fn slack(&self) -> Duration {
        Duration::ZERO
    }

    fn now(&self) -> Duration {
        Duration::from_nanos(self.clock.unix_nanos())
    }
}

async fn memory() -> Memory {
    let clock = support::clock_at(12, 0, 0);
    let driver = Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
    Memory { clock, driver }
}

conformance::driver_tests!(memory);

fn per(max_requests: u32, secs: u64) -> SlidingWindowConfig {
    SlidingWindowConfig::new(max_requests, Duration::from_secs(secs))
}

/// A limiter on a fake clock at 12:00:00.
fn limiter() -> (FakeClock, InMemoryRateLimiter) {
    let clock = support::clock_at(12, 0, 0);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    (clock, limiter)
}

/// `work(thread)` on `count` threads at once, their results in thread
/// order.
fn on_threads<R: Send>(count: usize, work: impl Fn(usize) -> R + Sync) -> Vec<R> {
    std::thread::scope(|scope| {
        let work = &work;
        let threads: Vec<_> = (0..count).map(|t| scope.spawn(move || work(t))).collect();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    })
}

/// The most admitted hits in any span (`t - window`, `t`].
fn most_in_any_window(admitted_ms: &[u64], window_ms: u64) -> usize {
    admitted_ms
        .iter()
        .map(|&t| {
            admitted_ms
                .iter()
                .filter(|&&s| s <= t && s + window_ms > t)
                .count()
        })
        .max()
        .unwrap_or(0)
}

/// Sends `n` calls on `key`, `every` apart, and returns the clock times (in
/// ms) of the admitted ones.
async fn send(
    clock: &FakeClock,
    limiter: &InMemoryRateLimiter,
    cfg: &SlidingWindowConfig,
    n: usize,
    every: Duration,
) -> Vec<u64> {
    let mut admitted_ms = Vec::new();
    for _ in 0..n {
        if limiter.try_acquire("key", cfg).await.unwrap() {
            admitted_ms.push(clock.unix_millis());
        }
        clock.advance(every);
    }
    admitted_ms
}

// Scenario A of the algorithm comparison, 10 per 10 s: 10 requests just
// before the fixed window boundary at 12:00:10 and 10 just after, all within
// one second. The fixed window admits 20; the sliding log admits 10.
#[tokio::test]
async fn boundary_burst_admits_10_not_20() {
    let (clock, limiter) = limiter();
    let cfg = per(10, 10);
    let every = Duration::from_millis(40);
    clock.advance(Duration::from_millis(9_500));
    let before = send(&clock, &limiter, &cfg, 10, every).await;
    assert_eq!(
        clock.now_utc().format("%H:%M:%S%.3f").to_string(),
        "12:00:09.900"
    );
    clock.advance(Duration::from_millis(100));
    let after = send(&clock, &limiter, &cfg, 10, every).await;
    assert_eq!((before.len(), after.len()), (10, 0));
}

// Scenario B: 100 requests a second for 30 s at 10 per 10 s admits 30, and
// never more than 10 in any 10 s.
#[tokio::test]
async fn flood_admits_30_in_30_seconds_and_10_in_any_10() {
    let (clock, limiter) = limiter();
    let cfg = per(10, 10);
    let start = clock.unix_millis();
    let admitted_ms: Vec<u64> = send(&clock, &limiter, &cfg, 3_000, Duration::from_millis(10))
        .await
        .into_iter()
        .map(|t| t - start)
        .collect();
    assert_eq!(admitted_ms.len(), 30);
    assert_eq!(most_in_any_window(&admitted_ms, 10_000), 10);
    // The first ten of each window, each window opening exactly 10 s after
    // the one before (a hit 10 s old is out).
    let expected: Vec<u64> = [0, 10_000, 20_000]
        .iter()
        .flat_map(|&w| (0..10).map(move |i| w + i * 10))
        .collect();
    assert_eq!(admitted_ms, expected);
}

// Scenario C: quiet for 60 s, then 30 at once: 10 admitted.
#[tokio::test]
async fn idle_then_burst_admits_10() {
    let (clock, limiter) = limiter();
    let cfg = per(10, 10);
    assert_eq!(
        send(&clock, &limiter, &cfg, 1, Duration::ZERO).await.len(),
        1
    );
    clock.advance(Duration::from_secs(60));
    assert_eq!(
        send(&clock, &limiter, &cfg, 30, Duration::ZERO).await.len(),
        10
    );
}

// The bunched traffic of the fixed-window walkthrough, 60 per 60 s: 1 at
// 12:00:00, 60 at 12:00:59, 60 at 12:01:00. The fixed window lets 119
// through within two seconds; the sliding window lets no 60 s span hold more
// than 60.
#[tokio::test]
async fn bunched_traffic_never_puts_more_than_60_in_a_minute() {
    let (clock, limiter) = limiter();
    let cfg = per(60, 60);
    let start = clock.unix_seconds();
    let mut admitted_ms = Vec::new();
    let mut send = async |n: usize, clock: &FakeClock, limiter: &InMemoryRateLimiter| {
        let mut last = None;
        for _ in 0..n {
            let d = limiter.acquire("ip:203.0.113.5", &cfg).await.unwrap();
            if d.allowed {
                admitted_ms.push(clock.unix_millis());
            } else {
                last = Some(d);
            }
        }
        last
    };
    assert!(send(1, &clock, &limiter).await.is_none());
    clock.advance(Duration::from_secs(59));
    let refused = send(60, &clock, &limiter)
        .await
        .expect("the 61st is refused");
    // 12:00:59: the hit of 12:00:00 frees its place at 12:01:00.
    assert_eq!(refused.retry_after, Some(Duration::from_secs(1)));
    assert_eq!(refused.retry_after_secs(), Some(1));
    assert_eq!(refused.reset_at, Some(start + 60));
    clock.advance(Duration::from_secs(1));
    let refused = send(60, &clock, &limiter)
        .await
        .expect("12:01:00 is refused");
    // 12:01:00: only the place of 12:00:00 was free; the next frees at
    // 12:01:59.
    assert_eq!(refused.retry_after, Some(Duration::from_secs(59)));
    assert_eq!(admitted_ms.len(), 61);
    assert_eq!(most_in_any_window(&admitted_ms, 60_000), 60);
}

// 20 tasks x 50 attempts on one key, limit 100, on a multi-threaded runtime:
// exactly 100 admitted, three runs in a row.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_tasks_of_fifty_admit_exactly_100() {
    for run in 0..3 {
        let clock = support::clock_at(12, 0, 0);
        let limiter: Arc<dyn RateLimiterDriver> =
            Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
        let tasks = vec![limiter; 20];
        let admitted = conformance::admitted_by_contenders(tasks, 50, "hot", per(100, 60)).await;
        assert_eq!(admitted, 100, "run {run}");
    }
}

// Threads refusing one full key at once (which read it under a shared lock
// when another holds its shard) give what one thread would: exactly the
// limit admitted in a window, and every refusal the same wait and reset.
#[test]
fn threads_on_one_full_key_admit_the_limit_and_refuse_alike() {
    let clock = support::clock_at(12, 0, 0);
    let noon = clock.unix_seconds();
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let cfg = per(100, 60);
    for window in 0..2_u64 {
        let results = on_threads(4, |_| {
            let (mut admitted, mut refusals) = (0, Vec::new());
            for _ in 0..5_000 {
                let decision = limiter.acquire_now("hot", &cfg).unwrap();
                if decision.allowed {
                    admitted += 1;
                } else {
                    refusals.push((decision.retry_after, decision.reset_at));
                }
            }
            (admitted, refusals)
        });
        let mut admitted = 0;
        for (count, refusals) in results {
            admitted += count;
            let frees = noon + 60 * (window as i64 + 1);
            for refusal in refusals {
                assert_eq!(refusal, (Some(Duration::from_secs(60)), Some(frees)));
            }
        }
        assert_eq!(admitted, 100, "window {window}");
        clock.advance(Duration::from_secs(60));
    }
}

// Every thread hammers its own keys while every call also sweeps: no
// deadlock between a call's shard lock and the sweep, and each key admits
// exactly its limit.
#[test]
fn sweeping_on_every_call_keeps_counts_exact_across_threads() {
    let clock = support::clock_at(12, 0, 0);
    let limiter =
        InMemoryRateLimiter::with_clock(clock.shared()).with_sweep_interval(Duration::ZERO);
    let cfg = per(7, 60);
    let admitted = on_threads(4, |t| {
        let mut admitted = 0;
        for i in 0..2_000 {
            let key = format!("t{t}:k{}", i % 50);
            admitted += usize::from(limiter.acquire_now(&key, &cfg).unwrap().allowed);
        }
        admitted
    });
    assert_eq!(admitted.iter().sum::<usize>(), 4 * 50 * 7);
    assert_eq!(limiter.bucket_count(), 200);
}

// The wait is exact to the nanosecond of the clock: hits at 12:00:00.250 and
// 12:00:03, a limit of 2 per 10 s, refused at 12:00:07.900400.
#[tokio::test]
async fn retry_after_is_exact_on_the_test_clock() {
    let (clock, limiter) = limiter();
    let cfg = per(2, 10);
    let noon = clock.unix_seconds();
    clock.advance(Duration::from_millis(250));
    assert!(limiter.try_acquire("k", &cfg).await.unwrap());
    clock.advance(Duration::from_millis(2_750));
    assert!(limiter.try_acquire("k", &cfg).await.unwrap());
    clock.advance(Duration::from_micros(4_900_400));
    let expected = Duration::from_micros(2_349_600);
    assert_eq!(
        limiter.retry_after("k", &cfg).await.unwrap(),
        Some(expected)
    );
    let refused = limiter.acquire("k", &cfg).await.unwrap();
    assert_eq!(refused.retry_after, Some(expected));
    assert_eq!(refused.retry_after_secs(), Some(3));
    // The place frees at 12:00:10.250: the reset is the next whole second.
    assert_eq!(refused.reset_at, Some(noon + 11));
    // One nanosecond before it frees, still refused; at it, admitted.
    clock.advance(expected - Duration::from_nanos(1));
    assert!(!limiter.try_acquire("k", &cfg).await.unwrap());
    clock.advance(Duration::from_nanos(1));
    assert!(limiter.try_acquire("k", &cfg).await.unwrap());
}

// A hit made part-way through a millisecond holds its place for at least a
// whole window: the hit is stamped at the next millisecond, so rounding never
// shortens the window (it may lengthen it by under a millisecond).
#[test]
fn sub_millisecond_times_never_shorten_the_window() {
    let (clock, limiter) = limiter();
    let cfg = per(1, 1);
    clock.advance(Duration::from_micros(900));
    assert!(limiter.acquire_now("k", &cfg).unwrap().allowed);
    // 999.2 ms later the clock reads a whole second on; the hit is not a
    // whole second old, and still holds its place.
    clock.advance(Duration::from_micros(999_200));
    assert!(!limiter.acquire_now("k", &cfg).unwrap().allowed);
    clock.advance(Duration::from_micros(800));
    let refused = limiter.acquire_now("k", &cfg).unwrap();
    assert_eq!(refused.retry_after, Some(Duration::from_micros(100)));
    clock.advance(Duration::from_micros(100));
    assert!(limiter.acquire_now("k", &cfg).unwrap().allowed);
}

// A key found full is refused without its shard's lock, by the note of
// when its place frees; every call that may change the bucket in another
// way must not leave that note behind. Each case below would be refused
// by a stale note.
#[test]
fn a_full_key_is_admitted_again_whenever_its_bucket_has_changed() {
    let (clock, limiter) = limiter();
    let limiter = limiter.with_sweep_interval(Duration::from_secs(3_600));
    // Hits at 0 s and 5 s fill 2 per 60 s; the refusal notes 60 s.
    assert!(limiter.acquire_now("k", &per(2, 60)).unwrap().allowed);
    clock.advance(Duration::from_secs(5));
    assert!(limiter.acquire_now("k", &per(2, 60)).unwrap().allowed);
    let refused = limiter.acquire_now("k", &per(2, 60)).unwrap();
    assert_eq!(refused.retry_after, Some(Duration::from_secs(55)));
    // At 10 s a check under 2 per 8 s drops the hit of 0 s ...
    clock.advance(Duration::from_secs(5));
    assert_eq!(limiter.retry_after_now("k", &per(2, 8)).unwrap(), None);
    // ... so under 2 per 60 s the key has a place again.
    let admitted = limiter.acquire_now("k", &per(2, 60)).unwrap();
    assert!(admitted.allowed);
    assert_eq!(admitted.remaining, 0);
    // Full again, until the hit of 5 s leaves at 65 s.
    let refused = limiter.acquire_now("k", &per(2, 60)).unwrap();
    assert_eq!(refused.retry_after, Some(Duration::from_secs(55)));
    // A higher limit admits at once; a lower one refuses until the hit that
    // keeps the bucket over it leaves (the one of 10 s, at 70 s).
    assert!(limiter.acquire_now("k", &per(3, 60)).unwrap().allowed);
    let lower = limiter.acquire_now("k", &per(2, 60)).unwrap();
    assert_eq!(lower.retry_after, Some(Duration::from_secs(60)));
    assert!(!limiter.acquire_now("k", &per(3, 60)).unwrap().allowed);
    // Once every hit has left, the sweep drops the bucket and its note; the
    // key then starts again and is refused with its new time.
    clock.advance(Duration::from_secs(60));
    limiter.sweep();
    assert_eq!(limiter.bucket_count(), 0);
    for left in (0..3).rev() {
        assert_eq!(
            limiter.acquire_now("k", &per(3, 60)).unwrap().remaining,
            left
        );
    }
    let refused = limiter.acquire_now("k", &per(3, 60)).unwrap();
    assert_eq!(refused.retry_after, Some(Duration::from_secs(60)));
}

// Two threads over the same 5,000 keys, twenty passes each, the clock
// frozen: each key admits exactly its limit, whichever thread asks, and
// every refusal, by note or under the lock, gives the same wait.
#[test]
fn two_threads_over_many_keys_admit_exactly_the_limit_of_each() {
    let (_clock, limiter) = limiter();
    let cfg = per(3, 60);
    let admitted = on_threads(2, |t| {
        let mut admitted = 0;
        for pass in 0..20 {
            for k in 0..5_000 {
                // The two threads walk the keys in opposite orders.
                let k = if (t + pass) % 2 == 0 { k } else { 4_999 - k };
                let decision = limiter.acquire_now(&format!("user:{k}"), &cfg).unwrap();
                if decision.allowed {
                    admitted += 1;
                } else {
                    assert_eq!(decision.retry_after, Some(Duration::from_secs(60)));
                }
            }
        }
        admitted
    });
    assert_eq!(admitted.iter().sum::<usize>(), 5_000 * 3);
}

#[test]
fn a_bucket_that_holds_nothing_is_dropped_when_touched() {
    let (clock, limiter) = limiter();
    let limiter = limiter.with_sweep_interval(Duration::from_secs(3_600));
    let cfg = per(5, 1);
    assert!(limiter.acquire_now("a", &cfg).unwrap().allowed);
    assert!(limiter.acquire_now("b", &cfg).unwrap().allowed);
    assert_eq!(limiter.bucket_count(), 2);
    clock.advance(Duration::from_secs(1));
    assert_eq!(limiter.retry_after_now("a", &cfg).unwrap(), None);
    assert_eq!(limiter.bucket_count(), 1);
    // A call on an emptied bucket starts it again at one hit.
    assert_eq!(limiter.acquire_now("b", &cfg).unwrap().remaining, 4);
    assert_eq!(limiter.bucket_count(), 1);
}

#[test]
fn the_calls_sweep_once_per_interval_of_clock_time() {
    let (clock, limiter) = limiter();
    let cfg = per(5, 1);
    for i in 0..100 {
        limiter.acquire_now(&format!("k{i}"), &cfg).unwrap();
    }
    clock.advance(Duration::from_millis(999));
    limiter.acquire_now("other", &cfg).unwrap();
    assert_eq!(limiter.bucket_count(), 101);
    // 12:00:01: the default interval of one second has passed and the keys'
    // window too; the next call, on any key, sweeps them.
    clock.advance(Duration::from_millis(1));
    limiter.acquire_now("other", &cfg).unwrap();
    assert_eq!(limiter.bucket_count(), 1);
}

#[test]
fn an_explicit_sweep_keeps_the_buckets_that_still_hold_hits() {
    let (clock, limiter) = limiter();
    let limiter = limiter.with_sweep_interval(Duration::from_secs(3_600));
    limiter.acquire_now("short", &per(1, 1)).unwrap();
    limiter.acquire_now("long", &per(1, 60)).unwrap();
    clock.advance(Duration::from_secs(2));
    limiter.sweep();
    assert_eq!(limiter.bucket_count(), 1);
    assert!(!limiter.acquire_now("long", &per(1, 60)).unwrap().allowed);
}

// A flood of distinct keys: 1,000,000 keys hit once each in a 1 s window,
// then the clock moves 2 s and one more call comes. The driver holds no
// bucket but the last caller's, and nobody called a cleanup.
#[test]
fn a_million_distinct_keys_are_gone_after_their_window() {
    let (clock, limiter) = limiter();
    let cfg = per(10, 1);
    let mut key = String::with_capacity(32);
    for i in 0..1_000_000_u32 {
        use std::fmt::Write;
        key.clear();
        write!(key, "ip:10.{}.{}.{}", i >> 16, (i >> 8) & 0xff, i & 0xff).unwrap();
        assert!(limiter.acquire_now(&key, &cfg).unwrap().allowed);
    }
    assert_eq!(limiter.bucket_count(), 1_000_000);
    clock.advance(Duration::from_secs(2));
    limiter.acquire_now("ip:192.0.2.1", &cfg).unwrap();
    assert_eq!(limiter.bucket_count(), 1);
}

#[test]
fn debug_names_the_driver() {
    let limiter = InMemoryRateLimiter::new().with_shards(10);
    let text = format!("{limiter:?}");
    assert!(text.contains("InMemoryRateLimiter"), "{text}");
    assert!(text.contains("shards: 16"), "{text}");
    assert_eq!(limiter.name(), "memory");
}

/// The sliding log written the naive way: every admitted time in a list.
#[derive(Default)]
struct Reference {
    hits: std::collections::HashMap<u8, Vec<u64>>,
}

impl Reference {
    /// (admitted, remaining, wait in ms) at `now_ms`.
    fn acquire(&mut self, key: u8, now_ms: u64, max: u32, window_ms: u64) -> (bool, u64, u64) {
        let hits = self.hits.entry(key).or_default();
        hits.retain(|&t| t + window_ms > now_ms);
        let count = hits.len() as u32;
        if count < max {
            hits.push(now_ms);
            (true, u64::from(max - count - 1), 0)
        } else {
            let frees = hits[(count - max) as usize] + window_ms;
            (false, 0, frees - now_ms)
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    // Against the naive log, on any sequence of steps and keys, every
    // decision is the same: admitted or not, the places left, the wait.
    #[test]
    fn agrees_with_the_naive_log(
        max in 1_u32..6,
        window_ms in 1_u64..5_000,
        steps in proptest::collection::vec((0_u64..2_000, 0_u8..3), 1..200),
    ) {
        let (clock, limiter) = limiter();
        let origin = clock.unix_millis();
        let cfg = SlidingWindowConfig::new(max, Duration::from_millis(window_ms));
        let mut reference = Reference::default();
        for (advance_ms, key) in steps {
            clock.advance(Duration::from_millis(advance_ms));
            let now_ms = clock.unix_millis() - origin;
            let d = limiter.acquire_now(&key.to_string(), &cfg).unwrap();
            let (allowed, remaining, wait_ms) = reference.acquire(key, now_ms, max, window_ms);
            prop_assert_eq!(d.allowed, allowed);
            prop_assert_eq!(d.remaining, remaining);
            prop_assert_eq!(d.retry_after, (!allowed).then(|| Duration::from_millis(wait_ms)));
        }
    }
}

// ---------------------------------------------------------------------------
// A wall clock stepped back (NTP, an operator, a virtual machine restored
// from a snapshot): the hits stamped later than the clock now reads are
// moved back, all by the same amount, so that the newest is now.
// ---------------------------------------------------------------------------

fn get(path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path).body(Full::default()).unwrap()
}

fn ok(_req: Request) -> std::future::Ready<HttpResponse> {
    std::future::ready(HttpResponse::text("ok"))
}

/// `GET /r` behind `cfg` on `driver`, every request on the key `k`.
fn limited(driver: Arc<dyn RateLimiterDriver>, cfg: SlidingWindowConfig) -> Router {
    Router::new()
        .get("/r", ok)
        .middleware(RateLimitMiddleware::new(driver, cfg, |_req| "k".to_owned()))
}

/// The status, `Retry-After` and `X-RateLimit-Remaining` of one request.
async fn hit(router: &Router) -> (u16, Option<String>, Option<String>) {
    let r = handle_request(router, get("/r")).await;
    (
        r.status_code(),
        r.header_str("retry-after").map(str::to_owned),
        r.header_str("x-ratelimit-remaining").map(str::to_owned),
    )
}

/// Sets `clock` to 2026-01-01 `h:m:s` UTC, earlier or later than it reads.
fn set_clock(clock: &FakeClock, h: u32, m: u32, s: u32) {
    clock.set(Utc.with_ymd_and_hms(2026, 1, 1, h, m, s).unwrap());
}

fn some(s: &str) -> Option<String> {
    Some(s.to_owned())
}

// A key of 5 per 60 s filled and refused at 12:00:00 (the refusal is
// noted), then the clock is stepped back to 11:00:00: the key is refused
// for the one window its hits hold from now (Retry-After: 60, not 3660),
// and admitted again at 11:01:00 by the clock it reads.
#[tokio::test]
async fn a_clock_stepped_back_an_hour_refuses_a_full_key_for_one_window_at_most() {
    let clock = support::clock_at(12, 0, 0);
    let router = limited(
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared())),
        per(5, 60),
    );
    for remaining in ["4", "3", "2", "1", "0"] {
        assert_eq!(hit(&router).await, (200, None, some(remaining)));
    }
    assert_eq!(hit(&router).await, (429, some("60"), some("0")));
    set_clock(&clock, 11, 0, 0);
    let refused = handle_request(&router, get("/r")).await;
    assert_eq!(refused.status_code(), 429);
    assert_eq!(refused.header_str("retry-after"), Some("60"));
    let at_11_01 = Utc.with_ymd_and_hms(2026, 1, 1, 11, 1, 0).unwrap();
    assert_eq!(
        refused.header_str("x-ratelimit-reset"),
        Some(at_11_01.timestamp().to_string().as_str())
    );
    clock.advance(Duration::from_secs(59));
    assert_eq!(hit(&router).await, (429, some("1"), some("0")));
    clock.advance(Duration::from_secs(1));
    assert_eq!(hit(&router).await, (200, None, some("4")));
}

// The same step with the key not yet full: one hit at 12:00:00, the clock
// back to 11:00:00, four more hits fill the key, and the refusal waits for
// the window of the hits as the clock now reads them.
#[tokio::test]
async fn a_hit_made_before_a_clock_stepped_back_holds_its_place_one_window_from_now() {
    let clock = support::clock_at(12, 0, 0);
    let router = limited(
        Arc::new(InMemoryRateLimiter::with_clock(clock.shared())),
        per(5, 60),
    );
    assert_eq!(hit(&router).await, (200, None, some("4")));
    set_clock(&clock, 11, 0, 0);
    for remaining in ["3", "2", "1", "0"] {
        assert_eq!(hit(&router).await, (200, None, some(remaining)));
    }
    assert_eq!(hit(&router).await, (429, some("60"), some("0")));
    clock.advance(Duration::from_secs(60));
    assert_eq!(hit(&router).await, (200, None, some("4")));
}

// 5 per 60 s, hits at 12:00:00, :10, :20, :30 and :40; at 12:00:45 the
// clock is stepped back 30 s, to 12:00:15, and a request comes every second
// of it for two minutes. The hits are moved back 25 s (the newest to
// 12:00:15), so the first is out at 12:00:35; on the new clock they were
// made 30 s earlier than they were stamped, and in no span of 60 s of it,
// those five counted where they really were, are more than 5 admitted.
#[test]
fn a_clock_stepped_back_keeps_the_count_and_never_admits_more_than_the_limit() {
    let (clock, limiter) = limiter();
    let cfg = per(5, 60);
    let noon = clock.unix_millis();
    for _ in 0..5 {
        assert!(limiter.acquire_now("k", &cfg).unwrap().allowed);
        clock.advance(Duration::from_secs(10));
    }
    set_clock(&clock, 12, 0, 15);
    let first = limiter.acquire_now("k", &cfg).unwrap();
    assert_eq!(first.retry_after, Some(Duration::from_secs(20)));
    let mut admitted: Vec<u64> = (0..5).map(|i| noon - 30_000 + i * 10_000).collect();
    for _ in 0..120 {
        if limiter.acquire_now("k", &cfg).unwrap().allowed {
            admitted.push(clock.unix_millis());
        }
        clock.advance(Duration::from_secs(1));
    }
    let after_step: Vec<u64> = admitted[5..].iter().map(|t| (t - noon) / 1_000).collect();
    assert_eq!(after_step, [35, 45, 55, 65, 75, 95, 105, 115, 125]);
    assert_eq!(most_in_any_window(&admitted, 60_000), 5);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    // A clock that now and then steps back by up to two windows: in real
    // time (where the steps are not), no window ever admits more than the
    // limit, and a refusal never waits longer than one window.
    #[test]
    fn a_clock_that_steps_back_never_admits_more_than_the_limit_in_real_time(
        max in 1_u32..5,
        window_ms in 1_u64..3_000,
        steps in proptest::collection::vec((0_u64..1_500, 0_u64..6_000, 0_u8..4), 1..200),
    ) {
        let (clock, limiter) = limiter();
        let start = clock.unix_millis();
        let cfg = SlidingWindowConfig::new(max, Duration::from_millis(window_ms));
        let (mut real, mut behind) = (0_u64, 0_u64);
        let mut admitted = Vec::new();
        for (advance_ms, back_ms, op) in steps {
            real += advance_ms;
            if op == 0 {
                behind += back_ms;
            }
            let reads = (start + real - behind) as i64;
            clock.set(Utc.timestamp_millis_opt(reads).unwrap());
            let key = if op == 1 { "other" } else { "k" };
            let d = limiter.acquire_now(key, &cfg).unwrap();
            if d.allowed {
                if key == "k" {
                    admitted.push(real);
                }
            } else {
                let wait = d.retry_after.unwrap();
                prop_assert!(wait <= cfg.window, "waits {wait:?}");
            }
        }
        prop_assert!(most_in_any_window(&admitted, window_ms) <= max as usize);
    }
}

/// A key whose window is lengthened (5 per 300 ms, then 5 per 5 s) counts
/// its hits under the window of the last call on it, counted or refused:
/// the sweep, once a second, trims the bucket to that window, so the hits
/// of the short window hold their places for the long one once a call has
/// been made with it.
#[test]
fn a_lengthened_window_counts_the_hits_under_the_window_of_the_last_call() {
    let clock = FakeClock::at_unix(1_000_000);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let short = SlidingWindowConfig::new(5, Duration::from_millis(300));
    let long = SlidingWindowConfig::new(5, Duration::from_secs(5));
    for _ in 0..5 {
        assert!(limiter.acquire_now("k", &short).unwrap().allowed);
    }
    clock.advance(Duration::from_millis(100));
    assert!(!limiter.acquire_now("k", &long).unwrap().allowed);
    // Another key's calls keep the sweep running, once a second.
    for _ in 0..19 {
        clock.advance(Duration::from_millis(100));
        let _ = limiter.acquire_now("other", &long).unwrap();
    }
    let refused = limiter.acquire_now("k", &long).unwrap();
    assert!(!refused.allowed);
    assert_eq!(refused.retry_after, Some(Duration::from_secs(3)));
    clock.advance(Duration::from_secs(3));
    assert!(limiter.acquire_now("k", &long).unwrap().allowed);
}
