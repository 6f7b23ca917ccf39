//! A raw HTTP/2 client (prior knowledge): frames written by hand, for what
//! a well-behaved client library refuses to send, and the server's frames
//! read back one by one.

use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

pub const PREFACE: &[u8] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
pub const DATA: u8 = 0;
pub const HEADERS: u8 = 1;
pub const RST_STREAM: u8 = 3;
pub const SETTINGS: u8 = 4;
pub const PING: u8 = 6;
pub const GOAWAY: u8 = 7;
pub const END_STREAM: u8 = 0x1;
pub const END_HEADERS: u8 = 0x4;
pub const ACK: u8 = 0x1;
pub const PROTOCOL_ERROR: u32 = 1;
pub const REFUSED_STREAM: u32 = 7;
pub const CANCEL: u32 = 8;
/// `:status: 200` in HPACK's static table: how the server's `200` starts.
pub const STATUS_200: u8 = 0x88;

pub fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let length = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut frame = vec![length[1], length[2], length[3], kind, flags];
    frame.extend_from_slice(&stream.to_be_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// An HPACK integer with a `prefix`-bit prefix, its first byte or-ed with
/// `first`.
pub fn hpack_int(out: &mut Vec<u8>, first: u8, prefix: u32, value: usize) {
    let max = (1usize << prefix) - 1;
    if value < max {
        out.push(first | value as u8);
        return;
    }
    out.push(first | max as u8);
    let mut rest = value - max;
    while rest >= 128 {
        out.push((rest % 128) as u8 | 0x80);
        rest /= 128;
    }
    out.push(rest as u8);
}

/// A header block of `fields`, each a literal without indexing with a
/// literal name, written as given (no lowercasing, no checks).
pub fn block(fields: &[(&str, &str)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (name, value) in fields {
        out.push(0x00);
        hpack_int(&mut out, 0, 7, name.len());
        out.extend_from_slice(name.as_bytes());
        hpack_int(&mut out, 0, 7, value.len());
        out.extend_from_slice(value.as_bytes());
    }
    out
}

pub fn headers(stream: u32, fields: &[(&str, &str)], end_stream: bool) -> Vec<u8> {
    let flags = END_HEADERS | if end_stream { END_STREAM } else { 0 };
    frame(HEADERS, flags, stream, &block(fields))
}

pub fn request_fields<'a>(method: &'a str, path: &'a str) -> Vec<(&'a str, &'a str)> {
    vec![
        (":method", method),
        (":scheme", "http"),
        (":path", path),
        (":authority", "127.0.0.1"),
    ]
}

/// A request's HEADERS frame on `stream`, with `extra` fields after the
/// pseudo-headers.
pub fn request_headers(
    stream: u32,
    method: &str,
    path: &str,
    extra: &[(&str, &str)],
    end_stream: bool,
) -> Vec<u8> {
    let mut fields = request_fields(method, path);
    fields.extend_from_slice(extra);
    headers(stream, &fields, end_stream)
}

pub fn get(stream: u32, path: &str) -> Vec<u8> {
    headers(stream, &request_fields("GET", path), true)
}

#[derive(Debug, Clone)]
pub struct Frame {
    pub kind: u8,
    pub flags: u8,
    pub stream: u32,
    pub payload: Vec<u8>,
}

/// The frames the server sent so far, and whether it closed.
#[derive(Debug, Default)]
pub struct Log {
    pub frames: Vec<Frame>,
    pub closed: bool,
}

impl Log {
    /// Whether a frame of `kind` came on `stream`.
    pub fn has(&self, stream: u32, kind: u8) -> bool {
        self.on(stream, kind).next().is_some()
    }

    pub fn on(&self, stream: u32, kind: u8) -> impl Iterator<Item = &Frame> {
        self.frames
            .iter()
            .filter(move |f| f.stream == stream && f.kind == kind)
    }

    /// The first byte of the answer's header block on `stream`.
    pub fn status(&self, stream: u32) -> Option<u8> {
        self.on(stream, HEADERS).next().map(|f| f.payload[0])
    }

    pub fn reset(&self, stream: u32) -> Option<u32> {
        self.on(stream, RST_STREAM)
            .next()
            .map(|f| u32::from_be_bytes(f.payload[..4].try_into().unwrap()))
    }

    /// The last stream id and the code of each GOAWAY.
    pub fn goaways(&self) -> Vec<(u32, u32)> {
        self.on(0, GOAWAY)
            .map(|f| {
                (
                    u32::from_be_bytes(f.payload[..4].try_into().unwrap()) & 0x7fff_ffff,
                    u32::from_be_bytes(f.payload[4..8].try_into().unwrap()),
                )
            })
            .collect()
    }

    pub fn body(&self, stream: u32) -> Vec<u8> {
        self.on(stream, DATA)
            .flat_map(|f| f.payload.iter().copied())
            .collect()
    }

    /// Whether `stream` ended: its answer's last frame came, or it was
    /// reset.
    pub fn ended(&self, stream: u32) -> bool {
        self.reset(stream).is_some()
            || self.frames.iter().any(|f| {
                f.stream == stream && matches!(f.kind, DATA | HEADERS) && f.flags & END_STREAM != 0
            })
    }
}

pub struct Raw {
    io: TcpStream,
    buf: Vec<u8>,
    /// The server's SETTINGS, as (identifier, value).
    pub settings: Vec<(u16, u32)>,
}

impl Raw {
    /// Connects, sends the preface and empty SETTINGS.
    pub async fn open(addr: SocketAddr) -> Raw {
        let mut io = TcpStream::connect(addr).await.unwrap();
        io.set_nodelay(true).unwrap();
        let mut first = PREFACE.to_vec();
        first.extend(frame(SETTINGS, 0, 0, &[]));
        io.write_all(&first).await.unwrap();
        Raw {
            io,
            buf: Vec::new(),
            settings: Vec::new(),
        }
    }

    pub async fn send(&mut self, bytes: &[u8]) -> bool {
        self.io.write_all(bytes).await.is_ok()
    }

    /// Reads frames into `log` for `wait`, or until the server closes.
    pub async fn read_for(&mut self, log: &mut Log, wait: Duration) {
        self.until(log, wait, |_| false).await;
    }

    /// A frame parsed from what was read, if one is whole.
    pub fn parsed(&mut self) -> Option<Frame> {
        if self.buf.len() < 9 {
            return None;
        }
        let length = u32::from_be_bytes([0, self.buf[0], self.buf[1], self.buf[2]]) as usize;
        if self.buf.len() < 9 + length {
            return None;
        }
        let frame = Frame {
            kind: self.buf[3],
            flags: self.buf[4],
            stream: u32::from_be_bytes(self.buf[5..9].try_into().unwrap()) & 0x7fff_ffff,
            payload: self.buf[9..9 + length].to_vec(),
        };
        self.buf.drain(..9 + length);
        Some(frame)
    }

    /// Reads frames into `log` (acknowledging SETTINGS and PINGs, as any
    /// client does) until `done` holds, the server closes, or `wait`
    /// passes. Whether `done` held.
    pub async fn until(
        &mut self,
        log: &mut Log,
        wait: Duration,
        done: impl Fn(&Log) -> bool,
    ) -> bool {
        let deadline = tokio::time::Instant::now() + wait;
        loop {
            while let Some(f) = self.parsed() {
                if f.kind == SETTINGS && f.flags & ACK == 0 {
                    for setting in f.payload.chunks(6) {
                        self.settings.push((
                            u16::from_be_bytes([setting[0], setting[1]]),
                            u32::from_be_bytes(setting[2..6].try_into().unwrap()),
                        ));
                    }
                    let _ = self.io.write_all(&frame(SETTINGS, ACK, 0, &[])).await;
                }
                if f.kind == PING && f.flags & ACK == 0 {
                    let _ = self.io.write_all(&frame(PING, ACK, 0, &f.payload)).await;
                }
                log.frames.push(f);
            }
            if done(log) {
                return true;
            }
            if log.closed {
                return false;
            }
            let mut chunk = [0u8; 16384];
            match tokio::time::timeout_at(deadline, self.io.read(&mut chunk)).await {
                Err(_) => return false,
                Ok(Ok(0)) | Ok(Err(_)) => log.closed = true,
                Ok(Ok(n)) => self.buf.extend_from_slice(&chunk[..n]),
            }
        }
    }
}
