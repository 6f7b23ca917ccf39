//! Edge cases of the Redis host settings and URLs, a Redis connection
//! whose password is refused, answers' framing (205, 101), request targets
//! with userinfo, and request bodies read in parts.

mod support;

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame};
use http_body_util::Full;
use suprnova::cache::CacheConfig;
use suprnova::http::BodyError;
use suprnova::{HttpResponse, Request, Router};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use support::boot::env;
use support::http::TestServer;
use support::within;

// ---- Redis host settings ----------------------------------------------------

/// The cache store's Redis nodes for the variables `pairs`, or its refusal.
fn cache_nodes(pairs: &[(&str, &str)]) -> Result<Vec<String>, String> {
    let mut all = vec![("CACHE_STORE", "redis")];
    all.extend_from_slice(pairs);
    CacheConfig::from_env(&env(&all))
        .map(|config| config.redis.expect("a Redis store").nodes().to_vec())
        .map_err(|e| e.to_string())
}

/// The host the Redis client connects to for the node URL `node`.
fn connected_host(node: &str) -> String {
    use redis::IntoConnectionInfo;
    match node.into_connection_info().unwrap().addr() {
        redis::ConnectionAddr::Tcp(host, _) => host.clone(),
        redis::ConnectionAddr::TcpTls { host, .. } => host.clone(),
        other => panic!("not a TCP address: {other:?}"),
    }
}

#[test]
fn host_names_with_underscores_trailing_dots_and_ipv6_are_taken() {
    for (host, want) in [
        ("my_host", "my_host"),
        ("cache.internal.", "cache.internal."),
        ("10.0.0.7", "10.0.0.7"),
        ("::1", "::1"),
        ("[::1]", "::1"),
    ] {
        let nodes = cache_nodes(&[("REDIS_HOST", host), ("REDIS_PORT", "6380")])
            .unwrap_or_else(|e| panic!("{host}: {e}"));
        assert_eq!(nodes.len(), 1);
        assert!(nodes[0].ends_with(":6380/1"), "{host}: {}", nodes[0]);
        assert_eq!(
            connected_host(&nodes[0]).trim_matches(['[', ']']),
            want,
            "{host}"
        );
    }
}

#[test]
fn hosts_the_url_cannot_hold_are_refused_naming_redis_host() {
    for host in [
        "cache.internal#x",
        "a b",
        "fe80::1%eth0",
        "cache/x",
        "user@cache",
    ] {
        let refusal = cache_nodes(&[("REDIS_HOST", host)]).expect_err(host);
        assert!(refusal.starts_with("REDIS_HOST="), "{host}: {refusal}");
    }
}

/// REDIS_HOST takes any alphanumeric character, so an internationalised
/// name boots; the URL then carries it percent-encoded (its host is not
/// a special scheme's), and the client looks up `b%C3%BCcher.example`,
/// which no resolver has. The name should go to the client as its ASCII
/// (IDNA) form, `xn--bcher-kva.example`, or be refused at boot.
#[test]
fn an_internationalised_redis_host_reaches_the_client_as_its_dns_name() {
    match cache_nodes(&[("REDIS_HOST", "bücher.example")]) {
        Ok(nodes) => assert_eq!(connected_host(&nodes[0]), "xn--bcher-kva.example"),
        Err(refusal) => assert!(refusal.starts_with("REDIS_HOST="), "{refusal}"),
    }
}

/// Laravel's skeleton keeps `REDIS_PASSWORD=null`; with a REDIS_USERNAME
/// beside it the URL built from the parts holds a username alone, which is
/// refused with advice about a URL the operator never wrote (and shown as
/// `REDIS_HOST`): the variable to set is REDIS_PASSWORD (or to unset,
/// REDIS_USERNAME).
#[test]
fn a_username_without_a_password_from_the_parts_names_the_variables() {
    let refusal = cache_nodes(&[
        ("REDIS_HOST", "cache.internal"),
        ("REDIS_USERNAME", "app"),
        ("REDIS_PASSWORD", "null"),
    ])
    .expect_err("a username alone is refused");
    assert!(
        refusal.contains("REDIS_PASSWORD") && refusal.contains("REDIS_USERNAME"),
        "{refusal}"
    );
}

#[test]
fn a_username_with_its_password_from_the_parts_boots() {
    let nodes = cache_nodes(&[
        ("REDIS_HOST", "cache.internal"),
        ("REDIS_USERNAME", "app"),
        ("REDIS_PASSWORD", "s3cret"),
    ])
    .unwrap();
    assert_eq!(connected_host(&nodes[0]), "cache.internal");
}

// ---- answers on the wire ----------------------------------------------------

/// Sends `raw` on a new connection and reads until the server closes it,
/// or a second passes without a byte.
async fn exchange(server: &TestServer, raw: &str) -> String {
    let mut stream = TcpStream::connect(server.addr()).await.unwrap();
    stream.write_all(raw.as_bytes()).await.unwrap();
    let mut out = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(1), stream.read(&mut buf)).await {
            Ok(Ok(0)) | Ok(Err(_)) | Err(_) => break,
            Ok(Ok(n)) => out.extend_from_slice(&buf[..n]),
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `method /` and then `GET /` on one connection.
async fn two_requests(server: &TestServer, method: &str) -> String {
    let raw = format!(
        "{method} / HTTP/1.1\r\nHost: a\r\n\r\nGET / HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n"
    );
    within(
        "two answers",
        Duration::from_secs(5),
        exchange(server, &raw),
    )
    .await
}

#[tokio::test]
async fn a_205_has_no_content_and_a_length_of_zero_for_get_and_head() {
    let router = Router::new().get("/", |_request: Request| async {
        HttpResponse::text("hello")
            .status(205)
            .header("Content-Length", "5")
    });
    let server = TestServer::start(router).await;
    for method in ["GET", "HEAD"] {
        let wire = two_requests(&server, method).await;
        let answers: Vec<&str> = wire.split("HTTP/1.1 ").skip(1).collect();
        assert_eq!(answers.len(), 2, "{method}: {wire}");
        for answer in answers {
            assert!(answer.starts_with("205 "), "{method}: {wire}");
            assert!(answer.contains("content-length: 0\r\n"), "{method}: {wire}");
            assert!(answer.ends_with("\r\n\r\n"), "{method}: {wire}");
            assert!(!answer.contains("hello"), "{method}: {wire}");
        }
    }
    let reply = server
        .send_h2(
            http::Request::get(server.url("/"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!((reply.status, reply.body.as_str()), (205, ""));
}

#[tokio::test]
async fn a_length_that_is_no_number_is_replaced_by_the_bodys() {
    let router = Router::new().get("/", |_request: Request| async {
        HttpResponse::text("hello").header("Content-Length", "+5")
    });
    let server = TestServer::start(router).await;
    let wire = two_requests(&server, "GET").await;
    assert_eq!(wire.matches("content-length: 5\r\n").count(), 2, "{wire}");
    assert!(!wire.contains("+5"), "{wire}");
}

#[tokio::test]
async fn userinfo_in_an_absolute_target_is_refused_with_400() {
    let router = Router::new().get("/", |_request: Request| async { HttpResponse::text("ok") });
    let server = TestServer::start(router).await;
    for target in ["http://user:secret@a/", "http://user@a/", "http://@a/"] {
        let raw = format!("GET {target} HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n");
        let wire = within(
            "the answer",
            Duration::from_secs(5),
            exchange(&server, &raw),
        )
        .await;
        assert!(wire.starts_with("HTTP/1.1 400 "), "{target}: {wire}");
    }
    // An `@` in the path is no userinfo.
    let raw = "GET http://a/x@y HTTP/1.1\r\nHost: a\r\nConnection: close\r\n\r\n";
    let wire = within("the answer", Duration::from_secs(5), exchange(&server, raw)).await;
    assert!(wire.starts_with("HTTP/1.1 404 "), "{wire}");
}

/// A 101 that a router dispatched from a route gives (no WebSocket route's)
/// is answered 500 by the outer router, on either protocol.
#[tokio::test]
async fn a_bare_101_from_a_dispatched_router_is_answered_500() {
    let inner = Arc::new(Router::new().get("/switch", |_request: Request| async {
        HttpResponse::new().status(101)
    }));
    let router = Router::new().get("/switch", move |request: Request| {
        let inner = inner.clone();
        async move { inner.dispatch(request).await }
    });
    let server = TestServer::start(router).await;
    assert_eq!(server.get("/switch").await.status, 500);
    let reply = server
        .send_h2(
            http::Request::get(server.url("/switch"))
                .body(Full::default())
                .unwrap(),
        )
        .await;
    assert_eq!(reply.status, 500);
}

// ---- request bodies read in parts -------------------------------------------

/// A body whose parts a test sends when it likes.
struct Parts(mpsc::UnboundedReceiver<Bytes>);

impl Body for Parts {
    type Data = Bytes;
    type Error = std::io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
        self.0
            .poll_recv(cx)
            .map(|part| part.map(|bytes| Ok(Frame::data(bytes))))
    }
}

fn request_with_parts() -> (Request, mpsc::UnboundedSender<Bytes>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let request = Request::new(http::Request::post("http://a/").body(Parts(rx)).unwrap());
    (request, tx)
}

#[tokio::test]
async fn a_read_dropped_after_a_too_large_leaves_every_byte_to_the_next() {
    let (mut request, tx) = request_with_parts();
    tx.send(Bytes::from_static(b"0123456789")).unwrap();
    tx.send(Bytes::from_static(b"abcdef")).unwrap();
    assert!(matches!(
        request.body_bytes(10).await,
        Err(BodyError::TooLarge { limit: 10 })
    ));
    // A larger cap, its read dropped while it waits for the rest.
    let waited = tokio::time::timeout(Duration::from_millis(20), request.body_bytes(100)).await;
    assert!(waited.is_err(), "the body has not ended: {waited:?}");
    // The same small cap again: still over it.
    assert!(matches!(
        request.body_bytes(10).await,
        Err(BodyError::TooLarge { limit: 10 })
    ));
    tx.send(Bytes::from_static(b"XYZ")).unwrap();
    let waited = tokio::time::timeout(Duration::from_millis(20), request.body_bytes(100)).await;
    assert!(waited.is_err(), "the body has not ended: {waited:?}");
    drop(tx);
    let whole = request.body_bytes(100).await.unwrap();
    assert_eq!(&whole[..], b"0123456789abcdefXYZ");
    // Read whole, it is kept.
    assert_eq!(&request.body_bytes(100).await.unwrap()[..], &whole[..]);
}

// ---- Redis URLs -------------------------------------------------------------

/// A `#` in a URL begins its fragment, which the Redis client reads only as
/// `#insecure` on `rediss`: in `redis://cache.internal#x:6380/2` the port
/// and the database are the fragment's, and the client connects to port
/// 6379, database 0. REDIS_HOST is refused for a `#` for just this reason;
/// the URL the operator writes whole should be too (as a query pair the
/// client does not read is).
#[test]
fn a_fragment_that_swallows_the_port_and_database_is_refused() {
    let url = "redis://cache.internal#x:6380/2";
    if let Ok(config) = suprnova::redis_client::RedisConfig::from_url(url) {
        use redis::IntoConnectionInfo;
        let info = config.nodes()[0].as_str().into_connection_info().unwrap();
        panic!(
            "{url} taken as {:?}, database {}",
            info.addr(),
            info.redis_settings().db()
        );
    }
    let refusal = cache_nodes(&[("REDIS_URL", url)]).expect_err(url);
    assert!(refusal.starts_with("REDIS_URL="), "{refusal}");
}

#[test]
fn a_password_with_a_bare_hash_is_refused_not_cut() {
    let url = "redis://:se#cret@cache.internal:6380/2";
    assert!(suprnova::redis_client::RedisConfig::from_url(url).is_err());
}

#[test]
fn insecure_tls_and_a_username_alone_are_refused_however_written() {
    for url in [
        "rediss://cache.internal:6380/#insecure",
        "rediss://cache.internal:6380#insecure",
        "rediss://cache.internal:6380/#insec\ture",
        "redis://app@cache.internal:6379",
        "unix:///run/redis.sock?user=app",
    ] {
        assert!(
            suprnova::redis_client::RedisConfig::from_url(url).is_err(),
            "{url:?} taken"
        );
    }
    for url in [
        "rediss://cache.internal:6380",
        "redis://app:s3cret@cache.internal:6379",
        "redis://:s3cret@cache.internal:6379",
        "unix:///run/redis.sock?user=app&pass=s3cret",
    ] {
        assert!(
            suprnova::redis_client::RedisConfig::from_url(url).is_ok(),
            "{url:?} refused"
        );
    }
}

// ---- a Redis connection whose credentials are refused -----------------------

/// How long each of `calls` calls, one after the other, waited for its
/// refusal once the password of the connection's user changed under it
/// (after a first call that found the connection dropped and refused).
async fn waits_after_the_password_changed(query: &str, calls: usize) -> Vec<Duration> {
    let server = support::redis::RedisServer::start();
    assert!(
        server
            .command("ACL SETUSER app on >first ~* &* +@all")
            .starts_with("+OK")
    );
    let url = format!("redis://app:first@127.0.0.1:{}/0{query}", server.port());
    let connection = support::redis::connect(&url);
    connection
        .ping()
        .await
        .expect("the first password is taken");
    assert!(
        server
            .command("ACL SETUSER app resetpass >second")
            .starts_with("+OK")
    );
    server.command("CLIENT KILL USER app");
    // The dropped connection, then the first refusal.
    for _ in 0..2 {
        let _ = within("a call", Duration::from_secs(5), connection.ping()).await;
    }
    let mut waits = Vec::new();
    for _ in 0..calls {
        let started = std::time::Instant::now();
        let answer = within("a call", Duration::from_secs(5), connection.ping()).await;
        waits.push(started.elapsed());
        assert!(answer.is_err(), "the second password is not the URL's");
    }
    waits
}

/// A connection whose setup Redis refused is made again at most every
/// 250 ms, "the calls in between answered that refusal at once". But a
/// new connection takes the Redis client's own reconnection attempts to
/// fail (three, about 270 ms), longer than the 250 ms: every call finds the
/// last replacement older than 250 ms, makes a new connection and waits
/// for it to fail. While Redis refuses the password, each limited request
/// waits about 270 ms before its backend-error policy answers, and each
/// makes three connections to Redis.
#[tokio::test]
async fn resp3_calls_between_new_connections_are_answered_at_once() {
    let waits = waits_after_the_password_changed("?protocol=resp3", 8).await;
    let quick = waits
        .iter()
        .filter(|wait| **wait < Duration::from_millis(100))
        .count();
    assert!(quick >= 4, "waits: {waits:?}");
}

/// The same over RESP2 (the default protocol), where the refusal is
/// `AUTH`'s, reported as an authentication failure without Redis's code:
/// not taken for a refused setup, it replaces the connection on every call,
/// with no 250 ms between.
#[tokio::test]
async fn resp2_calls_between_new_connections_are_answered_at_once() {
    let waits = waits_after_the_password_changed("", 8).await;
    let quick = waits
        .iter()
        .filter(|wait| **wait < Duration::from_millis(100))
        .count();
    assert!(quick >= 4, "waits: {waits:?}");
}
