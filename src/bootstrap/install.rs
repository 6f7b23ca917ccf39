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
    /// The Redis driver, and a Redis cache store, are built without waiting
    /// for Redis beyond one `PING` each, bounded by the configured timeouts.
    /// A Redis that does not answer (a timeout, a refused or reset
    /// connection, a Redis still loading its data) is logged at `warn` and
    /// boot goes on: each call tries to connect again, and requests
    /// follow the backend-error policy until Redis answers. A Redis that
    /// answers and refuses the credentials (`WRONGPASS`, `NOAUTH`) or the
    /// database (`DB index is out of range`) refuses boot, naming the
    /// variable: it would refuse every connection until the configuration
    /// changes. Must run inside a tokio runtime.
    pub async fn install(&self, app: &App) -> Result<BootSummary, BootError> {
        for warning in &self.warnings {
            tracing::warn!("{warning}");
        }
        #[cfg_attr(not(feature = "redis"), allow(unused_mut))]
        let (mut cache_redis, mut cache_redis_answered) = (None, None);
        #[cfg(feature = "redis")]
        if let Some(config) = &self.cache.redis {
            // A failure is the cache's, named by its variables, not the
            // driver's (which `?` would make it).
            let store = crate::redis_client::RedisConnection::new(config.clone())
                .map_err(|e| BootError::Cache(e.into()))?;
            let subject = format!(
                "the cache store's Redis, {} (REDIS_URL, or REDIS_HOST and REDIS_PORT),",
                config.redacted()
            );
            cache_redis_answered = Some(redis::check(&store, &subject, &redis::CACHE_FIXES).await?);
            cache_redis = Some(config.redacted());
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
            cache_redis,
            cache_redis_answered,
            trusted_proxies: self.trusted_proxies.clone(),
            warnings: self.warnings.clone(),
        })
    }
}

#[cfg(feature = "redis")]
mod redis {
    use std::sync::Arc;

    use ::redis::{ErrorKind, ServerErrorKind};

    use super::super::variables::RATE_LIMIT_REDIS_URL;
    use super::super::{BootError, RedisPlan};
    use crate::config::ConfigError;
    use crate::rate_limit::RateLimiterDriver;
    use crate::rate_limit::redis::RedisRateLimiter;
    use crate::redis_client::{RedisBackendError, RedisConnection};

    /// Why one node of a cluster, given as a single URL, is refused.
    const ONE_NODE_OF_A_CLUSTER: &str = "is one node of a Redis Cluster (its INFO says \
        cluster_enabled:1), which answers only for its own slots: every other key would get \
        MOVED and go to the backend-error policy. List the cluster's nodes, comma-separated \
        redis:// URLs, or write redis+cluster://host:port";

    /// Boot's check of one Redis, named `subject` in a refusal: its `PING`
    /// ([`ping`]), and, when it answered, whether it is one URL that leads
    /// to a node of a Redis Cluster (its `INFO cluster`), refused. Whether
    /// Redis answered. A Redis that does not answer yet costs one wait of
    /// the timeouts, not one for each question.
    pub(super) async fn check(
        connection: &RedisConnection,
        subject: &str,
        fixes: &Fixes,
    ) -> Result<bool, BootError> {
        let answered = ping(connection, subject, fixes).await?;
        if answered
            && !connection.config().is_cluster()
            && connection.is_cluster_node().await == Some(true)
        {
            return Err(one_node_of_a_cluster(subject));
        }
        Ok(answered)
    }

    /// The refusal of one node of a cluster given as a single URL.
    fn one_node_of_a_cluster(subject: &str) -> BootError {
        ConfigError::Refused(format!(
            "refusing to boot: {subject} {ONE_NODE_OF_A_CLUSTER}"
        ))
        .into()
    }

    /// Whether `error` is a cluster node's refusal to select the database
    /// the URL names (`SELECT is not allowed in cluster mode`): the
    /// connection's `SELECT` comes before the `PING`, so a node of a cluster
    /// given with a database says what it is this way.
    fn is_a_cluster_node_refusing_select(error: &RedisBackendError) -> bool {
        matches!(error, RedisBackendError::Redis(error)
            if error.detail().is_some_and(|detail| detail.contains("not allowed in cluster mode")))
    }

    /// How to fix the configuration a Redis refused, in the variables of
    /// the connection it refused.
    pub(super) struct Fixes {
        credentials: &'static str,
        database: &'static str,
    }

    /// The fixes for the driver's `RATE_LIMIT_REDIS_URL`.
    const DRIVER_FIXES: Fixes = Fixes {
        credentials: "Give the username and password Redis expects in the URL: \
            redis://user:password@host:port, or redis://:password@host:port for a password only \
            (?user=...&pass=... after a socket's path).",
        database: "Name a database this Redis has: they are numbered from 0 to its `databases` \
            setting less one (0 to 15 by default), as /N after the host or ?db=N after a \
            socket's path.",
    };

    /// The fixes for the cache store's `REDIS_URL`, or `REDIS_HOST` and the
    /// variables beside it.
    pub(super) const CACHE_FIXES: Fixes = Fixes {
        credentials: "Give the username and password Redis expects in REDIS_URL \
            (redis://user:password@host:port), or in REDIS_USERNAME and REDIS_PASSWORD.",
        database: "Name a database this Redis has: they are numbered from 0 to its `databases` \
            setting less one (0 to 15 by default), in REDIS_CACHE_DB (in REDIS_DB with \
            REDIS_CACHE_CONNECTION=default) or as the database REDIS_URL names (/N, or ?db=N \
            after a socket's path).",
    };

    /// What of its configuration a Redis that answered refused.
    enum Refused {
        /// The credentials: none where Redis requires them, or a username
        /// or password it does not take.
        Credentials,
        /// The database: one past the last this Redis has.
        Database,
    }

    /// What `error`, the answer to boot's `PING`, says Redis refused of the
    /// configuration: an answer that every connection would get again
    /// until the configuration changes. `None` for a failure that may pass:
    /// a timeout, a refused or reset connection, a Redis loading its data
    /// (`LOADING`), a cluster whose master is down (`MASTERDOWN`,
    /// `CLUSTERDOWN`), too many clients.
    ///
    /// What redis-rs makes of each refusal: a wrong password, or an ACL user
    /// unknown or disabled, sent with `AUTH` is `AuthenticationFailed`, and
    /// sent with `HELLO` (`?protocol=resp3`) the server's `WRONGPASS`; no
    /// password where one is required is the server's `NOAUTH`. A URL that
    /// names a database selects it before the `PING`, and a refused
    /// `SELECT` is an `ERR` whose detail is the server's (`DB index is out
    /// of range`, or `Authentication required.` when the password is
    /// missing). A cluster's client that could connect to no node reports
    /// the last node's refusal as the detail of an `Io` error. redis-rs
    /// makes any error answer to `AUTH` `AuthenticationFailed`, without the
    /// server's word: Redis answers `AUTH` while it loads and while a
    /// master is down, but a proxy that answers it with a passing error is
    /// refused here too (docs/deployment.md says so).
    fn refused(error: &RedisBackendError) -> Option<Refused> {
        let RedisBackendError::Redis(error) = error else {
            return None;
        };
        let detail = error.detail().unwrap_or_default();
        match (error.kind(), error.code()) {
            (ErrorKind::AuthenticationFailed, _) | (_, Some("WRONGPASS" | "NOAUTH")) => {
                Some(Refused::Credentials)
            }
            (ErrorKind::Server(ServerErrorKind::ResponseError), _) => {
                if detail.contains("DB index") {
                    Some(Refused::Database)
                } else if detail.starts_with("Authentication required") {
                    Some(Refused::Credentials)
                } else {
                    None
                }
            }
            (ErrorKind::Io, _)
                if ["AuthenticationFailed", "WRONGPASS", "NOAUTH"]
                    .iter()
                    .any(|refusal| detail.contains(refusal)) =>
            {
                Some(Refused::Credentials)
            }
            _ => None,
        }
    }

    /// Sends boot's `PING` on `connection`, named `subject` in a refusal:
    /// whether Redis answered. A Redis that does not answer yet is logged at
    /// `warn` and is not refused; one that answers and refuses the
    /// credentials or the database is, with what it said and the fix in
    /// `fixes`, and so is one node of a cluster that refuses to select the
    /// database the URL names. Neither shows a password: the subject and the
    /// URL logged are redacted, and Redis's answer never repeats one.
    async fn ping(
        connection: &RedisConnection,
        subject: &str,
        fixes: &Fixes,
    ) -> Result<bool, BootError> {
        let error = match connection.ping().await {
            Ok(()) => return Ok(true),
            Err(error) => error,
        };
        if !connection.config().is_cluster() && is_a_cluster_node_refusing_select(&error) {
            return Err(one_node_of_a_cluster(subject));
        }
        let (refused, fix) = match refused(&error) {
            Some(Refused::Credentials) => (
                "the credentials given (none, or a username or password it does not take)",
                fixes.credentials,
            ),
            Some(Refused::Database) => ("the database asked for", fixes.database),
            None => {
                tracing::warn!(
                    redis = %connection.config().redacted(),
                    %error,
                    "Redis does not answer yet; booting anyway. The connection retries in the \
                     background, and until Redis answers each limited request follows its \
                     backend-error policy"
                );
                return Ok(false);
            }
        };
        // What Redis said, without the prefix of this crate's own errors.
        let said = match &error {
            RedisBackendError::Redis(said) => said.to_string(),
            other => other.to_string(),
        };
        let said = said.trim_end_matches('.');
        Err(ConfigError::Refused(format!(
            "refusing to boot: {subject} answers but refuses {refused}: {said}. {fix}"
        ))
        .into())
    }

    /// The Redis driver over a lazy connection, and whether Redis answered a
    /// `PING` within the timeouts.
    pub(super) async fn build(
        plan: &RedisPlan,
    ) -> Result<(Arc<dyn RateLimiterDriver>, bool), BootError> {
        let connection = RedisConnection::new(plan.config.clone())?;
        let subject = format!("{RATE_LIMIT_REDIS_URL}={}", plan.config.redacted());
        let answered = check(&connection, &subject, &DRIVER_FIXES).await?;
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
