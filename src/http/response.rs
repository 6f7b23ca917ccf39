//! `HttpResponse` and `Response`, the value every handler and middleware
//! returns.

use bytes::Bytes;
use http::header::{CONTENT_LENGTH, CONTENT_TYPE, HeaderName, HeaderValue, TRANSFER_ENCODING};
use http::{HeaderMap, StatusCode};
use http_body_util::Full;

/// What a handler or middleware returns. `Err` short-circuits: a middleware
/// that returns `Err(response)` answers with it, and the middleware after it
/// and the handler do not run.
pub type Response = Result<HttpResponse, HttpResponse>;

/// An HTTP response with a buffered body.
///
/// ```
/// use suprnova::HttpResponse;
///
/// let r = HttpResponse::text("blocked").status(429).header("Retry-After", "7");
/// assert_eq!(r.status_code(), 429);
/// assert_eq!(r.header_str("retry-after"), Some("7"));
/// assert_eq!(r.body_text(), "blocked");
/// ```
#[derive(Debug, Clone)]
pub struct HttpResponse {
    status: StatusCode,
    /// On the heap, as a request's parts are: a response is moved out of
    /// every future it passes back through, and a `HeaderMap` is 96 bytes
    /// of its 144. Boxed, a request in process costs about 230 instructions
    /// fewer (the instructions bench).
    headers: Box<HeaderMap>,
    body: Bytes,
    extensions: http::Extensions,
}

impl Default for HttpResponse {
    fn default() -> Self {
        Self::new()
    }
}

impl HttpResponse {
    /// An empty `200 OK`.
    pub fn new() -> Self {
        Self {
            status: StatusCode::OK,
            headers: Box::new(HeaderMap::new()),
            body: Bytes::new(),
            extensions: http::Extensions::new(),
        }
    }

    /// A `200 OK` with a `text/plain; charset=utf-8` body.
    pub fn text(body: impl Into<String>) -> Self {
        let mut r = Self::new();
        r.body = Bytes::from(body.into());
        r.headers.insert(
            CONTENT_TYPE,
            HeaderValue::from_static("text/plain; charset=utf-8"),
        );
        r
    }

    /// A `200 OK` with a JSON body. A value that does not serialize gives a
    /// 500 (and a log line), never a panic.
    pub fn json(value: impl serde::Serialize) -> Self {
        match serde_json::to_vec(&value) {
            Ok(body) => {
                let mut r = Self::new();
                r.body = Bytes::from(body);
                r.headers
                    .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
                r
            }
            Err(e) => {
                tracing::error!(error = %e, "response body did not serialize to JSON");
                Self::internal_server_error()
            }
        }
    }

    /// The `500` every failure of the crate's own answers with (a handler
    /// that panicked, a router with registration errors, an invalid
    /// limit).
    pub(crate) fn internal_server_error() -> Self {
        Self::text("500 Internal Server Error").status(500)
    }

    /// A response with raw bytes and no content type.
    pub fn bytes(body: impl Into<Bytes>) -> Self {
        let mut r = Self::new();
        r.body = body.into();
        r
    }

    /// Sets the status code. A code outside 100..=999 becomes 500 (and a log
    /// line).
    pub fn status(mut self, code: u16) -> Self {
        self.status = StatusCode::from_u16(code).unwrap_or_else(|_| {
            tracing::error!(code, "invalid HTTP status code; answering 500");
            StatusCode::INTERNAL_SERVER_ERROR
        });
        self
    }

    /// Sets a header, replacing earlier values of the same name. A name or
    /// value that is not valid in HTTP is left out (and logged), never a panic.
    pub fn header(mut self, name: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        self.set_header(name, value);
        self
    }

    /// Sets a header in place; see [`HttpResponse::header`].
    pub fn set_header(&mut self, name: impl AsRef<str>, value: impl AsRef<str>) {
        let (name, value) = (name.as_ref(), value.as_ref());
        match (
            HeaderName::from_bytes(name.as_bytes()),
            HeaderValue::from_str(value),
        ) {
            (Ok(n), Ok(v)) => {
                self.headers.insert(n, v);
            }
            _ => tracing::error!(name, value, "invalid response header left out"),
        }
    }

    /// The status code as a number.
    pub fn status_code(&self) -> u16 {
        self.status.as_u16()
    }

    /// The status code.
    pub fn status_code_typed(&self) -> StatusCode {
        self.status
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// The headers, to change them.
    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.headers
    }

    /// The value of a header as text, when it is present and visible ASCII.
    pub fn header_str(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// The body.
    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// The body as text (lossy for invalid UTF-8).
    pub fn body_text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// Typed values carried with the response through the middleware chain.
    pub fn extensions(&self) -> &http::Extensions {
        &self.extensions
    }

    /// Typed values carried with the response, to change them.
    pub fn extensions_mut(&mut self) -> &mut http::Extensions {
        &mut self.extensions
    }

    /// Converts into an `http::Response` for hyper.
    ///
    /// The body's length is known, and hyper writes it: a
    /// `Transfer-Encoding` the handler set is left out, and so is a
    /// `Content-Length` that differs from the body's (an empty body keeps
    /// it, as the answer to a `HEAD` does), or that a `1xx` or `204`
    /// carries (RFC 9110, section 8.6). Sent as set, either would give a
    /// head that disagrees with the body, and the client would read the
    /// rest of the body as the next response. A `1xx`, `204` or `304` has
    /// no content (RFC 9110, sections 15.3.5 and 15.4.5): a body the
    /// handler left on it is left out.
    pub fn into_http(self) -> http::Response<Full<Bytes>> {
        self.into_wire(Answering::Unknown)
    }

    /// [`HttpResponse::into_http`] for the answer to a request, `head` when
    /// it is a `HEAD` request, as the server sends it on either protocol.
    ///
    /// The answer to `HEAD` carries no content (RFC 9110, section 9.3.2),
    /// with the `Content-Length` of the content a `GET` would have had (none
    /// on a `1xx` or `204`, or on a `304` that did not set one): hyper
    /// leaves the content out over HTTP/1, but over HTTP/2 it would send
    /// it, and a client resets the stream. Any other answer with no content
    /// but a `304` says `Content-Length: 0`, whatever length it set: over
    /// HTTP/2 a length that no content follows is a malformed answer (RFC
    /// 9113, section 8.1.1), and over HTTP/1 hyper writes `0` anyway; so
    /// `HEAD` and `GET` give the same length on either protocol.
    pub(crate) fn into_http_answering(self, head: bool) -> http::Response<Full<Bytes>> {
        self.into_wire(if head {
            Answering::Head
        } else {
            Answering::Other
        })
    }

    /// The answer to a `HEAD` as [`HttpResponse::into_http_answering`]
    /// gives it, kept as an answer: no content, with the `Content-Length`
    /// of the content a `GET` would have had, which
    /// [`HttpResponse::into_http`] keeps.
    pub(crate) fn without_content(self) -> Self {
        let wire = self.into_wire(Answering::Head);
        let (parts, _) = wire.into_parts();
        Self {
            status: parts.status,
            headers: Box::new(parts.headers),
            body: Bytes::new(),
            extensions: parts.extensions,
        }
    }

    /// The answer as it goes out to a request `answering` says of (what
    /// [`HttpResponse::into_http`] and [`HttpResponse::into_http_answering`]
    /// say), in one pass over the headers.
    #[inline]
    fn into_wire(self, answering: Answering) -> http::Response<Full<Bytes>> {
        let head = answering == Answering::Head;
        let mut headers = *self.headers;
        let mut body = self.body;
        headers.remove(TRANSFER_ENCODING);
        // RFC 9110, 8.6: no Content-Length on a 1xx or a 204, which have no
        // content; a 304 has none either, and keeps a length only as set; a
        // 205 has none, and says so with a length of 0 (15.3.6). Their
        // content is left out: hyper leaves it out over HTTP/1 (but a
        // 205's), and over HTTP/2 it would send it.
        let has_no_content =
            self.status.is_informational() || self.status == StatusCode::NO_CONTENT;
        let reset_content = self.status == StatusCode::RESET_CONTENT;
        let not_modified = self.status == StatusCode::NOT_MODIFIED;
        // One look-up on the common path, where no length is set.
        let mut length = headers.get(CONTENT_LENGTH).cloned();
        if length.is_some() && lengths_unusable(&headers) {
            // A value that is no number, or two a handler set (or
            // appended): none is believed, and the answer gets its
            // body's, as one with none does.
            headers.remove(CONTENT_LENGTH);
            length = None;
        }
        let length = length.as_ref();
        if has_no_content {
            if length.is_some() {
                headers.remove(CONTENT_LENGTH);
            }
            body = Bytes::new();
        } else if reset_content {
            headers.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
            body = Bytes::new();
        } else if body.is_empty() {
            // A HEAD's answer (or one to a request not known) keeps its
            // length; any other keeps none but 0, a 304's excepted. An
            // answer to a known request without one says 0, HEAD's as
            // GET's, on either protocol (hyper writes it over HTTP/1 only).
            if answering == Answering::Other
                && !not_modified
                && length.is_some_and(|length| length.as_bytes() != b"0")
            {
                headers.remove(CONTENT_LENGTH);
            }
            if answering != Answering::Unknown
                && !not_modified
                && !headers.contains_key(CONTENT_LENGTH)
            {
                headers.insert(CONTENT_LENGTH, HeaderValue::from_static("0"));
            }
        } else if length.is_some() {
            // Every value, not the first alone: hyper checks them all.
            let own = body.len().to_string();
            if headers
                .get_all(CONTENT_LENGTH)
                .iter()
                .any(|length| length.as_bytes() != own.as_bytes())
            {
                tracing::warn!(
                    length = ?headers.get(CONTENT_LENGTH),
                    body = body.len(),
                    "a Content-Length that is not the body's length left out"
                );
                headers.remove(CONTENT_LENGTH);
            }
        }
        if not_modified {
            body = Bytes::new();
        } else if head && !body.is_empty() {
            headers.insert(CONTENT_LENGTH, HeaderValue::from(body.len()));
            body = Bytes::new();
        }
        let mut response = http::Response::new(Full::new(body));
        *response.status_mut() = self.status;
        *response.headers_mut() = headers;
        *response.extensions_mut() = self.extensions;
        response
    }
}

/// Whether the `Content-Length` values of `headers` say no length: one
/// that is not a number (`abc`, `-1`, empty), or two that differ.
fn lengths_unusable(headers: &HeaderMap) -> bool {
    let mut lengths = headers.get_all(CONTENT_LENGTH).iter();
    let Some(first) = lengths.next() else {
        return false;
    };
    let number = |length: &HeaderValue| {
        !length.is_empty() && length.as_bytes().iter().all(u8::is_ascii_digit)
    };
    !number(first) || lengths.any(|other| other != first)
}

/// The request an answer goes out to, as far as its content is concerned.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Answering {
    /// Not known ([`HttpResponse::into_http`]).
    Unknown,
    /// A `HEAD` request.
    Head,
    /// Any other request.
    Other,
}

/// Values a handler may return.
pub trait IntoResponse {
    /// Converts into the chain's [`Response`].
    fn into_response(self) -> Response;
}

impl IntoResponse for HttpResponse {
    fn into_response(self) -> Response {
        Ok(self)
    }
}

impl IntoResponse for Response {
    fn into_response(self) -> Response {
        self
    }
}

impl IntoResponse for &'static str {
    fn into_response(self) -> Response {
        Ok(HttpResponse::text(self))
    }
}

impl IntoResponse for String {
    fn into_response(self) -> Response {
        Ok(HttpResponse::text(self))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The `Content-Length` and the body an answer goes out with.
    fn wire(response: HttpResponse, head: bool) -> (Option<String>, usize) {
        let wire = response.into_http_answering(head);
        let length = wire
            .headers()
            .get(CONTENT_LENGTH)
            .map(|v| v.to_str().unwrap().to_owned());
        (
            length,
            http_body::Body::size_hint(wire.body()).exact().unwrap() as usize,
        )
    }

    #[test]
    fn head_and_get_carry_one_length_and_no_content_has_none() {
        let zero = (Some("0".to_owned()), 0);
        for head in [false, true] {
            assert_eq!(wire(HttpResponse::new(), head), zero);
            assert_eq!(
                wire(HttpResponse::new().header("Content-Length", "5"), false),
                zero
            );
            assert_eq!(
                wire(HttpResponse::text("never").status(204), head),
                (None, 0)
            );
            assert_eq!(
                wire(HttpResponse::text("cached").status(304), head),
                (None, 0)
            );
        }
        assert_eq!(wire(HttpResponse::text("abc"), false), (None, 3));
        assert_eq!(
            wire(HttpResponse::text("abc"), true),
            (Some("3".to_owned()), 0)
        );
        let mut twice = HttpResponse::text("abc").header("Content-Length", "3");
        twice
            .headers_mut()
            .append(CONTENT_LENGTH, HeaderValue::from_static("4"));
        assert_eq!(wire(twice, false), (None, 3));
    }

    #[test]
    fn invalid_header_is_left_out_not_a_panic() {
        let r = HttpResponse::new()
            .header("bad name", "x")
            .header("X-Ok", "bad\nvalue")
            .header("X-Fine", "1");
        assert_eq!(r.headers().len(), 1);
        assert_eq!(r.header_str("x-fine"), Some("1"));
    }

    #[test]
    fn a_response_stays_small_to_move() {
        // Moved out of every future it passes back through: its headers
        // live on the heap (see the field's comment).
        assert!(
            size_of::<Response>() <= 64,
            "{} bytes",
            size_of::<Response>()
        );
    }

    #[test]
    fn invalid_status_becomes_500() {
        assert_eq!(HttpResponse::new().status(1000).status_code(), 500);
    }

    #[test]
    fn json_sets_content_type() {
        let r = HttpResponse::json(serde_json::json!({"a": 1}));
        assert_eq!(r.header_str("content-type"), Some("application/json"));
        assert_eq!(r.body_text(), r#"{"a":1}"#);
    }
}
