//! Installing the rate limiter and the trusted proxies from the
//! environment, failing closed in production.
//!
//! [`bootstrap_from_env`] loads `.env`, reads the process environment and
//! installs into [`App::current`](crate::container::App::current):
//!
//! - the sliding-window driver, as `Arc<dyn RateLimiterDriver>`
//!   (`RATE_LIMIT_DRIVER`: `memory` or `redis`, with `RATE_LIMIT_REDIS_URL`);
//! - the trusted proxies, as [`TrustedProxies`](crate::http::TrustedProxies)
//!   (`APP_TRUSTED_PROXIES`), which [`Request::ip`](crate::Request::ip) reads;
//! - the cache store of the Laravel-shape facade, as `Arc<dyn Store>`, with
//!   the [`RateLimiter`](crate::RateLimiter)'s limiter over it (`CACHE_STORE`
//!   and the Redis variables of [`CacheConfig`](crate::cache::CacheConfig)).
//!
//! In production (`APP_ENV=production`, or `APP_ENV` unset) a setting that
//! resolves to the in-memory limiter refuses to boot unless
//! `RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION=true`: per-process buckets multiply
//! every quota by the replica count and reset on every deploy, and nothing
//! says so. Staging is not gated.
//!
//! The work is split in two so that most of it is tested without I/O:
//! [`BootPlan::from_env`] decides (pure), and [`BootPlan::install`] builds
//! the driver and installs it. [`bootstrap`] does both with an [`Env`] that
//! tests build from pairs.
//!
//! [`Env`]: crate::config::Env

mod choice;
mod error;
mod guard;
mod install;
mod plan;
#[cfg(feature = "redis")]
mod redis_settings;
mod summary;
pub mod variables;

pub use choice::DriverChoice;
pub use error::BootError;
pub use install::{bootstrap, bootstrap_from_env};
pub use plan::BootPlan;
#[cfg(feature = "redis")]
pub use redis_settings::RedisPlan;
pub use summary::BootSummary;
