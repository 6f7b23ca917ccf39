//! WebSocket routes through the real server, with a real WebSocket client:
//! the handshake, the session, and `connections_per_ip` on a socket.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use suprnova::rate_limit::{ConnectionsPerIp, RateLimitMiddleware};
use suprnova::server::handle_request_with_peer;
use suprnova::ws::{CLOSE_TIMEOUT, Message, WebSocket, WebSocketHandler};
use suprnova::{HttpResponse, Middleware, Next, Request, Response, Router, async_trait, ws};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Error as WsError;

use support::http::TestServer;
use support::ws::{Client, Echo, close, connect_with, next_text, refusal};

/// Greets and returns at once, leaving the close to the session.
struct GreetAndLeave;

#[async_trait]
impl WebSocketHandler for GreetAndLeave {
    async fn on_socket(&self, mut socket: WebSocket) {
        let _ = socket.send("bye").await;
    }
}

/// Reads until the peer closes, then keeps the socket a while (cleaning up,
/// say) before it returns.
struct LingerAfterClose(Duration);

#[async_trait]
impl WebSocketHandler for LingerAfterClose {
    async fn on_socket(&self, mut socket: WebSocket) {
        while let Some(Ok(_)) = socket.recv().await {}
        tokio::time::sleep(self.0).await;
    }
}

/// Hands the socket to a task of its own and returns at once; the task
/// writes once the test releases it.
struct HandOff(Arc<tokio::sync::Semaphore>);

#[async_trait]
impl WebSocketHandler for HandOff {
    async fn on_socket(&self, mut socket: WebSocket) {
        let _ = socket.send("moved").await;
        let release = self.0.clone();
        tokio::spawn(async move {
            let _permit = release.acquire().await;
            let _ = socket.send("later").await;
        });
    }
}

/// Refuses every request, after the cap has let it pass.
struct RefuseAll;

#[async_trait]
impl Middleware for RefuseAll {
    async fn handle(&self, _request: Request, _next: Next) -> Response {
        Err(HttpResponse::text("403 Forbidden").status(403))
    }
}

/// Opens a WebSocket to `path` from the local address `from`.
async fn connect(server: SocketAddr, from: &str, path: &str) -> Result<Client, WsError> {
    connect_with(server, from, path, &[]).await
}

/// Waits (bounded) until the cap counts `want` for `addr`: the session's
/// task drops its holds just after the close handshake the client saw.
/// What is left of an answer on `stream` once its head was read: the body,
/// up to the end of the connection, within 5 s.
async fn rest_of_answer(stream: &mut tokio::net::TcpStream) -> String {
    use tokio::io::AsyncReadExt;
    let mut body = String::new();
    support::within(
        "the body",
        Duration::from_secs(5),
        stream.read_to_string(&mut body),
    )
    .await
    .unwrap();
    body
}

async fn wait_open(cap: &ConnectionsPerIp, addr: &str, want: usize) {
    support::held::open_becomes(cap, addr.parse().unwrap(), want).await;
}

#[tokio::test]
async fn a_socket_round_trips_and_mounts_beside_plain_routes() {
    let router = Router::new()
        .get("/", |_req: Request| async { HttpResponse::text("home") })
        .merge(ws!("/ws/echo", Echo));
    let server = TestServer::start(router).await;
    assert_eq!(server.get("/").await.body, "home");

    let mut client = connect(server.addr(), "127.0.0.1", "/ws/echo")
        .await
        .unwrap();
    client.send(Message::text("hello")).await.unwrap();
    assert_eq!(next_text(&mut client).await, "127.0.0.1 hello");
    client.send(Message::text("again")).await.unwrap();
    assert_eq!(next_text(&mut client).await, "127.0.0.1 again");
    close(client).await;
}

#[tokio::test]
async fn a_plain_get_on_a_socket_route_is_told_to_upgrade() {
    let server = TestServer::start(ws!("/ws/echo", Echo)).await;
    let reply = server.get("/ws/echo").await;
    assert_eq!(reply.status, 426);
    assert_eq!(reply.header("upgrade"), Some("websocket"));
    assert!(
        reply
            .body
            .starts_with("426 Upgrade Required: this route speaks WebSocket only"),
        "{}",
        reply.body
    );
}

/// RFC 9110, 9.3.2: HEAD is answered as GET is; a `POST` is told
/// `Allow: GET, HEAD`, and a `HEAD` gets what a plain `GET` gets, not 405.
#[tokio::test]
async fn head_on_a_socket_route_is_answered_as_a_plain_get() {
    let router = ws!("/ws", Echo);
    let peer: SocketAddr = "192.0.2.1:4000".parse().unwrap();
    let answer = |method: http::Method| {
        let request = http::Request::builder()
            .method(method)
            .uri("/ws")
            .body(String::new())
            .unwrap();
        handle_request_with_peer(&router, request, peer)
    };
    let post = answer(http::Method::POST).await;
    assert_eq!(post.status_code(), 405);
    assert_eq!(post.header_str("allow"), Some("GET, HEAD"));
    let get = answer(http::Method::GET).await;
    let head = answer(http::Method::HEAD).await;
    assert_eq!(get.status_code(), 426);
    for header in ["upgrade", "connection", "sec-websocket-version"] {
        assert_eq!(head.header_str(header), get.header_str(header), "{header}");
    }
    // Without the content, with its length, as the server sends it.
    let length = get.body_text().len().to_string();
    assert_eq!(
        (
            head.status_code(),
            head.header_str("content-length"),
            head.body_text()
        ),
        (get.status_code(), Some(length.as_str()), String::new())
    );
}

#[tokio::test]
async fn the_session_completes_the_close_when_the_handler_returns() {
    let cap = RateLimitMiddleware::connections_per_ip(5);
    let server = TestServer::start(ws!("/ws/bye", GreetAndLeave).middleware(cap.clone())).await;
    let mut client = connect(server.addr(), "127.0.0.1", "/ws/bye")
        .await
        .unwrap();
    assert_eq!(next_text(&mut client).await, "bye");
    let closing = tokio::time::timeout(Duration::from_secs(5), client.next())
        .await
        .expect("no close frame in time");
    assert!(
        matches!(closing, Some(Ok(Message::Close(_)))),
        "expected the server's close frame, got {closing:?}"
    );
    // The client's answer to the close goes out on its next read, which then
    // sees the end of the connection; the session has ended and given the
    // place back.
    let end = tokio::time::timeout(Duration::from_secs(5), client.next())
        .await
        .expect("the server did not end the connection in time");
    assert!(end.is_none(), "expected the end of the socket, got {end:?}");
    wait_open(&cap, "127.0.0.1", 0).await;
}

/// The peer's close frame is answered when `recv` returns `None`, "as soon
/// as practical" (RFC 6455, 5.5.1), not when the handler, busy after its
/// read loop, drops the socket.
#[tokio::test]
async fn a_peers_close_is_answered_when_recv_returns_none() {
    let server = TestServer::start(ws!("/ws", LingerAfterClose(Duration::from_secs(3)))).await;
    let mut client = connect(server.addr(), "127.0.0.1", "/ws").await.unwrap();
    client.send(Message::text("hi")).await.unwrap();
    let started = Instant::now();
    client.close(None).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(10), client.next())
        .await
        .expect("no close frame in time");
    let took = started.elapsed();
    assert!(
        matches!(answer, Some(Ok(Message::Close(_)))),
        "expected the server's close frame, got {answer:?}"
    );
    assert!(
        took < Duration::from_secs(1),
        "the close was answered after {took:?}, when the handler dropped the socket"
    );
    server.stop().await;
}

#[tokio::test]
async fn a_third_socket_is_refused_and_closing_one_frees_its_place() {
    let cap = RateLimitMiddleware::connections_per_ip(2);
    let router = ws!("/ws/echo", Echo).middleware(cap.clone());
    let server = TestServer::start(router).await;
    let addr = server.addr();

    let mut first = connect(addr, "127.0.0.1", "/ws/echo").await.unwrap();
    let second = connect(addr, "127.0.0.1", "/ws/echo").await.unwrap();
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 2);

    let (status, body, headers) = refusal(connect(addr, "127.0.0.1", "/ws/echo").await);
    assert_eq!(status, 429);
    assert_eq!(body, "429 Too Many Requests");
    assert!(headers.get("retry-after").is_none());
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 2);

    // Another address has places of its own.
    let mut elsewhere = connect(addr, "127.0.0.2", "/ws/echo").await.unwrap();
    elsewhere.send(Message::text("hi")).await.unwrap();
    assert_eq!(next_text(&mut elsewhere).await, "127.0.0.2 hi");

    // The open sockets still work while the third is refused.
    first.send(Message::text("still here")).await.unwrap();
    assert_eq!(next_text(&mut first).await, "127.0.0.1 still here");

    close(second).await;
    wait_open(&cap, "127.0.0.1", 1).await;
    let third = connect(addr, "127.0.0.1", "/ws/echo").await.unwrap();
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 2);

    close(first).await;
    close(third).await;
    close(elsewhere).await;
    wait_open(&cap, "127.0.0.1", 0).await;
    assert_eq!(cap.addresses_open(), 0);
}

#[tokio::test]
async fn a_later_middleware_that_refuses_the_upgrade_gives_the_place_back() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = ws!("/ws/echo", Echo)
        .middleware(cap.clone())
        .middleware(RefuseAll);
    let server = TestServer::start(router).await;
    for _ in 0..3 {
        let (status, body, _) = refusal(connect(server.addr(), "127.0.0.1", "/ws/echo").await);
        assert_eq!(status, 403, "the cap of 1 must not fill up: {body}");
        // Given back before the answer was written, not after some delay.
        assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 0);
    }
}

#[tokio::test]
async fn a_peer_that_vanishes_gives_its_place_back_when_the_handler_notices() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let server = TestServer::start(ws!("/ws/echo", Echo).middleware(cap.clone())).await;
    let client = connect(server.addr(), "127.0.0.1", "/ws/echo")
        .await
        .unwrap();
    wait_open(&cap, "127.0.0.1", 1).await;
    // No close frame: the TCP connection just goes away.
    drop(client);
    wait_open(&cap, "127.0.0.1", 0).await;
}

#[tokio::test]
async fn an_in_process_handshake_cannot_upgrade_and_keeps_no_place() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = Arc::new(ws!("/ws/echo", Echo).middleware(cap.clone()));
    let handshake = || {
        http::Request::get("/ws/echo")
            .header("Upgrade", "websocket")
            .header("Connection", "Upgrade")
            .header("Sec-WebSocket-Version", "13")
            .header("Sec-WebSocket-Key", "dGhlIHNhbXBsZSBub25jZQ==")
            .body(String::new())
            .unwrap()
    };
    let peer: SocketAddr = "192.0.2.44:5000".parse().unwrap();
    for _ in 0..2 {
        let response = handle_request_with_peer(&router, handshake(), peer).await;
        assert_eq!(response.status_code(), 500);
        assert_eq!(cap.open_for(peer.ip()), 0);
    }
}

#[tokio::test]
async fn the_session_lasts_while_a_task_the_handler_spawned_holds_the_socket() {
    let cap = RateLimitMiddleware::connections_per_ip(3);
    let release = Arc::new(tokio::sync::Semaphore::new(0));
    let router = ws!("/ws/handoff", HandOff(release.clone())).middleware(cap.clone());
    let server = TestServer::start(router).await;
    let mut client = connect(server.addr(), "127.0.0.1", "/ws/handoff")
        .await
        .unwrap();
    assert_eq!(next_text(&mut client).await, "moved");
    // The handler has returned (or is about to); give a wrong early release
    // the chance to show.
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 1);

    release.add_permits(1);
    assert_eq!(next_text(&mut client).await, "later");
    let closing = tokio::time::timeout(Duration::from_secs(5), client.next())
        .await
        .expect("no close frame in time");
    assert!(
        matches!(closing, Some(Ok(Message::Close(_)))),
        "{closing:?}"
    );
    let end = tokio::time::timeout(Duration::from_secs(5), client.next())
        .await
        .expect("the server did not end the connection in time");
    assert!(end.is_none(), "{end:?}");
    wait_open(&cap, "127.0.0.1", 0).await;
}

/// A shutdown tells an open socket: its handler's read returns `None`, the
/// client gets a close frame with code 1001 (going away), and the server
/// returns once the session is over, its place given back.
#[tokio::test]
async fn a_shutdown_closes_open_sockets_going_away_and_waits_for_them() {
    use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

    let cap = RateLimitMiddleware::connections_per_ip(5);
    let server = TestServer::start(ws!("/echo", Echo).middleware(cap.clone())).await;
    let mut client = connect(server.addr(), "127.0.0.1", "/echo").await.unwrap();
    client.send(Message::text("before")).await.unwrap();
    assert_eq!(next_text(&mut client).await, "127.0.0.1 before");
    wait_open(&cap, "127.0.0.1", 1).await;

    let stopping = tokio::spawn(server.stop());
    let frame = tokio::time::timeout(Duration::from_secs(5), client.next())
        .await
        .expect("no close frame in time")
        .expect("the socket ended without a close frame")
        .expect("the socket failed");
    match frame {
        Message::Close(Some(close)) => assert_eq!(close.code, CloseCode::Away),
        other => panic!("expected a close frame, got {other:?}"),
    }
    // The client answers the close; the session ends, and so does the
    // server.
    tokio::time::timeout(Duration::from_secs(5), async {
        while let Some(Ok(_)) = client.next().await {}
    })
    .await
    .expect("the server did not finish the close in time");
    tokio::time::timeout(Duration::from_secs(5), stopping)
        .await
        .expect("the server did not stop in time")
        .unwrap();
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 0);
}

/// Sends every text message back, counting what it reads.
struct CountingEcho(Arc<std::sync::atomic::AtomicUsize>);

#[async_trait]
impl WebSocketHandler for CountingEcho {
    async fn on_socket(&self, mut socket: WebSocket) {
        while let Some(Ok(message)) = socket.recv().await {
            self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            if let Message::Text(text) = message
                && socket.send(Message::Text(text)).await.is_err()
            {
                break;
            }
        }
    }
}

/// A peer that sends and never reads leaves an echo handler waiting in
/// `send`: a shutdown still ends it (the send gives up, the peer is told
/// 1001), within two close timeouts rather than the whole grace, and its
/// place is given back.
#[tokio::test]
async fn a_shutdown_ends_a_handler_waiting_to_send_to_a_peer_that_does_not_read() {
    use std::sync::atomic::Ordering;
    use tokio::io::AsyncWriteExt;

    let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let cap = RateLimitMiddleware::connections_per_ip(5);
    let server =
        TestServer::start(ws!("/ws", CountingEcho(read.clone())).middleware(cap.clone())).await;
    let (mut stream, head) = raw_handshake(server.addr(), "HTTP/1.1").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // Text frames of 64 KiB, masked with a zero key, that the handler echoes
    // into a connection nobody reads.
    let mut frame = vec![0x81, 0x80 | 127];
    frame.extend_from_slice(&(64_u64 << 10).to_be_bytes());
    frame.extend_from_slice(&[0, 0, 0, 0]);
    frame.extend_from_slice(&[b't'; 64 << 10]);
    let writer = tokio::spawn(async move {
        for _ in 0..400 {
            if stream.write_all(&frame).await.is_err() {
                break;
            }
        }
        stream
    });
    // Until the handler stops reading: it waits in `send`.
    let mut last = usize::MAX;
    support::within("the handler to stall", Duration::from_secs(30), async {
        loop {
            tokio::time::sleep(Duration::from_millis(300)).await;
            let now = read.load(Ordering::SeqCst);
            if now == last {
                break;
            }
            last = now;
        }
    })
    .await;
    assert!(last > 0 && last < 400, "the handler read {last} messages");
    wait_open(&cap, "127.0.0.1", 1).await;
    let started = Instant::now();
    support::within("the shutdown", Duration::from_secs(20), server.stop()).await;
    assert!(
        started.elapsed() < 2 * CLOSE_TIMEOUT + Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 0);
    writer.abort();
}

/// Lets a request through after a pause, as a middleware that asks a
/// backend would.
struct Slow(Duration);

#[async_trait]
impl Middleware for Slow {
    async fn handle(&self, request: Request, next: Next) -> Response {
        tokio::time::sleep(self.0).await;
        next(request).await
    }
}

/// A handshake still in a middleware when the shutdown begins reaches the
/// route after the server told its sessions: it is answered 503, not
/// upgraded into a session the server would not wait for, and the server
/// returns with its place given back.
#[tokio::test]
async fn a_handshake_that_reaches_the_route_during_a_shutdown_is_refused_with_503() {
    let cap = RateLimitMiddleware::connections_per_ip(5);
    let server = TestServer::start(
        ws!("/ws", Echo)
            .middleware(cap.clone())
            .middleware(Slow(Duration::from_millis(500))),
    )
    .await;
    let addr = server.addr();
    let client = tokio::spawn(async move { raw_handshake(addr, "HTTP/1.1").await });
    wait_open(&cap, "127.0.0.1", 1).await;
    support::within("the shutdown", Duration::from_secs(20), server.stop()).await;
    let open_after_stop = cap.open_for("127.0.0.1".parse().unwrap());
    let (mut stream, head) = support::within("the handshake", Duration::from_secs(5), client)
        .await
        .unwrap();
    assert_eq!(
        open_after_stop, 0,
        "the server returned with a session still holding its place; the handshake got {head}"
    );
    assert!(head.starts_with("HTTP/1.1 503"), "{head}");
    let body = rest_of_answer(&mut stream).await;
    assert_eq!(
        body,
        "503 Service Unavailable: the server is shutting down; open the WebSocket again later"
    );
}

/// Fills the connection to a peer that does not read, waits for the test's
/// word, then closes the socket and reports how long `close` took (`None`
/// past three close timeouts).
struct CloseAfterStall {
    stalled: tokio::sync::mpsc::UnboundedSender<()>,
    go: Arc<tokio::sync::Semaphore>,
    report: tokio::sync::mpsc::UnboundedSender<Option<Duration>>,
}

#[async_trait]
impl WebSocketHandler for CloseAfterStall {
    async fn on_socket(&self, mut socket: WebSocket) {
        let chunk = vec![0_u8; 1 << 20];
        // Until a send waits: the socket buffers are full, and what is left
        // of the message waits in the write buffer.
        loop {
            let sending = socket.send(Message::binary(chunk.clone()));
            match tokio::time::timeout(Duration::from_millis(500), sending).await {
                Ok(Ok(())) => continue,
                Ok(Err(error)) => panic!("a send failed before one waited: {error}"),
                Err(_) => break,
            }
        }
        let _ = self.stalled.send(());
        self.go.acquire().await.unwrap().forget();
        let started = Instant::now();
        let closed = tokio::time::timeout(3 * CLOSE_TIMEOUT, socket.close()).await;
        let _ = self.report.send(closed.ok().map(|_| started.elapsed()));
    }
}

/// `WebSocket::close` to a peer that does not read gives up after
/// [`CLOSE_TIMEOUT`], during a shutdown too, so that it cannot hold the
/// shutdown for its whole grace.
#[tokio::test]
async fn a_close_during_a_shutdown_to_a_peer_that_does_not_read_gives_up() {
    let (stalled_tx, mut stalled) = tokio::sync::mpsc::unbounded_channel();
    let (report_tx, mut report) = tokio::sync::mpsc::unbounded_channel();
    let go = Arc::new(tokio::sync::Semaphore::new(0));
    let handler = CloseAfterStall {
        stalled: stalled_tx,
        go: go.clone(),
        report: report_tx,
    };
    let server = TestServer::start(ws!("/ws", handler)).await;
    // A client that completes the handshake and then never reads.
    let (stream, head) = raw_handshake(server.addr(), "HTTP/1.1").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    support::within(
        "the handler to stall",
        Duration::from_secs(30),
        stalled.recv(),
    )
    .await;
    let stopping = tokio::spawn(server.stop());
    tokio::time::sleep(Duration::from_millis(200)).await;
    go.add_permits(1);
    let took = support::within(
        "the handler's report",
        Duration::from_secs(30),
        report.recv(),
    )
    .await
    .unwrap();
    assert!(
        took.is_some_and(|took| took <= CLOSE_TIMEOUT + Duration::from_secs(1)),
        "close took {took:?} (None: over {:?})",
        3 * CLOSE_TIMEOUT
    );
    support::within("the shutdown", Duration::from_secs(20), stopping)
        .await
        .unwrap();
    drop(stream);
}

/// Lets the route answer, then answers 403 instead of its 101.
struct ReplaceTheAnswer;

#[async_trait]
impl Middleware for ReplaceTheAnswer {
    async fn handle(&self, request: Request, next: Next) -> Response {
        let _ = next(request).await;
        Err(HttpResponse::text("403 Forbidden").status(403))
    }
}

/// A middleware that replaces the route's 101 after the route ran: no
/// session starts, the place is given back at once, and nothing but the
/// 403 is written to the connection, kept alive or not.
#[tokio::test]
async fn a_101_a_later_middleware_replaces_starts_no_session_and_keeps_no_place() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let router = ws!("/ws", GreetAndLeave)
        .middleware(cap.clone())
        .middleware(ReplaceTheAnswer);
    a_replaced_101_leaves_nothing(router, &cap).await;
}

/// Opens a socket on a server of `router`, whose 101 a middleware replaces
/// with 403: the place `cap` counted is given back at once, and when the
/// client ends its side of the kept-alive connection nothing more comes, no
/// frame of a session that never opened.
async fn a_replaced_101_leaves_nothing(router: Router, cap: &ConnectionsPerIp) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let server = TestServer::start(router).await;
    let (mut stream, head) = raw_handshake(server.addr(), "HTTP/1.1").await;
    assert!(head.starts_with("HTTP/1.1 403"), "{head}");
    let mut body = [0_u8; 13];
    stream.read_exact(&mut body).await.unwrap();
    assert_eq!(&body, b"403 Forbidden");
    wait_open(cap, "127.0.0.1", 0).await;
    stream.shutdown().await.unwrap();
    let mut after = Vec::new();
    support::within(
        "the connection's end",
        Duration::from_secs(5),
        stream.read_to_end(&mut after),
    )
    .await
    .unwrap();
    assert_eq!(String::from_utf8_lossy(&after), "");
    server.stop().await;
}

/// Sends one message of `self.0` bytes, and reports how the send went.
struct SendBytes(usize, tokio::sync::mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for SendBytes {
    async fn on_socket(&self, mut socket: WebSocket) {
        let sent = match socket.send(Message::binary(vec![7_u8; self.0])).await {
            Ok(()) => "sent".to_owned(),
            Err(error) => error.to_string(),
        };
        let _ = self.1.send(sent);
    }
}

/// Opens `path` of a server of `route(handler)`, where the handler sends
/// one message of `size` bytes: the client gets it whole, and the handler's
/// send went through.
async fn a_sent_message_arrives_whole(
    path: &str,
    size: usize,
    route: impl FnOnce(SendBytes) -> Router,
) {
    let (sent, mut report) = tokio::sync::mpsc::unbounded_channel();
    let server = TestServer::start(route(SendBytes(size, sent))).await;
    let mut client = connect(server.addr(), "127.0.0.1", path).await.unwrap();
    let got = tokio::time::timeout(Duration::from_secs(5), client.next())
        .await
        .expect("no message in time");
    match got {
        Some(Ok(Message::Binary(bytes))) => assert_eq!(bytes.len(), size),
        other => panic!("expected {size} bytes, got {other:?}"),
    }
    assert_eq!(report.recv().await.as_deref(), Some("sent"));
    close(client).await;
    server.stop().await;
}

#[tokio::test]
async fn a_handler_sends_a_message_larger_than_the_read_limit() {
    a_sent_message_arrives_whole("/big", 2 << 20, |handler| ws!("/big", handler)).await;
}

#[tokio::test]
async fn a_read_limit_of_zero_still_runs_the_handler() {
    a_sent_message_arrives_whole("/ws", 3, |handler| {
        suprnova::ws::route_with_max_message_size("/ws", handler, 0)
    })
    .await;
}

/// Waits for the test to let it send, then sends once and reports whether
/// the send went through.
struct SendWhenReleased(
    Arc<tokio::sync::Semaphore>,
    tokio::sync::mpsc::UnboundedSender<bool>,
);

#[async_trait]
impl WebSocketHandler for SendWhenReleased {
    async fn on_socket(&self, mut socket: WebSocket) {
        self.0.acquire().await.unwrap().forget();
        let _ = self.1.send(socket.send("reply").await.is_ok());
    }
}

/// During a shutdown, a send the peer takes goes through: only one that
/// waits gives up.
#[tokio::test]
async fn during_a_shutdown_a_send_to_a_reading_peer_goes_through() {
    const SOCKETS: usize = 20;
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let (sent, mut report) = tokio::sync::mpsc::unbounded_channel();
    let server = TestServer::start(ws!("/ws", SendWhenReleased(gate.clone(), sent))).await;
    let mut readers = Vec::new();
    for _ in 0..SOCKETS {
        let mut client = connect(server.addr(), "127.0.0.1", "/ws").await.unwrap();
        readers.push(tokio::spawn(async move {
            let mut got = Vec::new();
            while let Some(Ok(message)) = client.next().await {
                got.push(message);
            }
            got
        }));
    }
    let stopping = tokio::spawn(server.stop());
    // The flag is up before the handlers send.
    tokio::time::sleep(Duration::from_millis(200)).await;
    gate.add_permits(SOCKETS);
    let mut went_through = 0;
    for _ in 0..SOCKETS {
        let sent = support::within("a send's report", Duration::from_secs(10), report.recv()).await;
        went_through += usize::from(sent == Some(true));
    }
    assert_eq!(went_through, SOCKETS);
    support::within("the shutdown", Duration::from_secs(20), stopping)
        .await
        .unwrap();
    for reader in readers {
        let got = support::within("a reader", Duration::from_secs(5), reader)
            .await
            .unwrap();
        assert!(
            got.iter()
                .any(|m| matches!(m, Message::Text(t) if t.as_str() == "reply")),
            "{got:?}"
        );
    }
}

/// Writes a tick every 20 ms until a send fails.
struct Ticker;

#[async_trait]
impl WebSocketHandler for Ticker {
    async fn on_socket(&self, mut socket: WebSocket) {
        while socket.send("tick").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// A handler that only writes, to a peer that reads everything, ends within
/// a close timeout of the shutdown: its sends stop going through.
#[tokio::test]
async fn a_shutdown_ends_a_handler_that_only_writes_to_a_reading_peer() {
    let server = TestServer::start(ws!("/ws", Ticker)).await;
    let mut client = connect(server.addr(), "127.0.0.1", "/ws").await.unwrap();
    assert_eq!(next_text(&mut client).await, "tick");
    let reader = tokio::spawn(async move { while let Some(Ok(_)) = client.next().await {} });
    let started = Instant::now();
    support::within("the shutdown", Duration::from_secs(20), server.stop()).await;
    let took = started.elapsed();
    // Sends go through for a close timeout after the shutdown, then fail.
    assert!(
        took >= CLOSE_TIMEOUT && took < CLOSE_TIMEOUT + Duration::from_secs(3),
        "the shutdown took {took:?}"
    );
    support::within("the reader", Duration::from_secs(5), reader)
        .await
        .unwrap();
}

/// A socket router dispatched from another router's route, whose
/// middleware replaces the 101: no session starts there either.
#[tokio::test]
async fn a_101_replaced_outside_a_nested_router_starts_no_session() {
    let cap = RateLimitMiddleware::connections_per_ip(1);
    let inner = Arc::new(ws!("/ws", GreetAndLeave).middleware(cap.clone()));
    let outer = Router::new()
        .get("/ws", move |request: Request| {
            let inner = inner.clone();
            async move { inner.dispatch(request).await }
        })
        .middleware(ReplaceTheAnswer);
    a_replaced_101_leaves_nothing(outer, &cap).await;
}

// ---- what a peer may send ---------------------------------------------------

/// A handshake over raw TCP: the stream and the response head.
async fn raw_handshake(server: SocketAddr, version: &str) -> (TcpStream, String) {
    raw_handshake_ending(server, version, b"\r\n").await
}

/// A handshake over raw TCP whose header lines are followed by `rest` (more
/// header lines, the empty line, a body): the stream and the response head.
async fn raw_handshake_ending(
    server: SocketAddr,
    version: &str,
    rest: &[u8],
) -> (TcpStream, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut stream = TcpStream::connect(server).await.unwrap();
    let mut request = format!(
        "GET /ws {version}\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
    )
    .into_bytes();
    request.extend_from_slice(rest);
    stream.write_all(&request).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0_u8; 1];
    support::within("a handshake's answer", Duration::from_secs(5), async {
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(
                stream.read(&mut byte).await.unwrap(),
                1,
                "closed in the head"
            );
            head.push(byte[0]);
        }
    })
    .await;
    (stream, String::from_utf8(head).unwrap())
}

/// The close code of the server's next frame, which must be a close.
async fn close_code(stream: &mut TcpStream) -> Option<u16> {
    use tokio::io::AsyncReadExt;
    support::within("the server's close frame", Duration::from_secs(5), async {
        let mut head = [0_u8; 2];
        stream.read_exact(&mut head).await.unwrap();
        assert_eq!(head[0] & 0x0f, 0x8, "not a close frame: {head:?}");
        let mut payload = vec![0_u8; usize::from(head[1] & 0x7f)];
        stream.read_exact(&mut payload).await.unwrap();
        payload.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]))
    })
    .await
}

#[tokio::test]
async fn a_message_over_the_limit_closes_the_socket_with_1009() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let mut client = connect(server.addr(), "127.0.0.1", "/ws").await.unwrap();
    // Under the limit, a message goes through.
    let long = "x".repeat(600 * 1024);
    client.send(Message::text(long.clone())).await.unwrap();
    assert_eq!(next_text(&mut client).await, format!("127.0.0.1 {long}"));
    // Over it, the socket is closed as too big.
    let over = vec![0_u8; suprnova::ws::MAX_MESSAGE_SIZE + 1];
    client.send(Message::binary(over)).await.unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(5), client.next())
        .await
        .expect("no answer in time");
    match answer {
        Some(Ok(Message::Close(Some(frame)))) => assert_eq!(u16::from(frame.code), 1009),
        other => panic!("expected a close with 1009, got {other:?}"),
    }
    server.stop().await;
}

#[tokio::test]
async fn a_frame_that_breaks_the_protocol_closes_the_socket_with_1002() {
    use tokio::io::AsyncWriteExt;
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let (mut stream, head) = raw_handshake(server.addr(), "HTTP/1.1").await;
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    // Opcode 0x3 is reserved; masked with a zero key, one byte of payload.
    stream
        .write_all(&[0x83, 0x81, 0, 0, 0, 0, b'x'])
        .await
        .unwrap();
    assert_eq!(close_code(&mut stream).await, Some(1002));
    server.stop().await;
}

#[tokio::test]
async fn an_http_1_0_handshake_is_refused_with_400() {
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let (mut stream, head) = raw_handshake(server.addr(), "HTTP/1.0").await;
    assert!(head.starts_with("HTTP/1.0 400 Bad Request\r\n"), "{head}");
    let body = rest_of_answer(&mut stream).await;
    assert_eq!(
        body,
        "400 Bad Request: a WebSocket handshake needs HTTP/1.1 or later"
    );
    server.stop().await;
}

/// RFC 9110, 7.8: an upgraded protocol starts after the whole request. A
/// handshake that announces a body is refused with 400, so the body's bytes
/// (here a masked text frame) are never read as WebSocket frames.
#[tokio::test]
async fn the_rest_of_a_handshakes_body_is_not_read_as_frames() {
    use tokio::io::AsyncReadExt;
    let server = TestServer::start(ws!("/ws", Echo)).await;
    let frame = [0x81, 0x82, 0, 0, 0, 0, b'h', b'i'];
    let length = [b"Content-Length: 8\r\n\r\n".as_slice(), &frame].concat();
    let chunked = [
        b"Transfer-Encoding: chunked\r\n\r\n8\r\n".as_slice(),
        &frame,
        b"\r\n0\r\n\r\n",
    ]
    .concat();
    for rest in [length, chunked] {
        let (mut stream, head) = raw_handshake_ending(server.addr(), "HTTP/1.1", &rest).await;
        assert!(head.starts_with("HTTP/1.1 400 Bad Request\r\n"), "{head}");
        let body = "400 Bad Request: a WebSocket handshake has no body \
                    (no Transfer-Encoding, and no Content-Length but 0)";
        let mut got = vec![0_u8; body.len()];
        support::within(
            "the body",
            Duration::from_secs(5),
            stream.read_exact(&mut got),
        )
        .await
        .unwrap();
        assert_eq!(String::from_utf8_lossy(&got), body);
    }
    server.stop().await;
}

/// An application's own accept loop, with `handle_request_with_peer`, runs
/// WebSocket sessions as the crate's server does.
#[tokio::test]
async fn a_socket_opens_through_an_accept_loop_of_the_applications_own() {
    use hyper::server::conn::http1;
    use hyper::service::service_fn;
    use hyper_util::rt::TokioIo;

    let router = Arc::new(ws!("/ws", Echo));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let serving = tokio::spawn(async move {
        let (stream, peer) = listener.accept().await.unwrap();
        let service = service_fn(move |request| {
            let router = router.clone();
            async move {
                let answer = handle_request_with_peer(&router, request, peer).await;
                Ok::<_, std::convert::Infallible>(answer.into_http())
            }
        });
        let _ = http1::Builder::new()
            .serve_connection(TokioIo::new(stream), service)
            .with_upgrades()
            .await;
    });
    let mut client = connect(addr, "127.0.0.1", "/ws").await.unwrap();
    client.send(Message::text("hi")).await.unwrap();
    assert_eq!(next_text(&mut client).await, "127.0.0.1 hi");
    close(client).await;
    support::within("the accept loop", Duration::from_secs(5), serving)
        .await
        .unwrap();
}
