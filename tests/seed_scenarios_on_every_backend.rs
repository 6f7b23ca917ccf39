//! The seeds' measured scenarios on the backends the first tests ran them
//! on only in part: the facade's `throttle:60,1` figures (119 through, the
//! `Retry-After` countdown, the per-second and per-minute pair) on a
//! redis-server and on a Redis Cluster, to the exact header; the 20 x 50
//! test of the facade on a cluster; the sliding log's bunched traffic on
//! Redis and over HTTP; the five-minute load and scenario A through the
//! throttle middleware itself; two servers behind one throttle limit; and
//! the fixed window's nine in two tenths of a second on the memory store.
//!
//! The Redis tests run in real time, against Redis's clock: each starts its
//! first request just after a whole second of the system clock (which
//! Redis shares here), so that every `Retry-After` and `X-RateLimit-Reset`
//! is known to the second.
#![cfg(feature = "redis")]

mod limiter_concurrency;
mod support;
mod throttle_support;

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use futures_util::future::join_all;
use support::clock_at;
use support::http::{Reply, TestServer, tally};
use support::redis::{RedisCluster, RedisServer, connect};
use support::unique_prefix;
use suprnova::cache::RedisStore;
use suprnova::clock::{self, Clock};
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
use suprnova::{Limit, RateLimiter};
use throttle_support::{app_on_redis, memory_app, ok_routes};

fn unix_now() -> Duration {
    SystemTime::now().duration_since(UNIX_EPOCH).unwrap()
}

/// Sleeps to the next whole system second plus `frac_ms`, and returns that
/// whole second (S).
async fn align(frac_ms: u64) -> u64 {
    let now = unix_now();
    let s = now.as_secs() + 1;
    let target = Duration::from_secs(s) + Duration::from_millis(frac_ms);
    tokio::time::sleep(target - now).await;
    s
}

/// Sleeps until S + `ms`.
async fn until(s: u64, ms: u64) {
    let target = Duration::from_secs(s) + Duration::from_millis(ms);
    let now = unix_now();
    assert!(target > now, "late: target {target:?}, now {now:?}");
    tokio::time::sleep(target - now).await;
}

async fn burst(server: &TestServer, path: &str, n: usize) -> Vec<Reply> {
    join_all((0..n).map(|_| server.get(path))).await
}

fn set(values: &[String]) -> BTreeSet<String> {
    values.iter().cloned().collect()
}

// Seed 000, scenario 1, on a real redis-server over HTTP, real time:
// Send 1 at :00, Send 60 at :59 (59 through, 1 refused with Retry-After 1),
// at 12:01:00 the refused one comes back beside 60 more (60 through). 119.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_throttle_60_1_lets_119_through_over_http() {
    let server = RedisServer::start();
    lets_119_through(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_throttle_60_1_lets_119_through_over_http() {
    let cluster = RedisCluster::start(3);
    lets_119_through(&cluster.url()).await;
}

async fn lets_119_through(url: &str) {
    let app = app_on_redis(url, &unique_prefix("seed119"));
    app.scope(async {
        let http =
            TestServer::start(ok_routes(&["/api", "/warm"]).middleware_named("throttle:60,1"))
                .await;
        assert_eq!(http.get("/warm").await.status, 200);
        let s = align(50).await;
        let opener = tally(&burst(&http, "/api", 1).await);
        assert_eq!((opener.admitted, opener.remaining.clone()), (1, vec![59]));

        until(s, 59_300).await;
        let late = tally(&burst(&http, "/api", 60).await);
        assert_eq!((late.admitted, late.refused), (59, 1));
        assert_eq!(late.remaining, (0..59).collect::<Vec<_>>());
        assert_eq!(late.retry_after, set(&["1".into()]));
        assert_eq!(late.reset, set(&[(s + 60).to_string()]));

        until(s, 60_600).await;
        let next = tally(&burst(&http, "/api", 61).await);
        assert_eq!((next.admitted, next.refused), (60, 1));
        assert_eq!(next.remaining, (0..60).collect::<Vec<_>>());
        assert_eq!(next.retry_after, set(&["60".into()]));
        assert_eq!(next.reset, set(&[(s + 120).to_string()]));
        assert_eq!(late.admitted + next.admitted, 119);
        assert_eq!(
            RateLimiter::attempts("ip:127.0.0.1:path:/api")
                .await
                .unwrap(),
            60
        );
        http.stop().await;
    })
    .await;
}

// Seed 000: Retry-After 50 at :10, 40 at :20, 20 at :40, 10 at :50, both
// pointing at 12:01:00; refusals not counted; the 40 that obey all pass.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_retry_after_counts_down_to_the_window_end_over_http() {
    let server = RedisServer::start();
    counts_down(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_retry_after_counts_down_to_the_window_end_over_http() {
    let cluster = RedisCluster::start(3);
    counts_down(&cluster.url()).await;
}

async fn counts_down(url: &str) {
    let app = app_on_redis(url, &unique_prefix("seedra"));
    app.scope(async {
        let http =
            TestServer::start(ok_routes(&["/api", "/warm"]).middleware_named("throttle:60,1"))
                .await;
        assert_eq!(http.get("/warm").await.status, 200);
        let s = align(50).await;
        assert_eq!(tally(&burst(&http, "/api", 60).await).admitted, 60);
        for (at, expected, n) in [(10, "50", 1), (20, "40", 20), (40, "20", 20), (50, "10", 1)] {
            until(s, at * 1000 + 300).await;
            let t = tally(&burst(&http, "/api", n).await);
            assert_eq!((t.admitted, t.refused), (0, n), "at :{at}");
            assert_eq!(t.retry_after, set(&[expected.into()]), "at :{at}");
            assert_eq!(t.reset, set(&[(s + 60).to_string()]), "at :{at}");
        }
        assert_eq!(
            RateLimiter::attempts("ip:127.0.0.1:path:/api")
                .await
                .unwrap(),
            60
        );
        until(s, 60_600).await;
        let obeyed = tally(&burst(&http, "/api", 40).await);
        assert_eq!((obeyed.admitted, obeyed.refused), (40, 0));
        assert_eq!(obeyed.remaining, (20..60).collect::<Vec<_>>());
        http.stop().await;
    })
    .await;
}

// Seed 000: per-second 5 beside per-minute 60, both by IP: 10 through
// across the boundary, not 119; the per-minute bucket counts 10.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_per_second_pair_lets_ten_through_over_http() {
    let server = RedisServer::start();
    pair_ten(&server.url()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cluster_per_second_pair_lets_ten_through_over_http() {
    let cluster = RedisCluster::start(3);
    pair_ten(&cluster.url()).await;
}

async fn pair_ten(url: &str) {
    let app = app_on_redis(url, &unique_prefix("seedpair"));
    app.scope(async {
        RateLimiter::define("api", |req| {
            let ip = req.ip().unwrap_or_default();
            vec![
                Limit::per_second(5, 1).by(ip.clone()),
                Limit::per_minute(60).by(ip),
            ]
            .into()
        });
        let http = TestServer::start(ok_routes(&["/api"]).middleware_named("throttle:api")).await;
        let _ = RateLimiter::attempts("warm").await.unwrap();
        let s = align(200).await;
        let before = burst(&http, "/api", 60).await;
        until(s, 1_700).await;
        let after = burst(&http, "/api", 60).await;
        let ok = |v: &[Reply]| v.iter().filter(|r| r.status == 200).count();
        assert_eq!((ok(&before), ok(&after)), (5, 5), "not 119");
        assert_eq!(
            RateLimiter::attempts("api:127.0.0.1:attempts:60:decay:60")
                .await
                .unwrap(),
            10
        );
        http.stop().await;
    })
    .await;
}

// Seed 000: "A steady caller under the limit never sees a 429": 20 every
// 20 s under throttle:60,1, five minutes, over HTTP (memory store).
#[tokio::test]
async fn steady_twenty_every_twenty_seconds_never_sees_a_429() {
    let clock = clock_at(12, 0, 0);
    let app = memory_app(&clock);
    app.scope(async {
        let http = TestServer::start(ok_routes(&["/api"]).middleware_named("throttle:60,1")).await;
        for step in 0..15 {
            let t = tally(&burst(&http, "/api", 20).await);
            assert_eq!((t.admitted, t.refused), (20, 0), "step {step}");
            clock.advance(Duration::from_secs(20));
        }
        http.stop().await;
    })
    .await;
}

// Seed 001's concurrency table for the facade on a Redis Cluster: 20 connections x 50 attempts,
// limit 100, exactly 100, three runs, every way of deciding.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cluster_facade_twenty_connections_admit_exactly_100() {
    let cluster = RedisCluster::start(3);
    let url = cluster.url();
    let client = || {
        let store = RedisStore::new(connect(&url));
        Arc::new(CacheRateLimiter::new(Arc::new(store), clock::system()))
    };
    for decide in limiter_concurrency::EVERY_WAY {
        for run in 0..3 {
            let key = format!("{}{decide:?}", unique_prefix("cluster-facade"));
            let admitted = limiter_concurrency::admitted(client, &key, decide).await;
            assert_eq!(admitted, 100, "{decide:?}, run {run}");
        }
    }
}

/// Seed 000/002's bunched traffic through the sliding log, scaled to 10 per
/// 2 s on real Redis time: 1 at 0, 10 at 1.6 s (9 through), 10 at 2.2 s
/// (exactly 1 through, the opener's place): N + 1 = 11 in all, never more
/// than 10 in any window. Each step keeps 400 ms or more from the window
/// edge it must fall beside, for a loaded machine's late wake-ups. Then seed 001 scenario A with no opener: 10.
async fn bunched_on(driver: Arc<dyn RateLimiterDriver>) {
    let cfg = SlidingWindowConfig::new(10, Duration::from_secs(2));
    driver.acquire("warm", &cfg).await.unwrap();
    let mut admitted = 0;
    let start = tokio::time::Instant::now();
    assert!(driver.acquire("k", &cfg).await.unwrap().allowed);
    admitted += 1;
    tokio::time::sleep_until(start + Duration::from_millis(1_600)).await;
    let mut late = 0;
    let mut refused = None;
    for _ in 0..10 {
        let d = driver.acquire("k", &cfg).await.unwrap();
        if d.allowed {
            late += 1
        } else {
            refused = Some(d)
        }
    }
    assert_eq!(late, 9);
    let refused = refused.unwrap();
    let wait = refused.retry_after.unwrap();
    assert!(wait <= Duration::from_millis(400), "{wait:?}");
    assert_eq!(refused.retry_after_secs(), Some(1));
    tokio::time::sleep_until(start + Duration::from_millis(2_200)).await;
    let mut next = 0;
    for _ in 0..10 {
        next += usize::from(driver.acquire("k", &cfg).await.unwrap().allowed);
    }
    assert_eq!(next, 1);
    assert_eq!(admitted + late + next, 11);

    // Scenario A without an earlier request: 10 then 10, 100 ms apart.
    let mut a = 0;
    for _ in 0..10 {
        a += usize::from(driver.acquire("a", &cfg).await.unwrap().allowed);
    }
    tokio::time::sleep(Duration::from_millis(100)).await;
    for _ in 0..10 {
        a += usize::from(driver.acquire("a", &cfg).await.unwrap().allowed);
    }
    assert_eq!(a, 10);
}

#[tokio::test]
async fn redis_sliding_log_bunched_traffic_admits_limit_plus_one() {
    let server = RedisServer::start();
    let driver = RedisRateLimiter::new(connect(&server.url())).with_prefix(unique_prefix("bunch"));
    bunched_on(Arc::new(driver)).await;
}

#[tokio::test]
async fn cluster_sliding_log_bunched_traffic_admits_limit_plus_one() {
    let cluster = RedisCluster::start(3);
    let driver = RedisRateLimiter::new(connect(&cluster.url())).with_prefix(unique_prefix("bunch"));
    bunched_on(Arc::new(driver)).await;
}

// Seed 003's five-minute load through the throttle middleware itself
// (throttle:600,1, each client from its own address, interleaved in arrival
// order, in process), not only through CacheRateLimiter::increment_if_below:
// docs/algorithms.md quotes 0, 360, 45, 0, 0, 4,800, 960 and 5,760 / 6,900 /
// 405 for "fixed window (CacheRateLimiter)".
#[tokio::test]
async fn five_minute_load_through_throttle_600_1() {
    use bytes::Bytes;
    use http_body_util::Full;
    use std::net::SocketAddr;
    use support::load::{CLIENTS, every_arrival, total};
    use suprnova::server::handle_request_with_peer;

    let clock = clock_at(12, 0, 0);
    let app = memory_app(&clock);
    app.scope(async {
        let router = ok_routes(&["/load"]).middleware_named("throttle:600,1");
        let load = every_arrival();
        let start = clock.now_utc();
        let mut refused = vec![0u32; CLIENTS.len()];
        for (at, i) in load {
            clock.set(start + at);
            let peer: SocketAddr = format!("198.51.100.{}:40000", i + 1).parse().unwrap();
            let request = http::Request::get("/load")
                .body(Full::<Bytes>::default())
                .unwrap();
            let r = handle_request_with_peer(&router, request, peer).await;
            match r.status_code() {
                200 => {}
                429 => refused[i] += 1,
                other => panic!("{other}"),
            }
        }
        assert_eq!(refused, vec![0, 360, 45, 0, 0, 4_800, 960]);
        let (mut caught, mut missed, mut falsely) = (0, 0, 0);
        for (c, &r) in CLIENTS.iter().zip(&refused) {
            if c.legitimate {
                falsely += r;
            } else {
                caught += r;
                missed += total(c) - r;
            }
        }
        assert_eq!((caught, missed, falsely), (5_760, 6_900, 405));
    })
    .await;
}

// Seed 001 scenario A through the throttle middleware (named limiter, 10 per
// 10 s), with an opener at 12:00:00: 9 before the window end, 10 after, 19.
#[tokio::test]
async fn scenario_a_through_throttle_admits_19() {
    let clock = clock_at(12, 0, 0);
    let app = memory_app(&clock);
    app.scope(async {
        RateLimiter::define("ten", |_req| Limit::per_second(10, 10).by("k").into());
        let http = TestServer::start(ok_routes(&["/a"]).middleware_named("throttle:ten")).await;
        assert_eq!(http.get("/a").await.status, 200);
        clock.advance(Duration::from_millis(9_500));
        let mut before = 0;
        for _ in 0..10 {
            before += usize::from(http.get("/a").await.status == 200);
            clock.advance(Duration::from_millis(40));
        }
        clock.advance(Duration::from_millis(100));
        let mut after = 0;
        for _ in 0..10 {
            after += usize::from(http.get("/a").await.status == 200);
            clock.advance(Duration::from_millis(40));
        }
        assert_eq!((before, after), (9, 10));
        http.stop().await;
    })
    .await;
}

// Seed 002 "Many servers, one limit", facade side: two servers (two apps,
// each with its own Redis connection) behind one limit, throttle:100,1,
// 100 concurrent requests to each: exactly 100 admitted across both.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_servers_share_one_throttle_limit_on_redis() {
    let server = RedisServer::start();
    let prefix = unique_prefix("replicas");
    let mut servers = Vec::new();
    let mut apps = Vec::new();
    for _ in 0..2 {
        let app = app_on_redis(&server.url(), &prefix);
        let http = app
            .scope(async {
                TestServer::start(ok_routes(&["/r"]).middleware_named("throttle:100,1")).await
            })
            .await;
        servers.push(http);
        apps.push(app);
    }
    let replies: Vec<Reply> = join_all((0..200).map(|i| servers[i % 2].get("/r"))).await;
    let t = tally(&replies);
    assert_eq!((t.admitted, t.refused), (100, 100));
    assert_eq!(t.remaining, (0..100).collect::<Vec<_>>());
    for s in servers {
        s.stop().await;
    }
}

// Seed 001, "5 per 2 seconds with the real RateLimiter", on the memory store
// with a frozen clock: 1 at 0.0 s, 4 at 1.9 s, a sixth refused, 5 at 2.1 s,
// a sixth refused: 9 in 0.2 s. Also with an opener at a fraction of a second.
#[tokio::test]
async fn memory_fixed_window_admits_nine_in_two_tenths_of_a_second() {
    use suprnova::cache::MemoryStore;
    for opener_ms in [0u64, 500, 999] {
        let clock = clock_at(12, 0, 0);
        clock.advance(Duration::from_millis(opener_ms));
        let store = Arc::new(MemoryStore::with_clock(clock.shared()));
        let limiter = CacheRateLimiter::new(store, clock.shared());
        let attempt = || limiter.attempt("boundary", 5, || async {}, 2);
        assert!(attempt().await.unwrap().is_some());
        clock.advance(Duration::from_millis(1_900));
        let mut burst = 0;
        for _ in 0..4 {
            burst += usize::from(attempt().await.unwrap().is_some());
        }
        assert!(
            attempt().await.unwrap().is_none(),
            "sixth at 1.9 s, opener {opener_ms}"
        );
        clock.advance(Duration::from_millis(200));
        for _ in 0..5 {
            burst += usize::from(attempt().await.unwrap().is_some());
        }
        assert!(
            attempt().await.unwrap().is_none(),
            "sixth at 2.1 s, opener {opener_ms}"
        );
        assert_eq!(burst, 9, "opener {opener_ms}");
    }
}

// docs/algorithms.md, sliding log: "On the bunched traffic at 60 a minute,
// it admits 61 requests in all ... The caller refused at 12:00:59 is told
// Retry-After: 1 ... the next refusal says Retry-After: 59" - through
// RateLimitMiddleware::ip_based over real HTTP on the memory driver.
#[tokio::test]
async fn sliding_log_bunched_traffic_over_http() {
    use suprnova::rate_limit::RateLimitMiddleware;
    use suprnova::rate_limit::memory::InMemoryRateLimiter;
    let clock = clock_at(12, 0, 0);
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    app.scope(async {
        let router = ok_routes(&["/api"])
            .middleware(RateLimitMiddleware::ip_based(60, Duration::from_secs(60)));
        let http = TestServer::start(router).await;
        let t0 = tally(&burst(&http, "/api", 1).await);
        clock.advance(Duration::from_secs(59));
        let t1 = tally(&burst(&http, "/api", 60).await);
        clock.advance(Duration::from_secs(1));
        let t2 = tally(&burst(&http, "/api", 60).await);
        assert_eq!((t0.admitted, t1.admitted, t2.admitted), (1, 59, 1));
        assert_eq!(t1.retry_after, set(&["1".into()]));
        assert_eq!(t2.retry_after, set(&["59".into()]));
        let noon = clock_at(12, 0, 0).unix_seconds();
        assert_eq!(t1.reset, set(&[(noon + 60).to_string()]));
        assert_eq!(t2.reset, set(&[(noon + 119).to_string()]));
        http.stop().await;
    })
    .await;
}
