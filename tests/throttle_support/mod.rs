//! Helpers shared by the throttle tests.

#![allow(dead_code)]

use std::sync::Arc;

use bytes::Bytes;
use http_body_util::Full;
use suprnova::cache::{MemoryStore, Store};
use suprnova::clock::{FakeClock, SharedClock};
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;
use suprnova::middleware::register_middleware_alias_with_args;
use suprnova::server::handle_request_with_peer;
use suprnova::{
    HttpResponse, Middleware, Next, Request, Response, Router, ThrottleRequestsMiddleware,
    async_trait,
};

/// A container whose rate limiter counts in `store` on `clock`, with the
/// `throttle` alias registered.
pub fn limiter_app(store: Arc<dyn Store>, clock: SharedClock) -> App {
    let app = App::new();
    app.install::<dyn Store>(store.clone());
    app.install(Arc::new(CacheRateLimiter::new(store, clock)));
    let _current = app.enter();
    register_middleware_alias_with_args("throttle", ThrottleRequestsMiddleware::from_alias_args);
    app
}

/// A container whose rate limiter counts in Redis at `url` (one node or a
/// cluster), under the store prefix `prefix`, on the system clock; the
/// `throttle` alias registered.
#[cfg(feature = "redis")]
pub fn app_on_redis(url: &str, prefix: &str) -> App {
    app_on_redis_at(url, prefix, suprnova::clock::system())
}

/// [`app_on_redis`] whose windows read `clock`; its calls give up after
/// 300 ms to connect plus 300 ms to answer.
#[cfg(feature = "redis")]
pub fn app_on_redis_at(url: &str, prefix: &str, clock: SharedClock) -> App {
    use std::time::Duration;
    use suprnova::cache::RedisStore;
    use suprnova::redis_client::{RedisConfig, RedisConnection};

    let mut config = RedisConfig::from_url(url).unwrap();
    config.connect_timeout = Duration::from_millis(300);
    config.response_timeout = Duration::from_millis(300);
    let conn = RedisConnection::new(config).unwrap();
    limiter_app(Arc::new(RedisStore::new(conn).with_prefix(prefix)), clock)
}

/// [`limiter_app`] over a memory store on the frozen `clock`.
pub fn memory_app(clock: &FakeClock) -> App {
    limiter_app(
        Arc::new(MemoryStore::with_clock(clock.shared())),
        clock.shared(),
    )
}

/// A router with a `GET` route on each path answering `ok`.
pub fn ok_routes(paths: &[&str]) -> Router {
    paths.iter().fold(Router::new(), |router, path| {
        router.get(path, |_req: Request| async { HttpResponse::text("ok") })
    })
}

/// How many of `responses` have `status`.
pub fn with_status(responses: &[HttpResponse], status: u16) -> usize {
    responses
        .iter()
        .filter(|r| r.status_code() == status)
        .count()
}

/// Signs in the user named by the `x-user` header, as an auth middleware
/// would.
pub struct SignIn;

#[async_trait]
impl Middleware for SignIn {
    async fn handle(&self, mut request: Request, next: Next) -> Response {
        if let Some(id) = request.header("x-user").map(str::to_owned) {
            request.set_user_id(id);
        }
        next(request).await
    }
}

/// The client address of the in-process requests sent as a guest.
pub const GUEST: &str = "203.0.113.5:40000";

/// A `method uri` request with no body.
pub fn request_without_body(method: http::Method, uri: &str) -> http::Request<Full<Bytes>> {
    http::Request::builder()
        .method(method)
        .uri(uri)
        .body(Full::<Bytes>::default())
        .unwrap()
}

/// Sends `method uri` with no body through `router`, in process, from
/// [`GUEST`].
pub async fn send_as_guest(router: &Router, method: http::Method, uri: &str) -> HttpResponse {
    handle_request_with_peer(
        router,
        request_without_body(method, uri),
        GUEST.parse().unwrap(),
    )
    .await
}

/// `GET uri` through `router`, in process, from [`GUEST`].
pub async fn get_as_guest(router: &Router, uri: &str) -> HttpResponse {
    send_as_guest(router, http::Method::GET, uri).await
}

/// `GET uri` through `router`, in process, from [`GUEST`] signed in (through
/// [`SignIn`]) as `user`.
pub async fn get_as_user(router: &Router, uri: &str, user: &str) -> HttpResponse {
    let mut request = request_without_body(http::Method::GET, uri);
    request
        .headers_mut()
        .insert("x-user", user.parse().unwrap());
    handle_request_with_peer(router, request, GUEST.parse().unwrap()).await
}

/// An answer's status, `X-RateLimit-Limit` and `X-RateLimit-Remaining`.
pub fn status_and_counts(r: &HttpResponse) -> (u16, Option<&str>, Option<&str>) {
    (
        r.status_code(),
        r.header_str("x-ratelimit-limit"),
        r.header_str("x-ratelimit-remaining"),
    )
}
