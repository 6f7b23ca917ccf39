//! The bucket keys of the throttle middleware.
//!
//! Keys are passed raw to the [`RateLimiter`](crate::RateLimiter), which
//! cleans them once, as Laravel's does.

use crate::http::Request;
use crate::keys::{KeyPart, push_address_or_token, push_bucket_address, push_clean_proof};
use crate::limiter::{TIMER_SUFFIX, cleaned};

/// Who a request is counted as: `user:<id>` for a signed-in user,
/// `ip:<address>` for a guest ([`Request::ip`], through the trusted
/// proxies, grouped by [`bucket_address`](crate::keys::bucket_address): an
/// IPv6 client by its /64, as every per-address limit counts it). The two
/// are spelled apart so that a user whose id reads like an address shares
/// no bucket with that address. The id is written so that cleaning cannot
/// make two ids one (`tom&jerry` is `tom%26jerry`, not `tomajerry`; see
/// [`push_clean_proof`]), and so that it cannot write the key's own `:`
/// (`7:path:/login` is `7%3Apath%3A/login`, not user 7's bucket of
/// `/login`); an id of ASCII letters, digits and punctuation but `:` reads
/// as it is.
///
/// A request with no address (one made in process, with no peer) gets a
/// key no other request gets: one shared bucket for all of them would let
/// one caller use it up and lock the others out.
///
/// This is the key of
/// [`ThrottleRequestsMiddleware::default()`](crate::ThrottleRequestsMiddleware),
/// Laravel's `$request->user()?->id ?: $request->ip()`: an empty id is no
/// id there, and the request counts by its address (one bucket `user:`
/// would be shared by every caller signed in with an empty id). An id `0`,
/// which PHP's `?:` skips too, is a user here, on purpose: ids are text,
/// and `0` is as much an id as `1`.
pub(super) fn caller_key(request: &Request) -> String {
    caller_key_of(request, request.user_id().filter(|id| !id.is_empty()))
}

/// [`caller_key`] with `user` as the signed-in user's id.
fn caller_key_of(request: &Request, user: Option<&str>) -> String {
    if let Some(id) = user {
        let mut key = String::with_capacity(5 + id.len());
        key.push_str("user:");
        push_clean_proof(&mut key, id, KeyPart::Id);
        return key;
    }
    let mut key = String::with_capacity(48);
    key.push_str("ip:");
    push_address_or_token(&mut key, request.ip_addr(), push_bucket_address);
    key
}

/// The caller on this path: `user:<id>:path:<path>` or
/// `ip:<address>:path:<path>`, the request path as the router matches it
/// ([`Request::route_path`]), so that `/login/` and `//login` count with
/// `/login`, and `/items/1` apart from `/items/2`. As the id, the path
/// keeps apart what cleaning would make one (`/tags/a%26b`, `/tags/aab`).
/// A signed-in user counts as a user whatever the id, an empty one
/// included, as Laravel's `throttle:X,Y` signs a request by its user
/// whenever `$request->user()` is set (and gives it the user's maximum).
pub(super) fn caller_on_path_key(request: &Request) -> String {
    let mut key = caller_key_of(request, request.user_id());
    key.push_str(":path:");
    push_clean_proof(&mut key, &request.route_path(), KeyPart::Path);
    key
}

/// The key of a named limiter's limit: `<name>:<limit key>`, as Laravel
/// spells it when it does not hash keys (`global:` for an empty key).
pub(super) fn named_key(name: &str, limit_key: &str) -> String {
    joined(name, limit_key)
}

/// `<prefix>:<key>`, or the key alone for an empty prefix. Laravel puts
/// nothing between the two; the `:` keeps `login` + `ip:...` from reading
/// as one word and matches the rest of the key's punctuation.
pub(super) fn prefixed(prefix: &str, key: String) -> String {
    if prefix.is_empty() {
        key
    } else {
        joined(prefix, &key)
    }
}

/// `key`, with a `~` after it when, cleaned as the limiter cleans it, it
/// ends in `:timer` or `~`: so that no key a caller chooses (`by(email)`)
/// names another bucket's timer (`<key>:timer`, the entry that holds when
/// its window ends), and no two keys become one. Every other key is kept
/// as it is, readable.
pub(super) fn naming_no_timer(mut key: String) -> String {
    // Cleaning maps each character on its own, and only `:` to `:`, so
    // the cleaned key's tail after its last `:` is the raw tail's, cleaned;
    // and a character it keeps or makes a letter of is one character, so
    // only a tail of six characters can clean to `:timer` (an address's
    // tail is not cleaned at all).
    let ends_as_a_timer = key.rfind(':').is_some_and(|colon| {
        let tail = &key[colon..];
        tail.len() <= 4 * TIMER_SUFFIX.len()
            && tail.chars().count() == TIMER_SUFFIX.len()
            && cleaned(tail) == TIMER_SUFFIX
    });
    if ends_as_a_timer || key.ends_with('~') {
        key.push('~');
    }
    key
}

/// `<head>:<tail>` in one allocation of the right size (`format!` sizes its
/// buffer by a guess and grows it, through the formatting machinery).
fn joined(head: &str, tail: &str) -> String {
    let mut key = String::with_capacity(head.len() + 1 + tail.len());
    key.push_str(head);
    key.push(':');
    key.push_str(tail);
    key
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(path: &str, peer: Option<&str>, user: Option<&str>) -> Request {
        let mut req = Request::new(http::Request::get(path).body(String::new()).unwrap());
        if let Some(peer) = peer {
            req = req.with_peer(peer.parse().unwrap());
        }
        if let Some(user) = user {
            req.set_user_id(user);
        }
        req
    }

    #[test]
    fn guests_by_address_users_by_id() {
        let guest = request("/a?x=1", Some("203.0.113.9:1"), None);
        assert_eq!(caller_key(&guest), "ip:203.0.113.9");
        assert_eq!(caller_on_path_key(&guest), "ip:203.0.113.9:path:/a");
        let user = request("/a", Some("203.0.113.9:1"), Some("42"));
        assert_eq!(caller_key(&user), "user:42");
        assert_eq!(caller_on_path_key(&user), "user:42:path:/a");
        let v6 = request("/", Some("[2001:db8::1]:1"), None);
        assert_eq!(caller_key(&v6), "ip:2001:db8::/64");
        for spelling in ["/login/", "//login", "/login//"] {
            let guest = request(spelling, Some("203.0.113.9:1"), None);
            assert_eq!(caller_on_path_key(&guest), "ip:203.0.113.9:path:/login");
        }
    }

    #[test]
    fn what_cleaning_would_make_one_is_written_apart() {
        for (id, key) in [
            ("tom&jerry@example.com", "user:tom%26jerry@example.com"),
            ("tomajerry@example.com", "user:tomajerry@example.com"),
            ("caf\u{e9}", "user:caf%C3%A9"),
            ("50%", "user:50%25"),
            ("<a>\"'", "user:%3Ca%3E%22%27"),
            ("7:path:/login", "user:7%3Apath%3A/login"),
        ] {
            let user = request("/", None, Some(id));
            assert_eq!(caller_key(&user), key, "{id}");
            assert_eq!(cleaned(&caller_key(&user)), key, "{id}");
        }
        for (path, key) in [
            ("/tags/a&b", "ip:203.0.113.9:path:/tags/a%26b"),
            ("/tags/a%26b", "ip:203.0.113.9:path:/tags/a%26b"),
            ("/tags/caf%C3%A9", "ip:203.0.113.9:path:/tags/caf%C3%A9"),
            ("/off/100%25", "ip:203.0.113.9:path:/off/100%25"),
            ("/files/a%2fb", "ip:203.0.113.9:path:/files/a%2Fb"),
        ] {
            let guest = request(path, Some("203.0.113.9:1"), None);
            assert_eq!(caller_on_path_key(&guest), key, "{path}");
        }
    }

    #[test]
    fn an_empty_id_counts_by_address_under_the_default_key_only() {
        let empty = request("/a", Some("203.0.113.9:1"), Some(""));
        assert_eq!(caller_key(&empty), "ip:203.0.113.9");
        assert_eq!(caller_on_path_key(&empty), "user::path:/a");
        let zero = request("/a", Some("203.0.113.9:1"), Some("0"));
        assert_eq!(caller_key(&zero), "user:0");
    }

    #[test]
    fn no_address_gets_a_fresh_key_each_time() {
        let a = caller_key(&request("/", None, None));
        let b = caller_key(&request("/", None, None));
        assert!(a.starts_with("ip:no-address:"), "{a}");
        assert_ne!(a, b);
    }

    #[test]
    fn prefixes_and_names() {
        assert_eq!(prefixed("", "ip:1".into()), "ip:1");
        assert_eq!(prefixed("login", "ip:1".into()), "login:ip:1");
        assert_eq!(named_key("api", "203.0.113.5"), "api:203.0.113.5");
        assert_eq!(named_key("global", ""), "global:");
    }

    #[test]
    fn no_key_names_a_timer_and_no_two_become_one() {
        for (key, kept) in [
            ("login:alice", "login:alice"),
            ("login:alice:timer", "login:alice:timer~"),
            ("login:alice:tim\u{e9}r", "login:alice:tim\u{e9}r~"),
            ("login:alice:timer~", "login:alice:timer~~"),
            ("login:alice~", "login:alice~~"),
            ("login:alice:timers", "login:alice:timers"),
            ("timer", "timer"),
            (":timer", ":timer~"),
        ] {
            assert_eq!(naming_no_timer(key.to_owned()), kept, "{key}");
        }
    }
}
