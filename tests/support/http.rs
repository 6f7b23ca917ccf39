//! A real server on an ephemeral loopback port, and a client for it.

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{HeaderMap, Request};
use http_body_util::{BodyExt, Full};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::{TokioExecutor, TokioIo};
use suprnova::Router;
use suprnova::container::App;
use tokio::net::TcpStream;
use tokio::sync::{Barrier, oneshot};
use tokio::task::JoinHandle;

/// How a test's requests reach its router: the same scenario runs both
/// ways, so that what the server adds (the peer address, the wire) changes
/// no count.
#[derive(Clone, Copy, Debug)]
pub enum Transport {
    /// Through `handle_request_with_peer`, from a peer address the test
    /// gives.
    InProcess,
    /// Over HTTP to a [`TestServer`] on loopback.
    Http,
}

/// A server running `router` on `127.0.0.1:<free port>` inside the container
/// that is current when it starts. Shut down on drop.
pub struct TestServer {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

/// What the client got back.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: HeaderMap,
    pub body: String,
}

impl Reply {
    /// Reads a response whole: status, headers and body as text.
    pub async fn read(response: http::Response<hyper::body::Incoming>) -> Reply {
        let status = response.status().as_u16();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.unwrap().to_bytes();
        Reply {
            status,
            headers,
            body: String::from_utf8_lossy(&body).into_owned(),
        }
    }

    /// A header as text.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

/// What a batch of replies from a limited route says: how many were
/// admitted and refused, the `Retry-After` and `X-RateLimit-Reset` of the
/// refused ones, the `X-RateLimit-Remaining` of the admitted ones (sorted),
/// and every refusal's body and every reply's `X-RateLimit-Limit`.
#[derive(Debug, Default)]
pub struct Tally {
    pub admitted: usize,
    pub refused: usize,
    pub retry_after: BTreeSet<String>,
    pub reset: BTreeSet<String>,
    pub remaining: Vec<i64>,
    pub refusal_bodies: BTreeSet<String>,
    pub limits: BTreeSet<String>,
}

/// Tallies `replies`, each a 200 or a 429; asserts what every limiter's
/// replies carry: `Retry-After` and `X-RateLimit-Reset` on a refusal only,
/// and `X-RateLimit-Remaining: 0` on it.
pub fn tally(replies: &[Reply]) -> Tally {
    let mut t = Tally::default();
    for r in replies {
        match r.status {
            200 => {
                t.admitted += 1;
                let remaining = r.header("x-ratelimit-remaining").unwrap();
                t.remaining.push(remaining.parse().unwrap());
                assert_eq!(r.header("retry-after"), None);
                assert_eq!(r.header("x-ratelimit-reset"), None);
            }
            429 => {
                t.refused += 1;
                assert_eq!(r.header("x-ratelimit-remaining"), Some("0"));
                t.retry_after
                    .insert(r.header("retry-after").unwrap().to_owned());
                t.reset
                    .insert(r.header("x-ratelimit-reset").unwrap().to_owned());
                t.refusal_bodies.insert(r.body.clone());
            }
            other => panic!("unexpected status {other}: {}", r.body),
        }
        t.limits
            .insert(r.header("x-ratelimit-limit").unwrap().to_owned());
    }
    t.remaining.sort_unstable();
    t
}

impl TestServer {
    /// Starts the server on a free port of 127.0.0.1 and returns once it
    /// accepts connections.
    pub async fn start(router: Router) -> Self {
        Self::start_on("127.0.0.1:0", router).await
    }

    /// Starts the server on `bind` (a loopback address with port 0, such
    /// as `[::1]:0`) and returns once it accepts connections.
    pub async fn start_on(bind: &str, router: Router) -> Self {
        let server = suprnova::server::bind(bind).await.unwrap();
        let addr = server.local_addr().unwrap();
        let (tx, rx) = oneshot::channel::<()>();
        let app = App::current();
        let task = tokio::spawn(app.clone().scope(async move {
            server
                .serve_with_shutdown(router, async {
                    let _ = rx.await;
                })
                .await
                .expect("test server failed");
        }));
        Self {
            addr,
            shutdown: Some(tx),
            task: Some(task),
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// `http://127.0.0.1:<port><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.addr, path)
    }

    /// Sends a GET from 127.0.0.1.
    pub async fn get(&self, path: &str) -> Reply {
        self.send(Request::get(self.url(path)).body(Full::default()).unwrap())
            .await
    }

    /// Sends a request from 127.0.0.1.
    pub async fn send(&self, request: Request<Full<Bytes>>) -> Reply {
        send_from(None, request).await
    }

    /// Sends a request over HTTP/2 (prior knowledge, no upgrade) from
    /// 127.0.0.1.
    pub async fn send_h2(&self, request: Request<Full<Bytes>>) -> Reply {
        let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new())
            .http2_only(true)
            .build(HttpConnector::new());
        let response = super::within("an HTTP/2 reply", REPLY_WITHIN, client.request(request))
            .await
            .expect("request failed");
        assert_eq!(response.version(), http::Version::HTTP_2);
        Reply::read(response).await
    }

    /// Sends a request whose TCP source is `local` (any 127.x.y.z works on
    /// Linux loopback), so the server sees a different peer.
    pub async fn send_from(&self, local: IpAddr, request: Request<Full<Bytes>>) -> Reply {
        send_from(Some(local), request).await
    }

    /// Stops accepting and waits for the server to finish, and asserts
    /// that it did, without an error, within its shutdown grace (and 5 s).
    pub async fn stop(mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            let grace = suprnova::server::SHUTDOWN_GRACE + std::time::Duration::from_secs(5);
            let returned = tokio::time::timeout(grace, task).await;
            assert!(matches!(returned, Ok(Ok(()))), "{returned:?}");
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

async fn send_from(local: Option<IpAddr>, request: Request<Full<Bytes>>) -> Reply {
    let mut connector = HttpConnector::new();
    connector.set_local_address(local);
    connector.set_nodelay(true);
    let client: Client<_, Full<Bytes>> = Client::builder(TokioExecutor::new()).build(connector);
    super::within("an HTTP reply", REPLY_WITHIN, async {
        let response = client.request(request).await.expect("request failed");
        Reply::read(response).await
    })
    .await
}

/// How long one request to a test server may take, its body included.
pub const REPLY_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);

/// Asserts that a connection left idle after its last answer was closed
/// `after` that answer, between one and two periods of the server's header
/// read timeout (`period`): the server looks at each connection once a
/// period. 700 ms of leeway stand for a busy machine. `what` names the case.
pub fn assert_closed_one_to_two_periods_after(
    after: std::time::Duration,
    period: std::time::Duration,
    what: &str,
) {
    assert!(
        after >= period && after < 2 * period + std::time::Duration::from_millis(700),
        "{what}: closed {after:?} after the last answer, with a {period:?} timeout"
    );
}

/// The size of [`TimedServer::hi`]'s `GET /big` body: more than a
/// connection's socket buffers hold, so that its client must read it.
pub const BIG: usize = 8 << 20;

/// The crate's server on a free loopback port with the header read timeout
/// `period`, served until [`TimedServer::stop`].
pub struct TimedServer {
    pub addr: SocketAddr,
    stop: oneshot::Sender<()>,
    serving: JoinHandle<Result<(), suprnova::server::ServerError>>,
}

impl TimedServer {
    /// Serves `router` with the header read timeout `period`.
    pub async fn start(router: Router, period: std::time::Duration) -> Self {
        let server = suprnova::server::bind("127.0.0.1:0")
            .await
            .unwrap()
            .header_read_timeout(Some(period));
        let addr = server.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let serving = tokio::spawn(server.serve_with_shutdown(router, async {
            let _ = stopped.await;
        }));
        Self {
            addr,
            stop,
            serving,
        }
    }

    /// The bound address.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Answers `GET /` with "hi" and `GET /big` with [`BIG`] bytes.
    pub async fn hi(period: std::time::Duration) -> Self {
        let router = Router::new()
            .get("/", |_req: suprnova::Request| async {
                suprnova::HttpResponse::text("hi")
            })
            .get("/big", |_req: suprnova::Request| async {
                suprnova::HttpResponse::bytes(vec![b'x'; BIG])
            });
        Self::start(router, period).await
    }

    /// Shuts the server down and asserts it returned within 5 s.
    pub async fn stop(self) {
        self.stop.send(()).unwrap();
        let stopped_in =
            tokio::time::timeout(std::time::Duration::from_secs(5), self.serving).await;
        assert!(matches!(stopped_in, Ok(Ok(Ok(())))), "{stopped_in:?}");
    }
}

/// One client on its own keep-alive HTTP/1.1 connection to `addr`, opened
/// before `start` lets every client go, then `attempts` GETs of `path` one
/// after the other on it; the connection must end cleanly.
async fn keep_alive_client(
    addr: SocketAddr,
    path: &'static str,
    attempts: usize,
    start: Arc<Barrier>,
) -> Vec<Reply> {
    let stream = TcpStream::connect(addr).await.unwrap();
    stream.set_nodelay(true).unwrap();
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .unwrap();
    let conn = tokio::spawn(conn);
    start.wait().await;
    let mut replies = Vec::with_capacity(attempts);
    for _ in 0..attempts {
        let request = http::Request::get(path)
            .header(http::header::HOST, addr.to_string())
            .body(Full::<Bytes>::default())
            .unwrap();
        // An error here is the server closing the kept-alive connection.
        let response = sender.send_request(request).await.unwrap();
        replies.push(Reply::read(response).await);
    }
    drop(sender);
    conn.await.unwrap().expect("the connection ends cleanly");
    replies
}

/// Every reply of `clients` concurrent clients to `server`, each on its own
/// keep-alive connection sending `attempts` GETs of `path`, all let go at
/// once; each client must be done within a minute.
pub async fn storm(
    server: &TestServer,
    clients: usize,
    attempts: usize,
    path: &'static str,
) -> Vec<Reply> {
    let start = Arc::new(Barrier::new(clients));
    let tasks: Vec<_> = (0..clients)
        .map(|_| {
            let client = keep_alive_client(server.addr(), path, attempts, start.clone());
            tokio::spawn(client)
        })
        .collect();
    let mut replies = Vec::with_capacity(clients * attempts);
    for task in tasks {
        let client = super::within("a client's requests", Duration::from_secs(60), task);
        replies.extend(client.await.unwrap());
    }
    replies
}
