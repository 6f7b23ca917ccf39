//! Which sliding-window driver the environment chose.

#[cfg(feature = "redis")]
use super::RedisPlan;

/// The driver a [`BootPlan`](super::BootPlan) installs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DriverChoice {
    /// The in-memory limiter: buckets in this process, which drops idle
    /// ones itself.
    Memory,
    /// The Redis limiter: buckets in Redis or a Redis Cluster, shared by
    /// every replica.
    #[cfg(feature = "redis")]
    Redis(RedisPlan),
}

impl DriverChoice {
    /// The name the installed driver reports
    /// ([`RateLimiterDriver::name`](crate::rate_limit::RateLimiterDriver::name)):
    /// `memory` or `redis`.
    pub fn name(&self) -> &'static str {
        match self {
            DriverChoice::Memory => "memory",
            #[cfg(feature = "redis")]
            DriverChoice::Redis(_) => "redis",
        }
    }
}
