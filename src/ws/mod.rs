//! WebSocket routes.
//!
//! `ws!("/path", Handler)` is a [`Router`](crate::Router) with one `GET`
//! route that upgrades the connection and runs `Handler` on the socket.
//! Middleware goes on it as on any router, and it merges into the
//! application's router:
//!
//! ```
//! use suprnova::rate_limit::RateLimitMiddleware;
//! use suprnova::ws::{Message, WebSocket, WebSocketHandler};
//! use suprnova::{async_trait, ws, HttpResponse, Router};
//!
//! /// Sends every text message back.
//! struct Echo;
//!
//! #[async_trait]
//! impl WebSocketHandler for Echo {
//!     async fn on_socket(&self, mut socket: WebSocket) {
//!         while let Some(Ok(message)) = socket.recv().await {
//!             if let Message::Text(text) = message {
//!                 if socket.send(Message::Text(text)).await.is_err() {
//!                     break;
//!                 }
//!             }
//!         }
//!     }
//! }
//!
//! let router = Router::new()
//!     .get("/", |_req| async { HttpResponse::text("home") })
//!     .merge(ws!("/ws/echo", Echo).middleware(RateLimitMiddleware::connections_per_ip(10)));
//! assert!(router.validate().is_ok());
//! ```
//!
//! # The session
//!
//! The route checks the handshake (`GET`, `Upgrade: websocket`,
//! `Connection: Upgrade`, `Sec-WebSocket-Version: 13`, a valid
//! `Sec-WebSocket-Key`) and answers `101 Switching Protocols`; a request that
//! is not a WebSocket handshake gets `426` or `400` with a body that says
//! what is missing. A `HEAD` gets what a `GET` without `Upgrade: websocket`
//! gets: `426` with the `Upgrade` headers. A handshake that announces a body
//! (a `Transfer-Encoding`, or a `Content-Length` other than 0) gets `400`:
//! the upgraded protocol starts after the whole request (RFC 9110, 7.8), so
//! the body would be read as WebSocket frames. The socket then runs in a
//! task of its own. Whatever the request held for its connection
//! ([`Request::hold_for_connection`], such as a
//! [`ConnectionsPerIp`](crate::rate_limit::ConnectionsPerIp) place) moves
//! into that task and is released when the session ends: when the handler
//! has returned, the [`WebSocket`] is dropped, and the close handshake is
//! done (or [`CLOSE_TIMEOUT`] has passed). A middleware that refuses the
//! upgrade drops the request, and its holds, at once.
//!
//! When the peer closes, [`WebSocket::recv`] answers its close frame and
//! returns `None`; pings are answered in it too, so a handler that pushes
//! messages of its own reads beside them (a `tokio::select!` over `recv`
//! and what it pushes).
//!
//! When the server shuts down, every open socket is told: its next
//! [`WebSocket::recv`] (or the one it is waiting in) sends the peer a close
//! frame with code 1001, going away, and returns `None`, so a handler that
//! reads its socket ends; [`WebSocket::send`] goes on for [`CLOSE_TIMEOUT`]
//! after the shutdown began and then fails, so a handler that only writes
//! ends too, and its socket is closed with 1001 as well. Each close
//! ([`WebSocket::close`], the answer to a peer's close, the 1001 and the
//! session's own) waits at most [`CLOSE_TIMEOUT`] for the
//! peer, shutdown or not. A handshake that reaches the route once the
//! shutdown has begun (one a slow middleware held, say) gets `503` and no
//! upgrade. The server waits for the sessions, within its
//! [`SHUTDOWN_GRACE`](crate::server::SHUTDOWN_GRACE).
//!
//! A socket reads messages of up to [`MAX_MESSAGE_SIZE`], 1 MiB
//! ([`route_with_max_message_size`] sets another): a larger one ends the
//! read with an error and closes the socket with code 1009, a frame that
//! breaks the protocol with 1002; a frame is at most 16 MiB whatever the
//! limit (a larger message comes in several frames). A socket sends
//! messages of up to [`MAX_SEND_SIZE`], 16 MiB (a larger one fails to
//! send), and what the server writes to a peer that does not read waits in
//! a buffer of at most that and 128 KiB. A handshake over
//! HTTP/1.0 gets `400`.
//!
//! Upgrades need a connection: serve the router with
//! [`server`](crate::server). An in-process request
//! ([`handle_request`](crate::server::handle_request)) cannot be upgraded
//! and gets `500`.
//!
//! [`Request::hold_for_connection`]: crate::Request::hold_for_connection

mod handler;
mod handshake;
mod route;
mod sessions;
mod socket;

pub(crate) use route::{carries_upgrade, confirm_upgrade};
pub(crate) use sessions::Sessions;

pub use handler::WebSocketHandler;
pub use route::{
    CLOSE_TIMEOUT, MAX_MESSAGE_SIZE, MAX_SEND_SIZE, route, route_with_max_message_size,
};
pub use socket::{Message, WebSocket, WebSocketError};
