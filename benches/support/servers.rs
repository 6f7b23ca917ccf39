//! The servers the HTTP and in-process benches compare: the quickstart's
//! router bare, behind a middleware that does nothing, and behind each
//! limiter, with the backends they run on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use suprnova::cache::{MemoryStore, Store};
use suprnova::clock;
use suprnova::container::App;
use suprnova::limiter::{CacheRateLimiter, Limit, NamedLimiters};
use suprnova::middleware::register_middleware_alias_with_args;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver};
use suprnova::server::handle_request_with_peer;
use suprnova::{
    HttpResponse, Middleware, Next, Request, Response, Router, ThrottleRequestsMiddleware,
    async_trait,
};

/// The servers the in-process benches (middleware, instructions) compare,
/// as [`router`] names them.
pub const SERVERS: [&str; 5] = [
    "none",
    "pass_through",
    "driver_memory",
    "throttle_memory",
    "throttle_named_memory",
];

/// Far above the load: every request is admitted.
pub const HUGE_LIMIT: u32 = 1_000_000;

/// A middleware that only calls the rest of the chain: what any middleware
/// costs before it does anything.
pub struct PassThrough;

#[async_trait]
impl Middleware for PassThrough {
    async fn handle(&self, request: Request, next: Next) -> Response {
        next(request).await
    }
}

/// Registers the `throttle` alias, as an application's boot does.
pub fn register_throttle() {
    register_middleware_alias_with_args("throttle", ThrottleRequestsMiddleware::from_alias_args);
}

/// The quickstart's router, behind the limiter `server` names: `none`,
/// `pass_through`, `driver_<backend>` (`RateLimitMiddleware::ip_based`),
/// `throttle_<backend>` (`throttle:1000000,1`) or `throttle_named_memory`
/// (`throttle:bench`, a named limiter of 1,000,000 a minute by address, as
/// an application's `api` limiter is defined). The backend is the
/// container's.
pub fn router(server: &str) -> Router {
    let router = Router::new().get("/", |_req: Request| async {
        HttpResponse::text("Hello from Suprnova.\n")
    });
    match server {
        "none" => router,
        "pass_through" => router.middleware(PassThrough),
        driver if driver.starts_with("driver_") => router.middleware(
            RateLimitMiddleware::ip_based(HUGE_LIMIT, Duration::from_secs(60)),
        ),
        "throttle_named_memory" => router.middleware_named("throttle:bench"),
        throttle if throttle.starts_with("throttle_") => {
            router.middleware_named(&format!("throttle:{HUGE_LIMIT},1"))
        }
        other => unreachable!("no server {other}"),
    }
}

/// A container with `driver` as the rate-limit driver and `store` under
/// the facade's limiter.
pub fn container_with(driver: Arc<dyn RateLimiterDriver>, store: Arc<dyn Store>) -> App {
    let app = App::new();
    app.install(driver);
    app.install(Arc::new(CacheRateLimiter::new(store, clock::system())));
    app
}

/// A container with the memory driver and the memory cache store, and the
/// named limiter `bench`.
pub fn memory_container() -> App {
    let app = container_with(
        Arc::new(InMemoryRateLimiter::new()),
        Arc::new(MemoryStore::new()),
    );
    let named = NamedLimiters::new();
    named.define("bench", |req: &Request| {
        Limit::per_minute(i64::from(HUGE_LIMIT))
            .by(req.ip().unwrap_or_default())
            .into()
    });
    app.install(Arc::new(named));
    app
}

/// A middleware that waits for one `PING` to Redis, then calls the rest of
/// the chain: the round trip without a limiter's work.
#[cfg(feature = "redis")]
pub struct PingRedis(pub suprnova::redis_client::RedisConnection);

#[cfg(feature = "redis")]
#[async_trait]
impl Middleware for PingRedis {
    async fn handle(&self, request: Request, next: Next) -> Response {
        self.0.ping().await.expect("Redis answers PING");
        next(request).await
    }
}

/// A container with the Redis driver and the Redis cache store on `redis`,
/// their keys under `prefix` (`<prefix>:` and `<prefix>_cache:`).
#[cfg(feature = "redis")]
pub fn redis_container(redis: &suprnova::redis_client::RedisConnection, prefix: &str) -> App {
    use suprnova::cache::RedisStore;
    use suprnova::rate_limit::redis::RedisRateLimiter;
    container_with(
        Arc::new(RedisRateLimiter::new(redis.clone()).with_prefix(format!("{prefix}:"))),
        Arc::new(RedisStore::new(redis.clone()).with_prefix(format!("{prefix}_cache:"))),
    )
}

/// `count` client addresses, 127.0.0.1 up: a per-address limiter keeps one
/// bucket each.
pub fn client_addresses(count: u8) -> Vec<SocketAddr> {
    (1..=count)
        .map(|n| SocketAddr::from(([127, 0, 0, n], 40_000)))
        .collect()
}

/// `count` requests through `router` in process
/// (`handle_request_with_peer`), the clients in turn; the time they took.
pub async fn serve_in_process(router: &Router, clients: &[SocketAddr], count: u64) -> Duration {
    let start = Instant::now();
    for i in 0..count as usize {
        serve_one(router, clients[i % clients.len()]).await;
    }
    start.elapsed()
}

/// One `GET /` from `client` through `router`, in process, answered `200`.
async fn serve_one(router: &Router, client: SocketAddr) {
    let request = http::Request::get("/").body(String::new()).unwrap();
    let response = handle_request_with_peer(router, request, client).await;
    assert_eq!(response.status_code(), 200);
}

/// `count` requests as [`serve_in_process`] sends them, each after reading
/// `evict` through, one byte a cache line: a request finds its code and
/// data gone from the core's first- and second-level caches, as a server's
/// other work (the kernel's, hyper's, the client's) leaves them between two
/// requests. The time the requests took, without the reads.
pub async fn serve_in_process_evicted(
    router: &Router,
    clients: &[SocketAddr],
    count: u64,
    evict: &[u8],
) -> Duration {
    let mut took = Duration::ZERO;
    for i in 0..count as usize {
        let sum = evict
            .iter()
            .step_by(64)
            .fold(0u8, |sum, byte| sum.wrapping_add(*byte));
        std::hint::black_box(sum);
        let start = Instant::now();
        serve_one(router, clients[i % clients.len()]).await;
        took += start.elapsed();
    }
    took
}
