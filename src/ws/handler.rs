//! `WebSocketHandler`: what runs on an upgraded socket.

use async_trait::async_trait;

use super::WebSocket;

/// The code a WebSocket route runs on each socket it accepts.
///
/// `on_socket` owns the socket for the session. The session ends when
/// `on_socket` has returned and the socket is dropped (a handler may move it
/// into a task of its own, and the session lasts until that task drops it);
/// the close handshake is then completed for it.
///
/// A peer that vanishes without closing is noticed when a read or a write
/// fails: [`WebSocket::recv`] returns `None` or an error. The server's TCP
/// keep-alive ([`KEEPALIVE_IDLE`](crate::server::KEEPALIVE_IDLE)) fails a
/// read about 90 seconds after the peer falls silent.
#[async_trait]
pub trait WebSocketHandler: Send + Sync + 'static {
    /// Runs the session of one socket.
    async fn on_socket(&self, socket: WebSocket);
}
