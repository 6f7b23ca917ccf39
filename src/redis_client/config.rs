//! Redis URLs: one node or a cluster, and the timeouts that bound a call.

use std::fmt;
use std::time::Duration;

use ::redis::IntoConnectionInfo;

use crate::bootstrap::variables::{
    RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS, RATE_LIMIT_REDIS_TIMEOUT_MS,
};
pub(crate) use crate::config::credentials::{is_socket_scheme, redact_credentials};
use crate::config::credentials::{scheme_of, split_urls, starts_with_scheme};
use crate::config::{ConfigError, Env};

/// Where Redis is and how long to wait for it.
///
/// The URL forms:
///
/// | form | meaning |
/// | --- | --- |
/// | `redis://host:6379/0` | one node, plain TCP (the path selects the database) |
/// | `rediss://host:6380` | one node over TLS |
/// | `redis://user:pass@host:6379` | with ACL credentials |
/// | `unix:///run/redis/redis.sock` (or `redis+unix://`) | one node on this host, over its Unix socket (`?db=1&user=u&pass=p` for the rest) |
/// | `redis://a:7000,redis://b:7001,redis://c:7002` | a Redis Cluster, given by its nodes |
/// | `redis+cluster://a:7000` (or `rediss+cluster://`) | a Redis Cluster, given by one or more seed nodes |
///
/// The database is a number from 0 to 2147483647, the last `SELECT` takes:
/// one outside (`/-1`), or that is not a number (`/x`, `?db=`), is refused,
/// and so is a port outside 1 to 65535. A socket's path is at most what a
/// socket address holds: 107 bytes on Linux, 103 on macOS and the BSDs.
///
/// TLS (`rediss://`) checks the server's certificate against the public web
/// roots (Mozilla's, built in); `#insecure`, which would skip the check, is
/// refused.
///
/// A Redis Cluster has only database 0, and its nodes are all asked with one
/// username and password, in one protocol (`?protocol=`), and all reached
/// over TLS or all not: a cluster URL that names another database, or whose
/// nodes differ in these, is refused.
/// Credentials given once, on the first seed of `redis+cluster://`, are
/// every node's.
///
/// ```
/// use suprnova::redis_client::RedisConfig;
///
/// let one = RedisConfig::from_url("redis://127.0.0.1:6379").unwrap();
/// assert!(!one.is_cluster());
/// let cluster = RedisConfig::from_url("redis://10.0.0.1:7000,redis://10.0.0.2:7000").unwrap();
/// assert!(cluster.is_cluster());
/// let socket = RedisConfig::from_url("unix:///run/redis/redis.sock").unwrap();
/// assert!(!socket.is_cluster());
/// assert!(RedisConfig::from_url("http://localhost").is_err());
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct RedisConfig {
    nodes: Vec<String>,
    cluster: bool,
    /// How long one attempt to connect may take. Default 1 s.
    pub connect_timeout: Duration,
    /// How long a command may wait for its answer. Default 1 s.
    pub response_timeout: Duration,
}

/// The schemes of one node's URL.
const NODE_SCHEMES: [&str; 4] = ["redis", "rediss", "unix", "redis+unix"];

/// The last database `SELECT` takes: Redis reads its argument as a 32-bit
/// signed number, and refuses any past it.
pub(crate) const MAX_DATABASE: i64 = i32::MAX as i64;

/// The longest path a Unix socket address holds, in bytes: its `sun_path`
/// (108 bytes on Linux, 104 on macOS and the BSDs) less the NUL that ends
/// the path.
#[cfg(any(target_os = "linux", target_os = "android"))]
const MAX_SOCKET_PATH: usize = 107;
/// The longest path a Unix socket address holds, in bytes: its `sun_path`
/// (108 bytes on Linux, 104 on macOS and the BSDs) less the NUL that ends
/// the path.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
const MAX_SOCKET_PATH: usize = 103;

/// A Redis URL that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{url:?} is not a usable Redis URL: {reason}")]
pub struct RedisUrlError {
    /// The URL (or the part of a list) that was refused, its credentials
    /// hidden (`redis://***@cache.internal:6379`, `?pass=***`); only its
    /// scheme (`redis://***`) for a seed of `redis+cluster://` that may
    /// hold part of a password, cut at a comma in it.
    pub url: String,
    /// Why.
    pub reason: String,
}

impl RedisConfig {
    /// The default connect timeout.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(1);
    /// The default response timeout.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_secs(1);

    /// Parses a URL in one of the forms above.
    pub fn from_url(url: &str) -> Result<Self, RedisUrlError> {
        let url = url.trim();
        if url.is_empty() {
            return Err(refusal(url, false, "it is empty"));
        }
        Self::from_nodes(node_urls(url))
    }

    /// The configuration of the node URLs of a value, as [`node_urls`]
    /// splits it: each checked as [`from_url`](Self::from_url) checks it.
    pub(crate) fn from_nodes(nodes: NodeUrls) -> Result<Self, RedisUrlError> {
        let NodeUrls {
            urls: nodes,
            cluster,
            hidden,
        } = nodes;
        let mut infos = Vec::with_capacity(nodes.len());
        for (i, node) in nodes.iter().enumerate() {
            let refuse = |reason: &str| refusal(node, i < hidden, reason);
            let scheme = scheme_of(node);
            if !NODE_SCHEMES.contains(&scheme) {
                return Err(refuse(
                    "the scheme must be redis://, rediss://, unix://, redis+unix://, \
                     redis+cluster:// or rediss+cluster://",
                ));
            }
            if is_socket_scheme(scheme) && nodes.len() > 1 {
                return Err(refuse(
                    "a Unix socket is one node on this host; a Redis Cluster is given by \
                     redis:// URLs",
                ));
            }
            if is_socket_scheme(scheme) && !node[scheme.len() + 3..].starts_with('/') {
                return Err(refuse(
                    "a Unix socket is given by its absolute path, as in \
                     unix:///run/redis/redis.sock",
                ));
            }
            // Read before the client parses the URL, whose own words for a
            // port past 65535 ("did not parse") or a database that is not
            // a number do not say what is wrong.
            if !is_socket_scheme(scheme) && port_out_of_range(node, scheme) {
                return Err(refuse("the port is a number from 1 to 65535"));
            }
            if database_out_of_range(node, is_socket_scheme(scheme)) {
                return Err(refuse(
                    "the database is a number from 0 to 2147483647 (/N after the host, or ?db=N \
                     after a socket's path)",
                ));
            }
            let info = node
                .as_str()
                .into_connection_info()
                .map_err(|e| refuse(&e.to_string()))?;
            // Read from the parsed address, however the URL spells it (the
            // parser drops tabs and newlines: `#insec<TAB>ure` is
            // `#insecure`).
            if matches!(
                info.addr(),
                ::redis::ConnectionAddr::TcpTls { insecure: true, .. }
            ) {
                return Err(refuse(
                    "#insecure (TLS without checking the certificate) is not available: \
                     certificates are checked against the public web roots, so give Redis a \
                     certificate they trust",
                ));
            }
            // The client authenticates only with a password: a username
            // alone would be dropped unsaid, and every call made as the
            // default user.
            let settings = info.redis_settings();
            if settings.username().is_some() && settings.password().is_none() {
                return Err(refuse(
                    "a username needs its password (redis://user:password@host:port, or \
                     ?user=...&pass=... after a socket's path); without a username the \
                     calls are made as the default user",
                ));
            }
            // A `#` ends the host, and what follows it is dropped: the
            // port and the database of `redis://cache.internal#x:6380/2`.
            if ::redis::parse_redis_url(node).is_some_and(|url| url.fragment().is_some()) {
                return Err(refuse(
                    "a # ends the address there, and the port and database after it are \
                     dropped; write a # in a password as %23",
                ));
            }
            if let Some(pair) = unread_query_pair(node, is_socket_scheme(scheme)) {
                return Err(refuse(&unread_query_reason(
                    &pair,
                    is_socket_scheme(scheme),
                )));
            }
            match info.addr() {
                ::redis::ConnectionAddr::Tcp(host, _)
                | ::redis::ConnectionAddr::TcpTls { host, .. }
                    if host.is_empty() =>
                {
                    return Err(refuse("it names no host"));
                }
                // A longer path is refused by every connect ("path must be
                // shorter than SUN_LEN"): each call would fail for good.
                ::redis::ConnectionAddr::Unix(path) if path.as_os_str().len() > MAX_SOCKET_PATH => {
                    return Err(refuse(&format!(
                        "a Unix socket's path is at most {MAX_SOCKET_PATH} bytes, all a socket \
                         address holds; this one has {}",
                        path.as_os_str().len()
                    )));
                }
                _ => {}
            }
            infos.push(info);
        }
        let cluster = cluster || nodes.len() > 1;
        if cluster && let Some((i, reason)) = cluster_mismatch(&infos) {
            return Err(refusal(&nodes[i], i < hidden, reason));
        }
        Ok(Self {
            nodes,
            cluster,
            connect_timeout: Self::DEFAULT_CONNECT_TIMEOUT,
            response_timeout: Self::DEFAULT_RESPONSE_TIMEOUT,
        })
    }

    /// Sets both timeouts.
    pub fn with_timeouts(mut self, connect: Duration, response: Duration) -> Self {
        self.connect_timeout = connect;
        self.response_timeout = response;
        self
    }

    /// The timeouts `RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS` and
    /// `RATE_LIMIT_REDIS_TIMEOUT_MS` set in `env`, each kept as it is when
    /// its variable is unset; a value that is not a whole number of
    /// milliseconds above 0 is an error naming the variable. Both the
    /// driver's connection and the cache store's read them, so one pair of
    /// settings bounds every Redis call a request can wait on.
    pub fn with_timeouts_from_env(self, env: &Env) -> Result<Self, ConfigError> {
        let connect = env
            .positive_millis(RATE_LIMIT_REDIS_CONNECT_TIMEOUT_MS)?
            .unwrap_or(self.connect_timeout);
        let response = env
            .positive_millis(RATE_LIMIT_REDIS_TIMEOUT_MS)?
            .unwrap_or(self.response_timeout);
        Ok(self.with_timeouts(connect, response))
    }

    /// The node URLs.
    pub fn nodes(&self) -> &[String] {
        &self.nodes
    }

    /// Whether this is a Redis Cluster.
    pub fn is_cluster(&self) -> bool {
        self.cluster
    }

    /// Whether any node is reached over TLS.
    pub fn uses_tls(&self) -> bool {
        self.nodes.iter().any(|n| n.starts_with("rediss://"))
    }

    /// The URLs with credentials replaced by `***`, for logs.
    pub fn redacted(&self) -> String {
        let kind = if self.cluster { "cluster " } else { "" };
        format!("{kind}{}", redact_credentials(&self.nodes.join(",")))
    }
}

/// The node URLs of a value in one of [`RedisConfig`]'s forms, not checked.
pub(crate) struct NodeUrls {
    /// One URL a node.
    pub(crate) urls: Vec<String>,
    /// Whether the value names a Redis Cluster by its scheme
    /// (`redis+cluster://`); a list of more than one node is one too.
    pub(crate) cluster: bool,
    /// How many of the first URLs a refusal does not show, even with their
    /// credentials hidden: the seeds of `redis+cluster://` with an `@` after
    /// them in the value. The seeds are cut at every comma, and a password
    /// may hold one: such a seed may be the head of a password (`app:pa` of
    /// `app:pa,ss@host`), or hold part of one after an `@` in it.
    pub(crate) hidden: usize,
}

/// The node URLs of `url`, a value in one of [`RedisConfig`]'s forms.
pub(crate) fn node_urls(url: &str) -> NodeUrls {
    let url = url.trim();
    // A scheme is read in any case (RFC 3986, 3.1), as Laravel's and the
    // Redis client's own parsing read it.
    let after = |prefix: &str| {
        url.get(..prefix.len())
            .filter(|head| head.eq_ignore_ascii_case(prefix))
            .map(|_| &url[prefix.len()..])
    };
    let (scheme, rest) = if let Some(rest) = after("redis+cluster://") {
        ("redis://", rest)
    } else if let Some(rest) = after("rediss+cluster://") {
        ("rediss://", rest)
    } else {
        return NodeUrls {
            urls: split_urls(url)
                .into_iter()
                .map(|u| with_lowercase_scheme(u.trim()))
                .collect(),
            cluster: false,
            hidden: 0,
        };
    };
    let hosts: Vec<&str> = rest.split(',').map(str::trim).collect();
    // Credentials written once, on the first seed, are the cluster's: every
    // node is asked with them.
    let userinfo = hosts[0].rsplit_once('@').map(|(info, _)| info);
    NodeUrls {
        urls: hosts
            .iter()
            .map(|host| match userinfo {
                Some(info) if !host.contains('@') => format!("{scheme}{info}@{host}"),
                _ => format!("{scheme}{host}"),
            })
            .collect(),
        cluster: true,
        hidden: hosts
            .iter()
            .rposition(|host| host.contains('@'))
            .unwrap_or(0),
    }
}

/// `url` with its scheme, before `://`, in lowercase.
fn with_lowercase_scheme(url: &str) -> String {
    if !starts_with_scheme(url) {
        return url.to_owned();
    }
    let scheme = scheme_of(url);
    format!("{}{}", scheme.to_ascii_lowercase(), &url[scheme.len()..])
}

/// The refusal of `part`, shown with its credentials hidden, or as its
/// scheme alone when `hidden` (see [`NodeUrls::hidden`]).
fn refusal(part: &str, hidden: bool, reason: &str) -> RedisUrlError {
    let url = if hidden {
        format!("{}://***", scheme_of(part))
    } else {
        redact_credentials(part)
    };
    RedisUrlError {
        url,
        reason: reason.to_owned(),
    }
}

/// Whether the port of `node`, a TCP URL of `scheme`, is not one from 1 to
/// 65535: 0, which the URL parser takes, or a number past 65535, which it
/// refuses, so that the whole URL does not parse. Read in the text then, as
/// the parser reads it: the digits after the last `:` of the authority
/// (past the userinfo's `@` and an IPv6 address's `]`), without the tabs
/// and newlines it drops.
fn port_out_of_range(node: &str, scheme: &str) -> bool {
    if let Some(url) = ::redis::parse_redis_url(node) {
        return url.port() == Some(0);
    }
    let authority = node[scheme.len() + 3..]
        .split(['/', '?', '#'])
        .next()
        .unwrap_or_default();
    let host = authority
        .rsplit_once('@')
        .map_or(authority, |(_, host)| host);
    let port = match host.rsplit_once(']') {
        Some((_, after)) => after.strip_prefix(':'),
        None => host.rsplit_once(':').map(|(_, port)| port),
    };
    let Some(port) = port else {
        return false;
    };
    let digits: String = port
        .chars()
        .filter(|c| !matches!(c, '\t' | '\n' | '\r'))
        .collect();
    !digits.is_empty()
        && digits.bytes().all(|b| b.is_ascii_digit())
        && !digits.parse::<u16>().is_ok_and(|port| port != 0)
}

/// Whether `node` names a database `SELECT` does not take: one that is not
/// a number, or one outside 0 to [`MAX_DATABASE`]. The database is read
/// as the client reads it: the path after a host without its `/`s, the
/// last `?db=` after a socket's path. The client would refuse one that is
/// not a 64-bit number in its own words, and take one below 0 or past
/// `SELECT`'s range, which Redis then refuses on every connection.
fn database_out_of_range(node: &str, socket: bool) -> bool {
    let Some(url) = ::redis::parse_redis_url(node) else {
        return false;
    };
    let database = if socket {
        url.query_pairs()
            .filter(|(name, _)| name == "db")
            .last()
            .map(|(_, db)| db.into_owned())
    } else {
        Some(url.path().trim_matches('/').to_owned()).filter(|path| !path.is_empty())
    };
    database.is_some_and(|db| {
        !db.parse::<i64>()
            .is_ok_and(|db| (0..=MAX_DATABASE).contains(&db))
    })
}

/// The name of the first pair in `node`'s query that the connection does
/// not read for its scheme (a TCP URL reads `protocol` only, a socket's
/// `db`, `user`, `pass` and `protocol`): written, it would be dropped
/// unsaid, as `?db=3` after a host, whose database is `/3`.
fn unread_query_pair(node: &str, socket: bool) -> Option<String> {
    let read: &[&str] = if socket {
        &["db", "user", "pass", "protocol"]
    } else {
        &["protocol"]
    };
    ::redis::parse_redis_url(node)?
        .query_pairs()
        .map(|(name, _)| name.into_owned())
        .find(|name| !read.contains(&name.as_str()))
}

/// Why a query pair that is not read is refused.
fn unread_query_reason(pair: &str, socket: bool) -> String {
    if socket {
        format!(
            "?{pair}= is not read after a socket's path; only ?db=, ?user=, ?pass= and ?protocol= are"
        )
    } else {
        format!(
            "?{pair}= is not read after a host; the database is /N after the host, as in \
             redis://host:6379/3, and only ?protocol= is read"
        )
    }
}

impl fmt::Debug for RedisConfig {
    /// The nodes with their credentials hidden, as [`redacted`](Self::redacted)
    /// writes them: a configuration printed whole never shows a password.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisConfig")
            .field("nodes", &redact_credentials(&self.nodes.join(",")))
            .field("cluster", &self.cluster)
            .field("connect_timeout", &self.connect_timeout)
            .field("response_timeout", &self.response_timeout)
            .finish()
    }
}

impl RedisUrlError {
    /// Why `raw`, the whole value this error came from, was refused, for an
    /// error that names its variable: the refused URL first when the value
    /// is a list, then the reason; no credential of either shown. The URL
    /// is left out when its hidden form cannot be found in the value's (a
    /// piece cut at a comma inside a password, which would show part of it).
    pub(crate) fn reason_in(&self, raw: &str) -> String {
        let raw = redact_credentials(raw.trim());
        if self.url == raw || !raw.contains(&self.url) {
            return self.reason.clone();
        }
        format!("{:?}: {}", self.url, self.reason)
    }
}

/// The first node of a Redis Cluster that it cannot be run with (its
/// place among `infos`, the nodes' connections), and why:
/// a cluster has only database 0 (a node asked to `SELECT` another refuses
/// every connection, which would leave every limit to the backend-error
/// policy), and redis-rs asks every node with the first one's credentials,
/// TLS and protocol (and refuses to build a client whose nodes differ in
/// them).
fn cluster_mismatch(infos: &[::redis::ConnectionInfo]) -> Option<(usize, &'static str)> {
    let first = infos.first()?.redis_settings();
    let tls = |info: &::redis::ConnectionInfo| {
        matches!(info.addr(), ::redis::ConnectionAddr::TcpTls { .. })
    };
    infos.iter().enumerate().find_map(|(i, info)| {
        let settings = info.redis_settings();
        let reason = if settings.db() != 0 {
            "a Redis Cluster has only database 0; remove the database (/N) from the URL"
        } else if settings.username() != first.username() || settings.password() != first.password() {
            "every node of a Redis Cluster is asked with the same username and password; give them on every URL, or once on the first seed of redis+cluster://"
        } else if tls(info) != tls(&infos[0]) {
            "every node of a Redis Cluster is reached the same way: all rediss:// (TLS) or all redis://"
        } else if settings.protocol() != first.protocol() {
            "every node of a Redis Cluster is asked in the same protocol: give the same ?protocol= on every URL, or on none"
        } else {
            return None;
        };
        Some((i, reason))
    })
}

/// The value of the URL variable `name`, as [`Env::text`] reads it, with a
/// refusal that shows the value with its credentials hidden.
pub(crate) fn url_text(env: &Env, name: &str) -> Result<Option<String>, ConfigError> {
    env.text(name).map_err(|error| match error {
        ConfigError::Invalid {
            variable,
            value,
            reason,
        } => ConfigError::Invalid {
            variable,
            value: redact_credentials(&value),
            reason,
        },
        other => other,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn forms() {
        assert!(
            !RedisConfig::from_url("redis://127.0.0.1:6379/2")
                .unwrap()
                .is_cluster()
        );
        let c = RedisConfig::from_url("redis+cluster://a:7000,b:7001").unwrap();
        assert!(c.is_cluster());
        assert_eq!(c.nodes(), ["redis://a:7000", "redis://b:7001"]);
        assert!(RedisConfig::from_url("rediss://h:6380").unwrap().uses_tls());
        assert!(
            RedisConfig::from_url("redis+cluster://a:7000")
                .unwrap()
                .is_cluster()
        );
    }

    #[test]
    fn refusals() {
        for bad in [
            "",
            "localhost:6379",
            "http://x",
            "redis://",
            "redis://h:notaport",
            "unix:///run/redis.sock?db=x",
        ] {
            assert!(RedisConfig::from_url(bad).is_err(), "{bad} was accepted");
        }
        let reason = |url: &str| RedisConfig::from_url(url).unwrap_err().reason;
        for relative in [
            "unix://",
            "unix://run/redis.sock",
            "redis+unix://redis.sock",
        ] {
            assert_eq!(
                reason(relative),
                "a Unix socket is given by its absolute path, as in unix:///run/redis/redis.sock"
            );
        }
        let in_a_list = RedisConfig::from_url("redis://a:7000,unix:///run/redis.sock").unwrap_err();
        assert_eq!(in_a_list.url, "unix:///run/redis.sock");
        assert_eq!(
            in_a_list.reason,
            "a Unix socket is one node on this host; a Redis Cluster is given by redis:// URLs"
        );
    }

    #[test]
    fn a_database_outside_selects_range_is_refused() {
        for url in [
            "redis://127.0.0.1:6379/-1",
            "rediss://h:6380/-2",
            "unix:///run/redis.sock?db=-1",
            "redis://127.0.0.1:6379/2147483648",
            "unix:///run/redis.sock?db=9223372036854775807",
        ] {
            let e = RedisConfig::from_url(url).unwrap_err();
            assert_eq!(e.url, url);
            assert_eq!(
                e.reason,
                "the database is a number from 0 to 2147483647 (/N after the host, or ?db=N after a socket's path)",
                "{url}"
            );
        }
        assert!(RedisConfig::from_url("redis://127.0.0.1:6379/0").is_ok());
        assert!(RedisConfig::from_url("redis://127.0.0.1:6379/2147483647").is_ok());
    }

    #[test]
    fn a_port_outside_its_range_or_a_database_not_a_number_gets_its_reason() {
        let reason = |url: &str| RedisConfig::from_url(url).unwrap_err().reason;
        for url in [
            "redis://h:0",
            "redis://h:65536",
            "rediss://u:p@h:99999999999999999999/0",
            "redis://[::1]:70000",
            "redis+cluster://a:7000,b:65536",
        ] {
            assert_eq!(reason(url), "the port is a number from 1 to 65535", "{url}");
        }
        assert!(RedisConfig::from_url("redis://[::1]:65535").is_ok());
        assert_ne!(
            reason("redis://h:notaport"),
            "the port is a number from 1 to 65535"
        );
        for url in [
            "redis://h:6379/x",
            "redis://h:6379/1/2",
            "redis://h:6379/%31",
            "unix:///run/redis.sock?db=",
            "unix:///run/redis.sock?db=1&db=x",
        ] {
            assert_eq!(
                reason(url),
                "the database is a number from 0 to 2147483647 (/N after the host, or ?db=N after a socket's path)",
                "{url}"
            );
        }
        assert!(RedisConfig::from_url("redis://h:6379/2/").is_ok());
    }

    #[cfg(unix)]
    #[test]
    fn a_socket_path_longer_than_a_socket_address_holds_is_refused() {
        let path = |len: usize| format!("/{}", "s".repeat(len - 1));
        let longest = path(MAX_SOCKET_PATH);
        assert!(std::os::unix::net::SocketAddr::from_pathname(&longest).is_ok());
        assert!(RedisConfig::from_url(&format!("unix://{longest}")).is_ok());
        let too_long = path(MAX_SOCKET_PATH + 1);
        assert!(std::os::unix::net::SocketAddr::from_pathname(&too_long).is_err());
        let refused = RedisConfig::from_url(&format!("unix://{too_long}?db=1")).unwrap_err();
        assert_eq!(
            refused.reason,
            format!(
                "a Unix socket's path is at most {MAX_SOCKET_PATH} bytes, all a socket address \
                 holds; this one has {}",
                MAX_SOCKET_PATH + 1
            )
        );
    }

    #[test]
    fn redacts_passwords() {
        let c = RedisConfig::from_url("redis://user:secret@h:6379").unwrap();
        assert_eq!(c.redacted(), "redis://***@h:6379");
        let socket =
            RedisConfig::from_url("unix:///run/redis.sock?db=2&user=u&pass=secret").unwrap();
        assert_eq!(
            socket.redacted(),
            "unix:///run/redis.sock?db=2&user=***&pass=***"
        );
    }

    #[test]
    fn a_comma_in_a_password_keeps_its_url_whole() {
        let one = RedisConfig::from_url("redis://app:pa,ss@h:6379").unwrap();
        assert!(!one.is_cluster());
        assert_eq!(one.nodes(), ["redis://app:pa,ss@h:6379"]);
        let debug = format!("{one:?}");
        assert!(!debug.contains("pa,ss"), "{debug}");
        assert!(debug.contains("redis://***@h:6379"), "{debug}");
    }

    #[test]
    fn a_refused_piece_is_named_only_when_it_shows_no_secret() {
        let raw = "redis://a:1,http://u:secret@b:2";
        let e = RedisConfig::from_url(raw).unwrap_err();
        assert!(
            e.reason_in(raw)
                .starts_with("\"http://***@b:2\": the scheme must be")
        );
        let raw = "redis+cluster://app:pa,s3cret@a:7000";
        let e = RedisConfig::from_url(raw).unwrap_err();
        let reason = e.reason_in(raw);
        assert!(
            !reason.contains("app:pa") && !reason.contains("s3cret"),
            "{reason}"
        );
        // A seed cut at a comma, with an `@` after it, may be the head of a
        // password, or hold part of one after an `@`: only its scheme is
        // shown. Past the last `@`, a seed is a host.
        for (raw, shown) in [
            ("redis+cluster://app:pa,s3cret@a:7000", "redis://***"),
            ("rediss+cluster://a:7000,:pa,s3cret@b:7001", "rediss://***"),
            ("redis+cluster://app:p@x:0,y:z@a:7000", "redis://***"),
            ("redis+cluster://u:p@a:7000,b:0", "redis://***@b:0"),
        ] {
            assert_eq!(RedisConfig::from_url(raw).unwrap_err().url, shown, "{raw}");
        }
    }

    #[test]
    fn a_cluster_is_refused_a_database_and_mixed_credentials_or_tls() {
        let reason = |url: &str| RedisConfig::from_url(url).unwrap_err().reason;
        for with_db in [
            "redis+cluster://a:7000/2",
            "redis+cluster://a:7000,b:7001/2",
            "redis://a:7000/1,redis://b:7001/1",
        ] {
            assert_eq!(
                reason(with_db),
                "a Redis Cluster has only database 0; remove the database (/N) from the URL"
            );
        }
        assert!(RedisConfig::from_url("redis://a:7000/0,redis://b:7001/0").is_ok());
        assert_eq!(
            reason("rediss://h:6380/#insecure"),
            "#insecure (TLS without checking the certificate) is not available: certificates are checked against the public web roots, so give Redis a certificate they trust"
        );
        assert_eq!(
            reason("redis://u:p@a:7000,redis://b:7001"),
            "every node of a Redis Cluster is asked with the same username and password; give them on every URL, or once on the first seed of redis+cluster://"
        );
        assert_eq!(
            reason("rediss://a:7000,redis://b:7001"),
            "every node of a Redis Cluster is reached the same way: all rediss:// (TLS) or all redis://"
        );
        for mixed in [
            "redis://a:7000/?protocol=resp3,redis://b:7001",
            "redis://a:7000,redis://b:7001/?protocol=resp3",
        ] {
            assert_eq!(
                reason(mixed),
                "every node of a Redis Cluster is asked in the same protocol: give the same ?protocol= on every URL, or on none",
                "{mixed}"
            );
        }
        assert!(
            RedisConfig::from_url("redis://a:7000/?protocol=resp3,redis://b:7001/?protocol=resp3")
                .is_ok()
        );
        // Credentials written once on the first seed are every node's.
        let once = RedisConfig::from_url("redis+cluster://u:p@a:7000,b:7001").unwrap();
        assert_eq!(once.nodes(), ["redis://u:p@a:7000", "redis://u:p@b:7001"]);
        assert_eq!(
            once.redacted(),
            "cluster redis://***@a:7000,redis://***@b:7001"
        );
    }

    #[test]
    fn a_unix_socket_is_one_node() {
        for url in [
            "unix:///run/redis.sock",
            "redis+unix:///run/redis.sock?db=1",
        ] {
            let c = RedisConfig::from_url(url).unwrap();
            assert!(!c.is_cluster() && !c.uses_tls());
            assert_eq!(c.nodes(), [url]);
        }
    }
}
