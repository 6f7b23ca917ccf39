//! The client address behind trusted proxies, at its edges: entries that
//! are not plain ASCII addresses, a listener on IPv6 loopback, HTTP/2, and
//! the keys derived from the address (`identity_key`'s address fallback,
//! the throttle's guest key).

mod support;

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, HeaderValue};
use http_body_util::Full;
use support::http::TestServer;
use support::{clock_at, ip};
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, identity_key};
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Request, Router};

const XFF: &str = "x-forwarded-for";
const REAL: &str = "x-real-ip";

fn proxies(list: &str) -> TrustedProxies {
    list.parse().unwrap()
}

fn app_trusting(list: &str) -> App {
    let app = App::new();
    app.install(Arc::new(proxies(list)));
    app
}

/// `client_ip` of a request from `peer` with the header lines `lines`,
/// each given as raw bytes.
fn client_of(list: &str, peer: &str, lines: &[(&'static str, &[u8])]) -> IpAddr {
    let mut headers = HeaderMap::new();
    for (name, value) in lines {
        headers.append(*name, HeaderValue::from_bytes(value).unwrap());
    }
    proxies(list).client_ip(ip(peer), &headers)
}

/// Answers with `req.ip()`, or `none`.
fn ip_router() -> Router {
    Router::new().get("/ip", |req: Request| async move {
        HttpResponse::text(req.ip().unwrap_or_else(|| "none".to_owned()))
    })
}

fn get_with(url: String, lines: &[(&str, &str)]) -> http::Request<Full<Bytes>> {
    let mut builder = http::Request::get(url);
    for (name, value) in lines {
        builder = builder.header(*name, *value);
    }
    builder.body(Full::default()).unwrap()
}

// ---------------------------------------------------------------------------
// Entries that are not plain ASCII addresses.

#[test]
fn an_entry_holding_bytes_outside_ascii_ends_the_walk_at_its_writer() {
    // `parse_forwarded_ip` says: "Anything else (`unknown`, an empty entry,
    // bytes that are not ASCII) is `None`", and an entry that is not an
    // address ends the walk at the proxy that wrote it. A no-break space
    // (UTF-8 C2 A0) or an ideographic space (E3 80 80) around an address is
    // such an entry: no proxy writes one, and the deployment guide counts it
    // as garbage.
    let list = "10.0.0.0/8";
    for entry in [
        &b"198.51.100.7\xc2\xa0"[..],
        b"\xc2\xa0198.51.100.7",
        b"\xe3\x80\x80198.51.100.7",
        b"198.51.100.7\xe2\x80\xa8",
    ] {
        assert_eq!(
            client_of(list, "10.0.0.1", &[(XFF, entry)]),
            ip("10.0.0.1"),
            "X-Forwarded-For {entry:?}"
        );
        assert_eq!(
            client_of(list, "10.0.0.1", &[(REAL, entry)]),
            ip("10.0.0.1"),
            "X-Real-IP {entry:?}"
        );
    }
}

#[test]
fn an_address_with_a_zone_ends_the_walk_at_its_writer() {
    // A zone names an interface of the host that wrote the entry; the
    // entry is not an address another host can be counted by. Written by
    // the peer, it ends the walk there; the client to its left is not read.
    let list = "10.0.0.0/8, fe80::/10";
    assert_eq!(
        client_of(list, "10.0.0.1", &[(XFF, b"198.51.100.7, fe80::1%eth0")]),
        ip("10.0.0.1")
    );
    // Written by a trusted hop, the walk stops at that hop.
    assert_eq!(
        client_of(
            list,
            "10.0.0.1",
            &[(XFF, b"198.51.100.7, fe80::1%eth0, 10.0.0.3")]
        ),
        ip("10.0.0.3")
    );
    // Left of the client it is never read.
    assert_eq!(
        client_of(list, "10.0.0.1", &[(XFF, b"fe80::1%eth0, 198.51.100.7")]),
        ip("198.51.100.7")
    );
}

#[test]
fn a_client_cannot_hide_behind_a_mapped_or_bracketed_spelling_of_a_proxy() {
    // The entries a client writes on the left, whatever they spell, are
    // never read past its own address, which its proxy appended.
    let list = "10.0.0.0/8, 2001:db8:ffff::/48";
    for forged in [
        "::ffff:10.0.0.3",
        "[::ffff:10.0.0.3]:80",
        "[2001:db8:ffff::1]:443",
        "10.0.0.3:80",
        "0:0:0:0:0:ffff:a00:3",
    ] {
        let line = format!("{forged}, 203.0.113.50");
        assert_eq!(
            client_of(list, "10.0.0.1", &[(XFF, line.as_bytes())]),
            ip("203.0.113.50"),
            "{forged}"
        );
    }
    // Each of those spellings of a trusted hop is skipped when the hop
    // appended it.
    for hop in [
        "::ffff:10.0.0.3",
        "[::ffff:10.0.0.3]:80",
        "0:0:0:0:0:ffff:a00:3",
    ] {
        let line = format!("203.0.113.50, {hop}");
        assert_eq!(
            client_of(list, "10.0.0.1", &[(XFF, line.as_bytes())]),
            ip("203.0.113.50"),
            "{hop}"
        );
    }
}

// ---------------------------------------------------------------------------
// Through the real server.

#[tokio::test]
async fn an_ipv6_loopback_proxy_through_the_real_server() {
    if std::net::TcpListener::bind("[::1]:0").is_err() {
        eprintln!("no IPv6 loopback here; skipped");
        return;
    }
    let app = app_trusting("::1");
    app.scope(async {
        let server = TestServer::start_on("[::1]:0", ip_router()).await;
        let url = format!("http://{}/ip", server.addr());
        let r = server
            .send(get_with(
                url.clone(),
                &[(XFF, "6.6.6.6, [2001:db8:1:2::7]:5123")],
            ))
            .await;
        assert_eq!((r.status, r.body.as_str()), (200, "2001:db8:1:2::7"));
        // The proxy itself, with no header, is its own client.
        let r = server.send(get_with(url.clone(), &[])).await;
        assert_eq!(r.body, "::1");
        // An IPv4 client in IPv6 form behind it is the IPv4 client.
        let r = server
            .send(get_with(url, &[(XFF, "::ffff:198.51.100.4, ::1")]))
            .await;
        assert_eq!(r.body, "198.51.100.4");
        server.stop().await;
    })
    .await;
}

#[tokio::test]
async fn an_ipv4_proxy_reaching_a_dual_stack_listener_is_trusted_as_listed() {
    // A server bound to `[::]` sees an IPv4 proxy as `::ffff:127.0.0.2`;
    // the proxy is listed in IPv4 form, as the deployment guide lists it.
    if std::net::TcpListener::bind("[::]:0").is_err() {
        eprintln!("no IPv6 here; skipped");
        return;
    }
    let app = app_trusting("127.0.0.2");
    app.scope(async {
        let server = TestServer::start_on("[::]:0", ip_router()).await;
        let url = format!("http://127.0.0.1:{}/ip", server.addr().port());
        let r = server
            .send_from(
                ip("127.0.0.2"),
                get_with(url.clone(), &[(XFF, "6.6.6.6, 198.51.100.7")]),
            )
            .await;
        assert_eq!((r.status, r.body.as_str()), (200, "198.51.100.7"));
        // Another IPv4 source is not the proxy, though both arrive in one
        // IPv6 /96.
        let r = server
            .send_from(ip("127.0.0.3"), get_with(url, &[(XFF, "198.51.100.7")]))
            .await;
        assert_eq!(r.body, "127.0.0.3");
        server.stop().await;
    })
    .await;
}

#[tokio::test]
async fn forwarded_lines_over_http2_are_walked_as_over_http1() {
    let app = app_trusting("127.0.0.1");
    app.scope(async {
        let server = TestServer::start(ip_router()).await;
        let r = server
            .send_h2(get_with(
                server.url("/ip"),
                &[
                    (XFF, "6.6.6.6"),
                    (XFF, "198.51.100.9"),
                    (XFF, "127.0.0.1"),
                    (REAL, "6.6.6.7"),
                ],
            ))
            .await;
        assert_eq!((r.status, r.body.as_str()), (200, "198.51.100.9"));
        server.stop().await;
    })
    .await;
}

// ---------------------------------------------------------------------------
// Keys derived from the address.

#[tokio::test]
async fn identity_key_s_address_fallback_reads_the_forwarded_client_by_its_64() {
    let app = app_trusting("10.0.0.0/8");
    let router = Router::new().get("/reset", |req: Request| async move {
        HttpResponse::text(identity_key(&req, "email", "reset"))
    });
    let key = |peer: &'static str, xff: &'static str| {
        let router = &router;
        let app = &app;
        async move {
            let req = get_with("/reset".to_owned(), &[(XFF, xff)]);
            app.scope(handle_request_with_peer(router, req, peer.parse().unwrap()))
                .await
                .body_text()
        }
    };
    assert_eq!(
        key("10.0.0.1:9", "2001:db8:1:2::7").await,
        "reset:ip:2001:db8:1:2::/64"
    );
    assert_eq!(
        key("10.0.0.1:9", "6.6.6.6, ::ffff:198.51.100.4").await,
        "reset:ip:198.51.100.4"
    );
    // A peer nobody trusts is keyed by itself, whatever it writes.
    assert_eq!(
        key("203.0.113.9:9", "198.51.100.4").await,
        "reset:ip:203.0.113.9"
    );
}

#[tokio::test]
async fn ip_based_keeps_forwarded_clients_of_one_proxy_apart_and_one_64_together() {
    let clock = clock_at(9, 0, 0);
    let app = app_trusting("10.0.0.0/8");
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    let router = Router::new()
        .get("/r", |_req: Request| async { HttpResponse::text("ok") })
        .middleware(RateLimitMiddleware::ip_based(1, Duration::from_secs(60)));
    let status = |xff: &'static str| {
        let router = &router;
        let app = &app;
        async move {
            let req = get_with("/r".to_owned(), &[(XFF, xff)]);
            app.scope(handle_request_with_peer(
                router,
                req,
                "10.0.0.1:9".parse().unwrap(),
            ))
            .await
            .status_code()
        }
    };
    assert_eq!(status("198.51.100.1").await, 200);
    assert_eq!(status("198.51.100.2").await, 200, "another client");
    assert_eq!(status("6.6.6.6, 198.51.100.1").await, 429, "forged left");
    assert_eq!(status("2001:db8:7:7::1").await, 200);
    assert_eq!(status("2001:db8:7:7:ffff::2").await, 429, "same /64");
    // The proxy's own bucket is untouched by its clients.
    assert_eq!(status("10.0.0.9").await, 200, "every hop trusted");
    clock.advance(Duration::from_secs(60));
    assert_eq!(status("198.51.100.1").await, 200, "window over");
}
