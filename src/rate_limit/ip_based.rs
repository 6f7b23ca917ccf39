//! `RateLimitMiddleware::ip_based`: a per-address limit on the installed
//! driver.

use std::time::Duration;

use super::SlidingWindowConfig;
use super::address_key::address_key_with;
use super::middleware::{LimiterSource, RateLimitMiddleware};

impl RateLimitMiddleware {
    /// Allows each client address `max_requests` requests in `window`, on the
    /// [`RateLimiterDriver`](super::RateLimiterDriver) the application
    /// installed.
    ///
    /// - **The driver is looked up when a request arrives**, in
    ///   [`App::current`](crate::container::App::current), so the middleware
    ///   can be built where routes are registered, before the drivers boot.
    ///   No installed driver is a backend error
    ///   ([`RateLimitError::NotInstalled`](super::RateLimitError::NotInstalled)),
    ///   which the [`BackendErrorPolicy`](super::BackendErrorPolicy) handles.
    /// - **The key names the address and the limit**:
    ///   `ip:<address>:<max_requests>:<window in ms>` (with the fraction of a
    ///   millisecond after a point, for a window that has one), where the address is
    ///   [`Request::ip`](crate::Request::ip) (through the trusted proxies)
    ///   grouped by [`bucket_address`](crate::keys::bucket_address): IPv4 by
    ///   itself, IPv6 by its /64. Two limits with different numbers never
    ///   share a bucket; two with the same numbers share one on every route,
    ///   so the budget belongs to the client.
    /// - **A request with no address gets a bucket of its own.** Only an
    ///   in-process request has none; one shared bucket would let one such
    ///   caller lock out the others.
    ///
    /// ```
    /// use std::time::Duration;
    /// use suprnova::rate_limit::RateLimitMiddleware;
    ///
    /// let twenty_a_minute = RateLimitMiddleware::ip_based(20, Duration::from_secs(60));
    /// # drop(twenty_a_minute);
    /// ```
    ///
    /// Set `APP_TRUSTED_PROXIES` before deploying behind a proxy, or every
    /// client shares the proxy's bucket.
    pub fn ip_based(max_requests: u32, window: Duration) -> Self {
        let config = SlidingWindowConfig::new(max_requests, window);
        let limit = format!(":{max_requests}:{}", window_millis(window));
        RateLimitMiddleware::with_source(LimiterSource::Installed, config, move |req| {
            address_key_with(req, "ip", &limit)
        })
    }
}

/// The window in milliseconds, with the rest of a millisecond after a point
/// when there is one (`60000`, `60000.0005`): windows that differ by less
/// than a millisecond are different limits, and count apart.
fn window_millis(window: Duration) -> String {
    let millis = window.as_millis();
    let rest = window.subsec_nanos() % 1_000_000;
    if rest == 0 {
        return millis.to_string();
    }
    let fraction = format!("{rest:06}");
    format!("{millis}.{}", fraction.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Request;

    fn from(peer: &str) -> Request {
        Request::new(http::Request::get("/").body(String::new()).unwrap())
            .with_peer(peer.parse().unwrap())
    }

    #[test]
    fn the_key_carries_the_address_and_the_numbers() {
        let mw = RateLimitMiddleware::ip_based(20, Duration::from_secs(60));
        assert_eq!(
            (mw.key_fn)(&from("203.0.113.5:9")),
            "ip:203.0.113.5:20:60000"
        );
        assert_eq!(
            (mw.key_fn)(&from("[2001:db8:a:b:1::2]:9")),
            "ip:2001:db8:a:b::/64:20:60000"
        );
        assert_eq!(mw.config().max_requests, 20);
    }

    #[test]
    fn windows_apart_by_less_than_a_millisecond_key_apart() {
        let key = |window| (RateLimitMiddleware::ip_based(1, window).key_fn)(&from("192.0.2.1:9"));
        assert_eq!(key(Duration::from_secs(60)), "ip:192.0.2.1:1:60000");
        assert_eq!(
            key(Duration::from_micros(60_000_500)),
            "ip:192.0.2.1:1:60000.5"
        );
        assert_eq!(
            key(Duration::from_nanos(60_000_000_001)),
            "ip:192.0.2.1:1:60000.000001"
        );
        assert_eq!(key(Duration::from_nanos(1_500_000)), "ip:192.0.2.1:1:1.5");
    }
}
