//! The measured fixed-window scenarios of Laravel's `throttle:60,1`,
//! reproduced number for number on the memory store with a frozen clock:
//! every caller shares one key (one address, one path), as in the
//! measurements.
//!
//! Each scenario is written once, against a [`Via`], and runs twice (see
//! [`both_ways!`]): in process through the router
//! (`handle_request_with_peer`, from [`PEER`]) and over real HTTP
//! connections to a server on a loopback port (from 127.0.0.1). The
//! assertions are the same both ways; only the address in the keys differs.

mod support;
mod throttle_support;

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::future::join_all;
use http_body_util::Full;
use support::clock_at;
use support::http::{Reply, Tally, TestServer, Transport};
use suprnova::clock::Clock;
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Limit, RateLimiter, Router};
use throttle_support::{memory_app as app_on, ok_routes};

/// The caller of the in-process runs.
const PEER: &str = "203.0.113.5:40000";

fn router(alias: &str) -> Router {
    ok_routes(&["/api"]).middleware_named(alias)
}

/// The one caller of a scenario, sending to its router one way or the other.
enum Via {
    /// The router, called from [`PEER`].
    InProcess(Router),
    /// The server, called from 127.0.0.1.
    Http(TestServer),
}

impl Via {
    /// Serves `router` the way `transport` says. Call it inside the app's
    /// scope: the server runs in the container current when it starts.
    async fn start(transport: Transport, router: Router) -> Self {
        match transport {
            Transport::InProcess => Via::InProcess(router),
            Transport::Http => Via::Http(TestServer::start(router).await),
        }
    }

    /// The address the router sees the caller at.
    fn ip(&self) -> &'static str {
        match self {
            Via::InProcess(_) => "203.0.113.5",
            Via::Http(_) => "127.0.0.1",
        }
    }

    /// The bucket of a `throttle:N,M` alias for the caller: one address on
    /// one path.
    fn key(&self) -> String {
        format!("ip:{}:path:/api", self.ip())
    }

    /// One `GET /api`.
    async fn get(&self) -> Reply {
        match self {
            Via::InProcess(router) => {
                let peer: SocketAddr = PEER.parse().unwrap();
                let request = http::Request::get("/api").body(Full::<Bytes>::default());
                reply(&handle_request_with_peer(router, request.unwrap(), peer).await)
            }
            Via::Http(server) => server.get("/api").await,
        }
    }

    /// `n` concurrent requests from the one caller, in the order sent.
    async fn burst(&self, n: usize) -> Vec<Reply> {
        join_all((0..n).map(|_| self.get())).await
    }

    /// Stops the server, if there is one.
    async fn stop(self) {
        if let Via::Http(server) = self {
            server.stop().await;
        }
    }
}

/// An in-process response read as a client reads one off the wire.
fn reply(response: &HttpResponse) -> Reply {
    Reply {
        status: response.status_code(),
        headers: response.headers().clone(),
        body: response.body_text(),
    }
}

/// Generates, for each scenario `async fn name(Transport)`, the tests
/// `in_process::name` and `over_http::name`.
macro_rules! both_ways {
    ($($scenario:ident),* $(,)?) => {
        mod in_process {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Transport::InProcess).await;
                }
            )*
        }
        mod over_http {
            $(
                #[tokio::test]
                async fn $scenario() {
                    super::$scenario(super::Transport::Http).await;
                }
            )*
        }
    };
}

both_ways!(
    a_window_boundary_lets_119_through_in_sixty_seconds,
    retry_after_counts_down_to_the_end_of_the_window,
    callers_refused_at_different_times_all_return_at_the_boundary,
    retry_after_synchronises_the_refused_into_the_next_boundary,
    the_window_starts_at_the_first_request_not_at_the_minute,
    a_per_second_limit_beside_the_minute_lets_ten_through_the_boundary,
    refused_requests_are_not_counted,
);

/// [`support::http::tally`] of a batch of `throttle:60,1` replies, whose
/// refusals are Laravel's.
fn tally(replies: &[Reply]) -> Tally {
    let t = support::http::tally(replies);
    assert!(
        t.refusal_bodies
            .iter()
            .all(|body| body == "Too Many Attempts."),
        "{:?}",
        t.refusal_bodies
    );
    assert!(t.limits.iter().all(|limit| limit == "60"), "{:?}", t.limits);
    t
}

/// How many of `replies` have `status`.
fn with_status(replies: &[Reply], status: u16) -> usize {
    replies.iter().filter(|r| r.status == status).count()
}

fn set(values: &[&str]) -> BTreeSet<String> {
    values.iter().map(|v| (*v).to_owned()).collect()
}

/// The Unix second of 2026-01-01 `h:m:s`, as the reset header spells it.
fn unix(h: u32, m: u32, s: u32) -> String {
    clock_at(h, m, s).unix_seconds().to_string()
}

async fn a_window_boundary_lets_119_through_in_sixty_seconds(transport: Transport) {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let via = Via::start(transport, router("throttle:60,1")).await;

        let opener = tally(&via.burst(1).await);
        assert_eq!((opener.admitted, opener.remaining), (1, vec![59]));

        clock.advance(Duration::from_secs(59));
        let late = tally(&via.burst(60).await);
        assert_eq!((late.admitted, late.refused), (59, 1));
        assert_eq!(late.remaining, (0..59).collect::<Vec<_>>());
        assert_eq!(late.retry_after, set(&["1"]));
        assert_eq!(late.reset, set(&[&unix(12, 1, 0)]));

        // The refused caller comes back as told, beside 60 new ones. The
        // new window's sixty each see a place of their own; the 61st waits
        // for the whole window, which ends at 12:02:00.
        clock.advance(Duration::from_secs(1));
        let next = tally(&via.burst(61).await);
        assert_eq!((next.admitted, next.refused), (60, 1));
        assert_eq!(next.remaining, (0..60).collect::<Vec<_>>());
        assert_eq!(next.retry_after, set(&["60"]));
        assert_eq!(next.reset, set(&[&unix(12, 2, 0)]));
        assert_eq!(next.reset, set(&["1767268920"]));

        // 12:00:01 to 12:01:00: the 59 of the first window and the 60 of
        // the second. The counter itself never went above 60.
        assert_eq!(late.admitted + next.admitted, 119);
        assert_eq!(RateLimiter::attempts(&via.key()).await.unwrap(), 60);
        via.stop().await;
    })
    .await;
}

async fn retry_after_counts_down_to_the_end_of_the_window(transport: Transport) {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let via = Via::start(transport, router("throttle:60,1")).await;
        let full = tally(&via.burst(60).await);
        assert_eq!((full.admitted, full.refused), (60, 0));
        assert_eq!(full.remaining, (0..60).collect::<Vec<_>>());

        for (at, retry_after) in [(10, "50"), (50, "10"), (59, "1")] {
            clock.set(clock_at(12, 0, at).now_utc());
            let refused = via.get().await;
            assert_eq!(refused.status, 429, "at 12:00:{at}");
            assert_eq!(refused.body, "Too Many Attempts.");
            assert_eq!(refused.header("retry-after"), Some(retry_after));
            assert_eq!(refused.header("x-ratelimit-limit"), Some("60"));
            assert_eq!(refused.header("x-ratelimit-remaining"), Some("0"));
            let reset = unix(12, 1, 0);
            assert_eq!(refused.header("x-ratelimit-reset"), Some(reset.as_str()));
        }

        clock.set(clock_at(12, 1, 0).now_utc());
        let reopened = via.get().await;
        assert_eq!(reopened.status, 200);
        assert_eq!(reopened.header("x-ratelimit-remaining"), Some("59"));
        via.stop().await;
    })
    .await;
}

async fn callers_refused_at_different_times_all_return_at_the_boundary(transport: Transport) {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let via = Via::start(transport, router("throttle:60,1")).await;
        assert_eq!(tally(&via.burst(60).await).admitted, 60);

        clock.advance(Duration::from_secs(20));
        let at_20 = tally(&via.burst(20).await);
        assert_eq!((at_20.admitted, at_20.refused), (0, 20));
        assert_eq!(at_20.retry_after, set(&["40"]));

        clock.advance(Duration::from_secs(20));
        let at_40 = tally(&via.burst(20).await);
        assert_eq!((at_40.admitted, at_40.refused), (0, 20));
        assert_eq!(at_40.retry_after, set(&["20"]));

        // Both headers point at 12:01:00.
        assert_eq!(at_20.reset, set(&[&unix(12, 1, 0)]));
        assert_eq!(at_40.reset, at_20.reset);

        // The refusals were not counted.
        assert_eq!(RateLimiter::attempts(&via.key()).await.unwrap(), 60);

        clock.advance(Duration::from_secs(20));
        let obeyed = tally(&via.burst(40).await);
        assert_eq!((obeyed.admitted, obeyed.refused), (40, 0));
        assert_eq!(obeyed.remaining, (20..60).collect::<Vec<_>>());
        via.stop().await;
    })
    .await;
}

async fn retry_after_synchronises_the_refused_into_the_next_boundary(transport: Transport) {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let via = Via::start(transport, router("throttle:60,1")).await;

        let first = tally(&via.burst(140).await);
        assert_eq!((first.admitted, first.refused), (60, 80));
        assert_eq!(first.retry_after, set(&["60"]));
        assert_eq!(first.reset, set(&[&unix(12, 1, 0)]));

        clock.advance(Duration::from_secs(60));
        let second = tally(&via.burst(80).await);
        assert_eq!((second.admitted, second.refused), (60, 20));
        assert_eq!(second.retry_after, set(&["60"]));
        assert_eq!(second.reset, set(&[&unix(12, 2, 0)]));

        clock.advance(Duration::from_secs(60));
        let third = tally(&via.burst(20).await);
        assert_eq!((third.admitted, third.refused), (20, 0));
        assert_eq!(third.remaining, (40..60).collect::<Vec<_>>());
        via.stop().await;
    })
    .await;
}

async fn the_window_starts_at_the_first_request_not_at_the_minute(transport: Transport) {
    let clock = clock_at(12, 0, 45);
    let app = app_on(&clock);
    app.scope(async {
        let via = Via::start(transport, router("throttle:60,1")).await;
        let opened = tally(&via.burst(61).await);
        assert_eq!((opened.admitted, opened.refused), (60, 1));
        assert_eq!(opened.retry_after, set(&["60"]));
        assert_eq!(opened.reset, set(&[&unix(12, 1, 45)]));

        // The minute turns; the window does not.
        clock.set(clock_at(12, 1, 0).now_utc());
        let at_minute = tally(&via.burst(1).await);
        assert_eq!(at_minute.refused, 1);
        assert_eq!(at_minute.retry_after, set(&["45"]));

        clock.set(clock_at(12, 1, 44).now_utc());
        let last_second = tally(&via.burst(1).await);
        assert_eq!(last_second.refused, 1);
        assert_eq!(last_second.retry_after, set(&["1"]));
        assert_eq!(last_second.reset, set(&[&unix(12, 1, 45)]));

        clock.set(clock_at(12, 1, 45).now_utc());
        let reopened = tally(&via.burst(1).await);
        assert_eq!((reopened.admitted, reopened.remaining), (1, vec![59]));
        via.stop().await;
    })
    .await;
}

async fn a_per_second_limit_beside_the_minute_lets_ten_through_the_boundary(transport: Transport) {
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
        let via = Via::start(transport, router("throttle:api")).await;

        let before = via.burst(60).await;
        clock.advance(Duration::from_secs(1));
        let after = via.burst(60).await;

        let mut admitted = 0;
        for (r, second) in before
            .iter()
            .map(|r| (r, 59))
            .chain(after.iter().map(|r| (r, 0)))
        {
            if r.status == 200 {
                admitted += 1;
                // The per-second limit has the fewest retries left.
                assert_eq!(r.header("x-ratelimit-limit"), Some("5"));
            } else {
                assert_eq!(r.status, 429);
                assert_eq!(r.header("x-ratelimit-limit"), Some("5"), "at :{second}");
                assert_eq!(r.header("retry-after"), Some("1"));
            }
        }
        assert_eq!(admitted, 10, "not 119");
        assert_eq!(with_status(&before, 200), 5);
        assert_eq!(with_status(&after, 200), 5);
        // Which five of the concurrent sixty get the places is up to the
        // scheduler over HTTP; the places themselves are not.
        let mut remaining: Vec<&str> = before
            .iter()
            .filter(|r| r.status == 200)
            .map(|r| r.header("x-ratelimit-remaining").unwrap())
            .collect();
        remaining.sort_unstable();
        assert_eq!(remaining, ["0", "1", "2", "3", "4"]);

        // Both limits are keyed by the address, so each counts under its
        // fallback key; the refused requests were counted by neither.
        let ip = via.ip();
        let per_second = format!("api:{ip}:attempts:5:decay:1");
        let per_minute = format!("api:{ip}:attempts:60:decay:60");
        assert_eq!(RateLimiter::attempts(&per_second).await.unwrap(), 5);
        assert_eq!(RateLimiter::attempts(&per_minute).await.unwrap(), 10);
        let shared = format!("api:{ip}");
        assert_eq!(RateLimiter::attempts(&shared).await.unwrap(), 0);
        via.stop().await;
    })
    .await;
}

async fn refused_requests_are_not_counted(transport: Transport) {
    let clock = clock_at(12, 0, 0);
    let app = app_on(&clock);
    app.scope(async {
        let via = Via::start(transport, router("throttle:2,1")).await;
        let key = via.key();
        let first = via.burst(3).await;
        assert_eq!((with_status(&first, 200), with_status(&first, 429)), (2, 1));
        assert_eq!(RateLimiter::attempts(&key).await.unwrap(), 2);

        // Retrying does not keep the window full either.
        clock.advance(Duration::from_secs(30));
        assert_eq!(with_status(&via.burst(10).await, 429), 10);
        assert_eq!(RateLimiter::attempts(&key).await.unwrap(), 2);
        clock.advance(Duration::from_secs(30));
        assert_eq!(via.get().await.status, 200);
        assert_eq!(RateLimiter::attempts(&key).await.unwrap(), 1);
        via.stop().await;
    })
    .await;
}
