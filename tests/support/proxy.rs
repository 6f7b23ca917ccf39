//! A TCP relay on 127.0.0.1 in front of a Redis, whose open connections can
//! be made to fall silent: what a client sees when the Redis host vanishes,
//! or a NAT or a load balancer drops its flow. Connections opened after
//! that relay as before, to the target of the moment (which a test can move,
//! as a DNS name that now leads to another node). It can also lose the next
//! reply: the command reaches Redis and runs, and the connection is closed
//! before its answer gets back.

#![allow(dead_code)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU16, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

/// The relay; it stops when the test's runtime ends.
pub struct Relay {
    port: u16,
    generation: Arc<AtomicU64>,
    target: Arc<AtomicU16>,
    lose_reply: Arc<AtomicBool>,
}

impl Relay {
    /// Relays 127.0.0.1:<a free port> to 127.0.0.1:`target`.
    pub async fn start(target: u16) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let generation = Arc::new(AtomicU64::new(0));
        let target = Arc::new(AtomicU16::new(target));
        let lose_reply = Arc::new(AtomicBool::new(false));
        let (live, to, lose) = (generation.clone(), target.clone(), lose_reply.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let born = live.load(Ordering::SeqCst);
                let live = live.clone();
                let lose = lose.clone();
                let target = to.load(Ordering::SeqCst);
                tokio::spawn(async move {
                    let Ok(server) = tokio::net::TcpStream::connect(("127.0.0.1", target)).await
                    else {
                        return;
                    };
                    let (client_read, client_write) = client.into_split();
                    let (server_read, server_write) = server.into_split();
                    let alive = move || live.load(Ordering::SeqCst) == born;
                    tokio::join!(
                        pipe(client_read, server_write, alive.clone(), None),
                        pipe(server_read, client_write, alive, Some(lose)),
                    );
                });
            }
        });
        Self {
            port,
            generation,
            target,
            lose_reply,
        }
    }

    /// The next reply from Redis, on any connection, is dropped and that
    /// connection closed toward the client.
    pub fn lose_next_reply(&self) {
        self.lose_reply.store(true, Ordering::SeqCst);
    }

    /// `redis://127.0.0.1:<relay port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// Every connection open now stops relaying, silently: its sockets stay
    /// open and nothing more is delivered either way.
    pub fn fall_silent(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Connections opened from now on go to `port`.
    pub fn retarget(&self, port: u16) {
        self.target.store(port, Ordering::SeqCst);
    }
}

async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    alive: impl Fn() -> bool,
    lose: Option<Arc<AtomicBool>>,
) {
    let mut buf = vec![0_u8; 16 * 1024];
    loop {
        let n = from.read(&mut buf).await.unwrap_or(0);
        if lose
            .as_ref()
            .is_some_and(|lose| lose.swap(false, Ordering::SeqCst))
        {
            // The reply is lost: the client's side closes.
            return;
        }
        if !alive() {
            // Hold both sockets open and deliver nothing, for ever.
            let _held = (&from, &to);
            std::future::pending::<()>().await;
        }
        if n == 0 || to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
