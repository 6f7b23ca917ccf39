//! Helpers shared by the integration tests.

#![allow(dead_code)]

pub mod boot;
pub mod examples;
pub mod h1;
pub mod h2;
pub mod held;
pub mod http;
pub mod load;
pub mod proxy;
pub mod redis;
pub mod two_steps;
pub mod ws;
pub mod ws_frames;

use chrono::{TimeZone, Utc};
use suprnova::cache::{CacheError, Store};
use suprnova::clock::FakeClock;

/// The time to live of `key` in `store`, in whole seconds rounded up, as
/// a transcript of a store shows it; `None` for a key without one.
pub async fn ttl_seconds<S: Store + ?Sized>(
    store: &S,
    key: &str,
) -> Result<Option<u128>, CacheError> {
    Ok(store.ttl(key).await?.map(|t| t.as_millis().div_ceil(1000)))
}

/// The socket address written `s` (`203.0.113.5:4000`, `[::1]:80`).
pub fn peer(s: &str) -> std::net::SocketAddr {
    s.parse().unwrap()
}

/// The IP address written `s`.
pub fn ip(s: &str) -> std::net::IpAddr {
    s.parse().unwrap()
}

/// A fake clock frozen at 2026-01-01 `h:m:s` UTC.
pub fn clock_at(h: u32, m: u32, s: u32) -> FakeClock {
    FakeClock::at(Utc.with_ymd_and_hms(2026, 1, 1, h, m, s).unwrap())
}

/// Sends `signal` (`INT`, `STOP`, `CONT`, `KILL`) to process `pid` with the
/// shell's own `kill`: a minimal system may have no kill program. Whether
/// it was sent.
pub fn signal(pid: u32, signal: &str) -> bool {
    std::process::Command::new("sh")
        .args(["-c", &format!("kill -{signal} {pid}")])
        .status()
        .is_ok_and(|status| status.success())
}

/// Resumes a stopped process when dropped, so a failed test leaves none
/// stopped.
pub struct Resume(pub u32);

impl Drop for Resume {
    fn drop(&mut self) {
        signal(self.0, "CONT");
    }
}

/// `limiter.attempt(key, max, ..)` in a window of no time (a decay of 0),
/// whose callback adds one to `runs` and answers `"ran"`.
pub async fn attempt_with_no_window(
    limiter: &suprnova::limiter::CacheRateLimiter,
    runs: &std::sync::atomic::AtomicUsize,
    key: &str,
    max: i64,
) -> Option<&'static str> {
    limiter
        .attempt(
            key,
            max,
            || async {
                runs.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                "ran"
            },
            0,
        )
        .await
        .unwrap()
}

/// A key prefix no other test uses.
pub fn unique_prefix(name: &str) -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "t{}:{}:{}:",
        std::process::id(),
        name,
        N.fetch_add(1, Ordering::SeqCst)
    )
}

/// `future`'s output, or a panic naming `what` once `limit` has passed: a
/// test whose server, client or peer task never answers fails with a
/// message instead of holding CI until its time runs out.
pub async fn within<T>(
    what: &str,
    limit: std::time::Duration,
    future: impl std::future::Future<Output = T>,
) -> T {
    tokio::time::timeout(limit, future)
        .await
        .unwrap_or_else(|_| panic!("{what} took over {limit:?}"))
}
