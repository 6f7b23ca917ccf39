//! The memory cache store on the test clock, and the `Cache` facade.

mod store_conformance;
mod support;

use std::sync::Arc;
use std::time::Duration;

use store_conformance::store_conformance_tests;
use support::clock_at;
use suprnova::cache::{Cache, CacheConfig, IncrementOutcome, MemoryStore, Store};
use suprnova::clock::FakeClock;
use suprnova::container::App;

async fn memory_store() -> ((), Arc<dyn Store>) {
    (
        (),
        Arc::new(MemoryStore::with_clock(clock_at(12, 0, 0).shared())),
    )
}

store_conformance_tests!(memory_store);

fn store_at_noon() -> (FakeClock, MemoryStore) {
    let clock = clock_at(12, 0, 0);
    let store = MemoryStore::with_clock(clock.shared());
    (clock, store)
}

#[tokio::test]
async fn an_entry_is_gone_at_the_exact_instant_it_expires() {
    let (clock, store) = store_at_noon();
    store.put("k", "1", Duration::from_secs(60)).await.unwrap();
    clock.advance(Duration::from_millis(59_999));
    assert_eq!(store.get("k").await.unwrap().as_deref(), Some("1"));
    assert_eq!(
        store.ttl("k").await.unwrap(),
        Some(Duration::from_millis(1))
    );
    clock.advance(Duration::from_millis(1));
    assert_eq!(store.get("k").await.unwrap(), None);
    assert_eq!(store.ttl("k").await.unwrap(), None);
    assert!(!store.forget("k").await.unwrap());
}

#[tokio::test]
async fn add_succeeds_again_once_the_entry_expired() {
    let (clock, store) = store_at_noon();
    assert!(store.add("k", "a", Duration::from_secs(5)).await.unwrap());
    clock.advance(Duration::from_secs(4));
    assert!(!store.add("k", "b", Duration::from_secs(5)).await.unwrap());
    clock.advance(Duration::from_secs(1));
    assert!(store.add("k", "c", Duration::from_secs(5)).await.unwrap());
    assert_eq!(store.get("k").await.unwrap().as_deref(), Some("c"));
    assert_eq!(store.ttl("k").await.unwrap(), Some(Duration::from_secs(5)));
}

#[tokio::test]
async fn increment_keeps_the_expiry_and_an_incremented_new_key_never_expires() {
    let (clock, store) = store_at_noon();
    store
        .put("windowed", "0", Duration::from_secs(10))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(6));
    assert_eq!(store.increment("windowed", 1).await.unwrap(), 1);
    assert_eq!(
        store.ttl("windowed").await.unwrap(),
        Some(Duration::from_secs(4))
    );
    assert_eq!(store.increment("bare", 1).await.unwrap(), 1);
    clock.advance(Duration::from_secs(86_400 * 365));
    assert_eq!(store.get("windowed").await.unwrap(), None);
    assert_eq!(store.get("bare").await.unwrap().as_deref(), Some("1"));
    // After expiry, an increment starts from 0 with no time to live.
    assert_eq!(store.increment("windowed", 1).await.unwrap(), 1);
    assert_eq!(store.ttl("windowed").await.unwrap(), None);
}

#[tokio::test]
async fn increment_if_below_opens_a_window_that_later_counts_do_not_extend() {
    let (clock, store) = store_at_noon();
    assert_eq!(
        store.increment_if_below("c", 10, 1, 2).await.unwrap(),
        IncrementOutcome {
            counted: true,
            count: 1
        }
    );
    clock.advance(Duration::from_secs(7));
    assert!(
        store
            .increment_if_below("c", 10, 1, 2)
            .await
            .unwrap()
            .counted
    );
    assert_eq!(store.ttl("c").await.unwrap(), Some(Duration::from_secs(3)));
    assert_eq!(
        store.increment_if_below("c", 10, 1, 2).await.unwrap(),
        IncrementOutcome {
            counted: false,
            count: 2
        }
    );
    clock.advance(Duration::from_secs(3));
    // The window ended: the next count opens a new one.
    assert_eq!(
        store.increment_if_below("c", 10, 1, 2).await.unwrap(),
        IncrementOutcome {
            counted: true,
            count: 1
        }
    );
    assert_eq!(store.ttl("c").await.unwrap(), Some(Duration::from_secs(10)));
}

#[tokio::test]
async fn ttl_counts_down_with_the_clock() {
    let (clock, store) = store_at_noon();
    store
        .put("k", "v", Duration::from_millis(2_500))
        .await
        .unwrap();
    assert_eq!(
        store.ttl("k").await.unwrap(),
        Some(Duration::from_millis(2_500))
    );
    clock.advance(Duration::from_millis(1_200));
    assert_eq!(
        store.ttl("k").await.unwrap(),
        Some(Duration::from_millis(1_300))
    );
    // Under a second is raised to one second.
    store.put("short", "v", Duration::ZERO).await.unwrap();
    assert_eq!(
        store.ttl("short").await.unwrap(),
        Some(Duration::from_secs(1))
    );
}

#[tokio::test]
async fn a_flood_of_distinct_keys_is_swept_once_it_expires() {
    let clock = clock_at(12, 0, 0);
    let store = MemoryStore::with_clock(clock.shared());
    for i in 0..10_000 {
        store
            .increment_if_below(&format!("ip:10.0.{}.{}", i / 256, i % 256), 30, 1, 5)
            .await
            .unwrap();
    }
    assert_eq!(store.len(), 10_000);
    // The windows ended, but the sweep is not due yet: the entries are still
    // held, though no read sees them.
    clock.advance(Duration::from_secs(30));
    assert_eq!(store.get("ip:10.0.0.1").await.unwrap(), None);
    assert_eq!(store.len(), 9_999);
    // The first call after the sweep interval removes them all.
    clock.advance(MemoryStore::DEFAULT_SWEEP_INTERVAL - Duration::from_secs(30));
    store
        .put("survivor", "1", Duration::from_secs(60))
        .await
        .unwrap();
    assert_eq!(store.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_increments_lose_no_count() {
    let store = Arc::new(MemoryStore::new());
    let tasks: Vec<_> = (0..20)
        .map(|_| {
            let store = store.clone();
            tokio::spawn(async move {
                for _ in 0..50 {
                    store.increment("shared", 1).await.unwrap();
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    assert_eq!(store.get("shared").await.unwrap().as_deref(), Some("1000"));
}

#[tokio::test]
async fn the_cache_facade_installs_a_memory_store_when_none_is_installed() {
    let app = App::new();
    app.scope(async {
        assert!(App::resolve::<dyn Store>().is_none());
        assert!(Cache::add("k", "v", Duration::from_secs(60)).await.unwrap());
        let installed = App::resolve::<dyn Store>().expect("the facade installed a store");
        assert_eq!(installed.name(), "memory");
        assert_eq!(installed.get("k").await.unwrap().as_deref(), Some("v"));
        assert!(Cache::has("k").await.unwrap());
        assert_eq!(Cache::increment("n", 2).await.unwrap(), 2);
        assert_eq!(Cache::decrement("n", 5).await.unwrap(), -3);
        assert!(Cache::forget("n").await.unwrap());
    })
    .await;
    // Another container does not see it.
    App::new()
        .scope(async { assert_eq!(Cache::get("k").await.unwrap(), None) })
        .await;
}

/// As Laravel's `Repository`: a time to live under a second (0 whole
/// seconds) makes `put` remove the key and `add` store nothing.
#[tokio::test]
async fn the_cache_facade_stores_nothing_for_no_whole_second() {
    App::new()
        .scope(async {
            Cache::put("p", "old", Duration::from_secs(60))
                .await
                .unwrap();
            Cache::put("p", "new", Duration::ZERO).await.unwrap();
            assert_eq!(Cache::get("p").await.unwrap(), None);
            for ttl in [Duration::ZERO, Duration::from_millis(500)] {
                assert!(!Cache::add("a", "v", ttl).await.unwrap(), "{ttl:?}");
                assert_eq!(Cache::get("a").await.unwrap(), None);
            }
            assert!(Cache::add("a", "v", Duration::from_secs(1)).await.unwrap());
        })
        .await;
}

#[tokio::test]
async fn the_cache_facade_uses_the_installed_store_and_its_clock() {
    let clock = clock_at(8, 0, 0);
    let app = App::new();
    CacheConfig::memory()
        .install_with_clock(&app, clock.shared())
        .unwrap();
    app.scope(async {
        Cache::put("k", "v", Duration::from_secs(30)).await.unwrap();
        assert_eq!(
            Cache::ttl("k").await.unwrap(),
            Some(Duration::from_secs(30))
        );
        assert_eq!(
            Cache::increment_if_below("c", 30, 2, 3).await.unwrap(),
            IncrementOutcome {
                counted: true,
                count: 2
            }
        );
        clock.advance(Duration::from_secs(30));
        assert_eq!(Cache::get("k").await.unwrap(), None);
        assert_eq!(Cache::get("c").await.unwrap(), None);
    })
    .await;
}

/// Whether a call on `k` under a limit of 2 in 10 seconds is admitted: by
/// `hit_and_check`, or by `increment_if_below`.
async fn two_in_ten_seconds(
    limiter: &suprnova::limiter::CacheRateLimiter,
    hit_and_check: bool,
) -> bool {
    if hit_and_check {
        !limiter.hit_and_check("k", 2, 10).await.unwrap()
    } else {
        limiter
            .increment_if_below("k", 10, 1, 2)
            .await
            .unwrap()
            .counted
    }
}

/// The crate's fake clock, except that the one caller on the thread named
/// `late` is held right after it read the time, until the test lets it go:
/// what a thread preempted between its read of the clock and its lock does.
#[derive(Debug)]
struct PausingClock {
    inner: FakeClock,
    armed: std::sync::atomic::AtomicBool,
    read: std::sync::Barrier,
    release: std::sync::Barrier,
}

impl suprnova::clock::Clock for PausingClock {
    fn now(&self) -> Duration {
        let now = suprnova::clock::Clock::now(&self.inner);
        if std::thread::current().name() == Some("late")
            && self.armed.swap(false, std::sync::atomic::Ordering::SeqCst)
        {
            self.read.wait();
            self.release.wait();
        }
        now
    }
}

/// A caller reads the clock a second before a full window of 2 ends and is
/// held; the window ends and a read removes the expired counter
/// (`attempts`, as a throttle of several limits checks, or the sweep) or
/// the expired timer (`available_in`); then the caller goes on. It acts at
/// a time no earlier than the removal, so it counts in the new window,
/// which admits 2 with it and ends a whole window after the removal.
///
/// Held one second and acting at its own time, it found no counter under
/// the old timer and made one that ended a second before the next
/// window's timer, which then counted from 0 again: 3 admitted in the
/// window after. Held three seconds, it was taken for a clock stepped back
/// and acted at its own time: it found the timer gone and opened a window
/// that ended three seconds early, or kept counting under the old one.
#[test]
fn a_caller_held_across_a_window_end_counts_in_the_new_window() {
    use suprnova::limiter::CacheRateLimiter;
    for (held, read_timer) in [(1, false), (1, true), (3, false), (3, true)] {
        for hit_and_check in [false, true] {
            let case =
                format!("held {held} s, timer read {read_timer}, hit_and_check {hit_and_check}");
            let take_on = move |limiter: Arc<CacheRateLimiter>| async move {
                two_in_ten_seconds(&limiter, hit_and_check).await
            };
            let fake = clock_at(12, 0, 0);
            let clock = Arc::new(PausingClock {
                inner: fake.clone(),
                armed: std::sync::atomic::AtomicBool::new(false),
                read: std::sync::Barrier::new(2),
                release: std::sync::Barrier::new(2),
            });
            let store = Arc::new(MemoryStore::with_clock(clock.clone()));
            let limiter = Arc::new(CacheRateLimiter::new(store, fake.shared()));
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            let take = |limiter: &Arc<CacheRateLimiter>| rt.block_on(take_on(limiter.clone()));
            // [0, 10): full.
            assert_eq!(
                [take(&limiter), take(&limiter), take(&limiter)],
                [true, true, false],
                "{case}"
            );
            fake.advance(Duration::from_secs(9));
            clock.armed.store(true, std::sync::atomic::Ordering::SeqCst);
            let late = {
                let limiter = limiter.clone();
                std::thread::Builder::new()
                    .name("late".into())
                    .spawn(move || {
                        let rt = tokio::runtime::Builder::new_current_thread()
                            .build()
                            .unwrap();
                        rt.block_on(take_on(limiter))
                    })
                    .unwrap()
            };
            clock.read.wait(); // the late caller has read 9
            fake.advance(Duration::from_secs(held)); // the window has ended
            if read_timer {
                assert_eq!(rt.block_on(limiter.available_in("k")).unwrap(), 0, "{case}");
            } else {
                assert_eq!(rt.block_on(limiter.attempts("k")).unwrap(), 0, "{case}");
            }
            clock.release.wait();
            let mut admitted = usize::from(late.join().unwrap());
            // [9 + held, 19 + held): a new window, limit 2, the late caller
            // in it.
            for _ in 0..3 {
                admitted += usize::from(take(&limiter));
            }
            fake.advance(Duration::from_secs(9)); // still in the new window
            for _ in 0..3 {
                admitted += usize::from(take(&limiter));
            }
            assert_eq!(admitted, 2, "{case}");
            assert_eq!(rt.block_on(limiter.available_in("k")).unwrap(), 1, "{case}");
        }
    }
}

/// Tasks hammer one key while the frozen clock moves on a second at a
/// time, so that windows end under them, and one task reads the count (as
/// a throttle of several limits checks): no window admits more than its
/// limit. 300 seconds of windows of 10 seconds are at most 31 windows of
/// 5. (Before callers acted at the time of a removal they came after, 160
/// to 167 were admitted.)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn no_window_admits_more_than_its_limit_while_windows_end_under_a_burst() {
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
    use suprnova::limiter::CacheRateLimiter;
    for way in 0..3 {
        let clock = clock_at(12, 0, 0);
        let store = Arc::new(MemoryStore::with_clock(clock.shared()));
        let limiter = Arc::new(CacheRateLimiter::new(store, clock.shared()));
        let stop = Arc::new(AtomicBool::new(false));
        let admitted = Arc::new(AtomicUsize::new(0));
        let mut tasks: Vec<_> = (0..6)
            .map(|_| {
                let (limiter, stop, admitted) = (limiter.clone(), stop.clone(), admitted.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let counted = match way {
                            0 => {
                                limiter
                                    .increment_if_below("k", 10, 1, 5)
                                    .await
                                    .unwrap()
                                    .counted
                            }
                            1 => limiter
                                .attempt("k", 5, || async {}, 10)
                                .await
                                .unwrap()
                                .is_some(),
                            _ => !limiter.hit_and_check("k", 5, 10).await.unwrap(),
                        };
                        if counted {
                            admitted.fetch_add(1, Ordering::SeqCst);
                        }
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        let (reader, stop_reader) = (limiter.clone(), stop.clone());
        tasks.push(tokio::spawn(async move {
            while !stop_reader.load(Ordering::SeqCst) {
                reader.attempts("k").await.unwrap();
                tokio::task::yield_now().await;
            }
        }));
        for _ in 0..300 {
            tokio::time::sleep(Duration::from_millis(2)).await;
            clock.advance(Duration::from_secs(1));
        }
        stop.store(true, Ordering::SeqCst);
        for task in tasks {
            task.await.unwrap();
        }
        let admitted = admitted.load(Ordering::SeqCst);
        assert!(
            admitted <= 31 * 5,
            "way {way}: {admitted} admitted in 31 windows of 5"
        );
    }
}

/// A wall clock stepped back an hour after a call removed expired entries:
/// a key first hit after the step waits one window (limit 1 per 60 s), not
/// until the clock is back where the removal was (3,660 s): a removal that
/// far ahead of a call's reading is a step, not a call held before its
/// lock.
#[tokio::test]
async fn a_clock_stepped_back_after_a_removal_ends_a_new_keys_window_after_one_window() {
    use suprnova::clock::Clock;
    use suprnova::limiter::CacheRateLimiter;
    let clock = clock_at(12, 0, 0);
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    let limiter = CacheRateLimiter::new(store, clock.shared());
    // One a minute on `key`: whether this call counted.
    let counted = |key: &'static str| {
        let limiter = &limiter;
        async move {
            limiter
                .increment_if_below(key, 60, 1, 1)
                .await
                .unwrap()
                .counted
        }
    };
    assert!(counted("a").await);
    clock.advance(Duration::from_secs(61));
    // Finds a's counter and timer expired, and removes them.
    assert_eq!(limiter.attempts("a").await.unwrap(), 0);
    clock.set(clock_at(11, 1, 1).now_utc());
    assert!(counted("b").await);
    assert!(!counted("b").await);
    assert_eq!(limiter.available_in("b").await.unwrap(), 60);
    clock.advance(Duration::from_secs(60));
    assert!(counted("b").await);
}

/// A counter written for 2 seconds (by `put`) that a window of 10 seconds
/// then counts on lives as long as the window's timer: the window, having
/// counted on the 1 it found, refuses for its whole 10 seconds. (The
/// counter ended after 2 seconds, and the window counted from 0 again: 2
/// more admitted under its limit of 2.)
#[tokio::test]
async fn a_counter_a_window_counts_on_lives_as_long_as_the_window() {
    use suprnova::limiter::CacheRateLimiter;
    for hit_and_check in [false, true] {
        let (clock, store) = store_at_noon();
        let store = Arc::new(store);
        let limiter = CacheRateLimiter::new(store.clone(), clock.shared());
        let take = || two_in_ten_seconds(&limiter, hit_and_check);
        store.put("k", "1", Duration::from_secs(2)).await.unwrap();
        assert!(take().await, "hit_and_check: {hit_and_check}");
        assert!(!take().await, "hit_and_check: {hit_and_check}");
        clock.advance(Duration::from_secs(2));
        assert_eq!(
            store.ttl("k").await.unwrap(),
            Some(Duration::from_secs(8)),
            "hit_and_check: {hit_and_check}"
        );
        assert!(!take().await, "hit_and_check: {hit_and_check}");
        clock.advance(Duration::from_millis(7_999));
        assert!(!take().await, "hit_and_check: {hit_and_check}");
        // hit_and_check counts every call, as Laravel's hit does.
        let counted = if hit_and_check { 5 } else { 2 };
        assert_eq!(limiter.attempts("k").await.unwrap(), counted);
        clock.advance(Duration::from_millis(1));
        assert!(take().await, "hit_and_check: {hit_and_check}");
        assert_eq!(limiter.attempts("k").await.unwrap(), 1);
    }
}
