//! Login protection: a per-address limit stacked with a per-recipient limit
//! on a sign-in route, the per-recipient one failing closed.
//!
//! It needs nothing but Rust: `cargo run --example login_protection` runs on
//! the in-memory limiter (`RATE_LIMIT_DRIVER=redis` and
//! `RATE_LIMIT_REDIS_URL` put it on Redis). It sends scripted attacks
//! through the application's router in process, as if from many addresses,
//! prints what each request got, and exits.
//!
//! What it shows:
//!
//! 1. One address trying many accounts is stopped by the per-address limit
//!    (20 a minute), whatever account it names.
//! 2. Many addresses trying one account (a botnet, a proxy pool) are stopped
//!    by the per-recipient limit (5 in 15 minutes), though each address asks
//!    once: the account is what they share.
//! 3. Writing the address in capitals reaches the same bucket, because the
//!    value is normalised before it is hashed into the key.
//! 4. A decoy address in the query string, beside the real one in the body,
//!    buys no fresh quota: the request counts against both.
//! 5. A request that names nobody skips the per-recipient limit.
//! 6. (With the `redis` feature, on by default.) When the per-recipient
//!    limiter's backend is down, the route answers `503` instead of letting
//!    an unlimited stream of guesses through.

mod common;

use std::error::Error;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use suprnova::bootstrap::bootstrap;
use suprnova::config::Env;
use suprnova::container::App;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig, identity_key,
    names_identity,
};
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Request, Router};

/// Requests an address may make in a minute, whichever account they name.
const PER_ADDRESS: u32 = 20;
/// Sign-in attempts an account may receive in 15 minutes, from anywhere.
const PER_ACCOUNT: SlidingWindowConfig = SlidingWindowConfig::new(5, Duration::from_secs(15 * 60));
/// The largest body the per-recipient key reads; a larger one gets 413.
const BODY_CAP: usize = 4096;

#[tokio::main]
async fn main() -> Result<(), Box<dyn Error>> {
    common::load_dotenv_and_log_to_stderr()?;
    let env = Env::process().with_default("APP_ENV", "local");
    let summary = bootstrap(&env).await?;
    println!("booted: {summary}");

    let driver = App::resolve_make::<dyn RateLimiterDriver>()?;
    let router = login_routes(driver);

    attacks(&router).await;
    #[cfg(feature = "redis")]
    backend_down_fails_closed().await?;
    Ok(())
}

/// `POST /login`: at most [`PER_ADDRESS`] requests a minute from each
/// address, and at most [`PER_ACCOUNT`] attempts on each account.
fn login_routes(driver: Arc<dyn RateLimiterDriver>) -> Router {
    Router::new()
        .post("/login", login)
        .middleware(RateLimitMiddleware::ip_based(
            PER_ADDRESS,
            Duration::from_secs(60),
        ))
        .middleware(per_account(driver))
}

/// The per-recipient limit: keyed on the `email` the request names, in the
/// query string or the form body.
fn per_account(driver: Arc<dyn RateLimiterDriver>) -> RateLimitMiddleware {
    RateLimitMiddleware::new(driver, PER_ACCOUNT, |req| {
        identity_key(req, "email", "login")
    })
    // The address is usually in the body of a sign-in form.
    .key_reads_body(BODY_CAP)
    // Without this, requests that name nobody would share one bucket keyed
    // on their address, and this tighter limit would bind them too.
    .only_when(|req| names_identity(req, "email"))
    // An account under attack stays protected while the backend is down.
    .on_backend_error(BackendErrorPolicy::FailClosed)
}

/// A sign-in that only knows one account.
async fn login(mut req: Request) -> HttpResponse {
    let body = match req.text().await {
        Ok(body) => body,
        Err(error) => return error.to_response(),
    };
    let field = |name: &str| {
        form_urlencoded::parse(body.as_bytes())
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.into_owned())
    };
    match (field("email"), field("password")) {
        (Some(email), Some(password))
            if email == "ada@example.com" && password == "correct horse" =>
        {
            HttpResponse::text("welcome back\n")
        }
        (Some(_), Some(_)) => HttpResponse::text("these credentials do not match\n").status(401),
        _ => HttpResponse::text("email and password are required\n").status(422),
    }
}

/// One request of a scripted attack: `POST target` with a form body, from
/// an address.
struct Attempt {
    peer: String,
    target: &'static str,
    body: String,
}

fn attempt(peer: impl Into<String>, target: &'static str, body: impl Into<String>) -> Attempt {
    Attempt {
        peer: peer.into(),
        target,
        body: body.into(),
    }
}

/// Sends each attempt in process, as if from its address, and prints the
/// statuses in order (runs folded: `401 x20, 429 x5`) and the headers of the
/// last answer when it refused.
async fn attack(router: &Router, title: &str, attempts: impl IntoIterator<Item = Attempt>) {
    let mut runs: Vec<(u16, usize)> = Vec::new();
    let mut last = None;
    for attempt in attempts {
        let request = http::Request::post(attempt.target)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(attempt.body)
            .expect("a valid request");
        let peer = SocketAddr::new(attempt.peer.parse().expect("an address"), 40000);
        let response = handle_request_with_peer(router, request, peer).await;
        match runs.last_mut() {
            Some((status, n)) if *status == response.status_code() => *n += 1,
            _ => runs.push((response.status_code(), 1)),
        }
        last = Some(response);
    }
    let runs: Vec<String> = runs.iter().map(|(s, n)| format!("{s} x{n}")).collect();
    println!("\n{title}\n  {}", runs.join(", "));
    if let Some(refused) = last.filter(|r| r.status_code() >= 429) {
        println!(
            "  the last answer: {} {:?}, Retry-After {}, X-RateLimit-Limit {}, \
             X-RateLimit-Remaining {}",
            refused.status_code(),
            refused.body_text(),
            refused.header_str("retry-after").unwrap_or("-"),
            refused.header_str("x-ratelimit-limit").unwrap_or("-"),
            refused.header_str("x-ratelimit-remaining").unwrap_or("-"),
        );
    }
}

/// The five attacks on the application's router.
async fn attacks(router: &Router) {
    attack(
        router,
        "1. 203.0.113.7 tries 25 accounts once each (per address: 20 a minute)",
        (1..=25).map(|n| {
            attempt(
                "203.0.113.7",
                "/login",
                format!("email=user{n}%40example.com&password=guess"),
            )
        }),
    )
    .await;
    attack(
        router,
        "2. 198.51.100.1 to .8 try victim@example.com once each (per account: 5 in 15 minutes)",
        (1..=8).map(|n| {
            attempt(
                format!("198.51.100.{n}"),
                "/login",
                "email=victim%40example.com&password=guess",
            )
        }),
    )
    .await;
    attack(
        router,
        "3. a fresh address tries Victim@Example.COM (same mailbox, same bucket)",
        [attempt(
            "192.0.2.50",
            "/login",
            "email=Victim%40Example.COM&password=guess",
        )],
    )
    .await;
    attack(
        router,
        "4. a fresh address names decoy@example.com in the query and the victim in the body",
        [attempt(
            "192.0.2.51",
            "/login?email=decoy%40example.com",
            "email=victim%40example.com&password=guess",
        )],
    )
    .await;
    attack(
        router,
        "5. a request that names no account (the handler answers 422)",
        [attempt("192.0.2.52", "/login", "password=guess")],
    )
    .await;
}

/// The per-recipient limit on a Redis that is not there: port 1 on the
/// loopback refuses at once, and the timeouts bound a Redis that hangs.
#[cfg(feature = "redis")]
async fn backend_down_fails_closed() -> Result<(), Box<dyn Error>> {
    use suprnova::rate_limit::redis::RedisRateLimiter;
    use suprnova::redis_client::{RedisConfig, RedisConnection};

    let config = RedisConfig::from_url("redis://127.0.0.1:1")?
        .with_timeouts(Duration::from_millis(200), Duration::from_millis(200));
    let down: Arc<dyn RateLimiterDriver> =
        Arc::new(RedisRateLimiter::new(RedisConnection::new(config)?));
    let router = Router::new()
        .post("/login", login)
        .middleware(per_account(down));
    attack(
        &router,
        "6. the per-account limiter's Redis is down: even the right password gets 503, not a sign-in",
        [attempt("192.0.2.53", "/login", "email=ada%40example.com&password=correct+horse")],
    )
    .await;
    Ok(())
}
