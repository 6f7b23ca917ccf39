//! A five-minute load of seven clients (four legitimate, three not),
//! replayed through the real sliding-window limiter on the test clock at a
//! nominal limit of 600 requests a minute, and at the limits an operator
//! would try next. The counts are the ones docs/algorithms.md quotes.
//!
//! The load runs to the same expected counts straight into the memory
//! limiter (`acquire_now`), one fresh limiter per client, and as requests
//! through `RateLimitMiddleware::ip_based` on the installed memory driver:
//! the seven clients interleaved in arrival order, each from an address of
//! its own, in process (`handle_request_with_peer`) and, at 600 a minute,
//! over HTTP to a server on a loopback port.

mod support;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http_body_util::Full;
use hyper_util::client::legacy::Client as HttpClient;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use support::http::{Reply, TestServer, Transport};
use support::load::{CLIENTS, Client, arrivals, every_arrival, total};
use suprnova::clock::{Clock, FakeClock};
use suprnova::container::App;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig};
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Request, Router};

/// Where the load starts on the test clock.
const START_UNIX: u64 = 1_800_000_000;
const MINUTE: Duration = Duration::from_secs(60);

/// The limits the raising table tries.
const RAISED: [u32; 5] = [600, 800, 1_000, 1_240, 1_500];
/// The limits the lowering table tries.
const LOWERED: [u32; 4] = [600, 540, 480, 360];

/// Requests of `client` the limiter cuts at `limit` per 60 s.
fn cut(client: &Client, limit: u32) -> u32 {
    let clock = FakeClock::at_unix(START_UNIX);
    let limiter = InMemoryRateLimiter::with_clock(clock.shared());
    let cfg = SlidingWindowConfig::new(limit, MINUTE);
    let start = clock.now_utc();
    let mut refused = 0;
    for at in arrivals(client.profile) {
        clock.set(start + at);
        if !limiter.acquire_now(client.name, &cfg).unwrap().allowed {
            refused += 1;
        }
    }
    refused
}

/// Requests of each client (in the order of [`CLIENTS`]) the limiter cuts
/// at `limit` per 60 s, called directly.
fn direct_cuts(limit: u32) -> Vec<u32> {
    CLIENTS.iter().map(|c| cut(c, limit)).collect()
}

/// Where the load's requests go.
enum Via {
    /// The router, client `i` calling from 198.51.100.`i+1`.
    InProcess(Router),
    /// The server, and one client per load client on a keep-alive
    /// connection of its own, client `i` bound to 127.0.0.`i+1`.
    Http(TestServer, Vec<HttpClient<HttpConnector, Full<Bytes>>>),
}

impl Via {
    /// Serves `router` the way `transport` says, inside the current app.
    async fn start(transport: Transport, router: Router) -> Self {
        match transport {
            Transport::InProcess => Via::InProcess(router),
            Transport::Http => {
                let server = TestServer::start(router).await;
                let clients = (0..CLIENTS.len())
                    .map(|i| {
                        let mut connector = HttpConnector::new();
                        connector.set_local_address(Some(address(Ipv4Addr::LOCALHOST, i)));
                        connector.set_nodelay(true);
                        HttpClient::builder(TokioExecutor::new()).build(connector)
                    })
                    .collect();
                Via::Http(server, clients)
            }
        }
    }

    /// One `GET /load` from client `i`.
    async fn send(&self, i: usize) -> Reply {
        match self {
            Via::InProcess(router) => {
                let request = http::Request::get("/load").body(Full::<Bytes>::default());
                let from = SocketAddr::new(address(Ipv4Addr::new(198, 51, 100, 0), i), 40_000);
                let r = handle_request_with_peer(router, request.unwrap(), from).await;
                Reply {
                    status: r.status_code(),
                    headers: r.headers().clone(),
                    body: r.body_text(),
                }
            }
            Via::Http(server, clients) => {
                let request = http::Request::get(server.url("/load")).body(Full::default());
                let reply = async {
                    Reply::read(clients[i].request(request.unwrap()).await.unwrap()).await
                };
                support::within("an HTTP reply", support::http::REPLY_WITHIN, reply).await
            }
        }
    }

    /// Stops the server, if there is one.
    async fn stop(self) {
        if let Via::Http(server, _) = self {
            server.stop().await;
        }
    }
}

/// The address of client `i` in `net` (a /24): the host part is `i + 1`.
fn address(net: Ipv4Addr, i: usize) -> IpAddr {
    let [a, b, c, _] = net.octets();
    IpAddr::V4(Ipv4Addr::new(a, b, c, u8::try_from(i + 1).unwrap()))
}

/// Requests of each client (in the order of [`CLIENTS`]) refused with a 429
/// at `limit` per 60 s, when the whole load is sent through
/// `RateLimitMiddleware::ip_based` on a memory driver on the frozen clock,
/// in arrival order, each client from its own address.
async fn middleware_cuts(limit: u32, transport: Transport) -> Vec<u32> {
    let clock = FakeClock::at_unix(START_UNIX);
    let app = App::new();
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    app.scope(async {
        let router = Router::new()
            .get("/load", |_req: Request| async { HttpResponse::text("ok") })
            .middleware(RateLimitMiddleware::ip_based(limit, MINUTE));
        let via = Via::start(transport, router).await;

        let load = every_arrival();

        let start = clock.now_utc();
        let limit_header = limit.to_string();
        let mut refused = vec![0; CLIENTS.len()];
        let mut admitted = vec![0; CLIENTS.len()];
        for (at, i) in load {
            clock.set(start + at);
            let r = via.send(i).await;
            match r.status {
                200 => admitted[i] += 1,
                429 => {
                    refused[i] += 1;
                    assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
                    let retry_after: u64 = r.header("retry-after").unwrap().parse().unwrap();
                    assert!((1..=60).contains(&retry_after), "{retry_after}");
                }
                other => panic!("unexpected status {other}: {}", r.body),
            }
            assert_eq!(r.header("x-ratelimit-limit"), Some(limit_header.as_str()));
        }
        for (i, client) in CLIENTS.iter().enumerate() {
            assert_eq!(admitted[i] + refused[i], total(client), "{}", client.name);
        }
        via.stop().await;
        refused
    })
    .await
}

/// (caught, missed, falsely blocked) from the per-client cuts.
fn counts(cuts: &[u32]) -> (u32, u32, u32) {
    let (mut caught, mut missed, mut falsely) = (0, 0, 0);
    for (client, &refused) in CLIENTS.iter().zip(cuts) {
        if client.legitimate {
            falsely += refused;
        } else {
            caught += refused;
            missed += total(client) - refused;
        }
    }
    (caught, missed, falsely)
}

/// The cuts at 600 a minute, per client and in the three counts.
fn assert_cuts_at_600(cuts: &[u32]) {
    assert_eq!(cuts, [0, 640, 240, 0, 0, 4_800, 960]);
    assert_eq!(counts(cuts), (5_760, 6_900, 880));
    // Admitted: the legitimate 4,300 less 880, and the 6,900 missed.
    let admitted: u32 = CLIENTS.iter().zip(cuts).map(|(c, r)| total(c) - r).sum();
    assert_eq!(admitted, 3_420 + 6_900);
}

/// The raising table from the cuts at each of [`RAISED`]: (falsely blocked,
/// caught, missed, login attempts passed).
fn assert_raising_table(cuts_at: &[Vec<u32>]) {
    let login = &CLIENTS[6];
    let rows: Vec<(u32, u32, u32, u32)> = cuts_at
        .iter()
        .map(|cuts| {
            let (caught, missed, falsely) = counts(cuts);
            (falsely, caught, missed, total(login) - cuts[6])
        })
        .collect();
    assert_eq!(
        rows,
        vec![
            (880, 5_760, 6_900, 1_200),
            (480, 4_360, 8_300, 1_600),
            (240, 2_960, 9_700, 2_000),
            (0, 1_600, 11_060, 2_160),
            (0, 300, 12_360, 2_160),
        ]
    );
}

/// The lowering table from the cuts at each of [`LOWERED`]: (cut from the
/// bulk download, legitimate requests cut).
fn assert_lowering_table(cuts_at: &[Vec<u32>]) {
    let rows: Vec<(u32, u32)> = cuts_at
        .iter()
        .map(|cuts| {
            let legit: u32 = CLIENTS
                .iter()
                .zip(cuts)
                .filter(|(c, _)| c.legitimate)
                .map(|(_, r)| r)
                .sum();
            (cuts[4], legit)
        })
        .collect();
    assert_eq!(rows, vec![(0, 880), (0, 1_000), (300, 1_120), (900, 1_360)]);
}

#[test]
fn the_load_has_16960_requests() {
    let all: u32 = CLIENTS.iter().map(total).sum();
    let bad: u32 = CLIENTS.iter().filter(|c| !c.legitimate).map(total).sum();
    assert_eq!((all, bad, all - bad), (16_960, 12_660, 4_300));
}

#[test]
fn sliding_window_cuts_per_client_at_600_a_minute() {
    assert_cuts_at_600(&direct_cuts(600));
}

#[test]
fn raising_the_sliding_limit_lets_the_attack_peak_through() {
    assert_raising_table(&RAISED.map(direct_cuts));
}

#[test]
fn lowering_the_limit_to_see_the_bulk_download_cuts_a_quarter_of_the_work() {
    assert_lowering_table(&LOWERED.map(direct_cuts));
}

#[tokio::test]
async fn through_the_middleware_the_sliding_window_cuts_the_same_at_600_a_minute() {
    assert_cuts_at_600(&middleware_cuts(600, Transport::InProcess).await);
}

/// The same 16,960 requests over HTTP, one at a time on keep-alive
/// connections (about 3.5 s in the test profile). The tables below would
/// replay the load nine times more, so they run in process only.
#[tokio::test]
async fn over_http_the_sliding_window_cuts_the_same_at_600_a_minute() {
    assert_cuts_at_600(&middleware_cuts(600, Transport::Http).await);
}

#[tokio::test]
async fn through_the_middleware_raising_the_limit_lets_the_attack_peak_through() {
    let mut cuts_at = Vec::new();
    for limit in RAISED {
        cuts_at.push(middleware_cuts(limit, Transport::InProcess).await);
    }
    assert_raising_table(&cuts_at);
}

#[tokio::test]
async fn through_the_middleware_lowering_the_limit_cuts_a_quarter_of_the_work() {
    let mut cuts_at = Vec::new();
    for limit in LOWERED {
        cuts_at.push(middleware_cuts(limit, Transport::InProcess).await);
    }
    assert_lowering_table(&cuts_at);
}
