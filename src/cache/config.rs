//! `CacheConfig`: which cache store to use, read from the environment under
//! the names a Laravel application gives it.

use std::sync::Arc;

use super::MemoryStore;
use super::store::{CacheError, Store};
use crate::clock::{self, SharedClock};
use crate::config::credentials::redact_credentials;
use crate::config::{ConfigError, Env};
use crate::container::App;
use crate::limiter::CacheRateLimiter;
#[cfg(feature = "redis")]
use crate::redis_client::{
    MAX_DATABASE, RedisConfig, RedisConnection, is_socket_scheme, node_urls, url_text,
};

/// Which backend the cache uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CacheStoreKind {
    /// [`MemoryStore`]: this process only (`CACHE_STORE=memory` or `array`).
    Memory,
    /// `RedisStore` (feature `redis`): shared by every process on one
    /// Redis (`CACHE_STORE=redis`).
    Redis,
}

/// The cache store configuration, as a Laravel application names it in its
/// environment.
///
/// | variable | default | meaning |
/// | --- | --- | --- |
/// | `CACHE_STORE` (`CACHE_DRIVER` before Laravel 11) | `memory` | `memory` or `array` (this process), or `redis` |
/// | `APP_NAME` | `Laravel` | the default prefixes derive from it, as Laravel's `Str::slug` does |
/// | `CACHE_PREFIX` | `<slug of APP_NAME>-cache-` (`laravel-cache-`) | the cache prefix |
/// | `REDIS_PREFIX` | `<slug of APP_NAME>-database-` (`laravel-database-`) | the Redis connection prefix, before the cache prefix |
/// | `REDIS_URL` | unset | the Redis URL (`unix:///path/redis.sock` for a socket); a cluster as a comma-separated list of node URLs |
/// | `REDIS_HOST`, `REDIS_PORT` | `127.0.0.1`, `6379` | used when `REDIS_URL` is unset; a `tls://` host means TLS, a path (`/var/run/redis/redis.sock`) a Unix socket |
/// | `REDIS_USERNAME`, `REDIS_PASSWORD` | unset | credentials, used with `REDIS_HOST`, and for each node of a `REDIS_URL` that names none (a URL that names a username only takes `REDIS_PASSWORD`); credentials written in the URL win |
/// | `REDIS_CACHE_CONNECTION` | `cache` | the Laravel Redis connection the cache counts on: `cache` (database `REDIS_CACHE_DB`) or `default` (database `REDIS_DB`) |
/// | `REDIS_CACHE_DB` | `1` | the database of the `cache` connection, unless the URL names one |
/// | `REDIS_DB` | `0` | the database of the `default` connection, unless the URL names one |
/// | `RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS`, `RATE_LIMIT_REDIS_TIMEOUT_MS` | `1000`, `1000` | how long a connection attempt and a command may wait, in milliseconds: the driver's settings, which bound the cache store's calls too ([`RedisConfig::with_timeouts_from_env`]) |
///
/// The default prefixes are those of Laravel 13 (and of the skeleton 12.x
/// since v12.1.0), with hyphens. An application created from an older
/// skeleton uses underscores: set `CACHE_PREFIX=laravel_cache_` and
/// `REDIS_PREFIX=laravel_database_` (the values of its
/// `config/cache.php` and `config/database.php`). Laravel 10 and earlier put a
/// `:` after the cache prefix: `CACHE_PREFIX=laravel_cache_:`.
///
/// Laravel keeps its cache in the database of its `cache` Redis connection,
/// `REDIS_CACHE_DB`, 1 by default (or of its `default` one, `REDIS_DB`, 0
/// by default, with `REDIS_CACHE_CONNECTION=default`); a `REDIS_URL` that names a database
/// (`redis://host:6379/2`, or `?db=2` after a socket's path) wins, as in
/// Laravel. A cluster has only database 0.
///
/// ```
/// use suprnova::cache::{CacheConfig, CacheStoreKind};
/// use suprnova::config::Env;
///
/// # #[cfg(feature = "redis")] {
/// let env = Env::from_pairs([("CACHE_STORE", "redis"), ("REDIS_HOST", "cache.internal")]);
/// let config = CacheConfig::from_env(&env).unwrap();
/// assert_eq!(config.store, CacheStoreKind::Redis);
/// assert_eq!(config.key_prefix(), "laravel-database-laravel-cache-");
/// assert_eq!(config.redis.unwrap().nodes(), ["redis://cache.internal:6379/1"]);
/// # }
///
/// let err = CacheConfig::from_env(&Env::from_pairs([("CACHE_STORE", "file")])).unwrap_err();
/// assert!(err.to_string().contains("CACHE_STORE"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CacheConfig {
    /// The backend.
    pub store: CacheStoreKind,
    /// The cache prefix (`CACHE_PREFIX`).
    pub cache_prefix: String,
    /// The Redis connection prefix (`REDIS_PREFIX`).
    pub redis_prefix: String,
    /// Where Redis is, for [`CacheStoreKind::Redis`].
    #[cfg(feature = "redis")]
    pub redis: Option<RedisConfig>,
}

impl CacheConfig {
    /// The variable that names the backend.
    pub const STORE_VARIABLE: &'static str = "CACHE_STORE";

    /// The in-memory store, with the default prefixes.
    pub fn memory() -> Self {
        let slug = laravel_slug(DEFAULT_APP_NAME);
        Self {
            store: CacheStoreKind::Memory,
            cache_prefix: format!("{slug}-cache-"),
            redis_prefix: format!("{slug}-database-"),
            #[cfg(feature = "redis")]
            redis: None,
        }
    }

    /// Reads the variables in the table above. A value that cannot be used
    /// is an error that names its variable.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        let store = store_kind(env)?;
        // As Laravel's `env('APP_NAME', 'Laravel')` reads it: set blank, or
        // to `null` or `(empty)`, it is empty, and the prefixes are
        // `-cache-` and `-database-`.
        let app_name = env
            .laravel_text("APP_NAME")?
            .unwrap_or_else(|| DEFAULT_APP_NAME.to_owned());
        let cache_prefix = prefix(env, "CACHE_PREFIX", &app_name, "-cache-")?;
        let redis_prefix = prefix(env, "REDIS_PREFIX", &app_name, "-database-")?;
        #[cfg(feature = "redis")]
        let redis = match store {
            CacheStoreKind::Redis => Some(redis_config(env)?),
            CacheStoreKind::Memory => None,
        };
        #[cfg(not(feature = "redis"))]
        if store == CacheStoreKind::Redis {
            return Err(ConfigError::Invalid {
                variable: Self::STORE_VARIABLE.to_owned(),
                value: "redis".to_owned(),
                reason: "this build has no Redis support; enable the `redis` feature".to_owned(),
            });
        }
        Ok(Self {
            store,
            cache_prefix,
            redis_prefix,
            #[cfg(feature = "redis")]
            redis,
        })
    }

    /// The prefix of every Redis key: the Redis prefix, then the cache
    /// prefix.
    pub fn key_prefix(&self) -> String {
        format!("{}{}", self.redis_prefix, self.cache_prefix)
    }

    /// Builds the store on the system clock. A Redis store must be built
    /// inside a tokio runtime; it connects on first use, so a Redis that is
    /// not up yet does not fail this call.
    pub fn build_store(&self) -> Result<Arc<dyn Store>, CacheError> {
        self.build_store_with_clock(clock::system())
    }

    /// Builds the store; a memory store reads `clock`.
    pub fn build_store_with_clock(&self, clock: SharedClock) -> Result<Arc<dyn Store>, CacheError> {
        match self.store {
            CacheStoreKind::Memory => Ok(Arc::new(MemoryStore::with_clock(clock))),
            #[cfg(feature = "redis")]
            CacheStoreKind::Redis => {
                let config = self.redis.clone().ok_or_else(|| {
                    CacheError::Backend("CacheConfig names Redis but holds no Redis URL".into())
                })?;
                let conn = RedisConnection::new(config)?;
                Ok(Arc::new(
                    super::RedisStore::new(conn).with_prefix(self.key_prefix()),
                ))
            }
            #[cfg(not(feature = "redis"))]
            CacheStoreKind::Redis => Err(CacheError::Backend(
                "this build has no Redis support; enable the `redis` feature".into(),
            )),
        }
    }

    /// Builds the store and installs it in `app` as `Arc<dyn Store>`, with a
    /// [`CacheRateLimiter`] over it on the system clock, which the
    /// [`RateLimiter`](crate::RateLimiter) and [`Cache`](super::Cache)
    /// facades then use.
    pub fn install(&self, app: &App) -> Result<Arc<dyn Store>, CacheError> {
        self.install_with_clock(app, clock::system())
    }

    /// [`CacheConfig::install`] on `clock`.
    pub fn install_with_clock(
        &self,
        app: &App,
        clock: SharedClock,
    ) -> Result<Arc<dyn Store>, CacheError> {
        let store = self.build_store_with_clock(clock.clone())?;
        app.install::<dyn Store>(store.clone());
        app.install(Arc::new(CacheRateLimiter::new(store.clone(), clock)));
        Ok(store)
    }
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self::memory()
    }
}

const DEFAULT_APP_NAME: &str = "Laravel";

fn store_kind(env: &Env) -> Result<CacheStoreKind, ConfigError> {
    let (variable, raw) = match env.text(CacheConfig::STORE_VARIABLE)? {
        Some(raw) => (CacheConfig::STORE_VARIABLE, raw),
        None => match env.text("CACHE_DRIVER")? {
            Some(raw) => ("CACHE_DRIVER", raw),
            None => return Ok(CacheStoreKind::Memory),
        },
    };
    match raw.as_str() {
        "memory" | "array" => Ok(CacheStoreKind::Memory),
        "redis" => Ok(CacheStoreKind::Redis),
        // A Redis URL written here by mistake: its credentials hidden.
        _ => Err(ConfigError::Invalid {
            variable: variable.to_owned(),
            value: redact_credentials(&raw),
            reason: "expected memory, array or redis, in lowercase (the other Laravel stores are not available)".to_owned(),
        }),
    }
}

fn prefix(env: &Env, variable: &str, app_name: &str, suffix: &str) -> Result<String, ConfigError> {
    // An explicit prefix is taken as written, and one set blank (or
    // `(empty)`) is no prefix, as Laravel's `env()` reads it.
    if let Some(set) = env.laravel_text(variable)? {
        return Ok(set);
    }
    if !app_name.is_ascii() {
        return Err(ConfigError::Missing {
            variable: variable.to_owned(),
            reason: format!(
                "APP_NAME={app_name:?} is not ASCII, and Laravel transliterates such a name before it derives the prefix; set {variable} to the prefix your Laravel application uses"
            ),
        });
    }
    Ok(format!("{}{suffix}", laravel_slug(app_name)))
}

/// Laravel's `Str::slug($title)` with the `-` separator, for ASCII titles:
/// `_` and runs of spaces become `-`, `@` becomes `at`, every other character
/// that is not a letter or a digit is dropped, and the result is lowercase.
fn laravel_slug(title: &str) -> String {
    let title = title.replace('_', "-").replace('@', "-at-").to_lowercase();
    let kept: String = title
        .chars()
        .filter(|c| c.is_ascii_alphanumeric() || *c == '-' || c.is_whitespace())
        .collect();
    let mut slug = String::with_capacity(kept.len());
    for c in kept.chars() {
        if c == '-' || c.is_whitespace() {
            if !slug.ends_with('-') {
                slug.push('-');
            }
        } else {
            slug.push(c);
        }
    }
    slug.trim_matches('-').to_owned()
}

#[cfg(feature = "redis")]
fn redis_config(env: &Env) -> Result<RedisConfig, ConfigError> {
    let (database_variable, default_database) = database_variable(env)?;
    let set_database = env.number_in(
        database_variable,
        0..=MAX_DATABASE.unsigned_abs(),
        "a database number",
    )?;
    let database = set_database.unwrap_or(default_database);
    let (variable, url) = match url_text(env, "REDIS_URL")? {
        Some(url) => ("REDIS_URL", url),
        None => ("REDIS_HOST", url_from_parts(env, database)?),
    };
    // The value shown with its credentials hidden: a URL built from
    // REDIS_HOST carries REDIS_PASSWORD.
    let invalid = |value: &str, reason: String| ConfigError::Invalid {
        variable: variable.to_owned(),
        value: redact_credentials(value),
        reason,
    };
    let mut nodes = node_urls(&url);
    if variable == "REDIS_URL" {
        // Laravel merges the URL over the connection's settings: what a
        // node's URL leaves out, its credentials or (one node) its
        // database, the connection's variables give.
        let credentials = (
            env.laravel_secret("REDIS_USERNAME")?,
            env.laravel_secret("REDIS_PASSWORD")?,
        );
        // A username alone is refused where a node would take it: one
        // whose URL names no password. The URL's own credentials win.
        if credentials.0.is_some()
            && credentials.1.is_none()
            && !nodes.urls.iter().all(|node| names_password(node))
        {
            return Err(lone_username());
        }
        let database = (!nodes.cluster && nodes.urls.len() == 1).then_some(database);
        for node in &mut nodes.urls {
            *node = merged_over_connection(node, &credentials, database);
        }
    }
    let parsed = RedisConfig::from_nodes(nodes).map_err(|e| invalid(&url, e.reason))?;
    if parsed.is_cluster()
        && let Some(database @ 1..) = set_database
    {
        // A cluster has database 0 only: the one set is not dropped unsaid.
        return Err(ConfigError::Invalid {
            variable: database_variable.to_owned(),
            value: database.to_string(),
            reason: format!(
                "a Redis Cluster has database 0 only; leave {database_variable} unset (or 0) \
                 with a cluster REDIS_URL"
            ),
        });
    }
    parsed.with_timeouts_from_env(env)
}

/// `node`, one node's URL from `REDIS_URL`, with what it leaves out taken
/// from the connection's settings, as Laravel merges its URL over them: a
/// URL that names no credentials takes `REDIS_USERNAME` and
/// `REDIS_PASSWORD`, one that names a username only takes `REDIS_PASSWORD`,
/// and one that names no database takes `database` (given for one node
/// only: a cluster has database 0). What the URL names wins. A URL that
/// does not parse is kept as written, for [`RedisConfig`] to refuse.
#[cfg(feature = "redis")]
fn merged_over_connection(
    node: &str,
    (user, password): &(Option<String>, Option<String>),
    database: Option<u64>,
) -> String {
    let Some(mut url) = ::redis::parse_redis_url(node) else {
        return node.to_owned();
    };
    if is_socket_scheme(url.scheme()) {
        // A socket's path is the file: its database and credentials are
        // query pairs, written as a REDIS_HOST path's are.
        let names = |name: &str| url.query_pairs().any(|(named, _)| named == name);
        let (has_db, has_user, has_pass) = (names("db"), names("user"), names("pass"));
        let mut pairs = Vec::new();
        if let Some(database) = database.filter(|_| !has_db) {
            pairs.push(("db", database.to_string()));
        }
        if !has_pass {
            if let Some(user) = user.as_deref().filter(|_| !has_user) {
                pairs.push(("user", user.to_owned()));
            }
            if let Some(password) = password {
                pairs.push(("pass", password.clone()));
            }
        }
        if !pairs.is_empty() {
            url.query_pairs_mut().extend_pairs(pairs);
        }
        return url.to_string();
    }
    if let Some(database) = database
        && url.path().trim_matches('/').is_empty()
    {
        url.set_path(&format!("/{database}"));
    }
    if url.password().is_none() {
        // Percent-encoded as a REDIS_HOST's credentials are. A URL that
        // cannot hold them names no host, and is refused for that.
        if url.username().is_empty()
            && let Some(user) = user
        {
            let _ = url.set_username(&userinfo(user));
        }
        if let Some(password) = password {
            let _ = url.set_password(Some(&userinfo(password)));
        }
    }
    url.to_string()
}

/// The variable that holds the cache's Redis database, and its default:
/// Laravel's `redis` cache store counts on the connection
/// `REDIS_CACHE_CONNECTION` names, `cache` (database `REDIS_CACHE_DB`, 1)
/// unless it names `default` (database `REDIS_DB`, 0). Another connection
/// is one of the application's own making: refused, naming the variable.
#[cfg(feature = "redis")]
fn database_variable(env: &Env) -> Result<(&'static str, u64), ConfigError> {
    match env.text("REDIS_CACHE_CONNECTION")?.as_deref() {
        None | Some("cache") => Ok(("REDIS_CACHE_DB", 1)),
        Some("default") => Ok(("REDIS_DB", 0)),
        Some(other) => Err(ConfigError::Invalid {
            variable: "REDIS_CACHE_CONNECTION".to_owned(),
            value: other.to_owned(),
            reason: "expected cache or default, the Redis connections of Laravel's \
                     config/database.php; for a connection of your own, set REDIS_URL to its \
                     address with its database"
                .to_owned(),
        }),
    }
}

#[cfg(feature = "redis")]
fn url_from_parts(env: &Env, database: u64) -> Result<String, ConfigError> {
    let host = env
        .text("REDIS_HOST")?
        .unwrap_or_else(|| "127.0.0.1".to_owned());
    let credentials = credentials(env)?;
    if host.starts_with('/') {
        return Ok(socket_url_from_parts(&host, database, credentials));
    }
    let port = env
        .number_in("REDIS_PORT", 1..=u64::from(u16::MAX), "a port")?
        .unwrap_or(6379);
    // A refusal quotes the value as written (a URL written here by mistake
    // with its credentials hidden), not what it became below.
    let written = redact_credentials(&host);
    let (scheme, host) = match host.strip_prefix("tls://") {
        Some(bare) => ("rediss", bare.to_owned()),
        None => ("redis", host),
    };
    let refuse = |reason: &str| ConfigError::Invalid {
        variable: "REDIS_HOST".to_owned(),
        value: written.clone(),
        reason: reason.to_owned(),
    };
    // A name outside ASCII in the form DNS looks up (`bücher.example` is
    // `xn--bcher-kva.example`): a `redis://` URL would percent-encode it.
    let host = if host.is_ascii() {
        host
    } else {
        idna::domain_to_ascii(&host).map_err(|_| refuse("expected a host name or an address"))?
    };
    // An IPv6 address (`::1` as phpredis takes it, written in brackets in
    // a URL, or `[::1]`), or a name or an IPv4 address: any other
    // character would end the host in the URL (`#` begins a fragment, and
    // the port and database after it were dropped).
    let in_url = if host.parse::<std::net::Ipv6Addr>().is_ok() {
        format!("[{host}]")
    } else if host
        .strip_prefix('[')
        .and_then(|inner| inner.strip_suffix(']'))
        .is_some_and(|inner| inner.parse::<std::net::Ipv6Addr>().is_ok())
        || (!host.is_empty()
            && host
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_')))
    {
        host.clone()
    } else {
        return Err(refuse("expected a host name or an address"));
    };
    let mut url = ::redis::parse_redis_url(&format!("{scheme}://{in_url}:{port}/{database}"))
        .ok_or_else(|| refuse("expected a host name or an address"))?;
    // Written percent-encoded, `%` included (the URL's own setters keep a
    // `%`, which the Redis client then decodes: `p%41ss` reached Redis as
    // `pAss`), so that Redis is sent the credentials as written.
    let (user, password) = credentials;
    if let Some(user) = user {
        url.set_username(&userinfo(&user))
            .map_err(|()| refuse("REDIS_USERNAME cannot be set on this host"))?;
    }
    if let Some(password) = password {
        url.set_password(Some(&userinfo(&password)))
            .map_err(|()| refuse("REDIS_PASSWORD cannot be set on this host"))?;
    }
    Ok(url.to_string())
}

/// `REDIS_USERNAME` and `REDIS_PASSWORD`, read beside `REDIS_HOST` and
/// `REDIS_URL` alike. A username without a password is refused: the client
/// authenticates only with a password, and would make every call as the
/// default user (Laravel drops such a username unsaid).
#[cfg(feature = "redis")]
fn credentials(env: &Env) -> Result<(Option<String>, Option<String>), ConfigError> {
    let user = env.laravel_secret("REDIS_USERNAME")?;
    let password = env.laravel_secret("REDIS_PASSWORD")?;
    if user.is_some() && password.is_none() {
        return Err(lone_username());
    }
    Ok((user, password))
}

/// The refusal of a `REDIS_USERNAME` without `REDIS_PASSWORD`.
#[cfg(feature = "redis")]
fn lone_username() -> ConfigError {
    ConfigError::Invalid {
        variable: "REDIS_USERNAME".to_owned(),
        value: "***".to_owned(),
        reason: "a username needs REDIS_PASSWORD too (Redis takes a username only with \
                 its password); set REDIS_PASSWORD, or unset REDIS_USERNAME to be the \
                 default user"
            .to_owned(),
    }
}

/// Whether a node's URL names its password (a socket's as `?pass=`); one
/// that does not parse names none.
#[cfg(feature = "redis")]
fn names_password(node: &str) -> bool {
    ::redis::parse_redis_url(node).is_some_and(|url| {
        if is_socket_scheme(url.scheme()) {
            url.query_pairs().any(|(name, _)| name == "pass")
        } else {
            url.password().is_some()
        }
    })
}

/// `text` as a URL's user information writes it: every byte but ASCII
/// letters, digits and `-._~` percent-encoded.
#[cfg(feature = "redis")]
fn userinfo(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    crate::keys::push_percent_encoded(&mut out, text, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
    });
    out
}

/// A `REDIS_HOST` that is a path, as phpredis takes it: the Unix socket
/// there, with the database and the credentials in the query. The port is
/// not read.
#[cfg(feature = "redis")]
fn socket_url_from_parts(
    path: &str,
    database: u64,
    (user, password): (Option<String>, Option<String>),
) -> String {
    let mut url = ::redis::parse_redis_url("unix:///").expect("a socket URL parses");
    url.set_path(path);
    {
        let mut query = url.query_pairs_mut();
        query.append_pair("db", &database.to_string());
        if let Some(user) = user {
            query.append_pair("user", &user);
        }
        if let Some(password) = password {
            query.append_pair("pass", &password);
        }
    }
    url.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(pairs: &[(&str, &str)]) -> Env {
        Env::from_pairs(pairs.iter().copied())
    }

    #[test]
    fn slugs_as_laravel() {
        assert_eq!(laravel_slug("Laravel"), "laravel");
        assert_eq!(laravel_slug("My Shop"), "my-shop");
        assert_eq!(laravel_slug("my_shop"), "my-shop");
        assert_eq!(laravel_slug("Shop.io  Admin"), "shopio-admin");
        assert_eq!(laravel_slug("me@home"), "me-at-home");
        assert_eq!(laravel_slug("--A--"), "a");
    }

    #[test]
    fn unset_is_memory_with_laravel_13_prefixes() {
        let config = CacheConfig::from_env(&env(&[])).unwrap();
        assert_eq!(config, CacheConfig::memory());
        assert_eq!(config.cache_prefix, "laravel-cache-");
        assert_eq!(config.redis_prefix, "laravel-database-");
    }

    #[test]
    fn array_and_the_older_variable_name() {
        let config = CacheConfig::from_env(&env(&[("CACHE_DRIVER", "array")])).unwrap();
        assert_eq!(config.store, CacheStoreKind::Memory);
        let err = CacheConfig::from_env(&env(&[("CACHE_DRIVER", "file")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("CACHE_DRIVER") && err.contains("file"),
            "{err}"
        );
    }

    #[test]
    fn a_capitalised_store_is_refused() {
        let err = CacheConfig::from_env(&env(&[("CACHE_STORE", "Redis")]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("CACHE_STORE") && err.contains("lowercase"),
            "{err}"
        );
    }

    #[test]
    fn prefixes_follow_app_name_unless_set() {
        let config =
            CacheConfig::from_env(&env(&[("APP_NAME", "My Shop"), ("REDIS_PREFIX", "x_")]))
                .unwrap();
        assert_eq!(config.cache_prefix, "my-shop-cache-");
        assert_eq!(config.key_prefix(), "x_my-shop-cache-");
        let err = CacheConfig::from_env(&env(&[("APP_NAME", "Café")]))
            .unwrap_err()
            .to_string();
        assert!(err.contains("CACHE_PREFIX"), "{err}");
    }

    /// A prefix set blank in a Laravel `.env` (`CACHE_PREFIX=`), or written
    /// `(empty)`, `null` or `false`, is no prefix there, and so here: the
    /// counters of such an application are read under the same keys. `true`
    /// is `1`, as PHP writes it.
    #[test]
    fn a_prefix_set_blank_is_no_prefix_as_in_laravel() {
        for blank in [
            "", "  ", "(empty)", "EMPTY", "null", "(NULL)", "false", "(false)",
        ] {
            let config =
                CacheConfig::from_env(&env(&[("CACHE_PREFIX", blank), ("REDIS_PREFIX", "x_")]))
                    .unwrap();
            assert_eq!(config.key_prefix(), "x_", "{blank:?}");
            let config = CacheConfig::from_env(&env(&[("REDIS_PREFIX", blank)])).unwrap();
            assert_eq!(config.key_prefix(), "laravel-cache-", "{blank:?}");
        }
        let config = CacheConfig::from_env(&env(&[("CACHE_PREFIX", "(true)")])).unwrap();
        assert_eq!(config.key_prefix(), "laravel-database-1");
    }

    #[cfg(feature = "redis")]
    #[test]
    fn the_rate_limiters_redis_timeouts_bound_the_cache_store() {
        use std::time::Duration;

        let config = |pairs: &[(&str, &str)]| {
            let mut all = vec![("CACHE_STORE", "redis")];
            all.extend_from_slice(pairs);
            CacheConfig::from_env(&env(&all)).map(|c| c.redis.unwrap())
        };
        let defaults = config(&[]).unwrap();
        assert_eq!(
            (defaults.connect_timeout, defaults.response_timeout),
            (Duration::from_secs(1), Duration::from_secs(1))
        );
        for url in [
            None,
            Some("redis://h:6380"),
            Some("redis://a:7000,redis://b:7001"),
        ] {
            let mut pairs = vec![
                ("RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS", "250"),
                ("RATE_LIMIT_REDIS_TIMEOUT_MS", "100"),
            ];
            pairs.extend(url.map(|url| ("REDIS_URL", url)));
            let set = config(&pairs).unwrap();
            assert_eq!(
                (set.connect_timeout, set.response_timeout),
                (Duration::from_millis(250), Duration::from_millis(100)),
                "{url:?}"
            );
        }
        assert_eq!(
            config(&[("RATE_LIMIT_REDIS_TIMEOUT_MS", "1s")])
                .unwrap_err()
                .to_string(),
            "RATE_LIMIT_REDIS_TIMEOUT_MS=\"1s\" is invalid: expected a whole number of milliseconds above 0, such as 250"
        );
    }

    #[cfg(feature = "redis")]
    #[test]
    fn redis_url_takes_the_cache_database_unless_it_names_one() {
        let redis = |pairs: &[(&str, &str)]| {
            let mut all = vec![("CACHE_STORE", "redis")];
            all.extend_from_slice(pairs);
            CacheConfig::from_env(&env(&all)).map(|c| c.redis.unwrap().nodes().to_vec())
        };
        assert_eq!(
            redis(&[("REDIS_URL", "redis://h:6380")]).unwrap(),
            ["redis://h:6380/1"]
        );
        assert_eq!(
            redis(&[("REDIS_URL", "redis://h:6380/3"), ("REDIS_CACHE_DB", "5")]).unwrap(),
            ["redis://h:6380/3"]
        );
        assert_eq!(
            redis(&[("REDIS_URL", "redis://a:7000,redis://b:7001")]).unwrap(),
            ["redis://a:7000", "redis://b:7001"]
        );
        assert_eq!(
            redis(&[("REDIS_URL", "unix:///run/redis.sock")]).unwrap(),
            ["unix:///run/redis.sock?db=1"]
        );
        assert_eq!(
            redis(&[("REDIS_URL", "unix:///run/redis.sock?pass=p&db=4")]).unwrap(),
            ["unix:///run/redis.sock?pass=p&db=4"]
        );
        assert_eq!(redis(&[]).unwrap(), ["redis://127.0.0.1:6379/1"]);
        // A path is a Unix socket, as phpredis reads REDIS_HOST; the port
        // is not read.
        assert_eq!(
            redis(&[
                ("REDIS_HOST", "/var/run/redis/redis.sock"),
                ("REDIS_PORT", "0"),
                ("REDIS_USERNAME", "app"),
                ("REDIS_PASSWORD", "p&ss word"),
            ])
            .unwrap(),
            ["unix:///var/run/redis/redis.sock?db=1&user=app&pass=p%26ss+word"]
        );
        assert_eq!(
            redis(&[
                ("REDIS_HOST", "tls://r.example"),
                ("REDIS_PORT", "6390"),
                ("REDIS_PASSWORD", "p@ss/word"),
                ("REDIS_CACHE_DB", "0"),
            ])
            .unwrap(),
            ["rediss://:p%40ss%2Fword@r.example:6390/0"]
        );
        let err = redis(&[("REDIS_URL", "http://h")]).unwrap_err().to_string();
        assert!(err.contains("REDIS_URL"), "{err}");
        assert_eq!(
            redis(&[("REDIS_PORT", "lots")]).unwrap_err().to_string(),
            "REDIS_PORT=\"lots\" is invalid: expected a port from 1 to 65535"
        );
        assert_eq!(
            redis(&[("REDIS_CACHE_DB", "-1")]).unwrap_err().to_string(),
            "REDIS_CACHE_DB=\"-1\" is invalid: expected a database number from 0 to 2147483647"
        );
        // The connection the cache counts on names the database's variable.
        for (connection, database) in [("cache", "1"), ("default", "0")] {
            assert_eq!(
                redis(&[
                    ("REDIS_CACHE_CONNECTION", connection),
                    ("REDIS_CACHE_DB", "4")
                ])
                .unwrap(),
                [if connection == "cache" {
                    "redis://127.0.0.1:6379/4".to_owned()
                } else {
                    format!("redis://127.0.0.1:6379/{database}")
                }]
            );
        }
        let err = redis(&[("REDIS_CACHE_CONNECTION", "queue")])
            .unwrap_err()
            .to_string();
        assert!(
            err.starts_with(
                "REDIS_CACHE_CONNECTION=\"queue\" is invalid: expected cache or default"
            ),
            "{err}"
        );
        let err = redis(&[
            ("REDIS_CACHE_CONNECTION", "default"),
            ("REDIS_DB", "2"),
            ("REDIS_URL", "redis://a:7000,redis://b:7001"),
        ])
        .unwrap_err()
        .to_string();
        assert!(
            err.starts_with("REDIS_DB=\"2\" is invalid: a Redis Cluster"),
            "{err}"
        );
    }

    /// As Laravel merges the URL over the connection's settings, a node's
    /// URL that names no credentials takes REDIS_USERNAME and
    /// REDIS_PASSWORD, written as a REDIS_HOST's are; the URL's own win.
    #[cfg(feature = "redis")]
    #[test]
    fn redis_url_takes_the_credentials_unless_it_names_them() {
        let redis = |pairs: &[(&str, &str)]| {
            let mut all = vec![("CACHE_STORE", "redis")];
            all.extend_from_slice(pairs);
            CacheConfig::from_env(&env(&all)).map(|c| c.redis.unwrap().nodes().to_vec())
        };
        let both = [("REDIS_USERNAME", "app"), ("REDIS_PASSWORD", "p@ss/w%41")];
        let with = |url: &str, credentials: &[(&str, &str)]| {
            redis(&[&[("REDIS_URL", url)], credentials].concat())
        };
        assert_eq!(
            with("redis://h:6380", &both).unwrap(),
            ["redis://app:p%40ss%2Fw%2541@h:6380/1"]
        );
        assert_eq!(
            with("rediss://h:6380/2", &both[1..]).unwrap(),
            ["rediss://:p%40ss%2Fw%2541@h:6380/2"]
        );
        // A username in the URL takes the password it lacks.
        assert_eq!(
            with("redis://me@h:6380", &both).unwrap(),
            ["redis://me:p%40ss%2Fw%2541@h:6380/1"]
        );
        for own in ["redis://me:mine@h:6380/1", "redis://:mine@h:6380/1"] {
            assert_eq!(with(own, &both).unwrap(), [own]);
        }
        assert_eq!(
            with("unix:///run/redis.sock", &both).unwrap(),
            ["unix:///run/redis.sock?db=1&user=app&pass=p%40ss%2Fw%2541"]
        );
        assert_eq!(
            with("unix:///run/redis.sock?pass=mine", &both).unwrap(),
            ["unix:///run/redis.sock?pass=mine&db=1"]
        );
        // Every node of a cluster that names none.
        for cluster in [
            "redis://a:7000,redis://b:7001",
            "redis+cluster://a:7000,b:7001",
        ] {
            assert_eq!(
                with(cluster, &both).unwrap(),
                [
                    "redis://app:p%40ss%2Fw%2541@a:7000",
                    "redis://app:p%40ss%2Fw%2541@b:7001"
                ],
                "{cluster}"
            );
        }
        assert_eq!(
            with("redis+cluster://a:7000", &both[1..]).unwrap(),
            ["redis://:p%40ss%2Fw%2541@a:7000"]
        );
        // A username alone names both variables, and no secret.
        let err = with("redis://h:6380", &both[..1]).unwrap_err().to_string();
        assert!(
            err.starts_with("REDIS_USERNAME=\"***\" is invalid: a username needs REDIS_PASSWORD"),
            "{err}"
        );
    }
}
