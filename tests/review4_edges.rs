//! The Redis client's answer to a refused setup of a new connection (the
//! refusal given at once for a while, then one call trying again), and a
//! WebSocket's close and reads at their edges.
#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use suprnova::redis_client::{RedisConfig, RedisConnection};
use suprnova::ws::{CLOSE_TIMEOUT, Message, WebSocket, WebSocketHandler};
use suprnova::{async_trait, ws};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use support::boot::cache_nodes;
use support::http::TestServer;
use support::redis::RedisServer;
use support::ws_frames::*;

// ---- a refused setup, then Redis takes the password again -------------------

/// A connection as user `app` whose password Redis refuses while the
/// connection is made again, and takes again after: returned once a call
/// was answered the refusal.
async fn refused_then_taken_again(server: &RedisServer) -> RedisConnection {
    assert!(
        server
            .command("ACL SETUSER app on >secret ~* &* +@all")
            .starts_with("+OK")
    );
    let url = format!("redis://app:secret@127.0.0.1:{}", server.port());
    let config = RedisConfig::from_url(&url)
        .unwrap()
        .with_timeouts(Duration::from_millis(300), Duration::from_millis(300));
    let conn = RedisConnection::new(config).unwrap();
    conn.ping().await.unwrap();
    assert!(server.command("ACL SETUSER app <secret").starts_with("+OK"));
    assert!(server.command("CLIENT KILL USER app").starts_with(':'));
    let mut refused = false;
    for _ in 0..20 {
        if let Err(error) = conn.ping().await {
            let text = format!("{error} {error:?}").to_lowercase();
            if text.contains("wrongpass") || text.contains("auth") {
                refused = true;
                break;
            }
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(refused, "no call was answered the password's refusal");
    assert!(server.command("ACL SETUSER app >secret").starts_with("+OK"));
    conn
}

// Once the refusal's 250 ms are over and Redis takes the password again,
// the call that tries again is answered, and so is every call after it.
#[tokio::test]
async fn after_the_hold_a_call_that_is_answered_ends_the_refusal() {
    let server = RedisServer::start();
    let conn = refused_then_taken_again(&server).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    conn.ping().await.unwrap();
    for _ in 0..5 {
        conn.ping().await.unwrap();
    }
}

#[tokio::test]
async fn after_the_hold_an_error_reply_from_redis_ends_the_refusal_too() {
    let server = RedisServer::start();
    assert!(server.command("SET word abc").starts_with("+OK"));
    let conn = refused_then_taken_again(&server).await;
    tokio::time::sleep(Duration::from_millis(400)).await;
    // The call that tries again: Redis took the password and ran it.
    let reply = conn.query::<i64>(redis::cmd("INCR").arg("word")).await;
    let reply = format!("{reply:?}");
    assert!(reply.contains("not an integer"), "{reply}");
    // The connection serves: the next call must be answered.
    let next = conn.ping().await;
    assert!(next.is_ok(), "answered the old refusal: {next:?}");
}

// A Redis restarted during the refusal, which takes the password once it
// is back: calls are answered again within a second of its return.
#[tokio::test]
async fn a_restart_during_the_refusal_ends_with_calls_answered() {
    let mut server = RedisServer::start();
    let conn = refused_then_taken_again(&server).await;
    server.stop();
    for _ in 0..4 {
        assert!(conn.ping().await.is_err());
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    server.restart();
    assert!(
        server
            .command("ACL SETUSER app on >secret ~* &* +@all")
            .starts_with("+OK")
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(1);
    let mut last = conn.ping().await;
    while last.is_err() && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(50)).await;
        last = conn.ping().await;
    }
    assert!(last.is_ok(), "{last:?}");
}

// ---- WebSocket: a close, then reads -----------------------------------------

fn describe<E: std::fmt::Display>(read: Option<Result<Message, E>>) -> String {
    match read {
        None => "none".to_owned(),
        Some(Err(error)) => format!("error: {error}"),
        Some(Ok(message)) => format!("message {message:?}"),
    }
}

fn sent<E: std::fmt::Display>(result: Result<(), E>) -> String {
    match result {
        Ok(()) => "sent".to_owned(),
        Err(error) => format!("send error: {error}"),
    }
}

/// Sends a close frame with `send`, then reports its one read.
struct SendCloseThenRead(mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for SendCloseThenRead {
    async fn on_socket(&self, mut socket: WebSocket) {
        let _ = self.0.send(sent(socket.send(Message::Close(None)).await));
        let _ = self.0.send(describe(socket.recv().await));
    }
}

/// Closes twice, then reports its one read.
struct CloseTwiceThenRead(mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for CloseTwiceThenRead {
    async fn on_socket(&self, mut socket: WebSocket) {
        let _ = self.0.send(sent(socket.close().await));
        let _ = self.0.send(sent(socket.close().await));
        let _ = self.0.send(describe(socket.recv().await));
    }
}

/// Sends `message` once and reports whether it went.
struct SendOne(Message, mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for SendOne {
    async fn on_socket(&self, mut socket: WebSocket) {
        let _ = self.1.send(sent(socket.send(self.0.clone()).await));
        while let Some(Ok(_)) = socket.recv().await {}
    }
}

/// The next report within `limit`, or `None`.
async fn report_within(
    reports: &mut mpsc::UnboundedReceiver<String>,
    limit: Duration,
) -> Option<String> {
    tokio::time::timeout(limit, reports.recv())
        .await
        .ok()
        .flatten()
}

/// Reads frames until the server's close frame; its payload.
async fn server_close(stream: &mut TcpStream) -> Vec<u8> {
    loop {
        match read_frame(stream).await {
            Some((_, CLOSE, payload)) => return payload,
            Some(_) => {}
            None => panic!("the connection ended before a close frame"),
        }
    }
}

#[tokio::test]
async fn a_close_sent_with_send_bounds_the_reads_after_it_as_close_does() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let server = TestServer::start(ws!("/ws", SendCloseThenRead(tx))).await;
    let mut stream = open(server.addr()).await;
    assert_eq!(server_close(&mut stream).await, Vec::<u8>::new());
    assert_eq!(
        report_within(&mut reports, Duration::from_secs(5)).await,
        Some("sent".to_owned())
    );
    // The peer stays, and never answers the close.
    let read = report_within(&mut reports, CLOSE_TIMEOUT + Duration::from_secs(2)).await;
    assert_eq!(read, Some("none".to_owned()));
    drop(stream);
    server.stop().await;
}

// A second close() sends nothing more (it fails: the close frame went
// already), and the reads after it end within CLOSE_TIMEOUT of the first,
// though the peer never answers.
#[tokio::test]
async fn close_twice_sends_one_frame_and_reads_end_by_the_first_ones_timeout() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let server = TestServer::start(ws!("/ws", CloseTwiceThenRead(tx))).await;
    let mut stream = open(server.addr()).await;
    let started = tokio::time::Instant::now();
    assert_eq!(server_close(&mut stream).await, Vec::<u8>::new());
    let first = report_within(&mut reports, Duration::from_secs(5)).await;
    assert_eq!(first, Some("sent".to_owned()));
    let second = report_within(&mut reports, Duration::from_secs(5)).await;
    assert!(second.is_some_and(|second| second.starts_with("send error")));
    let read = report_within(&mut reports, CLOSE_TIMEOUT + Duration::from_secs(2)).await;
    assert_eq!(read, Some("none".to_owned()));
    assert!(started.elapsed() < CLOSE_TIMEOUT + Duration::from_secs(2));
    // No second close frame: the connection ends after the first.
    let after = read_frame(&mut stream).await;
    assert!(after.is_none(), "{after:?}");
    drop(stream);
    server.stop().await;
}

// Control frames of exactly 125 bytes go out; one byte more is refused
// and nothing is sent.
#[tokio::test]
async fn a_ping_of_125_bytes_goes_out_and_one_of_126_does_not() {
    for (size, want) in [(125_usize, true), (126, false)] {
        let (tx, mut reports) = mpsc::unbounded_channel();
        let message = Message::Ping(vec![7_u8; size].into());
        let server = TestServer::start(ws!("/ws", SendOne(message, tx))).await;
        let mut stream = open(server.addr()).await;
        let report = report_within(&mut reports, Duration::from_secs(5))
            .await
            .unwrap();
        assert_eq!(report == "sent", want, "{size}: {report}");
        if want {
            let (fin, opcode, payload) = read_frame(&mut stream).await.unwrap();
            assert!(fin);
            assert_eq!(opcode, PING);
            assert_eq!(payload.len(), 125);
        }
        drop(stream);
        server.stop().await;
    }
}

// ---- WebSocket: frames and messages at the route's limits ------------------

/// Reports every read (a data message by its kind and size) until `None`.
struct Sizes(mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for Sizes {
    async fn on_socket(&self, mut socket: WebSocket) {
        loop {
            let read = socket.recv().await;
            let report = match &read {
                None => "none".to_owned(),
                Some(Err(error)) => format!("error: {error}"),
                Some(Ok(Message::Binary(bytes))) => format!("binary {}", bytes.len()),
                Some(Ok(Message::Text(text))) => format!("text {}", text.len()),
                Some(Ok(Message::Ping(bytes))) => format!("ping {}", bytes.len()),
                Some(Ok(other)) => format!("other {other:?}"),
            };
            let _ = self.0.send(report);
            if !matches!(read, Some(Ok(_))) {
                return;
            }
        }
    }
}

/// The code of a close frame's payload.
fn code_of(payload: &[u8]) -> u16 {
    u16::from_be_bytes([payload[0], payload[1]])
}

// On a route of 32 MiB, a frame header that announces 16 MiB and one byte
// is refused at once with 1009, before any of its payload.
#[tokio::test]
async fn a_frame_over_16_mib_is_refused_on_a_route_of_32_mib() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let router = ws::route_with_max_message_size("/ws", Sizes(tx), 32 << 20);
    let server = TestServer::start(router).await;
    let mut stream = open(server.addr()).await;
    let mut header = vec![0x80 | BINARY];
    header.extend(length_bytes(0x80, (16 << 20) + 1));
    header.extend_from_slice(&[1, 2, 3, 4]);
    tokio::io::AsyncWriteExt::write_all(&mut stream, &header)
        .await
        .unwrap();
    assert_eq!(code_of(&server_close(&mut stream).await), 1009);
    let report = report_within(&mut reports, Duration::from_secs(5)).await;
    assert!(report.is_some_and(|r| r.starts_with("error")));
    drop(stream);
    server.stop().await;
}

// On a route of 32 MiB, a message of 20 MiB in two frames of 10 MiB is read
// whole; on a route of exactly 16 MiB, one frame of exactly 16 MiB is.
#[tokio::test]
async fn large_messages_within_the_limit_are_read_whole() {
    let ten = vec![9_u8; 10 << 20];
    let sixteen = vec![8_u8; 16 << 20];
    let cases: [(usize, Vec<Vec<u8>>, usize); 2] = [
        (
            32 << 20,
            vec![
                masked(false, BINARY, &ten),
                masked(true, CONTINUATION, &ten),
            ],
            20 << 20,
        ),
        (16 << 20, vec![masked(true, BINARY, &sixteen)], 16 << 20),
    ];
    for (limit, frames, want) in cases {
        let (tx, mut reports) = mpsc::unbounded_channel();
        let router = ws::route_with_max_message_size("/ws", Sizes(tx), limit);
        let server = TestServer::start(router).await;
        let mut stream = open(server.addr()).await;
        for frame in &frames {
            tokio::io::AsyncWriteExt::write_all(&mut stream, frame)
                .await
                .unwrap();
        }
        let report = report_within(&mut reports, Duration::from_secs(20)).await;
        assert_eq!(report, Some(format!("binary {want}")), "limit {limit}");
        drop(stream);
        server.stop().await;
    }
}

// A route of limit 0 reads no data, yet answers a ping of 125 bytes with
// its pong; a text of one byte is refused with 1009.
#[tokio::test]
async fn a_route_of_limit_0_answers_a_125_byte_ping_and_refuses_one_byte() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let router = ws::route_with_max_message_size("/ws", Sizes(tx), 0);
    let server = TestServer::start(router).await;
    let mut stream = open(server.addr()).await;
    let ping = [3_u8; 125];
    tokio::io::AsyncWriteExt::write_all(&mut stream, &masked(true, PING, &ping))
        .await
        .unwrap();
    let (fin, opcode, payload) = read_frame(&mut stream).await.unwrap();
    assert!(fin);
    assert_eq!(opcode, PONG);
    assert_eq!(payload, ping.to_vec());
    assert_eq!(
        report_within(&mut reports, Duration::from_secs(5)).await,
        Some("ping 125".to_owned())
    );
    tokio::io::AsyncWriteExt::write_all(&mut stream, &masked(true, TEXT, b"x"))
        .await
        .unwrap();
    assert_eq!(code_of(&server_close(&mut stream).await), 1009);
    drop(stream);
    server.stop().await;
}

// ---- WebSocket: what a close frame may carry ----------------------------------

#[tokio::test]
async fn a_close_code_no_endpoint_may_send_is_not_sent() {
    use tokio_tungstenite::tungstenite::protocol::CloseFrame;
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    for code in [1005_u16, 1006, 1015, 999] {
        let (tx, mut reports) = mpsc::unbounded_channel();
        let frame = CloseFrame {
            code: CloseCode::from(code),
            reason: "".into(),
        };
        let server = TestServer::start(ws!("/ws", SendOne(Message::Close(Some(frame)), tx))).await;
        let mut stream = open(server.addr()).await;
        let report = report_within(&mut reports, Duration::from_secs(5)).await;
        // The client closes with 1000: the server's first close frame is
        // the refused one, if it went out, or the answer to this one.
        use tokio::io::AsyncWriteExt;
        stream
            .write_all(&masked(true, CLOSE, &1000_u16.to_be_bytes()))
            .await
            .unwrap();
        let payload = server_close(&mut stream).await;
        let sent_code = (payload.len() >= 2).then(|| code_of(&payload));
        assert_ne!(
            sent_code,
            Some(code),
            "{code} went out; the send said {report:?}"
        );
        drop(stream);
        server.stop().await;
    }
}

// ---- REDIS_HOST outside ASCII, and credentials ---------------------------------

// A host outside ASCII is its IDNA form, with TLS too, in any case, and in
// full-width letters; one that holds a '#' or a ':' is refused naming
// REDIS_HOST.
#[test]
fn a_host_outside_ascii_is_its_idna_form_and_a_bad_one_is_refused() {
    let cases = [
        ("bücher.example", "redis://xn--bcher-kva.example:6379/1"),
        ("BÜCHER.Example", "redis://xn--bcher-kva.example:6379/1"),
        (
            "tls://bücher.example",
            "rediss://xn--bcher-kva.example:6379/1",
        ),
        ("ｃａｃｈｅ.internal", "redis://cache.internal:6379/1"),
    ];
    for (host, want) in cases {
        assert_eq!(
            cache_nodes(&[("REDIS_HOST", host)]),
            Ok(vec![want.to_owned()]),
            "{host}"
        );
    }
    for host in ["bücher#x.example", "bücher.example:6380", "bü cher.example"] {
        let refused = cache_nodes(&[("REDIS_HOST", host)]).unwrap_err();
        assert!(refused.contains("REDIS_HOST"), "{host}: {refused}");
    }
}

// A username without its password is refused for a socket path as for a
// host, and the refusal does not show the username.
#[test]
fn a_username_alone_is_refused_for_a_host_and_a_socket() {
    for host in ["cache.internal", "/var/run/redis/redis.sock"] {
        let refused =
            cache_nodes(&[("REDIS_HOST", host), ("REDIS_USERNAME", "appuser")]).unwrap_err();
        assert!(refused.contains("REDIS_PASSWORD"), "{host}: {refused}");
        assert!(!refused.contains("appuser"), "{host}: {refused}");
    }
    // A username Laravel's env() reads as none is no username.
    for none in ["", "null", "(null)", "empty", "false"] {
        let taken = cache_nodes(&[("REDIS_HOST", "cache.internal"), ("REDIS_USERNAME", none)]);
        assert_eq!(
            taken,
            Ok(vec!["redis://cache.internal:6379/1".to_owned()]),
            "REDIS_USERNAME={none:?}"
        );
    }
    let taken = cache_nodes(&[
        ("REDIS_HOST", "cache.internal"),
        ("REDIS_USERNAME", "appuser"),
        ("REDIS_PASSWORD", "p#ss"),
    ])
    .unwrap();
    assert_eq!(taken, ["redis://appuser:p%23ss@cache.internal:6379/1"]);
}

// A '#' in a Redis URL is refused where it would swallow the port and the
// database; written %23 in the password, it is taken.
#[test]
fn a_url_whose_hash_swallows_the_port_is_refused() {
    assert!(RedisConfig::from_url("redis://cache.internal#x:6380/2").is_err());
    assert!(RedisConfig::from_url("redis://:p#ss@cache.internal:6380/2").is_err());
    let taken = RedisConfig::from_url("redis://:p%23ss@cache.internal:6380/2").unwrap();
    assert_eq!(taken.nodes(), ["redis://:p%23ss@cache.internal:6380/2"]);
}

#[tokio::test]
async fn a_ping_over_125_bytes_is_a_protocol_error_whatever_the_routes_limit() {
    for limit in [1_usize << 20, 0, 64] {
        let (tx, _reports) = mpsc::unbounded_channel();
        let router = ws::route_with_max_message_size("/ws", Sizes(tx), limit);
        let server = TestServer::start(router).await;
        let mut stream = open(server.addr()).await;
        tokio::io::AsyncWriteExt::write_all(&mut stream, &masked(true, PING, &[1_u8; 126]))
            .await
            .unwrap();
        assert_eq!(
            code_of(&server_close(&mut stream).await),
            1002,
            "limit {limit}"
        );
        drop(stream);
        server.stop().await;
    }
}

// ---- CONNECT with a path: on the wire and in process ---------------------------

#[tokio::test]
async fn connect_with_a_path_gets_the_same_answer_in_process_as_on_the_wire() {
    use suprnova::{HttpResponse, Request, Router};

    let router = || {
        Router::new().route(http::Method::CONNECT, "/tunnel", |_req: Request| async {
            HttpResponse::text("tunnel")
        })
    };
    let server = TestServer::start(router()).await;
    let mut conn = support::h1::Conn::open(server.addr()).await;
    conn.send("CONNECT /tunnel HTTP/1.1\r\nHost: a.example\r\n\r\n")
        .await
        .unwrap();
    let wire = conn.answer(false).await.expect("an answer").status;
    assert_eq!(wire, 400);
    let request = http::Request::connect("/tunnel")
        .header("host", "a.example")
        .body(String::new())
        .unwrap();
    let in_process = suprnova::server::handle_request_with_peer(
        &router(),
        request,
        "127.0.0.1:4000".parse().unwrap(),
    )
    .await;
    assert_eq!(in_process.status_code(), wire);
    server.stop().await;
}
