//! `Request`: what a middleware and a handler receive.

use std::any::Any;
use std::fmt;
use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use bytes::Bytes;
use http::{HeaderMap, Method, Uri};
use http_body_util::BodyExt;

use super::body::{BodyError, BodyState, BoxError};
use super::proxies::TrustedProxies;
use crate::keys::{canonical_ip, push_ip};
use crate::routing::MatchedRoute;

/// The longest an IPv6 address is as text (`ffff:...` eight groups of four).
const IPV6_TEXT_MAX: usize = 39;

/// The id of the signed-in user, as an auth middleware records it.
///
/// The crate has no session system of its own. An authentication middleware
/// that has identified the caller calls [`Request::set_user_id`]; the
/// throttle middleware then counts that user in a bucket of their own
/// (`user:<id>`) instead of the client address (`ip:<address>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthenticatedUser(pub String);

/// An incoming HTTP request.
///
/// The body is read on demand with a byte cap ([`Request::body_bytes`]);
/// once read it is kept, so a middleware that reads it (to compute a key, for
/// example) leaves the same bytes for the handler.
pub struct Request {
    /// On the heap: a request is moved into the future of every middleware
    /// and handler it passes through, and `Parts` (method, URI, headers,
    /// extensions) is 224 bytes, two thirds of the request. Boxed, a request
    /// in process costs about 350 instructions fewer, and each middleware
    /// about 190 fewer (the instructions bench).
    parts: Box<http::request::Parts>,
    body: BodyState,
    peer: Option<SocketAddr>,
    /// The route the router matched.
    route: Option<MatchedRoute>,
    params: Vec<(String, String)>,
    /// `None` trusts no proxy, as does a list with nothing in it.
    proxies: Option<Arc<TrustedProxies>>,
    holds: Vec<Box<dyn Any + Send + Sync>>,
    /// Whether the route's handler has the request (its middleware have
    /// run): a read of the whole body from there on consumes the request.
    in_handler: bool,
}

impl Request {
    /// The cap [`Request::bytes`] reads up to: 2 MiB.
    pub const DEFAULT_BODY_LIMIT: usize = 2 * 1024 * 1024;

    /// Wraps an `http::Request`. It has no peer address and trusts no proxy
    /// until [`Request::with_peer`] and [`Request::with_trusted_proxies`] say
    /// otherwise (the server does both).
    ///
    /// ```
    /// use suprnova::Request;
    ///
    /// let req = Request::new(http::Request::get("/a?x=1").body(String::new()).unwrap())
    ///     .with_peer("203.0.113.9:5000".parse().unwrap());
    /// assert_eq!(req.path(), "/a");
    /// assert_eq!(req.query_param("x").as_deref(), Some("1"));
    /// assert_eq!(req.ip().as_deref(), Some("203.0.113.9"));
    /// ```
    pub fn new<B>(request: http::Request<B>) -> Self
    where
        B: http_body::Body<Data = Bytes> + Send + Sync + 'static,
        B::Error: Into<BoxError>,
    {
        let (parts, body) = request.into_parts();
        let body = if body.is_end_stream() {
            BodyState::empty()
        } else {
            BodyState::Streaming(body.map_err(Into::into).boxed())
        };
        Self {
            parts: Box::new(parts),
            body,
            peer: None,
            route: None,
            params: Vec::new(),
            proxies: None,
            holds: Vec::new(),
            in_handler: false,
        }
    }

    /// Sets the TCP peer address.
    pub fn with_peer(mut self, peer: SocketAddr) -> Self {
        self.peer = Some(peer);
        self
    }

    /// Sets the proxies whose forwarded headers [`Request::ip`] believes.
    pub fn with_trusted_proxies(mut self, proxies: Arc<TrustedProxies>) -> Self {
        self.proxies = (!proxies.is_empty()).then_some(proxies);
        self
    }

    /// The method.
    pub fn method(&self) -> &Method {
        &self.parts.method
    }

    /// The HTTP version the request came in.
    pub fn version(&self) -> http::Version {
        self.parts.version
    }

    /// The request target.
    pub fn uri(&self) -> &Uri {
        &self.parts.uri
    }

    /// The path, without the query string, as the client sent it, escapes
    /// and all (as Laravel's `getPathInfo()` gives it; its `path()` also
    /// takes the `/` off both ends, `users/1` for `/users/1/`). Not for a
    /// bucket key:
    /// `/reports/`, `//reports` and `/%72eports` reach the route `/reports`
    /// each with a path of its own, so a limit keyed on it would count each
    /// spelling apart; key a per-path limit on
    /// [`route_path`](Self::route_path), a per-route one on
    /// [`matched_route`](Self::matched_route).
    pub fn path(&self) -> &str {
        self.parts.uri.path()
    }

    /// The path as the router matches it, for a bucket key: see
    /// [`route_path`](crate::keys::route_path). Key a per-path limit on
    /// this rather than on [`path`](Self::path), whose spellings of one
    /// route (`/login/`, `//login`) would each get a bucket of their own;
    /// for a per-route limit, key on [`matched_route`](Self::matched_route),
    /// under which every value of a route's parameters counts too.
    pub fn route_path(&self) -> std::borrow::Cow<'_, str> {
        crate::keys::route_path(self.path())
    }

    /// The raw query string, without `?`.
    pub fn query(&self) -> Option<&str> {
        self.parts.uri.query()
    }

    /// Every value of a query parameter, percent-decoded, in order.
    pub fn query_params(&self, name: &str) -> Vec<String> {
        self.query()
            .map(|q| {
                form_urlencoded::parse(q.as_bytes())
                    .filter(|(k, _)| k == name)
                    .map(|(_, v)| v.into_owned())
                    .collect()
            })
            .unwrap_or_default()
    }

    /// The first value of a query parameter, percent-decoded.
    pub fn query_param(&self, name: &str) -> Option<String> {
        self.query_params(name).into_iter().next()
    }

    /// The headers.
    pub fn headers(&self) -> &HeaderMap {
        &self.parts.headers
    }

    /// The headers, to change them.
    pub fn headers_mut(&mut self) -> &mut HeaderMap {
        &mut self.parts.headers
    }

    /// The first value of a header, when it is visible ASCII.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.parts.headers.get(name).and_then(|v| v.to_str().ok())
    }

    /// A path parameter captured by a `{name}` segment of the route,
    /// percent-decoded once (`john%20doe` is `john doe`): the router decodes
    /// each segment before it matches it.
    pub fn param(&self, name: &str) -> Option<&str> {
        self.params
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// The route the router matched, as registered, in one spelling: its
    /// segments joined by single slashes, its parameters as written
    /// (`/items/{id}`). `None` for a request no router has matched (one
    /// built by hand). Key a per-route limit on this: every value of a
    /// parameter, and every spelling of the path, is one route.
    ///
    /// ```
    /// use suprnova::{HttpResponse, Request, Router};
    /// use suprnova::server::handle_request;
    ///
    /// # tokio::runtime::Runtime::new().unwrap().block_on(async {
    /// let router = Router::new().get("/items/{id}/", |req: Request| async move {
    ///     HttpResponse::text(req.matched_route().unwrap_or_default().to_owned())
    /// });
    /// let req = http::Request::get("/items/7").body(String::new()).unwrap();
    /// assert_eq!(handle_request(&router, req).await.body_text(), "/items/{id}");
    /// # });
    /// ```
    pub fn matched_route(&self) -> Option<&str> {
        self.route.as_ref().map(MatchedRoute::as_str)
    }

    /// Matches the request to `route`, whose middleware run before its
    /// handler has it: a request dispatched from another route's handler
    /// (a router mounted by [`Router::dispatch`](crate::Router::dispatch))
    /// is the handler's again only once the new route's middleware have
    /// run, so that a body they read leaves its holds in place.
    pub(crate) fn set_route(&mut self, route: MatchedRoute) {
        self.route = Some(route);
        self.in_handler = false;
    }

    pub(crate) fn set_params(&mut self, params: Vec<(String, String)>) {
        self.params = params;
    }

    /// The TCP peer address; `None` for a request made in process through
    /// [`handle_request`](crate::server::handle_request).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer
    }

    /// The client address, as text.
    ///
    /// This is the TCP peer unless the peer is a trusted proxy
    /// (`APP_TRUSTED_PROXIES`); then it is read from `X-Forwarded-For`
    /// (walked from the right, skipping trusted proxies) or, when that header
    /// is absent, `X-Real-IP`. An IPv4 address written in IPv6 form
    /// (`::ffff:203.0.113.1`) is returned as IPv4. `None` when the request has
    /// no peer.
    ///
    /// Key limits on this, never on the raw header: a client that is not a
    /// trusted proxy cannot change it.
    pub fn ip(&self) -> Option<String> {
        // Written as the limiters' keys write it: a named limiter keys on
        // this on every request, and `IpAddr`'s `Display` (which supports
        // padding) costs several times as much for an IPv4 address.
        let ip = self.ip_addr()?;
        let mut text = String::with_capacity(IPV6_TEXT_MAX);
        push_ip(&mut text, ip);
        Some(text)
    }

    /// The client address; see [`Request::ip`].
    pub fn ip_addr(&self) -> Option<IpAddr> {
        let peer = self.peer?.ip();
        Some(match &self.proxies {
            Some(proxies) => proxies.client_ip(peer, &self.parts.headers),
            None => canonical_ip(peer),
        })
    }

    /// The id of the signed-in user, when an auth middleware has set one.
    pub fn user_id(&self) -> Option<&str> {
        self.parts
            .extensions
            .get::<AuthenticatedUser>()
            .map(|u| u.0.as_str())
    }

    /// Records the signed-in user's id; see [`AuthenticatedUser`].
    pub fn set_user_id(&mut self, id: impl Into<String>) {
        self.parts.extensions.insert(AuthenticatedUser(id.into()));
    }

    /// Typed values carried with the request.
    pub fn extensions(&self) -> &http::Extensions {
        &self.parts.extensions
    }

    /// Typed values carried with the request, to change them.
    pub fn extensions_mut(&mut self) -> &mut http::Extensions {
        &mut self.parts.extensions
    }

    /// Reads the whole body, refusing more than `limit` bytes, and keeps it
    /// for later readers. A body that announces a larger `Content-Length` is
    /// refused before it is read; one found larger as it arrives keeps what
    /// was read, so a later reader with a larger cap still gets every byte.
    /// [`BodyError`] converts into a 413 (or 400) response.
    ///
    /// Read by the route's handler, the whole body consumes the request as
    /// far as its connection is concerned: whatever the request holds for
    /// it ([`Request::hold_for_connection`]) is released, as when the
    /// request drops, so a
    /// [`ConnectionsPerIp`](crate::rate_limit::ConnectionsPerIp) place is
    /// given back once the handler has read the body. A middleware that
    /// reads the body before the handler (to check a signature, or a
    /// limiter's key) leaves the holds in place.
    pub async fn body_bytes(&mut self, limit: usize) -> Result<Bytes, BodyError> {
        let announced = self
            .header(http::header::CONTENT_LENGTH.as_str())
            .and_then(|v| v.trim().parse::<u64>().ok());
        let bytes = self.body.read(limit, announced).await?;
        if self.in_handler {
            self.holds.clear();
        }
        Ok(bytes)
    }

    /// Marks the request as the handler's: its middleware have run.
    pub(crate) fn enter_handler(&mut self) {
        self.in_handler = true;
    }

    /// Reads the whole body with [`Request::DEFAULT_BODY_LIMIT`].
    pub async fn bytes(&mut self) -> Result<Bytes, BodyError> {
        self.body_bytes(Self::DEFAULT_BODY_LIMIT).await
    }

    /// Reads the whole body as UTF-8 text (lossy) with
    /// [`Request::DEFAULT_BODY_LIMIT`].
    pub async fn text(&mut self) -> Result<String, BodyError> {
        let bytes = self.bytes().await?;
        Ok(String::from_utf8_lossy(&bytes).into_owned())
    }

    /// Reads the body and consumes the request. Whatever the request holds
    /// for its connection ([`Request::hold_for_connection`]) is released.
    pub async fn into_bytes(mut self, limit: usize) -> Result<Bytes, BodyError> {
        self.body_bytes(limit).await
    }

    /// The body, if a reader has already buffered it.
    pub fn buffered_body(&self) -> Option<&Bytes> {
        match &self.body {
            BodyState::Buffered(b) => Some(b),
            _ => None,
        }
    }

    /// Keeps `hold` for as long as this request's connection needs it.
    ///
    /// On a plain route the hold drops with the request: when the handler
    /// drops or consumes it. On a WebSocket route the server moves every hold
    /// into the task that runs the socket, and drops them when the session
    /// ends. A hold whose `Drop` gives a place back is how
    /// [`ConnectionsPerIp`](crate::rate_limit::ConnectionsPerIp) counts open
    /// connections.
    pub fn hold_for_connection<H: Send + Sync + 'static>(&mut self, hold: H) {
        self.holds.push(Box::new(hold));
    }

    /// How many holds the request carries.
    pub fn connection_holds(&self) -> usize {
        self.holds.len()
    }

    /// Takes every hold off the request, for a task that outlives it.
    pub(crate) fn take_connection_holds(&mut self) -> Vec<Box<dyn Any + Send + Sync>> {
        std::mem::take(&mut self.holds)
    }
}

impl fmt::Debug for Request {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Request")
            .field("method", &self.parts.method)
            .field("uri", &self.parts.uri)
            .field("peer", &self.peer)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::Full;

    fn req(body: &'static str) -> Request {
        Request::new(
            http::Request::post("/p?email=A%40b.c&x=1&x=2")
                .body(Full::new(Bytes::from_static(body.as_bytes())))
                .unwrap(),
        )
    }

    #[tokio::test]
    async fn body_is_kept_for_the_next_reader() {
        let mut r = req("hello");
        assert_eq!(r.body_bytes(10).await.unwrap(), "hello");
        assert_eq!(r.bytes().await.unwrap(), "hello");
    }

    #[tokio::test]
    async fn body_over_the_cap_is_refused() {
        let mut r = req("hello world");
        let err = r.body_bytes(5).await.unwrap_err();
        assert!(matches!(err, BodyError::TooLarge { limit: 5 }));
        assert_eq!(err.to_response().status_code(), 413);
    }

    #[tokio::test]
    async fn a_body_found_over_a_cap_is_kept_for_a_reader_with_a_larger_one() {
        use futures_util::stream;
        use http_body::Frame;
        use http_body_util::StreamBody;

        let frames = ["0123", "4567", "89ab", "cdef"]
            .map(|chunk| Ok::<_, std::convert::Infallible>(Frame::data(Bytes::from(chunk))));
        let mut r = Request::new(
            http::Request::post("/p")
                .body(StreamBody::new(stream::iter(frames)))
                .unwrap(),
        );
        for cap in [6, 10] {
            let err = r.body_bytes(cap).await.unwrap_err();
            assert!(matches!(err, BodyError::TooLarge { limit } if limit == cap));
        }
        assert_eq!(r.buffered_body(), None);
        assert_eq!(r.body_bytes(16).await.unwrap(), "0123456789abcdef");
        assert_eq!(r.bytes().await.unwrap(), "0123456789abcdef");
    }

    #[test]
    fn query_params_are_decoded() {
        let r = req("");
        assert_eq!(r.query_param("email").as_deref(), Some("A@b.c"));
        assert_eq!(r.query_params("x"), vec!["1", "2"]);
        assert_eq!(r.query_param("nope"), None);
    }

    #[test]
    fn holds_drop_with_the_request() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        struct Slot(Arc<AtomicUsize>);
        impl Drop for Slot {
            fn drop(&mut self) {
                self.0.fetch_sub(1, Ordering::SeqCst);
            }
        }
        let open = Arc::new(AtomicUsize::new(1));
        let mut r = req("");
        r.hold_for_connection(Slot(open.clone()));
        assert_eq!(open.load(Ordering::SeqCst), 1);
        drop(r);
        assert_eq!(open.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn no_peer_no_address() {
        assert_eq!(req("").ip(), None);
    }

    #[test]
    fn the_address_as_text_is_its_display() {
        for (peer, text) in [
            ("203.0.113.9:1", "203.0.113.9"),
            ("0.0.0.0:1", "0.0.0.0"),
            ("255.255.255.255:1", "255.255.255.255"),
            ("[::ffff:10.1.2.3]:1", "10.1.2.3"),
            ("[2001:db8::1]:1", "2001:db8::1"),
            ("[::1]:1", "::1"),
            (
                "[ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe]:1",
                "ffff:ffff:ffff:ffff:ffff:ffff:ffff:fffe",
            ),
        ] {
            let r = req("").with_peer(peer.parse().unwrap());
            assert_eq!(r.ip().as_deref(), Some(text), "{peer}");
            assert_eq!(r.ip(), r.ip_addr().map(|ip| ip.to_string()), "{peer}");
        }
    }

    #[test]
    fn a_request_stays_small_to_move() {
        // Moved into every middleware's and handler's future: its parts
        // live on the heap (see the field's comment). 168 with the flag
        // that says the handler has it.
        assert!(
            size_of::<Request>() <= 168,
            "{} bytes",
            size_of::<Request>()
        );
    }

    #[test]
    fn user_id_round_trips() {
        let mut r = req("");
        assert_eq!(r.user_id(), None);
        r.set_user_id("42");
        assert_eq!(r.user_id(), Some("42"));
    }
}
