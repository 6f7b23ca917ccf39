//! The request-target and `Host` header rules a server enforces before it
//! routes a request (RFC 9112, section 3.2).

use http::header::HOST;
use http::{HeaderMap, Method, Uri, Version};

/// Why a request's target makes it a bad request, or `None` when it may be
/// served: a target in authority form (`example.com:80`, or a word such as
/// `login`, read as one) is for `CONNECT` alone (RFC 9112, section 3.2.3),
/// and names no path a route could match; served, it reached the `/` route.
/// The asterisk form (`*`) is for a server-wide `OPTIONS` alone (section
/// 3.2.4); served, `GET *` reached a route such as `/{name}`. And the
/// authority form is the only one `CONNECT` takes.
pub(crate) fn target_fault(method: &Method, uri: &Uri) -> Option<&'static str> {
    // An authority with userinfo (`http://user:secret@host/`, or an HTTP/2
    // `:authority` of that form) is refused as it is in a `Host`: RFC
    // 9110, 4.2.4, and RFC 9113, 8.3.1.
    if uri
        .authority()
        .is_some_and(|authority| authority.as_str().contains('@'))
    {
        return Some("the request target must not carry userinfo\n");
    }
    let path = uri.path();
    if method == Method::CONNECT && (path.starts_with('/') || uri.scheme().is_some()) {
        // RFC 9110, 9.3.6: a tunnel's target is a host and a port alone.
        return Some("the target of CONNECT must be a host and a port\n");
    }
    if path.starts_with('/') {
        // Origin form, or an absolute URI (whose empty path reads `/`).
        return None;
    }
    let fault = (path.is_empty() && method != Method::CONNECT)
        || (path == "*" && method != Method::OPTIONS);
    fault.then_some("the request target must be a path (or an absolute URI)\n")
}

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
    let valid = is_host_and_port(host.as_bytes());
    (!valid).then_some("invalid Host header\n")
}

/// `uri-host [ ":" port ]` (RFC 3986): an IP literal in brackets, or a
/// registered name or IPv4 address (unreserved characters, escapes and
/// sub-delimiters), then an optional `:` and digits. Read byte by byte,
/// without building a URI authority, which would copy the value.
fn is_host_and_port(text: &[u8]) -> bool {
    let (host_ok, rest) = match text.strip_prefix(b"[") {
        Some(literal) => match literal.iter().position(|&b| b == b']') {
            Some(end) => (is_ip_literal(&literal[..end]), &literal[end + 1..]),
            None => (false, &[][..]),
        },
        None => {
            let end = text.iter().position(|&b| b == b':').unwrap_or(text.len());
            (is_reg_name(&text[..end]), &text[end..])
        }
    };
    host_ok
        && match rest.split_first() {
            None => true,
            Some((b':', port)) => port.iter().all(u8::is_ascii_digit),
            Some(_) => false,
        }
}

/// What brackets hold in a host (RFC 3986, 3.2.2): an IPv6 address, with a
/// zone after `%25` (RFC 6874), or an IPvFuture (`v1.x`).
fn is_ip_literal(literal: &[u8]) -> bool {
    if let Some(future) = literal.strip_prefix(b"v").or(literal.strip_prefix(b"V")) {
        // "v" 1*HEXDIG "." 1*( unreserved / sub-delims / ":" )
        let Some(dot) = future.iter().position(|&b| b == b'.') else {
            return false;
        };
        let (version, text) = (&future[..dot], &future[dot + 1..]);
        return !version.is_empty()
            && version.iter().all(u8::is_ascii_hexdigit)
            && !text.is_empty()
            && text
                .iter()
                .all(|&b| b.is_ascii_alphanumeric() || b"-._~!$&'()*+,;=:".contains(&b));
    }
    let (address, zone) = match literal.windows(3).position(|w| w == b"%25") {
        Some(at) => (&literal[..at], Some(&literal[at + 3..])),
        None => (literal, None),
    };
    std::str::from_utf8(address).is_ok_and(|a| a.parse::<std::net::Ipv6Addr>().is_ok())
        // ZoneID = 1*( unreserved / pct-encoded )
        && zone.is_none_or(|zone| !zone.is_empty() && is_encoded(zone, b"-._~"))
}

/// `*( unreserved / pct-encoded / sub-delims )`.
fn is_reg_name(name: &[u8]) -> bool {
    is_encoded(name, b"-._~!$&'()*+,;=")
}

/// Letters, digits, the bytes of `others`, and `%` with two hex digits.
fn is_encoded(name: &[u8], others: &[u8]) -> bool {
    let mut bytes = name.iter();
    while let Some(&b) = bytes.next() {
        let allowed = b.is_ascii_alphanumeric() || others.contains(&b);
        if b == b'%' {
            let escaped = (bytes.next(), bytes.next());
            if !matches!(escaped, (Some(h), Some(l)) if h.is_ascii_hexdigit() && l.is_ascii_hexdigit())
            {
                return false;
            }
        } else if !allowed {
            return false;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn brackets_hold_an_ipv6_address_or_an_ipvfuture() {
        for host in [
            "[::1]",
            "[::1]:80",
            "[fe80::1%25eth0]",
            "[fe80::1%25en%2F0]:443",
            "[v1.x]",
            "[VA.a:b]",
        ] {
            assert!(is_host_and_port(host.as_bytes()), "{host}");
        }
        for host in [
            "[]",
            "[zz]",
            "[example.com]",
            "[10.0.0.1]",
            "[::1%25]",
            "[::1%eth0]",
            "[fe80::1%25e/0]",
            "[v.x]",
            "[v1.]",
            "[vx.1]",
        ] {
            assert!(!is_host_and_port(host.as_bytes()), "{host}");
        }
    }

    fn fault(version: Version, hosts: &[&str]) -> Option<&'static str> {
        let mut headers = HeaderMap::new();
        for host in hosts {
            headers.append(
                HOST,
                http::HeaderValue::from_bytes(host.as_bytes()).unwrap(),
            );
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
