//! How long a connection may stay without a request.
//!
//! Each request a connection serves is counted when it arrives and when its
//! answer is made ([`Activity::begin`], whose [`Busy`] guard counts the
//! end), and each write of the connection's socket that carries an answer
//! is counted too, with whether the last one had to wait for the client
//! ([`Watched`]): an answer made is not an answer sent, and a large one
//! read slowly by its client is still going out periods after it was made.
//! On HTTP/1 every write carries an answer. On HTTP/2 the server also
//! writes frames of its own (a `PING` acknowledged, `SETTINGS`
//! acknowledged, `WINDOW_UPDATE`, `GOAWAY`), which a peer can have it write
//! as often as it likes: only the frames of an answer (`HEADERS`,
//! `CONTINUATION`, `DATA` with a payload) count. Each count is a relaxed
//! store to the connection's own counters. The connection's task looks at
//! the counts once a period ([`IdleWatch::wait`]) rather than being woken
//! by every request.
//!
//! On HTTP/2 the reads are followed too, for the request bodies' timer
//! ([`Activity::bodies`]): whether a byte of a body came in a `DATA` frame,
//! on any stream (empty frames and padding are no part of a body), and
//! whether the client has room left in the connection's flow-control
//! window.

use std::io::{self, IoSlice};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::frames::{Frames, INITIAL_WINDOW, PREFACE, Seen};

/// The requests one connection has begun and ended, and the writes that
/// carried its answers out.
#[derive(Clone, Default)]
pub(super) struct Activity(Arc<Counts>);

#[derive(Default)]
struct Counts {
    begun: AtomicU64,
    ended: AtomicU64,
    writes: AtomicU64,
    /// On HTTP/2, what [`Activity::bodies`] reads. (One word and no clock,
    /// so that the counts keep the size of allocation they had: a larger
    /// one moved the HTTP bench's count by some 200 instructions a request,
    /// through the allocator.)
    bodies: AtomicU64,
    /// Whether the last write waited for room the client has not made.
    blocked: AtomicBool,
    /// Whether the client sent the whole HTTP/2 preface.
    http2: AtomicBool,
}

/// How an HTTP/2 connection's request bodies stand ([`Activity::bodies`]):
/// two readings that are equal saw nothing move between them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(super) struct Bodies(u64);

impl Bodies {
    /// `moves` moves, the client's room in the connection's window
    /// `window`.
    fn new(moves: u64, window: i64) -> Self {
        Self(moves << 1 | u64::from(window <= 0))
    }

    /// Whether the client had room to send `DATA` in the connection's
    /// window: when it has none, a body waits for the server, not its
    /// client (other streams' data, which their handlers have not read,
    /// fills the window).
    pub(super) fn client_has_room(self) -> bool {
        self.0 & 1 == 0
    }
}

/// Counts the end of one request when dropped: when its answer is made, or
/// when its future is dropped unanswered (a reset HTTP/2 stream).
pub(super) struct Busy(Activity);

impl Activity {
    /// Counts a request that arrived, until the guard drops.
    pub(super) fn begin(&self) -> Busy {
        self.0.begun.fetch_add(1, Relaxed);
        Busy(self.clone())
    }

    /// `io`, whose writes count as this connection's activity.
    pub(super) fn watch<S>(&self, io: S) -> Watched<S> {
        Watched {
            io,
            activity: self.clone(),
            protocol: Protocol::Sniffing(0),
        }
    }

    /// How the request bodies of this HTTP/2 connection stand: how often
    /// they moved (a byte of a body came in a `DATA` frame for any stream,
    /// or the server made room in the connection's window for a client
    /// that had none), and whether the client has room to
    /// send in the connection's window, as the frames each way tell it.
    pub(super) fn bodies(&self) -> Bodies {
        Bodies(self.0.bodies.load(Relaxed))
    }

    fn snapshot(&self) -> Snapshot {
        // The end first: a request counted as ended is also counted as
        // begun, so the pair never shows more ended than begun.
        let ended = self.0.ended.load(Relaxed);
        Snapshot {
            begun: self.0.begun.load(Relaxed),
            ended,
            writes: self.0.writes.load(Relaxed),
            blocked: self.0.blocked.load(Relaxed),
        }
    }

    fn wrote(&self, written: &Poll<io::Result<usize>>) {
        match written {
            Poll::Pending => self.0.blocked.store(true, Relaxed),
            Poll::Ready(result) => {
                if matches!(result, Ok(n) if *n > 0) {
                    self.0.writes.fetch_add(1, Relaxed);
                }
                self.0.blocked.store(false, Relaxed);
            }
        }
    }

    /// A write of an HTTP/2 connection, which counts as a write only when
    /// it carried some of an answer's frames.
    fn wrote_frames(&self, written: &Poll<io::Result<usize>>, answer: bool) {
        match written {
            Poll::Pending => self.0.blocked.store(true, Relaxed),
            Poll::Ready(_) => {
                if answer {
                    self.0.writes.fetch_add(1, Relaxed);
                }
                self.0.blocked.store(false, Relaxed);
            }
        }
    }
}

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.0.ended.fetch_add(1, Relaxed);
    }
}

/// What a connection had done when its watch last looked.
#[derive(Clone, Copy, Default, PartialEq, Eq)]
struct Snapshot {
    begun: u64,
    ended: u64,
    writes: u64,
    blocked: bool,
}

impl Snapshot {
    /// Whether nothing arrived, ended or went out since `before`.
    fn still(&self, before: &Snapshot) -> bool {
        (self.begun, self.ended, self.writes) == (before.begun, before.ended, before.writes)
    }
}

/// A connection's socket, whose writes that carried an answer are counted
/// in its [`Activity`]: every write that moved bytes on HTTP/1, the writes
/// that carried an answer's frames on HTTP/2.
pub(super) struct Watched<S> {
    io: S,
    activity: Activity,
    protocol: Protocol,
}

/// What a connection speaks, as its first bytes read tell.
enum Protocol {
    /// The bytes read so far (this many) are the start of the HTTP/2
    /// preface.
    Sniffing(u8),
    /// Anything else: HTTP/1, which an HTTP/1 upgrade leaves to its new
    /// protocol.
    Http1,
    /// The client sent the HTTP/2 preface (the server has no TLS, so prior
    /// knowledge is the only way to it, as hyper-util's server tells it).
    Http2(Box<Http2>),
}

/// The frames an HTTP/2 connection read and wrote, followed.
struct Http2 {
    read: Frames,
    written: Frames,
    /// The client's room in the connection's window: what it opened with,
    /// and the server's `WINDOW_UPDATE`s on the connection, less the
    /// `DATA` that came.
    window: i64,
    /// How often the request bodies moved.
    moves: u64,
}

impl Http2 {
    /// Counts a move of the request bodies, and publishes how they stand.
    fn moved(&mut self, activity: &Activity) {
        self.moves += 1;
        self.publish(activity);
    }

    /// Publishes how the request bodies stand.
    fn publish(&self, activity: &Activity) {
        let bodies = Bodies::new(self.moves, self.window);
        activity.0.bodies.store(bodies.0, Relaxed);
    }
}

impl<S> Watched<S> {
    /// Follows `bytes`, the next ones read from the client, until they tell
    /// HTTP/1 from HTTP/2, and then HTTP/2's frames.
    fn came(&mut self, mut bytes: &[u8]) {
        if let Protocol::Sniffing(matched) = self.protocol {
            let matched = usize::from(matched);
            let take = (PREFACE.len() - matched).min(bytes.len());
            self.protocol = if bytes[..take] != PREFACE[matched..matched + take] {
                Protocol::Http1
            } else if matched + take < PREFACE.len() {
                // Less than 24.
                Protocol::Sniffing((matched + take) as u8)
            } else {
                self.activity.0.http2.store(true, Relaxed);
                Protocol::Http2(Box::new(Http2 {
                    read: Frames::default(),
                    written: Frames::default(),
                    window: INITIAL_WINDOW,
                    moves: 0,
                }))
            };
            bytes = &bytes[take..];
        }
        if let Protocol::Http2(frames) = &mut self.protocol {
            let mut seen = Seen::default();
            frames.read.follow(bytes, &mut seen);
            frames.window = frames.window.saturating_sub_unsigned(seen.data_length);
            if seen.data {
                frames.moved(&self.activity);
            } else if seen.data_length > 0 {
                frames.publish(&self.activity);
            }
        }
    }

    /// Counts a write of HTTP/2 frames that wrote the first `n` bytes of
    /// `bufs`. (Apart, as the followed reads are.)
    #[inline(never)]
    fn wrote_frames<'a>(
        &mut self,
        written: &Poll<io::Result<usize>>,
        bufs: impl IntoIterator<Item = &'a [u8]>,
    ) {
        let Protocol::Http2(frames) = &mut self.protocol else {
            return;
        };
        let mut seen = Seen::default();
        if let Poll::Ready(Ok(mut n)) = *written {
            for buf in bufs {
                if n == 0 {
                    break;
                }
                let part = &buf[..n.min(buf.len())];
                frames.written.follow(part, &mut seen);
                n -= part.len();
            }
        }
        self.activity.wrote_frames(written, seen.answer);
        if seen.window_increment > 0 {
            // Room for a client that had none moves its bodies on; room
            // added to what it had (the server giving back the window a
            // frame of padding took, say) changes nothing it can do.
            let had_none = frames.window <= 0;
            frames.window = frames.window.saturating_add_unsigned(seen.window_increment);
            if had_none {
                frames.moved(&self.activity);
            } else {
                frames.publish(&self.activity);
            }
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Watched<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        if let Protocol::Http1 = self.protocol {
            return Pin::new(&mut self.io).poll_read(cx, buf);
        }
        self.poll_read_followed(cx, buf)
    }
}

impl<S: AsyncRead + Unpin> Watched<S> {
    /// A read that is followed: the first ones of any connection, and
    /// every one of HTTP/2's. Apart, so that HTTP/1's reads stay a test and
    /// a call.
    #[inline(never)]
    fn poll_read_followed(
        &mut self,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let read = Pin::new(&mut self.io).poll_read(cx, buf);
        if let Poll::Ready(Ok(())) = read {
            self.came(&buf.filled()[before..]);
        }
        read
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Watched<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write(cx, buf);
        if let Protocol::Http2(_) = self.protocol {
            self.wrote_frames(&written, [buf]);
        } else {
            self.activity.wrote(&written);
        }
        written
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let written = Pin::new(&mut self.io).poll_write_vectored(cx, bufs);
        if let Protocol::Http2(_) = self.protocol {
            self.wrote_frames(&written, bufs.iter().map(|buf| &**buf));
        } else {
            self.activity.wrote(&written);
        }
        written
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.io).poll_shutdown(cx)
    }
}

/// Why a connection's wait ended.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Quiet {
    /// No request arrived within the period after the connection opened,
    /// and it is no HTTP/2 connection (whose client sent its whole
    /// preface): one that sent part of a request, or nothing.
    NoRequest,
    /// No request was in flight, none arrived, and nothing was written, for
    /// a whole period: an HTTP/2 connection that sent no request at all
    /// among them, which is told so with a GOAWAY (RFC 9113, 6.8).
    Idle,
    /// An answer waited to be written, the client making no room for any of
    /// it, for two whole periods: a client that stopped reading.
    Stalled,
}

/// Watches one connection's [`Activity`], a period at a time.
pub(super) struct IdleWatch {
    activity: Activity,
    period: Duration,
    last: Snapshot,
    /// Periods in a row that a write waited without a byte going out.
    stalled: u32,
}

impl IdleWatch {
    pub(super) fn new(activity: Activity, period: Duration) -> Self {
        Self {
            activity,
            period,
            last: Snapshot::default(),
            stalled: 0,
        }
    }

    /// Resolves once the connection has sent no request for `period` after
    /// it opened; or has been without a request in flight, without a new
    /// one and without writing a byte for a whole period (between one and
    /// two periods after its last answer went out); or has had an answer
    /// waiting for its client to make room, and none made, for two whole
    /// periods. A client that reads a large answer slowly makes room, a
    /// little at a time, and keeps its connection.
    pub(super) async fn wait(&mut self) -> Quiet {
        loop {
            tokio::time::sleep(self.period).await;
            let now = self.activity.snapshot();
            if now.begun == 0 && !self.activity.0.http2.load(Relaxed) {
                return Quiet::NoRequest;
            }
            let still = now.still(&self.last);
            self.stalled = if still && now.blocked {
                self.stalled + 1
            } else {
                0
            };
            if self.stalled >= 2 {
                return Quiet::Stalled;
            }
            if still && !now.blocked && now.begun == now.ended {
                return Quiet::Idle;
            }
            self.last = now;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::frames::tests::frame;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// A watched server side whose client has sent `first`, read whole.
    async fn server_reading(
        first: &[u8],
    ) -> (
        Activity,
        Watched<tokio::io::DuplexStream>,
        tokio::io::DuplexStream,
    ) {
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let activity = Activity::default();
        let mut watched = activity.watch(server);
        client.write_all(first).await.unwrap();
        let mut read = vec![0; first.len()];
        watched.read_exact(&mut read).await.unwrap();
        (activity, watched, client)
    }

    #[tokio::test]
    async fn on_http1_every_write_counts() {
        let (activity, mut watched, _client) =
            server_reading(b"PRI / HTTP/1.1\r\nHost: a\r\n\r\n").await;
        watched.write_all(&frame(6, 0, b"pingpong")).await.unwrap();
        watched.write_all(b"HTTP/1.1 200 OK\r\n").await.unwrap();
        assert_eq!(activity.snapshot().writes, 2);
    }

    #[tokio::test]
    async fn on_http2_only_an_answers_frames_count() {
        let mut first = PREFACE.to_vec();
        first.extend(frame(4, 0, &[]));
        let (activity, mut watched, _client) = server_reading(&first).await;
        let control = [
            frame(4, 0, &[0, 3, 0, 0, 0, 100]),
            frame(8, 0, &[0, 0xf, 0, 1]),
            frame(4, 0, &[]),
            frame(6, 0, b"pingpong"),
        ]
        .concat();
        watched.write_all(&control).await.unwrap();
        let slices = [IoSlice::new(&control[..20]), IoSlice::new(&control[20..])];
        let n = watched.write_vectored(&slices).await.unwrap();
        watched.write_all(&control[n..]).await.unwrap();
        assert_eq!(activity.snapshot().writes, 0);
        // HEADERS, split over two writes (each carries some), then DATA.
        let headers = frame(1, 1, b"\x88\x0f\x10\x02hi");
        watched.write_all(&headers[..4]).await.unwrap();
        watched.write_all(&headers[4..]).await.unwrap();
        watched.write_all(&frame(0, 1, b"hi")).await.unwrap();
        assert_eq!(activity.snapshot().writes, 3);
    }

    #[tokio::test]
    async fn an_http2_connections_bodies_move_with_its_data_and_window() {
        let mut first = PREFACE.to_vec();
        first.extend(frame(4, 0, &[]));
        let (activity, mut watched, mut client) = server_reading(&first).await;
        let start = activity.bodies();
        assert!(start.client_has_room());
        // HEADERS and a PING move nothing.
        let request = [
            frame(1, 1, b"\x83\x86\x84\x41\x01a"),
            frame(6, 0, b"pingpong"),
        ]
        .concat();
        client.write_all(&request).await.unwrap();
        watched
            .read_exact(&mut vec![0; request.len()])
            .await
            .unwrap();
        assert_eq!(activity.bodies(), start);
        // DATA for any stream moves them, a part of a frame too.
        let data = frame(0, 3, &[b'x'; 65_000]);
        client.write_all(&data[..100]).await.unwrap();
        watched.read_exact(&mut [0; 100]).await.unwrap();
        let after_header = activity.bodies();
        assert_ne!(after_header, start);
        client.write_all(&data[100..]).await.unwrap();
        watched
            .read_exact(&mut vec![0; data.len() - 100])
            .await
            .unwrap();
        let after_payload = activity.bodies();
        assert_ne!(after_payload, after_header);
        assert!(after_payload.client_has_room());
        // The rest of the window's 65,535 bytes: the client has no room.
        let data = frame(0, 3, &[b'x'; 535]);
        client.write_all(&data).await.unwrap();
        watched.read_exact(&mut vec![0; data.len()]).await.unwrap();
        let full = activity.bodies();
        assert!(!full.client_has_room());
        // The server's WINDOW_UPDATE on a stream gives no room on the
        // connection; one on the connection does, and is a move.
        watched
            .write_all(&frame(8, 3, &[0, 0, 0, 9]))
            .await
            .unwrap();
        assert_eq!(activity.bodies(), full);
        watched
            .write_all(&frame(8, 0, &[0, 0, 0, 1]))
            .await
            .unwrap();
        let opened = activity.bodies();
        assert_ne!(opened, full);
        assert!(opened.client_has_room());
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_without_requests_is_found_at_the_first_period() {
        let started = tokio::time::Instant::now();
        let mut watch = IdleWatch::new(Activity::default(), Duration::from_secs(30));
        assert_eq!(watch.wait().await, Quiet::NoRequest);
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    #[tokio::test(start_paused = true)]
    async fn an_answer_going_out_keeps_the_connection_and_one_stuck_drops_it() {
        let activity = Activity::default();
        let started = tokio::time::Instant::now();
        let mut watch = IdleWatch::new(activity.clone(), Duration::from_secs(30));
        drop(activity.begin());
        // Answered at once, then written a little every 20 s for 100 s,
        // the writes between waiting for the client.
        let writer = activity.clone();
        let writing = tokio::spawn(async move {
            for _ in 0..5 {
                writer.wrote(&Poll::Pending);
                tokio::time::sleep(Duration::from_secs(20)).await;
                writer.wrote(&Poll::Ready(Ok(1)));
            }
            // Then stuck: the client makes no more room.
            writer.wrote(&Poll::Pending);
        });
        assert_eq!(watch.wait().await, Quiet::Stalled);
        writing.await.unwrap();
        // Last written at 100 s; seen moving at 120 s; still at 150 and
        // 180 s.
        assert_eq!(started.elapsed(), Duration::from_secs(180));
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_that_went_out_whole_leaves_the_connection_idle() {
        let activity = Activity::default();
        let started = tokio::time::Instant::now();
        let mut watch = IdleWatch::new(activity.clone(), Duration::from_secs(30));
        drop(activity.begin());
        activity.wrote(&Poll::Pending);
        activity.wrote(&Poll::Ready(Ok(10)));
        assert_eq!(watch.wait().await, Quiet::Idle);
        assert_eq!(started.elapsed(), Duration::from_secs(60));
    }

    #[tokio::test(start_paused = true)]
    async fn idle_is_a_whole_period_with_nothing_in_flight_and_nothing_new() {
        let activity = Activity::default();
        let started = tokio::time::Instant::now();
        let mut watch = IdleWatch::new(activity.clone(), Duration::from_secs(30));
        drop(activity.begin());
        // A request in flight across periods keeps the connection.
        let busy = activity.begin();
        let releaser = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(100)).await;
            drop(busy);
        });
        assert_eq!(watch.wait().await, Quiet::Idle);
        releaser.await.unwrap();
        // Ended at 100 s; seen at 120 s; unchanged and idle at 150 s.
        assert_eq!(started.elapsed(), Duration::from_secs(150));
    }
}
