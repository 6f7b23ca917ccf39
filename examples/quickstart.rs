//! Quickstart: a small application that boots from the environment the way
//! a real service does, and serves routes behind both kinds of limiter.
//!
//! It needs nothing but Rust: run it with `cargo run --example quickstart`
//! and it listens on `127.0.0.1:8080` (`PORT` overrides) on the in-memory
//! limiter. It prints a `curl` line for each route that shows the route's
//! `429` and its headers. ctrl-c stops it gracefully.
//!
//! When `APP_ENV` is unset it boots as `local`: this is a development
//! application. The library alone treats an unset `APP_ENV` as production
//! and refuses the in-memory limiter there; the quickstart keeps that refusal
//! for an explicit `APP_ENV=production`, and prints it and exits non-zero
//! before it listens.
//!
//! On Redis (a local `redis-server` on 6379):
//!
//! ```text
//! RATE_LIMIT_DRIVER=redis RATE_LIMIT_REDIS_URL=redis://127.0.0.1:6379 \
//! CACHE_STORE=redis REDIS_URL=redis://127.0.0.1:6379 \
//! cargo run --example quickstart
//! ```
//!
//! It reads `.env` when there is one; `.env.example` lists every variable.
//! `RUST_LOG` sets the log level (default `info`).

use std::error::Error;
use std::io::IsTerminal;
use std::process::ExitCode;

use suprnova::bootstrap::bootstrap;
use suprnova::config::{Env, load_dotenv};
use suprnova::{HttpResponse, Request, Router};

/// The port when `PORT` is unset.
const DEFAULT_PORT: u16 = 8080;

#[tokio::main]
async fn main() -> ExitCode {
    init_logging();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(refusal) => {
            // The whole message, on stderr, before anything listens: it
            // names the variable and the fix.
            eprintln!("{refusal}");
            ExitCode::FAILURE
        }
    }
}

/// Logs to stdout at the level `RUST_LOG` sets, `info` by default.
fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        // Colour codes only on a terminal, so that logs piped to a file or
        // a collector stay plain text.
        .with_ansi(std::io::stdout().is_terminal())
        .init();
}

async fn run() -> Result<(), Box<dyn Error>> {
    let env = load_env()?;
    let port = env.parse::<u16>("PORT")?.unwrap_or(DEFAULT_PORT);
    // Installs the sliding-window driver, the throttle's cache store and
    // the trusted proxies into the application container.
    let summary = bootstrap(&env).await?;
    tracing::info!("rate limiting ready: {summary}");

    let router = routes();
    let server = suprnova::server::bind(("127.0.0.1", port)).await?;
    let addr = server.local_addr()?;
    tracing::info!("listening on http://{addr}");
    log_routes(&router, &format!("http://{addr}"));
    server.serve(router).await?;
    tracing::info!("stopped");
    Ok(())
}

/// `.env` (when present) under the process environment, with `APP_ENV`
/// defaulting to `local`.
fn load_env() -> Result<Env, Box<dyn Error>> {
    load_dotenv()?;
    if Env::process().get("APP_ENV").is_none() {
        tracing::info!(
            "APP_ENV is unset: the quickstart boots as local (the library alone would boot as \
             production, which refuses the in-memory limiter)"
        );
    }
    Ok(Env::process().with_default("APP_ENV", "local"))
}

fn routes() -> Router {
    Router::new().get("/", home)
}

async fn home(_req: Request) -> HttpResponse {
    HttpResponse::text("Hello from Suprnova.\n")
}

/// One line per route with its limit, and a line to try it.
fn log_routes(router: &Router, base: &str) {
    for route in router.routes() {
        tracing::info!(
            "route {} {}  try: curl -i {base}{}",
            route.method,
            route.path,
            route.path
        );
    }
}
