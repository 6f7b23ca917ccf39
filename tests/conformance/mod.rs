//! One behavioural suite for every sliding-window driver.
//!
//! A driver's test file implements [`Harness`] and calls
//! `conformance::driver_tests!(make)`, where `make` is an `async fn` that
//! returns a fresh harness. The memory harness moves a fake clock, so its
//! cases are exact to the millisecond; a Redis harness lets real time pass
//! over short windows, and its waits may come out up to `slack` shorter than
//! the exact value, which is the time its calls themselves took.

#![allow(dead_code)]

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use suprnova::rate_limit::{RateLimitError, RateLimiterDriver, SlidingWindowConfig};

/// A driver under test, and a way to let time pass for it.
pub trait Harness {
    /// The driver.
    fn driver(&self) -> &Arc<dyn RateLimiterDriver>;
    /// Lets `by` pass for the driver: moves a fake clock, or sleeps.
    fn pass(&self, by: Duration) -> impl Future<Output = ()>;
    /// The window the cases use: long on a fake clock, short on real time.
    fn window(&self) -> Duration;
    /// How much shorter than exact a reported wait may be.
    fn slack(&self) -> Duration;
    /// The driver's time now, since the Unix epoch.
    fn now(&self) -> Duration;
}

/// A driver on a real clock (Redis's), held with the server it talks to:
/// time passes by sleeping, over windows of one second.
pub struct RealTime<S> {
    _server: S,
    driver: Arc<dyn RateLimiterDriver>,
}

impl<S> RealTime<S> {
    /// `driver`, keeping `server` running for as long as the harness lives.
    pub fn new(server: S, driver: Arc<dyn RateLimiterDriver>) -> Self {
        Self {
            _server: server,
            driver,
        }
    }
}

impl<S> Harness for RealTime<S> {
    fn driver(&self) -> &Arc<dyn RateLimiterDriver> {
        &self.driver
    }

    async fn pass(&self, by: Duration) {
        tokio::time::sleep(by).await;
    }

    fn window(&self) -> Duration {
        Duration::from_secs(1)
    }

    fn slack(&self) -> Duration {
        Duration::from_millis(300)
    }

    /// The system clock: Redis runs on this machine and reads the same.
    fn now(&self) -> Duration {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("a clock after 1970")
    }
}

/// Runs every case of this file against the harness `make` builds, each as
/// a test of its own.
macro_rules! driver_tests {
    ($make:path) => {
        $crate::conformance::driver_tests!(
            @cases $make;
            admits_up_to_the_limit_then_refuses,
            a_refused_call_records_nothing,
            a_whole_window_later_the_bucket_is_full_again,
            retry_after_is_the_wait_for_the_oldest_hit,
            retry_after_records_nothing,
            keys_are_independent,
            a_zero_limit_refuses_everything,
            a_window_under_one_millisecond_is_a_config_error,
            a_lowered_limit_waits_for_enough_hits_to_leave,
        );
    };
    (@cases $make:path; $($case:ident),* $(,)?) => {
        mod conformance_cases {
            use super::*;
            $(
                #[tokio::test]
                async fn $case() {
                    $crate::conformance::$case(&$make().await).await;
                }
            )*
        }
    };
}
pub(crate) use driver_tests;

fn cfg(max_requests: u32, window: Duration) -> SlidingWindowConfig {
    SlidingWindowConfig {
        max_requests,
        window,
    }
}

/// `since_epoch` in whole seconds, rounded up.
fn whole_seconds_up(since_epoch: Duration) -> i64 {
    let seconds = since_epoch.as_secs() + u64::from(since_epoch.subsec_nanos() > 0);
    i64::try_from(seconds).expect("a time before 2262")
}

/// `actual` is `expected`, or up to `slack` shorter.
#[track_caller]
fn assert_wait(actual: Option<Duration>, expected: Duration, slack: Duration) {
    let actual = actual.expect("a wait was expected");
    assert!(
        actual <= expected && actual + slack >= expected,
        "wait {actual:?}, expected {expected:?} (slack {slack:?})"
    );
}

pub async fn admits_up_to_the_limit_then_refuses(h: &impl Harness) {
    let cfg = cfg(3, h.window());
    let before = h.now();
    for remaining in [2, 1, 0] {
        let d = h.driver().acquire("k", &cfg).await.unwrap();
        assert!(d.allowed);
        assert_eq!((d.limit, d.remaining, d.retry_after), (3, remaining, None));
    }
    let refused = h.driver().acquire("k", &cfg).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!((refused.limit, refused.remaining), (3, 0));
    assert_wait(refused.retry_after, h.window(), h.slack());
    // The first hit leaves a window after it was made, rounded up to the
    // second: on a frozen clock exactly that second.
    let reset_at = refused.reset_at.expect("a refusal says when it resets");
    let earliest = whole_seconds_up(before + h.window());
    let latest = whole_seconds_up(h.now() + h.window());
    assert!(
        (earliest..=latest).contains(&reset_at),
        "reset at {reset_at}, expected {earliest} to {latest}"
    );
    assert!(!h.driver().try_acquire("k", &cfg).await.unwrap());
}

pub async fn a_refused_call_records_nothing(h: &impl Harness) {
    let w = h.window();
    let cfg = cfg(2, w);
    assert!(h.driver().try_acquire("k", &cfg).await.unwrap());
    h.pass(w / 2).await;
    assert!(h.driver().try_acquire("k", &cfg).await.unwrap());
    for _ in 0..5 {
        assert!(!h.driver().try_acquire("k", &cfg).await.unwrap());
    }
    // One window after the first hit, that hit is out (the window is
    // half-open) and the second is in: exactly one place, whatever the
    // refused calls did.
    h.pass(w / 2).await;
    let d = h.driver().acquire("k", &cfg).await.unwrap();
    assert!(d.allowed);
    assert_eq!(d.remaining, 0);
    assert!(!h.driver().try_acquire("k", &cfg).await.unwrap());
}

pub async fn a_whole_window_later_the_bucket_is_full_again(h: &impl Harness) {
    let w = h.window();
    let cfg = cfg(4, w);
    for _ in 0..4 {
        assert!(h.driver().try_acquire("k", &cfg).await.unwrap());
    }
    assert!(!h.driver().try_acquire("k", &cfg).await.unwrap());
    h.pass(w).await;
    assert_eq!(h.driver().retry_after("k", &cfg).await.unwrap(), None);
    for remaining in [3, 2, 1, 0] {
        assert_eq!(
            h.driver().acquire("k", &cfg).await.unwrap().remaining,
            remaining
        );
    }
    assert!(!h.driver().try_acquire("k", &cfg).await.unwrap());
}

pub async fn retry_after_is_the_wait_for_the_oldest_hit(h: &impl Harness) {
    let w = h.window();
    let cfg = cfg(2, w);
    assert_eq!(h.driver().retry_after("k", &cfg).await.unwrap(), None);
    assert!(h.driver().try_acquire("k", &cfg).await.unwrap());
    assert_eq!(h.driver().retry_after("k", &cfg).await.unwrap(), None);
    h.pass(w / 4).await;
    assert!(h.driver().try_acquire("k", &cfg).await.unwrap());
    let wait = h.driver().retry_after("k", &cfg).await.unwrap();
    assert_wait(wait, w - w / 4, h.slack());
    let refused = h.driver().acquire("k", &cfg).await.unwrap();
    assert!(!refused.allowed);
    assert_wait(refused.retry_after, w - w / 4, h.slack());
}

pub async fn retry_after_records_nothing(h: &impl Harness) {
    let cfg = cfg(2, h.window());
    assert!(h.driver().try_acquire("k", &cfg).await.unwrap());
    for _ in 0..5 {
        assert_eq!(h.driver().retry_after("k", &cfg).await.unwrap(), None);
    }
    assert_eq!(h.driver().acquire("k", &cfg).await.unwrap().remaining, 0);
}

pub async fn keys_are_independent(h: &impl Harness) {
    let cfg = cfg(1, h.window());
    assert!(h.driver().try_acquire("a", &cfg).await.unwrap());
    assert!(!h.driver().try_acquire("a", &cfg).await.unwrap());
    assert!(h.driver().try_acquire("b", &cfg).await.unwrap());
    assert_eq!(h.driver().retry_after("c", &cfg).await.unwrap(), None);
}

pub async fn a_zero_limit_refuses_everything(h: &impl Harness) {
    let w = h.window();
    let cfg = cfg(0, w);
    let ceil_secs =
        |at: Duration| i64::try_from(at.as_secs() + u64::from(at.subsec_nanos() > 0)).unwrap();
    let before = h.now();
    let d = h.driver().acquire("k", &cfg).await.unwrap();
    let after = h.now();
    assert!(!d.allowed);
    assert_eq!((d.limit, d.remaining, d.retry_after), (0, 0, Some(w)));
    // A refusal tells when to come back in X-RateLimit-Reset too: a whole
    // window from now.
    let reset = d
        .reset_at
        .expect("a refusal under a zero limit has a reset");
    assert!(
        (ceil_secs(before + w)..=ceil_secs(after + w)).contains(&reset),
        "{reset} not a window after {before:?}..{after:?}"
    );
    assert!(!h.driver().try_acquire("k", &cfg).await.unwrap());
    assert_eq!(h.driver().retry_after("k", &cfg).await.unwrap(), Some(w));
    // Nothing was recorded: the same key under a real limit is empty.
    let d = h.driver().acquire("k", &self::cfg(1, w)).await.unwrap();
    assert!(d.allowed);
}

pub async fn a_window_under_one_millisecond_is_a_config_error(h: &impl Harness) {
    for window in [Duration::ZERO, Duration::from_micros(999)] {
        let cfg = cfg(5, window);
        let err = h.driver().acquire("k", &cfg).await.unwrap_err();
        assert!(matches!(err, RateLimitError::Config(_)), "{err:?}");
        assert!(!err.is_backend());
        let err = h.driver().try_acquire("k", &cfg).await.unwrap_err();
        assert!(matches!(err, RateLimitError::Config(_)), "{err:?}");
        let err = h.driver().retry_after("k", &cfg).await.unwrap_err();
        assert!(matches!(err, RateLimitError::Config(_)), "{err:?}");
    }
}

pub async fn a_lowered_limit_waits_for_enough_hits_to_leave(h: &impl Harness) {
    let w = h.window();
    let three = cfg(3, w);
    assert!(h.driver().try_acquire("k", &three).await.unwrap());
    h.pass(w / 4).await;
    assert!(h.driver().try_acquire("k", &three).await.unwrap());
    h.pass(w / 4).await;
    assert!(h.driver().try_acquire("k", &three).await.unwrap());
    // Three hits held, a limit of two: a place frees when two hits are
    // left, that is when the second hit leaves, at w/4 + w (the oldest
    // leaving, at w, is not enough).
    let two = cfg(2, w);
    let expected = w / 4 + w - w / 2;
    let refused = h.driver().acquire("k", &two).await.unwrap();
    assert!(!refused.allowed);
    assert_eq!((refused.limit, refused.remaining), (2, 0));
    assert_wait(refused.retry_after, expected, h.slack());
    assert_wait(
        h.driver().retry_after("k", &two).await.unwrap(),
        expected,
        h.slack(),
    );
}

/// Starts one task per driver, all at once, each making `attempts` calls on
/// `key`, and returns how many calls were admitted in all. Pass clones of
/// one driver to contend inside one process, or drivers on separate
/// connections to contend across connections.
pub async fn admitted_by_contenders(
    drivers: Vec<Arc<dyn RateLimiterDriver>>,
    attempts: u32,
    key: &str,
    cfg: SlidingWindowConfig,
) -> u32 {
    let start = Arc::new(tokio::sync::Barrier::new(drivers.len()));
    let tasks: Vec<_> = drivers
        .into_iter()
        .map(|driver| {
            let (start, key) = (start.clone(), key.to_owned());
            tokio::spawn(async move {
                start.wait().await;
                let mut admitted = 0;
                for _ in 0..attempts {
                    admitted += u32::from(driver.try_acquire(&key, &cfg).await.unwrap());
                    tokio::task::yield_now().await;
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for task in tasks {
        admitted += task.await.unwrap();
    }
    admitted
}
