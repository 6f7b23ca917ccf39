//! Bucket keys named by the client address.

use crate::Request;
use crate::keys::{push_address_or_token, push_bucket_address};

/// `<prefix>:<bucket address>` for a request with an address
/// ([`Request::ip_addr`], through the trusted proxies); for one without, a key
/// no other request gets.
///
/// A request with no address gets a bucket of its own: one shared bucket for
/// all of them would let one caller use it up and lock the others out.
pub(crate) fn address_key(request: &Request, prefix: &str) -> String {
    address_key_with(request, prefix, "")
}

/// [`address_key`] followed by `suffix`, built in one buffer: this runs on
/// every request of a per-address limit.
pub(crate) fn address_key_with(request: &Request, prefix: &str, suffix: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + suffix.len() + 48);
    key.push_str(prefix);
    key.push(':');
    push_address_or_token(&mut key, request.ip_addr(), push_bucket_address);
    key.push_str(suffix);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(peer: Option<&str>) -> Request {
        let req = Request::new(http::Request::get("/").body(String::new()).unwrap());
        match peer {
            Some(p) => req.with_peer(p.parse().unwrap()),
            None => req,
        }
    }

    #[test]
    fn the_key_names_the_bucket_address() {
        assert_eq!(
            address_key(&request(Some("203.0.113.9:1")), "ip"),
            "ip:203.0.113.9"
        );
        assert_eq!(
            address_key(&request(Some("[2001:db8:0:7::1]:1")), "ns:ip"),
            "ns:ip:2001:db8:0:7::/64"
        );
    }

    #[test]
    fn no_address_gets_a_fresh_key_each_time() {
        let a = address_key(&request(None), "ip");
        let b = address_key(&request(None), "ip");
        assert!(a.starts_with("ip:no-address:"), "{a}");
        assert_ne!(a, b);
    }
}
