//! The request body: streamed from the connection, read on demand with a byte
//! cap, and kept once read so the next reader sees the same bytes.

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http_body_util::BodyExt;
use http_body_util::combinators::BoxBody;

use super::HttpResponse;

/// The error type bodies are boxed with.
pub type BoxError = Box<dyn std::error::Error + Send + Sync>;

/// A body that could not be read.
#[derive(Debug, thiserror::Error)]
pub enum BodyError {
    /// The body is longer than the cap the reader set.
    #[error("the request body is larger than {limit} bytes")]
    TooLarge {
        /// The cap, in bytes.
        limit: usize,
    },
    /// The connection failed while the body was read.
    #[error("the request body could not be read: {0}")]
    Read(#[source] BoxError),
    /// The body was consumed by an earlier reader that did not keep it.
    #[error("the request body was already consumed")]
    Consumed,
}

/// Why the server ended a request's body: its client sent no part of it for
/// `period` (the server's header read timeout) while it was read. It is the
/// source of the [`BodyError::Read`] a reader gets, answered with 408.
#[derive(Debug, thiserror::Error)]
#[error("the client sent no part of the request body for {period:?}")]
pub struct BodyTimeout {
    /// How long the client sent nothing.
    pub period: Duration,
}

impl BodyError {
    /// The answer a server gives to this error: 413 for a body over the cap,
    /// 408 for one whose client stopped sending it ([`BodyTimeout`]), 400
    /// otherwise.
    pub fn to_response(&self) -> HttpResponse {
        match self {
            BodyError::TooLarge { .. } => HttpResponse::text("413 Payload Too Large").status(413),
            BodyError::Read(e) if e.is::<BodyTimeout>() => {
                HttpResponse::text("408 Request Timeout").status(408)
            }
            BodyError::Read(_) | BodyError::Consumed => {
                HttpResponse::text("400 Bad Request").status(400)
            }
        }
    }
}

impl From<BodyError> for HttpResponse {
    fn from(e: BodyError) -> Self {
        e.to_response()
    }
}

pub(crate) enum BodyState {
    /// Not read yet: the body, still on the connection.
    Streaming(BoxBody<Bytes, BoxError>),
    /// Found over a reader's cap as it arrived: the bytes read, and the
    /// rest, still on the connection, for a reader with a larger cap. Boxed,
    /// so that every request, which moves its body state with it, carries
    /// no more than a body not yet read.
    Partial(Box<(BytesMut, BoxBody<Bytes, BoxError>)>),
    Buffered(Bytes),
    Consumed,
}

impl BodyState {
    pub(crate) fn empty() -> Self {
        BodyState::Buffered(Bytes::new())
    }

    /// Reads the whole body, refusing more than `limit` bytes. A body that
    /// announces a larger `Content-Length` is refused before a byte is read.
    /// A body found over the cap as it arrives keeps what was read, so a
    /// later reader with a larger cap reads it whole: nothing is lost.
    pub(crate) async fn read(
        &mut self,
        limit: usize,
        content_length: Option<u64>,
    ) -> Result<Bytes, BodyError> {
        let announced_over = content_length.is_some_and(|n| n > limit as u64);
        match self {
            BodyState::Buffered(bytes) if bytes.len() > limit => {
                return Err(BodyError::TooLarge { limit });
            }
            BodyState::Buffered(bytes) => return Ok(bytes.clone()),
            BodyState::Consumed => return Err(BodyError::Consumed),
            BodyState::Streaming(_) if announced_over => {
                return Err(BodyError::TooLarge { limit });
            }
            BodyState::Partial(partial) if announced_over || partial.0.len() > limit => {
                return Err(BodyError::TooLarge { limit });
            }
            BodyState::Streaming(_) | BodyState::Partial(_) => {}
        }
        let (buf, body) = match std::mem::replace(self, BodyState::Consumed) {
            BodyState::Streaming(body) => (BytesMut::new(), body),
            BodyState::Partial(partial) => *partial,
            BodyState::Buffered(_) | BodyState::Consumed => {
                unreachable!("a body already read answered above")
            }
        };
        let mut reading = Reading {
            state: self,
            buf,
            body: Some(body),
        };
        let body = reading.body.as_mut().expect("set above");
        while let Some(frame) = body.frame().await {
            let frame = match frame {
                Ok(frame) => frame,
                Err(error) => {
                    // A body that failed is consumed: what it would give
                    // after its error is no body the client sent.
                    reading.body = None;
                    return Err(BodyError::Read(error));
                }
            };
            if let Ok(data) = frame.into_data() {
                reading.buf.extend_from_slice(&data);
                if reading.buf.len() > limit {
                    // Left as it is read so far, for a larger cap.
                    return Err(BodyError::TooLarge { limit });
                }
            }
        }
        reading.body = None;
        let buf = std::mem::take(&mut reading.buf);
        let bytes = buf.freeze();
        *reading.state = BodyState::Buffered(bytes.clone());
        Ok(bytes)
    }
}

/// A body being read: when the read ends before the body does (found over
/// its cap, or its future dropped while it waits, under a timeout), what
/// was read and the rest go back to the request, for the next reader.
struct Reading<'a> {
    state: &'a mut BodyState,
    buf: BytesMut,
    /// The rest of the body; `None` once the read is done with it.
    body: Option<BoxBody<Bytes, BoxError>>,
}

impl Drop for Reading<'_> {
    fn drop(&mut self) {
        if let Some(body) = self.body.take() {
            let buf = std::mem::take(&mut self.buf);
            *self.state = BodyState::Partial(Box::new((buf, body)));
        }
    }
}
