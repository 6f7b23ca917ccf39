//! `APP_TRUSTED_PROXIES`: which peers may tell us the client's address.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use http::HeaderMap;
use ipnet::IpNet;

use crate::config::{ConfigError, Env};
use crate::keys::canonical_ip;

/// The proxies whose forwarded headers are believed.
///
/// Entries are addresses or CIDR ranges, IPv4 or IPv6. A `/0` range of
/// either family is refused: it would make every client a trusted proxy, and
/// let each one pick the address it is limited by.
///
/// ```
/// use suprnova::http::TrustedProxies;
///
/// let proxies: TrustedProxies = "10.0.0.5, 173.245.48.0/20,2400:cb00::/32".parse().unwrap();
/// assert!(proxies.contains("173.245.50.1".parse().unwrap()));
/// assert!(!proxies.contains("10.0.0.6".parse().unwrap()));
/// assert!("0.0.0.0/0".parse::<TrustedProxies>().is_err());
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

/// An `APP_TRUSTED_PROXIES` entry that was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustedProxiesError {
    /// The entry is neither an address nor a CIDR range.
    #[error("{entry:?} is neither an IP address nor a CIDR range (such as 10.0.0.0/8)")]
    NotAnAddress {
        /// The entry as written.
        entry: String,
    },
    /// The entry is a range of every address.
    #[error(
        "{entry:?} is a /0 range: it makes every client a trusted proxy that can choose its own address; list only the addresses of your proxies"
    )]
    EveryAddress {
        /// The entry as written.
        entry: String,
    },
}

impl TrustedProxies {
    /// The variable this is read from.
    pub const VARIABLE: &'static str = "APP_TRUSTED_PROXIES";

    /// No trusted proxy: [`Request::ip`](crate::Request::ip) is the TCP peer.
    pub fn none() -> Self {
        Self::default()
    }

    /// Reads `APP_TRUSTED_PROXIES`; unset means none. A refused entry is an
    /// error that names the variable and the entry.
    pub fn from_env(env: &Env) -> Result<Self, ConfigError> {
        match env.get(Self::VARIABLE) {
            None => Ok(Self::none()),
            Some(raw) => raw.parse().map_err(|e: TrustedProxiesError| {
                let entry = match &e {
                    TrustedProxiesError::NotAnAddress { entry }
                    | TrustedProxiesError::EveryAddress { entry } => entry.clone(),
                };
                ConfigError::Invalid {
                    variable: Self::VARIABLE.to_owned(),
                    value: entry,
                    reason: e.to_string(),
                }
            }),
        }
    }

    /// The ranges, as parsed.
    pub fn ranges(&self) -> &[IpNet] {
        &self.nets
    }

    /// Whether no proxy is trusted.
    pub fn is_empty(&self) -> bool {
        self.nets.is_empty()
    }

    /// Whether `ip` is a trusted proxy. An IPv4-mapped IPv6 address is
    /// checked as its IPv4 address.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = canonical_ip(ip);
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// The client address of a request from `peer` with `headers`.
    ///
    /// When the peer is not trusted, it is the peer, whatever the headers say.
    /// When it is, `X-Forwarded-For` (every line, in order, as one list) is
    /// walked from the right: trusted entries are skipped and the first
    /// untrusted one is the client. An entry that is not an address ends the
    /// walk, and the proxy that wrote it is returned. When every entry is
    /// trusted the leftmost is returned. `X-Real-IP` is read only when there
    /// is no `X-Forwarded-For`.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical_ip(peer);
        if !self.contains(peer) {
            return peer;
        }
        let mut forwarded = headers.get_all("x-forwarded-for").iter().peekable();
        if forwarded.peek().is_some() {
            let lines: Vec<Option<&str>> = forwarded.map(|v| v.to_str().ok()).collect();
            let mut writer = peer;
            for line in lines.iter().rev() {
                let Some(line) = line else {
                    return writer;
                };
                for entry in line.rsplit(',') {
                    match parse_forwarded_ip(entry) {
                        None => return writer,
                        Some(ip) if self.contains(ip) => writer = ip,
                        Some(ip) => return ip,
                    }
                }
            }
            return writer;
        }
        let mut real = headers.get_all("x-real-ip").iter();
        match (real.next(), real.next()) {
            (Some(value), None) => value
                .to_str()
                .ok()
                .and_then(parse_forwarded_ip)
                .unwrap_or(peer),
            _ => peer,
        }
    }
}

/// Parses one forwarded entry: an address, optionally with a port
/// (`203.0.113.7:5123`, `[2001:db8::1]:443`) or in brackets. IPv4-mapped
/// IPv6 comes back as IPv4.
pub(crate) fn parse_forwarded_ip(entry: &str) -> Option<IpAddr> {
    let entry = entry.trim();
    if entry.is_empty() || entry.len() > 64 {
        return None;
    }
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        .or_else(|| entry.parse::<std::net::SocketAddr>().ok().map(|sa| sa.ip()))
        .or_else(|| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .and_then(|e| e.parse::<IpAddr>().ok())
        })?;
    Some(canonical_ip(ip))
}

impl FromStr for TrustedProxies {
    type Err = TrustedProxiesError;

    /// Parses a comma-separated list; spaces around entries are ignored, and
    /// so are empty entries (a trailing comma).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let mut nets = Vec::new();
        for raw in s.split(',') {
            let entry = raw.trim();
            if entry.is_empty() {
                continue;
            }
            let net = entry
                .parse::<IpNet>()
                .or_else(|_| entry.parse::<IpAddr>().map(IpNet::from))
                .map_err(|_| TrustedProxiesError::NotAnAddress {
                    entry: entry.to_owned(),
                })?;
            if net.prefix_len() == 0 {
                return Err(TrustedProxiesError::EveryAddress {
                    entry: entry.to_owned(),
                });
            }
            nets.push(canonical_net(net));
        }
        Ok(Self { nets })
    }
}

/// An IPv4-mapped IPv6 range (`::ffff:10.0.0.0/104`) as its IPv4 range.
fn canonical_net(net: IpNet) -> IpNet {
    match net {
        IpNet::V6(v6) if v6.prefix_len() >= 96 => match v6.addr().to_ipv4_mapped() {
            Some(v4) => ipnet::Ipv4Net::new(v4, v6.prefix_len() - 96)
                .map(IpNet::V4)
                .unwrap_or(net),
            None => net,
        },
        other => other,
    }
}

impl fmt::Debug for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.nets.iter().map(|n| n.to_string()))
            .finish()
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nets.is_empty() {
            return f.write_str("none");
        }
        let list: Vec<String> = self.nets.iter().map(|n| n.to_string()).collect();
        f.write_str(&list.join(","))
    }
}
