//! # Suprnova rate limiting
//!
//! Rate limiting for Rust web services on tokio and hyper 1, in two shapes
//! that share one core:
//!
//! - **The sliding-window driver** ([`rate_limit`]): an exact limit of N
//!   calls in any span of a window, per key, in memory, on Redis or on a
//!   Redis Cluster, behind [`rate_limit::RateLimitMiddleware`].
//! - **The Laravel-shape facade**: [`RateLimiter`], [`Limit`] and
//!   [`ThrottleRequestsMiddleware`], for applications moving off Laravel that
//!   keep their `throttle:60,1` routes, their named limiters and their Redis
//!   keys.
//!
//! Both run on the crate's HTTP core ([`Router`], [`Request`],
//! [`HttpResponse`], [`Middleware`], [`server`]), read the client address
//! through the trusted proxies ([`Request::ip`]), and are installed by
//! [`bootstrap::bootstrap_from_env`] from `RATE_LIMIT_DRIVER`,
//! `RATE_LIMIT_REDIS_URL` and `APP_TRUSTED_PROXIES`.
#![warn(clippy::print_stdout, clippy::print_stderr)]

pub mod bootstrap;
pub mod cache;
pub mod clock;
pub mod config;
pub mod container;
mod copy_on_write;
pub mod decision;
pub mod http;
pub mod keys;
pub mod limiter;
pub mod middleware;
pub mod rate_limit;
#[cfg(feature = "redis")]
pub mod redis_client;
pub mod routing;
pub mod server;
mod sharded;
mod sweep;
pub mod throttle;
pub mod ws;

pub use async_trait::async_trait;
pub use chrono;

pub use crate::http::{HttpResponse, Request, Response};
pub use crate::limiter::{GlobalLimit, Limit, LimitResult, RateLimiter, Unlimited};
pub use crate::middleware::{Middleware, Next};
pub use crate::routing::Router;
pub use crate::throttle::ThrottleRequestsMiddleware;

/// The guides under `docs/` and the README, compiled as doc tests so that
/// every Rust example in them keeps building.
#[cfg(doctest)]
mod guides {
    #[doc = include_str!("../README.md")]
    struct Readme;
    #[doc = include_str!("../docs/deployment.md")]
    struct Deployment;
    // The guide builds Redis drivers in two of its examples.
    #[cfg(feature = "redis")]
    #[doc = include_str!("../docs/rate-limiting.md")]
    struct RateLimiting;
    #[doc = include_str!("../docs/migration-from-laravel.md")]
    struct MigrationFromLaravel;
    #[doc = include_str!("../docs/algorithms.md")]
    struct Algorithms;
}
