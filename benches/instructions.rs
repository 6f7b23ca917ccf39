//! Instructions a request or a decision costs, in process: the measure that
//! does not move with the machine's load, since valgrind counts
//! instructions, not time.
//!
//! ```text
//! benches/instructions.sh        # every subject, per request or decision
//! ```
//!
//! The subjects:
//!
//! - the servers of the `middleware` bench (`none`, `pass_through`,
//!   `driver_memory`, `throttle_memory`, `throttle_named_memory`):
//!   `<count>` requests through
//!   `handle_request_with_peer` (after 2,000 to warm up), from 32 client
//!   addresses in turn, on the quickstart's router behind the server's
//!   limiter, on the memory backends;
//! - the same servers over HTTP (`http_none`, `http_pass_through`,
//!   `http_driver_memory`, `http_throttle_memory`): served by
//!   `suprnova::server` on a loopback port and loaded by the HTTP bench's
//!   client, 32 keep-alive connections from 32 addresses, all in one
//!   current-thread runtime, so that the count is the server's and the
//!   client's instructions a request together (the kernel's loopback work,
//!   the same for every server, is not counted);
//! - servers on a `redis-server` the bench starts, in process: `ping_redis`
//!   (a middleware that waits for one `PING`, then the bare route),
//!   `driver_redis` and `throttle_redis`: this process's instructions a
//!   request, the client side of each round trip (the Redis client, the
//!   runtime's I/O), without Redis's own;
//! - one decision of a limiter over 100,000 keys (`driver_decision`,
//!   `governor_decision`) and on one hot key (`driver_hot_key`,
//!   `governor_hot_key`): each key brought to its limit of 100 an hour
//!   first, then `<count>` refusals walking the keys, as in the flood case of
//!   the `memory_driver` bench (each limiter on its own clock; the driver's
//!   sweep set an hour apart);
//! - one decision of the memory driver on one full key through
//!   `Arc<dyn RateLimiterDriver>`, as the middleware holds it: its `async`
//!   method (`driver_dyn_async`, the future polled once) and
//!   `acquire_without_waiting` (`driver_dyn_without_waiting`);
//! - an admitted decision's two headers written on a new response
//!   (`headers_limit_60`, `headers_limit_1000000`): the limit and the places
//!   left, below the numbers the crate keeps written and above them.
//!
//! The script runs each subject under callgrind for two counts, collecting
//! only inside [`measured`] (the `<count>` requests or decisions), and
//! divides the difference: what is left out is start-up, warm-up and
//! filling, and what is the same in both counts. Start-up alone varies by
//! millions of instructions from one run to the next (the clock's
//! calibration against the system clock runs for a set time), which a
//! difference of whole-program counts spread over every request.
//!
//! `benches/instructions.sh --cache` runs the servers again with callgrind
//! simulating a Zen 3 core's caches, and prints the lines of code and of
//! data each request brings into the first-level caches: over HTTP a
//! request's code alternates with hyper's and the client's, and every line
//! a limiter runs through is fetched again for each request.

mod support;

use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use governor::{Quota, RateLimiter};
use support::loopback::{self, start_server};
use support::redis::RedisProcess;
use support::servers::{
    PingRedis, SERVERS, client_addresses, memory_container, redis_container, register_throttle,
    router, serve_in_process,
};
use suprnova::HttpResponse;
use suprnova::decision::Decision;
use suprnova::rate_limit::memory::InMemoryRateLimiter;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};

const HTTP_SERVERS: [&str; 4] = [
    "http_none",
    "http_pass_through",
    "http_driver_memory",
    "http_throttle_memory",
];
/// Servers on Redis, in process: a `PING` before the bare route, and the
/// Redis-backed limiters.
const REDIS_SERVERS: [&str; 3] = ["ping_redis", "driver_redis", "throttle_redis"];
const DECIDERS: [&str; 6] = [
    "driver_decision",
    "governor_decision",
    "driver_hot_key",
    "governor_hot_key",
    "driver_dyn_async",
    "driver_dyn_without_waiting",
];
/// An admitted decision's two headers written on a new response, for a
/// limit whose counts the crate keeps written (60) and one whose counts it
/// writes on each response (1,000,000).
const HEADER_WRITES: [&str; 2] = ["headers_limit_60", "headers_limit_1000000"];
const WARM_UP: u64 = 2_000;
const KEYS: usize = 100_000;
const LIMIT: u32 = 100;
/// The window of the limiters whose decisions are counted: an hour, so that
/// every measured decision is a refusal however long the filling takes.
/// Under valgrind, on a busy machine, filling 100,000 keys took more than a
/// minute, and with a window of one the keys filled first let hits go
/// before the measured walk (a decision counted 573 instructions where a
/// refusal takes about 345).
const WINDOW: Duration = Duration::from_secs(3600);

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` runs every bench with `--bench`: nothing to do then.
    let [subject, count] = args.as_slice() else {
        println!(
            "usage: instructions <subject> <count>, subjects {SERVERS:?} {HTTP_SERVERS:?} {REDIS_SERVERS:?} {DECIDERS:?} {HEADER_WRITES:?}; see benches/instructions.sh"
        );
        return;
    };
    let count: u64 = count.parse().expect("a count");
    match subject.as_str() {
        "driver_decision" => driver_decisions(KEYS, count),
        "governor_decision" => governor_decisions(KEYS, count),
        "driver_hot_key" => driver_decisions(1, count),
        "governor_hot_key" => governor_decisions(1, count),
        "driver_dyn_async" => dyn_decisions(count, true),
        "driver_dyn_without_waiting" => dyn_decisions(count, false),
        server if SERVERS.contains(&server) => requests(server, count),
        server if HTTP_SERVERS.contains(&server) => http_requests(&server["http_".len()..], count),
        server if REDIS_SERVERS.contains(&server) => redis_requests(server, count),
        "headers_limit_60" => header_writes(60, count),
        "headers_limit_1000000" => header_writes(1_000_000, count),
        other => panic!(
            "no subject {other}; subjects {SERVERS:?} {HTTP_SERVERS:?} {REDIS_SERVERS:?} {DECIDERS:?} {HEADER_WRITES:?}"
        ),
    }
}

fn requests(server: &str, count: u64) {
    register_throttle();
    let runtime = support::current_thread_runtime();
    let clients = client_addresses(32);
    let app = memory_container();
    let router = router(server);
    runtime.block_on(app.scope(serve_in_process(&router, &clients, WARM_UP)));
    measured(|| runtime.block_on(app.scope(serve_in_process(&router, &clients, count))));
}

/// `count` times: a new response, an admitted decision's headers on it
/// (`X-RateLimit-Limit: <limit>`, `X-RateLimit-Remaining: <limit - 1>`), and
/// the response dropped.
fn header_writes(limit: u64, count: u64) {
    let write = |times: u64| {
        for _ in 0..times {
            let mut response = HttpResponse::text("ok");
            Decision::allowed(black_box(limit), black_box(limit - 1)).apply_headers(&mut response);
            black_box(response);
        }
    };
    write(WARM_UP);
    measured(|| write(count));
}

/// Runs `work`: the script counts the instructions inside this function
/// only (`--toggle-collect`).
#[inline(never)]
fn measured<T>(work: impl FnOnce() -> T) -> T {
    black_box(work())
}

fn http_requests(server: &str, count: u64) {
    register_throttle();
    let runtime = support::current_thread_runtime();
    let (addr, stop) = start_server(&runtime, memory_container(), router(server));
    runtime.block_on(loopback::send(addr, 32, WARM_UP));
    measured(|| runtime.block_on(loopback::send(addr, 32, count)));
    drop(stop);
}

/// `count` requests in process through `server` on a `redis-server` of the
/// bench's own: what this process spends on a request that waits for Redis
/// (Redis's own work is another process's, and not counted).
fn redis_requests(server: &str, count: u64) {
    register_throttle();
    let redis = RedisProcess::start();
    let runtime = support::current_thread_runtime();
    let clients = client_addresses(32);
    let connection = redis.connection(&runtime);
    let app = redis_container(&connection, "bench_instructions");
    let router = match server {
        "ping_redis" => router("none").middleware(PingRedis(connection.clone())),
        limited => router(limited),
    };
    runtime.block_on(app.scope(serve_in_process(&router, &clients, WARM_UP)));
    measured(|| runtime.block_on(app.scope(serve_in_process(&router, &clients, count))));
}

/// `keys` keys `"user:N"`, and `decide` called on each until it is full,
/// then `count` more times walking them.
fn decisions(keys: usize, count: u64, mut decide: impl FnMut(&String) -> bool) {
    let keys: Vec<String> = (0..keys).map(|i| format!("user:{i}")).collect();
    for _ in 0..=LIMIT {
        for key in &keys {
            black_box(decide(key));
        }
    }
    measured(|| {
        for i in 0..count as usize {
            black_box(decide(&keys[i % keys.len()]));
        }
    });
}

fn driver_decisions(keys: usize, count: u64) {
    // Under valgrind a second of wall time is a few thousand decisions, so
    // the once-a-second sweep would be counted many times over: it is set an
    // hour apart here (its own cost: `memory_driver_sweep` in the
    // `memory_driver` bench).
    let limiter = InMemoryRateLimiter::new().with_sweep_interval(Duration::from_secs(3600));
    let config = SlidingWindowConfig::new(LIMIT, WINDOW);
    decisions(keys, count, |key| {
        limiter
            .acquire_now(key, &config)
            .expect("a valid config")
            .allowed
    });
}

fn governor_decisions(keys: usize, count: u64) {
    // A burst of the limit, then one cell a window: governor's quota of 100
    // a minute gives a cell back every 600 ms, which a slow filling outlasts.
    let quota = Quota::with_period(WINDOW)
        .expect("a period")
        .allow_burst(NonZeroU32::new(LIMIT).unwrap());
    let limiter = RateLimiter::keyed(quota);
    decisions(keys, count, |key| limiter.check_key(key).is_ok());
}

fn dyn_decisions(count: u64, through_future: bool) {
    let limiter: Arc<dyn RateLimiterDriver> =
        Arc::new(InMemoryRateLimiter::new().with_sweep_interval(Duration::from_secs(3600)));
    let config = SlidingWindowConfig::new(LIMIT, WINDOW);
    let mut cx = Context::from_waker(Waker::noop());
    let mut decide = || {
        let decision = if through_future {
            // The memory driver never waits: its future is ready when first
            // polled.
            match std::pin::pin!(limiter.acquire("hot", &config)).poll(&mut cx) {
                Poll::Ready(decision) => decision,
                Poll::Pending => unreachable!("the memory driver never waits"),
            }
        } else {
            limiter
                .acquire_without_waiting("hot", &config)
                .expect("the memory driver decides without waiting")
        };
        black_box(decision.expect("a valid config"));
    };
    for _ in 0..LIMIT {
        decide();
    }
    measured(|| {
        for _ in 0..count {
            decide();
        }
    });
}
