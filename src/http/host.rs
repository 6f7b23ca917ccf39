//! The `Host` header rules a server enforces before it routes a request
//! (RFC 9112, section 3.2).

use http::header::HOST;
use http::uri::Authority;
use http::{HeaderMap, Version};

/// Why a request's `Host` header makes it a bad request, or `None` when it
/// may be served.
///
/// An HTTP/1.1 request must carry exactly one `Host` header; no request may
/// carry two; and a `Host` value is a host with an optional port (empty for
/// a target with no authority), never userinfo or a path. HTTP/2 names its
/// authority in `:authority`, so it needs no `Host`; HTTP/1.0 predates it.
pub(crate) fn host_fault(version: Version, headers: &HeaderMap) -> Option<&'static str> {
    let mut hosts = headers.get_all(HOST).iter();
    let Some(host) = hosts.next() else {
        return (version == Version::HTTP_11).then_some("Host header required\n");
    };
    if hosts.next().is_some() {
        return Some("more than one Host header\n");
    }
    let valid = host.is_empty() || host.to_str().is_ok_and(is_host_and_port);
    (!valid).then_some("invalid Host header\n")
}

/// `uri-host [ ":" port ]`: an authority with no userinfo, whose port, if
/// any, is digits.
fn is_host_and_port(text: &str) -> bool {
    let Ok(authority) = text.parse::<Authority>() else {
        return false;
    };
    if text.contains('@') || authority.as_str().len() != text.len() {
        return false;
    }
    match text[authority.host().len()..].strip_prefix(':') {
        Some(port) => port.bytes().all(|b| b.is_ascii_digit()),
        None => authority.host().len() == text.len(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fault(version: Version, hosts: &[&str]) -> Option<&'static str> {
        let mut headers = HeaderMap::new();
        for host in hosts {
            headers.append(HOST, host.parse().unwrap());
        }
        host_fault(version, &headers)
    }

    #[test]
    fn http_1_1_needs_exactly_one_host() {
        assert_eq!(fault(Version::HTTP_11, &[]), Some("Host header required\n"));
        assert_eq!(fault(Version::HTTP_11, &["example.com"]), None);
        assert_eq!(
            fault(Version::HTTP_11, &["example.com", "example.com"]),
            Some("more than one Host header\n")
        );
    }

    #[test]
    fn http_1_0_and_http_2_need_none_but_never_two() {
        assert_eq!(fault(Version::HTTP_10, &[]), None);
        assert_eq!(fault(Version::HTTP_2, &[]), None);
        assert_eq!(
            fault(Version::HTTP_10, &["a.example", "b.example"]),
            Some("more than one Host header\n")
        );
    }

    #[test]
    fn a_host_is_a_name_or_address_with_an_optional_port() {
        for host in [
            "example.com",
            "example.com:8080",
            "127.0.0.1:80",
            "[::1]:443",
            "[::1]",
            "",
        ] {
            assert_eq!(fault(Version::HTTP_11, &[host]), None, "{host:?}");
        }
        for host in [
            "user@example.com",
            "example.com/path",
            "example.com:port",
            "a b",
            "[::1",
            "a:1:2",
            "[::1]x",
        ] {
            assert_eq!(
                fault(Version::HTTP_11, &[host]),
                Some("invalid Host header\n"),
                "{host:?}"
            );
        }
    }
}
