//! `ConnectionsPerIp`: a cap on what one client address holds open.
//!
//! It counts through [`Request::hold_for_connection`]: a guard whose `Drop`
//! gives the place back, kept on the request (and, on a WebSocket route,
//! moved into the socket's task). Your own middleware can do the same when
//! it takes something a connection has to give back:
//!
//! ```
//! use suprnova::{async_trait, Middleware, Next, Request, Response};
//!
//! struct Slot(std::sync::Arc<std::sync::atomic::AtomicUsize>);
//!
//! impl Drop for Slot {
//!     fn drop(&mut self) {
//!         self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
//!     }
//! }
//!
//! struct CountOpen(std::sync::Arc<std::sync::atomic::AtomicUsize>);
//!
//! #[async_trait]
//! impl Middleware for CountOpen {
//!     async fn handle(&self, mut request: Request, next: Next) -> Response {
//!         self.0.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
//!         request.hold_for_connection(Slot(self.0.clone()));
//!         next(request).await
//!     }
//! }
//! ```

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, MutexGuard};

use async_trait::async_trait;

use super::TOO_MANY_REQUESTS_BODY;
use crate::http::HttpResponse;
use crate::keys::bucket_address;
use crate::middleware::{Middleware, Next};
use crate::{Request, Response};

/// Caps the connections one client address holds open through it, per
/// process; see [`RateLimitMiddleware::connections_per_ip`].
///
/// A place is taken when the middleware lets a request pass, and kept on the
/// request with [`Request::hold_for_connection`]: on a plain route it is
/// given back when the handler drops or consumes the request, on a WebSocket
/// route ([`ws`](mod@crate::ws)) when the socket's session ends. A request over the
/// cap gets `429 Too Many Requests` with no `Retry-After`, since nothing says
/// when a connection will close. A request with no address is not counted.
///
/// Addresses count as [`bucket_address`] groups
/// them: IPv4 by itself, IPv6 by its /64, IPv4-mapped IPv6 as IPv4. A clone
/// shares the counts, so one cap can guard several routes. An address whose
/// count returns to zero leaves the map, so the map holds only addresses
/// with something open.
///
/// ```
/// use suprnova::rate_limit::RateLimitMiddleware;
///
/// let cap = RateLimitMiddleware::connections_per_ip(2);
/// let same_counts = cap.clone();
/// assert_eq!(same_counts.open_for("203.0.113.1".parse().unwrap()), 0);
/// assert_eq!(cap.max(), 2);
/// ```
///
/// [`RateLimitMiddleware::connections_per_ip`]: super::RateLimitMiddleware::connections_per_ip
#[derive(Clone)]
pub struct ConnectionsPerIp {
    max: u32,
    counts: Arc<Mutex<HashMap<String, usize>>>,
}

impl ConnectionsPerIp {
    /// A cap of `max` open connections for each client address. `0` refuses
    /// every request that has an address.
    pub fn new(max: u32) -> Self {
        Self {
            max,
            counts: Arc::new(Mutex::new(HashMap::new())),
        }
    }

    /// The cap.
    pub fn max(&self) -> u32 {
        self.max
    }

    /// The connections `addr` holds through this cap right now, counted by
    /// /64 for IPv6.
    pub fn open_for(&self, addr: IpAddr) -> usize {
        self.lock().get(&bucket_address(addr)).copied().unwrap_or(0)
    }

    /// How many addresses hold at least one connection.
    pub fn addresses_open(&self) -> usize {
        self.lock().len()
    }

    /// Takes a place for `addr`, or `None` when it holds `max` already.
    fn try_take(&self, addr: IpAddr) -> Option<ConnectionSlot> {
        let group = bucket_address(addr);
        let mut counts = self.lock();
        let open = counts.entry(group.clone()).or_insert(0);
        if *open >= self.max as usize {
            // The entry may have been created just now by `entry`; leave no
            // zero behind.
            if *open == 0 {
                counts.remove(&group);
            }
            return None;
        }
        *open += 1;
        Some(ConnectionSlot {
            counts: self.counts.clone(),
            group,
        })
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<String, usize>> {
        // A poisoned lock only means a thread panicked between two plain
        // integer updates; the map is still consistent.
        self.counts.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl fmt::Debug for ConnectionsPerIp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConnectionsPerIp")
            .field("max", &self.max)
            .field("addresses_open", &self.addresses_open())
            .finish()
    }
}

#[async_trait]
impl Middleware for ConnectionsPerIp {
    async fn handle(&self, mut request: Request, next: Next) -> Response {
        let Some(addr) = request.ip_addr() else {
            return next(request).await;
        };
        match self.try_take(addr) {
            Some(slot) => {
                request.hold_for_connection(slot);
                next(request).await
            }
            None => {
                // Debug, not info: a client holding sockets open would
                // otherwise flood the log at its own pace.
                tracing::debug!(
                    address = %bucket_address(addr),
                    max = self.max,
                    "open connection cap reached; refusing"
                );
                Err(HttpResponse::text(TOO_MANY_REQUESTS_BODY).status(429))
            }
        }
    }
}

/// One place taken by an address; dropping it gives the place back.
struct ConnectionSlot {
    counts: Arc<Mutex<HashMap<String, usize>>>,
    group: String,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut counts = self.counts.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(open) = counts.get_mut(&self.group) {
            *open = open.saturating_sub(1);
            if *open == 0 {
                counts.remove(&self.group);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn places_are_taken_up_to_the_cap_and_given_back() {
        let cap = ConnectionsPerIp::new(2);
        let a = cap.try_take(ip("203.0.113.1")).unwrap();
        let b = cap.try_take(ip("203.0.113.1")).unwrap();
        assert!(cap.try_take(ip("203.0.113.1")).is_none());
        assert!(cap.try_take(ip("203.0.113.2")).is_some());
        assert_eq!(cap.open_for(ip("203.0.113.1")), 2);
        drop(a);
        assert_eq!(cap.open_for(ip("203.0.113.1")), 1);
        drop(b);
        assert_eq!(cap.open_for(ip("203.0.113.1")), 0);
        assert_eq!(cap.addresses_open(), 0, "a count of zero leaves the map");
    }

    #[test]
    fn ipv6_counts_by_64_and_mapped_as_ipv4() {
        let cap = ConnectionsPerIp::new(1);
        let _a = cap.try_take(ip("2001:db8:1:2::1")).unwrap();
        assert!(cap.try_take(ip("2001:db8:1:2:ffff::9")).is_none());
        assert_eq!(cap.open_for(ip("2001:db8:1:2::77")), 1);
        assert!(cap.try_take(ip("2001:db8:1:3::1")).is_some());
        let _b = cap.try_take(ip("::ffff:198.51.100.7")).unwrap();
        assert_eq!(cap.open_for(ip("198.51.100.7")), 1);
    }

    #[test]
    fn zero_refuses_and_leaves_nothing_behind() {
        let cap = ConnectionsPerIp::new(0);
        assert!(cap.try_take(ip("203.0.113.1")).is_none());
        assert_eq!(cap.addresses_open(), 0);
    }
}
