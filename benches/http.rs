//! The quickstart server under load on loopback, with no limiter and behind
//! each limiter, side by side in one run:
//!
//! ```text
//! cargo bench --bench http
//! HTTP_BENCH_ROUNDS=3 cargo bench --bench http                 # a quicker look
//! HTTP_BENCH_SERVERS=driver_memory cargo bench --bench http     # none and one other
//! ```
//!
//! The server is the quickstart's router (`GET /` answers a line of text),
//! served by `suprnova::server` on `127.0.0.1:<free port>` from a tokio
//! runtime of two workers. The client is hyper's HTTP/1.1 client in a
//! runtime of its own, of `HTTP_BENCH_CLIENT_THREADS` workers (default 2;
//! 1 is a current-thread runtime): `HTTP_BENCH_CONNECTIONS` keep-alive
//! connections (default 32), each sending one request after the other, for
//! a fixed count of `HTTP_BENCH_REQUESTS` (default 20,000) after a warm-up.
//! Each connection binds its own source address 127.0.0.N, so the server
//! sees 32 clients and the per-address limiters keep 32 buckets.
//!
//! The client has two threads, as the server has, so that the load
//! generator is not what sets the rate: on one thread, it reads every
//! response on one core while the server's two workers wait for it, and a
//! limited response, which carries two more headers to parse, then costs
//! the one client thread more time than it costs the server. Each round
//! prints the share of the machine's CPU time that was idle: above a few
//! percent, the server had time to spare and something else set the rate.
//!
//! The servers, each limit far above the load so that every request is
//! admitted and does the limiter's full work:
//!
//! - `none`: no limiter.
//! - `pass_through`: a middleware that only calls the rest of the chain,
//!   to tell what any middleware costs from what a limiter costs.
//! - `driver_memory`: `RateLimitMiddleware::ip_based(1_000_000, 60 s)` on
//!   the in-memory driver.
//! - `throttle_memory`: `throttle:1000000,1` on the in-memory cache store.
//! - `driver_redis`, `throttle_redis`: the same on a `redis-server` the
//!   bench starts on a free port.
//! - `driver_redis_socket`, `throttle_redis_socket`: the same Redis over
//!   its Unix socket (`unix://`), as a Redis beside the application on one
//!   host is reached: the round trip without TCP.
//! - `ping_redis`: no limiter, but a middleware that sends Redis one `PING`
//!   before the rest of the chain: what a round trip to Redis costs a
//!   request when Redis has nothing to do.
//!
//! `HTTP_BENCH_REDIS_CPU=<n>` gives `redis-server` CPU `n` to itself and
//! the bench process (server and load generator) the other CPUs, as a
//! Redis on a host of its own would leave the application its cores. Left
//! unset, all three share every CPU.
//!
//! The servers take turns, `HTTP_BENCH_ROUNDS` times (default 15), each
//! round starting one server further down the list, so that no server
//! always follows the same one. The bench reports each one's median round:
//! requests per second, p50 and p99 latency, and the ratio of its rate to
//! the `none` server's, with the slowest and fastest round beside it. On a
//! shared virtual machine one server's rounds can differ by half (the host
//! lends the same core more or less of itself from one second to the
//! next), so many short rounds give a steadier median than a few long ones.
//!
//! Beside the rates, the bench prints each server's CPU time a request
//! (median over its rounds; the scheduler's count, which leaves out time the
//! host took) and the ratio of the `none` server's to it: on CPUs the bench
//! keeps busy, the share of the bare rate a server would keep if CPU were
//! all that set the rate. In rounds where the host lends the machine less
//! CPU the rate falls and the CPU a request does not; otherwise the two
//! move together from round to round.
//!
//! That CPU time is the server's and the client's together, since both run
//! in this process. The bench also counts the client's own threads (its
//! runtime's workers and the main thread, which drives it; each thread's
//! kernel time included, so the client's share carries the loopback
//! delivery of its requests and the server's that of its responses) and
//! prints the rest, the server's CPU a request, with the share of the bare
//! server's rate it leaves when the server's CPU is all that limits the
//! rate: about what a server keeps when its clients run on other machines
//! (there it receives each request itself and hands its responses to a
//! network card, where here each side's kernel delivers what it sends).
//!
//! Most of a bare request's CPU over loopback is the kernel's, so beside the
//! machine the bench prints what a system call that does nothing takes there
//! and the kernel's mitigations of the processor's flaws
//! ([`support::machine::kernel_entry`]): what to set beside the rates when
//! comparing machines.

mod support;

use std::net::SocketAddr;
use std::time::Instant;

use support::loopback::{self, start_server};
use support::redis::RedisProcess;
use support::servers::{self, PingRedis, router};
use suprnova::Router;
use suprnova::container::App;
use suprnova::redis_client::RedisConnection;

const SERVERS: [&str; 9] = [
    "none",
    "pass_through",
    "driver_memory",
    "throttle_memory",
    "driver_redis",
    "throttle_redis",
    "driver_redis_socket",
    "throttle_redis_socket",
    "ping_redis",
];

/// The router of `server`.
fn server_router(server: &str, connections: &RedisConnections) -> Router {
    match server {
        "ping_redis" => router("none").middleware(PingRedis(connections.tcp.clone())),
        limited => router(limited),
    }
}

/// The bench's Redis, over TCP and over its Unix socket.
struct RedisConnections {
    tcp: RedisConnection,
    socket: RedisConnection,
}

/// A container with the backends `server` runs on.
fn container(server: &str, connections: &RedisConnections) -> App {
    let redis = if server.ends_with("_redis") {
        &connections.tcp
    } else if server.ends_with("_redis_socket") {
        &connections.socket
    } else {
        return servers::memory_container();
    };
    servers::redis_container(redis, "bench_http")
}

/// What one load of one server measured.
struct Load {
    rate: f64,
    p50_us: u32,
    p99_us: u32,
    /// CPU time per request of this process (server and client).
    process_cpu_us: f64,
    /// CPU time per request of the client's threads, a part of
    /// `process_cpu_us`.
    client_cpu_us: f64,
    /// CPU time per request of redis-server.
    redis_cpu_us: f64,
    /// CPU time the hypervisor gave to other machines while this ran, in
    /// percent of all CPU time: the noise of a shared host.
    steal_percent: f64,
    /// CPU time no thread of the machine used while this ran, in percent.
    idle_percent: f64,
    /// HTTP requests per read Redis made of a client socket: how many
    /// requests' commands the client's writes carried together.
    requests_per_read: f64,
}

/// A server's median round, and the rates of its slowest and fastest.
struct Median {
    load: Load,
    slowest: f64,
    fastest: f64,
}

/// Redis's `total_reads_processed`: reads of client sockets.
fn redis_reads(redis: &RedisProcess) -> u64 {
    redis.stat("total_reads_processed")
}

/// The CPU time a process's threads have run, in microseconds: the sum of
/// the first field of each thread's `/proc/<pid>/task/<tid>/schedstat`,
/// kept by the scheduler in nanoseconds (where `/proc/<pid>/stat` counts
/// whole 10 ms ticks). On a kernel with paravirtual steal accounting, time
/// the host took from the machine is not in it.
fn cpu_micros(pid: &str) -> f64 {
    threads_cpu_micros(pid, |_| false).0
}

/// The name of the client runtime's worker threads.
const CLIENT_THREAD: &str = "http-client";

/// [`cpu_micros`] of this process, and of it the client's threads': its
/// runtime's workers, and the main thread, which drives the client and does
/// nothing else while a load runs (with one client thread, the whole client
/// runs on it). One pass over the threads.
fn own_cpu_micros() -> (f64, f64) {
    let main = std::process::id().to_string();
    threads_cpu_micros("self", |thread| {
        thread.file_name().is_some_and(|tid| *tid == *main)
            || std::fs::read_to_string(thread.join("comm"))
                .is_ok_and(|name| name.trim_end() == CLIENT_THREAD)
    })
}

/// The CPU time of every thread of process `pid`, and of those for which
/// `pick` (given the thread's `/proc` directory) is true, in microseconds.
fn threads_cpu_micros(pid: &str, pick: impl Fn(&std::path::Path) -> bool) -> (f64, f64) {
    let (mut all, mut picked) = (0_u64, 0_u64);
    for thread in std::fs::read_dir(format!("/proc/{pid}/task"))
        .into_iter()
        .flatten()
        .flatten()
    {
        let path = thread.path();
        let Some(nanos) = std::fs::read_to_string(path.join("schedstat"))
            .ok()
            .and_then(|s| s.split_whitespace().next()?.parse::<u64>().ok())
        else {
            continue;
        };
        all += nanos;
        if pick(&path) {
            picked += nanos;
        }
    }
    (all as f64 / 1_000.0, picked as f64 / 1_000.0)
}

/// Pins every thread of process `pid` to `cpus`, a list in `taskset`'s
/// form (`0`, `0,2-3`).
fn pin(pid: &str, cpus: &str) {
    let status = std::process::Command::new("taskset")
        .args(["--all-tasks", "--cpu-list", "--pid", cpus, pid])
        .stdout(std::process::Stdio::null())
        .status()
        .expect("taskset (util-linux) runs");
    assert!(status.success(), "taskset could not pin {pid} to {cpus}");
}

/// With `HTTP_BENCH_REDIS_CPU=<n>`: CPU `n` for Redis, the others for this
/// process, and the line that says so; `None` when unset.
fn redis_cpu_layout() -> Option<(String, String)> {
    let redis_cpu = std::env::var("HTTP_BENCH_REDIS_CPU").ok()?;
    let cpus = support::machine::cpus();
    let redis_cpu: usize = redis_cpu
        .parse()
        .ok()
        .filter(|&n| n < cpus && cpus > 1)
        .unwrap_or_else(|| {
            panic!("HTTP_BENCH_REDIS_CPU: a CPU number below {cpus}, and at least two CPUs")
        });
    let others: Vec<String> = (0..cpus)
        .filter(|&c| c != redis_cpu)
        .map(|c| c.to_string())
        .collect();
    Some((redis_cpu.to_string(), others.join(",")))
}

/// `requests` requests over `connections` connections; the rate and the
/// latency percentiles.
fn load(
    client: &tokio::runtime::Runtime,
    addr: SocketAddr,
    connections: u64,
    requests: u64,
) -> Load {
    client.block_on(async {
        let start = Instant::now();
        let mut latencies = loopback::send(addr, connections, requests).await;
        let elapsed = start.elapsed();
        latencies.sort_unstable();
        let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q).round() as usize];
        Load {
            rate: requests as f64 / elapsed.as_secs_f64(),
            p50_us: at(0.50),
            p99_us: at(0.99),
            process_cpu_us: 0.0,
            client_cpu_us: 0.0,
            redis_cpu_us: 0.0,
            requests_per_read: 0.0,
            steal_percent: 0.0,
            idle_percent: 0.0,
        }
    })
}

/// For each server, the median over its rounds of `cpu` of a round.
fn median_per_server(results: &[(&str, Vec<Load>)], cpu: impl Fn(&Load) -> f64) -> Vec<f64> {
    results
        .iter()
        .map(|(_, loads)| support::median(&loads.iter().map(&cpu).collect::<Vec<_>>()))
        .collect()
}

/// Each server's CPU a request, and the share of the first server's (`none`)
/// rate it leaves when that CPU is all that limits the rate.
fn print_cpu_shares(servers: &[(&str, Median)], cpu: &[f64]) {
    for ((server, _), us) in servers.iter().zip(cpu) {
        println!("{server:<21} {us:>8.1} us {:>9.1}%", 100.0 * cpu[0] / us);
    }
}

fn main() {
    let requests = support::env_number("HTTP_BENCH_REQUESTS", 20_000);
    let connections = support::env_number("HTTP_BENCH_CONNECTIONS", 32).max(1);
    let rounds = support::env_number("HTTP_BENCH_ROUNDS", 15).max(1);
    let warm_up = (requests / 10).max(connections);

    // Pinned before any thread starts, so that every thread inherits it.
    let layout = redis_cpu_layout();
    if let Some((_, ours)) = &layout {
        pin(&std::process::id().to_string(), ours);
    }
    let redis = RedisProcess::start();
    if let Some((redis_cpu, _)) = &layout {
        pin(&redis.pid(), redis_cpu);
    }
    let server_runtime = support::two_worker_runtime();
    let client_threads = support::env_number("HTTP_BENCH_CLIENT_THREADS", 2).max(1);
    let client_runtime = match client_threads {
        1 => support::current_thread_runtime(),
        n => support::named_runtime(n as usize, CLIENT_THREAD),
    };
    let redis_conn = RedisConnections {
        tcp: redis.connection(&server_runtime),
        socket: redis.connection_at(&redis.socket_url(), &server_runtime),
    };

    servers::register_throttle();
    println!(
        "== http: {requests} requests over {connections} connections, {rounds} round(s), median round =="
    );
    println!("machine: {}", support::machine::describe());
    println!("kernel: {}", support::machine::kernel_entry());
    println!("client: {client_threads} thread(s)");
    match &layout {
        Some((redis_cpu, ours)) => {
            println!("CPUs: redis-server on {redis_cpu}, server and load on {ours}")
        }
        None => println!("CPUs: redis-server, server and load share every CPU"),
    }
    // HTTP_BENCH_SERVERS=none,driver_memory runs a subset; `none` always
    // runs, since every ratio is to it.
    let only = std::env::var("HTTP_BENCH_SERVERS").unwrap_or_default();
    let mut results: Vec<(&str, Vec<Load>)> = SERVERS
        .iter()
        .filter(|s| only.is_empty() || **s == "none" || only.split(',').any(|o| o == **s))
        .map(|s| (*s, Vec::new()))
        .collect();
    let servers = results.len();
    for round in 0..rounds {
        for turn in 0..servers {
            let (server, loads) = &mut results[(round as usize + turn) % servers];
            redis.command("FLUSHALL");
            let app = container(server, &redis_conn);
            let router = server_router(server, &redis_conn);
            let (addr, stop) = start_server(&server_runtime, app, router);
            load(&client_runtime, addr, connections, warm_up);
            let ((process_before, client_before), redis_before) =
                (own_cpu_micros(), cpu_micros(&redis.pid()));
            let reads_before = redis_reads(&redis);
            let ticks_before = support::machine::cpu_ticks();
            let mut measured = load(&client_runtime, addr, connections, requests);
            let ticks_after = support::machine::cpu_ticks();
            measured.steal_percent = ticks_before.steal_percent_until(ticks_after);
            measured.idle_percent = ticks_before.idle_percent_until(ticks_after);
            let (process_after, client_after) = own_cpu_micros();
            measured.process_cpu_us = (process_after - process_before) / requests as f64;
            measured.client_cpu_us = (client_after - client_before) / requests as f64;
            measured.redis_cpu_us = (cpu_micros(&redis.pid()) - redis_before) / requests as f64;
            // The reads of the two INFO commands themselves are left out.
            let reads = redis_reads(&redis).saturating_sub(reads_before + 2);
            measured.requests_per_read = match reads {
                0 => 0.0,
                reads => requests as f64 / reads as f64,
            };
            eprintln!(
                "round {round}: {server:<21} {:>9.0} req/s  p50 {:>5} us  p99 {:>6} us  CPU {:>5.1} (client {:>4.1}) + {:>4.1} us/request  steal {:>4.1}%  idle {:>4.1}%",
                measured.rate,
                measured.p50_us,
                measured.p99_us,
                measured.process_cpu_us,
                measured.client_cpu_us,
                measured.redis_cpu_us,
                measured.steal_percent,
                measured.idle_percent
            );
            loads.push(measured);
            drop(stop);
        }
    }
    // The CPU a request of each server took, median over its rounds: the
    // bench process's, and Redis's too when Redis shares the bench's CPUs.
    let cpu_per_request = median_per_server(&results, |l| {
        l.process_cpu_us
            + if layout.is_none() {
                l.redis_cpu_us
            } else {
                0.0
            }
    });
    // The server's own CPU a request, median over its rounds: this process
    // less the client's threads.
    let server_cpu_per_request =
        median_per_server(&results, |l| l.process_cpu_us - l.client_cpu_us);
    // The median round of each server, by rate, and its slowest and
    // fastest rates.
    let median = |loads: &mut Vec<Load>| {
        loads.sort_by(|a, b| a.rate.total_cmp(&b.rate));
        let (slowest, fastest) = (loads[0].rate, loads[loads.len() - 1].rate);
        Median {
            load: loads.swap_remove(loads.len() / 2),
            slowest,
            fastest,
        }
    };
    let medians: Vec<(&str, Median)> = results
        .iter_mut()
        .map(|(server, loads)| (*server, median(loads)))
        .collect();
    let base = medians[0].1.load.rate;
    println!(
        "{:<21} {:>10} {:>15} {:>9} {:>9} {:>10} {:>22} {:>15} {:>15} {:>20} {:>8} {:>8}",
        "server",
        "req/s",
        "rounds' range",
        "p50 us",
        "p99 us",
        "vs none",
        "bench CPU us/request",
        "of it, client",
        "redis CPU us/r",
        "requests/redis read",
        "steal",
        "idle"
    );
    for (
        server,
        Median {
            load,
            slowest,
            fastest,
        },
    ) in &medians
    {
        println!(
            "{:<21} {:>10.0} {:>15} {:>9} {:>9} {:>9.1}% {:>22.1} {:>15.1} {:>15.1} {:>20.2} {:>7.1}% {:>7.1}%",
            server,
            load.rate,
            format!("{slowest:.0}-{fastest:.0}"),
            load.p50_us,
            load.p99_us,
            100.0 * load.rate / base,
            load.process_cpu_us,
            load.client_cpu_us,
            load.redis_cpu_us,
            load.requests_per_read,
            load.steal_percent,
            load.idle_percent
        );
    }
    println!(
        "CPU a request, median of the rounds ({}), and the share of the none server's rate it leaves when CPU is all that limits the rate:",
        if layout.is_none() {
            "this process and redis-server"
        } else {
            "this process; redis-server has its own CPU"
        }
    );
    print_cpu_shares(&medians, &cpu_per_request);
    println!(
        "The server's CPU a request (this process less the client's threads), median of the rounds, and the share of the none server's rate it leaves when the server's CPU is all that limits the rate, as with its clients on other machines:"
    );
    print_cpu_shares(&medians, &server_cpu_per_request);
    let layout = match layout {
        Some(_) => "redis-server on a CPU of its own",
        None => "sharing every CPU",
    };
    for (server, Median { load, .. }) in &medians {
        // The memory limiters keep 90% of the bare server, the Redis-backed
        // ones 60%; the others are there to compare with.
        let share = match *server {
            "driver_memory" | "throttle_memory" => 0.90,
            s if s.starts_with("driver_redis") || s.starts_with("throttle_redis") => 0.60,
            _ => continue,
        };
        use support::targets::{Bound, Unit, check};
        check(
            &format!("HTTP {server} / none, {connections} connections, {layout}"),
            load.rate / base,
            Bound::AtLeast(share),
            Unit::Percent,
        );
    }
}
