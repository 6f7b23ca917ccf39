//! The names of the variables bootstrap reads, besides `APP_ENV`
//! ([`Environment::VARIABLE`](crate::config::Environment::VARIABLE)) and
//! `APP_TRUSTED_PROXIES`
//! ([`TrustedProxies::VARIABLE`](crate::http::TrustedProxies::VARIABLE)).

/// `memory` or `redis`, spelled exactly. Unset (or blank) means `memory`,
/// which production refuses.
pub const RATE_LIMIT_DRIVER: &str = "RATE_LIMIT_DRIVER";

/// Where Redis is, when `RATE_LIMIT_DRIVER=redis`: `redis://`, `rediss://`, `unix://`,
/// a comma-separated list of node URLs, or `redis+cluster://`.
pub const RATE_LIMIT_REDIS_URL: &str = "RATE_LIMIT_REDIS_URL";

/// How long one attempt to connect to Redis may take, in milliseconds.
pub const RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS: &str = "RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS";

/// How long a Redis command may wait for its answer, in milliseconds.
pub const RATE_LIMIT_REDIS_TIMEOUT_MS: &str = "RATE_LIMIT_REDIS_TIMEOUT_MS";

/// A prefix for the driver's Redis keys, to share one Redis between
/// applications.
pub const RATE_LIMIT_REDIS_PREFIX: &str = "RATE_LIMIT_REDIS_PREFIX";

/// `true` lets production run on the in-memory limiter: for a deployment
/// that is genuinely one process.
pub const RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION: &str = "RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION";
