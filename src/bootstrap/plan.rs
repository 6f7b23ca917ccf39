//! The boot plan: what the environment asks for, decided without I/O.

use super::DriverChoice;
#[cfg(feature = "redis")]
use super::RedisPlan;
use super::guard::{
    DriverSetting, MemoryBecause, cache_per_process_warning, fallback_warning,
    refuse_memory_in_production,
};
use super::variables::{RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION, RATE_LIMIT_DRIVER};
use crate::cache::{CacheConfig, CacheStoreKind};
use crate::config::{ConfigError, Env, Environment};
use crate::http::TrustedProxies;

/// What [`bootstrap`](super::bootstrap) will install, read from the
/// environment and checked, before anything is installed or connected.
///
/// Building a plan is pure: tests pass an [`Env::from_pairs`] and assert on
/// the plan or on the exact error.
///
/// ```
/// use suprnova::bootstrap::{BootPlan, DriverChoice};
/// use suprnova::config::{Env, Environment};
///
/// let plan = BootPlan::from_env(&Env::from_pairs([
///     ("APP_ENV", "staging"),
///     ("APP_TRUSTED_PROXIES", "10.0.0.0/8"),
/// ]))
/// .unwrap();
/// assert_eq!(plan.environment, Environment::Staging);
/// assert_eq!(plan.driver, DriverChoice::Memory);
/// assert_eq!(plan.trusted_proxies.to_string(), "10.0.0.0/8");
///
/// // Production with no driver refuses to boot.
/// let err = BootPlan::from_env(&Env::from_pairs([("APP_ENV", "production")])).unwrap_err();
/// assert!(err.to_string().starts_with(
///     "refusing to boot in production: RATE_LIMIT_DRIVER is unset, which defaults to the in-memory limiter."
/// ));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct BootPlan {
    /// `APP_ENV`; unset means production.
    pub environment: Environment,
    /// The sliding-window driver to install.
    pub driver: DriverChoice,
    /// `RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION`; `false` when unset.
    pub allow_memory_in_production: bool,
    /// `APP_TRUSTED_PROXIES`; none when unset.
    pub trusted_proxies: TrustedProxies,
    /// What the operator should read at boot, logged once each at `warn`
    /// when the plan is installed.
    pub warnings: Vec<String>,
    /// The cache store of the Laravel-shape facade (`CACHE_STORE`,
    /// `REDIS_URL`, ...), where `RateLimiter` and the throttle middleware
    /// count.
    pub cache: CacheConfig,
}

impl BootPlan {
    /// Reads `APP_ENV`, `RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION`,
    /// `RATE_LIMIT_DRIVER` (and the `RATE_LIMIT_REDIS_*` variables when it is
    /// `redis`), `APP_TRUSTED_PROXIES`, then the cache store's variables
    /// (`CACHE_STORE`, the prefixes, and for a Redis cache its URL and the
    /// two `RATE_LIMIT_REDIS_*_MS` timeouts), in that order, and returns the
    /// first refusal.
    ///
    /// In production a setting that resolves to the in-memory limiter (unset,
    /// `memory`, or an unrecognised value such as `Redis`) is refused unless
    /// `RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION=true`. Elsewhere an
    /// unrecognised value falls back to memory with one warning. In
    /// production with the driver on Redis and the cache store in memory,
    /// a warning says that the throttle side counts per process.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let environment = Environment::from_env(env)?;
        // Parsed in every environment: a misspelt override is a mistake
        // even where it is not needed yet.
        let allow_memory_in_production = env
            .flag(RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION)?
            .unwrap_or(false);
        let mut warnings = Vec::new();
        let driver = match DriverSetting::read(env.text(RATE_LIMIT_DRIVER)?) {
            DriverSetting::Redis => redis_driver(env)?,
            DriverSetting::Memory(because) => {
                if environment.is_production() && !allow_memory_in_production {
                    return Err(refuse_memory_in_production(&because));
                }
                if let MemoryBecause::Unrecognised(value) = &because {
                    warnings.push(fallback_warning(value));
                }
                DriverChoice::Memory
            }
        };
        let trusted_proxies = TrustedProxies::from_env(env)?;
        let cache = CacheConfig::from_env(env)?;
        if environment.is_production()
            && !matches!(driver, DriverChoice::Memory)
            && cache.store == CacheStoreKind::Memory
        {
            warnings.push(cache_per_process_warning());
        }
        Ok(Self {
            environment,
            driver,
            allow_memory_in_production,
            trusted_proxies,
            warnings,
            cache,
        })
    }
}

#[cfg(feature = "redis")]
fn redis_driver(env: &Env) -> Result<DriverChoice, ConfigError> {
    RedisPlan::from_env(env).map(DriverChoice::Redis)
}

#[cfg(not(feature = "redis"))]
fn redis_driver(_env: &Env) -> Result<DriverChoice, ConfigError> {
    Err(ConfigError::Invalid {
        variable: RATE_LIMIT_DRIVER.to_owned(),
        value: "redis".to_owned(),
        reason: "this build of suprnova has no Redis support; enable its `redis` feature \
                 (on by default)"
            .to_owned(),
    })
}
