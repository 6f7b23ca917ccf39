//! The client address behind trusted proxies and the boot configuration, at
//! their edges: zones and brackets in forwarded entries, the `Host` header's
//! forms, and the variables that refuse boot.

#![cfg(feature = "redis")]

mod support;

use std::net::IpAddr;

use http::{HeaderMap, HeaderValue};
use support::boot::{env, plan};
use support::ip;
use support::redis::RedisServer;
use suprnova::bootstrap::bootstrap;
use suprnova::container::App;
use suprnova::http::TrustedProxies;

const XFF: &str = "x-forwarded-for";
const REAL: &str = "x-real-ip";

/// `client_ip` of a request from `peer` with the header lines `lines`.
fn client_of(list: &str, peer: &str, lines: &[(&'static str, &str)]) -> IpAddr {
    let proxies: TrustedProxies = list.parse().unwrap();
    let mut headers = HeaderMap::new();
    for (name, value) in lines {
        headers.append(*name, HeaderValue::from_str(value).unwrap());
    }
    proxies.client_ip(ip(peer), &headers)
}

// ---------------------------------------------------------------------------
// Zones in forwarded entries.

// An address with a numeric zone, in brackets with a port, ends the walk at
// its writer as every other spelling of a zone does (it was read as the
// address, zone dropped).
#[test]
fn a_numeric_zone_in_brackets_with_a_port_ends_the_walk_at_its_writer() {
    // `fe80::1%eth0` and `[fe80::1%2]` end the walk at the proxy that wrote
    // them (a zone names an interface of that proxy's host, not an address
    // another host can be counted by); the same entry with a port must too.
    let list = "10.0.0.0/8";
    for entry in ["fe80::1%eth0", "[fe80::1%2]", "[fe80::1%2]:443"] {
        let line = format!("198.51.100.7, {entry}");
        assert_eq!(
            client_of(list, "10.0.0.1", &[(XFF, &line)]),
            ip("10.0.0.1"),
            "X-Forwarded-For {line:?}"
        );
    }
}

// X-Real-IP holding a zone, with a port too, is no address.
#[test]
fn a_numeric_zone_in_x_real_ip_is_not_an_address() {
    let list = "10.0.0.0/8";
    for entry in ["fe80::1%eth0", "[fe80::1%2]", "[fe80::1%2]:443"] {
        assert_eq!(
            client_of(list, "10.0.0.1", &[(REAL, entry)]),
            ip("10.0.0.1"),
            "X-Real-IP {entry:?}"
        );
    }
}

// ---------------------------------------------------------------------------
// The cache store's Redis credentials beside REDIS_URL.

// REDIS_PASSWORD (and REDIS_USERNAME) beside a REDIS_URL without
// credentials are used (they were dropped unsaid).
#[test]
fn redis_password_beside_a_redis_url_without_credentials_is_not_dropped_unsaid() {
    // Laravel merges REDIS_URL over the connection's settings: a URL that
    // names no password keeps REDIS_PASSWORD (and REDIS_USERNAME), as it
    // keeps REDIS_CACHE_DB for a URL that names no database, which the
    // crate does merge. Either the credentials are used, or boot refuses,
    // naming the variable it does not read; planning a connection without
    // them leaves boot to fail later with "refuses the credentials given
    // ... give them in REDIS_USERNAME and REDIS_PASSWORD", which are set.
    for credentials in [
        vec![("REDIS_PASSWORD", "s3cret")],
        vec![("REDIS_USERNAME", "app"), ("REDIS_PASSWORD", "s3cret")],
    ] {
        let mut pairs = vec![
            ("APP_ENV", "local"),
            ("CACHE_STORE", "redis"),
            ("REDIS_URL", "redis://127.0.0.1:6390"),
        ];
        pairs.extend(credentials.iter().copied());
        match plan(&pairs) {
            Ok(plan) => {
                let nodes = plan.cache.redis.expect("a Redis cache").nodes().to_vec();
                assert!(
                    nodes.iter().all(|node| node.contains("s3cret")),
                    "{credentials:?}: REDIS_PASSWORD is not in the planned connection {nodes:?}"
                );
            }
            Err(refused) => {
                let refused = refused.to_string();
                assert!(
                    refused.contains("REDIS_PASSWORD"),
                    "{credentials:?}: {refused}"
                );
            }
        }
    }
}

// Against a Redis that requires the password, REDIS_URL without credentials
// and REDIS_PASSWORD boots (it was refused, advising to set REDIS_PASSWORD).
#[tokio::test]
async fn a_laravel_redis_url_with_its_password_in_redis_password_boots() {
    // A Laravel application connects to this Redis with these settings.
    let server = RedisServer::start();
    let reply = server.command("CONFIG SET requirepass s3cret");
    assert!(reply.contains("OK"), "{reply}");
    let url = server.url();
    let pairs = [
        ("APP_ENV", "local"),
        ("CACHE_STORE", "redis"),
        ("REDIS_URL", url.as_str()),
        ("REDIS_PASSWORD", "s3cret"),
    ];
    let app = App::new();
    let booted = app
        .scope(bootstrap(&env(&pairs)))
        .await
        .map_err(|e| e.to_string());
    if let Err(refused) = &booted {
        assert!(
            !refused.contains("refuses the credentials given"),
            "boot asked Redis without the REDIS_PASSWORD it was given: {refused}"
        );
    }
}

// ---------------------------------------------------------------------------
// The Host header's IP literal.

// A Host whose brackets hold no IPv6 address nor IPvFuture is a bad request.
#[tokio::test]
async fn a_host_whose_brackets_hold_no_ip_literal_is_a_bad_request() {
    use support::http::TestServer;
    use suprnova::{HttpResponse, Request, Router};

    let router = Router::new().get("/", |_req: Request| async { HttpResponse::text("hi") });
    let server = TestServer::start(router).await;
    let addr = server.addr();
    let answer = |host: &'static str| async move {
        let head = format!("GET / HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n");
        let (_, answer) = support::h1::one_answer(addr, head).await;
        let answer = answer.expect("an answer");
        (
            answer.status,
            String::from_utf8_lossy(&answer.body).into_owned(),
        )
    };
    // RFC 3986: an IP literal is an IPv6 address or an IPvFuture
    // (`v<hex>.<text>`), nothing else.
    for host in ["[::1]", "[::1]:8080", "[v1.x]"] {
        assert_eq!(answer(host).await, (200, "hi".to_owned()), "{host:?}");
    }
    for host in ["[zz]", "[example.com]", "[example.com]:80", "[10.0.0.1]"] {
        let (status, body) = answer(host).await;
        assert!(
            status == 400 && body.ends_with("invalid Host header\n"),
            "{host:?}: {status} {body:?}"
        );
    }
    server.stop().await;
}
