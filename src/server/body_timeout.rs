//! A request body whose client must keep sending it: no part of it for a
//! whole period ends the body with [`BodyTimeout`], which a reader answers
//! with `408 Request Timeout`.
//!
//! Without it, a client that sends a request's headers and part of its
//! body, then nothing, holds the handler that reads the body (and the
//! connection, and the place a `connections_per_ip` cap gave it) for as
//! long as the client stays connected: a slow-body attack, which nginx
//! bounds the same way (`client_body_timeout`, the time between two reads).
//!
//! On HTTP/2 a stream's client may send only as much as the server's
//! flow-control windows let it, and other streams may have filled the
//! connection's window: a body there is timed out only after a whole period
//! in which no data came for any stream while the client had room to send
//! ([`ConnectionData`]), between one and two periods after the
//! connection's last data.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::runtime::Handle;
use tokio::time::{Instant, Sleep};

use super::idle::{Activity, Bodies};
use crate::http::{BodyTimeout, BoxError};

/// `body`, ended with [`BodyTimeout`] when no part of it arrives for
/// `period` while it is read, and nothing else (`P`) puts the end off.
pub(super) struct Timed<B, P = OwnParts> {
    body: B,
    period: Duration,
    /// Set when a read finds nothing arrived, reset when a part arrives:
    /// a body that is there when it is read never arms a timer.
    waiting: Option<Pin<Box<Sleep>>>,
    /// What else puts the end off: on HTTP/2, the connection's data.
    progress: P,
}

/// What, beside a body's own parts coming, puts off its timeout.
pub(super) trait Progress {
    /// Notes how things stand as the body starts to wait.
    fn armed(&mut self);

    /// Whether the body, having waited a whole period with none of it
    /// coming, is to wait a period more; notes how things stand if so.
    fn put_off(&mut self) -> bool;
}

/// An HTTP/1 body's: nothing but its own parts.
pub(super) struct OwnParts;

impl Progress for OwnParts {
    fn armed(&mut self) {}

    fn put_off(&mut self) -> bool {
        false
    }
}

/// An HTTP/2 body's: its connection's data, for any stream, and the room
/// its client had to send it.
pub(super) struct ConnectionData {
    connection: Activity,
    /// How the connection's bodies stood when the body's period began.
    seen: Bodies,
}

impl Progress for ConnectionData {
    fn armed(&mut self) {
        self.seen = self.connection.bodies();
    }

    /// Put off when the connection's bodies moved in the period, or when
    /// the client has no room to send: it waits for the server.
    fn put_off(&mut self) -> bool {
        let now = self.connection.bodies();
        let moved = now != self.seen || !now.client_has_room();
        self.seen = now;
        moved
    }
}

impl<B> Timed<B> {
    /// An HTTP/1 body: no part of it for `period` ends it.
    pub(super) fn new(body: B, period: Duration) -> Self {
        Self {
            body,
            period,
            waiting: None,
            progress: OwnParts,
        }
    }
}

impl<B> Timed<B, ConnectionData> {
    /// An HTTP/2 body on the connection whose frames `connection` follows:
    /// a whole `period` with no `DATA` on the connection, for any stream,
    /// while its client had room in the connection's window, ends it.
    pub(super) fn on_http2(body: B, period: Duration, connection: Activity) -> Self {
        Self {
            body,
            period,
            waiting: None,
            progress: ConnectionData {
                connection,
                seen: Bodies::default(),
            },
        }
    }
}

impl<B, P> Body for Timed<B, P>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
    P: Progress + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = &mut *self;
        match Pin::new(&mut this.body).poll_frame(cx) {
            Poll::Ready(frame) => {
                this.waiting = None;
                Poll::Ready(frame.map(|frame| frame.map_err(Into::into)))
            }
            // A body read outside the runtime (a thread of the handler's
            // own) has no timer to arm, and waits as an untimed one does.
            Poll::Pending if this.waiting.is_none() && Handle::try_current().is_err() => {
                Poll::Pending
            }
            Poll::Pending => {
                let period = this.period;
                let waiting = this.waiting.get_or_insert_with(|| {
                    this.progress.armed();
                    Box::pin(tokio::time::sleep(period))
                });
                while waiting.as_mut().poll(cx).is_ready() {
                    if !this.progress.put_off() {
                        return Poll::Ready(Some(Err(Box::new(BodyTimeout { period }))));
                    }
                    waiting.as_mut().reset(Instant::now() + period);
                }
                Poll::Pending
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::server::frames::PREFACE;
    use crate::server::frames::tests::frame;
    use http_body_util::{BodyExt, StreamBody};

    /// A body of `parts`, each sent after waiting its delay.
    fn paced(parts: Vec<(u64, &'static str)>) -> impl Body<Data = Bytes, Error = BoxError> + Unpin {
        let stream = futures_util::stream::unfold(parts.into_iter(), |mut parts| async move {
            let (delay, part) = parts.next()?;
            tokio::time::sleep(Duration::from_secs(delay)).await;
            Some((Ok::<_, BoxError>(Frame::data(Bytes::from(part))), parts))
        });
        StreamBody::new(Box::pin(stream))
    }

    #[test]
    fn a_body_read_outside_the_runtime_waits_untimed() {
        // Polled on a thread with no runtime: nothing arrived, no timer can
        // be armed, and the read waits (it used to panic arming one).
        // Nothing at the first read, a part at the second.
        let mut reads = 0;
        let stream = futures_util::stream::poll_fn(move |_| {
            reads += 1;
            match reads {
                1 => Poll::Pending,
                _ => Poll::Ready(Some(Ok::<_, BoxError>(Frame::data(Bytes::from("a"))))),
            }
        });
        let mut timed = Timed::new(StreamBody::new(stream), Duration::from_secs(30));
        let waker = futures_util::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(Pin::new(&mut timed).poll_frame(&mut cx).is_pending());
        let Poll::Ready(Some(Ok(frame))) = Pin::new(&mut timed).poll_frame(&mut cx) else {
            panic!("the part that came is read");
        };
        assert_eq!(frame.into_data().unwrap(), "a");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_keeps_coming_is_read_whole() {
        // Each part within the period, the whole well past it.
        let body = paced(vec![(20, "a"), (20, "b"), (20, "c")]);
        let read = Timed::new(body, Duration::from_secs(30)).collect().await;
        assert_eq!(read.unwrap().to_bytes(), "abc");
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_that_stops_for_a_period_ends_with_the_timeout() {
        let started = tokio::time::Instant::now();
        let body = paced(vec![(0, "a"), (31, "b")]);
        let error = Timed::new(body, Duration::from_secs(30))
            .collect()
            .await
            .expect_err("the body stopped for longer than the period");
        let timeout = error.downcast::<BodyTimeout>().expect("a BodyTimeout");
        assert_eq!(timeout.period, Duration::from_secs(30));
        assert_eq!(started.elapsed(), Duration::from_secs(30));
    }

    /// A DATA frame of `length` bytes on stream 3.
    fn data(length: usize) -> Vec<u8> {
        frame(0, 3, &vec![b'x'; length])
    }

    /// A WINDOW_UPDATE of `increment` on the connection.
    fn window_update(increment: u32) -> Vec<u8> {
        frame(8, 0, &increment.to_be_bytes())
    }

    #[tokio::test(start_paused = true)]
    async fn an_http2_body_waits_while_the_connection_moves_or_has_no_room() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let period = Duration::from_secs(30);
        let activity = Activity::default();
        let (mut client, server) = tokio::io::duplex(1 << 20);
        let mut server = activity.watch(server);
        client.write_all(PREFACE).await.unwrap();
        server.read_exact(&mut [0; 24]).await.unwrap();
        // Another stream's data every 20 s for 100 s, then the rest of the
        // window (65,535 bytes in all) at 130 s, then room at 250 s.
        let connection = tokio::spawn(async move {
            for _ in 0..5 {
                tokio::time::sleep(Duration::from_secs(20)).await;
                client.write_all(&data(100)).await.unwrap();
                server.read_exact(&mut [0; 109]).await.unwrap();
            }
            tokio::time::sleep(Duration::from_secs(30)).await;
            client.write_all(&data(65_035)).await.unwrap();
            server.read_exact(&mut vec![0; 65_044]).await.unwrap();
            tokio::time::sleep(Duration::from_secs(120)).await;
            server.write_all(&window_update(1)).await.unwrap();
            (client, server)
        });
        let started = tokio::time::Instant::now();
        let never = StreamBody::new(futures_util::stream::pending::<
            Result<Frame<Bytes>, BoxError>,
        >());
        let error = Timed::on_http2(never, period, activity)
            .collect()
            .await
            .expect_err("the connection stopped");
        assert!(error.is::<BodyTimeout>());
        // Periods from 0: moved in each up to 120 s, and at 130 s; no room
        // from 130 to 250 s; room made at 250 s, seen at 270 s; still at
        // 300 s.
        assert_eq!(started.elapsed(), Duration::from_secs(300));
        connection.await.unwrap();
    }
}
