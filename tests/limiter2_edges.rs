//! The Laravel-shape limiter and its named limiters at their edges: many
//! tasks counting on one key (every count handed out once, on memory and on
//! a Redis started for the test), the attempts at a window's end, hits in
//! no window inside an open one, a burst over HTTP on a named limiter with
//! two limits on Redis, a window as long as the numbers go on Redis, what a
//! limit counted after the response reports, the bucket of a signed-in user
//! under the default limit, and a count left without its timer.

mod support;
mod throttle_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use support::clock_at;
use support::redis::{RedisCluster, RedisServer};
use suprnova::cache::{IncrementOutcome, MemoryStore};
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router, ThrottleRequestsMiddleware};
use throttle_support::{
    SignIn, app_on_redis, get_as_guest, memory_app, ok_routes, status_and_counts as pair,
};

/// A key with bytes a protocol could trip on: blanks, a line break, a NUL,
/// an accent and an apostrophe (which cleaning turns into `&#039;`).
const ODD_KEY: &str = "k \r\n\0 é'";

/// `tasks` tasks each hitting `key` `each` times in a window of a minute,
/// letting the others run between hits: every count the hits returned.
async fn counts_handed_out(
    limiter: &Arc<CacheRateLimiter>,
    key: &str,
    tasks: usize,
    each: usize,
) -> Vec<i64> {
    let handles: Vec<_> = (0..tasks)
        .map(|_| {
            let limiter = Arc::clone(limiter);
            let key = key.to_owned();
            tokio::spawn(async move {
                let mut counts = Vec::with_capacity(each);
                for _ in 0..each {
                    counts.push(limiter.hit(&key, 60).await.unwrap());
                    tokio::task::yield_now().await;
                }
                counts
            })
        })
        .collect();
    let mut all = Vec::with_capacity(tasks * each);
    for handle in handles {
        all.extend(handle.await.unwrap());
    }
    all
}

/// `hit` is one atomic step of the store: sixteen tasks making 25 hits each
/// on one key get each count from 1 to 400 exactly once, and the store
/// holds 400, on memory, on one Redis and on a Redis Cluster, for a key
/// with odd bytes. The full
/// window then refuses, `reset_attempts` tells whether there was a count,
/// and `clear` leaves no window behind.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn every_count_is_handed_out_once_under_concurrent_hits() {
    let clock = FakeClock::at_unix(1_000);
    let memory = Arc::new(CacheRateLimiter::new(
        Arc::new(MemoryStore::with_clock(clock.shared())),
        clock.shared(),
    ));
    let redis = RedisServer::start();
    let on_redis = app_on_redis(&redis.url(), &support::unique_prefix("l2-hits"))
        .scope(async { RateLimiter::instance() })
        .await;
    let cluster = RedisCluster::start(3);
    let on_cluster = app_on_redis(&cluster.url(), &support::unique_prefix("l2-hits"))
        .scope(async { RateLimiter::instance() })
        .await;
    for (name, limiter) in [
        ("memory", memory),
        ("redis", on_redis),
        ("cluster", on_cluster),
    ] {
        let counts = counts_handed_out(&limiter, ODD_KEY, 16, 25).await;
        let distinct: BTreeSet<i64> = counts.iter().copied().collect();
        assert_eq!(counts.len(), 400, "{name}");
        assert_eq!(distinct, (1..=400).collect(), "{name}");
        assert_eq!(limiter.attempts(ODD_KEY).await.unwrap(), 400, "{name}");
        assert!(
            limiter.too_many_attempts(ODD_KEY, 400).await.unwrap(),
            "{name}"
        );
        assert!(limiter.reset_attempts(ODD_KEY).await.unwrap(), "{name}");
        assert!(!limiter.reset_attempts(ODD_KEY).await.unwrap(), "{name}");
        limiter.clear(ODD_KEY).await.unwrap();
        assert_eq!(limiter.available_in(ODD_KEY).await.unwrap(), 0, "{name}");
        assert_eq!(limiter.attempts(ODD_KEY).await.unwrap(), 0, "{name}");
    }
}

/// A window left full ends; 32 tasks then make four attempts each at a
/// limit of 5 in the same instant: the step that opens the next window
/// resets the full count, and exactly 5 callbacks run in it, which holds 5
/// and ends a whole window later.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attempts_at_a_window_end_run_exactly_the_limit_in_the_next() {
    let clock = FakeClock::at_unix(1_000);
    let limiter = Arc::new(CacheRateLimiter::new(
        Arc::new(MemoryStore::with_clock(clock.shared())),
        clock.shared(),
    ));
    for _ in 0..5 {
        limiter.hit("otp", 60).await.unwrap();
    }
    assert!(limiter.too_many_attempts("otp", 5).await.unwrap());
    clock.advance(Duration::from_secs(60));
    let ran = Arc::new(AtomicUsize::new(0));
    let handles: Vec<_> = (0..32)
        .map(|_| {
            let limiter = Arc::clone(&limiter);
            let ran = Arc::clone(&ran);
            tokio::spawn(async move {
                for _ in 0..4 {
                    let ran = &ran;
                    limiter
                        .attempt(
                            "otp",
                            5,
                            || async move {
                                ran.fetch_add(1, Ordering::SeqCst);
                            },
                            60,
                        )
                        .await
                        .unwrap();
                    tokio::task::yield_now().await;
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    assert_eq!(ran.load(Ordering::SeqCst), 5);
    assert_eq!(limiter.attempts("otp").await.unwrap(), 5);
    assert_eq!(limiter.available_in("otp").await.unwrap(), 60);
}

/// On Redis, hits in no window (`hit(key, 0)`) from twenty tasks at once:
/// inside a window whose count was reset, each counts in that window (200
/// in all); on a key with no window, each returns 1 and none is stored.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hits_in_no_window_at_once_on_redis() {
    let redis = RedisServer::start();
    let limiter = app_on_redis(&redis.url(), &support::unique_prefix("l2-zero"))
        .scope(async { RateLimiter::instance() })
        .await;
    limiter.hit("open", 60).await.unwrap();
    assert!(limiter.reset_attempts("open").await.unwrap());
    let tasks = |key: &'static str| {
        (0..20)
            .map(|_| {
                let limiter = Arc::clone(&limiter);
                tokio::spawn(async move {
                    let mut ones = 0;
                    for _ in 0..10 {
                        if limiter.hit(key, 0).await.unwrap() == 1 {
                            ones += 1;
                        }
                    }
                    ones
                })
            })
            .collect::<Vec<_>>()
    };
    for handle in tasks("open") {
        handle.await.unwrap();
    }
    assert_eq!(limiter.attempts("open").await.unwrap(), 200);
    assert!(limiter.available_in("open").await.unwrap() >= 58);
    let mut ones = 0;
    for handle in tasks("none") {
        ones += handle.await.unwrap();
    }
    assert_eq!(ones, 200);
    assert_eq!(limiter.attempts("none").await.unwrap(), 0);
    assert_eq!(limiter.available_in("none").await.unwrap(), 0);
}

/// A window as long as the numbers go, on Redis (which refuses an expiry
/// that large): the first request passes, the second is refused with the
/// seconds left to the end the timer holds and that end as its reset; and
/// `hit_until` three thousand years ahead counts and tells the wait.
#[tokio::test]
async fn a_window_as_long_as_the_numbers_go_on_redis() {
    let redis = RedisServer::start();
    let app = app_on_redis(&redis.url(), &support::unique_prefix("l2-long"));
    app.scope(async {
        let router =
            ok_routes(&["/long"]).middleware(ThrottleRequestsMiddleware::with_limits(vec![
                Limit::per_second(1, i64::MAX).by("long"),
            ]));
        assert_eq!(
            pair(&get_as_guest(&router, "/long").await),
            (200, Some("1"), Some("0"))
        );
        let refused = get_as_guest(&router, "/long").await;
        let now = chrono::Utc::now().timestamp();
        assert_eq!(pair(&refused), (429, Some("1"), Some("0")));
        let wait: i64 = refused.header_str("retry-after").unwrap().parse().unwrap();
        assert!((i64::MAX - now - wait).abs() <= 2, "Retry-After {wait}");
        let end = i64::MAX.to_string();
        assert_eq!(refused.header_str("x-ratelimit-reset"), Some(end.as_str()));
        let until = chrono::Utc::now() + chrono::Duration::days(365 * 3_000);
        assert_eq!(RateLimiter::hit_until("far", until).await.unwrap(), 1);
        assert!(RateLimiter::available_in("far").await.unwrap() > 365 * 2_999 * 86_400);
    })
    .await;
}

/// "`X-RateLimit-Remaining` ... the requests left in the bucket", "as
/// Laravel reads each bucket after the response". A login limit counts
/// failed logins only (`after`). A successful login whose handler is slow
/// is answered after three failed ones have counted in the bucket: it
/// reports the two places left when it is answered, as Laravel's
/// `retriesLeft` after the response reads them, not the 5 of the count
/// read before its handler ran.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_uncounted_after_limit_reports_the_bucket_after_the_response() {
    let clock = clock_at(12, 0, 0);
    let app = memory_app(&clock);
    app.scope(async {
        RateLimiter::define("login", |_req| {
            Limit::per_minute(5)
                .by("alice")
                .after(|r| r.status_code() >= 400)
                .into()
        });
        let entered = Arc::new(tokio::sync::Notify::new());
        let release = Arc::new(tokio::sync::Notify::new());
        let (inside, go) = (Arc::clone(&entered), Arc::clone(&release));
        let router = Router::new()
            .get("/slow", move |_req: Request| {
                let (inside, go) = (Arc::clone(&inside), Arc::clone(&go));
                async move {
                    inside.notify_one();
                    go.notified().await;
                    HttpResponse::text("welcome")
                }
            })
            .get("/fail", |_req: Request| async {
                HttpResponse::text("wrong password").status(401)
            })
            .middleware(ThrottleRequestsMiddleware::by_name("login"));
        let router = Arc::new(router);
        let slow_router = Arc::clone(&router);
        let slow = tokio::spawn(
            App::current().scope(async move { get_as_guest(&slow_router, "/slow").await }),
        );
        entered.notified().await;
        for _ in 0..3 {
            assert_eq!(get_as_guest(&router, "/fail").await.status_code(), 401);
        }
        release.notify_one();
        let slow = slow.await.unwrap();
        assert_eq!(RateLimiter::attempts("login:alice").await.unwrap(), 3);
        assert_eq!(pair(&slow), (200, Some("5"), Some("2")));
    })
    .await;
}

/// The default limit is "the shape of Laravel's default `api` limiter,
/// `Limit::perMinute(60)->by($request->user()?->id ?: $request->ip())`":
/// an empty id is no id there, and the request counts by its address. Two
/// callers signed in with an empty id from two addresses count apart, not
/// in one bucket `user:` where one could spend the other's budget.
#[tokio::test]
async fn an_empty_user_id_counts_by_address_under_the_default_limit() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = ok_routes(&["/api"])
                .middleware(ThrottleRequestsMiddleware::default())
                .wrap(SignIn);
            let signed_in_with_no_id = |peer: &str| {
                let request = http::Request::get("/api")
                    .header("x-user", "")
                    .body(http_body_util::Full::<bytes::Bytes>::default())
                    .unwrap();
                suprnova::server::handle_request_with_peer(&router, request, support::peer(peer))
            };
            let first = signed_in_with_no_id("203.0.113.5:4000").await;
            assert_eq!(pair(&first), (200, Some("60"), Some("59")));
            let other = signed_in_with_no_id("198.51.100.7:4000").await;
            assert_eq!(pair(&other), (200, Some("60"), Some("59")));
        })
        .await;
}

/// `increment_if_below`: its ceiling is the highest the count may reach,
/// so a count has room for an amount while `count + amount <= ceiling`,
/// below the maximum `ceiling - amount + 1` the ceiling stands for (the
/// throttle passes its maximum plus its places less one, `attempt` its
/// maximum with an amount of 1). A count left without its timer (as
/// Laravel's `clear` of a key with an apostrophe leaves one) is reset when
/// it has no room, as Laravel's `tooManyAttempts` resets a count at or
/// above the maximum, and is kept and counted on when it has room: one
/// rule for every amount, in a window of a minute as in a window of no
/// time, on memory and on one Redis node. A count of 8 under a ceiling of
/// 10: adding 1 counts on it (9); adding 3 (a maximum of 8) resets it and
/// counts 3, kept in a window of a minute, none kept in a window of no
/// time. A count of 7 has room for 3, and counts on to 10 either way.
#[tokio::test]
async fn a_count_without_its_timer_is_kept_below_the_maximum_whatever_the_window() {
    let clock = FakeClock::at_unix(1_000);
    let memory = Arc::new(CacheRateLimiter::new(
        Arc::new(MemoryStore::with_clock(clock.shared())),
        clock.shared(),
    ));
    let redis = RedisServer::start();
    let on_redis = app_on_redis(&redis.url(), &support::unique_prefix("l2-left"))
        .scope(async { RateLimiter::instance() })
        .await;
    let counted = |count| IncrementOutcome {
        counted: true,
        count,
    };
    for (name, limiter) in [("memory", memory), ("redis", on_redis)] {
        let left = |key: &'static str, count: &'static str| {
            let store = Arc::clone(limiter.store());
            async move {
                store
                    .put(key, count, Duration::from_secs(600))
                    .await
                    .unwrap()
            }
        };
        // (key, window, amount, count left, outcome, count kept)
        for (key, window, amount, found, outcome, kept) in [
            ("one", 60, 1, "8", counted(9), 9),
            ("one-no-window", 0, 1, "8", counted(9), 9),
            ("three", 60, 3, "8", counted(3), 3),
            ("three-no-window", 0, 3, "8", counted(3), 0),
            ("room", 60, 3, "7", counted(10), 10),
            ("room-no-window", 0, 3, "7", counted(10), 10),
        ] {
            left(key, found).await;
            let got = limiter
                .increment_if_below(key, window, amount, 10)
                .await
                .unwrap();
            assert_eq!(got, outcome, "{name} {key}");
            assert_eq!(limiter.attempts(key).await.unwrap(), kept, "{name} {key}");
        }
        // A full count whose timer stands refuses and is kept.
        left("open", "8").await;
        limiter
            .store()
            .put("open:timer", "99999999999", Duration::from_secs(600))
            .await
            .unwrap();
        for window in [60, 0] {
            let got = limiter
                .increment_if_below("open", window, 3, 10)
                .await
                .unwrap();
            let refused = IncrementOutcome {
                counted: false,
                count: 8,
            };
            assert_eq!(got, refused, "{name} {window}");
        }
    }
}
