//! Building the chosen driver and installing it, with the trusted proxies,
//! into a container.

use std::sync::Arc;

use super::{BootError, BootPlan, BootSummary, DriverChoice};
use crate::config::{Env, load_dotenv};
use crate::container::App;
use crate::rate_limit::RateLimiterDriver;
use crate::rate_limit::memory::InMemoryRateLimiter;

impl BootPlan {
    /// Builds the chosen driver and installs it into `app` as
    /// `Arc<dyn RateLimiterDriver>`, with the trusted proxies as
    /// [`TrustedProxies`](crate::http::TrustedProxies) and the facade's cache
    /// store (with the `RateLimiter` over it); logs each of the
    /// plan's warnings once at `warn`; and returns the summary.
    ///
    /// The Redis driver is built without waiting for Redis beyond one `PING`
    /// bounded by the configured timeouts. A Redis that does not answer is
    /// logged at `warn` and boot goes on: the connection retries in the
    /// background, and requests follow the backend-error policy until Redis
    /// answers. Must run inside a tokio runtime.
    pub async fn install(&self, app: &App) -> Result<BootSummary, BootError> {
        for warning in &self.warnings {
            tracing::warn!("{warning}");
        }
        #[cfg(feature = "redis")]
        if let Some(config) = &self.cache.redis {
            // On database 0: a cluster node refuses to select the cache's
            // (REDIS_CACHE_DB, 1 unless set), and would answer nothing.
            // A failure is the cache's, named by its variables, not the
            // driver's (which `?` would make it).
            let probe = crate::redis_client::RedisConnection::new(config.on_database_zero())
                .map_err(|e| BootError::Cache(e.into()))?;
            let subject = format!(
                "the cache store's Redis, {} (REDIS_URL, or REDIS_HOST and REDIS_PORT),",
                config.redacted()
            );
            redis::refuse_one_node_of_a_cluster(&probe, &subject).await?;
        }
        let (driver, redis, redis_answered): (Arc<dyn RateLimiterDriver>, _, _) = match &self.driver
        {
            DriverChoice::Memory => {
                if self.environment.is_production() {
                    tracing::info!(
                        "the in-memory limiter runs in production because \
                         RATE_LIMIT_ALLOW_MEMORY_IN_PRODUCTION=true: quotas count per process"
                    );
                }
                // It drops idle buckets itself, so a flood of distinct keys
                // cannot grow the process without limit.
                (Arc::new(InMemoryRateLimiter::new()), None, None)
            }
            #[cfg(feature = "redis")]
            DriverChoice::Redis(plan) => {
                let (driver, answered) = redis::build(plan).await?;
                (driver, Some(plan.config.redacted()), Some(answered))
            }
        };
        let name = driver.name();
        app.install::<dyn RateLimiterDriver>(driver);
        app.install(Arc::new(self.trusted_proxies.clone()));
        let cache = self.cache.install(app)?;
        Ok(BootSummary {
            cache_store: cache.name(),
            environment: self.environment,
            driver: name,
            redis,
            redis_answered,
            trusted_proxies: self.trusted_proxies.clone(),
            warnings: self.warnings.clone(),
        })
    }
}

#[cfg(feature = "redis")]
mod redis {
    use std::sync::Arc;

    use super::super::variables::RATE_LIMIT_REDIS_URL;
    use super::super::{BootError, RedisPlan};
    use crate::config::ConfigError;
    use crate::rate_limit::RateLimiterDriver;
    use crate::rate_limit::redis::RedisRateLimiter;
    use crate::redis_client::RedisConnection;

    /// Why one node of a cluster, given as a single URL, is refused.
    const ONE_NODE_OF_A_CLUSTER: &str = "is one node of a Redis Cluster (its INFO says \
        cluster_enabled:1), which answers only for its own slots: every other key would get \
        MOVED and go to the backend-error policy. List the cluster's nodes, comma-separated \
        redis:// URLs, or write redis+cluster://host:port";

    /// Refuses `connection`, named `subject` in the refusal, when it is one
    /// URL that leads to a node of a Redis Cluster. A Redis that does not
    /// answer yet is not refused.
    pub(super) async fn refuse_one_node_of_a_cluster(
        connection: &RedisConnection,
        subject: &str,
    ) -> Result<(), BootError> {
        if connection.config().is_cluster() || connection.is_cluster_node().await != Some(true) {
            return Ok(());
        }
        Err(ConfigError::Refused(format!(
            "refusing to boot: {subject} {ONE_NODE_OF_A_CLUSTER}"
        ))
        .into())
    }

    /// The Redis driver over a lazy connection, and whether Redis answered a
    /// `PING` within the timeouts.
    pub(super) async fn build(
        plan: &RedisPlan,
    ) -> Result<(Arc<dyn RateLimiterDriver>, bool), BootError> {
        let connection = RedisConnection::new(plan.config.clone())?;
        let answered = match connection.ping().await {
            Ok(()) => {
                let subject = format!("{RATE_LIMIT_REDIS_URL}={}", plan.config.redacted());
                refuse_one_node_of_a_cluster(&connection, &subject).await?;
                true
            }
            Err(error) => {
                tracing::warn!(
                    redis = %plan.config.redacted(),
                    %error,
                    "Redis does not answer yet; booting anyway. The connection retries in the \
                     background, and until Redis answers each limited request follows its \
                     backend-error policy"
                );
                false
            }
        };
        let mut driver = RedisRateLimiter::new(connection);
        if let Some(prefix) = &plan.prefix {
            driver = driver.with_prefix(prefix.clone());
        }
        Ok((Arc::new(driver), answered))
    }
}

/// Plans from `env` and installs into [`App::current`]: the step
/// [`bootstrap_from_env`] runs on the process environment, for an
/// application (or a test) that builds its own [`Env`].
///
/// ```
/// use suprnova::bootstrap::bootstrap;
/// use suprnova::config::Env;
/// use suprnova::container::App;
/// use suprnova::rate_limit::RateLimiterDriver;
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let app = App::new();
/// let env = Env::from_pairs([("APP_ENV", "local"), ("APP_TRUSTED_PROXIES", "10.0.0.5")]);
/// let summary = app.scope(bootstrap(&env)).await.unwrap();
/// assert_eq!(summary.to_string(), "environment=local driver=memory cache=memory trusted_proxies=10.0.0.5");
/// assert_eq!(app.get::<dyn RateLimiterDriver>().unwrap().name(), "memory");
/// # });
/// ```
pub async fn bootstrap(env: &Env) -> Result<BootSummary, BootError> {
    let app = App::current();
    BootPlan::from_env(env)?.install(&app).await
}

/// Loads `.env` (variables already set win), reads the process environment
/// and installs the rate limiter, the cache store and the trusted proxies
/// into
/// [`App::current`]. Call it once at start, before serving, and log the
/// summary.
///
/// ```no_run
/// # async fn run() -> Result<(), suprnova::bootstrap::BootError> {
/// let summary = suprnova::bootstrap::bootstrap_from_env().await?;
/// tracing::info!(%summary, "rate limiting ready");
/// # Ok(())
/// # }
/// ```
pub async fn bootstrap_from_env() -> Result<BootSummary, BootError> {
    load_dotenv()?;
    bootstrap(&Env::process()).await
}
