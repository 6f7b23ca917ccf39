//! A raw HTTP/1 client: it writes its own bytes (pipelines, smuggling
//! shapes, heads cut anywhere) and reads the server's answers off the wire
//! as they come; and the routes such tests count on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use suprnova::{HttpResponse, Request};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// How long any one answer, or the close of a connection, may take.
pub const WAIT: Duration = Duration::from_secs(5);

/// One answer read off the wire.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    /// The head as it came, status line included.
    pub head: String,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    pub fn all(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

/// Where `needle` first stands in `haystack`.
pub fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// One connection, and what it read that no answer took yet.
pub struct Conn {
    pub stream: TcpStream,
    pub buf: Vec<u8>,
}

impl Conn {
    pub async fn open(addr: SocketAddr) -> Self {
        let stream = TcpStream::connect(addr).await.unwrap();
        stream.set_nodelay(true).unwrap();
        Self {
            stream,
            buf: Vec::new(),
        }
    }

    /// Writes `bytes`; an error (the server closed) is returned, not a panic.
    pub async fn send(&mut self, bytes: impl AsRef<[u8]>) -> std::io::Result<()> {
        self.stream.write_all(bytes.as_ref()).await
    }

    /// Reads what comes next: `Some(true)` when bytes came, `Some(false)` at
    /// the end of the connection (or a reset), `None` when `wait` passed.
    pub async fn more(&mut self, wait: Duration) -> Option<bool> {
        let mut chunk = vec![0; 64 * 1024];
        match tokio::time::timeout(wait, self.stream.read(&mut chunk)).await {
            Err(_) => None,
            Ok(Ok(0)) | Ok(Err(_)) => Some(false),
            Ok(Ok(n)) => {
                self.buf.extend_from_slice(&chunk[..n]);
                Some(true)
            }
        }
    }

    /// The next answer, its body read by its `Content-Length` (none for an
    /// answer to `HEAD`, a 1xx, a 204 or a 304; an answer with no length
    /// runs to the close); `None` when the server closes the connection
    /// before a byte of it. Panics when nothing comes within [`WAIT`], the
    /// connection ends inside an answer, or an answer is chunked (the
    /// server's answers carry a length).
    pub async fn answer(&mut self, to_head: bool) -> Option<Answer> {
        let end = loop {
            if let Some(end) = find(&self.buf, b"\r\n\r\n") {
                break end;
            }
            match self.more(WAIT).await {
                None => panic!(
                    "no answer within {WAIT:?}; got {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
                Some(false) if self.buf.is_empty() => return None,
                Some(false) => panic!(
                    "the connection ended inside an answer: {:?}",
                    String::from_utf8_lossy(&self.buf)
                ),
                Some(true) => {}
            }
        };
        let head = String::from_utf8_lossy(&self.buf[..end]).into_owned();
        self.buf.drain(..end + 4);
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        let status: u16 = status_line
            .split(' ')
            .nth(1)
            .and_then(|s| s.parse().ok())
            .unwrap_or_else(|| panic!("a status line: {status_line:?}"));
        let headers: Vec<(String, String)> = lines
            .map(|line| {
                let (name, value) = line.split_once(':').expect("a header line");
                (name.trim().to_owned(), value.trim().to_owned())
            })
            .collect();
        let mut answer = Answer {
            status,
            head: head.clone(),
            headers,
            body: Vec::new(),
        };
        assert_eq!(
            answer.header("transfer-encoding"),
            None,
            "the server's answers carry a length"
        );
        let bodiless = to_head || status < 200 || status == 204 || status == 304;
        if !bodiless {
            if let Some(length) = answer.header("content-length") {
                let length: usize = length.parse().unwrap();
                while self.buf.len() < length {
                    match self.more(WAIT).await {
                        Some(true) => {}
                        other => panic!(
                            "the body of {answer:?} cut short ({other:?}): {:?}",
                            String::from_utf8_lossy(&self.buf)
                        ),
                    }
                }
                answer.body = self.buf.drain(..length).collect();
            } else {
                while self.more(WAIT).await == Some(true) {}
                answer.body = std::mem::take(&mut self.buf);
            }
        }
        Some(answer)
    }

    /// Whether the server ends the connection within [`WAIT`] with nothing
    /// more sent.
    pub async fn closed(&mut self) -> bool {
        self.buf.is_empty() && matches!(self.more(WAIT).await, Some(false)) && self.buf.is_empty()
    }

    /// Whether the connection is still open, and silent, after `wait`.
    pub async fn open_after(&mut self, wait: Duration) -> bool {
        self.more(wait).await.is_none() && self.buf.is_empty()
    }
}

/// Sends `bytes` on a new connection and reads one answer.
pub async fn one_answer(addr: SocketAddr, bytes: impl AsRef<[u8]>) -> (Conn, Option<Answer>) {
    let mut conn = Conn::open(addr).await;
    conn.send(bytes).await.unwrap();
    let answer = conn.answer(false).await;
    (conn, answer)
}

/// Counts the requests a route serves.
#[derive(Clone, Default)]
pub struct Served(pub Arc<AtomicUsize>);

impl Served {
    pub fn count(&self) -> usize {
        self.0.load(Ordering::SeqCst)
    }

    /// A handler answering `text`, counted here.
    pub fn route(
        &self,
        text: &'static str,
    ) -> impl Fn(Request) -> std::future::Ready<HttpResponse> + Clone + Send + Sync + 'static {
        let count = self.0.clone();
        move |_req: Request| {
            count.fetch_add(1, Ordering::SeqCst);
            std::future::ready(HttpResponse::text(text))
        }
    }
}

/// A request that, read as the next request on its connection, reaches
/// `/smuggled`.
pub const SMUGGLED: &str = "GET /smuggled HTTP/1.1\r\nHost: a\r\n\r\n";
