//! Building blocks of bucket keys: the address a client is counted by, and
//! the hash that keeps people's identifiers out of the store.

use std::borrow::Cow;
use std::hash::BuildHasher;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use sha2::{Digest, Sha256};

/// An IPv4-mapped IPv6 address (`::ffff:203.0.113.1`) as the IPv4 address;
/// every other address unchanged.
///
/// ```
/// use suprnova::keys::canonical_ip;
///
/// assert_eq!(canonical_ip("::ffff:203.0.113.1".parse().unwrap()).to_string(), "203.0.113.1");
/// ```
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => IpAddr::V6(v6),
        },
        v4 => v4,
    }
}

/// The address a client is counted by: an IPv4 address as itself, an IPv6
/// address as its /64 network (a subscriber line gets a /64 or more, so a
/// count per address would be no limit), an IPv4-mapped address as the IPv4
/// address.
///
/// ```
/// use suprnova::keys::bucket_address;
///
/// assert_eq!(bucket_address("203.0.113.7".parse().unwrap()), "203.0.113.7");
/// assert_eq!(bucket_address("2001:db8:1:2:aaaa::1".parse().unwrap()), "2001:db8:1:2::/64");
/// assert_eq!(bucket_address("::ffff:10.1.2.3".parse().unwrap()), "10.1.2.3");
/// ```
pub fn bucket_address(ip: IpAddr) -> String {
    let mut out = String::with_capacity(24);
    push_bucket_address(&mut out, ip);
    out
}

/// Appends [`bucket_address`] of `ip` to `out`.
pub(crate) fn push_bucket_address(out: &mut String, ip: IpAddr) {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => push_ipv4(out, v4),
        IpAddr::V6(v6) => {
            use std::fmt::Write;
            let s = v6.segments();
            let net = Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0);
            let _ = write!(out, "{net}/64");
        }
    }
}

/// Appends `ip` as text, an IPv4-mapped address as IPv4.
pub(crate) fn push_ip(out: &mut String, ip: IpAddr) {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => push_ipv4(out, v4),
        IpAddr::V6(v6) => {
            use std::fmt::Write;
            let _ = write!(out, "{v6}");
        }
    }
}

/// Appends an IPv4 address digit by digit: this runs on every request of a
/// per-address limit, and `Ipv4Addr`'s `Display` (which supports padding)
/// costs several times as much.
fn push_ipv4(out: &mut String, v4: Ipv4Addr) {
    // Written into a buffer and appended once: `String::push` checks each
    // character's UTF-8 length, which cost more than the digits.
    let mut text = [0_u8; 15];
    let mut len = 0;
    let mut put = |byte: u8| {
        text[len] = byte;
        len += 1;
    };
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            put(b'.');
        }
        if octet >= 100 {
            put(b'0' + octet / 100);
        }
        if octet >= 10 {
            put(b'0' + octet / 10 % 10);
        }
        put(b'0' + octet % 10);
    }
    out.push_str(std::str::from_utf8(&text[..len]).expect("digits and dots are ASCII"));
}

/// Lowercase hex of the SHA-256 of `value`.
///
/// ```
/// use suprnova::keys::sha256_hex;
///
/// assert_eq!(
///     sha256_hex("abc"),
///     "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"
/// );
/// ```
pub fn sha256_hex(value: &str) -> String {
    let digest = Sha256::digest(value.as_bytes());
    let mut out = String::with_capacity(64);
    for byte in digest.iter() {
        out.push(char::from_digit(u32::from(byte >> 4), 16).unwrap_or('0'));
        out.push(char::from_digit(u32::from(byte & 0xf), 16).unwrap_or('0'));
    }
    out
}

/// A request path as the router matches it, for a bucket key: empty
/// segments dropped (the router serves `/login/`, `//login` and `/login`
/// alike) and each segment's percent-escapes decoded once, as the router
/// decodes them (`/users/%34%32` is `/users/42`, `/token%3Arefresh` is
/// `/token:refresh`), but for an escaped `/`, which stays `%2F` inside its
/// segment where a `/` would split it. A key on the raw path would give
/// each spelling of one route a bucket of its own, a way around the limit.
///
/// ```
/// use suprnova::keys::route_path;
///
/// assert_eq!(route_path("/login"), "/login");
/// assert_eq!(route_path("//login/"), "/login");
/// assert_eq!(route_path("/users/%34%32/reset"), "/users/42/reset");
/// assert_eq!(route_path("/token%3arefresh"), "/token:refresh");
/// assert_eq!(route_path("/files/a%2fb"), "/files/a%2Fb");
/// // The router reads `a%2Fb` here, not `a/b`: another spelling.
/// assert_eq!(route_path("/files/a%252Fb"), "/files/a%252Fb");
/// // The router reads `100%` in both.
/// assert_eq!(route_path("/off/100%"), route_path("/off/100%25"));
/// assert_eq!(route_path(""), "/");
/// ```
pub fn route_path(path: &str) -> std::borrow::Cow<'_, str> {
    let plain = path.starts_with('/')
        && !path.contains("//")
        && (path.len() == 1 || !path.ends_with('/'))
        && !path.contains('%');
    if plain {
        return std::borrow::Cow::Borrowed(path);
    }
    let mut out = String::with_capacity(path.len());
    for segment in path.split('/').filter(|s| !s.is_empty()) {
        out.push('/');
        // A segment that is not UTF-8 once decoded matches no route: any
        // spelling will do, and it keeps its own.
        match percent_decoded(segment, true) {
            Some(decoded) => out.push_str(&decoded),
            None => out.push_str(segment),
        }
    }
    if out.is_empty() {
        out.push('/');
    }
    std::borrow::Cow::Owned(out)
}

/// What a part of a key written by [`push_clean_proof`] is.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum KeyPart {
    /// A value of the client's (a user id) that more of the key follows:
    /// its `%` and its `:` are encoded too, so that it cannot write the
    /// key's own separators (an id `7:path:/login` would name user 7's
    /// bucket of `/login`).
    Id,
    /// The key's last part, a path as [`route_path`] writes it, whose `%`
    /// stands only in escapes of its own.
    Path,
}

/// Pushes `part` onto `key` so that no two parts read the same once the
/// key is cleaned ([`clean_rate_limiter_key`](crate::limiter::clean_rate_limiter_key)
/// makes `a&b` and `aab` one, and `café` and `cafe`): the five characters
/// `htmlentities` encodes and every byte outside ASCII are percent-encoded
/// (`&` is `%26`, `é` is `%C3%A9`), and so are an id's `%` and `:`
/// ([`KeyPart`]). Every other character is kept: ids and paths of ASCII
/// letters, digits and punctuation read as written.
pub(crate) fn push_clean_proof(key: &mut String, part: &str, what: KeyPart) {
    let kept = |b: u8| {
        b.is_ascii()
            && !matches!(b, b'&' | b'<' | b'>' | b'"' | b'\'')
            && (what == KeyPart::Path || !matches!(b, b'%' | b':'))
    };
    if part.bytes().all(kept) {
        key.push_str(part);
    } else {
        push_percent_encoded(key, part, kept);
    }
}

/// Pushes `text` onto `out` with every byte that `kept` refuses written as
/// a percent-escape (`%26`, in uppercase hex), and every byte outside
/// ASCII too.
pub(crate) fn push_percent_encoded(out: &mut String, text: &str, kept: impl Fn(u8) -> bool) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    for b in text.bytes() {
        if kept(b) && b.is_ascii() {
            out.push(char::from(b));
        } else {
            out.push('%');
            out.push(char::from(HEX[usize::from(b >> 4)]));
            out.push(char::from(HEX[usize::from(b & 0xF)]));
        }
    }
}

/// `segment` with its percent-escapes decoded once (a `%` not followed by
/// two hex digits stays as it is); `None` when the bytes are not UTF-8. The
/// router reads each segment of a path this way before it matches it. With
/// `keep_slash`, for a key, a decoded `/` is written `%2F` and every `%` the
/// router reads (escaped or not) `%25`, so that two paths the router reads
/// apart never share a spelling.
pub(crate) fn percent_decoded(segment: &str, keep_slash: bool) -> Option<Cow<'_, str>> {
    if !segment.contains('%') {
        return Some(Cow::Borrowed(segment));
    }
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let (byte, width) = match escaped_byte(bytes, i) {
            Some(byte) => (byte, 3),
            None => (bytes[i], 1),
        };
        match byte {
            b'/' if keep_slash => out.extend_from_slice(b"%2F"),
            b'%' if keep_slash => out.extend_from_slice(b"%25"),
            byte => out.push(byte),
        }
        i += width;
    }
    String::from_utf8(out).ok().map(Cow::Owned)
}

/// The byte of the percent-escape that starts at `at` in `bytes` (`%` and
/// two hex digits); `None` when none starts there.
fn escaped_byte(bytes: &[u8], at: usize) -> Option<u8> {
    match bytes.get(at..at + 3)? {
        [b'%', high, low] if high.is_ascii_hexdigit() && low.is_ascii_hexdigit() => {
            let value = |digit: u8| match digit {
                b'0'..=b'9' => digit - b'0',
                b'a'..=b'f' => digit - b'a' + 10,
                _ => digit - b'A' + 10,
            };
            Some(value(*high) << 4 | value(*low))
        }
        _ => None,
    }
}

/// Appends the client's address as `push` writes it, or, for a request
/// with no address, `no-address:` and a [`unique_token`]: a bucket of its
/// own.
pub(crate) fn push_address_or_token(
    out: &mut String,
    ip: Option<IpAddr>,
    push: fn(&mut String, IpAddr),
) {
    match ip {
        Some(ip) => push(out, ip),
        None => {
            out.push_str("no-address:");
            out.push_str(&unique_token());
        }
    }
}

/// A token unique to this call: a process-wide counter behind a random
/// per-process seed, so that replicas sharing one Redis do not hand out the
/// same tokens. A request with no client address gets a bucket of its own
/// under such a token: one shared bucket for all of them would let one
/// caller lock the others out.
fn unique_token() -> String {
    static SEED: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let seed = *SEED.get_or_init(|| {
        // `RandomState` is seeded from the operating system's randomness.
        std::collections::hash_map::RandomState::new().hash_one(std::process::id())
    });
    format!("{seed:016x}-{}", NEXT.fetch_add(1, Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ipv4_digits_match_display() {
        for ip in [
            "0.0.0.0",
            "1.2.3.4",
            "10.20.30.40",
            "100.200.255.9",
            "255.255.255.255",
            "9.99.100.199",
        ] {
            assert_eq!(bucket_address(ip.parse().unwrap()), ip);
        }
    }
}
