//! One suite every cache store passes: the behaviour of the `Store` trait
//! that does not depend on time passing. `store_conformance_tests!(make)`
//! turns each check into a test; `run_all` runs them in turn on one store.

#![allow(dead_code)]

use std::time::Duration;

use suprnova::cache::{CacheError, IncrementOutcome, Store, WindowIncrement};

const MINUTE: Duration = Duration::from_secs(60);

pub async fn get_put_and_forget(store: &dyn Store, p: &str) {
    let k = format!("{p}k");
    assert_eq!(store.get(&k).await.unwrap(), None);
    assert!(!store.has(&k).await.unwrap());
    store.put(&k, "v1", MINUTE).await.unwrap();
    assert_eq!(store.get(&k).await.unwrap().as_deref(), Some("v1"));
    assert!(store.has(&k).await.unwrap());
    store.put(&k, "v2", MINUTE).await.unwrap();
    assert_eq!(store.get(&k).await.unwrap().as_deref(), Some("v2"));
    assert!(store.forget(&k).await.unwrap());
    assert!(!store.forget(&k).await.unwrap());
    assert_eq!(store.get(&k).await.unwrap(), None);
}

pub async fn add_sets_only_when_absent(store: &dyn Store, p: &str) {
    let k = format!("{p}k");
    assert!(store.add(&k, "first", MINUTE).await.unwrap());
    assert!(
        !store
            .add(&k, "second", Duration::from_secs(600))
            .await
            .unwrap()
    );
    assert_eq!(store.get(&k).await.unwrap().as_deref(), Some("first"));
    // The loser of add left the time to live alone too.
    let ttl = store.ttl(&k).await.unwrap().unwrap();
    assert!(ttl <= MINUTE && ttl > Duration::from_secs(55), "{ttl:?}");
}

pub async fn increment_and_decrement(store: &dyn Store, p: &str) {
    let k = format!("{p}n");
    assert_eq!(store.increment(&k, 1).await.unwrap(), 1);
    assert_eq!(store.increment(&k, 5).await.unwrap(), 6);
    assert_eq!(store.decrement(&k, 2).await.unwrap(), 4);
    assert_eq!(store.decrement(&k, 10).await.unwrap(), -6);
    // Integers are kept as plain decimal strings.
    assert_eq!(store.get(&k).await.unwrap().as_deref(), Some("-6"));
    // A missing key starts at 0 and gets no time to live, as INCRBY.
    assert_eq!(store.ttl(&k).await.unwrap(), None);
    assert_eq!(store.decrement(&format!("{p}m"), 3).await.unwrap(), -3);
}

pub async fn increment_keeps_the_time_to_live(store: &dyn Store, p: &str) {
    let k = format!("{p}n");
    assert!(store.add(&k, "0", MINUTE).await.unwrap());
    assert_eq!(store.increment(&k, 3).await.unwrap(), 3);
    let ttl = store.ttl(&k).await.unwrap().unwrap();
    assert!(ttl <= MINUTE && ttl > Duration::from_secs(55), "{ttl:?}");
}

pub async fn integer_operations_refuse_other_values(store: &dyn Store, p: &str) {
    let k = format!("{p}text");
    // The value's fault, not the backend's.
    let not_an_integer = |error: &CacheError| {
        matches!(error, CacheError::NotAnInteger { key, .. } if *key == k) && !error.is_backend()
    };
    for value in ["abc", "0x10", "1e3", " 7", "7 ", "inf", "nan", "1.5"] {
        store.put(&k, value, MINUTE).await.unwrap();
        let error = store.increment(&k, 1).await.unwrap_err();
        assert!(not_an_integer(&error), "{value:?}: {error:?}");
        let error = store.decrement(&k, 1).await.unwrap_err();
        assert!(not_an_integer(&error), "{value:?}: {error:?}");
        // Whether the count would fit under the ceiling or not.
        for ceiling in [10_000, 1] {
            let error = store
                .increment_if_below(&k, 60, 1, ceiling)
                .await
                .unwrap_err();
            assert!(
                not_an_integer(&error),
                "{value:?} under {ceiling}: {error:?}"
            );
        }
        assert_eq!(store.get(&k).await.unwrap().as_deref(), Some(value));
    }
    store.put(&k, &i64::MAX.to_string(), MINUTE).await.unwrap();
    let error = store.increment(&k, 1).await.unwrap_err();
    assert!(
        matches!(&error, CacheError::Overflow { key } if *key == k),
        "{error:?}"
    );
}

pub async fn increment_if_below_counts_up_to_the_ceiling(store: &dyn Store, p: &str) {
    let k = format!("{p}c");
    for expected in 1..=3 {
        assert_eq!(
            store.increment_if_below(&k, 60, 1, 3).await.unwrap(),
            IncrementOutcome {
                counted: true,
                count: expected
            }
        );
    }
    for _ in 0..2 {
        assert_eq!(
            store.increment_if_below(&k, 60, 1, 3).await.unwrap(),
            IncrementOutcome {
                counted: false,
                count: 3
            }
        );
    }
    assert_eq!(store.get(&k).await.unwrap().as_deref(), Some("3"));
    // An amount that would cross the ceiling does not count, even when a
    // smaller one would.
    let w = format!("{p}w");
    assert!(
        store
            .increment_if_below(&w, 60, 4, 5)
            .await
            .unwrap()
            .counted
    );
    assert_eq!(
        store.increment_if_below(&w, 60, 2, 5).await.unwrap(),
        IncrementOutcome {
            counted: false,
            count: 4
        }
    );
    assert_eq!(
        store.increment_if_below(&w, 60, 1, 5).await.unwrap(),
        IncrementOutcome {
            counted: true,
            count: 5
        }
    );
}

/// A counter written outside any window count (`put`, or made by a plain
/// `increment`) under a live timer is that window's count: full, it
/// refuses; it is a leftover only for the count that opens the timer.
pub async fn a_counter_put_full_under_a_live_timer_refuses(store: &dyn Store, p: &str) {
    let outcome = |counted, count| IncrementOutcome { counted, count };
    let (put, made) = (format!("{p}put"), format!("{p}made"));
    for key in [&put, &made] {
        store
            .put(&format!("{key}:timer"), "1796202328", MINUTE)
            .await
            .unwrap();
    }
    store.put(&put, "2", MINUTE).await.unwrap();
    store.increment(&made, 2).await.unwrap();
    assert_eq!(one_hit(store, &put, 2).await, outcome(false, 2));
    assert_eq!(one_hit(store, &made, 2).await, outcome(false, 2));
}

/// Counts are exact integers to the end of `i64`, as Redis's `INCRBY`
/// keeps them: an amount past 2^53, where a double would round it, counts
/// exactly, alone and in a window, and a refusal reports the exact count.
/// (Redis's script compares a count with its ceiling exactly up to 2^53.)
pub async fn counts_past_two_to_the_53_are_exact(store: &dyn Store, p: &str) {
    let (odd, big) = ((1_i64 << 53) + 1, 1_i64 << 62);
    let k = format!("{p}big");
    let outcome = |counted, count| IncrementOutcome { counted, count };
    assert_eq!(
        store
            .increment_if_below(&k, 60, odd, i64::MAX)
            .await
            .unwrap(),
        outcome(true, odd)
    );
    assert_eq!(
        store
            .increment_if_below(&k, 60, big, i64::MAX)
            .await
            .unwrap(),
        outcome(true, odd + big)
    );
    assert_eq!(
        store.increment_if_below(&k, 60, 1, odd).await.unwrap(),
        outcome(false, odd + big)
    );
    assert_eq!(store.get(&k).await.unwrap(), Some((odd + big).to_string()));
    let w = format!("{p}window");
    let timer = format!("{w}:timer");
    let hit = |amount| WindowIncrement {
        amount,
        ..one_hit_of(&w, &timer, i64::MAX)
    };
    assert_eq!(
        store.increment_in_window(hit(odd)).await.unwrap(),
        outcome(true, odd)
    );
    assert_eq!(
        store.increment_in_window(hit(big)).await.unwrap(),
        outcome(true, odd + big)
    );
    assert_eq!(store.get(&w).await.unwrap(), Some((odd + big).to_string()));
}

pub async fn increment_if_below_leaves_a_missing_key_missing(store: &dyn Store, p: &str) {
    let k = format!("{p}c");
    assert_eq!(
        store.increment_if_below(&k, 60, 5, 4).await.unwrap(),
        IncrementOutcome {
            counted: false,
            count: 0
        }
    );
    assert_eq!(store.get(&k).await.unwrap(), None);
}

pub async fn increment_if_below_gives_the_decay_only_to_keys_without_one(
    store: &dyn Store,
    p: &str,
) {
    // A new key gets the decay.
    let fresh = format!("{p}fresh");
    store.increment_if_below(&fresh, 30, 1, 10).await.unwrap();
    let ttl = store.ttl(&fresh).await.unwrap().unwrap();
    assert!(
        ttl <= Duration::from_secs(30) && ttl > Duration::from_secs(25),
        "{ttl:?}"
    );
    // A key with a time to live keeps it.
    let kept = format!("{p}kept");
    store
        .put(&kept, "1", Duration::from_secs(600))
        .await
        .unwrap();
    store.increment_if_below(&kept, 30, 1, 10).await.unwrap();
    let ttl = store.ttl(&kept).await.unwrap().unwrap();
    assert!(ttl > Duration::from_secs(590), "{ttl:?}");
    // A key that INCRBY created without one gets the decay.
    let bare = format!("{p}bare");
    store.increment(&bare, 2).await.unwrap();
    assert_eq!(store.ttl(&bare).await.unwrap(), None);
    assert_eq!(
        store
            .increment_if_below(&bare, 30, 1, 10)
            .await
            .unwrap()
            .count,
        3
    );
    let ttl = store.ttl(&bare).await.unwrap().unwrap();
    assert!(
        ttl <= Duration::from_secs(30) && ttl > Duration::from_secs(25),
        "{ttl:?}"
    );
}

pub async fn ttl_reads_what_is_left(store: &dyn Store, p: &str) {
    assert_eq!(store.ttl(&format!("{p}missing")).await.unwrap(), None);
    let k = format!("{p}k");
    store.put(&k, "1", Duration::from_secs(10)).await.unwrap();
    let ttl = store.ttl(&k).await.unwrap().unwrap();
    assert!(
        ttl <= Duration::from_secs(10) && ttl > Duration::from_secs(8),
        "{ttl:?}"
    );
    // A time to live under a second is raised to one second.
    let short = format!("{p}short");
    store
        .put(&short, "1", Duration::from_millis(10))
        .await
        .unwrap();
    let ttl = store.ttl(&short).await.unwrap().unwrap();
    assert!(ttl > Duration::from_millis(500), "{ttl:?}");
}

pub async fn keys_are_independent(store: &dyn Store, p: &str) {
    let (a, b) = (format!("{p}a"), format!("{p}a:timer"));
    store.increment(&a, 2).await.unwrap();
    store.put(&b, "1796202328", MINUTE).await.unwrap();
    assert_eq!(store.get(&a).await.unwrap().as_deref(), Some("2"));
    assert!(store.forget(&a).await.unwrap());
    assert_eq!(store.get(&b).await.unwrap().as_deref(), Some("1796202328"));
}

pub async fn increment_in_window_writes_the_timer_once_and_counts_to_the_ceiling(
    store: &dyn Store,
    p: &str,
) {
    // Counts under `<p><name>` with its timer `<p><name>:timer`, in a window
    // of 60 s that ends at `ends_at`.
    let count = async |name: &str, ends_at, amount, ceiling| {
        let key = format!("{p}{name}");
        store
            .increment_in_window(WindowIncrement {
                key: &key,
                timer_key: &format!("{key}:timer"),
                ends_at,
                decay_seconds: 60,
                amount,
                ceiling,
            })
            .await
    };
    let (k, timer) = (format!("{p}w"), format!("{p}w:timer"));
    let mut outcomes = Vec::new();
    for ends_at in [1_796_202_328, 1_796_202_329, 1_796_202_330] {
        outcomes.push(count("w", ends_at, 1, 2).await.unwrap());
    }
    let outcome = |counted, count| IncrementOutcome { counted, count };
    assert_eq!(
        outcomes,
        [outcome(true, 1), outcome(true, 2), outcome(false, 2)]
    );
    // The first call opened the window: its end stays in the timer.
    assert_eq!(
        store.get(&timer).await.unwrap().as_deref(),
        Some("1796202328")
    );
    assert_eq!(store.get(&k).await.unwrap().as_deref(), Some("2"));
    for key in [&k, &timer] {
        let ttl = store.ttl(key).await.unwrap().unwrap();
        assert!(
            ttl <= MINUTE && ttl > Duration::from_secs(55),
            "{key}: {ttl:?}"
        );
    }
    // A timer already there is kept, and an amount above the ceiling counts
    // nothing: a missing counter stays missing.
    let (lone, lone_timer) = (format!("{p}lone"), format!("{p}lone:timer"));
    store.put(&lone_timer, "1796200000", MINUTE).await.unwrap();
    assert_eq!(
        count("lone", 1_796_202_328, 5, 4).await.unwrap(),
        outcome(false, 0)
    );
    assert_eq!(store.get(&lone).await.unwrap(), None);
    assert_eq!(
        store.get(&lone_timer).await.unwrap().as_deref(),
        Some("1796200000")
    );
    // A counter that holds text is an error, as for INCRBY.
    let text = format!("{p}text");
    store.put(&text, "abc", MINUTE).await.unwrap();
    assert!(count("text", 1_796_202_328, 1, 10).await.is_err());
    assert_eq!(store.get(&text).await.unwrap().as_deref(), Some("abc"));
}

/// One hit on `key` with its timer `timer`, in a window of 60 s that ends
/// at 1,796,202,328, up to `ceiling`.
fn one_hit_of<'a>(key: &'a str, timer: &'a str, ceiling: i64) -> WindowIncrement<'a> {
    WindowIncrement {
        key,
        timer_key: timer,
        ends_at: 1_796_202_328,
        decay_seconds: 60,
        amount: 1,
        ceiling,
    }
}

/// [`one_hit_of`] `key`, its timer `<key>:timer`, counted.
async fn one_hit(store: &dyn Store, key: &str, ceiling: i64) -> IncrementOutcome {
    let timer = format!("{key}:timer");
    let hit = one_hit_of(key, &timer, ceiling);
    store.increment_in_window(hit).await.unwrap()
}

pub async fn a_window_count_that_does_not_count_reads_the_window_end(store: &dyn Store, p: &str) {
    let count = async |name: &str, ceiling| {
        let (key, timer) = (format!("{p}{name}"), format!("{p}{name}:timer"));
        let hit = one_hit_of(&key, &timer, ceiling);
        store.increment_in_window_or_window_end(hit).await.unwrap()
    };
    let outcome = |counted, count| IncrementOutcome { counted, count };
    assert_eq!(count("e", 1).await, (outcome(true, 1), None));
    assert_eq!(
        count("e", 1).await,
        (outcome(false, 1), Some(1_796_202_328))
    );
    // A timer that holds no integer tells no end.
    let garbled = format!("{p}g:timer");
    store.put(&garbled, "soon", MINUTE).await.unwrap();
    assert_eq!(count("g", 0).await, (outcome(false, 0), None));
}

/// A counter left full without its timer (the timer expired or was removed
/// alone) belongs to an ended window: the count that opens the next window
/// resets it and counts from 0, as Laravel's `tooManyAttempts` resets it. A
/// counter under its ceiling is counted on, living at least as long as the
/// window, and one whose timer is there still refuses. Full is with no
/// room for the amount, whatever the amount: under a ceiling of 10, an
/// amount of 3 resets a count of 8 (at the maximum of 8 the ceiling stands
/// for) and counts on a count of 7.
pub async fn a_window_count_resets_a_counter_left_full_without_its_timer(
    store: &dyn Store,
    p: &str,
) {
    let count = async |name: &str| one_hit(store, &format!("{p}{name}"), 2).await;
    let outcome = |counted, count| IncrementOutcome { counted, count };
    // Full, with a time to live of its own, and full with none at all.
    let (full, forever) = (format!("{p}full"), format!("{p}forever"));
    store
        .put(&full, "2", Duration::from_secs(300))
        .await
        .unwrap();
    store.increment(&forever, 2).await.unwrap();
    for (key, name) in [(&full, "full"), (&forever, "forever")] {
        assert_eq!(count(name).await, outcome(true, 1), "{name}");
        assert_eq!(store.get(key).await.unwrap().as_deref(), Some("1"));
        let ttl = store
            .ttl(key)
            .await
            .unwrap()
            .expect("a new window's time to live");
        assert!(
            ttl <= MINUTE && ttl > Duration::from_secs(55),
            "{name}: {ttl:?}"
        );
        // The window is open now: the next counts, the one after refuses.
        assert_eq!(count(name).await, outcome(true, 2), "{name}");
        assert_eq!(count(name).await, outcome(false, 2), "{name}");
    }
    // Under its ceiling, counted on.
    let under = format!("{p}under");
    store
        .put(&under, "1", Duration::from_secs(300))
        .await
        .unwrap();
    assert_eq!(count("under").await, outcome(true, 2));
    // Counted on, a counter that would end before the window it is now
    // counted in lives as long as the window: ending first, it would start
    // the window's count again before the window ends.
    let short = format!("{p}short");
    store
        .put(&short, "1", Duration::from_secs(2))
        .await
        .unwrap();
    assert_eq!(count("short").await, outcome(true, 2));
    let ttl = store.ttl(&short).await.unwrap().unwrap();
    assert!(ttl <= MINUTE && ttl > Duration::from_secs(55), "{ttl:?}");
    // One that ends after the window keeps its own time to live.
    let ttl = store.ttl(&under).await.unwrap().unwrap();
    assert!(ttl > Duration::from_secs(295), "{ttl:?}");
    // Three places at once, under a ceiling of 10.
    for (name, left, counted) in [("eight", "8", 3), ("seven", "7", 10)] {
        let (key, timer) = (format!("{p}{name}"), format!("{p}{name}:timer"));
        store
            .put(&key, left, Duration::from_secs(300))
            .await
            .unwrap();
        let three = WindowIncrement {
            amount: 3,
            ..one_hit_of(&key, &timer, 10)
        };
        let found = store.increment_in_window(three).await.unwrap();
        assert_eq!(found, outcome(true, counted), "{name}");
    }
}

/// A plain `increment` or `decrement` of a counter its open window counted
/// (a Laravel `hit` with a decay of 0, or `hit_until` a past time) leaves
/// it that window's counter: full, it refuses the next window count until
/// the window ends, as Laravel's `tooManyAttempts` refuses while the timer
/// is there.
pub async fn a_plain_increment_leaves_a_counter_in_its_window(store: &dyn Store, p: &str) {
    let key = format!("{p}w");
    let outcome = |counted, count| IncrementOutcome { counted, count };
    assert_eq!(one_hit(store, &key, 2).await, outcome(true, 1));
    assert_eq!(one_hit(store, &key, 2).await, outcome(true, 2));
    assert_eq!(store.increment(&key, 1).await.unwrap(), 3);
    assert_eq!(one_hit(store, &key, 2).await, outcome(false, 3));
    assert_eq!(store.decrement(&key, 1).await.unwrap(), 2);
    assert_eq!(one_hit(store, &key, 2).await, outcome(false, 2));
    assert_eq!(store.decrement(&key, 1).await.unwrap(), 1);
    assert_eq!(one_hit(store, &key, 2).await, outcome(true, 2));
}

/// An `increment_if_below` of a counter its open window counted (a rate
/// limiter's count with a window of 0 seconds) leaves it that window's
/// counter, with its time to live: full, it refuses the next window count
/// until the window ends, as the timer is still there.
pub async fn increment_if_below_leaves_a_counter_in_its_window(store: &dyn Store, p: &str) {
    let key = format!("{p}w");
    let outcome = |counted, count| IncrementOutcome { counted, count };
    assert_eq!(one_hit(store, &key, 2).await, outcome(true, 1));
    assert_eq!(
        store.increment_if_below(&key, 0, 1, 2).await.unwrap(),
        outcome(true, 2)
    );
    let ttl = store.ttl(&key).await.unwrap().unwrap();
    assert!(ttl <= MINUTE && ttl > Duration::from_secs(55), "{ttl:?}");
    assert_eq!(one_hit(store, &key, 2).await, outcome(false, 2));
    assert_eq!(
        store.increment_if_below(&key, 0, 1, 2).await.unwrap(),
        outcome(false, 2)
    );
    assert_eq!(store.get(&key).await.unwrap().as_deref(), Some("2"));
}

/// On a store that reads the timer and the counter apart (a cluster), a
/// counter left full without its timer cannot be told from one the new
/// window filled between the two reads: it is kept, and refuses until its
/// own time to live ends.
pub async fn a_window_count_apart_keeps_a_counter_left_full(store: &dyn Store, p: &str) {
    let key = format!("{p}full");
    store
        .put(&key, "2", Duration::from_secs(300))
        .await
        .unwrap();
    let outcome = one_hit(store, &key, 2).await;
    assert_eq!(
        outcome,
        IncrementOutcome {
            counted: false,
            count: 2
        }
    );
}

/// Every check in turn on one store that reads the two keys of a window
/// apart (a cluster), each under its own prefix.
pub async fn run_all(store: &dyn Store, p: &str) {
    get_put_and_forget(store, &format!("{p}1:")).await;
    add_sets_only_when_absent(store, &format!("{p}2:")).await;
    increment_and_decrement(store, &format!("{p}3:")).await;
    increment_keeps_the_time_to_live(store, &format!("{p}4:")).await;
    integer_operations_refuse_other_values(store, &format!("{p}5:")).await;
    increment_if_below_counts_up_to_the_ceiling(store, &format!("{p}6:")).await;
    increment_if_below_leaves_a_missing_key_missing(store, &format!("{p}7:")).await;
    increment_if_below_gives_the_decay_only_to_keys_without_one(store, &format!("{p}8:")).await;
    ttl_reads_what_is_left(store, &format!("{p}9:")).await;
    keys_are_independent(store, &format!("{p}10:")).await;
    increment_in_window_writes_the_timer_once_and_counts_to_the_ceiling(store, &format!("{p}11:"))
        .await;
    a_window_count_that_does_not_count_reads_the_window_end(store, &format!("{p}12:")).await;
    a_window_count_apart_keeps_a_counter_left_full(store, &format!("{p}13:")).await;
    a_plain_increment_leaves_a_counter_in_its_window(store, &format!("{p}14:")).await;
    counts_past_two_to_the_53_are_exact(store, &format!("{p}15:")).await;
    a_counter_put_full_under_a_live_timer_refuses(store, &format!("{p}16:")).await;
    increment_if_below_leaves_a_counter_in_its_window(store, &format!("{p}17:")).await;
}

/// One test per check. `$make` is an async fn returning `(guard, store)`;
/// the guard (a server, or `()`) lives until the test ends.
macro_rules! store_conformance_tests {
    ($make:ident) => {
        store_conformance_tests!(@each $make;
            get_put_and_forget,
            add_sets_only_when_absent,
            increment_and_decrement,
            increment_keeps_the_time_to_live,
            integer_operations_refuse_other_values,
            increment_if_below_counts_up_to_the_ceiling,
            increment_if_below_leaves_a_missing_key_missing,
            increment_if_below_gives_the_decay_only_to_keys_without_one,
            ttl_reads_what_is_left,
            keys_are_independent,
            increment_in_window_writes_the_timer_once_and_counts_to_the_ceiling,
            a_window_count_that_does_not_count_reads_the_window_end,
            a_window_count_resets_a_counter_left_full_without_its_timer,
            a_plain_increment_leaves_a_counter_in_its_window,
            counts_past_two_to_the_53_are_exact,
            a_counter_put_full_under_a_live_timer_refuses,
            increment_if_below_leaves_a_counter_in_its_window,
        );
    };
    (@each $make:ident; $($check:ident),* $(,)?) => {
        mod conformance {
            $(
                #[tokio::test]
                async fn $check() {
                    let (_guard, store) = super::$make().await;
                    let prefix = crate::support::unique_prefix(stringify!($check));
                    crate::store_conformance::$check(&*store, &prefix).await;
                }
            )*
        }
    };
}
pub(crate) use store_conformance_tests;
