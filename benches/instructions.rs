//! Instructions a request costs through each server, in process: the
//! measure of the middleware's per-request work that does not move with the
//! machine's load, since valgrind counts instructions, not time.
//!
//! ```text
//! benches/instructions.sh        # every server, per request and over none
//! ```
//!
//! The binary runs `<count>` requests through `handle_request_with_peer`
//! (after 2,000 to warm up), from 32 client addresses in turn, on the
//! quickstart's router behind the server's limiter, on the memory backends:
//! the requests of the `middleware` bench, without criterion around them.
//! The script runs it under callgrind for two counts and divides the
//! difference, which leaves out start-up and warm-up.

mod support;

use support::servers::{
    client_addresses, memory_container, register_throttle, router, serve_in_process,
};

const SERVERS: [&str; 4] = ["none", "pass_through", "driver_memory", "throttle_memory"];
const WARM_UP: u64 = 2_000;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    // `cargo bench` runs every bench with `--bench`: nothing to do then.
    let [server, count] = args.as_slice() else {
        println!(
            "usage: instructions <server> <count>, servers {SERVERS:?}; see benches/instructions.sh"
        );
        return;
    };
    assert!(
        SERVERS.contains(&server.as_str()),
        "no server {server}; servers {SERVERS:?}"
    );
    let count: u64 = count.parse().expect("a count of requests");
    register_throttle();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let clients = client_addresses(32);
    let app = memory_container();
    let router = router(server);
    runtime.block_on(app.scope(serve_in_process(&router, &clients, WARM_UP)));
    runtime.block_on(app.scope(serve_in_process(&router, &clients, count)));
}
