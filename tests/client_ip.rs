//! `Request::ip()` behind trusted proxies: a table of cases driven through
//! the router in process (`handle_request_with_peer`), a few through the real
//! server from different loopback sources, and property tests that no header
//! a client writes moves its address.

mod support;

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http::HeaderValue;
use http_body_util::Full;
use proptest::prelude::*;
use support::http::TestServer;
use suprnova::container::App;
use suprnova::http::TrustedProxies;
use suprnova::keys::bucket_address;
use suprnova::server::{handle_request, handle_request_with_peer};
use suprnova::{HttpResponse, Request, Router};

/// The proxies of most cases: a private range, one address, an IPv6 range.
const PROXIES: &str = "10.0.0.0/8, 192.0.2.10, 2001:db8:ffff::/48";

/// Answers with `req.ip()`, or `none`.
fn ip_router() -> Router {
    Router::new().get("/ip", |req: Request| async move {
        HttpResponse::text(req.ip().unwrap_or_else(|| "none".to_owned()))
    })
}

fn request(headers: &[(&str, &[u8])]) -> http::Request<Full<Bytes>> {
    let mut builder = http::Request::get("/ip");
    for (name, value) in headers {
        builder = builder.header(*name, HeaderValue::from_bytes(value).unwrap());
    }
    builder.body(Full::default()).unwrap()
}

fn app_trusting(proxies: &str) -> App {
    let app = App::new();
    app.install(Arc::new(proxies.parse::<TrustedProxies>().unwrap()));
    app
}

/// One row: a name, the TCP peer (`None`: an in-process request with no
/// peer), the header lines in order, and what `ip()` must return.
struct Case {
    name: &'static str,
    peer: Option<&'static str>,
    headers: Vec<(&'static str, Vec<u8>)>,
    expected: &'static str,
}

fn case(
    name: &'static str,
    peer: &'static str,
    headers: &[(&'static str, &str)],
    expected: &'static str,
) -> Case {
    Case {
        name,
        peer: Some(peer),
        headers: headers
            .iter()
            .map(|(n, v)| (*n, v.as_bytes().to_vec()))
            .collect(),
        expected,
    }
}

fn raw_case(
    name: &'static str,
    peer: &'static str,
    headers: Vec<(&'static str, Vec<u8>)>,
    expected: &'static str,
) -> Case {
    Case {
        name,
        peer: Some(peer),
        headers,
        expected,
    }
}

const XFF: &str = "x-forwarded-for";
const REAL: &str = "x-real-ip";

fn cases() -> Vec<Case> {
    let many_trusted_hops = format!("198.51.100.7, {}", vec!["10.0.0.3"; 5_000].join(", "));
    vec![
        // An untrusted peer is the client, whatever it writes.
        case(
            "untrusted peer, no header",
            "203.0.113.9:5000",
            &[],
            "203.0.113.9",
        ),
        case(
            "untrusted peer forges X-Forwarded-For",
            "203.0.113.9:5000",
            &[(XFF, "198.51.100.1")],
            "203.0.113.9",
        ),
        case(
            "untrusted peer forges a chain ending in a trusted proxy",
            "203.0.113.9:5000",
            &[(XFF, "198.51.100.1, 10.0.0.1")],
            "203.0.113.9",
        ),
        case(
            "untrusted peer forges X-Real-IP",
            "203.0.113.9:5000",
            &[(REAL, "198.51.100.1")],
            "203.0.113.9",
        ),
        case(
            "untrusted peer next to a trusted single address",
            "192.0.2.11:5000",
            &[(XFF, "198.51.100.1")],
            "192.0.2.11",
        ),
        case(
            "untrusted IPv6 peer forges X-Forwarded-For",
            "[2001:db8:1::9]:5000",
            &[(XFF, "198.51.100.1")],
            "2001:db8:1::9",
        ),
        case(
            "untrusted IPv4-mapped peer is its IPv4 address",
            "[::ffff:203.0.113.9]:5000",
            &[(XFF, "198.51.100.1")],
            "203.0.113.9",
        ),
        // One trusted hop.
        case("trusted peer, no header", "10.0.0.1:5000", &[], "10.0.0.1"),
        case(
            "one trusted hop",
            "10.0.0.1:5000",
            &[(XFF, "198.51.100.7")],
            "198.51.100.7",
        ),
        case(
            "one trusted hop, client forged the left of the list",
            "10.0.0.1:5000",
            &[(XFF, "6.6.6.6, 1.1.1.1, 198.51.100.7")],
            "198.51.100.7",
        ),
        case(
            "trusted single-address proxy",
            "192.0.2.10:5000",
            &[(XFF, "198.51.100.7")],
            "198.51.100.7",
        ),
        // Two trusted hops.
        case(
            "two trusted hops",
            "10.0.0.2:5000",
            &[(XFF, "198.51.100.7, 10.0.0.1")],
            "198.51.100.7",
        ),
        case(
            "two trusted hops, client forged the left of the list",
            "10.0.0.2:5000",
            &[(XFF, "6.6.6.6, 198.51.100.7, 192.0.2.10")],
            "198.51.100.7",
        ),
        case(
            "a hop that is not listed is taken for the client",
            "10.0.0.2:5000",
            &[(XFF, "198.51.100.7, 172.16.0.9")],
            "172.16.0.9",
        ),
        case(
            "every entry trusted: the leftmost",
            "10.0.0.1:5000",
            &[(XFF, "10.0.0.7, 10.0.0.8")],
            "10.0.0.7",
        ),
        // Entries that are not addresses end the walk at their writer.
        case(
            "unknown written by the peer",
            "10.0.0.1:5000",
            &[(XFF, "198.51.100.7, unknown")],
            "10.0.0.1",
        ),
        case(
            "unknown written by a trusted hop",
            "10.0.0.1:5000",
            &[(XFF, "198.51.100.7, unknown, 10.0.0.3")],
            "10.0.0.3",
        ),
        case(
            "unknown left of the client is never read",
            "10.0.0.1:5000",
            &[(XFF, "unknown, 198.51.100.7")],
            "198.51.100.7",
        ),
        case(
            "garbage entry",
            "10.0.0.1:5000",
            &[(XFF, "<script>alert(1)</script>")],
            "10.0.0.1",
        ),
        case("empty header", "10.0.0.1:5000", &[(XFF, "")], "10.0.0.1"),
        case(
            "only commas",
            "10.0.0.1:5000",
            &[(XFF, ",,,,,,,,")],
            "10.0.0.1",
        ),
        case(
            "trailing comma is an empty entry written by the peer",
            "10.0.0.1:5000",
            &[(XFF, "198.51.100.7,")],
            "10.0.0.1",
        ),
        case(
            "spaces and tabs around entries",
            "10.0.0.1:5000",
            &[(XFF, "6.6.6.6 ,\t198.51.100.7\t ,  10.0.0.3 ")],
            "198.51.100.7",
        ),
        // X-Real-IP.
        case(
            "X-Real-IP alone",
            "10.0.0.1:5000",
            &[(REAL, "198.51.100.7")],
            "198.51.100.7",
        ),
        case(
            "X-Real-IP is ignored beside X-Forwarded-For",
            "10.0.0.1:5000",
            &[(XFF, "198.51.100.7"), (REAL, "6.6.6.6")],
            "198.51.100.7",
        ),
        case(
            "X-Real-IP is ignored beside an unreadable X-Forwarded-For",
            "10.0.0.1:5000",
            &[(XFF, "unknown"), (REAL, "198.51.100.7")],
            "10.0.0.1",
        ),
        case(
            "garbage X-Real-IP",
            "10.0.0.1:5000",
            &[(REAL, "unknown")],
            "10.0.0.1",
        ),
        case(
            "two X-Real-IP lines",
            "10.0.0.1:5000",
            &[(REAL, "198.51.100.7"), (REAL, "6.6.6.6")],
            "10.0.0.1",
        ),
        case(
            "X-Real-IP with a port",
            "10.0.0.1:5000",
            &[(REAL, "198.51.100.7:4431")],
            "198.51.100.7",
        ),
        // Ports, IPv6, IPv4-mapped.
        case(
            "IPv4 entry with a port",
            "10.0.0.1:5000",
            &[(XFF, "203.0.113.7:5123")],
            "203.0.113.7",
        ),
        case(
            "IPv6 entry in brackets with a port",
            "10.0.0.1:5000",
            &[(XFF, "[2001:db8::1]:443")],
            "2001:db8::1",
        ),
        case(
            "plain IPv6 entry",
            "10.0.0.1:5000",
            &[(XFF, "2001:db8::1")],
            "2001:db8::1",
        ),
        case(
            "trusted IPv6 peer",
            "[2001:db8:ffff::1]:5000",
            &[(XFF, "198.51.100.7")],
            "198.51.100.7",
        ),
        case(
            "trusted IPv6 hop is skipped",
            "10.0.0.1:5000",
            &[(XFF, "2001:db8:1::5, [2001:db8:ffff::2]:80")],
            "2001:db8:1::5",
        ),
        case(
            "IPv4-mapped entry is returned as IPv4",
            "10.0.0.1:5000",
            &[(XFF, "::ffff:203.0.113.1")],
            "203.0.113.1",
        ),
        case(
            "IPv4-mapped trusted peer",
            "[::ffff:10.0.0.1]:5000",
            &[(XFF, "198.51.100.7")],
            "198.51.100.7",
        ),
        case(
            "IPv4-mapped trusted hop is skipped",
            "10.0.0.1:5000",
            &[(XFF, "198.51.100.7, ::ffff:10.0.0.3")],
            "198.51.100.7",
        ),
        // Several header lines read as one list, in order.
        case(
            "two lines: client on the first, hop on the second",
            "10.0.0.2:5000",
            &[(XFF, "198.51.100.7"), (XFF, "10.0.0.1")],
            "198.51.100.7",
        ),
        case(
            "two lines: forged first line",
            "10.0.0.1:5000",
            &[(XFF, "6.6.6.6"), (XFF, "198.51.100.7")],
            "198.51.100.7",
        ),
        case(
            "three lines with trusted hops on two of them",
            "10.0.0.1:5000",
            &[
                (XFF, "6.6.6.6"),
                (XFF, "198.51.100.7, 10.0.0.4"),
                (XFF, "10.0.0.3"),
            ],
            "198.51.100.7",
        ),
        case(
            "an empty line ends the walk at its writer",
            "10.0.0.1:5000",
            &[(XFF, "198.51.100.7"), (XFF, ""), (XFF, "10.0.0.3")],
            "10.0.0.3",
        ),
        // Headers that are not read, and hostile ones.
        case(
            "Forwarded is never read",
            "10.0.0.1:5000",
            &[("forwarded", "for=198.51.100.7")],
            "10.0.0.1",
        ),
        raw_case(
            "bytes outside ASCII left of the client do not hide it",
            "10.0.0.1:5000",
            vec![(XFF, b"\xff\xfe, 198.51.100.7".to_vec())],
            "198.51.100.7",
        ),
        raw_case(
            "an entry outside ASCII written by the peer",
            "10.0.0.1:5000",
            vec![(XFF, b"198.51.100.7, 203.0.113.\xb9".to_vec())],
            "10.0.0.1",
        ),
        raw_case(
            "an unreadable first line behind a trusted hop on the second",
            "10.0.0.1:5000",
            vec![(XFF, b"\xff".to_vec()), (XFF, b"10.0.0.3".to_vec())],
            "10.0.0.3",
        ),
        raw_case(
            "a hundred thousand commas",
            "10.0.0.1:5000",
            vec![(XFF, vec![b','; 100_000])],
            "10.0.0.1",
        ),
        raw_case(
            "one huge entry",
            "10.0.0.1:5000",
            vec![(XFF, vec![b'1'; 100_000])],
            "10.0.0.1",
        ),
        raw_case(
            "five thousand trusted hops",
            "10.0.0.1:5000",
            vec![(XFF, many_trusted_hops.into_bytes())],
            "198.51.100.7",
        ),
        Case {
            name: "no peer, no address",
            peer: None,
            headers: vec![(XFF, b"198.51.100.7".to_vec())],
            expected: "none",
        },
    ]
}

#[tokio::test]
async fn client_address_table() {
    let cases = cases();
    assert!(cases.len() >= 30);
    let router = ip_router();
    let app = app_trusting(PROXIES);
    let mut failures = Vec::new();
    for case in &cases {
        let headers: Vec<(&str, &[u8])> = case
            .headers
            .iter()
            .map(|(n, v)| (*n, v.as_slice()))
            .collect();
        let req = request(&headers);
        let response = app
            .scope(async {
                match case.peer {
                    Some(peer) => {
                        handle_request_with_peer(&router, req, peer.parse().unwrap()).await
                    }
                    None => handle_request(&router, req).await,
                }
            })
            .await;
        assert_eq!(response.status_code(), 200, "{}", case.name);
        let got = response.body_text();
        if got != case.expected {
            failures.push(format!(
                "{}: expected {}, got {got}",
                case.name, case.expected
            ));
        }
    }
    assert!(failures.is_empty(), "\n{}", failures.join("\n"));
}

#[tokio::test]
async fn without_trusted_proxies_the_peer_is_the_client() {
    // Nothing installed: the server falls back to no trusted proxy.
    let router = ip_router();
    let app = App::new();
    let response = app
        .scope(handle_request_with_peer(
            &router,
            request(&[(XFF, b"198.51.100.7"), (REAL, b"198.51.100.8")]),
            "10.0.0.1:5000".parse().unwrap(),
        ))
        .await;
    assert_eq!(response.body_text(), "10.0.0.1");
}

#[tokio::test]
async fn through_the_real_server_from_loopback_sources() {
    // 127.0.0.2 is the proxy; 127.0.0.3 is a client connecting directly.
    let app = app_trusting("127.0.0.2");
    app.scope(async {
        let server = TestServer::start(ip_router()).await;
        let proxy: IpAddr = "127.0.0.2".parse().unwrap();
        let direct: IpAddr = "127.0.0.3".parse().unwrap();
        let send = |from: IpAddr, headers: &[(&str, &str)]| {
            let mut builder = http::Request::get(server.url("/ip"));
            for (n, v) in headers {
                builder = builder.header(*n, *v);
            }
            server.send_from(from, builder.body(Full::default()).unwrap())
        };

        let via_proxy = send(proxy, &[(XFF, "6.6.6.6, 198.51.100.7")]).await;
        assert_eq!(
            (via_proxy.status, via_proxy.body.as_str()),
            (200, "198.51.100.7")
        );

        let forged = send(direct, &[(XFF, "198.51.100.7"), (REAL, "198.51.100.8")]).await;
        assert_eq!(forged.body, "127.0.0.3");

        let two_lines = send(proxy, &[(XFF, "198.51.100.9"), (XFF, "127.0.0.2")]).await;
        assert_eq!(two_lines.body, "198.51.100.9");

        let real_ip_only = send(proxy, &[(REAL, "[2001:db8::7]:443")]).await;
        assert_eq!(real_ip_only.body, "2001:db8::7");

        let unknown = send(proxy, &[(XFF, "198.51.100.7, unknown")]).await;
        assert_eq!(unknown.body, "127.0.0.2");

        server.stop().await;
    })
    .await;
}

#[test]
fn bucket_address_groups_ipv6_by_64_and_unmaps_ipv4() {
    let bucket = |s: &str| bucket_address(s.parse().unwrap());
    assert_eq!(bucket("203.0.113.7"), "203.0.113.7");
    assert_eq!(bucket("::ffff:203.0.113.7"), "203.0.113.7");
    assert_eq!(bucket("2001:db8:1:2::1"), "2001:db8:1:2::/64");
    assert_eq!(
        bucket("2001:db8:1:2:ffff:ffff:ffff:ffff"),
        "2001:db8:1:2::/64"
    );
    assert_ne!(bucket("2001:db8:1:3::1"), bucket("2001:db8:1:2::1"));
}

// ---- property tests -------------------------------------------------------

/// The request as the server builds it, read through the public API.
fn ip_of(
    proxies: &Arc<TrustedProxies>,
    peer: SocketAddr,
    xff: &[Vec<u8>],
    real: &[Vec<u8>],
) -> Option<String> {
    let mut builder = http::Request::get("/ip");
    for line in xff {
        builder = builder.header(XFF, HeaderValue::from_bytes(line).unwrap());
    }
    for line in real {
        builder = builder.header(REAL, HeaderValue::from_bytes(line).unwrap());
    }
    Request::new(builder.body(Full::<Bytes>::default()).unwrap())
        .with_peer(peer)
        .with_trusted_proxies(proxies.clone())
        .ip()
}

/// Any address, IPv4 or IPv6, sometimes in IPv4-mapped form.
fn any_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(IpAddr::from),
        any::<[u8; 16]>().prop_map(IpAddr::from),
        any::<[u8; 4]>().prop_map(|b| IpAddr::V6(std::net::Ipv4Addr::from(b).to_ipv6_mapped())),
    ]
}

/// One entry as a proxy or a client might write it.
fn entry() -> impl Strategy<Value = String> {
    prop_oneof![
        any_ip().prop_map(|ip| ip.to_string()),
        (any_ip(), any::<u16>()).prop_map(|(ip, port)| SocketAddr::new(ip, port).to_string()),
        Just("unknown".to_owned()),
        Just(String::new()),
        Just("10.0.0.1".to_owned()),
        Just("::ffff:10.1.2.3".to_owned()),
        Just("[2001:db8:ffff::9]:80".to_owned()),
        Just("192.0.2.10".to_owned()),
        "[ -~]{0,20}",
    ]
}

/// One header line: a list of entries, or any bytes a header may hold.
fn line() -> impl Strategy<Value = Vec<u8>> {
    let byte = prop_oneof![Just(b'\t'), 0x20u8..0x7f, 0x80u8..=0xff];
    prop_oneof![
        prop::collection::vec(entry(), 0..6).prop_map(|e| e.join(",").into_bytes()),
        prop::collection::vec(byte, 0..80),
    ]
}

fn lines() -> impl Strategy<Value = Vec<Vec<u8>>> {
    prop::collection::vec(line(), 0..4)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// When the peer is not a trusted proxy, nothing in `X-Forwarded-For` or
    /// `X-Real-IP` changes `ip()`: it is the peer.
    #[test]
    fn an_untrusted_peer_cannot_choose_its_address(
        peer in any_ip(),
        port in any::<u16>(),
        xff in lines(),
        real in lines(),
    ) {
        let proxies = Arc::new(PROXIES.parse::<TrustedProxies>().unwrap());
        prop_assume!(!proxies.contains(peer));
        let peer = SocketAddr::new(peer, port);
        let bare = ip_of(&proxies, peer, &[], &[]);
        let expected = suprnova::keys::canonical_ip(peer.ip()).to_string();
        prop_assert_eq!(bare.as_deref(), Some(expected.as_str()));
        prop_assert_eq!(ip_of(&proxies, peer, &xff, &real), bare);
    }

    /// Behind a trusted proxy that appends the address it saw, whatever the
    /// client wrote (on earlier lines or on the left of the same line) does
    /// not change `ip()`: it is the address the proxy appended.
    #[test]
    fn a_client_behind_a_trusted_proxy_cannot_choose_its_address(
        client in any_ip(),
        earlier in lines(),
        left in line(),
        real in lines(),
    ) {
        let proxies = Arc::new(PROXIES.parse::<TrustedProxies>().unwrap());
        prop_assume!(!proxies.contains(client));
        let mut last = left;
        last.extend_from_slice(format!(", {client}").as_bytes());
        let mut xff = earlier;
        xff.push(last);
        let got = ip_of(&proxies, "10.0.0.1:443".parse().unwrap(), &xff, &real);
        prop_assert_eq!(got, Some(suprnova::keys::canonical_ip(client).to_string()));
    }
}
