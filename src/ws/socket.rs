//! `WebSocket`: one upgraded connection, as a handler sees it.

use std::fmt;
use std::net::IpAddr;

use futures_util::{FutureExt, SinkExt, StreamExt};
use hyper::upgrade::Upgraded;
use hyper_util::rt::TokioIo;
use tokio::sync::{oneshot, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Error as TungsteniteError;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;

/// A WebSocket message: text, binary, ping, pong or close.
pub use tokio_tungstenite::tungstenite::Message;

/// A read or a write on a socket failed (the peer vanished, or broke the
/// protocol).
pub use tokio_tungstenite::tungstenite::Error as WebSocketError;

/// The framed stream over an upgraded hyper connection.
pub(super) type Stream = WebSocketStream<TokioIo<Upgraded>>;

/// An open WebSocket, owned by a [`WebSocketHandler`](super::WebSocketHandler).
///
/// Pings, and the peer's close, are answered for you while the handler
/// reads ([`WebSocket::recv`]): a handler that pushes messages of its own
/// reads beside them (a `tokio::select!` over `recv` and what it pushes),
/// or its peer's pings and close wait for its next read. When the socket
/// is dropped, the session completes the close handshake for it, so a
/// handler may simply return.
pub struct WebSocket {
    stream: Option<Stream>,
    // The server's shutdown flag; `true` closes the socket at the next
    // read.
    shutdown: Option<watch::Receiver<bool>>,
    // Once the flag is seen by a send: when sends stop going through.
    sends_end_at: Option<tokio::time::Instant>,
    // Once `close` sent the close frame: when reads stop waiting for the
    // peer's answer.
    reads_end_at: Option<tokio::time::Instant>,
    // Hands the stream back to the session when the socket drops, so the
    // close handshake can be completed after the handler is done with it.
    give_back: Option<oneshot::Sender<Stream>>,
    client_ip: Option<IpAddr>,
    path: String,
}

impl WebSocket {
    pub(super) fn new(
        stream: Stream,
        give_back: oneshot::Sender<Stream>,
        shutdown: Option<watch::Receiver<bool>>,
        client_ip: Option<IpAddr>,
        path: String,
    ) -> Self {
        Self {
            stream: Some(stream),
            shutdown,
            sends_end_at: None,
            reads_end_at: None,
            give_back: Some(give_back),
            client_ip,
            path,
        }
    }

    /// The next message from the peer; `None` once the peer has closed the
    /// socket (its close frame is answered for you before `recv` returns,
    /// within [`CLOSE_TIMEOUT`](super::CLOSE_TIMEOUT)), the connection is
    /// gone, or the server is shutting down (the peer is then sent a close
    /// frame with code 1001, going away). Ping and pong frames are returned
    /// too. After [`WebSocket::close`], reads return the peer's last
    /// messages and then `None`, within
    /// [`CLOSE_TIMEOUT`](super::CLOSE_TIMEOUT) of the close frame, whether
    /// the peer answers it or not.
    pub async fn recv(&mut self) -> Option<Result<Message, WebSocketError>> {
        match self.reads_end_at {
            Some(end) => tokio::time::timeout_at(end, self.read())
                .await
                .unwrap_or(None),
            None => self.read().await,
        }
    }

    /// [`WebSocket::recv`] with no bound of its own.
    async fn read(&mut self) -> Option<Result<Message, WebSocketError>> {
        let stream = self.stream.as_mut()?;
        let next = match self.shutdown.as_mut() {
            Some(shutdown) => tokio::select! {
                // The flag first: once it is up, the read returns `None`.
                biased;
                () = shutting_down(shutdown) => {
                    going_away(stream).await;
                    return None;
                }
                next = stream.next() => next,
            },
            None => stream.next().await,
        };
        match next? {
            Ok(Message::Close(_)) => {
                // The read only queues the answer to the peer's close; it
                // goes out now, as soon as practical (RFC 6455, 5.5.1), not
                // when the socket drops, for at most CLOSE_TIMEOUT.
                let _ = tokio::time::timeout(super::CLOSE_TIMEOUT, stream.flush()).await;
                None
            }
            Ok(Message::Ping(payload)) => {
                // The read only queues the pong; it goes out now, as soon as
                // practical (RFC 6455, 5.5.2), not at the handler's next
                // read or send. One try: a peer that does not read its
                // pongs leaves them in the buffer, and the read goes on.
                let _ = stream.flush().now_or_never();
                Some(Ok(Message::Ping(payload)))
            }
            Err(TungsteniteError::ConnectionClosed | TungsteniteError::AlreadyClosed) => None,
            Err(error) => {
                // A peer that broke the protocol, or sent too much, is told
                // why, as RFC 6455 (7.4.1) asks.
                if let Some((code, reason)) = close_code_for(&error) {
                    let frame = CloseFrame {
                        code,
                        reason: reason.into(),
                    };
                    let _ =
                        tokio::time::timeout(super::CLOSE_TIMEOUT, stream.close(Some(frame))).await;
                }
                Some(Err(error))
            }
            other => Some(other),
        }
    }

    /// Sends `message`. Once the server shuts down, sends go through for
    /// [`CLOSE_TIMEOUT`](super::CLOSE_TIMEOUT) more (a send the peer takes
    /// is not lost to the shutdown); after it, a send still waiting, and
    /// every later one, fails with
    /// [`ConnectionClosed`](WebSocketError::ConnectionClosed), so that a
    /// handler that only writes ends too, whether its peer reads or not.
    ///
    /// A text or binary message over
    /// [`MAX_SEND_SIZE`](super::MAX_SEND_SIZE) fails with a
    /// [`Capacity`](WebSocketError::Capacity) error, and a ping or a pong
    /// over 125 bytes, a close reason over 123, or a close code no endpoint
    /// may send (1005, 1006, 1015, one under 1000), with a
    /// [`Protocol`](WebSocketError::Protocol) error (RFC 6455, 5.5 and
    /// 7.4): nothing is sent. A raw [`Message::Frame`] is not sent either:
    /// it fails with an [`Io`](WebSocketError::Io) error of kind
    /// [`Unsupported`](std::io::ErrorKind::Unsupported). A close frame sent
    /// bounds the reads after it as [`WebSocket::close`] does.
    pub async fn send(&mut self, message: impl Into<Message>) -> Result<(), WebSocketError> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(WebSocketError::AlreadyClosed);
        };
        let message = message.into();
        check_sendable(&message)?;
        if matches!(message, Message::Close(_)) {
            // As after `close`: reads wait for the peer's answer no longer
            // than the close timeout.
            self.reads_end_at
                .get_or_insert_with(|| tokio::time::Instant::now() + super::CLOSE_TIMEOUT);
        }
        let Some(shutdown) = self.shutdown.as_mut() else {
            return stream.send(message).await;
        };
        let sends_end_at = &mut self.sends_end_at;
        if sends_end_at.is_none() && *shutdown.borrow() {
            *sends_end_at = Some(tokio::time::Instant::now() + super::CLOSE_TIMEOUT);
        }
        if sends_end_at.is_some_and(|end| end <= tokio::time::Instant::now()) {
            // A timeout would still run a send that is ready.
            return Err(WebSocketError::ConnectionClosed);
        }
        let mut sending = std::pin::pin!(stream.send(message));
        if sends_end_at.is_none() {
            tokio::select! {
                // The send first: one that is ready goes through, whatever
                // the flag says.
                biased;
                sent = &mut sending => return sent,
                () = shutting_down(shutdown) => {
                    *sends_end_at = Some(tokio::time::Instant::now() + super::CLOSE_TIMEOUT);
                }
            }
        }
        let end = sends_end_at.unwrap_or_else(tokio::time::Instant::now);
        tokio::time::timeout_at(end, sending)
            .await
            .unwrap_or(Err(WebSocketError::ConnectionClosed))
    }

    /// Starts the close handshake: sends a close frame. Reading on after it
    /// returns the peer's last messages, then `None`.
    ///
    /// It waits at most [`CLOSE_TIMEOUT`](super::CLOSE_TIMEOUT) for the frame
    /// to go out, so a peer that does not read cannot hold it (or, at a
    /// shutdown, the server): past it, it fails with an
    /// [`Io`](WebSocketError::Io) error of kind
    /// [`TimedOut`](std::io::ErrorKind::TimedOut), and the connection ends
    /// when the socket drops.
    pub async fn close(&mut self) -> Result<(), WebSocketError> {
        let Some(stream) = self.stream.as_mut() else {
            return Err(WebSocketError::AlreadyClosed);
        };
        self.reads_end_at
            .get_or_insert_with(|| tokio::time::Instant::now() + super::CLOSE_TIMEOUT);
        tokio::time::timeout(super::CLOSE_TIMEOUT, stream.close(None))
            .await
            .unwrap_or_else(|_| {
                Err(WebSocketError::Io(std::io::Error::new(
                    std::io::ErrorKind::TimedOut,
                    "the peer did not take the close frame within the close timeout",
                )))
            })
    }

    /// The client address of the upgrade request
    /// ([`Request::ip_addr`](crate::Request::ip_addr)).
    pub fn client_ip(&self) -> Option<IpAddr> {
        self.client_ip
    }

    /// The path the socket was opened on.
    pub fn path(&self) -> &str {
        &self.path
    }
}

/// Whether `message` may go out: a data message of at most
/// [`MAX_SEND_SIZE`](super::MAX_SEND_SIZE), a control frame of at most 125
/// bytes, no raw frame.
fn check_sendable(message: &Message) -> Result<(), WebSocketError> {
    let too_long = |size: usize| {
        Err(WebSocketError::Capacity(CapacityError::MessageTooLong {
            size,
            max_size: super::MAX_SEND_SIZE,
        }))
    };
    match message {
        Message::Text(text) if text.len() > super::MAX_SEND_SIZE => too_long(text.len()),
        Message::Binary(bytes) if bytes.len() > super::MAX_SEND_SIZE => too_long(bytes.len()),
        Message::Ping(payload) | Message::Pong(payload) if payload.len() > 125 => {
            Err(WebSocketError::Protocol(ProtocolError::ControlFrameTooBig))
        }
        // The code's two bytes and the reason.
        Message::Close(Some(frame)) if frame.reason.len() > 123 => {
            Err(WebSocketError::Protocol(ProtocolError::ControlFrameTooBig))
        }
        // 1005, 1006 and 1015 only report what happened, and codes under
        // 1000 or reserved are no endpoint's to send (RFC 6455, 7.4).
        Message::Close(Some(frame)) if !frame.code.is_allowed() => Err(WebSocketError::Protocol(
            ProtocolError::InvalidCloseSequence,
        )),
        // A raw frame would go out as written, past every check above and
        // the protocol's others (reserved bits, a mask, a control frame in
        // pieces, a continuation of nothing): only messages are sent.
        Message::Frame(_) => Err(WebSocketError::Io(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            "a raw frame is not sent: send a text, binary, ping, pong or close message",
        ))),
        _ => Ok(()),
    }
}

/// Sends the peer a close frame with code 1001, going away, for at most
/// [`CLOSE_TIMEOUT`](super::CLOSE_TIMEOUT): a peer that does not read
/// cannot hold the shutdown.
async fn going_away(stream: &mut Stream) {
    let frame = going_away_frame();
    let _ = tokio::time::timeout(super::CLOSE_TIMEOUT, stream.close(Some(frame))).await;
}

/// The close frame of a socket the server closes as it shuts down: 1001,
/// going away.
pub(super) fn going_away_frame() -> CloseFrame {
    CloseFrame {
        code: CloseCode::Away,
        reason: "the server is shutting down".into(),
    }
}

/// The close code for a read that failed because of the peer: 1002 for a
/// protocol error, 1009 for a message or a frame over the size, 1007 for
/// text that is not UTF-8. `None` when the connection itself failed.
fn close_code_for(error: &WebSocketError) -> Option<(CloseCode, &'static str)> {
    match error {
        TungsteniteError::Protocol(_) => Some((CloseCode::Protocol, "protocol error")),
        TungsteniteError::Capacity(_) => Some((CloseCode::Size, "message too big")),
        TungsteniteError::Utf8(_) => Some((CloseCode::Invalid, "text that is not UTF-8")),
        _ => None,
    }
}

/// Resolves once the server's flag says it is shutting down; never, when
/// the server is gone without saying so.
async fn shutting_down(shutdown: &mut watch::Receiver<bool>) {
    loop {
        let down = *shutdown.borrow_and_update();
        if down {
            return;
        }
        if shutdown.changed().await.is_err() {
            return std::future::pending().await;
        }
    }
}

impl Drop for WebSocket {
    fn drop(&mut self) {
        if let (Some(stream), Some(give_back)) = (self.stream.take(), self.give_back.take()) {
            // The session may be gone already (its task was cancelled); the
            // stream then just closes with it.
            let _ = give_back.send(stream);
        }
    }
}

impl fmt::Debug for WebSocket {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("WebSocket")
            .field("client_ip", &self.client_ip)
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}
