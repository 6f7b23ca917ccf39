//! What each limiter adds to a request inside the process, without the
//! network: `handle_request_with_peer` through the quickstart's router with
//! no middleware, with a pass-through middleware, with
//! `RateLimitMiddleware::ip_based` on the memory driver and with
//! `throttle:1000000,1` on the memory cache store, in one run.
//!
//! ```text
//! cargo bench --bench middleware
//! ```
//!
//! Requests come from 32 client addresses in turn (so the limiters keep 32
//! buckets, as in the HTTP bench), on a current-thread tokio runtime; every
//! request is admitted and does all of the limiter's work. The HTTP bench
//! measures the same servers over loopback, where the network and the load
//! generator cost far more than the limiters; this one shows the limiters'
//! own cost, which is what a change to their request path moves.

mod support;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use criterion::Criterion;
use suprnova::cache::{MemoryStore, Store};
use suprnova::clock;
use suprnova::container::App;
use suprnova::limiter::CacheRateLimiter;
use suprnova::middleware::register_middleware_alias_with_args;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver};
use suprnova::server::handle_request_with_peer;
use suprnova::{
    HttpResponse, Middleware, Next, Request, Response, Router, ThrottleRequestsMiddleware,
    async_trait,
};

const SERVERS: [&str; 4] = ["none", "pass_through", "driver_memory", "throttle_memory"];
/// Far above the load: every request is admitted.
const HUGE_LIMIT: u32 = 1_000_000;
const CLIENTS: usize = 32;

/// A middleware that only calls the rest of the chain.
struct PassThrough;

#[async_trait]
impl Middleware for PassThrough {
    async fn handle(&self, request: Request, next: Next) -> Response {
        next(request).await
    }
}

fn router(server: &str) -> Router {
    let router = Router::new().get("/", |_req: Request| async {
        HttpResponse::text("Hello from Suprnova.\n")
    });
    match server {
        "none" => router,
        "pass_through" => router.middleware(PassThrough),
        "driver_memory" => router.middleware(RateLimitMiddleware::ip_based(
            HUGE_LIMIT,
            Duration::from_secs(60),
        )),
        "throttle_memory" => router.middleware_named(&format!("throttle:{HUGE_LIMIT},1")),
        other => unreachable!("no server {other}"),
    }
}

fn container() -> App {
    let app = App::new();
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(InMemoryRateLimiter::new());
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    app.install(driver);
    app.install(Arc::new(CacheRateLimiter::new(store, clock::system())));
    app
}

/// `count` requests through `router`, the clients in turn; the time they took.
async fn serve(router: &Router, clients: &[SocketAddr], count: u64) -> Duration {
    let start = Instant::now();
    for i in 0..count as usize {
        let request = http::Request::get("/").body(String::new()).unwrap();
        let response = handle_request_with_peer(router, request, clients[i % clients.len()]).await;
        assert_eq!(response.status_code(), 200);
    }
    start.elapsed()
}

fn bench(c: &mut Criterion) {
    register_middleware_alias_with_args("throttle", ThrottleRequestsMiddleware::from_alias_args);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let clients: Vec<SocketAddr> = (1..=CLIENTS)
        .map(|n| SocketAddr::from(([127, 0, 0, n as u8], 40_000)))
        .collect();
    let mut group = c.benchmark_group("middleware_in_process");
    for server in SERVERS {
        let app = container();
        let router = router(server);
        group.bench_function(server, |b| {
            b.iter_custom(|iters| runtime.block_on(app.scope(serve(&router, &clients, iters))));
        });
    }
    group.finish();
}

fn report(since: SystemTime) {
    let ns = |id| support::estimates::nanos_per_iter("middleware_in_process", id, since);
    println!("\n== middleware in process: ns per request, this run ==");
    println!("machine: {}", support::machine::describe());
    let Some(none) = ns("none") else {
        return;
    };
    println!("{:<18} {:>10} {:>14}", "server", "ns", "over none");
    for server in SERVERS {
        if let Some(took) = ns(server) {
            println!("{server:<18} {took:>10.0} {:>14.0}", took - none);
        }
    }
}

fn main() {
    let since = SystemTime::now();
    let mut criterion = Criterion::default()
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .configure_from_args();
    bench(&mut criterion);
    criterion.final_summary();
    report(since);
}
