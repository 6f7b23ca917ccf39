//! The sliding-window side: an exact limit of N calls in any span of a
//! window, per key.
//!
//! [`RateLimiterDriver`] is the storage SPI; [`memory`] keeps buckets in this
//! process, and `redis` (feature `redis`) keeps them in Redis or a Redis
//! Cluster, where every replica of an application shares them.
//!
//! [`RateLimitMiddleware`] is its HTTP side: a limit keyed by a function of
//! the request, by address ([`RateLimitMiddleware::ip_based`]) or by the
//! account a request acts on ([`identity_key`]), and a cap on open
//! connections ([`ConnectionsPerIp`]).

mod address_key;
mod config;
mod connections;
mod driver;
mod error;
mod identity;
mod ip_based;
mod middleware;
mod policy;

pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;

pub use config::SlidingWindowConfig;
pub use connections::ConnectionsPerIp;
pub use driver::RateLimiterDriver;
pub use error::RateLimitError;
pub use identity::{identity_key, names_identity};
pub use middleware::{RateLimitMiddleware, TOO_MANY_REQUESTS_BODY};
pub use policy::BackendErrorPolicy;
