//! `RateLimitMiddleware::connections_per_ip` on plain routes: what it counts,
//! when it gives a place back, how it refuses.

mod support;

use std::sync::Arc;
use support::{ip, peer};

use bytes::Bytes;
use http_body_util::Full;
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::RateLimitMiddleware;
use suprnova::server::{handle_request, handle_request_with_peer};
use suprnova::{HttpResponse, Request, Router};

use support::held::{Gate, entered};
use support::http::TestServer;

/// Runs `GET path` from `from` in a task of its own.
fn spawn_get(
    router: &Arc<Router>,
    path: &'static str,
    from: &'static str,
) -> tokio::task::JoinHandle<HttpResponse> {
    let router = router.clone();
    tokio::spawn(async move { handle_request_with_peer(&router, get(path), peer(from)).await })
}

fn get(path: &str) -> http::Request<Full<Bytes>> {
    http::Request::get(path).body(Full::default()).unwrap()
}

#[tokio::test]
async fn a_place_is_held_while_the_handler_runs_and_freed_after() {
    let cap = RateLimitMiddleware::connections_per_ip(2);
    let (gate, mut rx) = Gate::new();
    let router = Arc::new(gate.router("/slow", &cap));

    let first = spawn_get(&router, "/slow", "203.0.113.1:1000");
    entered(&mut rx).await;
    assert_eq!(cap.open_for(ip("203.0.113.1")), 1);

    let second = spawn_get(&router, "/slow", "203.0.113.1:1001");
    entered(&mut rx).await;
    assert_eq!(cap.open_for(ip("203.0.113.1")), 2);

    // The third from the same address is refused without running the handler.
    let third = handle_request_with_peer(&router, get("/slow"), peer("203.0.113.1:1002")).await;
    assert_eq!(third.status_code(), 429);
    assert_eq!(third.body_text(), "429 Too Many Requests");
    assert_eq!(third.header_str("retry-after"), None);
    assert!(
        rx.try_recv().is_err(),
        "the refused request reached the handler"
    );

    gate.release(2);
    assert_eq!(first.await.unwrap().status_code(), 200);
    assert_eq!(second.await.unwrap().status_code(), 200);
    assert_eq!(cap.open_for(ip("203.0.113.1")), 0);
    assert_eq!(
        cap.addresses_open(),
        0,
        "a count back at zero leaves the map"
    );

    // With the places given back, the address is served again.
    gate.release(1);
    let again = handle_request_with_peer(&router, get("/slow"), peer("203.0.113.1:1003")).await;
    assert_eq!(again.status_code(), 200);
}

#[tokio::test]
async fn another_address_is_not_affected_and_ipv6_counts_by_64() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let (gate, mut rx) = Gate::new();
    let router = Arc::new(gate.router("/slow", &cap));

    let held = spawn_get(&router, "/slow", "[2001:db8:5:6::1]:1");
    entered(&mut rx).await;

    let same_64 =
        handle_request_with_peer(&router, get("/slow"), peer("[2001:db8:5:6:abcd::2]:1")).await;
    assert_eq!(same_64.status_code(), 429);
    assert_eq!(cap.open_for(ip("2001:db8:5:6:ffff::9")), 1);

    let other_64 = spawn_get(&router, "/slow", "[2001:db8:5:7::1]:1");
    entered(&mut rx).await;
    assert_eq!(cap.open_for(ip("2001:db8:5:7::1")), 1);

    // An IPv4 address written in IPv6 form counts as the IPv4 address.
    let v4 = tokio::spawn({
        let router = router.clone();
        async move {
            handle_request_with_peer(&router, get("/slow"), peer("[::ffff:198.51.100.3]:1")).await
        }
    });
    entered(&mut rx).await;
    assert_eq!(cap.open_for(ip("198.51.100.3")), 1);
    let v4_again = handle_request_with_peer(&router, get("/slow"), peer("198.51.100.3:2")).await;
    assert_eq!(v4_again.status_code(), 429);

    gate.release(3);
    for task in [held, other_64, v4] {
        assert_eq!(task.await.unwrap().status_code(), 200);
    }
    assert_eq!(cap.addresses_open(), 0);
}

#[tokio::test]
async fn a_clone_shares_the_counts_across_routes() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let (gate, mut rx) = Gate::new();
    let router = Arc::new(
        gate.router("/a", &cap)
            .merge(gate.router("/b", &cap.clone())),
    );

    let on_a = spawn_get(&router, "/a", "192.0.2.8:1");
    entered(&mut rx).await;
    let on_b = handle_request_with_peer(&router, get("/b"), peer("192.0.2.8:2")).await;
    assert_eq!(on_b.status_code(), 429);

    gate.release(1);
    assert_eq!(on_a.await.unwrap().status_code(), 200);
    assert_eq!(cap.open_for(ip("192.0.2.8")), 0);
}

#[tokio::test]
async fn a_request_with_no_address_is_not_counted() {
    let cap = RateLimitMiddleware::connections_per_ip(0);
    let router = Router::new()
        .get("/", |_req: Request| async { HttpResponse::text("ok") })
        .middleware(cap.clone());
    let in_process = handle_request(&router, get("/")).await;
    assert_eq!(in_process.status_code(), 200);
    let with_peer = handle_request_with_peer(&router, get("/"), peer("192.0.2.1:1")).await;
    assert_eq!(with_peer.status_code(), 429);
    assert_eq!(cap.addresses_open(), 0);
}

#[tokio::test]
async fn reading_the_body_consumes_the_request_and_gives_the_place_back() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let (gate, mut rx) = Gate::new();
    let handler_gate = gate.clone();
    let router = Arc::new(
        Router::new()
            .post("/upload", move |req: Request| {
                let gate = handler_gate.clone();
                async move {
                    let body = req.into_bytes(1024).await.unwrap();
                    let _ = gate.entered.send(());
                    let _permit = gate.release.acquire().await.unwrap();
                    HttpResponse::text(format!("{} bytes", body.len()))
                }
            })
            .middleware(cap.clone()),
    );
    let upload = tokio::spawn({
        let router = router.clone();
        async move {
            let req = http::Request::post("/upload")
                .body(Full::new(Bytes::from_static(b"12345")))
                .unwrap();
            handle_request_with_peer(&router, req, peer("192.0.2.9:1")).await
        }
    });
    entered(&mut rx).await;
    assert_eq!(cap.open_for(ip("192.0.2.9")), 0);
    gate.release(1);
    assert_eq!(upload.await.unwrap().body_text(), "5 bytes");
}

#[tokio::test]
async fn through_the_real_server_each_client_address_has_its_own_cap() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let (gate, mut rx) = Gate::new();
    let server = Arc::new(TestServer::start(gate.router("/slow", &cap)).await);
    let url = server.url("/slow");

    let held = tokio::spawn({
        let (server, url) = (server.clone(), url.clone());
        async move { server.send_from(ip("127.0.0.1"), get(&url)).await }
    });
    entered(&mut rx).await;
    assert_eq!(cap.open_for(ip("127.0.0.1")), 1);

    let refused = server.send_from(ip("127.0.0.1"), get(&url)).await;
    assert_eq!(refused.status, 429);
    assert_eq!(refused.body, "429 Too Many Requests");
    assert_eq!(refused.header("retry-after"), None);

    let other = tokio::spawn({
        let (server, url) = (server.clone(), url.clone());
        async move { server.send_from(ip("127.0.0.2"), get(&url)).await }
    });
    entered(&mut rx).await;
    assert_eq!(cap.open_for(ip("127.0.0.2")), 1);

    gate.release(2);
    assert_eq!(held.await.unwrap().status, 200);
    assert_eq!(other.await.unwrap().status, 200);
    assert_eq!(cap.addresses_open(), 0);
}

/// Behind a trusted proxy the client is the one its `X-Forwarded-For`
/// names; a peer that is not a trusted proxy is counted by its own address,
/// whatever header it writes.
#[tokio::test]
async fn behind_a_trusted_proxy_each_forwarded_client_has_its_own_cap() {
    let app = App::new();
    app.install(Arc::new("127.0.0.1".parse::<TrustedProxies>().unwrap()));
    app.scope(async {
        let cap = RateLimitMiddleware::connections_per_ip(1);
        let (gate, mut rx) = Gate::new();
        let server = Arc::new(TestServer::start(gate.router("/slow", &cap)).await);
        let send = |peer: &'static str, client: &'static str| {
            let server = server.clone();
            let request = http::Request::get(server.url("/slow"))
                .header("X-Forwarded-For", client)
                .body(Full::default())
                .unwrap();
            async move { server.send_from(ip(peer), request).await }
        };

        let held = tokio::spawn(send("127.0.0.1", "203.0.113.1"));
        entered(&mut rx).await;
        assert_eq!(cap.open_for(ip("203.0.113.1")), 1);
        assert_eq!(cap.open_for(ip("127.0.0.1")), 0);

        let refused = send("127.0.0.1", "203.0.113.1").await;
        assert_eq!(refused.status, 429);
        assert_eq!(refused.body, "429 Too Many Requests");

        let other = tokio::spawn(send("127.0.0.1", "203.0.113.2"));
        entered(&mut rx).await;
        assert_eq!(cap.open_for(ip("203.0.113.2")), 1);

        // 127.0.0.2 is no proxy of ours: its header is its own writing.
        let spoofed = tokio::spawn(send("127.0.0.2", "203.0.113.3"));
        entered(&mut rx).await;
        assert_eq!(cap.open_for(ip("127.0.0.2")), 1);
        assert_eq!(cap.open_for(ip("203.0.113.3")), 0);

        gate.release(3);
        assert_eq!(held.await.unwrap().status, 200);
        assert_eq!(other.await.unwrap().status, 200);
        assert_eq!(spoofed.await.unwrap().status, 200);
        assert_eq!(cap.addresses_open(), 0);
    })
    .await;
}
