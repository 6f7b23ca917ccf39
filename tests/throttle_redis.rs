//! `ThrottleRequestsMiddleware` on a real `redis-server` (and a Redis
//! Cluster): the same behaviour as on the memory store with windows of a
//! second or two, Laravel's key layout, exact admission under a burst of
//! concurrent HTTP requests, and the backend-error policy.
#![cfg(feature = "redis")]

mod support;
mod throttle_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::Full;
use support::http::{Reply, TestServer};
use support::redis::{RedisCluster, RedisServer};
use support::unique_prefix;
use suprnova::cache::Cache;
use suprnova::clock::{self, FakeClock};
use suprnova::rate_limit::BackendErrorPolicy;
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router, ThrottleRequestsMiddleware};
use throttle_support::{app_on_redis, app_on_redis_at, ok_routes, with_status};

const PEER: &str = "203.0.113.5:40000";

fn ok_route(path: &str) -> Router {
    ok_routes(&[path])
}

async fn get(router: &Router, path: &str) -> HttpResponse {
    let request = http::Request::get(path)
        .body(Full::<Bytes>::default())
        .unwrap();
    handle_request_with_peer(router, request, PEER.parse::<SocketAddr>().unwrap()).await
}

fn remaining(r: &HttpResponse) -> Option<&str> {
    r.header_str("x-ratelimit-remaining")
}

/// The raw value of a Redis key, through `redis-cli`'s wire: `$<len>` and
/// the value, or `$-1` for none.
fn raw_get(server: &RedisServer, key: &str) -> String {
    server.command(&format!("GET {key}"))
}

/// A refusal costs Redis what an admission does: one script call, whose
/// reply carries the window's end for the refusal's headers.
#[tokio::test]
async fn an_admission_and_a_refusal_are_one_script_call_each() {
    let server = RedisServer::start();
    let app = app_on_redis(&server.url(), &unique_prefix("one-call"));
    app.scope(async {
        let router = ok_routes(&["/warm", "/x"])
            .middleware(suprnova::ThrottleRequestsMiddleware::with(1, 1, ""));
        // The first call of a connection loads the script.
        assert_eq!(get(&router, "/warm").await.status_code(), 200);
        let admitted = server
            .commands_sent_during(async {
                assert_eq!(get(&router, "/x").await.status_code(), 200);
            })
            .await;
        assert_eq!(admitted, ["evalsha"]);
        let refused = server
            .commands_sent_during(async {
                let r = get(&router, "/x").await;
                assert_eq!(r.status_code(), 429);
                let wait: i64 = r.header_str("retry-after").unwrap().parse().unwrap();
                assert!((59..=60).contains(&wait), "{wait}");
                let reset: i64 = r.header_str("x-ratelimit-reset").unwrap().parse().unwrap();
                let now = suprnova::clock::system().unix_seconds();
                assert!((now + 58..=now + 61).contains(&reset), "{reset} at {now}");
            })
            .await;
        assert_eq!(refused, ["evalsha"]);
    })
    .await;
}

/// A limit whose window is no time, on Redis: it counts in a window an
/// earlier hit opened on its key (Laravel's `tooManyAttempts` then `hit`
/// with a decay of 0), refuses with that window's `Retry-After` when it is
/// full, removes a full count whose timer is gone, and stores nothing on a
/// key with no count, counting before the response or after it. The clock
/// is frozen at the present, so the window's times are exact.
#[tokio::test]
async fn a_window_of_no_time_counts_in_a_window_an_earlier_hit_opened() {
    let server = RedisServer::start();
    let prefix = unique_prefix("no-time");
    let now = clock::system().unix_seconds();
    let frozen = FakeClock::at_unix(u64::try_from(now).unwrap());
    let app = app_on_redis_at(&server.url(), &prefix, frozen.shared());
    app.scope(async {
        let router = ok_route("/z").middleware(ThrottleRequestsMiddleware::with_limits(vec![
            Limit::per_second(3, 0).by("k"),
        ]));
        let fresh = ok_route("/fresh").middleware(ThrottleRequestsMiddleware::with_limits(vec![
            Limit::per_second(3, 0).by("fresh"),
        ]));
        let after = ok_route("/after").middleware(ThrottleRequestsMiddleware::with_limits(vec![
            Limit::per_second(3, 0).by("a").after(|_| true),
        ]));
        let attempts = async |key: &str| RateLimiter::attempts(key).await.unwrap();

        assert_eq!(RateLimiter::hit("k", 60).await.unwrap(), 1);
        let r = get(&router, "/z").await;
        assert_eq!(r.status_code(), 200);
        assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
        assert_eq!(remaining(&r), Some("1"));
        assert_eq!(attempts("k").await, 2);
        let ttl = server.command(&format!("TTL {prefix}k"));
        let ttl: i64 = ttl.trim_start_matches(':').trim().parse().unwrap();
        assert!((59..=60).contains(&ttl), "TTL {ttl}");

        assert_eq!(RateLimiter::hit("k", 60).await.unwrap(), 3);
        let r = get(&router, "/z").await;
        assert_eq!(r.status_code(), 429);
        assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
        assert_eq!(remaining(&r), Some("0"));
        assert_eq!(r.header_str("retry-after"), Some("60"));
        let reset = (now + 60).to_string();
        assert_eq!(r.header_str("x-ratelimit-reset"), Some(reset.as_str()));
        assert_eq!(attempts("k").await, 3);

        // The timer gone, the full count is removed and nothing stored.
        assert!(Cache::forget("k:timer").await.unwrap());
        for _ in 0..2 {
            let r = get(&router, "/z").await;
            assert_eq!((r.status_code(), remaining(&r)), (200, Some("3")));
            assert_eq!(Cache::get("k").await.unwrap(), None);
        }
        // A key with no count: never limited, nothing stored.
        for _ in 0..4 {
            let r = get(&fresh, "/fresh").await;
            assert_eq!((r.status_code(), remaining(&r)), (200, Some("3")));
        }
        assert_eq!(Cache::get("fresh").await.unwrap(), None);
        // Counted after the response, the same.
        let r = get(&after, "/after").await;
        assert_eq!((r.status_code(), remaining(&r)), (200, Some("3")));
        assert_eq!(Cache::get("a").await.unwrap(), None);
        RateLimiter::hit("a", 60).await.unwrap();
        let r = get(&after, "/after").await;
        assert_eq!((r.status_code(), remaining(&r)), (200, Some("1")));
        assert_eq!(attempts("a").await, 2);
    })
    .await;
}

#[tokio::test]
async fn a_short_window_counts_refuses_without_counting_and_reopens() {
    let server = RedisServer::start();
    let prefix = unique_prefix("window");
    let app = app_on_redis(&server.url(), &prefix);
    app.scope(async {
        RateLimiter::define("burst", |_req| Limit::per_second(3, 2).by("k").into());
        let router = ok_route("/b").middleware_named("throttle:burst");

        // The window opens during the first request: it ends no later than
        // its length after that request's answer, whatever the first
        // connection to Redis took.
        let mut opened_by = None;
        for left in ["2", "1", "0"] {
            let r = get(&router, "/b").await;
            opened_by.get_or_insert_with(Instant::now);
            assert_eq!((r.status_code(), remaining(&r)), (200, Some(left)));
            assert_eq!(r.header_str("x-ratelimit-limit"), Some("3"));
        }
        let refused = get(&router, "/b").await;
        let now = clock::system().unix_seconds();
        assert_eq!(refused.status_code(), 429);
        assert_eq!(refused.body_text(), "Too Many Attempts.");
        assert_eq!(remaining(&refused), Some("0"));
        let retry_after: i64 = refused.header_str("retry-after").unwrap().parse().unwrap();
        assert!((1..=2).contains(&retry_after), "Retry-After {retry_after}");
        let reset: i64 = refused
            .header_str("x-ratelimit-reset")
            .unwrap()
            .parse()
            .unwrap();
        assert!(
            (reset - (now + retry_after)).abs() <= 1,
            "reset {reset}, now {now}"
        );

        // The refusal was not counted, and the entries have Laravel's
        // layout: the count, and the end of the window in Unix seconds.
        assert_eq!(RateLimiter::attempts("burst:k").await.unwrap(), 3);
        assert!(raw_get(&server, &format!("{prefix}burst:k")).ends_with("\r\n3\r\n"));
        let timer = raw_get(&server, &format!("{prefix}burst:k:timer"));
        let timer: i64 = timer.lines().nth(1).unwrap().parse().unwrap();
        assert_eq!(timer, reset);

        // The window ends two seconds after it opened.
        let opened_by = opened_by.unwrap();
        tokio::time::sleep(Duration::from_millis(2_100).saturating_sub(opened_by.elapsed())).await;
        let reopened = get(&router, "/b").await;
        assert_eq!(
            (reopened.status_code(), remaining(&reopened)),
            (200, Some("2"))
        );
        assert_eq!(RateLimiter::attempts("burst:k").await.unwrap(), 1);
    })
    .await;
}

#[tokio::test]
async fn limits_that_share_a_key_count_under_fallback_keys_on_redis() {
    let server = RedisServer::start();
    let prefix = unique_prefix("fallback");
    let app = app_on_redis(&server.url(), &prefix);
    app.scope(async {
        let router = ok_route("/f").middleware(ThrottleRequestsMiddleware::with_limits(vec![
            Limit::per_second(2, 1).by("ip:203.0.113.5"),
            Limit::per_minute(5).by("ip:203.0.113.5"),
        ]));
        let replies = join_all((0..3).map(|_| get(&router, "/f"))).await;
        assert_eq!(
            (with_status(&replies, 200), with_status(&replies, 429)),
            (2, 1)
        );
        let per_second = format!("{prefix}ip:203.0.113.5:attempts:2:decay:1");
        let per_minute = format!("{prefix}ip:203.0.113.5:attempts:5:decay:60");
        assert!(raw_get(&server, &per_second).ends_with("\r\n2\r\n"));
        assert!(raw_get(&server, &per_minute).ends_with("\r\n2\r\n"));
        let ttl = server.command(&format!("TTL {per_minute}"));
        let ttl: i64 = ttl.trim_start_matches(':').trim().parse().unwrap();
        assert!((59..=60).contains(&ttl), "TTL {ttl}");
    })
    .await;
}

#[tokio::test]
async fn the_refused_return_together_when_the_window_ends() {
    let server = RedisServer::start();
    let prefix = unique_prefix("boundary");
    let app = app_on_redis(&server.url(), &prefix);
    app.scope(async {
        RateLimiter::define("second", |req| {
            Limit::per_second(4, 1)
                .by(req.ip().unwrap_or_default())
                .into()
        });
        let router = ok_route("/s").middleware_named("throttle:second");

        let first = join_all((0..7).map(|_| get(&router, "/s"))).await;
        // The window opened during these requests: it ends no later than a
        // second after the last answer.
        let opened_by = Instant::now();
        let refused: Vec<&HttpResponse> = first.iter().filter(|r| r.status_code() == 429).collect();
        assert_eq!(first.len() - refused.len(), 4);
        assert_eq!(refused.len(), 3);
        for r in &refused {
            assert_eq!(r.header_str("retry-after"), Some("1"));
        }
        assert_eq!(
            RateLimiter::attempts("second:203.0.113.5").await.unwrap(),
            4
        );

        // Obeying Retry-After, the three come back together, and fit.
        tokio::time::sleep(Duration::from_millis(1_100).saturating_sub(opened_by.elapsed())).await;
        let back = join_all((0..3).map(|_| get(&router, "/s"))).await;
        assert!(back.iter().all(|r| r.status_code() == 200));
        let mut left: Vec<&str> = back.iter().filter_map(remaining).collect();
        left.sort_unstable();
        assert_eq!(left, ["1", "2", "3"]);
    })
    .await;
}

#[tokio::test]
async fn an_after_callback_counts_failures_only_on_redis() {
    let server = RedisServer::start();
    let prefix = unique_prefix("after");
    let app = app_on_redis(&server.url(), &prefix);
    app.scope(async {
        let router = Router::new()
            .get("/login", |req: Request| async move {
                let status = if req.query_param("fail").is_some() {
                    401
                } else {
                    200
                };
                HttpResponse::text("login").status(status)
            })
            .middleware(ThrottleRequestsMiddleware::with_limits(vec![
                Limit::per_second(2, 2)
                    .by("failed-logins")
                    .after(|r| r.status_code() >= 400),
            ]));
        for _ in 0..3 {
            assert_eq!(remaining(&get(&router, "/login").await), Some("2"));
        }
        assert_eq!(remaining(&get(&router, "/login?fail=1").await), Some("1"));
        assert_eq!(remaining(&get(&router, "/login?fail=1").await), Some("0"));
        let refused = get(&router, "/login").await;
        assert_eq!(refused.status_code(), 429);
        assert_eq!(RateLimiter::attempts("failed-logins").await.unwrap(), 2);
    })
    .await;
}

/// `n` concurrent GETs over real connections.
async fn storm(server: &TestServer, path: &str, n: usize) -> Vec<Reply> {
    join_all((0..n).map(|_| server.get(path))).await
}

/// Asserts that exactly `limit` of `replies` were admitted, each with a
/// different count, and the rest refused.
fn assert_exactly(replies: &[Reply], limit: usize) {
    let admitted: Vec<&Reply> = replies.iter().filter(|r| r.status == 200).collect();
    let refused = replies.iter().filter(|r| r.status == 429).count();
    assert_eq!((admitted.len(), refused), (limit, replies.len() - limit));
    // Each admitted request got its own count from the atomic increment.
    let left: BTreeSet<usize> = admitted
        .iter()
        .map(|r| r.header("x-ratelimit-remaining").unwrap().parse().unwrap())
        .collect();
    assert_eq!(left, (0..limit).collect::<BTreeSet<_>>());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_concurrent_requests_admit_exactly_one_hundred() {
    let server = RedisServer::start();
    for run in 0..3 {
        let prefix = unique_prefix(&format!("storm{run}"));
        let app = app_on_redis(&server.url(), &prefix);
        app.scope(async {
            let router = ok_route("/storm").middleware_named("throttle:100,1");
            let http = TestServer::start(router).await;
            let replies = storm(&http, "/storm", 200).await;
            assert_exactly(&replies, 100);
            let key = "ip:127.0.0.1:path:/storm";
            assert_eq!(RateLimiter::attempts(key).await.unwrap(), 100, "run {run}");
            http.stop().await;
        })
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_cluster_admits_exactly_the_limit_too() {
    let cluster = RedisCluster::start(3);
    let prefix = unique_prefix("cluster");
    let app = app_on_redis(&cluster.url(), &prefix);
    app.scope(async {
        let router = ok_route("/c").middleware_named("throttle:30,1");
        let http = TestServer::start(router).await;
        assert_exactly(&storm(&http, "/c", 60).await, 30);
        let key = "ip:127.0.0.1:path:/c";
        assert_eq!(RateLimiter::attempts(key).await.unwrap(), 30);
        let available_in = RateLimiter::available_in(key).await.unwrap();
        assert!((59..=60).contains(&available_in), "{available_in}");
        http.stop().await;
    })
    .await;
}

#[tokio::test]
async fn a_redis_that_is_down_gets_the_backend_policy() {
    let mut server = RedisServer::start();
    let prefix = unique_prefix("down");
    let app = app_on_redis(&server.url(), &prefix);
    app.scope(async {
        let open = ok_route("/open").middleware(ThrottleRequestsMiddleware::with(5, 1, ""));
        let closed = ok_route("/closed").middleware(
            ThrottleRequestsMiddleware::with(5, 1, "")
                .on_backend_error(BackendErrorPolicy::FailClosed),
        );
        assert_eq!(remaining(&get(&open, "/open").await), Some("4"));

        server.stop();
        let started = Instant::now();
        let through = get(&open, "/open").await;
        assert_eq!(
            (through.status_code(), through.body_text()),
            (200, "ok".into())
        );
        assert_eq!(through.header_str("x-ratelimit-limit"), None);
        let refused = get(&closed, "/closed").await;
        assert_eq!(refused.status_code(), 503);
        assert_eq!(refused.header_str("retry-after"), Some("1"));
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "{:?}",
            started.elapsed()
        );

        // Back up (empty): counting starts again.
        server.restart();
        let mut back = None;
        for _ in 0..50 {
            let r = get(&open, "/open").await;
            if r.header_str("x-ratelimit-limit").is_some() {
                back = Some(r);
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(remaining(&back.expect("redis came back")), Some("4"));
    })
    .await;
}

/// A limit with a window longer than Redis keeps an expiry for
/// (`Limit::new(2, Duration::MAX)`, a lifetime's limit) counts on Redis as
/// on memory: 2 admitted, then refusals. Sent as it is, its time to live
/// made Redis refuse every count (`invalid expire time`), and the throttle,
/// failing open, admitted every request. On a cluster too, where the
/// timer is written apart; and through the facade.
#[tokio::test]
async fn a_limit_with_a_window_longer_than_redis_keeps_counts_as_on_memory() {
    let server = RedisServer::start();
    let cluster = RedisCluster::start(3);
    for url in [server.url(), cluster.url()] {
        let app = app_on_redis(&url, &unique_prefix("lifetime"));
        app.scope(async {
            let router = ok_route("/x").middleware(ThrottleRequestsMiddleware::with_limits(vec![
                Limit::new(2, Duration::MAX).by("lifetime"),
            ]));
            let mut seen = Vec::new();
            for _ in 0..4 {
                seen.push(get(&router, "/x").await.status_code());
            }
            assert_eq!(seen, [200, 200, 429, 429], "{url}");
            assert_eq!(
                RateLimiter::hit("forever", i64::MAX).await.unwrap(),
                1,
                "{url}"
            );
        })
        .await;
    }
}
