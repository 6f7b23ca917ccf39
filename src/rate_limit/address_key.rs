//! Bucket keys named by the client address.

use std::hash::BuildHasher;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::Request;
use crate::keys::bucket_address;

/// `<prefix>:<bucket address>` for a request with an address
/// ([`Request::ip_addr`], through the trusted proxies); for one without, a key
/// no other request gets.
///
/// A request with no address gets a bucket of its own: one shared bucket for
/// all of them would let one caller use it up and lock the others out.
pub(crate) fn address_key(request: &Request, prefix: &str) -> String {
    match request.ip_addr() {
        Some(ip) => format!("{prefix}:{}", bucket_address(ip)),
        None => format!("{prefix}:no-address:{}", unique_token()),
    }
}

/// A token unique to this call: a process-wide counter behind a random
/// per-process seed, so that replicas sharing one Redis do not hand out the
/// same tokens.
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
