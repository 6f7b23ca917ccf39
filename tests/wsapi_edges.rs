//! The socket a WebSocket handler owns, through the real server on
//! loopback: what `recv` and `send` return at the ends of a session, the
//! size a send may have, pings, the codes of the close frames, the counts
//! of `connections_per_ip` after abrupt disconnects, and a shutdown.

mod support;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use suprnova::rate_limit::RateLimitMiddleware;
use suprnova::ws::{CLOSE_TIMEOUT, MAX_SEND_SIZE, Message, WebSocket, WebSocketHandler};
use suprnova::{async_trait, ws};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

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

/// Writes a tick every 20 ms until a send fails; never reads.
struct Ticker;

#[async_trait]
impl WebSocketHandler for Ticker {
    async fn on_socket(&self, mut socket: WebSocket) {
        while socket.send("tick").await.is_ok() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// Pushes a tick every 20 ms and reads beside it, as the socket's docs
/// ask of a handler that pushes: its peer's pings and close are answered.
struct ReadingTicker;

#[async_trait]
impl WebSocketHandler for ReadingTicker {
    async fn on_socket(&self, mut socket: WebSocket) {
        loop {
            tokio::select! {
                read = socket.recv() => if read.is_none() { return },
                () = tokio::time::sleep(Duration::from_millis(20)) => {
                    if socket.send("tick").await.is_err() {
                        return;
                    }
                }
            }
        }
    }
}

/// Reports every read until `None`, then one more read, then the result of
/// a send.
struct Recorder(mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for Recorder {
    async fn on_socket(&self, mut socket: WebSocket) {
        loop {
            let read = socket.recv().await;
            let ended = read.is_none();
            let _ = self.0.send(describe(read));
            if ended {
                break;
            }
        }
        let _ = self.0.send(describe(socket.recv().await));
        let _ = self.0.send(sent(socket.send("late").await));
    }
}

/// Sends its message once, reports whether the send went through, then
/// reads until the end.
struct SendOnce(Message, mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for SendOnce {
    async fn on_socket(&self, mut socket: WebSocket) {
        let _ = self.1.send(sent(socket.send(self.0.clone()).await));
        while let Some(Ok(_)) = socket.recv().await {}
    }
}

/// Starts the close handshake itself, then reports every read until `None`.
struct CloseThenRead(mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for CloseThenRead {
    async fn on_socket(&self, mut socket: WebSocket) {
        let _ = self.0.send(sent(socket.close().await));
        loop {
            let read = socket.recv().await;
            let ended = read.is_none();
            let _ = self.0.send(describe(read));
            if ended {
                break;
            }
        }
    }
}

fn sent<E: std::fmt::Display>(result: Result<(), E>) -> String {
    match result {
        Ok(()) => "sent".to_owned(),
        Err(error) => format!("send error: {error}"),
    }
}

fn describe<E: std::fmt::Display>(read: Option<Result<Message, E>>) -> String {
    match read {
        None => "none".to_owned(),
        Some(Err(error)) => format!("error: {error}"),
        Some(Ok(Message::Text(text))) => format!("text {}", text.as_str()),
        Some(Ok(Message::Binary(bytes))) => format!("binary {}", bytes.len()),
        Some(Ok(Message::Ping(bytes))) => format!("ping {}", bytes.len()),
        Some(Ok(Message::Pong(bytes))) => format!("pong {}", bytes.len()),
        Some(Ok(Message::Close(frame))) => format!("close {frame:?}"),
        Some(Ok(Message::Frame(_))) => "frame".to_owned(),
    }
}

// ---- a raw client -----------------------------------------------------------

/// The code of the server's next close frame, skipping other frames.
async fn close_code(stream: &mut TcpStream) -> Option<u16> {
    within("a close frame", Duration::from_secs(10), async {
        loop {
            let (_, opcode, payload) = read_frame(stream).await.expect("no close frame");
            if opcode == CLOSE {
                return payload.get(..2).map(|c| u16::from_be_bytes([c[0], c[1]]));
            }
        }
    })
    .await
}

type Client = WebSocketStream<TcpStream>;

/// A real client on `path`, taking messages and frames of any size.
async fn connect(server: SocketAddr, path: &str) -> Client {
    let stream = TcpStream::connect(server).await.unwrap();
    let config = WebSocketConfig::default()
        .max_message_size(None)
        .max_frame_size(None);
    let (client, _) = within(
        "the handshake",
        Duration::from_secs(5),
        tokio_tungstenite::client_async_with_config(
            format!("ws://{server}{path}"),
            stream,
            Some(config),
        ),
    )
    .await
    .unwrap();
    client
}

// ---- recv and send at the ends of a session ------------------------------------

/// A frame that breaks the protocol (an unmasked one) is read once as an
/// error, the peer gets 1002, and the stream has ended: the next read is
/// `None`, and so is one after it, and a send fails rather than hangs.
#[tokio::test]
async fn after_a_protocol_error_recv_returns_none_and_a_send_fails() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let server = TestServer::start(ws!("/ws", Recorder(tx))).await;
    let mut stream = open(server.addr()).await;
    // An unmasked text frame.
    stream.write_all(&[0x81, 0x02, b'h', b'i']).await.unwrap();
    assert_eq!(close_code(&mut stream).await, Some(1002));
    let first = next_report(&mut reports).await;
    assert!(
        first.starts_with("error: WebSocket protocol error"),
        "{first}"
    );
    assert_eq!(next_report(&mut reports).await, "none");
    assert_eq!(next_report(&mut reports).await, "none");
    let late = next_report(&mut reports).await;
    assert!(late.starts_with("send error"), "{late}");
    server.stop().await;
}

/// The peer's close: answered with its code, `recv` returns `None` (and
/// again `None`), and a send after it fails.
#[tokio::test]
async fn after_the_peers_close_recv_keeps_returning_none_and_a_send_fails() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let server = TestServer::start(ws!("/ws", Recorder(tx))).await;
    let mut stream = open(server.addr()).await;
    stream.write_all(&masked(true, TEXT, b"one")).await.unwrap();
    assert_eq!(next_report(&mut reports).await, "text one");
    stream
        .write_all(&masked(true, CLOSE, &4000_u16.to_be_bytes()))
        .await
        .unwrap();
    assert_eq!(close_code(&mut stream).await, Some(4000));
    assert_eq!(next_report(&mut reports).await, "none");
    assert_eq!(next_report(&mut reports).await, "none");
    let late = next_report(&mut reports).await;
    assert!(late.starts_with("send error"), "{late}");
    // Nothing follows the close: the server ends the connection.
    let end = within("the end", Duration::from_secs(5), read_frame(&mut stream)).await;
    assert_eq!(end, None);
    server.stop().await;
}

/// `close` sends a close frame; reading on returns what the peer sent
/// before its answer, then `None`.
#[tokio::test]
async fn after_close_recv_returns_the_peers_last_messages_then_none() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let server = TestServer::start(ws!("/ws", CloseThenRead(tx))).await;
    let mut stream = open(server.addr()).await;
    assert_eq!(close_code(&mut stream).await, None);
    assert_eq!(next_report(&mut reports).await, "sent");
    stream
        .write_all(&masked(true, TEXT, b"last"))
        .await
        .unwrap();
    stream.write_all(&masked(true, CLOSE, &[])).await.unwrap();
    assert_eq!(next_report(&mut reports).await, "text last");
    assert_eq!(next_report(&mut reports).await, "none");
    let end = within("the end", Duration::from_secs(5), read_frame(&mut stream)).await;
    assert_eq!(end, None);
    server.stop().await;
}

// ---- what a send may send ----------------------------------------------------------

/// A message of exactly `MAX_SEND_SIZE` goes through whole.
#[tokio::test]
async fn a_send_of_exactly_max_send_size_arrives_whole() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let message = Message::binary(vec![5_u8; MAX_SEND_SIZE]);
    let server = TestServer::start(ws!("/ws", SendOnce(message, tx))).await;
    let mut client = connect(server.addr(), "/ws").await;
    let got = within("the message", Duration::from_secs(20), client.next()).await;
    match got {
        Some(Ok(Message::Binary(bytes))) => assert_eq!(bytes.len(), MAX_SEND_SIZE),
        other => panic!("expected the message, got {other:?}"),
    }
    assert_eq!(next_report(&mut reports).await, "sent");
    drop(client);
    server.stop().await;
}

/// `MAX_SEND_SIZE` is "the largest message a socket sends": one byte more
/// is refused by the send.
#[tokio::test]
async fn a_send_one_byte_over_max_send_size_fails() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let message = Message::binary(vec![5_u8; MAX_SEND_SIZE + 1]);
    let server = TestServer::start(ws!("/ws", SendOnce(message, tx))).await;
    let mut client = connect(server.addr(), "/ws").await;
    let reader = tokio::spawn(async move {
        let got = tokio::time::timeout(Duration::from_secs(20), client.next()).await;
        drop(client);
        got.ok().flatten().and_then(Result::ok).map(|m| m.len())
    });
    let report = next_report(&mut reports).await;
    let received = reader.await.unwrap();
    assert!(
        report.starts_with("send error"),
        "the send reported {report:?}; the client got {received:?} bytes"
    );
    server.stop().await;
}

/// RFC 6455, 5.5: a control frame carries at most 125 bytes. A ping of
/// 200 bytes is refused by the send, rather than written as a frame that
/// makes every conforming peer fail the connection.
#[tokio::test]
async fn a_ping_over_125_bytes_is_refused_by_send() {
    let (report, on_the_wire) = sent_once(Message::Ping(vec![7_u8; 200].into())).await;
    assert!(
        report.starts_with("send error"),
        "the send reported {report:?}; the peer read {on_the_wire:?}"
    );
}

/// What a handler's one `send` of `message` reported, and the opcode and
/// length of the first frame its raw peer then read, having sent a close.
async fn sent_once(message: Message) -> (String, Option<(u8, usize)>) {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let server = TestServer::start(ws!("/ws", SendOnce(message, tx))).await;
    let mut stream = open(server.addr()).await;
    let report = next_report(&mut reports).await;
    stream.write_all(&masked(true, CLOSE, &[])).await.unwrap();
    let first = within("a frame", Duration::from_secs(5), read_frame(&mut stream)).await;
    server.stop().await;
    (
        report,
        first.map(|(_, opcode, payload)| (opcode, payload.len())),
    )
}

/// A raw frame would go out past the checks a message gets: `send`
/// refuses it, and the peer reads nothing before the close.
#[tokio::test]
async fn a_raw_frame_is_refused_by_send() {
    let (report, on_the_wire) = sent_once(Message::Frame(Frame::ping(vec![7_u8; 200]))).await;
    assert!(
        report.starts_with("send error") && report.contains("raw frame is not sent"),
        "the send reported {report:?}; the peer read {on_the_wire:?}"
    );
    assert_eq!(on_the_wire.map(|(opcode, _)| opcode), Some(CLOSE));
}

// ---- pings ------------------------------------------------------------------

/// "Pings are answered for you while the handler reads": a handler that
/// pushes updates and reads beside them has its peer's pings answered.
#[tokio::test]
async fn a_ping_is_answered_while_the_handler_pushes_and_reads() {
    let server = TestServer::start(ws!("/ws", ReadingTicker)).await;
    let mut stream = open(server.addr()).await;
    let (_, opcode, _) = within("a tick", Duration::from_secs(5), read_frame(&mut stream))
        .await
        .unwrap();
    assert_eq!(opcode, TEXT);
    stream
        .write_all(&masked(true, PING, b"alive?"))
        .await
        .unwrap();
    let pong = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some((_, opcode, payload)) = read_frame(&mut stream).await {
            if opcode == PONG {
                return Some(payload);
            }
        }
        None
    })
    .await;
    assert_eq!(pong, Ok(Some(b"alive?".to_vec())), "no pong within 2 s");
    drop(stream);
    server.stop().await;
}

// ---- connections_per_ip after abrupt disconnects ----------------------------------

/// Of six sockets from one address, two reset (RST), two closed without a
/// close frame (FIN): once their reads fail, the count is exactly the two
/// left, which still work.
#[tokio::test]
async fn abrupt_disconnects_give_back_exactly_their_places() {
    let cap = RateLimitMiddleware::connections_per_ip(10);
    let server = TestServer::start(ws!("/ws", Echo).middleware(cap.clone())).await;
    let mut streams = Vec::new();
    for _ in 0..6 {
        streams.push(open(server.addr()).await);
    }
    wait_open(&cap, 6).await;
    let mut kept: Vec<TcpStream> = streams.drain(..2).collect();
    for (i, stream) in streams.into_iter().enumerate() {
        if i % 2 == 0 {
            #[allow(deprecated)]
            stream.set_linger(Some(Duration::ZERO)).unwrap();
        }
        drop(stream);
    }
    wait_open(&cap, 2).await;
    for stream in &mut kept {
        stream
            .write_all(&masked(true, TEXT, b"still"))
            .await
            .unwrap();
        let back = within("the echo", Duration::from_secs(5), read_frame(stream)).await;
        assert_eq!(back, Some((true, TEXT, b"still".to_vec())));
    }
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 2);
    drop(kept);
    wait_open(&cap, 0).await;
    server.stop().await;
}

/// A handler that only writes notices a peer that reset its connection
/// when a send fails, and the place is given back.
#[tokio::test]
async fn a_writing_handler_gives_back_the_place_of_a_reset_peer() {
    let cap = RateLimitMiddleware::connections_per_ip(10);
    let server = TestServer::start(ws!("/ws", Ticker).middleware(cap.clone())).await;
    let mut stream = open(server.addr()).await;
    within("a tick", Duration::from_secs(5), read_frame(&mut stream))
        .await
        .unwrap();
    wait_open(&cap, 1).await;
    #[allow(deprecated)]
    stream.set_linger(Some(Duration::ZERO)).unwrap();
    drop(stream);
    wait_open(&cap, 0).await;
    server.stop().await;
}

// ---- shutdown ------------------------------------------------------------------

/// A shutdown while the peer is in the middle of a fragmented message: the
/// handler waiting for the rest is ended, the peer is told 1001, and the
/// place is given back within a close timeout.
#[tokio::test]
async fn a_shutdown_mid_message_tells_the_peer_1001() {
    let cap = RateLimitMiddleware::connections_per_ip(10);
    let server = TestServer::start(ws!("/ws", Echo).middleware(cap.clone())).await;
    let mut stream = open(server.addr()).await;
    wait_open(&cap, 1).await;
    stream
        .write_all(&masked(false, TEXT, b"half"))
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(100)).await;
    let started = Instant::now();
    let stopping = tokio::spawn(server.stop());
    assert_eq!(close_code(&mut stream).await, Some(1001));
    stream.write_all(&masked(true, CLOSE, &[])).await.unwrap();
    within("the shutdown", Duration::from_secs(20), stopping)
        .await
        .unwrap();
    assert!(started.elapsed() < CLOSE_TIMEOUT, "{:?}", started.elapsed());
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 0);
}

/// "At a shutdown every open socket is sent a close frame with code 1001
/// (going away)": a socket whose handler only writes too.
#[tokio::test]
async fn a_shutdown_tells_a_socket_whose_handler_only_writes_1001() {
    let server = TestServer::start(ws!("/ws", Ticker)).await;
    let mut client = connect(server.addr(), "/ws").await;
    let reader = tokio::spawn(async move {
        let mut close = None;
        while let Some(Ok(message)) = client.next().await {
            if let Message::Close(frame) = message {
                close = Some(frame.map(|f| f.code));
            }
        }
        close
    });
    tokio::time::sleep(Duration::from_millis(100)).await;
    within("the shutdown", Duration::from_secs(20), server.stop()).await;
    let close = within("the reader", Duration::from_secs(5), reader)
        .await
        .unwrap();
    assert_eq!(close, Some(Some(CloseCode::Away)));
}

/// RFC 6455, 5.5.1: an endpoint that receives a close frame must answer
/// it. A handler that pushes and reads beside it has its peer's close
/// answered, and the session (and its place) ends instead of pushing on.
#[tokio::test]
async fn a_peers_close_is_answered_while_the_handler_pushes_and_reads() {
    let cap = RateLimitMiddleware::connections_per_ip(10);
    let server = TestServer::start(ws!("/ws", ReadingTicker).middleware(cap.clone())).await;
    let mut stream = open(server.addr()).await;
    within("a tick", Duration::from_secs(5), read_frame(&mut stream))
        .await
        .unwrap();
    stream
        .write_all(&masked(true, CLOSE, &1000_u16.to_be_bytes()))
        .await
        .unwrap();
    let answer = tokio::time::timeout(Duration::from_secs(2), async {
        while let Some((_, opcode, payload)) = read_frame(&mut stream).await {
            if opcode == CLOSE {
                return Some(payload);
            }
        }
        None
    })
    .await;
    assert_eq!(
        answer,
        Ok(Some(1000_u16.to_be_bytes().to_vec())),
        "no close came back within 2 s; places held: {}",
        cap.open_for("127.0.0.1".parse().unwrap())
    );
    drop(stream);
    server.stop().await;
}

/// Sends a close frame, then reads until `None`, and reports when it got
/// there.
struct CloseThenWait(mpsc::UnboundedSender<String>);

#[async_trait]
impl WebSocketHandler for CloseThenWait {
    async fn on_socket(&self, mut socket: WebSocket) {
        let _ = socket.close().await;
        while let Some(Ok(_)) = socket.recv().await {}
        let _ = self.0.send("ended".to_owned());
    }
}

/// Every close waits at most `CLOSE_TIMEOUT` for the peer: after `close`,
/// a read on a peer that takes the close frame but never answers it ends
/// (with `None`) once that timeout has passed, rather than holding the
/// socket, and its place, for as long as the peer stays.
#[tokio::test]
async fn after_close_a_read_on_a_peer_that_never_answers_ends_within_the_close_timeout() {
    let (tx, mut reports) = mpsc::unbounded_channel();
    let server = TestServer::start(ws!("/ws", CloseThenWait(tx))).await;
    let mut stream = open(server.addr()).await;
    assert_eq!(close_code(&mut stream).await, None);
    let ended = tokio::time::timeout(CLOSE_TIMEOUT + Duration::from_secs(3), reports.recv()).await;
    assert_eq!(ended, Ok(Some("ended".to_owned())));
    drop(stream);
    server.stop().await;
}

/// Hands the socket to a task of its own, which echoes until the end.
struct EchoInTask;

#[async_trait]
impl WebSocketHandler for EchoInTask {
    async fn on_socket(&self, socket: WebSocket) {
        tokio::spawn(Echo.on_socket(socket));
    }
}

/// A socket moved into a task of the handler's: its reads still see the
/// shutdown, the peer is told 1001, and the place is given back.
#[tokio::test]
async fn a_shutdown_reaches_a_socket_moved_into_a_task() {
    let cap = RateLimitMiddleware::connections_per_ip(10);
    let server = TestServer::start(ws!("/ws", EchoInTask).middleware(cap.clone())).await;
    let mut stream = open(server.addr()).await;
    stream
        .write_all(&masked(true, TEXT, b"moved"))
        .await
        .unwrap();
    let back = within("the echo", Duration::from_secs(5), read_frame(&mut stream)).await;
    assert_eq!(back, Some((true, TEXT, b"moved".to_vec())));
    wait_open(&cap, 1).await;
    let stopping = tokio::spawn(server.stop());
    assert_eq!(close_code(&mut stream).await, Some(1001));
    stream.write_all(&masked(true, CLOSE, &[])).await.unwrap();
    within("the shutdown", Duration::from_secs(20), stopping)
        .await
        .unwrap();
    assert_eq!(cap.open_for("127.0.0.1".parse().unwrap()), 0);
}

/// Set in the process that runs the server of the next test.
const CHILD: &str = "SUPRNOVA_UNBOUNDED_ROUTE_CHILD";

/// A route with no practical limit (`route_with_max_message_size` of
/// `usize::MAX`) holds what a peer actually sends, not what a frame header
/// announces: one header announcing a frame of 1 PiB, with no payload, does
/// not end the process, and the route goes on serving sockets. The server
/// runs in a child process, so that a process that ends shows as its exit
/// status.
#[tokio::test]
async fn a_frame_header_alone_cannot_end_the_process_of_a_route_without_a_limit() {
    if std::env::var_os(CHILD).is_none() {
        let child = tokio::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "a_frame_header_alone_cannot_end_the_process_of_a_route_without_a_limit",
                "--nocapture",
            ])
            .env(CHILD, "1")
            .kill_on_drop(true)
            .output();
        let output = within("the child", Duration::from_secs(60), child)
            .await
            .unwrap();
        assert!(
            output.status.success(),
            "the process ended with {}: {}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        return;
    }
    let route = suprnova::ws::route_with_max_message_size("/ws", Echo, usize::MAX);
    let server = TestServer::start(route).await;
    let mut greedy = open(server.addr()).await;
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(1_u64 << 50).to_be_bytes());
    header.extend_from_slice(&[1, 2, 3, 4]);
    greedy.write_all(&header).await.unwrap();
    tokio::time::sleep(Duration::from_millis(500)).await;
    let mut next = open(server.addr()).await;
    next.write_all(&masked(true, TEXT, b"alive")).await.unwrap();
    let back = within("the echo", Duration::from_secs(5), read_frame(&mut next)).await;
    assert_eq!(back, Some((true, TEXT, b"alive".to_vec())));
    drop(greedy);
    drop(next);
    server.stop().await;
}
