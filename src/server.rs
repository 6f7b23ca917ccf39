//! Serving a [`Router`] over HTTP/1.1 and HTTP/2 with hyper 1, and running
//! requests in process.
//!
//! ```no_run
//! use suprnova::{HttpResponse, Router};
//!
//! # async fn run() -> Result<(), suprnova::server::ServerError> {
//! let router = Router::new().get("/", |_req| async { HttpResponse::text("hello") });
//! suprnova::server::serve("127.0.0.1:8080", router).await?; // until ctrl-c
//! # Ok(())
//! # }
//! ```
//!
//! Every connection runs inside the container that was current when the
//! server started ([`App::current`]), so a test that scopes its own `App`
//! around the server sees its own limiters in the requests.
//!
//! A client that ends its side of an HTTP/1 connection (a TCP half-close)
//! is taken to be gone, as hyper takes it: the handler of the request in
//! flight is dropped and nothing is answered, so that a client that gave
//! up costs no more work. A client keeps its side open until its answer
//! has come.

use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::FutureExt;
use futures_util::future::Either;
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::conn::auto;
use tokio::net::{TcpListener, TcpSocket, ToSocketAddrs};

use crate::container::App;
use crate::http::{BoxError, HttpResponse, Request, TrustedProxies, host_fault, target_fault};
use crate::routing::{ConnectionRouter, RouteError, Router, panicked};
use crate::ws::Sessions;

mod body_timeout;
mod connection;
mod frames;
mod idle;

use body_timeout::Timed;
use idle::{Activity, IdleWatch};

/// How long a graceful shutdown waits for open connections to finish.
pub const SHUTDOWN_GRACE: Duration = Duration::from_secs(30);

/// The server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The router has a registration error; nothing was served.
    #[error("refusing to serve: {0}")]
    Router(#[from] RouteError),
    /// The address could not be bound.
    #[error("could not listen: {0}")]
    Io(#[from] std::io::Error),
}

/// How long a client may take to send a request's headers: from the
/// connection's opening to its first request's headers (in HTTP/1 and
/// HTTP/2, whatever arrives in between: nothing, part of the HTTP/2
/// preface, the preface and no request), and in HTTP/1 from the end of a
/// response to the blank line that ends the next request's headers. A
/// client that takes longer is disconnected: without a bound, clients that
/// open connections and send nothing, or a header every few seconds, hold a
/// connection and its task for ever, and a graceful shutdown waits for
/// them. An HTTP/2 connection with no request in flight and none new for
/// this long is closed too (GOAWAY, then the end of the connection), between
/// one and two of these periods after its last answer; a peer that does
/// not answer the GOAWAY, like one still open when the server shuts down
/// with nothing in flight, is dropped within a period more. A connection
/// counts as busy while its answers go out, so a large answer read slowly
/// is not cut; a client that makes no room for any of its answer for two
/// periods (it stopped reading) is dropped. On HTTP/2 only an answer's
/// frames count as going out: the server's replies to a peer's PINGs, and
/// its other frames of its own, keep no connection open, and a client that
/// makes no room in its flow-control window for its answer, with nothing
/// else in flight, is closed as an idle one is (and dropped a period after
/// the GOAWAY, its answer still waiting). A request body that a handler
/// reads is bounded the same way: no part of it for this long ends it with
/// [`BodyTimeout`](crate::http::BodyTimeout), which a reader answers with
/// 408. On HTTP/2, where the server's flow control says when a client may
/// send and other streams may have filled the connection's window, that is
/// a whole period with no `DATA` for any of the connection's streams while
/// the client had room in the connection's window (one to two periods after
/// the connection's last data).
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest [`Server::header_read_timeout`] kept; a longer one waits for
/// ever. About a hundred years: a deadline computed as now plus the period
/// must fit in an `Instant`, and `Duration::MAX` does not.
pub const MAX_HEADER_READ_TIMEOUT: Duration = Duration::from_secs(100 * 365 * 24 * 60 * 60);

/// A bound listener, ready to serve.
#[derive(Debug)]
pub struct Server {
    listener: TcpListener,
    header_read_timeout: Option<Duration>,
}

/// How many connections the kernel holds for the server until it accepts
/// them (Linux caps it at `net.core.somaxconn`, 4096 by default).
///
/// The standard library and tokio ask for 128, which a burst of clients
/// arriving together overruns: the callers a rate limit refused, all
/// coming back when its window ends, are one. A connection the queue cannot
/// hold is not refused but ignored, and its client sends again only after a
/// second.
pub const LISTEN_BACKLOG: u32 = 1024;

/// Binds `addr` with a queue of [`LISTEN_BACKLOG`] connections: the first
/// address it resolves to that can be bound. Bind `127.0.0.1:0` for a free
/// port and read it back with [`Server::local_addr`].
pub async fn bind(addr: impl ToSocketAddrs) -> Result<Server, ServerError> {
    let mut last_error = None;
    for addr in tokio::net::lookup_host(addr).await? {
        match listen_on(addr) {
            Ok(listener) => {
                return Ok(Server {
                    listener,
                    header_read_timeout: Some(HEADER_READ_TIMEOUT),
                });
            }
            Err(error) => last_error = Some(error),
        }
    }
    Err(last_error
        .unwrap_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "the address resolved to no address",
            )
        })
        .into())
}

/// A listener on `addr`, set up as tokio's `TcpListener::bind` sets one up
/// (the address reusable on Unix, so a restarted server binds at once), with
/// a queue of [`LISTEN_BACKLOG`].
fn listen_on(addr: SocketAddr) -> io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// How the kernel finds out that the peer of an idle connection is gone:
/// after [`KEEPALIVE_IDLE`] of silence it probes the peer every
/// [`KEEPALIVE_INTERVAL`], and closes the connection after
/// [`KEEPALIVE_PROBES`] probes go unanswered, about 90 seconds in all.
/// Without it, a peer that vanishes without a word (a phone that lost its
/// network, a host powered off) holds its connection, and a
/// [`ConnectionsPerIp`](crate::rate_limit::ConnectionsPerIp) place with
/// it, for as long as the server runs, when the server has nothing to send.
/// The kernel probes only a connection with nothing unacknowledged in
/// flight: to a peer gone while the server was sending, it retransmits
/// instead, until its retransmission timeout gives up (about 15 minutes
/// with Linux's default `tcp_retries2`).
pub const KEEPALIVE_IDLE: Duration = Duration::from_secs(60);
/// See [`KEEPALIVE_IDLE`].
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// See [`KEEPALIVE_IDLE`].
pub const KEEPALIVE_PROBES: u32 = 3;

/// Turns on TCP keep-alive on an accepted connection, as
/// [`KEEPALIVE_IDLE`] says.
fn keep_alive(stream: &tokio::net::TcpStream) -> io::Result<()> {
    let probes = socket2::TcpKeepalive::new()
        .with_time(KEEPALIVE_IDLE)
        .with_interval(KEEPALIVE_INTERVAL)
        .with_retries(KEEPALIVE_PROBES);
    socket2::SockRef::from(stream).set_tcp_keepalive(&probes)
}

/// Binds `addr` and serves `router` until ctrl-c, then shuts down gracefully.
pub async fn serve(addr: impl ToSocketAddrs, router: Router) -> Result<(), ServerError> {
    bind(addr).await?.serve(router).await
}

impl Server {
    /// How long a client may take to send a request's headers, as
    /// [`HEADER_READ_TIMEOUT`] says ([`HEADER_READ_TIMEOUT`] unless set);
    /// `None` waits for ever, and so do a period of zero (as a zero read
    /// header timeout is none in Go's server; taken as a period, it would
    /// drop every client that did not send its request at once) and a
    /// period longer than [`MAX_HEADER_READ_TIMEOUT`] (a deadline that far
    /// ahead would not fit in the clock's instants).
    ///
    /// ```
    /// use std::time::Duration;
    ///
    /// # async fn run() -> Result<(), suprnova::server::ServerError> {
    /// let server = suprnova::server::bind("127.0.0.1:0")
    ///     .await?
    ///     .header_read_timeout(Some(Duration::from_secs(10)));
    /// # let _ = server;
    /// # Ok(())
    /// # }
    /// ```
    pub fn header_read_timeout(mut self, timeout: Option<Duration>) -> Self {
        self.header_read_timeout =
            timeout.filter(|period| !period.is_zero() && *period <= MAX_HEADER_READ_TIMEOUT);
        self
    }

    /// The address the listener is bound to.
    pub fn local_addr(&self) -> Result<SocketAddr, ServerError> {
        Ok(self.listener.local_addr()?)
    }

    /// Serves until ctrl-c, then shuts down gracefully.
    pub async fn serve(self, router: Router) -> Result<(), ServerError> {
        self.serve_with_shutdown(router, async {
            if tokio::signal::ctrl_c().await.is_ok() {
                tracing::info!("ctrl-c received; shutting down");
            }
        })
        .await
    }

    /// Serves until `shutdown` completes, then stops accepting, lets open
    /// connections finish, tells every open WebSocket to close (its
    /// handler's next read returns `None`) and waits for the sessions to
    /// end, all within [`SHUTDOWN_GRACE`], and returns.
    ///
    /// A router with registration errors is refused before anything is
    /// served.
    pub async fn serve_with_shutdown(
        self,
        router: Router,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<(), ServerError> {
        router.validate()?;
        let router = Arc::new(router);
        let app = App::current();
        let sessions = Sessions::new();
        let mut builder = auto::Builder::new(ScopedExecutor {
            app: app.clone(),
            sessions: sessions.clone(),
        });
        builder
            .http1()
            .timer(TokioTimer::new())
            .header_read_timeout(self.header_read_timeout);
        builder.http2().timer(TokioTimer::new());
        let (shutting_down, shutdown_signal) = tokio::sync::watch::channel(());
        let mut shutdown = std::pin::pin!(shutdown);
        loop {
            tokio::select! {
                accepted = self.listener.accept() => {
                    let (stream, peer) = match accepted {
                        Ok(pair) => pair,
                        Err(error) => {
                            // Out of file descriptors and the like: back off
                            // instead of spinning.
                            tracing::warn!(%error, "accept failed");
                            tokio::time::sleep(Duration::from_millis(50)).await;
                            continue;
                        }
                    };
                    let _ = stream.set_nodelay(true);
                    let _ = keep_alive(&stream);
                    // Cloned once a connection; a request clones only this
                    // connection's handle.
                    let router = Arc::new(ConnectionRouter(router.clone()));
                    let activity = Activity::default();
                    let io = TokioIo::new(activity.watch(stream));
                    let period = self.header_read_timeout;
                    let idle = period.map(|period| IdleWatch::new(activity.clone(), period));
                    let service = service_fn(move |req: http::Request<Incoming>| {
                        let busy = activity.begin();
                        let head = req.method() == http::Method::HEAD;
                        if let Some(fault) = target_fault(req.method(), req.uri())
                            .or_else(|| host_fault(req.version(), req.headers()))
                        {
                            let refused = bad_request(fault).into_http_answering(head);
                            return Either::Left(std::future::ready(Ok(refused)));
                        }
                        // Prepared and matched when hyper hands the request
                        // over (inside the connection's scope), so that the
                        // future holds the chain's future and nothing beside.
                        // A body is timed; an HTTP/2 one by the whole
                        // connection's data, since the server's flow-control
                        // windows, which other streams may fill, decide when
                        // its client may send.
                        let request = match period {
                            Some(period) if req.version() < http::Version::HTTP_2 => {
                                prepare(req.map(|body| Timed::new(body, period)), Some(peer))
                            }
                            Some(period) => {
                                let connection = activity.clone();
                                let timed = |body| Timed::on_http2(body, period, connection);
                                prepare(req.map(timed), Some(peer))
                            }
                            None => prepare(req, Some(peer)),
                        };
                        let router = router.clone();
                        let answer =
                            catching_panics(|| Router::dispatch_handled(router, request));
                        Either::Right(async move {
                            let answer = answer.await.into_http_answering(head);
                            drop(busy);
                            Ok::<_, Infallible>(answer)
                        })
                    });
                    let connection = builder
                        .serve_connection_with_upgrades(io, service)
                        .into_owned();
                    // HTTP/1 runs each request inside the connection's
                    // task, so one scope a connection makes `app` current
                    // for all of them; what HTTP/2 spawns, ScopedExecutor
                    // scopes. hyper bounds an HTTP/1 request's headers once
                    // it reads them, but not the wait before (for the bytes
                    // that tell HTTP/1 from HTTP/2, and for an HTTP/2
                    // client's requests): the idle watch bounds those.
                    let shutdown_signal = shutdown_signal.clone();
                    tokio::spawn(app.scope(sessions.scope(connection::run(
                        connection,
                        idle,
                        shutdown_signal,
                        peer,
                    ))));
                }
                () = &mut shutdown => break,
            }
        }
        drop(self.listener);
        drop(shutdown_signal);
        // Requests in flight finish; WebSockets are told to close, and end
        // when their handlers return.
        let drained = async {
            let connections_ended = async {
                let _ = shutting_down.send(());
                shutting_down.closed().await;
            };
            tokio::join!(connections_ended, sessions.shut_down());
        };
        tokio::select! {
            () = drained => {}
            () = tokio::time::sleep(SHUTDOWN_GRACE) => {
                tracing::warn!("connections still open after the shutdown grace period");
            }
        }
        Ok(())
    }
}

/// Runs `request` through `router` in process, with no peer address: every
/// address-based limiter sees a request with no address.
pub async fn handle_request<B>(router: &Router, request: http::Request<B>) -> HttpResponse
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    dispatch(router, request, None).await
}

/// The `400` the server answers to a request it will not route.
fn bad_request(fault: &'static str) -> HttpResponse {
    HttpResponse::text(fault).status(400)
}

/// Runs `request` through `router` in process as if it came from `peer`.
/// Use it in your own accept loop, and in tests.
///
/// The answer is the one the server sends: to a `HEAD`, no content, with
/// the `Content-Length` of the content a `GET` would have had; `500` for a
/// `1xx` that is no WebSocket upgrade (a handler's is made `500` inside the
/// route's middleware, as a panic's is, so that a throttle's headers are on
/// it; a middleware's when it leaves the router); `400` for a target the
/// server routes no request to (a `CONNECT` with a path, userinfo, `*`
/// but for `OPTIONS`). The `Host` header is not checked: a request built in
/// process seldom carries one. Convert it with [`HttpResponse::into_http`]
/// for hyper, on either protocol.
///
/// ```
/// use suprnova::{HttpResponse, Router};
/// use suprnova::server::handle_request_with_peer;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let router = Router::new().get("/ip", |req: suprnova::Request| async move {
///     HttpResponse::text(req.ip().unwrap_or_default())
/// });
/// let req = http::Request::get("/ip").body(String::new()).unwrap();
/// let res = handle_request_with_peer(&router, req, "198.51.100.4:4000".parse().unwrap()).await;
/// assert_eq!(res.body_text(), "198.51.100.4");
/// # });
/// ```
pub async fn handle_request_with_peer<B>(
    router: &Router,
    request: http::Request<B>,
    peer: SocketAddr,
) -> HttpResponse
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    dispatch(router, request, Some(peer)).await
}

fn dispatch<B>(
    router: &Router,
    request: http::Request<B>,
    peer: Option<SocketAddr>,
) -> impl Future<Output = HttpResponse> + '_
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    let head = request.method() == http::Method::HEAD;
    if let Some(fault) = target_fault(request.method(), request.uri()) {
        let refused = bad_request(fault);
        return Either::Left(std::future::ready(if head {
            refused.without_content()
        } else {
            refused
        }));
    }
    let request = prepare(request, peer);
    let answer = catching_panics(|| router.dispatch_outermost(request));
    if !head {
        // The answer as it is: nothing to leave out.
        return Either::Right(Either::Left(answer));
    }
    Either::Right(Either::Right(answer.map(HttpResponse::without_content)))
}

/// The crate's request for `request` from `peer`, trusting the proxies
/// installed in the current container.
fn prepare<B>(request: http::Request<B>, peer: Option<SocketAddr>) -> Request
where
    B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
    B::Error: Into<BoxError>,
{
    let mut request = Request::new(request);
    // Lent, and cloned only when it trusts someone: with no proxy trusted
    // (the default), no request writes the installed list's reference count.
    if let Some(proxies) = App::resolve_with::<TrustedProxies, _>(|proxies| {
        proxies.filter(|proxies| !proxies.is_empty()).cloned()
    }) {
        request = request.with_trusted_proxies(proxies);
    }
    if let Some(peer) = peer {
        request = request.with_peer(peer);
    }
    request
}

/// What the future `dispatch` makes answers, or 500 when a handler or
/// middleware panicked, whether while the future is made (a route with no
/// middleware calls its handler then) or while it runs.
///
/// Returns a future rather than being an `async fn`: an `async fn` would
/// keep room for its argument beside the future it awaits, doubling what
/// every request's future holds.
fn catching_panics<F: Future<Output = HttpResponse>>(
    dispatch: impl FnOnce() -> F,
) -> impl Future<Output = HttpResponse> {
    match std::panic::catch_unwind(AssertUnwindSafe(dispatch)) {
        Ok(dispatched) => Either::Left(
            AssertUnwindSafe(dispatched)
                .catch_unwind()
                .map(|answered| answered.unwrap_or_else(|_| panicked())),
        ),
        Err(_) => Either::Right(std::future::ready(panicked())),
    }
}

/// Spawns what hyper runs on its own (HTTP/2 streams) on tokio, inside the
/// server's container scope, as HTTP/1 requests run inside the connection's.
#[derive(Clone)]
struct ScopedExecutor {
    app: App,
    sessions: Sessions,
}

impl<F> hyper::rt::Executor<F> for ScopedExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, future: F) {
        tokio::spawn(self.app.scope(self.sessions.scope(future)));
    }
}

#[cfg(test)]
mod tests {
    #[tokio::test]
    async fn accepted_connections_probe_a_silent_peer() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client = tokio::net::TcpStream::connect(listener.local_addr().unwrap());
        let ((accepted, _), _client) = tokio::try_join!(listener.accept(), client).unwrap();
        let socket = socket2::SockRef::from(&accepted);
        assert!(!socket.keepalive().unwrap());
        super::keep_alive(&accepted).unwrap();
        assert!(socket.keepalive().unwrap());
        assert_eq!(socket.tcp_keepalive_time().unwrap(), super::KEEPALIVE_IDLE);
        assert_eq!(
            socket.tcp_keepalive_interval().unwrap(),
            super::KEEPALIVE_INTERVAL
        );
        assert_eq!(
            socket.tcp_keepalive_retries().unwrap(),
            super::KEEPALIVE_PROBES
        );
    }
}
