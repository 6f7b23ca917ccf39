//! Laravel migration: the throttles of a Laravel application, route for
//! route, counting in the Redis that the Laravel application uses.
//!
//! It needs a Redis: by default the one a Laravel application reaches with
//! its own defaults, `127.0.0.1:6379`, database 1 (its cache database).
//! `REDIS_URL`, or `REDIS_HOST` and `REDIS_PORT`, point it elsewhere, and
//! `CACHE_PREFIX` / `REDIS_PREFIX` match an application whose prefixes
//! differ from Laravel's defaults. Without a Redis, try it with
//! `CACHE_STORE=memory`.
//!
//! ```text
//! cargo run --example laravel_migration
//! CACHE_STORE=memory cargo run --example laravel_migration
//! ```
//!
//! It listens on `127.0.0.1:8080` (`PORT` overrides) and logs a `curl` line
//! for each route. The Laravel code it ports, and where each line went:
//!
//! | Laravel | here |
//! | --- | --- |
//! | `RateLimiter::for('api', fn ($r) => Limit::perMinute(60)->by($r->user()?->id ?: $r->ip()))` | `RateLimiter::define("api", ...)` |
//! | `RateLimiter::for('uploads', fn ($r) => [Limit::perMinute(3)->by($r->ip()), Limit::perDay(20)->by($r->ip())])` | a `Vec<Limit>` `.into()` |
//! | `RateLimiter::for('login', fn ($r) => Limit::perMinute(5)->by($r->ip())->after(fn ($res) => $res->status() >= 400)->response(...))` | `Limit::per_minute(5).by(..).after(..).response(..)` |
//! | `Route::middleware('throttle:api')->get('/api/user', ...)` | `.middleware_named("throttle:api")` |
//! | `Route::middleware('throttle:10,1')->get('/export', ...)` | `.middleware_named("throttle:10,1")` |
//! | `RateLimiter::attempts($key)`, `availableIn($key)` | `RateLimiter::attempts(key)`, `available_in(key)` on `GET /limits` |
//!
//! The counters are stored as Laravel's cache stores them: under
//! `REDIS_PREFIX` + `CACHE_PREFIX` + the key, with a `:timer` key beside
//! each. A named limiter's limit counts under `<name>:<limit key>`, the key
//! Laravel's `ThrottleRequests` uses when it does not hash keys
//! (`ThrottleRequests::shouldHashKeys(false)`), so both applications can
//! read and spend one budget.

mod common;

use std::error::Error;

use suprnova::bootstrap::bootstrap;
use suprnova::cache::CacheConfig;
use suprnova::config::Env;
use suprnova::middleware::register_middleware_alias_with_args;
use suprnova::{HttpResponse, Limit, RateLimiter, Request, Router, ThrottleRequestsMiddleware};

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    common::load_dotenv_and_log()?;
    // A Laravel application keeps its throttle counters in its Redis cache.
    let env = Env::process()
        .with_default("APP_ENV", "local")
        .with_default("CACHE_STORE", "redis");
    let port = env.parse::<u16>("PORT")?.unwrap_or(8080);
    let summary = bootstrap(&env).await?;
    let key_prefix = CacheConfig::from_env(&env)?.key_prefix();
    tracing::info!("booted: {summary}; cache keys start with {key_prefix:?}");

    register_middleware_alias_with_args("throttle", ThrottleRequestsMiddleware::from_alias_args);
    define_limiters();
    let router = routes()?;

    let server = suprnova::server::bind(("127.0.0.1", port)).await?;
    let base = format!("http://{}", server.local_addr()?);
    for (route, try_it) in [
        (
            "GET /api/user [throttle:api]",
            format!("curl -i {base}/api/user"),
        ),
        (
            "POST /api/uploads [throttle:uploads]",
            format!(
                "for i in $(seq 4); do curl -s -o /dev/null -w '%{{http_code}}\\n' -X POST {base}/api/uploads; done"
            ),
        ),
        (
            "POST /login [throttle:login], failed attempts only",
            format!(
                "for i in $(seq 6); do curl -s -o /dev/null -w '%{{http_code}}\\n' -d 'password=guess' {base}/login; done"
            ),
        ),
        (
            "GET /export [throttle:10,1]",
            format!("curl -i {base}/export"),
        ),
        (
            "GET /limits (the counters, read as Laravel reads them)",
            format!("curl {base}/limits"),
        ),
    ] {
        tracing::info!("{route}: {try_it}");
    }
    tracing::info!("listening on {base}");
    server.serve(router).await?;
    Ok(())
}

/// `App\Providers\AppServiceProvider::boot()`: the named limiters.
fn define_limiters() {
    RateLimiter::define("api", |req| Limit::per_minute(60).by(caller(req)).into());
    RateLimiter::define("uploads", |req| {
        let ip = client_ip(req);
        // Two limits on one key: each counts under its fallback key,
        // `<ip>:attempts:<max>:decay:<seconds>`, as in Laravel.
        vec![
            Limit::per_minute(3).by(ip.clone()),
            Limit::per_day(20).by(ip),
        ]
        .into()
    });
    RateLimiter::define("login", |req| {
        Limit::per_minute(5)
            .by(client_ip(req))
            // Only failed sign-ins spend an attempt.
            .after(|response| response.status_code() >= 400)
            .response(|_req| {
                HttpResponse::text("Too many login attempts. Please try again later.\n").status(429)
            })
            .into()
    });
}

/// `$request->user()?->id ?: $request->ip()`.
fn caller(req: &Request) -> String {
    match req.user_id() {
        Some(id) => id.to_owned(),
        None => client_ip(req),
    }
}

/// `$request->ip()`: the client address through the trusted proxies.
fn client_ip(req: &Request) -> String {
    req.ip().unwrap_or_else(|| "unknown".to_owned())
}

/// `routes/api.php` and `routes/web.php`.
fn routes() -> Result<Router, Box<dyn Error>> {
    let api = Router::new()
        .get("/api/user", |req: Request| async move {
            HttpResponse::json(serde_json::json!({ "id": null, "ip": req.ip() }))
        })
        .try_middleware_named("throttle:api")?;
    let uploads = Router::new()
        .post("/api/uploads", |_req| async {
            HttpResponse::text("stored\n").status(201)
        })
        .try_middleware_named("throttle:uploads")?;
    let login = Router::new()
        .post("/login", |_req| async {
            HttpResponse::text("These credentials do not match our records.\n").status(422)
        })
        .try_middleware_named("throttle:login")?;
    let export = Router::new()
        .get("/export", |_req| async {
            HttpResponse::text("id,total\n1,9.99\n")
        })
        .try_middleware_named("throttle:10,1")?;
    Ok(api
        .merge(uploads)
        .merge(login)
        .merge(export)
        .get("/limits", limits))
}

/// The caller's counters, read with the facade under the keys the
/// middleware keeps them, which are the keys Laravel reads.
async fn limits(req: Request) -> HttpResponse {
    let ip = client_ip(&req);
    let keys = [
        format!("api:{}", caller(&req)),
        format!("uploads:{ip}:attempts:3:decay:60"),
        format!("uploads:{ip}:attempts:20:decay:86400"),
        format!("login:{ip}"),
        format!("ip:{ip}:path:/export"),
    ];
    let mut lines = Vec::new();
    for key in keys {
        let line = match (
            RateLimiter::attempts(&key).await,
            RateLimiter::available_in(&key).await,
        ) {
            (Ok(attempts), Ok(available_in)) => {
                format!("{key}: {attempts} attempts, window ends in {available_in} s")
            }
            (Err(error), _) | (_, Err(error)) => format!("{key}: the cache failed: {error}"),
        };
        lines.push(line);
    }
    HttpResponse::text(lines.join("\n") + "\n")
}
