//! Named limiters and the `throttle` middleware at the edges of their keys:
//! whose requests count in whose bucket, for signed-in users, for the
//! values of a route's parameters, and for the limits of a named limiter,
//! in process on the memory store with a frozen clock, and over real HTTP
//! connections on a Redis store started for the test.

mod support;
mod throttle_support;

use bytes::Bytes;
use http_body_util::Full;
use support::clock_at;
use support::http::TestServer;
#[cfg(feature = "redis")]
use support::redis::RedisServer;
#[cfg(feature = "redis")]
use support::unique_prefix;
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router, ThrottleRequestsMiddleware};
#[cfg(feature = "redis")]
use throttle_support::{SignIn, app_on_redis};
use throttle_support::{get_as_guest, memory_app};

async fn ok(_req: Request) -> HttpResponse {
    HttpResponse::text("ok")
}

/// The reference: "The bucket is one for each signed-in user" and "The
/// numeric forms count each signed-in user in a bucket of their own". Two
/// users whose ids differ (`tom&jerry@example.com` and
/// `tomajerry@example.com`, both valid addresses) must not spend one
/// budget. Over real HTTP, on Redis, where the bucket is a key anyone can
/// read.
#[cfg(feature = "redis")]
#[tokio::test]
async fn two_signed_in_users_never_share_a_bucket() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("users");
    let app = app_on_redis(&redis.url(), &prefix);
    app.scope(async {
        let router = Router::new()
            .get("/api/items", ok)
            .middleware(ThrottleRequestsMiddleware::default())
            .wrap(SignIn);
        let server = TestServer::start(router).await;
        let as_user = |user: &str| {
            http::Request::get(server.url("/api/items"))
                .header("x-user", user)
                .body(Full::<Bytes>::default())
                .unwrap()
        };
        for n in (0..60).rev() {
            let r = server.send(as_user("tom&jerry@example.com")).await;
            assert_eq!(r.status, 200);
            assert_eq!(r.header("x-ratelimit-remaining"), Some(&*n.to_string()));
        }
        let other = server.send(as_user("tomajerry@example.com")).await;
        let keys = redis.command(&format!("KEYS {prefix}*"));
        assert_eq!(
            (other.status, other.header("x-ratelimit-remaining")),
            (200, Some("59")),
            "another user was refused by the first one's count; the store holds: {keys:?}"
        );
        server.stop().await;
    })
    .await;
}

/// The reference keys `with` (`throttle:60,1`) per path, and the type's
/// docs say so for parameters: "each value of a route's parameters
/// (`/items/1`, `/items/2`) in a bucket of its own". `/tags/a&b` and
/// `/tags/aab` are two values; the first one's budget spent must leave the
/// second one's whole.
#[tokio::test]
async fn each_value_of_a_route_parameter_counts_apart() {
    let clock = clock_at(12, 0, 0);
    memory_app(&clock)
        .scope(async {
            let router = Router::new()
                .get("/tags/{tag}", ok)
                .middleware(ThrottleRequestsMiddleware::with(2, 1, ""));
            for (spent, fresh) in [
                ("/tags/a&b", "/tags/aab"),
                ("/tags/caf%C3%A9", "/tags/cafe"),
            ] {
                assert_eq!(get_as_guest(&router, spent).await.status_code(), 200);
                assert_eq!(get_as_guest(&router, spent).await.status_code(), 200);
                assert_eq!(get_as_guest(&router, spent).await.status_code(), 429);
                let r = get_as_guest(&router, fresh).await;
                assert_eq!(
                    (r.status_code(), r.header_str("x-ratelimit-remaining")),
                    (200, Some("1")),
                    "{fresh} was counted with {spent}"
                );
            }
        })
        .await;
}

/// A named limiter on Redis, over real HTTP: each limit counts under
/// `<name>:<key>` (the fallback keys for two limits on one key), each with
/// its `:timer`, the count and the window's end as decimal text with the
/// window as their time to live, as the reference spells them; the refused
/// request leaves both counts where they were.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_named_limiter_counts_under_its_name_and_keys_on_redis() {
    let redis = RedisServer::start();
    let prefix = unique_prefix("named");
    let app = app_on_redis(&redis.url(), &prefix);
    app.scope(async {
        RateLimiter::define("api", |req| {
            let ip = req.ip().unwrap_or_else(|| "anon".into());
            vec![
                Limit::per_minute(2).by(ip.clone()),
                Limit::per_hour(100).by(ip),
            ]
            .into()
        });
        let router = Router::new()
            .get("/api/items", ok)
            .middleware_named("throttle:api");
        let server = TestServer::start(router).await;
        let first = server.get("/api/items").await;
        assert_eq!(
            (first.status, first.header("x-ratelimit-limit")),
            (200, Some("2"))
        );
        assert_eq!(first.header("x-ratelimit-remaining"), Some("1"));
        assert_eq!(server.get("/api/items").await.status, 200);
        let refused = server.get("/api/items").await;
        assert_eq!(refused.status, 429);
        assert_eq!(refused.header("x-ratelimit-limit"), Some("2"));
        assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));
        let retry: i64 = refused.header("retry-after").unwrap().parse().unwrap();
        assert!((59..=60).contains(&retry), "Retry-After {retry}");

        let minute = format!("{prefix}api:127.0.0.1:attempts:2:decay:60");
        let hour = format!("{prefix}api:127.0.0.1:attempts:100:decay:3600");
        for (key, ttl) in [(&minute, 60), (&hour, 3_600)] {
            assert!(
                redis.command(&format!("GET {key}")).ends_with("\r\n2\r\n"),
                "{key}"
            );
            let timer = redis.command(&format!("GET {key}:timer"));
            let ends: i64 = timer.lines().nth(1).unwrap().parse().unwrap();
            let now = chrono::Utc::now().timestamp();
            assert!((now..=now + ttl).contains(&ends), "{key}:timer {ends}");
            let left: i64 = redis
                .command(&format!("TTL {key}"))
                .trim_start_matches(':')
                .trim()
                .parse()
                .unwrap();
            assert!((ttl - 2..=ttl).contains(&left), "{key} TTL {left}");
        }
        server.stop().await;
    })
    .await;
}

/// A named limiter with two limits on one address, under a burst of
/// concurrent requests over real keep-alive connections: exactly the
/// tighter limit's maximum is admitted, every refusal is a 429 with the
/// tighter pair, and the looser bucket, `looser` under `looser_key`,
/// counts only the admitted requests (the tighter one, with the fewest
/// places, is counted first, and a refused request counts in neither).
/// Returns the refusals' `Retry-After` values.
async fn a_burst_admits_exactly_the_tighter_limit(looser: Limit, looser_key: &str) -> Vec<String> {
    RateLimiter::define("burst", move |req| {
        let ip = req.ip().unwrap_or_else(|| "anon".into());
        vec![looser.clone().by(ip.clone()), Limit::per_minute(30).by(ip)].into()
    });
    let router = Router::new()
        .get("/burst", ok)
        .middleware_named("throttle:burst");
    let server = TestServer::start(router).await;
    let replies = support::http::storm(&server, 20, 5, "/burst").await;
    let admitted = replies.iter().filter(|r| r.status == 200).count();
    let refused: Vec<_> = replies.iter().filter(|r| r.status == 429).collect();
    assert_eq!((admitted, refused.len()), (30, 70));
    for r in &refused {
        assert_eq!(r.header("x-ratelimit-limit"), Some("30"));
        assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
    }
    let minute = "burst:127.0.0.1:attempts:30:decay:60";
    assert_eq!(RateLimiter::attempts(minute).await.unwrap(), 30);
    assert_eq!(RateLimiter::attempts(looser_key).await.unwrap(), 30);
    server.stop().await;
    refused
        .iter()
        .map(|r| r.header("retry-after").unwrap_or_default().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_a_named_limiter_admits_exactly_its_tighter_limit() {
    let clock = clock_at(12, 0, 0);
    let app = memory_app(&clock);
    let retry_after = app
        .scope(a_burst_admits_exactly_the_tighter_limit(
            Limit::per_second(1_000, 1),
            "burst:127.0.0.1:attempts:1000:decay:1",
        ))
        .await;
    assert_eq!(retry_after, vec!["60"; 70]);
}

/// The same on Redis, with an hour's limit as the looser one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_burst_on_a_named_limiter_on_redis_admits_exactly_its_tighter_limit() {
    let redis = RedisServer::start();
    let app = app_on_redis(&redis.url(), &unique_prefix("named-burst"));
    app.scope(a_burst_admits_exactly_the_tighter_limit(
        Limit::per_hour(1_000),
        "burst:127.0.0.1:attempts:1000:decay:3600",
    ))
    .await;
}
