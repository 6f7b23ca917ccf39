//! Errors of the sliding-window side.

use std::time::Duration;

use crate::http::BoxError;

/// A limiter that could not decide. Over-quota is not an error: it is a
/// [`Decision`](crate::decision::Decision) with `allowed == false`.
#[derive(Debug, thiserror::Error)]
pub enum RateLimitError {
    /// The limit itself is invalid (a zero window, for example). Fix the
    /// code; retrying does not help.
    #[error("invalid rate limit configuration: {0}")]
    Config(String),
    /// The backend failed (Redis unreachable, a script error).
    #[error("rate limit backend failed: {0}")]
    Backend(#[source] BoxError),
    /// The backend did not answer in time.
    #[error("rate limit backend did not answer within {0:?}")]
    Timeout(Duration),
    /// No [`RateLimiterDriver`](super::RateLimiterDriver) is installed in the
    /// container.
    #[error(
        "no rate limiter is installed in the container; call bootstrap_from_env() or App::bind::<dyn RateLimiterDriver>(...)"
    )]
    NotInstalled,
}

impl RateLimitError {
    /// Whether the backend (not the configuration) failed: the case the
    /// [`BackendErrorPolicy`](super::BackendErrorPolicy) decides.
    pub fn is_backend(&self) -> bool {
        !matches!(self, RateLimitError::Config(_))
    }
}

#[cfg(feature = "redis")]
impl From<crate::redis_client::RedisBackendError> for RateLimitError {
    fn from(e: crate::redis_client::RedisBackendError) -> Self {
        match e {
            crate::redis_client::RedisBackendError::Timeout(d) => RateLimitError::Timeout(d),
            other => RateLimitError::Backend(Box::new(other)),
        }
    }
}
