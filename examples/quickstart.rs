//! Quickstart: a small application that boots from the environment as a
//! real service does, and serves routes behind both kinds of limiter.
//!
//! It needs nothing but Rust: `cargo run --example quickstart` listens on
//! `127.0.0.1:8080` (`PORT` overrides) on the in-memory limiter, logs how it
//! booted and each route with its limit, and prints a `curl` line for each
//! route that shows the route's `429` and its headers. ctrl-c stops it
//! gracefully.
//!
//! When `APP_ENV` is unset it boots as `local`, and says so: it is a
//! development application. The library alone treats an unset `APP_ENV` as
//! production, which refuses the in-memory limiter; the quickstart keeps
//! that refusal for an explicit `APP_ENV=production`. Any refused
//! configuration is printed on stderr, and the process exits with status 1
//! before it listens.
//!
//! The routes:
//!
//! - `GET /`: no limit.
//! - `GET /sliding`: 10 in any minute per address, by the exact sliding
//!   window (`RateLimitMiddleware::ip_based`).
//! - `GET /throttled`: `throttle:60,1`, Laravel's fixed window, counted in
//!   the cache store.
//! - `GET /api/items`: `throttle:api`, a named limiter of 30 a minute for
//!   each user or address.
//! - `POST /login`: 20 in any minute per address, stacked with 5 in any 15
//!   minutes per account named in the `email` field, which fails closed.
//!
//! On Redis, with a `redis-server` on `127.0.0.1:6379`, both limiters count
//! there:
//!
//! ```text
//! RATE_LIMIT_DRIVER=redis RATE_LIMIT_REDIS_URL=redis://127.0.0.1:6379 \
//! CACHE_STORE=redis REDIS_URL=redis://127.0.0.1:6379 \
//! cargo run --example quickstart
//! ```
//!
//! It reads `.env` when there is one; `.env.example` lists every variable.
//! `RUST_LOG` sets the log level (default `info`).

mod common;

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use suprnova::bootstrap::bootstrap;
use suprnova::config::Env;
use suprnova::container::App;
use suprnova::middleware::register_middleware_alias_with_args;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig, identity_key,
    names_identity,
};
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router, ThrottleRequestsMiddleware};

/// The port when `PORT` is unset.
const DEFAULT_PORT: u16 = 8080;
/// One minute, the window of most routes here.
const MINUTE: Duration = Duration::from_secs(60);
/// `/sliding`: requests each address may make in any minute.
const SLIDING_PER_MINUTE: u32 = 10;
/// `/api/items` (`throttle:api`): requests a minute for each user or address.
const API_PER_MINUTE: i64 = 30;
/// `/login`: attempts each address may make in any minute, whichever
/// account they name.
const LOGIN_PER_ADDRESS: u32 = 20;
/// `/login`: attempts each account may receive in any 15 minutes, from
/// wherever they come.
const LOGIN_PER_ACCOUNT: SlidingWindowConfig =
    SlidingWindowConfig::new(5, Duration::from_secs(15 * 60));

#[tokio::main]
async fn main() -> ExitCode {
    // `.env` before the log is set up: it may set RUST_LOG.
    let started = match common::load_dotenv_and_log() {
        Ok(()) => run().await,
        Err(refusal) => Err(refusal.into()),
    };
    match started {
        Ok(()) => ExitCode::SUCCESS,
        Err(refusal) => {
            // The whole message, on stderr, before anything listens: it
            // names the variable and the fix.
            eprintln!("{refusal}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), Box<dyn Error>> {
    let env = load_env()?;
    let port = env.parse::<u16>("PORT")?.unwrap_or(DEFAULT_PORT);
    // Installs the sliding-window driver, the throttle's cache store and
    // the trusted proxies into the application container.
    let summary = bootstrap(&env).await?;
    tracing::info!("rate limiting ready: {summary}");

    let router = routes()?;
    let server = suprnova::server::bind(("127.0.0.1", port)).await?;
    let addr = server.local_addr()?;
    tracing::info!("listening on http://{addr}");
    log_routes(&router, &format!("http://{addr}"));
    server.serve(router).await?;
    tracing::info!("stopped");
    Ok(())
}

/// The process environment, `.env` loaded into it, with `APP_ENV`
/// defaulting to `local`.
fn load_env() -> Result<Env, Box<dyn Error>> {
    if Env::process().get("APP_ENV").is_none() {
        tracing::info!(
            "APP_ENV is unset: the quickstart boots as local (the library alone would boot as \
             production, which refuses the in-memory limiter)"
        );
    }
    Ok(Env::process().with_default("APP_ENV", "local"))
}

/// The application's routes, each behind its limit. Runs after boot: the
/// per-account limit takes the installed driver, and the aliases and named
/// limiters are registered in the application container.
fn routes() -> Result<Router, Box<dyn Error>> {
    // Routes name the Laravel-shape throttle as Laravel's do:
    // `throttle:60,1`, or `throttle:<limiter name>`.
    register_middleware_alias_with_args("throttle", ThrottleRequestsMiddleware::from_alias_args);
    // Laravel's default `api` limiter: each signed-in user, or else each
    // address, gets its own bucket.
    RateLimiter::define("api", |req| {
        let key = match req.user_id() {
            Some(id) => format!("user:{id}"),
            None => format!("ip:{}", req.ip().unwrap_or_default()),
        };
        Limit::per_minute(API_PER_MINUTE).by(key).into()
    });
    let driver = App::resolve_make::<dyn RateLimiterDriver>()?;

    let router = Router::new()
        .get("/", home)
        .merge(
            Router::new()
                .get("/sliding", sliding)
                .middleware(RateLimitMiddleware::ip_based(SLIDING_PER_MINUTE, MINUTE)),
        )
        .merge(
            Router::new()
                .get("/throttled", throttled)
                .try_middleware_named("throttle:60,1")?,
        )
        .merge(
            Router::new()
                .get("/api/items", items)
                .try_middleware_named("throttle:api")?,
        )
        .merge(
            Router::new()
                .post("/login", login)
                .middleware(RateLimitMiddleware::ip_based(LOGIN_PER_ADDRESS, MINUTE))
                .middleware(per_account(driver)),
        );
    Ok(router)
}

/// The per-recipient limit of `/login`: keyed on the account the request
/// names, so that many addresses cannot share out guesses at one account.
fn per_account(driver: Arc<dyn RateLimiterDriver>) -> RateLimitMiddleware {
    RateLimitMiddleware::new(driver, LOGIN_PER_ACCOUNT, |req| {
        identity_key(req, "email", "login")
    })
    // A sign-in form names the account in its body.
    .key_reads_body(4096)
    // A request that names nobody is left to the per-address limit, rather
    // than counted against this tighter one.
    .only_when(|req| names_identity(req, "email"))
    // If the driver's backend is down, an account under attack stays
    // protected: 503 rather than unlimited guesses.
    .on_backend_error(BackendErrorPolicy::FailClosed)
}

async fn home(_req: Request) -> HttpResponse {
    HttpResponse::text(
        "Hello from Suprnova. Try /sliding, /throttled, /api/items and POST /login.\n",
    )
}

async fn sliding(_req: Request) -> HttpResponse {
    HttpResponse::text("admitted by the sliding-window driver\n")
}

async fn throttled(_req: Request) -> HttpResponse {
    HttpResponse::text("admitted by throttle:60,1\n")
}

async fn items(_req: Request) -> HttpResponse {
    HttpResponse::json(serde_json::json!({ "items": ["apple", "pear"] }))
}

/// A sign-in that accepts nobody: the route is here for its limits.
async fn login(_req: Request) -> HttpResponse {
    HttpResponse::text("these credentials do not match\n").status(401)
}

/// How a route is limited, for the start-up log.
struct LimitShown {
    /// The limit in words.
    limit: String,
    /// The requests in a row that reach the 429.
    to_refusal: u32,
    /// A form body to send, for a `POST`.
    form: Option<&'static str>,
}

fn limit_of(path: &str) -> Option<LimitShown> {
    let shown = |limit: String, to_refusal: u32, form| LimitShown {
        limit,
        to_refusal,
        form,
    };
    match path {
        "/sliding" => Some(shown(
            format!(
                "{SLIDING_PER_MINUTE} in any minute per address (RateLimitMiddleware::ip_based, \
                 sliding window)"
            ),
            SLIDING_PER_MINUTE + 1,
            None,
        )),
        "/throttled" => Some(shown(
            "60 a minute per address and path (throttle:60,1, fixed window in the cache store)"
                .to_owned(),
            61,
            None,
        )),
        "/api/items" => Some(shown(
            format!(
                "{API_PER_MINUTE} a minute per user or address (throttle:api, a named limiter)"
            ),
            API_PER_MINUTE as u32 + 1,
            None,
        )),
        "/login" => Some(shown(
            format!(
                "{LOGIN_PER_ADDRESS} in any minute per address, and {} in any {} minutes per \
                 account named in `email` (ip_based stacked with identity_key, failing closed)",
                LOGIN_PER_ACCOUNT.max_requests,
                LOGIN_PER_ACCOUNT.window.as_secs() / 60
            ),
            LOGIN_PER_ACCOUNT.max_requests + 1,
            Some("email=ada@example.com&password=guess"),
        )),
        _ => None,
    }
}

/// Logs each route with its limit, and the `curl` lines that show its 429
/// and its headers.
fn log_routes(router: &Router, base: &str) {
    for route in router.routes() {
        let url = format!("{base}{}", route.path);
        let named = if route.middleware.is_empty() {
            String::new()
        } else {
            format!(" [{}]", route.middleware.join(", "))
        };
        let Some(shown) = limit_of(&route.path) else {
            tracing::info!(
                "route {} {}{named}: no limit; try: curl -i {url}",
                route.method,
                route.path
            );
            continue;
        };
        let data = shown.form.map(|f| format!(" -d '{f}'")).unwrap_or_default();
        tracing::info!(
            "route {} {}{named}: {}; see the 429: for i in $(seq {}); do curl -s -o /dev/null \
             -w '%{{http_code}}\\n'{data} {url}; done; curl -i{data} {url}",
            route.method,
            route.path,
            shown.limit,
            shown.to_refusal,
        );
    }
}
