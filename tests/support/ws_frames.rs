//! A raw WebSocket client: a handshake written by hand, and frames written
//! and read byte by byte, for what a client library will not send or hides.

use std::net::SocketAddr;
use std::time::Duration;

use suprnova::rate_limit::ConnectionsPerIp;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use super::within;

/// The handshake key of RFC 6455's example.
pub const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";
/// The `Sec-WebSocket-Accept` that answers [`KEY`].
pub const ACCEPT: &str = "s3pPLMBiTxaQ9kYGzzhZRbK+xOo=";

pub const CONTINUATION: u8 = 0x0;
pub const TEXT: u8 = 0x1;
pub const BINARY: u8 = 0x2;
pub const CLOSE: u8 = 0x8;
pub const PING: u8 = 0x9;
pub const PONG: u8 = 0xA;

/// A raw socket on `/ws`, its handshake answered 101.
pub async fn open(server: SocketAddr) -> TcpStream {
    let mut stream = TcpStream::connect(server).await.unwrap();
    let request = format!(
        "GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: {KEY}\r\n\r\n"
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut byte = [0_u8; 1];
    within("the 101", Duration::from_secs(5), async {
        while !head.ends_with(b"\r\n\r\n") {
            assert_eq!(stream.read(&mut byte).await.unwrap(), 1);
            head.push(byte[0]);
        }
    })
    .await;
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101"), "{head}");
    stream
}

/// A frame as a client writes it: masked with a fixed key.
pub fn masked(fin: bool, opcode: u8, payload: &[u8]) -> Vec<u8> {
    frame(fin, opcode, payload, Some([0x37, 0xfa, 0x21, 0x3d]))
}

/// A frame; masked with `mask` when there is one.
pub fn frame(fin: bool, opcode: u8, payload: &[u8], mask: Option<[u8; 4]>) -> Vec<u8> {
    let mut out = vec![u8::from(fin) << 7 | opcode];
    let bit = if mask.is_some() { 0x80 } else { 0 };
    out.extend(length_bytes(bit, payload.len() as u64));
    match mask {
        Some(key) => {
            out.extend_from_slice(&key);
            out.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        }
        None => out.extend_from_slice(payload),
    }
    out
}

/// The length bytes of a frame header, with the mask bit `bit`.
pub fn length_bytes(bit: u8, len: u64) -> Vec<u8> {
    if len < 126 {
        vec![bit | len as u8]
    } else if len <= 0xffff {
        let mut out = vec![bit | 126];
        out.extend_from_slice(&(len as u16).to_be_bytes());
        out
    } else {
        let mut out = vec![bit | 127];
        out.extend_from_slice(&len.to_be_bytes());
        out
    }
}

/// One frame from the server: fin, opcode, payload; `None` at the end of
/// the connection. Within 10 s.
pub async fn read_frame(stream: &mut TcpStream) -> Option<(bool, u8, Vec<u8>)> {
    within("a frame from the server", Duration::from_secs(10), async {
        let mut two = [0_u8; 2];
        match stream.read(&mut two[..1]).await {
            Ok(0) | Err(_) => return None,
            Ok(_) => {}
        }
        stream.read_exact(&mut two[1..]).await.ok()?;
        assert_eq!(two[1] & 0x80, 0, "a server frame must not be masked");
        let len = match two[1] & 0x7f {
            126 => {
                let mut b = [0_u8; 2];
                stream.read_exact(&mut b).await.ok()?;
                u64::from(u16::from_be_bytes(b))
            }
            127 => {
                let mut b = [0_u8; 8];
                stream.read_exact(&mut b).await.ok()?;
                u64::from_be_bytes(b)
            }
            n => u64::from(n),
        };
        let mut payload = vec![0_u8; len as usize];
        stream.read_exact(&mut payload).await.ok()?;
        Some((two[0] & 0x80 != 0, two[0] & 0x0f, payload))
    })
    .await
}

/// The next report of a handler, within 10 s.
pub async fn next_report(reports: &mut mpsc::UnboundedReceiver<String>) -> String {
    within(
        "the handler's report",
        Duration::from_secs(10),
        reports.recv(),
    )
    .await
    .expect("the handler is gone")
}

/// Waits (bounded) until `cap` counts `want` places for 127.0.0.1.
pub async fn wait_open(cap: &ConnectionsPerIp, want: usize) {
    super::held::open_becomes(cap, "127.0.0.1".parse().unwrap(), want).await;
}
