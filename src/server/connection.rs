//! One accepted connection's life: served until it ends, closed gracefully
//! when the server shuts down or when it stays without requests.

use std::fmt::Display;
use std::net::SocketAddr;

use hyper_util::server::graceful::GracefulConnection;
use tokio::sync::watch;

use super::idle::{IdleWatch, Quiet};

/// Drives `connection` to its end. When `shutdown` changes, or when `idle`
/// finds it without a request for its period, the connection is told to
/// shut down gracefully (HTTP/2 sends GOAWAY; requests in flight finish)
/// and driven on until it ends, or until `idle` finds it without a request
/// in flight for a period more, when it is dropped. A connection that sent
/// no request at all within the period (but an HTTP/2 one, which is closed
/// as an idle one is, with a GOAWAY first), or whose client made no room
/// for any of an answer for two periods, is dropped at once. The receiver is
/// held until the connection ends, which is how the server tells that
/// every connection has.
pub(super) async fn run<C>(
    connection: C,
    mut idle: Option<IdleWatch>,
    mut shutdown: watch::Receiver<()>,
    peer: SocketAddr,
) where
    C: GracefulConnection,
    C::Error: Display,
{
    let mut connection = std::pin::pin!(connection);
    let mut closing = false;
    loop {
        let quiet = async {
            match idle.as_mut() {
                Some(watch) => watch.wait().await,
                None => std::future::pending().await,
            }
        };
        // The connection first: it is what wakes the task on every request.
        tokio::select! {
            biased;
            ended = connection.as_mut() => {
                if let Err(error) = ended {
                    tracing::debug!(%peer, %error, "connection ended with an error");
                }
                return;
            }
            _ = shutdown.changed(), if !closing => {
                connection.as_mut().graceful_shutdown();
                closing = true;
            }
            // Watched while closing too: a peer that never answers the
            // GOAWAY (an HTTP/2 close waits for its acknowledgement), or
            // that sent no request at all, is dropped a period later, with
            // nothing in flight.
            quiet = quiet => match quiet {
                Quiet::NoRequest => {
                    tracing::debug!(%peer, "no request within the header read timeout; closing");
                    return;
                }
                Quiet::Stalled => {
                    tracing::debug!(%peer, "the client read none of its answer for two header read timeouts; dropping");
                    return;
                }
                Quiet::Idle if closing => {
                    tracing::debug!(%peer, "closing connection still open a period later; dropping");
                    return;
                }
                Quiet::Idle => {
                    tracing::debug!(%peer, "no request for the header read timeout; closing");
                    connection.as_mut().graceful_shutdown();
                    closing = true;
                }
            },
        }
    }
}
