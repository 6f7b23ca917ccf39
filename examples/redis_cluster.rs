//! Redis Cluster: several replicas of one application share one exact limit
//! kept on a Redis Cluster, on both sides of the crate.
//!
//! It needs a Redis Cluster. Give it the nodes, as a comma-separated list or
//! as `redis+cluster://`:
//!
//! ```text
//! RATE_LIMIT_REDIS_URL=redis://127.0.0.1:7000,redis://127.0.0.1:7001,redis://127.0.0.1:7002 \
//! cargo run --example redis_cluster
//! ```
//!
//! A local cluster of three nodes, for trying it:
//!
//! ```text
//! for p in 7000 7001 7002; do
//!   redis-server --port $p --cluster-enabled yes --cluster-config-file nodes-$p.conf \
//!     --save '' --appendonly no --daemonize yes
//! done
//! redis-cli --cluster create 127.0.0.1:7000 127.0.0.1:7001 127.0.0.1:7002 --cluster-replicas 0 --cluster-yes
//! ```
//!
//! What it shows, printing each result and exiting:
//!
//! 1. Four replicas boot from the same environment (`RATE_LIMIT_DRIVER=redis`
//!    and `CACHE_STORE=redis` on the cluster are the defaults here), each
//!    with its own container and its own connections, as four processes
//!    would.
//! 2. The sliding-window driver: 400 concurrent calls from the four replicas
//!    on one key with a limit of 100 in 2 seconds admit exactly 100; other
//!    keys, spread over the cluster's slots, count apart; once the window
//!    has passed the key admits again.
//! 3. The Laravel-shape facade: `RateLimiter::hit_and_check` counts the
//!    replicas' hits in one fixed window on the cluster, and
//!    `RateLimiter::available_in` says when it reopens.

mod common;

use std::error::Error;
use std::sync::Arc;
use std::time::Duration;

use suprnova::RateLimiter;
use suprnova::bootstrap::bootstrap;
use suprnova::config::Env;
use suprnova::container::App;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};

/// How many replicas share the limit.
const REPLICAS: usize = 4;
/// Concurrent callers in each replica.
const CALLERS: usize = 25;
/// Calls each caller makes.
const CALLS: usize = 4;
/// The limit of the sliding-window part.
const WINDOW: SlidingWindowConfig = SlidingWindowConfig::new(100, Duration::from_secs(2));

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    common::load_dotenv_and_log_to_stderr()?;
    let env = cluster_env()?;
    let replicas = boot_replicas(&env).await?;
    sliding_window(&replicas).await?;
    laravel_facade(&replicas).await?;
    Ok(())
}

/// The process environment (and `.env`), with the driver and the cache
/// store on the cluster unless they are set.
fn cluster_env() -> Result<Env, Box<dyn Error>> {
    let env = Env::process();
    let Some(url) = env.get("RATE_LIMIT_REDIS_URL") else {
        return Err(
            "RATE_LIMIT_REDIS_URL is unset: this example needs a Redis Cluster, for \
                    example RATE_LIMIT_REDIS_URL=redis://127.0.0.1:7000,redis://127.0.0.1:7001,\
                    redis://127.0.0.1:7002 (the first lines of examples/redis_cluster.rs show \
                    how to start one)"
                .into(),
        );
    };
    Ok(env
        .with_default("APP_ENV", "local")
        .with_default("RATE_LIMIT_DRIVER", "redis")
        .with_default("CACHE_STORE", "redis")
        .with_default("REDIS_URL", &url))
}

/// Containers booted from `env`, one per replica.
async fn boot_replicas(env: &Env) -> Result<Vec<App>, Box<dyn Error>> {
    let mut replicas = Vec::with_capacity(REPLICAS);
    for n in 1..=REPLICAS {
        let app = App::new();
        let summary = app.scope(bootstrap(env)).await?;
        println!("replica {n}: {summary}");
        replicas.push(app);
    }
    Ok(replicas)
}

/// The driver a replica booted with.
fn driver_of(app: &App) -> Result<Arc<dyn RateLimiterDriver>, Box<dyn Error>> {
    Ok(app.make::<dyn RateLimiterDriver>()?)
}

/// Every replica's callers call `key` at once; returns how many were
/// admitted.
async fn burst(replicas: &[App], key: &str) -> Result<usize, Box<dyn Error>> {
    let mut callers = Vec::new();
    for app in replicas {
        let driver = driver_of(app)?;
        for _ in 0..CALLERS {
            let (driver, key) = (driver.clone(), key.to_owned());
            callers.push(tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..CALLS {
                    if driver.try_acquire(&key, &WINDOW).await? {
                        admitted += 1;
                    }
                }
                Ok::<usize, suprnova::rate_limit::RateLimitError>(admitted)
            }));
        }
    }
    let mut admitted = 0;
    for caller in callers {
        admitted += caller.await??;
    }
    Ok(admitted)
}

async fn sliding_window(replicas: &[App]) -> Result<(), Box<dyn Error>> {
    println!(
        "\nsliding window: {} calls from {REPLICAS} replicas, limit {} in {:?}",
        REPLICAS * CALLERS * CALLS,
        WINDOW.max_requests,
        WINDOW.window
    );
    // A key of its own for each run, so that running the example twice in a
    // window does not count the first run.
    let run = std::process::id();
    let key = format!("example:{run}:orders");
    println!("  {key}: {} admitted", burst(replicas, &key).await?);

    for other in ["search", "uploads", "exports"] {
        let key = format!("example:{run}:{other}");
        println!("  {key}: {} admitted", burst(replicas, &key).await?);
    }

    let driver = driver_of(&replicas[0])?;
    let wait = driver.retry_after(&key, &WINDOW).await?.unwrap_or_default();
    println!(
        "  {key} reopens in {:.2} s; waiting for it",
        wait.as_secs_f64()
    );
    tokio::time::sleep(wait + Duration::from_millis(50)).await;
    let again = driver.try_acquire(&key, &WINDOW).await?;
    println!("  {key} after the wait: admitted = {again}");
    Ok(())
}

async fn laravel_facade(replicas: &[App]) -> Result<(), Box<dyn Error>> {
    let key = format!("example:{}:reports", std::process::id());
    println!("\nRateLimiter facade: 5 hits a minute on {key}, one hit from each replica in turn");
    for hit in 1..=7 {
        let app = &replicas[(hit - 1) % replicas.len()];
        let refused = app.scope(RateLimiter::hit_and_check(&key, 5, 60)).await?;
        println!(
            "  hit {hit} from replica {}: {}",
            (hit - 1) % replicas.len() + 1,
            if refused { "refused" } else { "admitted" }
        );
    }
    let app = &replicas[0];
    let attempts = app.scope(RateLimiter::attempts(&key)).await?;
    let available_in = app.scope(RateLimiter::available_in(&key)).await?;
    println!("  attempts = {attempts}, available in {available_in} s");
    app.scope(RateLimiter::clear(&key)).await?;
    Ok(())
}
