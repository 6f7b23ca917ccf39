//! The sliding-window side: an exact limit of N calls in any span of a
//! window, per key.
//!
//! [`RateLimiterDriver`] is the storage SPI; [`memory`] keeps buckets in this
//! process, and `redis` (feature `redis`) keeps them in Redis or a Redis
//! Cluster, where every replica of an application shares them.

mod config;
mod driver;
mod error;
mod policy;

pub mod memory;
#[cfg(feature = "redis")]
pub mod redis;

pub use config::SlidingWindowConfig;
pub use driver::RateLimiterDriver;
pub use error::RateLimitError;
pub use policy::BackendErrorPolicy;
