//! What each limiter adds to a request inside the process, without the
//! network: `handle_request_with_peer` through the quickstart's router with
//! no middleware, with a pass-through middleware, with
//! `RateLimitMiddleware::ip_based` on the memory driver, with
//! `throttle:1000000,1` on the memory cache store and with a named
//! limiter (`throttle:bench`) on it, in one run.
//!
//! ```text
//! cargo bench --bench middleware
//! ```
//!
//! Requests come from 32 client addresses in turn (so the limiters keep 32
//! buckets, as in the HTTP bench), on a current-thread tokio runtime; every
//! request is admitted and does all of the limiter's work. Each server runs
//! a second time on two threads at once (`<server>_2_threads`), sixteen
//! clients each, sharing the router and the container as the HTTP server's
//! two workers do: the time a request takes there, beside the time alone,
//! is what the cores' shared cache lines cost (a lock or a reference count
//! that both write). The HTTP bench
//! measures the same servers over loopback, where the network and the load
//! generator cost far more than the limiters; this one shows the limiters'
//! own cost, which is what a change to their request path moves.
//!
//! In a loop the request's code and data stay in the core's caches. After
//! criterion, the servers run again in turns, 9 rounds of 2,000 requests,
//! each request after 4 MiB of other memory has been read (one byte a
//! cache line, not timed), so that it finds its lines gone from the first-
//! and second-level caches as a server's other work between two requests
//! leaves them: the median round's time a request, and over the bare route.

mod support;

use std::net::SocketAddr;
use std::sync::Barrier;
use std::time::{Duration, SystemTime};

use criterion::Criterion;
use support::servers::{
    SERVERS, client_addresses, memory_container, register_throttle, router, serve_in_process,
    serve_in_process_evicted,
};
use suprnova::Router;
use suprnova::container::App;

const CLIENTS: u8 = 32;

fn bench(c: &mut Criterion) {
    register_throttle();
    let runtime = support::current_thread_runtime();
    let clients = client_addresses(CLIENTS);
    let mut group = c.benchmark_group("middleware_in_process");
    for server in SERVERS {
        let app = memory_container();
        let router = router(server);
        group.bench_function(server, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(app.scope(serve_in_process(&router, &clients, iters)))
            });
        });
        group.bench_function(format!("{server}_2_threads"), |b| {
            b.iter_custom(|iters| on_two_threads(&app, &router, &clients, iters));
        });
    }
    group.finish();
}

/// `iters` requests on each of two threads at once, each thread a
/// current-thread runtime with half of the clients, as the server's two
/// workers share one router and one container; the slower thread's time.
fn on_two_threads(app: &App, router: &Router, clients: &[SocketAddr], iters: u64) -> Duration {
    let start = Barrier::new(2);
    std::thread::scope(|s| {
        let threads: Vec<_> = clients
            .chunks(clients.len() / 2)
            .map(|half| {
                let start = &start;
                s.spawn(move || {
                    let runtime = support::current_thread_runtime();
                    start.wait();
                    runtime.block_on(app.scope(serve_in_process(router, half, iters)))
                })
            })
            .collect();
        threads
            .into_iter()
            .map(|t| t.join().expect("a bench thread"))
            .max()
            .expect("two threads")
    })
}

fn report(since: SystemTime) {
    let ns = |id: &str| support::estimates::nanos_per_iter("middleware_in_process", id, since);
    println!("\n== middleware in process: ns per request, this run ==");
    println!("machine: {}", support::machine::describe());
    let Some(none) = ns("none") else {
        return;
    };
    let none_2 = ns("none_2_threads");
    println!(
        "{:<22} {:>10} {:>14} {:>22} {:>14}",
        "server", "ns", "over none", "ns, 2 threads at once", "over none"
    );
    for server in SERVERS {
        if let Some(took) = ns(server) {
            let two = ns(&format!("{server}_2_threads"));
            let (two, two_over) = match (two, none_2) {
                (Some(two), Some(none_2)) => (format!("{two:.0}"), format!("{:.0}", two - none_2)),
                _ => ("-".into(), "-".into()),
            };
            println!(
                "{server:<22} {took:>10.0} {:>14.0} {two:>22} {two_over:>14}",
                took - none
            );
        }
    }
}

/// Rounds of the servers in turns with their caches emptied before each
/// request, and requests a server serves in a round.
const EVICTED_ROUNDS: usize = 9;
const EVICTED_REQUESTS: u64 = 2_000;
/// Read before each request: more than any second-level cache of the
/// machines the benches ran on (2 MiB a core at most).
const EVICT_BYTES: usize = 4 << 20;

/// Each server's median round, ns a request, its caches emptied before
/// each request.
fn evicted() {
    let runtime = support::current_thread_runtime();
    let clients = client_addresses(CLIENTS);
    let evict = vec![1u8; EVICT_BYTES];
    let servers: Vec<(App, Router)> = SERVERS
        .iter()
        .map(|server| (memory_container(), router(server)))
        .collect();
    let mut rounds: Vec<Vec<f64>> = vec![Vec::new(); SERVERS.len()];
    for round in 0..=EVICTED_ROUNDS {
        for (i, (app, router)) in servers.iter().enumerate() {
            let took = runtime.block_on(app.scope(serve_in_process_evicted(
                router,
                &clients,
                EVICTED_REQUESTS,
                &evict,
            )));
            // The first round warms up.
            if round > 0 {
                rounds[i].push(took.as_nanos() as f64 / EVICTED_REQUESTS as f64);
            }
        }
    }
    let medians: Vec<f64> = rounds.iter().map(|ns| support::median(ns)).collect();
    println!(
        "\n== middleware in process, 4 MiB read before each request: ns per request, median of {EVICTED_ROUNDS} rounds of {EVICTED_REQUESTS} =="
    );
    println!("{:<22} {:>10} {:>14}", "server", "ns", "over none");
    for (server, ns) in SERVERS.iter().zip(&medians) {
        println!("{server:<22} {ns:>10.0} {:>14.0}", ns - medians[0]);
    }
}

fn main() {
    let since = SystemTime::now();
    let mut criterion = support::criterion(Duration::from_secs(4));
    bench(&mut criterion);
    criterion.final_summary();
    report(since);
    evicted();
}
