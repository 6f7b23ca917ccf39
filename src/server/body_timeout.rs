//! A request body whose client must keep sending it: no part of it for a
//! whole period ends the body with [`BodyTimeout`], which a reader answers
//! with `408 Request Timeout`.
//!
//! Without it, a client that sends a request's headers and part of its
//! body, then nothing, holds the handler that reads the body (and the
//! connection, and the place a `connections_per_ip` cap gave it) for as
//! long as the client stays connected: a slow-body attack, which nginx
//! bounds the same way (`client_body_timeout`, the time between two reads).

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use http_body::{Body, Frame, SizeHint};
use tokio::runtime::Handle;
use tokio::time::Sleep;

use crate::http::{BodyTimeout, BoxError};

/// `body`, ended with [`BodyTimeout`] when no part of it arrives for
/// `period` while it is read.
pub(super) struct Timed<B> {
    body: B,
    period: Duration,
    /// Set when a read finds nothing arrived, reset when a part arrives:
    /// a body that is there when it is read never arms a timer.
    waiting: Option<Pin<Box<Sleep>>>,
}

impl<B> Timed<B> {
    pub(super) fn new(body: B, period: Duration) -> Self {
        Self {
            body,
            period,
            waiting: None,
        }
    }
}

impl<B> Body for Timed<B>
where
    B: Body<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
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
                let waiting = this
                    .waiting
                    .get_or_insert_with(|| Box::pin(tokio::time::sleep(period)));
                match waiting.as_mut().poll(cx) {
                    Poll::Ready(()) => Poll::Ready(Some(Err(Box::new(BodyTimeout { period })))),
                    Poll::Pending => Poll::Pending,
                }
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
}
