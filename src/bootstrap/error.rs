//! Why boot stopped.

use crate::config::ConfigError;

/// A boot that was refused.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum BootError {
    /// The configuration was refused; the message names the variable, the
    /// value and the fix. A Redis that answers and refuses the credentials
    /// or the database is refused this way too, with what Redis said.
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The driver's Redis client could not be built from a
    /// `RATE_LIMIT_REDIS_URL` that parsed (a TLS setup failure, for
    /// example). A Redis that does not answer yet is not this error: boot
    /// goes on and the connection retries.
    #[cfg(feature = "redis")]
    #[error("could not set up the Redis client for RATE_LIMIT_REDIS_URL: {0}")]
    Redis(#[from] crate::redis_client::RedisBackendError),
    /// The cache store could not be built: its Redis client could not be set
    /// up from a `REDIS_URL` (or `REDIS_HOST` and `REDIS_PORT`) that parsed.
    #[error("could not set up the cache store (REDIS_URL, or REDIS_HOST and REDIS_PORT): {0}")]
    Cache(#[from] crate::cache::CacheError),
}
