//! WebSocket caps: a cap on the sockets each client address holds open,
//! beside a limit on how often it may open them.
//!
//! It needs nothing but Rust, on Linux (it connects from 127.0.0.2 as a
//! second client, which Linux routes over the loopback by itself). Run it
//! with `cargo run --example websocket_caps`: it serves an echo socket on a
//! free loopback port, opens and closes sockets against it as two clients,
//! prints what each attempt got, and exits.
//!
//! What it shows:
//!
//! 1. A client opens 3 sockets, the cap, and each echoes.
//! 2. Its fourth is refused with `429 Too Many Requests` and no
//!    `Retry-After`, since nothing says when a socket will close.
//! 3. Another address has a cap of its own.
//! 4. Closing a socket gives its place back, and the client opens another.
//! 5. `ip_based` on the same route limits how often sockets are opened (10
//!    a minute), which the open-socket cap alone does not.

mod common;

use std::error::Error;
use std::net::{IpAddr, SocketAddr};
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use suprnova::bootstrap::bootstrap;
use suprnova::config::Env;
use suprnova::rate_limit::{ConnectionsPerIp, RateLimitMiddleware};
use suprnova::ws::{Message, WebSocket, WebSocketHandler};
use suprnova::{HttpResponse, Router, async_trait, ws};
use tokio::net::{TcpSocket, TcpStream};
use tokio::sync::oneshot;
use tokio_tungstenite::tungstenite::Error as WsError;
use tokio_tungstenite::{MaybeTlsStream, WebSocketStream, client_async};

/// Sockets one address may hold open.
const OPEN_PER_ADDRESS: u32 = 3;
/// Sockets one address may open in a minute.
const OPENED_PER_MINUTE: u32 = 10;

/// Sends every text message back.
struct Echo;

#[async_trait]
impl WebSocketHandler for Echo {
    async fn on_socket(&self, mut socket: WebSocket) {
        while let Some(Ok(message)) = socket.recv().await {
            if let Message::Text(text) = message
                && socket.send(Message::Text(text)).await.is_err()
            {
                break;
            }
        }
    }
}

/// A client's socket.
type Client = WebSocketStream<MaybeTlsStream<TcpStream>>;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    common::load_dotenv_and_log_to_stderr()?;
    let summary = bootstrap(&Env::process().with_default("APP_ENV", "local")).await?;
    println!("booted: {summary}");

    // A clone shares the counts, so this one reads what the route's holds.
    let cap = RateLimitMiddleware::connections_per_ip(OPEN_PER_ADDRESS);
    let router = Router::new()
        .get("/", |_req| async {
            HttpResponse::text("echo socket on /ws/echo\n")
        })
        .merge(
            ws!("/ws/echo", Echo)
                .middleware(RateLimitMiddleware::ip_based(
                    OPENED_PER_MINUTE,
                    Duration::from_secs(60),
                ))
                .middleware(cap.clone()),
        );

    let server = suprnova::server::bind("127.0.0.1:0").await?;
    let addr = server.local_addr()?;
    let (stop, stopped) = oneshot::channel::<()>();
    let serving = tokio::spawn(server.serve_with_shutdown(router, async {
        let _ = stopped.await;
    }));
    println!(
        "serving ws://{addr}/ws/echo (open {OPEN_PER_ADDRESS} at a time, {OPENED_PER_MINUTE} a minute)"
    );

    demonstrate(addr, &cap).await?;

    let _ = stop.send(());
    serving.await??;
    Ok(())
}

async fn demonstrate(addr: SocketAddr, cap: &ConnectionsPerIp) -> Result<(), Box<dyn Error>> {
    let first: IpAddr = "127.0.0.1".parse()?;
    let second: IpAddr = "127.0.0.2".parse()?;

    println!("\n1. 127.0.0.1 opens {OPEN_PER_ADDRESS} sockets");
    let mut open = Vec::new();
    for n in 1..=OPEN_PER_ADDRESS {
        let mut socket = open_socket(first, addr).await?.map_err(|e| e.to_string())?;
        println!("  socket {n}: open, echoes {:?}", echo(&mut socket).await?);
        open.push(socket);
    }
    println!("  open for 127.0.0.1: {}", cap.open_for(first));

    println!("\n2. 127.0.0.1 opens one more");
    report(open_socket(first, addr).await?);

    println!("\n3. 127.0.0.2 opens one");
    let mut other = match open_socket(second, addr).await {
        Ok(Ok(socket)) => socket,
        Ok(Err(refusal)) => return Err(refusal.into()),
        Err(error) => {
            return Err(format!(
                "could not connect from 127.0.0.2 ({error}); this step needs Linux"
            )
            .into());
        }
    };
    println!(
        "  open, echoes {:?}; open for 127.0.0.2: {}",
        echo(&mut other).await?,
        cap.open_for(second)
    );

    println!("\n4. 127.0.0.1 closes a socket and opens another");
    let mut closing = open.pop().ok_or("no socket to close")?;
    close(&mut closing).await?;
    wait_until(|| cap.open_for(first) < OPEN_PER_ADDRESS as usize).await?;
    println!(
        "  open for 127.0.0.1 after the close: {}",
        cap.open_for(first)
    );
    let mut again = open_socket(first, addr).await?.map_err(|e| e.to_string())?;
    println!(
        "  the new socket: open, echoes {:?}",
        echo(&mut again).await?
    );
    open.push(again);
    for mut socket in open {
        close(&mut socket).await?;
    }
    wait_until(|| cap.open_for(first) == 0).await?;

    println!("\n5. 127.0.0.1 closes them all, then opens and closes sockets one at a time");
    // Five have been asked for so far (four opened and one refused by the
    // cap, which the per-minute limit, running first, counted too).
    for n in 6..=12 {
        let result = open_socket(first, addr).await?;
        print!("  attempt {n}: ");
        match result {
            Ok(mut socket) => {
                close(&mut socket).await?;
                println!("open, then closed");
            }
            Err(refusal) => println!("{refusal}"),
        }
        wait_until(|| cap.open_for(first) < OPEN_PER_ADDRESS as usize).await?;
    }
    Ok(())
}

/// Opens a socket to `/ws/echo` from `local`: `Ok(Err(..))` describes a
/// refused handshake, `Err` a failure to connect at all.
async fn open_socket(
    local: IpAddr,
    server: SocketAddr,
) -> Result<Result<Client, String>, Box<dyn Error>> {
    let socket = TcpSocket::new_v4()?;
    socket.bind(SocketAddr::new(local, 0))?;
    let stream = socket.connect(server).await?;
    let url = format!("ws://{server}/ws/echo");
    match client_async(url, MaybeTlsStream::Plain(stream)).await {
        Ok((socket, _response)) => Ok(Ok(socket)),
        Err(WsError::Http(response)) => {
            let body = response
                .body()
                .as_deref()
                .map(String::from_utf8_lossy)
                .unwrap_or_default()
                .into_owned();
            let retry_after = response
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("none");
            Ok(Err(format!(
                "refused: {} {body:?}, Retry-After: {retry_after}",
                response.status().as_u16()
            )))
        }
        Err(error) => Err(error.into()),
    }
}

fn report(result: Result<Client, String>) {
    match result {
        Ok(_) => println!("  open"),
        Err(refusal) => println!("  {refusal}"),
    }
}

/// Closes `socket` and reads until the server has answered the close.
async fn close(socket: &mut Client) -> Result<(), Box<dyn Error>> {
    socket.close(None).await?;
    // The place comes back when the server's session has ended, which is
    // once the close handshake is done.
    while socket.next().await.is_some() {}
    Ok(())
}

/// Sends a text message and returns what came back.
async fn echo(socket: &mut Client) -> Result<String, Box<dyn Error>> {
    socket.send(Message::text("hello")).await?;
    match socket.next().await {
        Some(Ok(Message::Text(text))) => Ok(text.to_string()),
        other => Err(format!("no echo: {other:?}").into()),
    }
}

/// Waits, up to two seconds, for `done`.
async fn wait_until(done: impl Fn() -> bool) -> Result<(), Box<dyn Error>> {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > Duration::from_secs(2) {
            return Err("a closed socket did not give its place back within 2 s".into());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    Ok(())
}
