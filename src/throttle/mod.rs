//! The Laravel-shape throttle middleware: `throttle:60,1` routes, named
//! limiters on routes, and Laravel's `X-RateLimit-*` headers, counted in
//! the cache through the [`RateLimiter`](crate::RateLimiter) facade.
//!
//! [`ThrottleRequestsMiddleware`] is the middleware;
//! [`ThrottleRequestsMiddleware::from_alias_args`] reads a route's
//! `throttle:...` alias, and [`ThrottleAliasError`] says why it refused one.

mod alias;
mod counting;
mod headers;
mod keys;
mod middleware;
mod one_or_more;
mod source;

pub use alias::ThrottleAliasError;
pub use middleware::{DEFAULT_DECAY_SECONDS, DEFAULT_MAX_ATTEMPTS, ThrottleRequestsMiddleware};
