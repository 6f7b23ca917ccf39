//! Boot plans read from variables given as pairs: no test sets a variable
//! of its own process.

use suprnova::bootstrap::BootPlan;
#[cfg(feature = "redis")]
use suprnova::cache::CacheConfig;
use suprnova::config::{ConfigError, Env};

/// The variables `pairs`, and no other.
pub fn env(pairs: &[(&str, &str)]) -> Env {
    Env::from_pairs(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string())))
}

/// The boot plan of `pairs`.
pub fn plan(pairs: &[(&str, &str)]) -> Result<BootPlan, ConfigError> {
    BootPlan::from_env(&env(pairs))
}

/// The refusal of `pairs`; fails the test when they boot.
pub fn refusal(pairs: &[(&str, &str)]) -> String {
    match plan(pairs) {
        Ok(plan) => panic!("{pairs:?} booted: {plan:?}"),
        Err(e) => e.to_string(),
    }
}

/// The cache store's node URLs for `vars` (with `CACHE_STORE=redis`), or
/// the refusal's text.
#[cfg(feature = "redis")]
pub fn cache_nodes(vars: &[(&str, &str)]) -> Result<Vec<String>, String> {
    let mut all = vec![("CACHE_STORE", "redis")];
    all.extend_from_slice(vars);
    CacheConfig::from_env(&env(&all))
        .map(|config| config.redis.unwrap().nodes().to_vec())
        .map_err(|error| error.to_string())
}
