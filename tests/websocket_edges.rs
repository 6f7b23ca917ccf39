//! WebSocket routes at their edges, through the real server on loopback:
//! the opening handshake as RFC 6455 (section 4) writes it, limits on the
//! upgrade, what a peer may send (sizes, UTF-8, control frames, masking,
//! pings, closes), and how a session ends (a reset, a panic, a shutdown).

mod support;
mod throttle_support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver};
use suprnova::ws::{CLOSE_TIMEOUT, MAX_MESSAGE_SIZE, Message, WebSocket, WebSocketHandler};
use suprnova::{RateLimiter, ThrottleRequestsMiddleware, async_trait, ws};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error as WsError;

use support::http::TestServer;
use support::within;
use support::ws_frames::*;

// ---- handlers -----------------------------------------------------------------

/// Sends every text and binary message back.
struct Echo;

#[async_trait]
impl WebSocketHandler for Echo {
    async fn on_socket(&self, mut socket: WebSocket) {
        while let Some(Ok(message)) = socket.recv().await {
            if (message.is_text() || message.is_binary()) && socket.send(message).await.is_err() {
                break;
            }
        }
    }
}

/// Reports what each read gave (and its end), echoing text and binary.
struct Report(mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for Report {
    async fn on_socket(&self, mut socket: WebSocket) {
        loop {
            match socket.recv().await {
                None => {
                    let _ = self.0.send("none".to_owned());
                    break;
                }
                Some(Err(error)) => {
                    let _ = self.0.send(format!("error: {error}"));
                    break;
                }
                Some(Ok(message)) => {
                    let _ = self.0.send(describe(&message));
                    if (message.is_text() || message.is_binary())
                        && socket.send(message).await.is_err()
                    {
                        break;
                    }
                }
            }
        }
    }
}

fn describe(message: &Message) -> String {
    match message {
        Message::Text(text) => format!("text {}", text.len()),
        Message::Binary(bytes) => format!("binary {}", bytes.len()),
        Message::Ping(bytes) => format!("ping {}", bytes.len()),
        Message::Pong(bytes) => format!("pong {}", bytes.len()),
        Message::Close(frame) => format!("close {frame:?}"),
        Message::Frame(_) => "frame".to_owned(),
    }
}

/// Sends one text, then panics.
struct Panics;

#[async_trait]
impl WebSocketHandler for Panics {
    async fn on_socket(&self, mut socket: WebSocket) {
        let _ = socket.send("about to fail").await;
        panic!("a handler bug");
    }
}

/// Reads, and after each message works for a while before it reads again.
struct SlowReader(Duration);

#[async_trait]
impl WebSocketHandler for SlowReader {
    async fn on_socket(&self, mut socket: WebSocket) {
        while let Some(Ok(_)) = socket.recv().await {
            tokio::time::sleep(self.0).await;
        }
    }
}

// ---- a raw client -----------------------------------------------------------

/// A request head for `/ws` with `lines` (each ending in CRLF) after `Host`.
fn head(method: &str, version: &str, lines: &str) -> String {
    format!("{method} /ws {version}\r\nHost: 127.0.0.1\r\n{lines}\r\n")
}

/// The header lines of a valid handshake.
fn handshake_lines() -> String {
    format!(
        "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\
         Sec-WebSocket-Key: {KEY}\r\n"
    )
}

/// Writes `request` on a new connection and reads the answer's head.
async fn send_head(server: SocketAddr, request: &[u8]) -> (TcpStream, String) {
    let mut stream = TcpStream::connect(server).await.unwrap();
    stream.write_all(request).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0_u8; 1];
    within("an answer's head", Duration::from_secs(5), async {
        while !head.ends_with(b"\r\n\r\n") {
            let n = stream.read(&mut byte).await.unwrap();
            assert_eq!(
                n,
                1,
                "closed in the head: {}",
                String::from_utf8_lossy(&head)
            );
            head.push(byte[0]);
        }
    })
    .await;
    (stream, String::from_utf8(head).unwrap())
}

/// A header of a response head, by name in any case.
fn header<'a>(head: &'a str, name: &str) -> Option<&'a str> {
    head.split("\r\n").skip(1).find_map(|line| {
        let (n, v) = line.split_once(':')?;
        n.trim().eq_ignore_ascii_case(name).then(|| v.trim())
    })
}

/// The status code of a response head.
fn status(head: &str) -> u16 {
    head.split(' ').nth(1).unwrap().parse().unwrap()
}

/// The body after `head`, by its Content-Length.
async fn body(stream: &mut TcpStream, head: &str) -> String {
    let length: usize = header(head, "content-length").unwrap().parse().unwrap();
    let mut body = vec![0_u8; length];
    within(
        "a body",
        Duration::from_secs(5),
        stream.read_exact(&mut body),
    )
    .await
    .unwrap();
    String::from_utf8(body).unwrap()
}

/// The code of the server's next frame, which must be a close.
async fn close_code(stream: &mut TcpStream) -> Option<u16> {
    let (_, opcode, payload) = read_frame(stream).await.expect("no close frame");
    assert_eq!(opcode, CLOSE, "not a close frame: {payload:?}");
    payload.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]))
}

/// Waits for the end of the connection, within `limit`; how long it took.
async fn end_of(stream: &mut TcpStream, limit: Duration) -> Duration {
    let started = Instant::now();
    within("the end of the connection", limit, async {
        let mut sink = [0_u8; 4096];
        loop {
            match stream.read(&mut sink).await {
                Ok(0) | Err(_) => break,
                Ok(_) => {}
            }
        }
    })
    .await;
    started.elapsed()
}

type Client = WebSocketStream<TcpStream>;

/// Opens `path` with a real client: the socket and the 101's headers, or
/// the refusal.
async fn connect(server: SocketAddr, path: &str) -> Result<(Client, http::HeaderMap), WsError> {
    let stream = TcpStream::connect(server).await.unwrap();
    within(
        "the handshake",
        Duration::from_secs(5),
        tokio_tungstenite::client_async(format!("ws://{server}{path}"), stream),
    )
    .await
    .map(|(client, response)| (client, response.headers().clone()))
}

// ---- the opening handshake ----------------------------------------------------

/// RFC 6455, 4.2.1: `Connection` is a token list and both headers are
/// compared without case; the 101 carries the exact accept value of RFC
/// 6455, 1.3, and no content headers (RFC 9110, 8.6), and the socket works.
#[tokio::test]
async fn a_handshake_in_any_case_and_with_a_token_list_upgrades_with_the_exact_accept() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    for (upgrade, connection) in [
        ("websocket", "keep-alive, Upgrade"),
        ("WebSocket", "upgrade"),
        ("WEBSOCKET", "Keep-Alive,UPGRADE"),
    ] {
        let lines = format!(
            "Upgrade: {upgrade}\r\nConnection: {connection}\r\nSec-WebSocket-Version: 13\r\n\
             Sec-WebSocket-Key: {KEY}\r\n"
        );
        let (mut stream, head) = send_head(
            server.addr(),
            self::head("GET", "HTTP/1.1", &lines).as_bytes(),
        )
        .await;
        assert!(
            head.starts_with("HTTP/1.1 101 Switching Protocols\r\n"),
            "{head}"
        );
        assert_eq!(
            header(&head, "sec-websocket-accept"),
            Some(ACCEPT),
            "{head}"
        );
        assert_eq!(header(&head, "upgrade"), Some("websocket"));
        assert_eq!(header(&head, "connection"), Some("Upgrade"));
        assert_eq!(header(&head, "content-length"), None, "{head}");
        assert_eq!(header(&head, "transfer-encoding"), None, "{head}");
        // No subprotocol or extension was asked for, and none is chosen.
        assert_eq!(header(&head, "sec-websocket-protocol"), None);
        assert_eq!(header(&head, "sec-websocket-extensions"), None);
        stream.write_all(&masked(true, TEXT, b"hi")).await.unwrap();
        assert_eq!(
            read_frame(&mut stream).await,
            Some((true, TEXT, b"hi".to_vec()))
        );
    }
    server.stop().await;
}

/// A frame the client sends in the same write as its handshake is read as
/// the socket's first message, not lost in the HTTP parser's buffer.
#[tokio::test]
async fn a_frame_sent_with_the_handshake_is_the_first_message() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let mut request = head("GET", "HTTP/1.1", &handshake_lines()).into_bytes();
    request.extend(masked(true, TEXT, b"early"));
    let (mut stream, head) = send_head(server.addr(), &request).await;
    assert_eq!(status(&head), 101, "{head}");
    assert_eq!(
        read_frame(&mut stream).await,
        Some((true, TEXT, b"early".to_vec()))
    );
    server.stop().await;
}

/// RFC 6455, 4.2.1 item 5: the key is 16 bytes in base64. A missing key, a
/// key of other lengths and one that is not base64 get 400 over the wire.
#[tokio::test]
async fn a_missing_or_malformed_key_is_refused_with_400() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let upgrade = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n";
    for key_line in [
        String::new(),
        "Sec-WebSocket-Key: c2hvcnQ=\r\n".to_owned(),
        "Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA=\r\n".to_owned(),
        "Sec-WebSocket-Key: !!!!!!!!!!!!!!!!!!!!!!==\r\n".to_owned(),
        "Sec-WebSocket-Key: \r\n".to_owned(),
    ] {
        let lines = format!("{upgrade}{key_line}");
        let (mut stream, head) = send_head(
            server.addr(),
            self::head("GET", "HTTP/1.1", &lines).as_bytes(),
        )
        .await;
        assert!(
            head.starts_with("HTTP/1.1 400 Bad Request\r\n"),
            "{key_line}: {head}"
        );
        assert_eq!(header(&head, "sec-websocket-accept"), None);
        assert_eq!(
            body(&mut stream, &head).await,
            "400 Bad Request: Sec-WebSocket-Key must be 16 random bytes in base64"
        );
    }
    server.stop().await;
}

/// RFC 6455, 4.2.2: a version the server does not speak is answered 426
/// with `Sec-WebSocket-Version: 13`; no version at all too.
#[tokio::test]
async fn another_version_is_answered_426_with_version_13() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    for version_line in [
        "Sec-WebSocket-Version: 8\r\n",
        "Sec-WebSocket-Version: 14\r\n",
        "Sec-WebSocket-Version: 13, 8\r\n",
        "",
    ] {
        let lines = format!(
            "Upgrade: websocket\r\nConnection: Upgrade\r\n{version_line}Sec-WebSocket-Key: {KEY}\r\n"
        );
        let (mut stream, head) = send_head(
            server.addr(),
            self::head("GET", "HTTP/1.1", &lines).as_bytes(),
        )
        .await;
        assert!(
            head.starts_with("HTTP/1.1 426 Upgrade Required\r\n"),
            "{version_line}: {head}"
        );
        assert_eq!(header(&head, "sec-websocket-version"), Some("13"), "{head}");
        assert_eq!(header(&head, "upgrade"), Some("websocket"));
        assert_eq!(
            body(&mut stream, &head).await,
            "426 Upgrade Required: only WebSocket version 13 is supported (Sec-WebSocket-Version: 13)"
        );
    }
    server.stop().await;
}

/// A `POST` that asks for an upgrade gets the router's 405 over the wire,
/// with `Allow: GET, HEAD`, and no upgrade.
#[tokio::test]
async fn a_post_handshake_gets_405_over_the_wire() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let lines = format!("{}Content-Length: 0\r\n", handshake_lines());
    let (mut stream, head) = send_head(
        server.addr(),
        self::head("POST", "HTTP/1.1", &lines).as_bytes(),
    )
    .await;
    assert!(
        head.starts_with("HTTP/1.1 405 Method Not Allowed\r\n"),
        "{head}"
    );
    assert_eq!(header(&head, "allow"), Some("GET, HEAD"));
    assert_eq!(header(&head, "sec-websocket-accept"), None);
    assert_eq!(body(&mut stream, &head).await, "405 Method Not Allowed");
    server.stop().await;
}

/// A refused handshake leaves a kept-alive HTTP/1.1 connection: the next
/// request on it, a valid handshake, upgrades.
#[tokio::test]
async fn a_refused_handshake_keeps_the_connection_for_the_next_request() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let bad = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 8\r\n\
               Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let (mut stream, first) =
        send_head(server.addr(), self::head("GET", "HTTP/1.1", bad).as_bytes()).await;
    assert_eq!(status(&first), 426);
    body(&mut stream, &first).await;
    stream
        .write_all(self::head("GET", "HTTP/1.1", &handshake_lines()).as_bytes())
        .await
        .unwrap();
    let mut second = Vec::new();
    let mut byte = [0_u8; 1];
    within("the second answer", Duration::from_secs(5), async {
        while !second.ends_with(b"\r\n\r\n") {
            assert_eq!(stream.read(&mut byte).await.unwrap(), 1);
            second.push(byte[0]);
        }
    })
    .await;
    let second = String::from_utf8(second).unwrap();
    assert_eq!(status(&second), 101, "{second}");
    stream.write_all(&masked(true, TEXT, b"ok")).await.unwrap();
    assert_eq!(
        read_frame(&mut stream).await,
        Some((true, TEXT, b"ok".to_vec()))
    );
    server.stop().await;
}

// ---- limits on the upgrade ----------------------------------------------------

/// `throttle:2,1` on a socket route counts each upgrade once: the 101s
/// carry the limit and what is left, messages on an open socket count
/// nothing, and the third upgrade gets Laravel's 429 with its four headers.
#[tokio::test]
async fn a_throttled_socket_route_counts_upgrades_not_messages() {
    let clock = support::clock_at(12, 0, 0);
    let app = throttle_support::memory_app(&clock);
    app.scope(async {
        let router = ws!("/ws", Echo).middleware(ThrottleRequestsMiddleware::with(2, 1, ""));
        let server = TestServer::start(router).await;
        let (mut first, headers) = connect(server.addr(), "/ws").await.unwrap();
        assert_eq!(headers.get("x-ratelimit-limit").unwrap(), "2");
        assert_eq!(headers.get("x-ratelimit-remaining").unwrap(), "1");
        assert!(headers.get("retry-after").is_none());
        for n in 0..10 {
            first.send(Message::text(format!("m{n}"))).await.unwrap();
            let echoed = within("an echo", Duration::from_secs(5), first.next()).await;
            assert!(matches!(echoed, Some(Ok(Message::Text(_)))), "{echoed:?}");
        }
        assert_eq!(
            RateLimiter::attempts("ip:127.0.0.1:path:/ws")
                .await
                .unwrap(),
            1
        );
        let (second, headers) = connect(server.addr(), "/ws").await.unwrap();
        assert_eq!(headers.get("x-ratelimit-remaining").unwrap(), "0");

        match connect(server.addr(), "/ws").await {
            Err(WsError::Http(response)) => {
                assert_eq!(response.status(), 429);
                let h = response.headers();
                assert_eq!(h.get("x-ratelimit-limit").unwrap(), "2");
                assert_eq!(h.get("x-ratelimit-remaining").unwrap(), "0");
                assert_eq!(h.get("retry-after").unwrap(), "60");
                assert_eq!(h.get("x-ratelimit-reset").unwrap(), "1767268860");
                let body = response.into_body().unwrap_or_default();
                assert_eq!(String::from_utf8_lossy(&body), "Too Many Attempts.");
            }
            Err(other) => panic!("expected a 429, got {other}"),
            Ok(_) => panic!("expected a 429, the socket opened"),
        }
        // The refusal counts nothing either.
        assert_eq!(
            RateLimiter::attempts("ip:127.0.0.1:path:/ws")
                .await
                .unwrap(),
            2
        );
        drop((first, second));
        server.stop().await;
    })
    .await;
}

/// `ip_based` behind `connections_per_ip` on a socket route: the 101s carry
/// the limit's headers, the refused upgrade gets 429 with `Retry-After`,
/// and the place the cap took for it is given back at once.
#[tokio::test]
async fn an_ip_based_limit_refuses_the_upgrade_and_the_cap_counts_only_open_sockets() {
    let clock = support::clock_at(12, 0, 0);
    let app = suprnova::container::App::new();
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    app.scope(async {
        let cap = RateLimitMiddleware::connections_per_ip(5);
        let router = ws!("/ws", Echo)
            .middleware(cap.clone())
            .middleware(RateLimitMiddleware::ip_based(2, Duration::from_secs(60)));
        let server = TestServer::start(router).await;
        let (mut a, headers) = connect(server.addr(), "/ws").await.unwrap();
        assert_eq!(headers.get("x-ratelimit-limit").unwrap(), "2");
        assert_eq!(headers.get("x-ratelimit-remaining").unwrap(), "1");
        for _ in 0..5 {
            a.send(Message::text("x")).await.unwrap();
            within("an echo", Duration::from_secs(5), a.next()).await;
        }
        let (b, headers) = connect(server.addr(), "/ws").await.unwrap();
        assert_eq!(headers.get("x-ratelimit-remaining").unwrap(), "0");
        match connect(server.addr(), "/ws").await {
            Err(WsError::Http(response)) => {
                assert_eq!(response.status(), 429);
                let h = response.headers();
                assert_eq!(h.get("x-ratelimit-limit").unwrap(), "2");
                assert_eq!(h.get("x-ratelimit-remaining").unwrap(), "0");
                assert!(h.get("retry-after").is_some());
                let body = response.into_body().unwrap_or_default();
                assert_eq!(String::from_utf8_lossy(&body), "429 Too Many Requests");
            }
            Err(other) => panic!("expected a 429, got {other}"),
            Ok(_) => panic!("expected a 429, the socket opened"),
        }
        assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 2);
        drop((a, b));
        wait_open(&cap, 0).await;
        server.stop().await;
    })
    .await;
}

// ---- what a peer may send -------------------------------------------------------

/// A route reading messages of up to 1000 bytes, reporting each read.
async fn limited_server(max: usize) -> (TestServer, mpsc::UnboundedReceiver<String>) {
    let (tx, rx) = mpsc::unbounded_channel();
    let router = suprnova::ws::route_with_max_message_size("/ws", Report(tx), max);
    (TestServer::start(router).await, rx)
}

/// A message of exactly the limit is read, whole or in fragments, text or
/// binary; one byte over, in fragments, closes with 1009, and the handler
/// reads an error that says so.
#[tokio::test]
async fn a_message_at_the_limit_passes_and_one_byte_over_closes_with_1009() {
    let (server, mut reports) = limited_server(1000).await;
    let mut stream = open(server.addr()).await;

    stream
        .write_all(&masked(true, BINARY, &[9; 1000]))
        .await
        .unwrap();
    assert_eq!(next_report(&mut reports).await, "binary 1000");
    assert_eq!(
        read_frame(&mut stream).await,
        Some((true, BINARY, vec![9; 1000]))
    );

    let text = "é".repeat(500); // 1000 bytes, split inside a character
    let bytes = text.as_bytes();
    let mut fragments = masked(false, TEXT, &bytes[..401]);
    fragments.extend(masked(false, CONTINUATION, &bytes[401..800]));
    fragments.extend(masked(true, CONTINUATION, &bytes[800..]));
    stream.write_all(&fragments).await.unwrap();
    assert_eq!(next_report(&mut reports).await, "text 1000");
    assert_eq!(
        read_frame(&mut stream).await,
        Some((true, TEXT, bytes.to_vec()))
    );

    let mut over = masked(false, BINARY, &[1; 500]);
    over.extend(masked(true, CONTINUATION, &[1; 501]));
    stream.write_all(&over).await.unwrap();
    assert_eq!(close_code(&mut stream).await, Some(1009));
    assert_eq!(
        next_report(&mut reports).await,
        "error: Space limit exceeded: Message too long: 1001 > 1000"
    );
    server.stop().await;
}

/// The default limit, `MAX_MESSAGE_SIZE`, admits a message of exactly that
/// size from a real client.
#[tokio::test]
async fn a_message_of_exactly_max_message_size_is_read() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let (mut client, _) = connect(server.addr(), "/ws").await.unwrap();
    client
        .send(Message::binary(vec![3_u8; MAX_MESSAGE_SIZE]))
        .await
        .unwrap();
    let back = within("the echo", Duration::from_secs(10), client.next()).await;
    match back {
        Some(Ok(Message::Binary(bytes))) => assert_eq!(bytes.len(), MAX_MESSAGE_SIZE),
        other => panic!("expected the message back, got {other:?}"),
    }
    server.stop().await;
}

/// RFC 6455, 8.1: text that is not UTF-8 fails the connection with 1007,
/// whole or in fragments; the handler reads the error.
#[tokio::test]
async fn text_that_is_not_utf8_closes_with_1007() {
    let (server, mut reports) = limited_server(1000).await;
    let mut stream = open(server.addr()).await;
    stream
        .write_all(&masked(true, TEXT, &[b'a', 0xff, 0xfe]))
        .await
        .unwrap();
    assert_eq!(close_code(&mut stream).await, Some(1007));
    assert!(
        next_report(&mut reports)
            .await
            .starts_with("error: UTF-8 encoding error"),
    );

    let mut stream = open(server.addr()).await;
    let mut fragments = masked(false, TEXT, b"ok \xC3");
    fragments.extend(masked(true, CONTINUATION, b"\x28"));
    stream.write_all(&fragments).await.unwrap();
    assert_eq!(close_code(&mut stream).await, Some(1007));
    assert!(
        next_report(&mut reports)
            .await
            .starts_with("error: UTF-8 encoding error"),
    );
    server.stop().await;
}

/// RFC 6455, 5.5 and 5.1: a control frame over 125 bytes, a fragmented
/// control frame and an unmasked client frame each fail the connection with
/// 1002.
#[tokio::test]
async fn oversized_or_fragmented_control_frames_and_unmasked_frames_close_with_1002() {
    let (server, mut reports) = limited_server(MAX_MESSAGE_SIZE).await;
    let cases: [(&str, Vec<u8>); 4] = [
        ("a ping of 126 bytes", masked(true, PING, &[0; 126])),
        (
            "a close of 126 bytes",
            masked(true, CLOSE, &[3, 232].repeat(63)),
        ),
        ("a fragmented ping", masked(false, PING, b"p")),
        ("an unmasked text", frame(true, TEXT, b"plain", None)),
    ];
    for (what, bytes) in cases {
        let mut stream = open(server.addr()).await;
        stream.write_all(&bytes).await.unwrap();
        assert_eq!(close_code(&mut stream).await, Some(1002), "{what}");
        let report = next_report(&mut reports).await;
        assert!(
            report.starts_with("error: WebSocket protocol error"),
            "{what}: {report}"
        );
    }
    server.stop().await;
}

/// RFC 6455, 5.5.2-5.5.3: a ping is answered with a pong carrying its
/// payload, between the fragments of a message too, which still arrives
/// whole.
#[tokio::test]
async fn a_ping_is_answered_with_its_payload_even_between_fragments() {
    let (server, mut reports) = limited_server(1000).await;
    let mut stream = open(server.addr()).await;
    stream
        .write_all(&masked(true, PING, b"are you there"))
        .await
        .unwrap();
    assert_eq!(
        read_frame(&mut stream).await,
        Some((true, PONG, b"are you there".to_vec()))
    );
    assert_eq!(next_report(&mut reports).await, "ping 13");

    let mut bytes = masked(false, TEXT, b"hel");
    bytes.extend(masked(true, PING, b"mid"));
    bytes.extend(masked(true, CONTINUATION, b"lo"));
    stream.write_all(&bytes).await.unwrap();
    assert_eq!(
        read_frame(&mut stream).await,
        Some((true, PONG, b"mid".to_vec()))
    );
    assert_eq!(
        read_frame(&mut stream).await,
        Some((true, TEXT, b"hello".to_vec()))
    );
    server.stop().await;
}

/// RFC 6455, 5.5.2: a pong is sent "as soon as is practical". A handler
/// that works a while after each message it reads (as one that writes each
/// to a database does) must not hold the answer to a ping the socket read
/// for it: "Pings are answered for you".
#[tokio::test]
async fn a_ping_is_answered_while_the_handler_works_after_its_read() {
    let server = TestServer::start(ws!("/ws", SlowReader(Duration::from_secs(3)))).await;
    let mut stream = open(server.addr()).await;
    let started = Instant::now();
    stream.write_all(&masked(true, PING, b"hb")).await.unwrap();
    assert_eq!(
        read_frame(&mut stream).await,
        Some((true, PONG, b"hb".to_vec()))
    );
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(1),
        "the pong came after {took:?}"
    );
    server.stop().await;
}

/// RFC 6455, 5.5.1: the peer's close is answered with a close carrying its
/// code, the handler's read ends with `None`, and the server ends the TCP
/// connection (7.1.1). A close whose code may not be sent, or whose payload
/// is one byte, is answered 1002.
#[tokio::test]
async fn a_close_is_echoed_with_its_code_and_a_bad_close_gets_1002() {
    let (server, mut reports) = limited_server(1000).await;
    let mut stream = open(server.addr()).await;
    let mut close = 1000_u16.to_be_bytes().to_vec();
    close.extend_from_slice(b"done");
    stream
        .write_all(&masked(true, CLOSE, &close))
        .await
        .unwrap();
    assert_eq!(close_code(&mut stream).await, Some(1000));
    assert_eq!(next_report(&mut reports).await, "none");
    assert!(end_of(&mut stream, Duration::from_secs(3)).await < Duration::from_secs(2));

    let mut stream = open(server.addr()).await;
    stream
        .write_all(&masked(true, CLOSE, &1005_u16.to_be_bytes()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut stream).await, Some(1002));

    let mut stream = open(server.addr()).await;
    stream.write_all(&masked(true, CLOSE, &[3])).await.unwrap();
    assert_eq!(close_code(&mut stream).await, Some(1002));
    server.stop().await;
}

/// RFC 6455, 7.1.7: after failing the connection with 1009 for a frame
/// over the limit, the server processes no more of the peer's data (the
/// rest of the refused frame, the peer's answering close): it ends the
/// connection at once, and the `connections_per_ip` place with it.
#[tokio::test]
async fn after_a_1009_for_a_frame_over_the_limit_the_connection_ends_at_once() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router =
        suprnova::ws::route_with_max_message_size("/ws", Report(tx), 1000).middleware(cap.clone());
    let server = TestServer::start(router).await;
    let mut stream = open(server.addr()).await;
    // A binary frame announcing 5000 bytes, and the first 16 of them.
    let mut bytes = vec![0x82];
    bytes.extend(length_bytes(0x80, 5000));
    bytes.extend_from_slice(&[0, 0, 0, 0]);
    bytes.extend_from_slice(&[7; 16]);
    stream.write_all(&bytes).await.unwrap();
    assert_eq!(close_code(&mut stream).await, Some(1009));
    assert_eq!(
        next_report(&mut reports).await,
        "error: Space limit exceeded: Message too long: 5000 > 1000"
    );
    // The client answers the close, as RFC 6455, 5.5.1 asks.
    stream
        .write_all(&masked(true, CLOSE, &1009_u16.to_be_bytes()))
        .await
        .unwrap();
    let took = end_of(&mut stream, CLOSE_TIMEOUT + Duration::from_secs(5)).await;
    assert!(
        took < Duration::from_secs(2),
        "the server ended the connection {took:?} after the close was answered"
    );
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 0);
    server.stop().await;
}

// ---- how a session ends -----------------------------------------------------------

/// A client that resets its connection in the middle of a message: the
/// handler's read fails, the handler ends, and that socket's place (and
/// only it) is given back.
#[tokio::test]
async fn a_client_reset_mid_message_ends_the_handler_and_frees_exactly_its_place() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let cap = RateLimitMiddleware::connections_per_ip(3);
    let router = ws!("/ws", Report(tx)).middleware(cap.clone());
    let server = TestServer::start(router).await;
    let mut keep = open(server.addr()).await;
    let mut gone = open(server.addr()).await;
    wait_open(&cap, 2).await;
    let mut half = vec![0x81];
    half.extend(length_bytes(0x80, 500));
    half.extend_from_slice(&[0, 0, 0, 0]);
    half.extend_from_slice(&[b'x'; 100]);
    gone.write_all(&half).await.unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    #[allow(deprecated)]
    gone.set_linger(Some(Duration::ZERO)).unwrap();
    drop(gone);
    let report = next_report(&mut reports).await;
    assert!(report.starts_with("error: "), "{report}");
    wait_open(&cap, 1).await;
    // The other socket is untouched.
    keep.write_all(&masked(true, TEXT, b"still")).await.unwrap();
    assert_eq!(
        read_frame(&mut keep).await,
        Some((true, TEXT, b"still".to_vec()))
    );
    assert_eq!(next_report(&mut reports).await, "text 5");
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 1);
    server.stop().await;
}

/// A handler that panics does not take the server down: its socket is
/// closed, the connection ends, its place is given back, and the route
/// goes on opening sockets.
#[tokio::test]
async fn a_panicking_handler_ends_its_session_and_gives_its_place_back() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let server = TestServer::start(ws!("/ws", Panics).middleware(cap.clone())).await;
    for _ in 0..2 {
        let mut stream = open(server.addr()).await;
        assert_eq!(
            read_frame(&mut stream).await,
            Some((true, TEXT, b"about to fail".to_vec()))
        );
        let (_, opcode, _) = read_frame(&mut stream).await.expect("no close frame");
        assert_eq!(opcode, CLOSE);
        stream.write_all(&masked(true, CLOSE, &[])).await.unwrap();
        end_of(&mut stream, Duration::from_secs(5)).await;
        wait_open(&cap, 0).await;
    }
    server.stop().await;
}

/// RFC 6455, 7.4.1: 1011 tells the peer the server met an unexpected
/// condition. A handler that panics (a plain route answers 500 for it) is
/// one; its socket is closed with no status code, as if it had ended
/// normally.
#[tokio::test]
async fn a_panicking_handler_closes_its_socket_with_1011() {
    let server = TestServer::start(ws!("/ws", Panics)).await;
    let mut stream = open(server.addr()).await;
    assert_eq!(
        read_frame(&mut stream).await,
        Some((true, TEXT, b"about to fail".to_vec()))
    );
    assert_eq!(close_code(&mut stream).await, Some(1011));
    server.stop().await;
}

/// At a shutdown, sockets whose clients read the 1001 but never answer it
/// do not hold the server past a close timeout; every socket is told, and
/// every place is given back.
#[tokio::test]
async fn a_shutdown_tells_every_socket_1001_and_ends_within_a_close_timeout() {
    let cap = RateLimitMiddleware::connections_per_ip(5);
    let server = TestServer::start(ws!("/ws", Echo).middleware(cap.clone())).await;
    let mut streams = Vec::new();
    for _ in 0..3 {
        streams.push(open(server.addr()).await);
    }
    wait_open(&cap, 3).await;
    let started = Instant::now();
    let stopping = tokio::spawn(server.stop());
    for stream in &mut streams {
        assert_eq!(close_code(stream).await, Some(1001));
    }
    within("the shutdown", Duration::from_secs(20), stopping)
        .await
        .unwrap();
    let took = started.elapsed();
    assert!(
        took < CLOSE_TIMEOUT + Duration::from_secs(2),
        "the shutdown took {took:?}"
    );
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 0);
    for stream in &mut streams {
        end_of(stream, Duration::from_secs(2)).await;
    }
}

/// RFC 6455, 11.3.1: `Sec-WebSocket-Key` must not appear more than once,
/// and 4.2.1 has the server answer a handshake that breaks the description
/// with an error such as 400 rather than upgrade it. Two keys leave the
/// accept value ambiguous.
#[tokio::test]
async fn a_handshake_with_two_keys_is_refused_with_400() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let lines = format!(
        "{}Sec-WebSocket-Key: AAAAAAAAAAAAAAAAAAAAAA==\r\n",
        handshake_lines()
    );
    let (_stream, head) = send_head(
        server.addr(),
        self::head("GET", "HTTP/1.1", &lines).as_bytes(),
    )
    .await;
    assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
    server.stop().await;
}

/// A route whose sockets read no messages (`route_with_max_message_size`
/// of 0: the server only pushes) still takes the peer's close: a close
/// frame with a status code (two bytes, as browsers send) is a control
/// frame, not a message, and is answered with its code while the handler's
/// read ends with `None`.
#[tokio::test]
async fn a_route_reading_no_messages_still_takes_the_peers_close() {
    let (server, mut reports) = limited_server(0).await;
    let mut stream = open(server.addr()).await;
    stream
        .write_all(&masked(true, CLOSE, &1001_u16.to_be_bytes()))
        .await
        .unwrap();
    let code = close_code(&mut stream).await;
    let report = next_report(&mut reports).await;
    assert_eq!((code, report.as_str()), (Some(1001), "none"));
    server.stop().await;
}

/// A limit under 125 bytes leaves pings alone: control frames are bounded
/// at 125 bytes by the protocol, and a ping of 8 bytes on a route reading
/// messages of up to 4 is answered with its pong.
#[tokio::test]
async fn a_small_read_limit_still_answers_pings() {
    let (server, _reports) = limited_server(4).await;
    let mut stream = open(server.addr()).await;
    stream
        .write_all(&masked(true, PING, b"12345678"))
        .await
        .unwrap();
    let (_, opcode, payload) = read_frame(&mut stream).await.expect("no frame");
    assert_eq!((opcode, payload), (PONG, b"12345678".to_vec()));
    server.stop().await;
}

/// A limit that reads the body for its key (`key_reads_body`) on a socket
/// route reads the handshake's empty body and lets the upgrade through.
#[tokio::test]
async fn a_limit_that_reads_the_body_lets_the_upgrade_through() {
    let clock = support::clock_at(12, 0, 0);
    let app = suprnova::container::App::new();
    app.install::<dyn RateLimiterDriver>(Arc::new(InMemoryRateLimiter::with_clock(clock.shared())));
    app.scope(async {
        let limit = RateLimitMiddleware::ip_based(5, Duration::from_secs(60)).key_reads_body(1024);
        let server = TestServer::start(ws!("/ws", Echo).middleware(limit)).await;
        let (mut client, headers) = connect(server.addr(), "/ws").await.unwrap();
        assert_eq!(headers.get("x-ratelimit-remaining").unwrap(), "4");
        client.send(Message::text("hi")).await.unwrap();
        let back = within("the echo", Duration::from_secs(5), client.next()).await;
        assert!(
            matches!(back, Some(Ok(Message::Text(ref t))) if t.as_str() == "hi"),
            "{back:?}"
        );
        drop(client);
        server.stop().await;
    })
    .await;
}
