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

mod support;

use std::net::SocketAddr;
use std::sync::Barrier;
use std::time::{Duration, SystemTime};

use criterion::Criterion;
use support::servers::{
    SERVERS, client_addresses, memory_container, register_throttle, router, serve_in_process,
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
        "{:<18} {:>10} {:>14} {:>22} {:>14}",
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
                "{server:<18} {took:>10.0} {:>14.0} {two:>22} {two_over:>14}",
                took - none
            );
        }
    }
}

fn main() {
    let since = SystemTime::now();
    let mut criterion = support::criterion(Duration::from_secs(4));
    bench(&mut criterion);
    criterion.final_summary();
    report(since);
}
