//! A bench server on a loopback port and the HTTP/1.1 client that loads it,
//! shared by the HTTP bench (time) and the instructions bench (instructions
//! a request, server and client together).

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Instant;

use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::rt::TokioIo;
use suprnova::Router;
use suprnova::container::App;
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;

/// `router` served on `127.0.0.1:<free port>` inside `app`, in `runtime`,
/// until the sender is dropped or fired.
pub fn start_server(
    runtime: &tokio::runtime::Runtime,
    app: App,
    router: Router,
) -> (SocketAddr, oneshot::Sender<()>) {
    let (stop, stopped) = oneshot::channel::<()>();
    let server = runtime
        .block_on(suprnova::server::bind("127.0.0.1:0"))
        .expect("bind a loopback port");
    let addr = server.local_addr().expect("the bound address");
    runtime.spawn(app.clone().scope(async move {
        server
            .serve_with_shutdown(router, async {
                let _ = stopped.await;
            })
            .await
            .expect("the bench server");
    }));
    (addr, stop)
}

/// `requests` requests to `addr` over `connections` keep-alive connections
/// at once, connection `c` from 127.0.0.`c + 1` (up to 250 addresses), so
/// that a per-address limiter keeps a bucket for each; the latency of each
/// request, in microseconds, in no order. Must run inside a tokio runtime.
pub async fn send(addr: SocketAddr, connections: u64, requests: u64) -> Vec<u32> {
    let tasks: Vec<_> = (0..connections)
        .map(|c| {
            let share = requests / connections + u64::from(c < requests % connections);
            tokio::spawn(connection(addr, 1 + (c % 250) as u8, share))
        })
        .collect();
    let mut latencies = Vec::with_capacity(requests as usize);
    for task in tasks {
        latencies.extend(task.await.expect("a client connection"));
    }
    latencies
}

/// One keep-alive connection from 127.0.0.`source`, sending `count`
/// requests one after the other; the latency of each, in microseconds.
async fn connection(addr: SocketAddr, source: u8, count: u64) -> Vec<u32> {
    let socket = TcpSocket::new_v4().expect("a socket");
    socket
        .bind(SocketAddr::new(
            IpAddr::V4(Ipv4Addr::new(127, 0, 0, source)),
            0,
        ))
        .expect("bind a loopback source address");
    let stream: TcpStream = socket.connect(addr).await.expect("connect to the server");
    stream.set_nodelay(true).expect("TCP_NODELAY");
    let (mut sender, conn) = hyper::client::conn::http1::handshake(TokioIo::new(stream))
        .await
        .expect("an HTTP/1.1 handshake");
    tokio::spawn(conn);
    let mut latencies = Vec::with_capacity(count as usize);
    for _ in 0..count {
        let request = http::Request::get("/")
            .header(http::header::HOST, "127.0.0.1")
            .body(Empty::<Bytes>::new())
            .expect("a request");
        let start = Instant::now();
        let response = sender.send_request(request).await.expect("a response");
        let status = response.status();
        let body = response.into_body().collect().await.expect("a body");
        latencies.push(start.elapsed().as_micros().min(u128::from(u32::MAX)) as u32);
        assert_eq!(
            status,
            200,
            "a refused or failed request: {:?}",
            body.to_bytes()
        );
    }
    latencies
}
