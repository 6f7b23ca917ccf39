//! The cache the Laravel-shape facade counts in.
//!
//! A [`Store`] keeps string values under string keys with a time to live;
//! [`MemoryStore`] keeps them in this process, `RedisStore` (feature
//! `redis`) in Redis or a Redis Cluster with the key layout of Laravel's Redis
//! cache store, so a Laravel application and this crate share counters.
//! [`CacheConfig`] reads the choice from the environment, and [`Cache`] is the
//! static facade over the store installed in the container.

mod config;
mod facade;
mod memory;
#[cfg(feature = "redis")]
mod redis;
mod store;

pub use config::{CacheConfig, CacheStoreKind};
pub use facade::Cache;
pub(crate) use facade::store_of;
pub use memory::MemoryStore;
#[cfg(feature = "redis")]
pub use redis::RedisStore;
pub use store::{CacheError, IncrementOutcome, Store, WindowIncrement};
pub(crate) use store::{has_no_room, parse_integer, window_end};
