//! The Laravel-shape `RateLimiter` on the memory store and the test clock:
//! every method, Laravel's observed values, the static facade over the
//! container, and exact counts under concurrency.

mod limiter_concurrency;
mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use suprnova::RateLimiter;
use suprnova::cache::{Cache, IncrementOutcome, MemoryStore, Store};
use suprnova::chrono::{self, DateTime, Utc};
use suprnova::clock::{Clock, FakeClock};
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;

/// 2000-01-01T00:00:00Z, the instant of Laravel's observed runs.
const Y2K: u64 = 946_684_800;

fn limiter_at(clock: &FakeClock) -> (CacheRateLimiter, Arc<MemoryStore>) {
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    (CacheRateLimiter::new(store.clone(), clock.shared()), store)
}

#[tokio::test]
async fn laravels_observed_basics() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    assert_eq!(store.get("k").await.unwrap().as_deref(), Some("1"));
    assert_eq!(
        store.get("k:timer").await.unwrap().as_deref(),
        Some("946684860")
    );
    assert_eq!(store.ttl("k").await.unwrap(), Some(Duration::from_secs(60)));
    assert_eq!(
        store.ttl("k:timer").await.unwrap(),
        Some(Duration::from_secs(60))
    );
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 2);
    assert_eq!(limiter.remaining("k", 5).await.unwrap(), 3);
    assert_eq!(limiter.retries_left("k", 1).await.unwrap(), 0);
    assert!(limiter.too_many_attempts("k", 2).await.unwrap());
    assert!(!limiter.too_many_attempts("k", 3).await.unwrap());
    assert_eq!(limiter.available_in("k").await.unwrap(), 60);
    clock.advance(Duration::from_millis(59_999));
    assert_eq!(limiter.available_in("k").await.unwrap(), 1);
    assert!(limiter.too_many_attempts("k", 2).await.unwrap());
    clock.advance(Duration::from_millis(1));
    assert_eq!(limiter.available_in("k").await.unwrap(), 0);
    assert_eq!(limiter.attempts("k").await.unwrap(), 0);
    assert!(!limiter.too_many_attempts("k", 2).await.unwrap());

    assert_eq!(limiter.increment("i", 10, 5).await.unwrap(), 5);
    assert_eq!(limiter.decrement("i", 10, 2).await.unwrap(), 3);

    let runs = AtomicUsize::new(0);
    let attempt = || {
        limiter.attempt(
            "a",
            2,
            || async {
                runs.fetch_add(1, Ordering::SeqCst);
                "foo"
            },
            60,
        )
    };
    assert_eq!(attempt().await.unwrap(), Some("foo"));
    assert_eq!(attempt().await.unwrap(), Some("foo"));
    assert_eq!(attempt().await.unwrap(), None);
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "the refused attempt ran nothing"
    );
    assert_eq!(limiter.attempts("a").await.unwrap(), 2);

    assert_eq!(limiter.attempts("unknown").await.unwrap(), 0);
    assert_eq!(limiter.remaining("unknown", 7).await.unwrap(), 7);
    assert_eq!(limiter.available_in("unknown").await.unwrap(), 0);
    assert!(!limiter.reset_attempts("unknown").await.unwrap());
}

/// `hit_for_minute` opens a window of sixty seconds on a fresh key.
#[tokio::test]
async fn hit_for_minute_opens_a_minute() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    assert_eq!(limiter.hit_for_minute("m").await.unwrap(), 1);
    assert_eq!(limiter.available_in("m").await.unwrap(), 60);
    assert_eq!(store.ttl("m").await.unwrap(), Some(Duration::from_secs(60)));
    assert_eq!(
        store.get("m:timer").await.unwrap().as_deref(),
        Some("946684860")
    );
}

/// `attempt` counts before its callback runs; a full count whose timer is
/// gone is reset, as `too_many_attempts` resets it; a maximum of 0 runs
/// nothing and counts nothing.
#[tokio::test]
async fn attempt_counts_before_the_callback_and_reopens_an_ended_window() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    let seen = limiter
        .attempt("a", 2, || limiter.attempts("a"), 60)
        .await
        .unwrap();
    assert_eq!(
        seen.unwrap().unwrap(),
        1,
        "the callback sees its own attempt"
    );

    assert_eq!(limiter.hit("a", 60).await.unwrap(), 2);
    assert_eq!(
        limiter.attempt("a", 2, || async {}, 60).await.unwrap(),
        None
    );
    assert_eq!(limiter.attempts("a").await.unwrap(), 2);
    // The timer gone and the count left at its maximum: a new window.
    assert!(store.forget("a:timer").await.unwrap());
    assert_eq!(
        limiter
            .attempt("a", 2, || async { "ran" }, 60)
            .await
            .unwrap(),
        Some("ran")
    );
    assert_eq!(limiter.attempts("a").await.unwrap(), 1);
    assert_eq!(
        store.get("a:timer").await.unwrap().as_deref(),
        Some("946684860")
    );

    assert_eq!(
        limiter
            .attempt("zero", 0, || async { unreachable!() }, 60)
            .await
            .unwrap(),
        None::<()>
    );
    assert_eq!(store.get("zero").await.unwrap(), None);
}

#[tokio::test]
async fn a_window_opened_at_half_a_second_reports_zero_seconds_before_it_ends() {
    let clock = FakeClock::at_unix(Y2K);
    clock.advance(Duration::from_millis(500));
    let (limiter, store) = limiter_at(&clock);
    limiter.hit("k", 60).await.unwrap();
    assert_eq!(
        store.get("k:timer").await.unwrap().as_deref(),
        Some("946684860")
    );
    clock.advance(Duration::from_millis(59_700)); // 00:01:00.200
    assert!(limiter.too_many_attempts("k", 1).await.unwrap());
    assert_eq!(limiter.available_in("k").await.unwrap(), 0);
    clock.advance(Duration::from_millis(300)); // 00:01:00.500
    assert!(!limiter.too_many_attempts("k", 1).await.unwrap());
}

#[tokio::test]
async fn later_hits_do_not_extend_the_window() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    limiter.hit("k", 60).await.unwrap();
    clock.advance(Duration::from_secs(45));
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 2);
    assert_eq!(store.ttl("k").await.unwrap(), Some(Duration::from_secs(15)));
    assert_eq!(
        store.ttl("k:timer").await.unwrap(),
        Some(Duration::from_secs(15))
    );
    assert_eq!(limiter.available_in("k").await.unwrap(), 15);
    clock.advance(Duration::from_secs(15));
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    assert_eq!(
        store.get("k:timer").await.unwrap().as_deref(),
        Some("946684920")
    );
}

#[tokio::test]
async fn a_full_counter_whose_timer_is_gone_is_reset() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    for _ in 0..3 {
        limiter.hit("k", 60).await.unwrap();
    }
    assert!(store.forget("k:timer").await.unwrap());
    assert!(!limiter.too_many_attempts("k", 3).await.unwrap());
    assert_eq!(
        store.get("k").await.unwrap(),
        None,
        "the counter was removed"
    );
    // The next hit opens a new window with a new timer.
    clock.advance(Duration::from_secs(10));
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    assert_eq!(
        store.get("k:timer").await.unwrap().as_deref(),
        Some("946684870")
    );
    // Below the maximum, a missing timer changes nothing.
    limiter.hit("k", 60).await.unwrap();
    store.forget("k:timer").await.unwrap();
    assert!(!limiter.too_many_attempts("k", 3).await.unwrap());
    assert_eq!(limiter.attempts("k").await.unwrap(), 2);
}

#[tokio::test]
async fn hit_until_opens_a_window_that_ends_at_the_given_time() {
    let clock = FakeClock::at_unix(Y2K);
    clock.advance(Duration::from_millis(250));
    let (limiter, store) = limiter_at(&clock);
    let until = DateTime::<Utc>::from_timestamp(Y2K as i64 + 7_200, 0).unwrap();
    assert_eq!(limiter.hit_until("exports:user:1", until).await.unwrap(), 1);
    assert_eq!(
        store.get("exports:user:1:timer").await.unwrap().as_deref(),
        Some("946692000")
    );
    // 7199.75 seconds left, rounded up to whole seconds.
    assert_eq!(
        store.ttl("exports:user:1").await.unwrap(),
        Some(Duration::from_secs(7_200))
    );
    assert_eq!(limiter.available_in("exports:user:1").await.unwrap(), 7_200);
    assert_eq!(limiter.hit_until("exports:user:1", until).await.unwrap(), 2);
}

#[tokio::test]
async fn hit_until_a_past_time_counts_only_in_an_open_window() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    let past = DateTime::<Utc>::from_timestamp(Y2K as i64 - 1, 0).unwrap();
    // No window is open: the hit leaves nothing behind.
    assert_eq!(limiter.hit_until("k", past).await.unwrap(), 1);
    assert_eq!(store.get("k").await.unwrap(), None);
    assert_eq!(store.get("k:timer").await.unwrap(), None);
    assert_eq!(limiter.attempts("k").await.unwrap(), 0);
    // An open window counts it, and keeps its own end.
    limiter.hit("k", 60).await.unwrap();
    clock.advance(Duration::from_secs(20));
    assert_eq!(limiter.hit_until("k", past).await.unwrap(), 2);
    assert_eq!(store.ttl("k").await.unwrap(), Some(Duration::from_secs(40)));
    assert_eq!(
        store.get("k:timer").await.unwrap().as_deref(),
        Some("946684860")
    );
    // Now is already past too.
    let now = clock.now_utc();
    assert_eq!(limiter.hit_until("other", now).await.unwrap(), 1);
    assert_eq!(store.get("other").await.unwrap(), None);
}

/// A window of 0 seconds on a key no window counts.
#[tokio::test]
async fn a_window_of_zero_seconds_never_limits_and_stores_nothing() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    for _ in 0..3 {
        assert_eq!(limiter.hit("k", 0).await.unwrap(), 1);
        assert!(!limiter.hit_and_check("k", 1, 0).await.unwrap());
    }
    assert!(store.is_empty());
    assert_eq!(
        limiter.increment_if_below("k", 0, 1, 1).await.unwrap(),
        IncrementOutcome {
            counted: true,
            count: 1
        }
    );
    assert!(store.is_empty());
}

/// A window of 0 seconds opens none, but counts in the one an earlier hit
/// opened, as Laravel's `hit` with a decay of 0 increments a counter that
/// exists: `attempt` and `increment_if_below` count in it up to their
/// maximum, keep its time to live and refuse while its timer is there. A
/// full counter whose timer is gone is removed, and the call goes on as on
/// a key with no counter.
#[tokio::test]
async fn a_window_of_zero_seconds_counts_in_an_open_window() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    let outcome = |counted, count| IncrementOutcome { counted, count };
    let runs = AtomicUsize::new(0);
    let attempt =
        |key: &'static str, max| support::attempt_with_no_window(&limiter, &runs, key, max);
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    clock.advance(Duration::from_secs(10));
    assert_eq!(attempt("k", 5).await, Some("ran"));
    assert_eq!(limiter.attempts("k").await.unwrap(), 2);
    assert_eq!(
        limiter.increment_if_below("k", 0, 1, 3).await.unwrap(),
        outcome(true, 3)
    );
    // The window's time to live and timer are the first hit's.
    assert_eq!(store.ttl("k").await.unwrap(), Some(Duration::from_secs(50)));
    assert_eq!(
        store.get("k:timer").await.unwrap().as_deref(),
        Some("946684860")
    );
    // Full: refused, by this window and by the one of 60 seconds.
    assert_eq!(
        limiter.increment_if_below("k", 0, 1, 3).await.unwrap(),
        outcome(false, 3)
    );
    assert_eq!(
        limiter.increment_if_below("k", -5, 2, 4).await.unwrap(),
        outcome(false, 3)
    );
    assert_eq!(
        limiter.increment_if_below("k", 60, 1, 3).await.unwrap(),
        outcome(false, 3)
    );
    assert_eq!(attempt("k", 3).await, None);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(limiter.attempts("k").await.unwrap(), 3);
    assert_eq!(
        limiter.increment_if_below("k", 0, 1, 4).await.unwrap(),
        outcome(true, 4)
    );
    // Full without its timer: removed, and counted as on no counter.
    store.forget("k:timer").await.unwrap();
    assert_eq!(
        limiter.increment_if_below("k", 0, 1, 4).await.unwrap(),
        outcome(true, 1)
    );
    assert_eq!(store.get("k").await.unwrap(), None);
    assert!(store.is_empty());

    // The same through `attempt`, whose check removes the full counter.
    limiter.hit("a", 60).await.unwrap();
    limiter.hit("a", 60).await.unwrap();
    store.forget("a:timer").await.unwrap();
    assert_eq!(attempt("a", 2).await, Some("ran"));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    assert!(store.is_empty());
    // A key with no counter: counted every time, nothing stored.
    for _ in 0..3 {
        assert_eq!(attempt("none", 1).await, Some("ran"));
    }
    assert!(store.is_empty());
}

#[tokio::test]
async fn hit_and_check_counts_then_compares_and_max_i64_is_unlimited() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, _) = limiter_at(&clock);
    let over: Vec<bool> = {
        let mut v = Vec::new();
        for _ in 0..4 {
            v.push(limiter.hit_and_check("login:1.2.3.4", 2, 60).await.unwrap());
        }
        v
    };
    assert_eq!(over, [false, false, true, true]);
    assert_eq!(
        limiter.attempts("login:1.2.3.4").await.unwrap(),
        4,
        "refused hits count"
    );
    for _ in 0..5 {
        assert!(!limiter.hit_and_check("free", i64::MAX, 60).await.unwrap());
    }
    assert_eq!(limiter.attempts("free").await.unwrap(), 5);
    assert!(!limiter.too_many_attempts("free", i64::MAX).await.unwrap());
    assert_eq!(
        limiter.remaining("free", i64::MAX).await.unwrap(),
        i64::MAX - 5
    );
}

#[tokio::test]
async fn reset_attempts_keeps_the_timer_and_clear_removes_both() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    limiter.hit("k", 60).await.unwrap();
    limiter.hit("k", 60).await.unwrap();
    assert!(limiter.reset_attempts("k").await.unwrap());
    assert_eq!(limiter.attempts("k").await.unwrap(), 0);
    assert_eq!(
        limiter.available_in("k").await.unwrap(),
        60,
        "the window stays pinned"
    );
    // The next hit counts in the pinned window.
    clock.advance(Duration::from_secs(10));
    limiter.hit("k", 60).await.unwrap();
    assert_eq!(
        store.get("k:timer").await.unwrap().as_deref(),
        Some("946684860")
    );
    limiter.clear("k").await.unwrap();
    assert!(store.is_empty());
    assert_eq!(limiter.available_in("k").await.unwrap(), 0);
}

#[tokio::test]
async fn decrement_can_go_below_zero() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    assert_eq!(limiter.decrement("d", 30, 2).await.unwrap(), -2);
    assert_eq!(store.ttl("d").await.unwrap(), Some(Duration::from_secs(30)));
    assert_eq!(limiter.hit("d", 30).await.unwrap(), -1);
    assert_eq!(limiter.remaining("d", 3).await.unwrap(), 4);
}

#[tokio::test]
async fn increment_if_below_counts_only_while_the_window_has_room() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    for count in 1..=3 {
        assert_eq!(
            limiter.increment_if_below("api:a", 60, 1, 3).await.unwrap(),
            IncrementOutcome {
                counted: true,
                count
            }
        );
    }
    assert_eq!(
        limiter.increment_if_below("api:a", 60, 1, 3).await.unwrap(),
        IncrementOutcome {
            counted: false,
            count: 3
        }
    );
    assert_eq!(
        store.get("api:a:timer").await.unwrap().as_deref(),
        Some("946684860")
    );
    assert!(limiter.too_many_attempts("api:a", 3).await.unwrap());
    // An amount above the ceiling never counts and opens no window.
    assert_eq!(
        limiter.increment_if_below("api:b", 60, 4, 3).await.unwrap(),
        IncrementOutcome {
            counted: false,
            count: 0
        }
    );
    assert_eq!(store.get("api:b").await.unwrap(), None);
    assert_eq!(store.get("api:b:timer").await.unwrap(), None);
    clock.advance(Duration::from_secs(60));
    assert!(
        limiter
            .increment_if_below("api:a", 60, 1, 3)
            .await
            .unwrap()
            .counted
    );
}

#[tokio::test]
async fn keys_are_cleaned_once_by_every_method() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, store) = limiter_at(&clock);
    limiter.hit("café", 60).await.unwrap();
    limiter.hit("cafe", 60).await.unwrap();
    assert_eq!(limiter.attempts("cafe").await.unwrap(), 2);
    assert_eq!(limiter.attempts("café").await.unwrap(), 2);
    assert_eq!(store.get("cafe").await.unwrap().as_deref(), Some("2"));

    // A key that keeps an entity: Laravel's remaining() and clear() clean it
    // twice and miss the counter; here every method finds it.
    limiter.hit("it's", 60).await.unwrap();
    limiter.hit("it's", 60).await.unwrap();
    assert_eq!(store.get("it&#039;s").await.unwrap().as_deref(), Some("2"));
    assert_eq!(limiter.remaining("it's", 5).await.unwrap(), 3);
    assert_eq!(limiter.retries_left("it's", 5).await.unwrap(), 3);
    assert!(limiter.too_many_attempts("it's", 2).await.unwrap());
    assert_eq!(limiter.available_in("it's").await.unwrap(), 60);
    limiter.clear("it's").await.unwrap();
    assert_eq!(store.get("it&#039;s").await.unwrap(), None);
    assert_eq!(store.get("it&#039;s:timer").await.unwrap(), None);
    assert_eq!(
        CacheRateLimiter::clean_rate_limiter_key("it's"),
        "it&#039;s"
    );
}

#[tokio::test]
async fn the_static_facade_acts_on_the_limiter_of_the_current_container() {
    let clock = FakeClock::at_unix(Y2K);
    let (limiter, _) = limiter_at(&clock);
    let app = App::new();
    app.install(Arc::new(limiter));
    app.scope(async {
        assert_eq!(RateLimiter::hit("login:1.2.3.4", 60).await.unwrap(), 1);
        assert_eq!(
            RateLimiter::hit_for_minute("login:1.2.3.4").await.unwrap(),
            2
        );
        assert_eq!(
            RateLimiter::increment("api:user:1", 60, 5).await.unwrap(),
            5
        );
        assert_eq!(
            RateLimiter::decrement("api:user:1", 60, 1).await.unwrap(),
            4
        );
        assert!(
            !RateLimiter::hit_and_check("login:1.2.3.4", 3, 60)
                .await
                .unwrap()
        );
        assert!(
            RateLimiter::hit_and_check("login:1.2.3.4", 3, 60)
                .await
                .unwrap()
        );
        assert_eq!(RateLimiter::attempts("login:1.2.3.4").await.unwrap(), 4);
        assert_eq!(RateLimiter::remaining("login:1.2.3.4", 5).await.unwrap(), 1);
        assert_eq!(
            RateLimiter::retries_left("login:1.2.3.4", 5).await.unwrap(),
            1
        );
        assert!(
            RateLimiter::too_many_attempts("login:1.2.3.4", 4)
                .await
                .unwrap()
        );
        clock.advance(Duration::from_secs(20));
        assert_eq!(
            RateLimiter::available_in("login:1.2.3.4").await.unwrap(),
            40
        );
        let window_end = clock.now_utc() + chrono::Duration::hours(2);
        assert_eq!(
            RateLimiter::hit_until("exports:user:1", window_end)
                .await
                .unwrap(),
            1
        );
        assert_eq!(
            RateLimiter::available_in("exports:user:1").await.unwrap(),
            7_200
        );
        assert_eq!(
            RateLimiter::increment_if_below("x", 60, 1, 1)
                .await
                .unwrap(),
            IncrementOutcome {
                counted: true,
                count: 1
            }
        );
        assert_eq!(
            RateLimiter::attempt("x", 1, || async { unreachable!() }, 60)
                .await
                .unwrap(),
            None::<()>
        );
        assert!(RateLimiter::reset_attempts("login:1.2.3.4").await.unwrap());
        RateLimiter::clear("exports:user:1").await.unwrap();
        assert_eq!(RateLimiter::attempts("exports:user:1").await.unwrap(), 0);
    })
    .await;
    // A second container counts apart.
    App::new()
        .scope(async { assert_eq!(RateLimiter::attempts("api:user:1").await.unwrap(), 0) })
        .await;
}

#[tokio::test]
async fn without_a_limiter_the_facade_builds_one_over_the_installed_store() {
    let clock = FakeClock::at_unix(Y2K);
    let app = App::new();
    app.install::<dyn Store>(Arc::new(MemoryStore::with_clock(clock.shared())));
    app.scope(async {
        assert!(App::resolve::<CacheRateLimiter>().is_none());
        RateLimiter::hit("k", 60).await.unwrap();
        assert!(
            App::resolve::<CacheRateLimiter>().is_some(),
            "it was installed"
        );
        // The hit went to the installed store.
        assert_eq!(Cache::get("k").await.unwrap().as_deref(), Some("1"));
    })
    .await;
    // With no store either, it installs a memory store that Cache shares.
    App::new()
        .scope(async {
            RateLimiter::hit("k", 60).await.unwrap();
            assert_eq!(App::resolve::<dyn Store>().unwrap().name(), "memory");
            assert_eq!(Cache::get("k").await.unwrap().as_deref(), Some("1"));
        })
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_concurrent_clients_admit_exactly_the_limit() {
    for decide in limiter_concurrency::EVERY_WAY {
        for run in 0..3 {
            let clock = FakeClock::at_unix(Y2K);
            let shared = Arc::new(limiter_at(&clock).0);
            let admitted = limiter_concurrency::admitted(|| shared.clone(), "k", decide).await;
            assert_eq!(admitted, 100, "{decide:?}, run {run}");
        }
    }
}
