//! The measured fixed-window scenarios of Laravel's `throttle:60,1`,
//! reproduced number for number through the router, on the memory store
//! with a frozen clock: every caller shares one key (one address, one
//! path), as in the measurements.

mod support;
mod throttle_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::Full;
use support::clock_at;
use support::http::TestServer;
use suprnova::clock::Clock;
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Limit, RateLimiter, Router};
use throttle_support::{memory_app as app_on, ok_routes, with_status};

const PEER: &str = "203.0.113.5:40000";
/// The bucket every scenario counts in: one address on one path.
const KEY: &str = "ip:203.0.113.5:path:/api";

fn router(alias: &str) -> Router {
    ok_routes(&["/api"]).middleware_named(alias)
}

/// `n` concurrent requests from the one caller.
async fn burst(router: &Router, n: usize) -> Vec<HttpResponse> {
    let peer: SocketAddr = PEER.parse().unwrap();
    join_all((0..n).map(|_| {
        let request = http::Request::get("/api").body(Full::<Bytes>::default());
        handle_request_with_peer(router, request.unwrap(), peer)
    }))
    .await
}

/// What a batch of responses says: how many were admitted, the
/// `Retry-After` and `X-RateLimit-Reset` of the refused ones, and the
/// `X-RateLimit-Remaining` of the admitted ones.
#[derive(Debug, Default)]
struct Tally {
    admitted: usize,
    refused: usize,
    retry_after: BTreeSet<String>,
    reset: BTreeSet<String>,
    remaining: Vec<i64>,
}

fn tally(responses: &[HttpResponse]) -> Tally {
    let mut t = Tally::default();
    for r in responses {
        match r.status_code() {
            200 => {
                t.admitted += 1;
                let remaining = r.header_str("x-ratelimit-remaining").unwrap();
                t.remaining.push(remaining.parse().unwrap());
            }
            429 => {
                t.refused += 1;
                assert_eq!(r.body_text(), "Too Many Attempts.");
                assert_eq!(r.header_str("x-ratelimit-remaining"), Some("0"));
                t.retry_after
                    .insert(r.header_str("retry-after").unwrap().to_owned());
                t.reset
                    .insert(r.header_str("x-ratelimit-reset").unwrap().to_owned());
            }
            other => panic!("unexpected status {other}: {}", r.body_text()),
        }
        assert_eq!(r.header_str("x-ratelimit-limit"), Some("60"));
    }
    t.remaining.sort_unstable();
    t
}

fn set(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

/// The Unix second of 2026-01-01 `h:m:s`, as the reset header spells it.
fn unix(h: u32, m: u32, s: u32) -> String {
    clock_at(h, m, s).unix_seconds().to_string()
}

#[tokio::test]
async fn a_window_boundary_lets_119_through_in_sixty_seconds() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let router = router("throttle:60,1");

        let opener = tally(&burst(&router, 1).await);
        assert_eq!((opener.admitted, opener.remaining), (1, vec![59]));

        clock.advance(Duration::from_secs(59));
        let late = tally(&burst(&router, 60).await);
        assert_eq!((late.admitted, late.refused), (59, 1));
        assert_eq!(late.remaining, (0..59).collect::<Vec<_>>());
        assert_eq!(late.retry_after, set(&["1"]));
        assert_eq!(late.reset, set(&[&unix(12, 1, 0)]));

        // The refused caller comes back as told, beside 60 new ones.
        clock.advance(Duration::from_secs(1));
        let next = tally(&burst(&router, 61).await);
        assert_eq!((next.admitted, next.refused), (60, 1));
        assert_eq!(next.remaining, (0..60).collect::<Vec<_>>());
        assert_eq!(next.retry_after, set(&["60"]));
        assert_eq!(next.reset, set(&[&unix(12, 2, 0)]));

        // 12:00:01 to 12:01:00: the 59 of the first window and the 60 of
        // the second. The counter itself never went above 60.
        assert_eq!(late.admitted + next.admitted, 119);
        assert_eq!(RateLimiter::attempts(KEY).await.unwrap(), 60);
    })
    .await;
}

#[tokio::test]
async fn retry_after_counts_down_to_the_end_of_the_window() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let router = router("throttle:60,1");
        let full = tally(&burst(&router, 60).await);
        assert_eq!(full.admitted, 60);
        assert_eq!(full.remaining, (0..60).collect::<Vec<_>>());

        for (at, retry_after) in [(10, "50"), (50, "10"), (59, "1")] {
            clock.set(clock_at(12, 0, at).now_utc());
            let refused = &burst(&router, 1).await[0];
            assert_eq!(refused.status_code(), 429, "at 12:00:{at}");
            assert_eq!(refused.header_str("retry-after"), Some(retry_after));
            assert_eq!(refused.header_str("x-ratelimit-limit"), Some("60"));
            assert_eq!(refused.header_str("x-ratelimit-remaining"), Some("0"));
            let reset = unix(12, 1, 0);
            assert_eq!(
                refused.header_str("x-ratelimit-reset"),
                Some(reset.as_str())
            );
        }

        clock.set(clock_at(12, 1, 0).now_utc());
        let reopened = &burst(&router, 1).await[0];
        assert_eq!(reopened.status_code(), 200);
        assert_eq!(reopened.header_str("x-ratelimit-remaining"), Some("59"));
    })
    .await;
}

#[tokio::test]
async fn callers_refused_at_different_times_all_return_at_the_boundary() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let router = router("throttle:60,1");
        assert_eq!(tally(&burst(&router, 60).await).admitted, 60);

        clock.advance(Duration::from_secs(20));
        let at_20 = tally(&burst(&router, 20).await);
        assert_eq!((at_20.admitted, at_20.refused), (0, 20));
        assert_eq!(at_20.retry_after, set(&["40"]));

        clock.advance(Duration::from_secs(20));
        let at_40 = tally(&burst(&router, 20).await);
        assert_eq!((at_40.admitted, at_40.refused), (0, 20));
        assert_eq!(at_40.retry_after, set(&["20"]));

        // Both headers point at 12:01:00.
        assert_eq!(at_20.reset, set(&[&unix(12, 1, 0)]));
        assert_eq!(at_40.reset, at_20.reset);

        // The refusals were not counted.
        assert_eq!(RateLimiter::attempts(KEY).await.unwrap(), 60);

        clock.advance(Duration::from_secs(20));
        let obeyed = tally(&burst(&router, 40).await);
        assert_eq!((obeyed.admitted, obeyed.refused), (40, 0));
        assert_eq!(obeyed.remaining, (20..60).collect::<Vec<_>>());
    })
    .await;
}

#[tokio::test]
async fn retry_after_synchronises_the_refused_into_the_next_boundary() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let router = router("throttle:60,1");

        let first = tally(&burst(&router, 140).await);
        assert_eq!((first.admitted, first.refused), (60, 80));
        assert_eq!(first.retry_after, set(&["60"]));
        assert_eq!(first.reset, set(&[&unix(12, 1, 0)]));

        clock.advance(Duration::from_secs(60));
        let second = tally(&burst(&router, 80).await);
        assert_eq!((second.admitted, second.refused), (60, 20));
        assert_eq!(second.retry_after, set(&["60"]));
        assert_eq!(second.reset, set(&[&unix(12, 2, 0)]));

        clock.advance(Duration::from_secs(60));
        let third = tally(&burst(&router, 20).await);
        assert_eq!((third.admitted, third.refused), (20, 0));
        assert_eq!(third.remaining, (40..60).collect::<Vec<_>>());
    })
    .await;
}

#[tokio::test]
async fn the_window_starts_at_the_first_request_not_at_the_minute() {
    let clock = clock_at(12, 0, 45);
    let app = app_on(&clock);
    app.scope(async {
        let router = router("throttle:60,1");
        let opened = tally(&burst(&router, 61).await);
        assert_eq!((opened.admitted, opened.refused), (60, 1));
        assert_eq!(opened.retry_after, set(&["60"]));
        assert_eq!(opened.reset, set(&[&unix(12, 1, 45)]));

        // The minute turns; the window does not.
        clock.set(clock_at(12, 1, 0).now_utc());
        let at_minute = tally(&burst(&router, 1).await);
        assert_eq!(at_minute.refused, 1);
        assert_eq!(at_minute.retry_after, set(&["45"]));

        clock.set(clock_at(12, 1, 44).now_utc());
        let last_second = tally(&burst(&router, 1).await);
        assert_eq!(last_second.retry_after, set(&["1"]));
        assert_eq!(last_second.reset, set(&[&unix(12, 1, 45)]));

        clock.set(clock_at(12, 1, 45).now_utc());
        let reopened = tally(&burst(&router, 1).await);
        assert_eq!((reopened.admitted, reopened.remaining), (1, vec![59]));
    })
    .await;
}

#[tokio::test]
async fn a_per_second_limit_beside_the_minute_lets_ten_through_the_boundary() {
    let clock = clock_at(12, 0, 59);
    let app = app_on(&clock);
    app.scope(async {
        RateLimiter::define("api", |req| {
            let ip = req.ip().unwrap_or_default();
            vec![
                Limit::per_second(5, 1).by(ip.clone()),
                Limit::per_minute(60).by(ip),
            ]
            .into()
        });
        let router = router("throttle:api");

        let before = burst(&router, 60).await;
        clock.advance(Duration::from_secs(1));
        let after = burst(&router, 60).await;

        let mut admitted = 0;
        for (r, second) in before
            .iter()
            .map(|r| (r, 59))
            .chain(after.iter().map(|r| (r, 0)))
        {
            if r.status_code() == 200 {
                admitted += 1;
                // The per-second limit has the fewest retries left.
                assert_eq!(r.header_str("x-ratelimit-limit"), Some("5"));
            } else {
                assert_eq!(r.status_code(), 429);
                assert_eq!(r.header_str("x-ratelimit-limit"), Some("5"), "at :{second}");
                assert_eq!(r.header_str("retry-after"), Some("1"));
            }
        }
        assert_eq!(admitted, 10, "not 119");
        let remaining: Vec<&str> = before
            .iter()
            .filter(|r| r.status_code() == 200)
            .map(|r| r.header_str("x-ratelimit-remaining").unwrap())
            .collect();
        assert_eq!(remaining, ["4", "3", "2", "1", "0"]);

        // Both limits are keyed by the address, so each counts under its
        // fallback key; the refused requests were counted by neither.
        let per_second = "api:203.0.113.5:attempts:5:decay:1";
        let per_minute = "api:203.0.113.5:attempts:60:decay:60";
        assert_eq!(RateLimiter::attempts(per_second).await.unwrap(), 5);
        assert_eq!(RateLimiter::attempts(per_minute).await.unwrap(), 10);
        assert_eq!(RateLimiter::attempts("api:203.0.113.5").await.unwrap(), 0);
    })
    .await;
}

#[tokio::test]
async fn refused_requests_are_not_counted() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let router = router("throttle:2,1");
        let first = burst(&router, 3).await;
        assert_eq!((with_status(&first, 200), with_status(&first, 429)), (2, 1));
        assert_eq!(RateLimiter::attempts(KEY).await.unwrap(), 2);

        // Retrying does not keep the window full either.
        clock.advance(Duration::from_secs(30));
        assert_eq!(with_status(&burst(&router, 10).await, 429), 10);
        assert_eq!(RateLimiter::attempts(KEY).await.unwrap(), 2);
        clock.advance(Duration::from_secs(30));
        assert_eq!(burst(&router, 1).await[0].status_code(), 200);
        assert_eq!(RateLimiter::attempts(KEY).await.unwrap(), 1);
    })
    .await;
}

/// The boundary scenario again, over real HTTP connections on loopback.
#[tokio::test]
async fn over_http_the_boundary_lets_119_through() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let server = TestServer::start(router("throttle:60,1")).await;
        let get = || server.get("/api");

        assert_eq!(get().await.status, 200);
        clock.advance(Duration::from_secs(59));
        let late = join_all((0..60).map(|_| get())).await;
        clock.advance(Duration::from_secs(1));
        let next = join_all((0..61).map(|_| get())).await;

        let admitted =
            |replies: &[support::http::Reply]| replies.iter().filter(|r| r.status == 200).count();
        assert_eq!(admitted(&late), 59);
        let refused: Vec<_> = late.iter().filter(|r| r.status == 429).collect();
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].header("retry-after"), Some("1"));
        assert_eq!(refused[0].body, "Too Many Attempts.");
        assert_eq!(admitted(&next), 60);
        assert_eq!(admitted(&late) + admitted(&next), 119);
        // The new window's sixty each saw a place of their own; the 61st
        // waits for the whole window, which ends at 12:02:00.
        let places: BTreeSet<_> = next
            .iter()
            .filter(|r| r.status == 200)
            .map(|r| {
                r.header("x-ratelimit-remaining")
                    .unwrap()
                    .parse::<u32>()
                    .unwrap()
            })
            .collect();
        assert_eq!(places, (0..60).collect());
        let refused: Vec<_> = next.iter().filter(|r| r.status == 429).collect();
        assert_eq!(refused.len(), 1);
        assert_eq!(refused[0].header("retry-after"), Some("60"));
        assert_eq!(refused[0].header("x-ratelimit-reset"), Some("1767268920"));
        let key = "ip:127.0.0.1:path:/api";
        assert_eq!(RateLimiter::attempts(key).await.unwrap(), 60);
        server.stop().await;
    })
    .await;
}

#[tokio::test]
async fn over_http_retry_after_counts_down() {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let server = TestServer::start(router("throttle:60,1")).await;
        let full = join_all((0..60).map(|_| server.get("/api"))).await;
        assert!(full.iter().all(|r| r.status == 200));

        clock.set(clock_at(12, 0, 10).now_utc());
        let refused = server.get("/api").await;
        assert_eq!(refused.status, 429);
        assert_eq!(refused.header("retry-after"), Some("50"));
        assert_eq!(refused.header("x-ratelimit-limit"), Some("60"));
        assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));
        let reset = unix(12, 1, 0);
        assert_eq!(refused.header("x-ratelimit-reset"), Some(reset.as_str()));

        clock.set(clock_at(12, 0, 50).now_utc());
        assert_eq!(server.get("/api").await.header("retry-after"), Some("10"));

        clock.set(clock_at(12, 1, 0).now_utc());
        let reopened = server.get("/api").await;
        assert_eq!(reopened.status, 200);
        assert_eq!(reopened.header("x-ratelimit-remaining"), Some("59"));
        server.stop().await;
    })
    .await;
}
