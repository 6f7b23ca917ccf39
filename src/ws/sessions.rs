//! The open WebSocket sessions of one server, so that a shutdown can tell
//! them and wait for them.

use std::sync::Arc;

use tokio::sync::watch;

tokio::task_local! {
    /// The sessions of the server whose connection this task runs.
    static SESSIONS: Sessions;
}

/// One server's sessions: each holds a receiver of the shutdown flag, so
/// the server knows none is left when every receiver is gone.
#[derive(Clone, Debug)]
pub(crate) struct Sessions(Arc<watch::Sender<bool>>);

impl Sessions {
    pub(crate) fn new() -> Self {
        Self(Arc::new(watch::channel(false).0))
    }

    /// Runs `connection` with these sessions current, so that a WebSocket
    /// upgraded on it joins them.
    pub(crate) fn scope<F: Future>(
        &self,
        connection: F,
    ) -> tokio::task::futures::TaskLocalFuture<Sessions, F> {
        SESSIONS.scope(self.clone(), connection)
    }

    /// A new session of the server whose connection this task runs: the
    /// shutdown flag it watches, held for as long as the session lasts.
    /// `None` outside a server.
    pub(crate) fn join_current() -> Option<watch::Receiver<bool>> {
        SESSIONS.try_with(|sessions| sessions.0.subscribe()).ok()
    }

    /// Tells every session the server is shutting down, and returns once
    /// each has ended.
    pub(crate) async fn shut_down(&self) {
        self.0.send_replace(true);
        self.0.closed().await;
    }
}
