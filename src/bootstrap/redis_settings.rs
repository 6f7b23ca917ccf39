//! The Redis settings read when `RATE_LIMIT_DRIVER=redis`.

use super::variables::{RATE_LIMIT_DRIVER, RATE_LIMIT_REDIS_PREFIX, RATE_LIMIT_REDIS_URL};
use crate::config::{ConfigError, Env};
use crate::redis_client::RedisConfig;
use crate::redis_client::{redact_credentials, url_text};

/// Where the Redis driver keeps its buckets, and how long it waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RedisPlan {
    /// The node URL(s), whether it is a cluster, and the timeouts.
    pub config: RedisConfig,
    /// The key prefix `RATE_LIMIT_REDIS_PREFIX` sets; `None` keeps the
    /// driver's own,
    /// [`RedisRateLimiter::DEFAULT_PREFIX`](crate::rate_limit::redis::RedisRateLimiter::DEFAULT_PREFIX).
    pub prefix: Option<String>,
}

/// The forms an operator can copy, shown with every URL error.
const URL_FORMS: &str = "for example RATE_LIMIT_REDIS_URL=redis://cache.internal:6379 \
(rediss:// for TLS; unix:///path/to/redis.sock for a socket on this host; several \
comma-separated redis:// URLs, or redis+cluster://, for a Redis Cluster)";

impl RedisPlan {
    /// Reads `RATE_LIMIT_REDIS_URL` (required), the two timeouts and the
    /// prefix. A missing or malformed URL, and a timeout that is not a
    /// positive whole number of milliseconds, are errors naming the variable.
    /// Nothing here connects.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let raw = url_text(env, RATE_LIMIT_REDIS_URL)?.ok_or_else(|| ConfigError::Missing {
            variable: RATE_LIMIT_REDIS_URL.to_owned(),
            reason: format!("{RATE_LIMIT_DRIVER}=redis needs the address of Redis, {URL_FORMS}"),
        })?;
        let config = RedisConfig::from_url(&raw).map_err(|e| ConfigError::Invalid {
            // The credentials of a URL never reach a log.
            variable: RATE_LIMIT_REDIS_URL.to_owned(),
            value: redact_credentials(&raw),
            reason: format!("{}; {URL_FORMS}", e.reason_in(&raw)),
        })?;
        Ok(Self {
            config: config.with_timeouts_from_env(env)?,
            prefix: env.text(RATE_LIMIT_REDIS_PREFIX)?,
        })
    }
}
