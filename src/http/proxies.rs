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
/// Entries are addresses or CIDR ranges, IPv4 or IPv6; an IPv4 range written
/// in IPv6 form (`::ffff:10.0.0.0/104`) is kept as its IPv4 range. A range of
/// every address is refused (`0.0.0.0/0`, `::/0`, and `::ffff:0:0/96`, which
/// is every IPv4 address): it would make every client a trusted proxy, and
/// let each one pick the address it is limited by.
///
/// ```
/// use suprnova::http::TrustedProxies;
///
/// let proxies: TrustedProxies = "10.0.0.5, 173.245.48.0/20,2400:cb00::/32".parse().unwrap();
/// assert!(proxies.contains("173.245.50.1".parse().unwrap()));
/// assert!(!proxies.contains("10.0.0.6".parse().unwrap()));
/// assert!("0.0.0.0/0".parse::<TrustedProxies>().is_err());
/// assert!("::ffff:0:0/96".parse::<TrustedProxies>().is_err());
/// ```
#[derive(Clone, Default, PartialEq, Eq)]
pub struct TrustedProxies {
    nets: Vec<IpNet>,
}

/// An `APP_TRUSTED_PROXIES` entry that was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TrustedProxiesError {
    /// The entry is neither an address nor a CIDR range.
    #[error("{entry:?} is neither an IP address nor a CIDR range (such as 10.0.0.5 or 10.0.0.0/8)")]
    NotAnAddress {
        /// The entry as written.
        entry: String,
    },
    /// The entry is a range of every address: a `/0` of either family, or
    /// `::ffff:0:0/96`, every IPv4 address written in IPv6 form.
    #[error(
        "{entry:?} covers every address, so every client would be a trusted proxy and choose the address it is limited by; list only the addresses and ranges of your proxies"
    )]
    EveryAddress {
        /// The entry as written.
        entry: String,
    },
    /// The entry writes an IPv4 address in IPv6 form (`::ffff:10.0.0.0`)
    /// with a prefix under 96: an IPv6 range around the mapped addresses,
    /// not the IPv4 range it looks like (`::ffff:10.0.0.0/8` is `::/8`).
    #[error(
        "{entry:?} is an IPv4 address in IPv6 form with a prefix under /96, which makes it an IPv6 range (here {ipv6_range}) and not the IPv4 range it names; write the IPv4 range (such as 10.0.0.0/8), or give the IPv6 form a prefix of 96 plus the IPv4 one"
    )]
    MappedPrefixUnder96 {
        /// The entry as written.
        entry: String,
        /// The IPv6 range the entry would have been.
        ipv6_range: String,
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
        match env.text(Self::VARIABLE)? {
            None => Ok(Self::none()),
            Some(raw) => raw
                .parse()
                .map_err(|e: TrustedProxiesError| ConfigError::Invalid {
                    variable: Self::VARIABLE.to_owned(),
                    value: raw.clone(),
                    reason: e.to_string(),
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
    /// is no `X-Forwarded-For`. `Forwarded` (RFC 7239) is never read.
    ///
    /// The walk touches only the entries it reads, from the right, so a
    /// header of any size with any bytes on its left costs no more than the
    /// entries the proxies appended.
    pub fn client_ip(&self, peer: IpAddr, headers: &HeaderMap) -> IpAddr {
        let peer = canonical_ip(peer);
        if !self.contains(peer) {
            return peer;
        }
        let forwarded = headers.get_all("x-forwarded-for");
        if forwarded.iter().next().is_some() {
            return self.walk_forwarded_for(peer, forwarded);
        }
        let mut real = headers.get_all("x-real-ip").iter();
        match (real.next(), real.next()) {
            (Some(value), None) => parse_forwarded_ip(value.as_bytes()).unwrap_or(peer),
            // Two X-Real-IP lines: no way to tell which one the proxy wrote.
            _ => peer,
        }
    }

    /// Walks the `X-Forwarded-For` lines from the right. `writer` is the
    /// proxy that wrote the entry being read: the peer for the rightmost,
    /// then each trusted entry for the one to its left.
    fn walk_forwarded_for(
        &self,
        peer: IpAddr,
        lines: http::header::GetAll<'_, http::HeaderValue>,
    ) -> IpAddr {
        let mut writer = peer;
        // Entries are split on the raw bytes, not on the line as text: a byte
        // outside ASCII that a client put on the left of a line must not hide
        // the entries its proxies appended on the right.
        for line in lines.iter().rev() {
            for entry in line.as_bytes().rsplit(|&b| b == b',') {
                match parse_forwarded_ip(entry) {
                    None => return writer,
                    Some(ip) if self.contains(ip) => writer = ip,
                    Some(ip) => return ip,
                }
            }
        }
        writer
    }
}

/// Parses one forwarded entry: an address, optionally with a port
/// (`203.0.113.7:5123`, `[2001:db8::1]:443`) or in brackets. IPv4-mapped
/// IPv6 comes back as IPv4. Anything else (`unknown`, an empty entry, bytes
/// that are not ASCII) is `None`.
pub(crate) fn parse_forwarded_ip(entry: &[u8]) -> Option<IpAddr> {
    // The longest address with brackets and a port is 53 bytes; the cap keeps
    // a hostile entry from costing more than a short one.
    if entry.len() > 64 {
        return None;
    }
    // ASCII only, trimmed of ASCII blanks: `str::trim` would also take a
    // no-break space (U+00A0) for a blank, and read the address it pads.
    if !entry.is_ascii() {
        return None;
    }
    let entry = std::str::from_utf8(entry.trim_ascii()).ok()?;
    if entry.is_empty() {
        return None;
    }
    let ip = entry
        .parse::<IpAddr>()
        .ok()
        // With a port: the standard library takes a numeric zone there
        // (`[fe80::1%2]:443`), which names an interface of the writer's
        // host, no address; every other spelling of a zone is refused.
        .or_else(|| {
            (!entry.contains('%'))
                .then(|| entry.parse::<std::net::SocketAddr>().ok())
                .flatten()
                .map(|sa| sa.ip())
        })
        .or_else(|| {
            entry
                .strip_prefix('[')
                .and_then(|e| e.strip_suffix(']'))
                .and_then(|e| e.parse::<IpAddr>().ok())
        })?;
    Some(canonical_ip(ip))
}

/// An address, or a range `<address>/<prefix>`. The address is read by the
/// standard library's parser in both, which refuses an IPv4 part with a
/// leading zero (`010.0.0.5`): some tools read it as octal (8.0.0.5), and
/// the range parser would read it as decimal.
fn parse_net(entry: &str) -> Option<IpNet> {
    match entry.split_once('/') {
        None => entry.parse::<IpAddr>().ok().map(IpNet::from),
        Some((address, _prefix)) => {
            address.parse::<IpAddr>().ok()?;
            entry.parse::<IpNet>().ok()
        }
    }
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
            let net = parse_net(entry).ok_or_else(|| TrustedProxiesError::NotAnAddress {
                entry: entry.to_owned(),
            })?;
            if let IpNet::V6(v6) = net
                && v6.prefix_len() < 96
                && v6.addr().to_ipv4_mapped().is_some()
            {
                return Err(TrustedProxiesError::MappedPrefixUnder96 {
                    entry: entry.to_owned(),
                    ipv6_range: v6.trunc().to_string(),
                });
            }
            // Checked after the mapped form is turned into IPv4, or
            // `::ffff:0:0/96` would slip through as a /96 and then trust
            // every IPv4 client as 0.0.0.0/0.
            let net = canonical_net(net);
            if net.prefix_len() == 0 {
                return Err(TrustedProxiesError::EveryAddress {
                    entry: entry.to_owned(),
                });
            }
            nets.push(net);
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

/// A single address as the address (`10.0.0.5`), a range in CIDR form.
fn show_net(net: &IpNet) -> String {
    if net.prefix_len() == net.max_prefix_len() {
        net.addr().to_string()
    } else {
        net.to_string()
    }
}

impl fmt::Debug for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.nets.iter().map(show_net))
            .finish()
    }
}

impl fmt::Display for TrustedProxies {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.nets.is_empty() {
            return f.write_str("none");
        }
        let list: Vec<String> = self.nets.iter().map(show_net).collect();
        f.write_str(&list.join(","))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn every_address_is_refused_in_each_spelling() {
        for entry in ["0.0.0.0/0", "::/0", "::ffff:0:0/96", "::ffff:0.0.0.0/96"] {
            let err = format!("10.0.0.5, {entry}")
                .parse::<TrustedProxies>()
                .unwrap_err();
            assert_eq!(
                err,
                TrustedProxiesError::EveryAddress {
                    entry: entry.to_owned()
                }
            );
        }
    }

    #[test]
    fn mapped_ranges_become_ipv4_ranges() {
        let proxies: TrustedProxies = "::ffff:10.0.0.0/104".parse().unwrap();
        assert_eq!(proxies.to_string(), "10.0.0.0/8");
        assert!(proxies.contains(ip("10.9.9.9")));
        assert!(proxies.contains(ip("::ffff:10.9.9.9")));
        assert!(!proxies.contains(ip("11.0.0.1")));
    }

    #[test]
    fn a_mapped_address_with_a_prefix_under_96_is_refused() {
        // `::ffff:10.0.0.0/8` is `::/8`: it would trust `::1` and not 10/8.
        let err = "10.0.0.5, ::ffff:10.0.0.0/8"
            .parse::<TrustedProxies>()
            .unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"::ffff:10.0.0.0/8\" is an IPv4 address in IPv6 form with a prefix under /96, which makes it an IPv6 range (here ::/8) and not the IPv4 range it names; write the IPv4 range (such as 10.0.0.0/8), or give the IPv6 form a prefix of 96 plus the IPv4 one"
        );
        for kept in ["::ffff:10.0.0.0/104", "::/8", "2001:db8::/32"] {
            assert!(kept.parse::<TrustedProxies>().is_ok(), "{kept}");
        }
    }

    #[test]
    fn spaces_and_empty_entries_are_tolerated() {
        let proxies: TrustedProxies = " 10.0.0.5 ,, 2001:db8::/32 ,".parse().unwrap();
        assert_eq!(proxies.to_string(), "10.0.0.5,2001:db8::/32");
        assert!("".parse::<TrustedProxies>().unwrap().is_empty());
    }

    #[test]
    fn a_leading_zero_is_refused_in_an_address_and_in_a_range_alike() {
        // `0177.0.0.1` is 127.0.0.1 to a reader of octal and 177.0.0.1 to
        // one of decimal: refused whichever way it is written.
        for entry in ["010.0.0.5", "010.0.0.5/32", "0177.0.0.1/32", "10.0.0.05/8"] {
            assert_eq!(
                entry.parse::<TrustedProxies>().unwrap_err(),
                TrustedProxiesError::NotAnAddress {
                    entry: entry.to_owned()
                },
                "{entry}"
            );
        }
        let kept: TrustedProxies = "10.0.0.5/32, 0.0.0.1/32, 2001:db8::/32".parse().unwrap();
        assert_eq!(kept.to_string(), "10.0.0.5,0.0.0.1,2001:db8::/32");
    }

    #[test]
    fn an_address_with_a_port_is_not_an_entry() {
        let err = "10.0.0.5:80".parse::<TrustedProxies>().unwrap_err();
        assert_eq!(
            err.to_string(),
            "\"10.0.0.5:80\" is neither an IP address nor a CIDR range (such as 10.0.0.5 or 10.0.0.0/8)"
        );
    }

    #[test]
    fn forwarded_entries() {
        assert_eq!(
            parse_forwarded_ip(b" 203.0.113.7:5123 "),
            Some(ip("203.0.113.7"))
        );
        assert_eq!(
            parse_forwarded_ip(b"[2001:db8::1]:443"),
            Some(ip("2001:db8::1"))
        );
        assert_eq!(
            parse_forwarded_ip(b"[2001:db8::1]"),
            Some(ip("2001:db8::1"))
        );
        assert_eq!(
            parse_forwarded_ip(b"::ffff:203.0.113.1"),
            Some(ip("203.0.113.1"))
        );
        for junk in [
            &b""[..],
            b"unknown",
            b"_hidden",
            b"1.2.3",
            b"203.0.113.7:99999",
            b"fe80::1%eth0",
            b"\xff203.0.113.7",
        ] {
            assert_eq!(parse_forwarded_ip(junk), None, "{junk:?}");
        }
        assert_eq!(parse_forwarded_ip("1".repeat(10_000).as_bytes()), None);
    }
}
