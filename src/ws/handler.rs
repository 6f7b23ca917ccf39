//! `WebSocketHandler`: what runs on an upgraded socket.

use async_trait::async_trait;

use super::WebSocket;

/// The code a WebSocket route runs on each socket it accepts.
///
/// `on_socket` owns the socket for the session. The session ends when
/// `on_socket` has returned and the socket is dropped (a handler may move it
/// into a task of its own, and the session lasts until that task drops it);
/// the close handshake is then completed for it. A handler that panics
/// ends its session: the panic is logged, and the peer is sent a close
/// frame with code 1011 (internal error), as a plain route's panic gets
/// `500`.
///
/// A peer that vanishes without closing is noticed when a read or a write
/// fails: [`WebSocket::recv`] returns `None` or an error. The server's TCP
/// keep-alive ([`KEEPALIVE_IDLE`](crate::server::KEEPALIVE_IDLE)) probes a
/// silent peer only while the server has nothing unacknowledged in flight,
/// and then fails a read about 90 seconds after the peer falls silent. With
/// data in flight (a send the peer never acknowledged) no probe is sent: the
/// kernel's retransmission timeout decides, which can take many minutes
/// (about 15 on Linux's defaults, `net.ipv4.tcp_retries2` = 15).
#[async_trait]
pub trait WebSocketHandler: Send + Sync + 'static {
    /// Runs the session of one socket.
    async fn on_socket(&self, socket: WebSocket);
}
