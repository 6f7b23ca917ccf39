//! What boot installed, for the application to log once at start.

use std::fmt;

use crate::config::Environment;
use crate::http::TrustedProxies;

/// What [`bootstrap`](super::bootstrap) installed.
///
/// Its `Display` is one line for a start-up log, with the Redis password
/// hidden:
///
/// ```text
/// environment=production driver=redis redis=redis://***@cache.internal:6379 (answering) cache=redis cache_redis=redis://***@cache.internal:6379/1 (answering) trusted_proxies=10.0.0.0/8
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BootSummary {
    /// The environment booted in.
    pub environment: Environment,
    /// The installed driver's name: `memory` or `redis`.
    pub driver: &'static str,
    /// The Redis URL(s) with credentials hidden, for the Redis driver.
    pub redis: Option<String>,
    /// For the Redis driver, whether Redis answered a `PING` at boot. When it
    /// did not, boot went on: each call tries to connect again, and
    /// requests follow the backend-error policy until Redis answers. (A
    /// Redis that answered with a refusal of the credentials or the
    /// database refused boot instead.)
    pub redis_answered: Option<bool>,
    /// The cache store of the Laravel-shape facade: `memory` or `redis`.
    pub cache_store: &'static str,
    /// The Redis URL(s) of a Redis cache store, with credentials hidden.
    pub cache_redis: Option<String>,
    /// For a Redis cache store, whether its Redis answered a `PING` at
    /// boot, as [`redis_answered`](Self::redis_answered) tells of the
    /// driver's: when it did not, `throttle:` routes, named limiters and
    /// the facade follow their backend-error policy until it answers.
    pub cache_redis_answered: Option<bool>,
    /// The trusted proxies.
    pub trusted_proxies: TrustedProxies,
    /// The warnings logged at boot.
    pub warnings: Vec<String>,
}

impl fmt::Display for BootSummary {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "environment={} driver={}", self.environment, self.driver)?;
        if let Some(redis) = &self.redis {
            write!(f, " redis={redis}{}", answering(self.redis_answered))?;
        }
        write!(f, " cache={}", self.cache_store)?;
        if let Some(redis) = &self.cache_redis {
            write!(
                f,
                " cache_redis={redis}{}",
                answering(self.cache_redis_answered)
            )?;
        }
        write!(f, " trusted_proxies={}", self.trusted_proxies)?;
        if !self.warnings.is_empty() {
            write!(f, " warnings={}", self.warnings.len())?;
        }
        Ok(())
    }
}

/// How the summary tells whether a Redis answered at boot.
fn answering(answered: Option<bool>) -> &'static str {
    match answered {
        Some(true) => " (answering)",
        Some(false) => " (not answering yet)",
        None => "",
    }
}
