//! The production guard: the in-memory limiter is a boot failure in
//! production unless the operator says the deployment is one process.

use super::variables::{RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION, RATE_LIMIT_DRIVER};
use crate::config::ConfigError;
use crate::config::credentials::redact_credentials;

/// What `RATE_LIMIT_DRIVER` asks for, before the environment is considered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum DriverSetting {
    /// `redis`.
    Redis,
    /// The in-memory limiter, and why.
    Memory(MemoryBecause),
}

/// Why a setting resolves to the in-memory limiter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum MemoryBecause {
    /// The variable is unset or blank.
    Unset,
    /// `memory`.
    Chosen,
    /// Anything else, as written (trimmed): `Redis`, `memcached`.
    Unrecognised(String),
}

impl DriverSetting {
    /// Reads the (trimmed, non-blank) value. The names are matched exactly:
    /// `Redis` is not `redis`, and it is the case most likely to reach
    /// production, because it looks configured.
    pub(crate) fn read(value: Option<String>) -> Self {
        match value {
            None => DriverSetting::Memory(MemoryBecause::Unset),
            Some(v) if v == "memory" => DriverSetting::Memory(MemoryBecause::Chosen),
            Some(v) if v == "redis" => DriverSetting::Redis,
            Some(v) => DriverSetting::Memory(MemoryBecause::Unrecognised(v)),
        }
    }
}

/// Why the in-memory limiter is wrong behind replicas, and the two ways out.
/// Every refusal ends with it, so an operator reads the same fix whichever
/// way they got there.
const WHY_AND_WAYS_OUT: &str = "Per-process buckets mean every configured quota is \
multiplied by your replica count and reset by every deploy: behind N replicas a limit of \
5 attempts is really 5N, and nothing says so, because the requests succeed. Either point \
it at Redis with RATE_LIMIT_DRIVER=redis and RATE_LIMIT_REDIS_URL=redis://cache.internal:6379, \
or, if you genuinely run a single process, set RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION=true.";

/// `RATE_LIMIT_DRIVER="Redis"` and the like: what was wrong with the value.
pub(crate) fn unrecognised(value: &str) -> String {
    let hint = if value.eq_ignore_ascii_case("redis") || value.eq_ignore_ascii_case("memory") {
        format!(" (did you mean {}?)", value.to_ascii_lowercase())
    } else {
        String::new()
    };
    // A Redis URL written here by mistake is shown with its credentials
    // hidden, as in the variables meant for it.
    let value = redact_credentials(value);
    format!(
        "{RATE_LIMIT_DRIVER}={value:?} is not a driver{hint}: the drivers are memory and redis, \
         spelled exactly"
    )
}

/// The refusal for a setting that resolves to the in-memory limiter in
/// production without the override.
pub(crate) fn refuse_memory_in_production(because: &MemoryBecause) -> ConfigError {
    let what = match because {
        MemoryBecause::Unset => {
            format!("{RATE_LIMIT_DRIVER} is unset, which defaults to the in-memory limiter.")
        }
        MemoryBecause::Chosen => {
            format!("{RATE_LIMIT_DRIVER}=memory selects the in-memory limiter.")
        }
        MemoryBecause::Unrecognised(value) => format!(
            "{}, and an unrecognised value falls back to the in-memory limiter.",
            unrecognised(value)
        ),
    };
    ConfigError::Refused(format!(
        "refusing to boot in production: {what} {WHY_AND_WAYS_OUT}"
    ))
}

/// The one warning outside production for an unrecognised value.
pub(crate) fn fallback_warning(value: &str) -> String {
    format!(
        "{}; falling back to the in-memory limiter. Production refuses to boot on this value \
         unless {RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION}=true.",
        unrecognised(value)
    )
}

/// In production, with the driver on Redis and the cache store in memory:
/// the deployment runs several processes, and the throttle side counts in
/// each. Not a refusal, since a service that uses only the driver's
/// middleware needs no shared cache.
pub(crate) fn cache_per_process_warning() -> String {
    format!(
        "{RATE_LIMIT_DRIVER}=redis shares the driver's counts, but the cache store is the \
         in-memory one (CACHE_STORE unset, memory or array): throttle: routes, named limiters \
         and the RateLimiter facade count per process, so behind N replicas their limit of 5 \
         attempts is really 5N. Set CACHE_STORE=redis and REDIS_URL to share them; if no route \
         uses them, this changes nothing."
    )
}
