//! The WebSocket route: answer the handshake, then run the session in a
//! task of its own.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures_util::{FutureExt, StreamExt};
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::{oneshot, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};

use super::handshake::accept_key;
use super::socket::{Stream, going_away_frame};
use super::{Sessions, WebSocket, WebSocketHandler};
use crate::container::App;
use crate::{HttpResponse, Request, Router};

/// How long the session waits for the peer to answer its close frame after
/// the handler is done, before it drops the connection anyway.
pub const CLOSE_TIMEOUT: Duration = Duration::from_secs(5);

/// The largest message a socket of [`route`] reads: 1 MiB. A
/// larger one ends the read with an error and closes the socket with code
/// 1009, message too big, so that one socket cannot make the server hold
/// more. [`route_with_max_message_size`] sets another.
pub const MAX_MESSAGE_SIZE: usize = 1 << 20;

/// The largest message a socket sends: 16 MiB. What the server writes to a
/// socket waits in a buffer while the peer does not read, up to this much
/// beyond the 128 KiB it gathers before writing; past it a send fails (and
/// an answer to a ping replaces the one before), so a peer that sends pings
/// and never reads cannot grow the server's memory past it.
pub const MAX_SEND_SIZE: usize = 16 << 20;

/// The largest control frame (ping, pong, close) there is: RFC 6455, 5.5.
const MAX_CONTROL_FRAME: usize = 125;

/// The largest frame a socket reads, whatever its message limit: the
/// reader sets aside a frame's whole announced length when its header
/// comes, so a larger limit would let a 14-byte header make the server
/// hold (or fail to allocate, and abort) that much. A larger message comes
/// in several frames.
const MAX_FRAME_SIZE: usize = 16 << 20;

/// What a socket gathers before it writes to the connection.
const WRITE_BUFFER_SIZE: usize = 128 * 1024;

/// A [`Router`] with one `GET` route at `path` that upgrades to a WebSocket
/// and runs `handler` on it; the function behind [`ws!`](crate::ws!).
pub fn route<H: WebSocketHandler>(path: &str, handler: H) -> Router {
    route_with_max_message_size(path, handler, MAX_MESSAGE_SIZE)
}

/// [`route`], whose sockets read messages of up to `bytes` rather than
/// [`MAX_MESSAGE_SIZE`]. A frame is refused as soon as its header says it
/// is larger than `bytes` (or than 16 MiB, whatever `bytes` is: a larger
/// message comes in several frames), or than 126 bytes when `bytes` is
/// smaller: a route that reads small messages (or none, with 0) still
/// answers pings and takes the peer's close, and a control frame over 125
/// bytes is a protocol error (1002) on every route.
///
/// ```
/// use suprnova::ws::{WebSocket, WebSocketHandler, route_with_max_message_size};
/// use suprnova::async_trait;
///
/// struct Upload;
///
/// #[async_trait]
/// impl WebSocketHandler for Upload {
///     async fn on_socket(&self, mut socket: WebSocket) {
///         while let Some(Ok(_chunk)) = socket.recv().await {}
///     }
/// }
///
/// let router = route_with_max_message_size("/ws/upload", Upload, 8 << 20);
/// assert_eq!(router.routes()[0].path, "/ws/upload");
/// ```
pub fn route_with_max_message_size<H: WebSocketHandler>(
    path: &str,
    handler: H,
    bytes: usize,
) -> Router {
    let handler = Arc::new(handler);
    let config = WebSocketConfig::default()
        .write_buffer_size(WRITE_BUFFER_SIZE)
        .max_write_buffer_size(WRITE_BUFFER_SIZE + MAX_SEND_SIZE)
        .max_message_size(Some(bytes))
        // A frame as large as the message, or a control frame's 125 bytes
        // (a ping, or the peer's close), whichever is larger: a route that
        // reads small messages still answers pings and takes a close.
        // A frame of 126 bytes or more is read up to its kind, so that a
        // control frame that large is the protocol error it is (1002).
        .max_frame_size(Some(bytes.clamp(MAX_CONTROL_FRAME + 1, MAX_FRAME_SIZE)));
    Router::new().get(path, move |request: Request| {
        upgrade(handler.clone(), request, config)
    })
}

/// `ws!("/path", Handler)`: a [`Router`] with one WebSocket route.
///
/// Add middleware with `.middleware(...)` and mount it with
/// [`Router::merge`]; see [`ws`](mod@crate::ws).
///
/// ```
/// use suprnova::rate_limit::RateLimitMiddleware;
/// use suprnova::ws;
/// use suprnova::ws::{WebSocket, WebSocketHandler};
/// use suprnova::async_trait;
///
/// struct Broadcast;
///
/// #[async_trait]
/// impl WebSocketHandler for Broadcast {
///     async fn on_socket(&self, mut socket: WebSocket) {
///         let _ = socket.send("welcome").await;
///     }
/// }
///
/// let router = ws!("/ws/broadcast", Broadcast).middleware(RateLimitMiddleware::connections_per_ip(100));
/// assert_eq!(router.routes()[0].path, "/ws/broadcast");
/// ```
#[macro_export]
macro_rules! ws {
    ($path:expr, $handler:expr $(,)?) => {
        $crate::ws::route($path, $handler)
    };
}

async fn upgrade<H: WebSocketHandler>(
    handler: Arc<H>,
    mut request: Request,
    config: WebSocketConfig,
) -> HttpResponse {
    let accept = match accept_key(&request) {
        Ok(accept) => accept,
        Err(refusal) => return refusal,
    };
    let Some(on_upgrade) = request.extensions_mut().remove::<OnUpgrade>() else {
        tracing::error!(
            path = request.path(),
            "a WebSocket handshake arrived without a connection to upgrade; serve the router with suprnova::server"
        );
        return HttpResponse::internal_server_error();
    };
    // Joined before the flag is read: a shutdown that raises the flag after
    // this read finds the session joined and waits for it; one that raised
    // it before is seen here, and the handshake is refused, as the server
    // may have stopped waiting for its sessions already.
    let shutdown = Sessions::join_current();
    if shutdown.as_ref().is_some_and(|flag| *flag.borrow()) {
        return HttpResponse::text(
            "503 Service Unavailable: the server is shutting down; open the WebSocket again later",
        )
        .status(503);
    }
    let holds = request.take_connection_holds();
    let client_ip = request.ip_addr();
    let path = request.path().to_owned();
    // The request (its body, its headers) is not needed by the session; only
    // its holds are, and they moved out above.
    drop(request);
    let app = App::current();
    let (start, confirmed) = oneshot::channel();
    let session = Session {
        handler,
        on_upgrade,
        config,
        shutdown,
        client_ip,
        path,
    };
    tokio::spawn(app.scope(run_session(session, confirmed)));
    let mut switching = HttpResponse::new()
        .status(101)
        .header("Upgrade", "websocket")
        .header("Connection", "Upgrade")
        .header("Sec-WebSocket-Accept", accept);
    switching
        .extensions_mut()
        .insert(UpgradeTicket(Arc::new(Mutex::new(Some(Ticket {
            start,
            holds,
        })))));
    switching
}

/// What a request held for its connection
/// ([`Request::hold_for_connection`]).
type Holds = Vec<Box<dyn Any + Send + Sync>>;

/// Rides on a route's `101`: the server confirms it when the `101` is the
/// answer it sends ([`confirm_upgrade`]), which hands the session the
/// request's holds and lets it start. A middleware that answers otherwise
/// drops the `101`, and with it the ticket and the holds, there and then
/// (a place of [`ConnectionsPerIp`](crate::rate_limit::ConnectionsPerIp)
/// is free when the refusal leaves the chain), and the session ends.
/// (Extensions hold only what can be cloned: the clones share the one
/// ticket, which goes when the last of them does.)
#[derive(Clone)]
pub(crate) struct UpgradeTicket(Arc<Mutex<Option<Ticket>>>);

/// The session's start and the holds it runs with.
struct Ticket {
    start: oneshot::Sender<Holds>,
    holds: Holds,
}

/// Whether `response` is a WebSocket route's `101`, which carries the
/// ticket of its session (a handler's answer that [`confirm_upgrade`] may
/// confirm later), without taking the ticket.
pub(crate) fn carries_upgrade(response: &HttpResponse) -> bool {
    response.status_code() == 101 && response.extensions().get::<UpgradeTicket>().is_some()
}

/// Lets the session of a WebSocket `response` start, when `response` is the
/// `101` that carries its ticket; whether it was.
pub(crate) fn confirm_upgrade(response: &mut HttpResponse) -> bool {
    if response.status_code() == 101
        && let Some(UpgradeTicket(ticket)) = response.extensions_mut().remove::<UpgradeTicket>()
        && let Some(ticket) = ticket.lock().unwrap_or_else(|e| e.into_inner()).take()
    {
        // A session that is gone (its task cancelled) sends the holds back,
        // and they drop here.
        let _ = ticket.start.send(ticket.holds);
        return true;
    }
    false
}

/// What a session runs with.
struct Session<H> {
    handler: Arc<H>,
    on_upgrade: OnUpgrade,
    config: WebSocketConfig,
    shutdown: Option<watch::Receiver<bool>>,
    client_ip: Option<std::net::IpAddr>,
    path: String,
}

/// One socket's session, once the server confirmed its `101` went out.
/// Its holds live exactly as long as it does, and so does its `shutdown`,
/// the server's flag, by which the server knows it is over.
async fn run_session<H: WebSocketHandler>(
    session: Session<H>,
    confirmed: oneshot::Receiver<Holds>,
) {
    let path = session.path.as_str();
    let Ok(holds) = confirmed.await else {
        // A later middleware answered instead of the 101, and its holds
        // went with the 101.
        tracing::debug!(path, "WebSocket upgrade refused after the route answered");
        return;
    };
    let upgraded = match session.on_upgrade.await {
        Ok(upgraded) => upgraded,
        Err(error) => {
            // The 101 never reached the client (the client left): there is
            // no session, and the holds go.
            tracing::debug!(%error, path, "WebSocket upgrade did not happen");
            return;
        }
    };
    let raw = TokioIo::new(upgraded);
    let stream = WebSocketStream::from_raw_socket(raw, Role::Server, Some(session.config)).await;
    let (give_back, given_back) = oneshot::channel();
    let socket = WebSocket::new(
        stream,
        give_back,
        session.shutdown.clone(),
        session.client_ip,
        path.to_owned(),
    );
    let panicked = AssertUnwindSafe(session.handler.on_socket(socket))
        .catch_unwind()
        .await
        .is_err();
    if panicked {
        tracing::error!(path, "a WebSocket handler panicked; closing its socket");
    }
    // The socket comes back when it is dropped, which may be later than the
    // handler's return if the handler moved it into a task of its own.
    if let Ok(stream) = given_back.await {
        let away = session.shutdown.as_ref().is_some_and(|flag| *flag.borrow());
        finish_close(stream, panicked, away).await;
    }
    // Held until here: the holds and the server's flag end with the session.
    drop(holds);
    drop(session.shutdown);
}

/// Completes the close handshake: sends our close frame (or flushes the
/// answer to the peer's), then reads until the peer's close arrives or the
/// connection ends, for at most [`CLOSE_TIMEOUT`]. The frame has no code
/// after a handler that returned, 1011 (internal error, RFC 6455 7.4.1)
/// after one that panicked, and 1001 (going away) after one that returned
/// while the server shuts down.
async fn finish_close(mut stream: Stream, panicked: bool, away: bool) {
    let frame = if panicked {
        Some(CloseFrame {
            code: CloseCode::Error,
            reason: "internal error".into(),
        })
    } else if away {
        Some(going_away_frame())
    } else {
        None
    };
    let closing = async {
        // After the peer's close this fails (tungstenite sends nothing after
        // a close frame), and the read below flushes the queued answer.
        let _ = stream.close(frame).await;
        while let Some(Ok(_)) = stream.next().await {}
    };
    if tokio::time::timeout(CLOSE_TIMEOUT, closing).await.is_err() {
        tracing::debug!("the peer did not complete the WebSocket close handshake in time");
    }
}
