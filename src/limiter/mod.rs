//! The Laravel-shape rate limiter: a fixed-window counter in the cache
//! ([`CacheRateLimiter`], and the static [`RateLimiter`] facade over the one
//! in the container), the [`Limit`] builders, named limiters
//! ([`NamedLimiters`]) and Laravel's key cleaning
//! ([`clean_rate_limiter_key`]).
//!
//! It behaves as `Illuminate\Cache\RateLimiter` and stores its counters as
//! Laravel does, so an application moving off Laravel finds the methods it
//! used, and a Rust service can share one Redis with a Laravel application.

mod clean_key;
mod entities;
mod facade;
mod limit;
mod limit_result;
mod named;
mod rate_limiter;
mod writes_seen;

pub use clean_key::clean_rate_limiter_key;
pub(crate) use clean_key::cleaned;
pub use facade::RateLimiter;
pub use limit::{AfterCallback, GlobalLimit, Limit, ResponseCallback, Unlimited};
pub use limit_result::LimitResult;
pub use named::{NamedLimiter, NamedLimiters, apply_fallback_keys};
pub use rate_limiter::CacheRateLimiter;
pub(crate) use rate_limiter::{TIMER_SUFFIX, seconds_until};
pub(crate) use writes_seen::watching_writes;
