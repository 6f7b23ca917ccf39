//! Named limiters: registered with `RateLimiter::define` / `r#for` in the
//! current container, resolved per request with `RateLimiter::limiter`,
//! with fallback keys for limits that share a key. Through the real server
//! and in process with `handle_request_with_peer`.

mod support;

use std::sync::Arc;

use support::http::TestServer;
use suprnova::cache::MemoryStore;
use suprnova::clock::FakeClock;
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Limit, LimitResult, RateLimiter, Request, Router};

fn request() -> Request {
    Request::new(http::Request::get("/").body(String::new()).unwrap())
        .with_peer("203.0.113.5:4000".parse().unwrap())
}

fn keys(result: &LimitResult) -> Vec<String> {
    result.limits().iter().map(|l| l.key.clone()).collect()
}

/// A container with a limiter on a frozen clock, current on this thread.
fn app() -> App {
    let clock = FakeClock::at_unix(946_684_800);
    let app = App::new();
    let store = Arc::new(MemoryStore::with_clock(clock.shared()));
    app.install(Arc::new(CacheRateLimiter::new(store, clock.shared())));
    app
}

#[test]
fn a_single_limit_keeps_its_key() {
    let _current = app().enter();
    RateLimiter::define("api", |req| {
        let key = req.ip().unwrap_or_else(|| "anon".into());
        Limit::per_minute(60).by(format!("ip:{key}")).into()
    });
    let result = RateLimiter::limiter("api").unwrap()(&request());
    assert_eq!(keys(&result), ["ip:203.0.113.5"]);
    let limit = &result.limits()[0];
    assert_eq!((limit.max_attempts, limit.decay_seconds), (60, 60));
}

#[test]
fn limits_that_share_a_key_count_under_their_fallback_keys() {
    let _current = app().enter();
    RateLimiter::define("api", |req| {
        let ip = req.ip().unwrap_or_else(|| "anon".into());
        vec![
            Limit::per_minute(60).by(ip.clone()),
            Limit::per_day(10_000).by(ip),
        ]
        .into()
    });
    let result = RateLimiter::limiter("api").unwrap()(&request());
    assert_eq!(
        keys(&result),
        [
            "203.0.113.5:attempts:60:decay:60",
            "203.0.113.5:attempts:10000:decay:86400"
        ]
    );
}

#[test]
fn every_member_of_a_duplicate_group_is_renamed_as_laravel_does() {
    let _current = app().enter();
    RateLimiter::define("global", |_| {
        vec![Limit::per_second(3, 1), Limit::per_minute(5)].into()
    });
    RateLimiter::define("mixed", |_| {
        vec![
            Limit::per_second(3, 1).by("u1"),
            Limit::per_minute(5).by("u1"),
            Limit::per_hour(100).by("other"),
        ]
        .into()
    });
    RateLimiter::define("same", |_| {
        vec![Limit::per_minute(5).by("x"), Limit::per_minute(5).by("x")].into()
    });
    RateLimiter::define("zero", |_| {
        vec![
            Limit::per_second(3, 1).by("0"),
            Limit::per_minute(5).by("0"),
        ]
        .into()
    });
    RateLimiter::define("accents", |_| {
        vec![
            Limit::per_minute(5).by("café"),
            Limit::per_hour(50).by("cafe"),
        ]
        .into()
    });
    let req = request();
    let resolve = |name: &str| keys(&RateLimiter::limiter(name).unwrap()(&req));
    assert_eq!(
        resolve("global"),
        ["attempts:3:decay:1", "attempts:5:decay:60"]
    );
    assert_eq!(
        resolve("mixed"),
        ["u1:attempts:3:decay:1", "u1:attempts:5:decay:60", "other"]
    );
    // Identical limits still share one key.
    assert_eq!(
        resolve("same"),
        ["x:attempts:5:decay:60", "x:attempts:5:decay:60"]
    );
    // "0" gives no key part, as PHP's truthiness has it.
    assert_eq!(
        resolve("zero"),
        ["attempts:3:decay:1", "attempts:5:decay:60"]
    );
    // Keys are compared as written.
    assert_eq!(resolve("accents"), ["café", "cafe"]);
}

#[test]
fn a_response_short_circuits_and_none_is_unlimited() {
    let _current = app().enter();
    RateLimiter::define("closed", |_| {
        HttpResponse::text("maintenance").status(503).into()
    });
    RateLimiter::r#for("admin", |_| Limit::none().into());
    let req = request();
    match RateLimiter::limiter("closed").unwrap()(&req) {
        LimitResult::Response(r) => assert_eq!(
            (r.status_code(), r.body_text()),
            (503, "maintenance".into())
        ),
        other => panic!("expected a response, got {other:?}"),
    }
    match RateLimiter::limiter("admin").unwrap()(&req) {
        LimitResult::Unlimited(u) => assert_eq!(u.max_attempts, i64::MAX),
        other => panic!("expected unlimited, got {other:?}"),
    }
}

#[test]
fn limiters_belong_to_their_container_and_can_be_replaced() {
    let app = app();
    {
        let _current = app.enter();
        assert!(RateLimiter::limiter("api").is_none());
        RateLimiter::define("api", |_| Limit::per_minute(1).into());
        RateLimiter::define("api", |_| Limit::per_minute(2).into());
        let result = RateLimiter::limiter("api").unwrap()(&request());
        assert_eq!(result.limits()[0].max_attempts, 2);
    }
    let other = App::new();
    let _current = other.enter();
    assert!(RateLimiter::limiter("api").is_none());
}

/// A route that applies the named limiter `api` the way a throttle does:
/// check every limit, then count each under `api:<key>`.
fn throttled_router() -> Router {
    Router::new().get("/items", |req: Request| async move {
        let Some(limiter) = RateLimiter::limiter("api") else {
            return HttpResponse::text("no limiter").status(503);
        };
        let limits = match limiter(&req) {
            LimitResult::Limits(limits) => limits,
            LimitResult::Response(response) => return response,
            LimitResult::Unlimited(_) => return HttpResponse::text("unlimited"),
        };
        for limit in &limits {
            let key = format!("api:{}", limit.key);
            if RateLimiter::too_many_attempts(&key, limit.max_attempts)
                .await
                .unwrap()
            {
                let retry = RateLimiter::available_in(&key).await.unwrap();
                return HttpResponse::text("Too Many Attempts.")
                    .status(429)
                    .header("Retry-After", retry.to_string());
            }
        }
        let mut counts = Vec::new();
        for limit in &limits {
            let key = format!("api:{}", limit.key);
            counts.push(format!(
                "{key}={}",
                RateLimiter::hit(&key, limit.decay_seconds).await.unwrap()
            ));
        }
        HttpResponse::text(counts.join(","))
    })
}

fn define_api() {
    RateLimiter::define("api", |req| {
        let ip = req.ip().unwrap_or_else(|| "anon".into());
        vec![
            Limit::per_second(2, 1).by(ip.clone()),
            Limit::per_minute(60).by(ip),
        ]
        .into()
    });
}

#[tokio::test]
async fn in_process_requests_count_under_the_fallback_keys() {
    let app = app();
    app.scope(async {
        define_api();
        let router = throttled_router();
        let get = || http::Request::get("/items").body(String::new()).unwrap();
        let peer = "203.0.113.5:4000".parse().unwrap();
        let first = handle_request_with_peer(&router, get(), peer).await;
        assert_eq!(
            first.body_text(),
            "api:203.0.113.5:attempts:2:decay:1=1,api:203.0.113.5:attempts:60:decay:60=1"
        );
        assert_eq!(
            handle_request_with_peer(&router, get(), peer)
                .await
                .status_code(),
            200
        );
        let refused = handle_request_with_peer(&router, get(), peer).await;
        assert_eq!(refused.status_code(), 429);
        assert_eq!(refused.header_str("retry-after"), Some("1"));
        // The refused request was not counted; the minute's bucket holds 2.
        assert_eq!(
            RateLimiter::attempts("api:203.0.113.5:attempts:60:decay:60")
                .await
                .unwrap(),
            2
        );
        // Another address has buckets of its own.
        let other =
            handle_request_with_peer(&router, get(), "198.51.100.7:4000".parse().unwrap()).await;
        assert_eq!(other.status_code(), 200);
    })
    .await;
}

#[tokio::test]
async fn through_the_real_server_each_client_address_gets_its_buckets() {
    let app = app();
    app.scope(async {
        define_api();
        let server = TestServer::start(throttled_router()).await;
        let from = |last: u8| std::net::IpAddr::from([127, 0, 0, last]);
        let get = || {
            http::Request::get(server.url("/items"))
                .body(http_body_util::Full::default())
                .unwrap()
        };
        let a1 = server.send_from(from(2), get()).await;
        assert_eq!(
            a1.body,
            "api:127.0.0.2:attempts:2:decay:1=1,api:127.0.0.2:attempts:60:decay:60=1"
        );
        assert_eq!(server.send_from(from(2), get()).await.status, 200);
        let a3 = server.send_from(from(2), get()).await;
        assert_eq!((a3.status, a3.header("retry-after")), (429, Some("1")));
        let b1 = server.send_from(from(3), get()).await;
        assert_eq!(
            b1.body,
            "api:127.0.0.3:attempts:2:decay:1=1,api:127.0.0.3:attempts:60:decay:60=1"
        );
        server.stop().await;
    })
    .await;
}
