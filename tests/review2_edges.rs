//! Edge cases of identity normalisation (case folding, IDNA), of a
//! window's counter when another call opened the window (memory, Redis
//! Cluster), of a window opened just before a clock steps back, and of
//! `attempt` in no window while a window is open.

mod support;

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use suprnova::Request;
use suprnova::cache::{MemoryStore, Store, WindowIncrement};
use suprnova::clock::FakeClock;
use suprnova::rate_limit::identity_key;

const JSON: &str = "application/json";

/// The per-recipient key of a JSON body's `email`, as the middleware
/// computes it after reading the body.
async fn key_of(email: &str) -> String {
    let body = format!("{{\"email\":\"{email}\"}}");
    let mut req = Request::new(
        http::Request::post("/reset")
            .header("content-type", JSON)
            .body(Full::new(Bytes::from(body)))
            .unwrap(),
    )
    .with_peer("203.0.113.50:4000".parse().unwrap());
    req.body_bytes(4096).await.unwrap();
    identity_key(&req, "email", "reset")
}

/// `straße.de` is, under IDNA (UTS 46, non-transitional, as the idna crate
/// writes it), `xn--strae-oqa.de`: one domain, two spellings. The identity
/// docs say a domain's Unicode and Punycode spellings share one bucket;
/// with ß folded to `ss` first, the Unicode spelling lands on
/// `strasse.de` and the Punycode one gets a bucket of its own, a way
/// around the per-recipient limit.
#[tokio::test]
async fn a_domain_with_sharp_s_shares_a_bucket_with_its_punycode_spelling() {
    assert_eq!(
        key_of("alice@straße.de").await,
        key_of("alice@xn--strae-oqa.de").await
    );
}

/// `straße.de` and `strasse.de` are two domains (two registrations, two
/// owners); their mailboxes must not share a bucket: one recipient's
/// requests would spend the other's limit.
#[tokio::test]
async fn a_domain_with_sharp_s_does_not_share_a_bucket_with_the_ss_domain() {
    assert_ne!(
        key_of("alice@straße.de").await,
        key_of("alice@strasse.de").await
    );
}

/// `οδος.gr` (ending in the final sigma ς) is `xn--pxavbm.gr` under IDNA;
/// folding first turns it into `οδοσ.gr`, which is `xn--pxavbq.gr`,
/// another domain.
#[tokio::test]
async fn a_domain_with_final_sigma_shares_a_bucket_with_its_punycode_spelling() {
    assert_eq!(
        key_of("alice@οδος.gr").await,
        key_of("alice@xn--pxavbm.gr").await
    );
}

/// Pinned: the Unicode and Punycode spellings of a domain without ß or ς
/// share a bucket, and IDNA on odd domains (empty labels, a trailing dot,
/// a very long one, characters IDNA refuses) neither panics nor makes a
/// key that is not the usual hashed one.
#[tokio::test]
async fn odd_unicode_domains_make_a_hashed_key_without_panicking() {
    assert_eq!(
        key_of("alice@Bücher.example").await,
        key_of("alice@xn--bcher-kva.example").await
    );
    let long = format!("alice@{}ü.example", "a".repeat(3000));
    for email in [
        "alice@bücher..example",
        "alice@bücher.example.",
        "alice@.ü",
        "alice@ü",
        "alice@\u{0300}ü.example",
        "alice@xn--ü.example",
        "alice@bü\u{fffd}cher.example",
        "@ü",
        long.as_str(),
    ] {
        let key = key_of(email).await;
        assert!(key.starts_with("reset:id:"), "{email}: {key}");
        assert_eq!(key.len(), "reset:id:".len() + 64, "{email}: {key}");
    }
}

/// A counter put with 5 seconds to live (value 1), then two calls at once
/// count under a limit of 2 in a window of 60 seconds. The counter must
/// end no earlier than the window: otherwise the window counts from 0
/// again after 5 seconds and admits more than 2. The opener extends the
/// counter only when it counts; when the other call counts first in the
/// window it found open, the opener is refused and the counter keeps its
/// 5 seconds.
#[test]
fn a_counter_never_ends_before_the_window_two_calls_counted_in() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let mut rounds = 0_u32;
    while std::time::Instant::now() < deadline && rounds < 200_000 {
        rounds += 1;
        let clock = FakeClock::at_unix(1_800_000_000);
        let store = Arc::new(MemoryStore::with_clock(clock.shared()));
        runtime.block_on(async {
            store.put("k", "1", Duration::from_secs(5)).await.unwrap();
        });
        let barrier = Arc::new(Barrier::new(2));
        let callers: Vec<_> = (0..2)
            .map(|_| {
                let store = store.clone();
                let barrier = barrier.clone();
                std::thread::spawn(move || {
                    let runtime = tokio::runtime::Builder::new_current_thread()
                        .build()
                        .unwrap();
                    barrier.wait();
                    runtime
                        .block_on(store.increment_in_window(WindowIncrement {
                            key: "k",
                            timer_key: "k:timer",
                            ends_at: 1_800_000_060,
                            decay_seconds: 60,
                            amount: 1,
                            ceiling: 2,
                        }))
                        .unwrap()
                        .counted
                })
            })
            .collect();
        let counted = callers
            .into_iter()
            .map(|caller| caller.join().unwrap())
            .filter(|&counted| counted)
            .count();
        assert_eq!(counted, 1, "round {rounds}");
        let (counter, timer) = runtime.block_on(async {
            (
                store.ttl("k").await.unwrap(),
                store.ttl("k:timer").await.unwrap(),
            )
        });
        assert!(
            counter >= timer,
            "round {rounds}: the counter ends in {counter:?}, its window in {timer:?}"
        );
    }
    eprintln!("{rounds} rounds");
}

/// After the wall clock steps back by 0.4 s, a window opened on key `b`
/// answers the time it has left from the clock's own reading: 60 seconds
/// for a window of 60, as it does when no other key was touched. The
/// opening of key `a`'s window just before the step is noted as a removal
/// is, so `b`'s call acts at `a`'s time (0.4 s later, into the next
/// second), its timer ends one second later, and `available_in` answers
/// 61: more than the window, and only because another key was counted.
#[tokio::test]
async fn a_window_opened_on_another_key_does_not_lengthen_a_window_after_a_step_back() {
    use suprnova::limiter::CacheRateLimiter;
    let at = |nanos: i64| chrono::DateTime::from_timestamp_nanos(nanos);
    let start = 1_800_000_000_200_000_000_i64;
    let mut answers = Vec::new();
    for touch_other_key in [false, true] {
        let clock = FakeClock::at_unix(0);
        clock.set(at(start));
        let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.shared()));
        let limiter = CacheRateLimiter::new(store, clock.shared());
        if touch_other_key {
            assert_eq!(limiter.hit("a", 60).await.unwrap(), 1);
        }
        clock.set(at(start - 400_000_000));
        assert_eq!(limiter.hit("b", 60).await.unwrap(), 1);
        answers.push(limiter.available_in("b").await.unwrap());
    }
    assert_eq!(answers, [60, 60], "untouched, then after a window on `a`");
}

/// An `attempt` in no window (a decay of 0) on a key whose 60-second
/// window is open with its count reset counts in that window, and the
/// count "is kept, and ends with the window, as `count` keeps it"
/// (`count_in_no_window`'s doc). Its counter is made by
/// `increment_if_below` with a time to live of 0, which the store makes
/// one second, and keeping it adds 0, which "leaves one that has a time to
/// live as it is": the count ends after one second, and a limit of 2 runs
/// the callback 2 more times in the same window. `hit` (a plain
/// `increment`, no time to live) keeps its count for the window.
#[tokio::test]
async fn an_attempt_in_no_window_keeps_its_count_until_the_open_window_ends() {
    use suprnova::limiter::CacheRateLimiter;
    let clock = support::clock_at(12, 0, 0);
    let store: Arc<dyn Store> = Arc::new(MemoryStore::with_clock(clock.shared()));
    let limiter = CacheRateLimiter::new(store, clock.shared());
    let runs = AtomicUsize::new(0);
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    assert!(limiter.reset_attempts("k").await.unwrap());
    let mut ran = 0;
    for _ in 0..2 {
        if support::attempt_with_no_window(&limiter, &runs, "k", 2)
            .await
            .is_some()
        {
            ran += 1;
        }
    }
    assert_eq!(ran, 2);
    clock.advance(Duration::from_secs(2));
    assert_eq!(limiter.available_in("k").await.unwrap(), 58);
    assert_eq!(
        limiter.attempts("k").await.unwrap(),
        2,
        "the window is open for 58 s more, its count of 2 is gone"
    );
    for _ in 0..2 {
        if support::attempt_with_no_window(&limiter, &runs, "k", 2)
            .await
            .is_some()
        {
            ran += 1;
        }
    }
    assert_eq!(
        ran, 2,
        "a limit of 2 ran the callback {ran} times in one window"
    );
}

/// The same on Redis, on its own clock: the count `attempt` keeps in the
/// open window expires one second later, while the window's timer
/// stands for 58 more.
#[tokio::test]
async fn an_attempt_in_no_window_keeps_its_count_until_the_open_window_ends_on_redis() {
    use support::redis::{RedisServer, connect};
    use suprnova::cache::RedisStore;
    use suprnova::limiter::CacheRateLimiter;
    let server = RedisServer::start();
    let store: Arc<dyn Store> = Arc::new(
        RedisStore::new(connect(&server.url())).with_prefix(support::unique_prefix("attempt")),
    );
    let limiter = CacheRateLimiter::new(store.clone(), suprnova::clock::system());
    let runs = AtomicUsize::new(0);
    assert_eq!(limiter.hit("k", 60).await.unwrap(), 1);
    assert!(limiter.reset_attempts("k").await.unwrap());
    assert!(
        support::attempt_with_no_window(&limiter, &runs, "k", 2)
            .await
            .is_some()
    );
    let counter = store.ttl("k").await.unwrap();
    let timer = store.ttl("k:timer").await.unwrap();
    assert!(
        counter >= timer.map(|t| t.saturating_sub(Duration::from_secs(1))),
        "the kept count ends in {counter:?}, its window in {timer:?}"
    );
}
