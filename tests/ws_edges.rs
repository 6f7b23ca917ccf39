//! WebSocket routes and the open-connection cap at their edges, through the
//! real server on loopback: where a place is counted (forwarded clients,
//! IPv6 networks), when it is given back (routers dispatched from a route,
//! refused upgrades, shutdowns), and what a request that is no handshake
//! gets.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::Full;
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{ConnectionsPerIp, RateLimitMiddleware, RateLimiterDriver};
use suprnova::ws::Message;
use suprnova::{HttpResponse, Middleware, Next, Request, Response, Router, async_trait, ws};
use tokio::sync::mpsc;
use tokio_tungstenite::tungstenite::Error as WsError;

use support::http::TestServer;
use support::within;
use support::ws::{Client, Echo, close, connect_with, next_text, refusal};

// ---- handlers and middleware ----------------------------------------------------

/// Replaces whatever the rest of the chain answered with a 403.
struct ReplaceWith403;

#[async_trait]
impl Middleware for ReplaceWith403 {
    async fn handle(&self, request: Request, next: Next) -> Response {
        let _ = next(request).await;
        Err(HttpResponse::text("403 Forbidden").status(403))
    }
}

/// Reports what the cap counts for 127.0.0.1 once the rest of the chain
/// has answered.
struct CountAfter(ConnectionsPerIp, mpsc::UnboundedSender<usize>);

#[async_trait]
impl Middleware for CountAfter {
    async fn handle(&self, request: Request, next: Next) -> Response {
        let answer = next(request).await;
        let _ = self.1.send(self.0.open_for(ip("127.0.0.1")));
        answer
    }
}

// ---- a client ---------------------------------------------------------------

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

/// Opens `/ws` from `from`, forwarding for `client`.
async fn forwarded(server: SocketAddr, from: &str, client: &str) -> Result<Client, WsError> {
    connect_with(server, from, "/ws", &[("x-forwarded-for", client)]).await
}

async fn connect(server: SocketAddr, path: &str) -> Result<Client, WsError> {
    connect_with(server, "127.0.0.1", path, &[]).await
}

/// Sends `text` and returns the echo.
async fn echo(client: &mut Client, text: &str) -> String {
    client.send(Message::text(text)).await.unwrap();
    next_text(client).await
}

/// An app whose rate limiter is the memory driver on a fake clock.
fn app_with_memory_limiter() -> App {
    let app = App::new();
    let clock = support::clock_at(12, 0, 0);
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    app
}

/// A router whose `GET /ws` hands the request to `inner`, as an
/// application dispatches a router of its own from one of its routes.
fn dispatching_to(inner: Router) -> Router {
    let inner = Arc::new(inner);
    Router::new().get("/ws", move |request: Request| {
        let inner = inner.clone();
        async move { inner.dispatch(request).await }
    })
}

// ---- routers dispatched from a route ------------------------------------------

/// The control for the case below: mounted directly, a socket route whose
/// limiter reads the body behind the cap keeps the socket's place.
#[tokio::test]
async fn a_body_reading_limiter_behind_the_cap_keeps_the_sockets_place() {
    app_with_memory_limiter()
        .scope(async {
            let cap = RateLimitMiddleware::connections_per_ip(1);
            let router = ws!("/ws", Echo).middleware(cap.clone()).middleware(
                RateLimitMiddleware::ip_based(100, Duration::from_secs(60)).key_reads_body(1024),
            );
            let server = TestServer::start(router).await;
            let mut first = connect(server.addr(), "/ws").await.unwrap();
            assert_eq!(echo(&mut first, "hi").await, "127.0.0.1 hi");
            assert_eq!(cap.open_for(ip("127.0.0.1")), 1);
            let (status, body, _) = refusal(connect(server.addr(), "/ws").await);
            assert_eq!((status, body.as_str()), (429, "429 Too Many Requests"));
            close(first).await;
            support::held::open_becomes(&cap, ip("127.0.0.1"), 0).await;
            server.stop().await;
        })
        .await;
}

/// A socket router dispatched from an application's route: a middleware
/// of that router that reads the body behind the cap (`key_reads_body`)
/// runs before the socket route's handler, and must leave the place in
/// place, as it does when the router is mounted directly.
#[tokio::test]
async fn a_body_reading_limiter_in_a_dispatched_router_keeps_the_sockets_place() {
    app_with_memory_limiter()
        .scope(async {
            let cap = RateLimitMiddleware::connections_per_ip(1);
            let inner = ws!("/ws", Echo).middleware(cap.clone()).middleware(
                RateLimitMiddleware::ip_based(100, Duration::from_secs(60)).key_reads_body(1024),
            );
            let server = TestServer::start(dispatching_to(inner)).await;
            let mut first = connect(server.addr(), "/ws").await.unwrap();
            assert_eq!(echo(&mut first, "hi").await, "127.0.0.1 hi");
            let counted = cap.open_for(ip("127.0.0.1"));
            let second = connect(server.addr(), "/ws").await;
            let second_opened = second.is_ok();
            if let Ok(second) = second {
                close(second).await;
            }
            close(first).await;
            server.stop().await;
            assert_eq!(
                (counted, second_opened),
                (1, false),
                "an open socket holds its place, and a second one from its address is refused"
            );
        })
        .await;
}

// ---- refused upgrades ----------------------------------------------------------

/// A later middleware that replaces the 101 gives the place back at once:
/// by the time its refusal has left the chain, nothing is counted.
#[tokio::test]
async fn a_replaced_101_has_given_its_place_back_when_the_refusal_leaves_the_chain() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let (seen, mut counts) = mpsc::unbounded_channel();
    let router = ws!("/ws", Echo)
        .middleware(CountAfter(cap.clone(), seen))
        .middleware(cap.clone())
        .middleware(ReplaceWith403);
    let server = TestServer::start(router).await;
    let (status, body, _) = refusal(connect(server.addr(), "/ws").await);
    assert_eq!((status, body.as_str()), (403, "403 Forbidden"));
    assert_eq!(
        within("the count", Duration::from_secs(5), counts.recv()).await,
        Some(0)
    );
    server.stop().await;
}

// ---- where a place is counted --------------------------------------------------

/// Behind a trusted proxy each forwarded client has its own places, an
/// IPv6 client's /64 shares them, an IPv4 address written in IPv6 form is
/// the IPv4 address, and a peer that is no proxy of ours is counted by its
/// own address whatever it forwards. The socket's `client_ip` is the
/// forwarded client.
#[tokio::test]
async fn forwarded_socket_clients_are_counted_by_address_and_64() {
    let app = App::new();
    app.install(Arc::new("127.0.0.1".parse::<TrustedProxies>().unwrap()));
    app.scope(async {
        let cap = RateLimitMiddleware::connections_per_ip(1);
        let server = TestServer::start(ws!("/ws", Echo).middleware(cap.clone())).await;
        let addr = server.addr();
        let via_proxy = |client: &'static str| forwarded(addr, "127.0.0.1", client);

        let mut a = via_proxy("2001:db8:1:2::1").await.unwrap();
        assert_eq!(echo(&mut a, "hi").await, "2001:db8:1:2::1 hi");
        assert_eq!(cap.open_for(ip("2001:db8:1:2:ffff::7")), 1);
        assert_eq!(cap.open_for(ip("127.0.0.1")), 0);

        let (status, body, headers) = refusal(via_proxy("2001:db8:1:2:abcd::9").await);
        assert_eq!((status, body.as_str()), (429, "429 Too Many Requests"));
        assert!(headers.get("retry-after").is_none());

        let mut b = via_proxy("2001:db8:1:3::1").await.unwrap();
        assert_eq!(echo(&mut b, "hi").await, "2001:db8:1:3::1 hi");

        let mut c = via_proxy("::ffff:203.0.113.7").await.unwrap();
        assert_eq!(echo(&mut c, "hi").await, "203.0.113.7 hi");
        assert_eq!(cap.open_for(ip("203.0.113.7")), 1);
        let (status, _, _) = refusal(via_proxy("203.0.113.7").await);
        assert_eq!(status, 429);

        // 127.0.0.2 is no proxy of ours: it is counted as itself.
        let spoofer = |client: &'static str| forwarded(addr, "127.0.0.2", client);
        let mut d = spoofer("198.51.100.1").await.unwrap();
        assert_eq!(echo(&mut d, "hi").await, "127.0.0.2 hi");
        let (status, _, _) = refusal(spoofer("198.51.100.2").await);
        assert_eq!(status, 429, "a new forwarded address does not buy a place");

        close(a).await;
        support::held::open_becomes(&cap, ip("2001:db8:1:2::1"), 0).await;
        let again = via_proxy("2001:db8:1:2:abcd::9").await.unwrap();
        for client in [again, b, c, d] {
            close(client).await;
        }
        for address in ["2001:db8:1:2::1", "203.0.113.7", "127.0.0.2"] {
            support::held::open_becomes(&cap, ip(address), 0).await;
        }
        assert_eq!(cap.addresses_open(), 0);
        server.stop().await;
    })
    .await;
}

/// Over IPv6 loopback the socket is counted by the peer's /64.
#[tokio::test]
async fn an_ipv6_peer_is_counted_by_its_64() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    }
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let server = TestServer::start_on("[::1]:0", ws!("/ws", Echo).middleware(cap.clone())).await;
    let mut client = connect_with(server.addr(), "::1", "/ws", &[])
        .await
        .unwrap();
    assert_eq!(echo(&mut client, "hi").await, "::1 hi");
    assert_eq!(cap.open_for(ip("::1")), 1);
    assert_eq!(cap.open_for(ip("::2")), 1, "::2 is in the /64 of ::1");
    let (status, _, _) = refusal(connect_with(server.addr(), "::1", "/ws", &[]).await);
    assert_eq!(status, 429);
    close(client).await;
    support::held::open_becomes(&cap, ip("::1"), 0).await;
    server.stop().await;
}

// ---- the end of a session -------------------------------------------------------

/// A shutdown with sockets open ends every session and gives back every
/// place.
#[tokio::test]
async fn a_shutdown_gives_back_the_places_of_open_sockets() {
    let cap = RateLimitMiddleware::connections_per_ip(5);
    let server = TestServer::start(ws!("/ws", Echo).middleware(cap.clone())).await;
    let mut clients = Vec::new();
    for n in 0..3 {
        let mut client = connect(server.addr(), "/ws").await.unwrap();
        assert_eq!(
            echo(&mut client, &n.to_string()).await,
            format!("127.0.0.1 {n}")
        );
        clients.push(client);
    }
    assert_eq!(cap.open_for(ip("127.0.0.1")), 3);
    // The clients answer the server's close as they read it.
    let readers: Vec<_> = clients
        .into_iter()
        .map(|mut client| {
            tokio::spawn(async move { while let Some(Ok(_)) = client.next().await {} })
        })
        .collect();
    within("the shutdown", Duration::from_secs(15), server.stop()).await;
    assert_eq!(cap.open_for(ip("127.0.0.1")), 0);
    for reader in readers {
        within("a client's end", Duration::from_secs(5), reader)
            .await
            .unwrap();
    }
}

// ---- requests that are no handshake ----------------------------------------------

/// An HTTP/2 request to a socket route cannot carry `Upgrade` (RFC 9113,
/// 8.2.2): it is told to upgrade with a 426, and the cap's place goes with
/// the request.
#[tokio::test]
async fn an_http2_get_on_a_socket_route_gets_426_and_keeps_no_place() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let server = TestServer::start(ws!("/ws", Echo).middleware(cap.clone())).await;
    let request = http::Request::get(server.url("/ws"))
        .header("sec-websocket-version", "13")
        .header("sec-websocket-key", "dGhlIHNhbXBsZSBub25jZQ==")
        .body(Full::<Bytes>::default())
        .unwrap();
    let reply = server.send_h2(request).await;
    assert_eq!(reply.status, 426, "{}", reply.body);
    assert!(reply.body.contains("WebSocket"), "{}", reply.body);
    assert_eq!(cap.open_for(ip("127.0.0.1")), 0);
    server.stop().await;
}

// ---- holds of one's own ----------------------------------------------------------

/// A value kept with `hold_for_connection`, whose drop gives a count back.
struct Slot(Arc<std::sync::atomic::AtomicUsize>);

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The middleware of the reference: counts what its requests hold.
struct CountOpen(Arc<std::sync::atomic::AtomicUsize>);

#[async_trait]
impl Middleware for CountOpen {
    async fn handle(&self, mut request: Request, next: Next) -> Response {
        self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        request.hold_for_connection(Slot(self.0.clone()));
        next(request).await
    }
}

/// A hold of one's own lives as long as the socket's session, and a clone
/// of the cap on a plain route counts with the socket route's places.
#[tokio::test]
async fn a_hold_of_ones_own_lives_with_the_session_and_a_clone_counts_across_routes() {
    use std::sync::atomic::Ordering;
    let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = Router::new()
        .get("/plain", |_req: Request| async {
            HttpResponse::text("plain")
        })
        .middleware(cap.clone())
        .merge(
            ws!("/ws", Echo)
                .middleware(cap.clone())
                .middleware(CountOpen(open.clone())),
        );
    let server = TestServer::start(router).await;
    let mut client = connect(server.addr(), "/ws").await.unwrap();
    assert_eq!(echo(&mut client, "hi").await, "127.0.0.1 hi");
    assert_eq!(open.load(Ordering::SeqCst), 1);
    let plain = server.get("/plain").await;
    assert_eq!(
        (plain.status, plain.body.as_str()),
        (429, "429 Too Many Requests")
    );
    assert_eq!(plain.header("retry-after"), None);
    close(client).await;
    support::held::open_becomes(&cap, ip("127.0.0.1"), 0).await;
    assert_eq!(open.load(Ordering::SeqCst), 0);
    assert_eq!(server.get("/plain").await.status, 200);
    server.stop().await;
}
