//! Counts at a window's end on Redis, one node and a 3-master cluster:
//! many clients on one key as the window turns over, through `attempt` and
//! through a throttle of several limits, keep to the limit in every
//! window; and a full bucket whose timer a Laravel application wrote in
//! another serializer's form is refused, as Laravel refuses it.

#![cfg(feature = "redis")]

mod support;
mod throttle_support;

use std::sync::Arc;
use std::time::Duration;

use support::redis::{RedisServer, connect};
use suprnova::cache::{RedisStore, Store};
use suprnova::clock;
use suprnova::limiter::CacheRateLimiter;

const PREFIX: &str = RedisStore::DEFAULT_PREFIX;

/// A plain client on database 0, to write and read what Laravel would.
async fn raw(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    let client = redis::Client::open(server.url()).unwrap();
    client.get_multiplexed_async_connection().await.unwrap()
}

async fn raw_set(server: &RedisServer, key: &str, value: &str) {
    let _: () = redis::cmd("SET")
        .arg(format!("{PREFIX}{key}"))
        .arg(value)
        .arg("EX")
        .arg(60)
        .query_async(&mut raw(server).await)
        .await
        .unwrap();
}

async fn raw_get(server: &RedisServer, key: &str) -> Option<String> {
    redis::cmd("GET")
        .arg(format!("{PREFIX}{key}"))
        .query_async(&mut raw(server).await)
        .await
        .unwrap()
}

/// How many callbacks ran, and in how many windows, when twelve clients
/// (each on its own connection, as separate processes would be) hammer one
/// key with a limit of `MAX` in windows of one second for a little over four
/// seconds, each through `attempt`. A poller records every timer value (each
/// window's own end), so the windows that opened are known.
async fn attempts_across_window_ends(url: &str) -> (usize, usize) {
    use std::collections::BTreeSet;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let key = "burst";
    let ran = Arc::new(AtomicUsize::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let timers = Arc::new(parking_lot::Mutex::new(BTreeSet::new()));

    let poller = {
        let (stop, timers) = (stop.clone(), timers.clone());
        let conn = connect(url);
        let timer = format!("{PREFIX}{key}:timer");
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let found: Option<String> =
                    conn.query(redis::cmd("GET").arg(&timer)).await.unwrap();
                if let Some(found) = found {
                    timers.lock().insert(found);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let clients: Vec<_> = (0..12)
        .map(|_| {
            let limiter =
                CacheRateLimiter::new(Arc::new(RedisStore::new(connect(url))), clock::system());
            let (stop, ran) = (stop.clone(), ran.clone());
            tokio::spawn(async move {
                while !stop.load(Ordering::SeqCst) {
                    let admitted = limiter
                        .attempt(key, MAX, || async {}, 1)
                        .await
                        .unwrap()
                        .is_some();
                    if admitted {
                        ran.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(4_300)).await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.unwrap();
    }
    poller.await.unwrap();
    let windows = timers.lock().len();
    (ran.load(Ordering::SeqCst), windows)
}

const MAX: i64 = 3;

/// `attempt`'s docs: "callers at the same moment never run more than
/// `max_attempts` callbacks in a window". At a window's end, a check that
/// read the full count before the end, found the timer gone after it and
/// removed the counter would remove counts other clients had made in the
/// new window, and the window would run more callbacks (34 to 39 in five
/// windows, when `attempt` checked `too_many_attempts` first).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attempt_runs_no_more_callbacks_than_the_limit_in_any_window_across_its_end() {
    let server = RedisServer::start();
    let (ran, windows) = attempts_across_window_ends(&server.url()).await;
    assert!(
        ran <= windows * MAX as usize,
        "{ran} callbacks ran in {windows} windows of at most {MAX} each"
    );
}

/// The same on a three-master Redis Cluster.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn attempt_on_a_cluster_runs_no_more_callbacks_than_the_limit_in_a_window_across_its_end() {
    let cluster = support::redis::RedisCluster::start(3);
    let (ran, windows) = attempts_across_window_ends(&cluster.url()).await;
    assert!(
        ran <= windows * MAX as usize,
        "{ran} callbacks ran in {windows} windows of at most {MAX} each"
    );
}

/// The throttle's docs: "Each bucket is then counted with one atomic
/// increment_if_below, the fullest first, so a concurrent burst admits at
/// most the limit". With two limits every limit is checked first; a check
/// that removed a count it read full before the window's end would remove
/// counts already made in the next window (37 admitted in five windows, when
/// the check was `too_many_attempts`). Twelve
/// clients hammer a route limited to 3 a second (and 100000 a minute); the
/// poller records the windows of the per-second bucket. Backend errors
/// answer 503 (FailClosed), so only real admissions are 200.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_throttle_of_two_limits_admits_no_more_than_the_limit_in_a_window_across_its_end() {
    use std::collections::BTreeSet;
    use std::net::SocketAddr;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    use bytes::Bytes;
    use http_body_util::Full;
    use suprnova::rate_limit::BackendErrorPolicy;
    use suprnova::server::handle_request_with_peer;
    use suprnova::{Limit, ThrottleRequestsMiddleware};

    let server = RedisServer::start();
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(connect(&server.url())));
    let app = throttle_support::limiter_app(store, clock::system());
    let router = Arc::new(
        throttle_support::ok_routes(&["/t"]).middleware(
            ThrottleRequestsMiddleware::with_limits(vec![
                Limit::per_second(MAX, 1).by("a"),
                Limit::per_minute(100_000).by("b"),
            ])
            .on_backend_error(BackendErrorPolicy::FailClosed),
        ),
    );
    let (ok, other) = (Arc::new(AtomicUsize::new(0)), Arc::new(AtomicUsize::new(0)));
    let stop = Arc::new(AtomicBool::new(false));
    let timers = Arc::new(parking_lot::Mutex::new(BTreeSet::new()));
    let poller = {
        let (stop, timers) = (stop.clone(), timers.clone());
        let mut conn = raw(&server).await;
        let timer = format!("{PREFIX}a:timer");
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let found: Option<String> = redis::cmd("GET")
                    .arg(&timer)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
                if let Some(found) = found {
                    timers.lock().insert(found);
                }
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
        })
    };
    let clients: Vec<_> = (0..12)
        .map(|_| {
            let (stop, ok, other, router) =
                (stop.clone(), ok.clone(), other.clone(), router.clone());
            tokio::spawn(app.clone().scope(async move {
                let peer: SocketAddr = "203.0.113.5:40000".parse().unwrap();
                while !stop.load(Ordering::SeqCst) {
                    let request = http::Request::get("/t")
                        .body(Full::<Bytes>::default())
                        .unwrap();
                    match handle_request_with_peer(&router, request, peer)
                        .await
                        .status_code()
                    {
                        200 => ok.fetch_add(1, Ordering::SeqCst),
                        429 => 0,
                        _ => other.fetch_add(1, Ordering::SeqCst),
                    };
                }
            }))
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(4_300)).await;
    stop.store(true, Ordering::SeqCst);
    for client in clients {
        client.await.unwrap();
    }
    poller.await.unwrap();
    let windows = timers.lock().len();
    let (ok, other) = (ok.load(Ordering::SeqCst), other.load(Ordering::SeqCst));
    assert_eq!(other, 0, "answers neither 200 nor 429");
    assert!(
        ok <= windows * MAX as usize,
        "{ok} requests admitted in {windows} windows of at most {MAX} each"
    );
}

/// A full bucket whose timer holds something other than an integer (a
/// Laravel application with another phpredis serializer, igbinary, packs
/// the timer in binary). counting.rs: "No window end came with the count
/// (a timer that holds no integer ...): Laravel's tooManyAttempts tells";
/// Laravel's `tooManyAttempts` only asks whether the timer exists, and
/// refuses. Here `refusal_if_full` also reads `available_in`, which fails
/// on the timer, and the whole check becomes a backend failure: FailOpen
/// lets the request through a full bucket, FailClosed answers 503.
#[tokio::test]
async fn a_full_bucket_whose_timer_holds_no_integer_is_refused() {
    use std::net::SocketAddr;

    use bytes::Bytes;
    use http_body_util::Full;
    use suprnova::rate_limit::BackendErrorPolicy;
    use suprnova::server::handle_request_with_peer;
    use suprnova::{Limit, ThrottleRequestsMiddleware};

    let server = RedisServer::start();
    raw_set(&server, "k", "3").await;
    // igbinary's packing of an integer timer: a header and binary bytes.
    raw_set(&server, "k:timer", "\u{0}\u{0}\u{0}\u{2}\u{8}k\u{3}").await;
    let store: Arc<dyn Store> = Arc::new(RedisStore::new(connect(&server.url())));
    let app = throttle_support::limiter_app(store, clock::system());
    let mut answers = Vec::new();
    app.scope(async {
        for policy in [BackendErrorPolicy::FailOpen, BackendErrorPolicy::FailClosed] {
            let router = throttle_support::ok_routes(&["/t"]).middleware(
                ThrottleRequestsMiddleware::with_limits(vec![Limit::per_minute(3).by("k")])
                    .on_backend_error(policy),
            );
            let request = http::Request::get("/t")
                .body(Full::<Bytes>::default())
                .unwrap();
            let peer: SocketAddr = "203.0.113.5:40000".parse().unwrap();
            let reply = handle_request_with_peer(&router, request, peer).await;
            answers.push((policy, reply.status_code()));
        }
    })
    .await;
    assert_eq!(
        answers,
        [
            (BackendErrorPolicy::FailOpen, 429),
            (BackendErrorPolicy::FailClosed, 429)
        ],
        "the bucket holds 3 of 3 and its timer exists"
    );
    assert_eq!(raw_get(&server, "k").await.as_deref(), Some("3"));
}

/// A full count with no time to live (a plain increment wrote it, here or
/// in a Laravel application) and no timer is not refused for ever: on one
/// node the call that opens the next window resets it and counts; on a
/// cluster, where the count and the timer are two keys on two nodes, that
/// call gives it the window's time to live, and the window after counts.
/// Through `attempt` and through the throttle's count.
#[tokio::test]
async fn a_full_count_with_no_time_to_live_is_reopened_on_one_node_and_a_cluster() {
    let server = RedisServer::start();
    let cluster = support::redis::RedisCluster::start(3);
    for (url, windows_to_wait) in [(server.url(), 0), (cluster.url(), 1)] {
        let store = Arc::new(RedisStore::new(connect(&url)));
        let limiter = CacheRateLimiter::new(store.clone(), clock::system());
        for key in ["through-attempt", "through-the-count"] {
            store.increment(key, 5).await.unwrap();
            assert_eq!(store.ttl(key).await.unwrap(), None);
        }
        for waited in 0..=windows_to_wait {
            let ran = limiter
                .attempt("through-attempt", 2, || async {}, 1)
                .await
                .unwrap();
            let counted = limiter
                .increment_if_below("through-the-count", 1, 1, 2)
                .await
                .unwrap();
            if waited < windows_to_wait {
                assert_eq!(ran, None, "{url}");
                assert!(!counted.counted, "{url}");
                for key in ["through-attempt", "through-the-count"] {
                    let ttl = store.ttl(key).await.unwrap();
                    assert!(
                        ttl.is_some_and(|t| t <= Duration::from_secs(1)),
                        "{url} {key}: {ttl:?}"
                    );
                }
                tokio::time::sleep(Duration::from_millis(1_200)).await;
            } else {
                assert_eq!(ran, Some(()), "{url}");
                assert!(counted.counted, "{url}: {counted:?}");
                assert_eq!(counted.count, 1, "{url}");
            }
        }
    }
}
