//! The named limiters an application registers at boot, kept in the
//! container.

use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use super::limit::Limit;
use super::limit_result::LimitResult;
use crate::container::App;
use crate::copy_on_write::CopyOnWrite;
use crate::http::Request;

/// A named-limiter callback, as [`RateLimiter::limiter`](crate::RateLimiter::limiter)
/// returns it.
pub type NamedLimiter = Arc<dyn Fn(&Request) -> LimitResult + Send + Sync>;

/// The named limiters of one container: name to callback.
///
/// [`RateLimiter::define`](crate::RateLimiter::define) registers in the
/// registry of [`App::current`] (installing an empty one on first use), so
/// tests that run in their own [`App::scope`] see only their own limiters.
///
/// ```
/// use suprnova::limiter::NamedLimiters;
/// use suprnova::{Limit, Request};
///
/// let limiters = NamedLimiters::new();
/// limiters.define("api", |_req| {
///     vec![Limit::per_minute(60).by("a"), Limit::per_day(1_000).by("a")].into()
/// });
/// let req = Request::new(http::Request::get("/").body(String::new()).unwrap());
/// let result = limiters.limiter("api").unwrap()(&req);
/// let keys: Vec<&str> = result.limits().iter().map(|l| l.key.as_str()).collect();
/// assert_eq!(keys, ["a:attempts:60:decay:60", "a:attempts:1000:decay:86400"]);
/// assert!(limiters.limiter("missing").is_none());
/// ```
#[derive(Default)]
pub struct NamedLimiters {
    /// Replaced whole on each definition (definitions are made at boot)
    /// and read without a lock, as the container is.
    limiters: CopyOnWrite<Registry>,
}

/// Names are the application's own, never a caller's: foldhash hashes them
/// in a few instructions.
type Registry = HashMap<String, NamedLimiter, foldhash::fast::RandomState>;

impl NamedLimiters {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    /// The registry of [`App::current`], installed there on first use.
    pub fn current() -> Arc<NamedLimiters> {
        App::current().get_or_install(|| Arc::new(NamedLimiters::new()))
    }

    /// Registers `callback` under `name`, replacing an earlier one.
    pub fn define(
        &self,
        name: impl Into<String>,
        callback: impl Fn(&Request) -> LimitResult + Send + Sync + 'static,
    ) {
        let callback: NamedLimiter = Arc::new(callback);
        self.limiters.change(|registry| {
            registry.insert(name.into(), callback);
        });
    }

    /// The callback registered under `name`, wrapped as Laravel wraps it:
    /// when its result holds several limits and two or more share a key,
    /// each of those limits counts under its
    /// [`fallback_key`](Limit::fallback_key). `None` when nothing is
    /// registered under `name`.
    pub fn limiter(&self, name: &str) -> Option<NamedLimiter> {
        let registered = self.limiters.load().get(name).cloned()?;
        Some(Arc::new(move |request: &Request| {
            with_fallback_keys(registered(request))
        }))
    }

    /// What the limiter registered under `name` gives `request`, with the
    /// fallback keys applied as [`limiter`](Self::limiter) applies them;
    /// `None` when nothing is registered under `name`. The callback is
    /// called where it is registered, so a request that uses a named limiter
    /// writes no reference count and allocates nothing to reach it.
    ///
    /// ```
    /// use suprnova::limiter::{Limit, LimitResult, NamedLimiters};
    /// use suprnova::Request;
    ///
    /// let limiters = NamedLimiters::new();
    /// limiters.define("api", |_req| LimitResult::from(Limit::per_minute(60).by("a")));
    /// let req = Request::new(http::Request::get("/").body(String::new()).unwrap());
    /// let result = limiters.limits_for("api", &req).unwrap();
    /// assert_eq!(result.limits()[0].max_attempts, 60);
    /// assert!(limiters.limits_for("missing", &req).is_none());
    /// ```
    pub fn limits_for(&self, name: &str, request: &Request) -> Option<LimitResult> {
        let registered = self.limiters.load();
        Some(with_fallback_keys(registered.get(name)?(request)))
    }

    /// The registered names, sorted.
    pub fn names(&self) -> Vec<String> {
        let mut names: Vec<String> = self.limiters.load().keys().cloned().collect();
        names.sort_unstable();
        names
    }
}

/// `result` with the fallback keys applied to limits that share a key.
fn with_fallback_keys(result: LimitResult) -> LimitResult {
    match result {
        LimitResult::Limits(mut limits) => {
            apply_fallback_keys(&mut limits);
            LimitResult::Limits(limits)
        }
        other => other,
    }
}

impl fmt::Debug for NamedLimiters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NamedLimiters")
            .field("names", &self.names())
            .finish()
    }
}

/// Gives every limit whose key another limit of `limits` shares its
/// [`fallback_key`](Limit::fallback_key), so that limits with one key and
/// different windows count in separate buckets. Every member of a group of
/// equal keys is renamed, the first included, as Laravel does. Keys are
/// compared as written (`café` and `cafe` differ here, though they clean to
/// one bucket).
///
/// ```
/// use suprnova::Limit;
/// use suprnova::limiter::apply_fallback_keys;
///
/// let mut limits = vec![
///     Limit::per_second(3, 1).by("u1"),
///     Limit::per_minute(5).by("u1"),
///     Limit::per_hour(100).by("other"),
/// ];
/// apply_fallback_keys(&mut limits);
/// let keys: Vec<&str> = limits.iter().map(|l| l.key.as_str()).collect();
/// assert_eq!(keys, ["u1:attempts:3:decay:1", "u1:attempts:5:decay:60", "other"]);
/// ```
pub fn apply_fallback_keys(limits: &mut [Limit]) {
    // A single limit, what most named limiters return, shares its key with
    // none: nothing to look at, on every request.
    if limits.len() < 2 {
        return;
    }
    let shared = shared_keys(limits);
    for (limit, shared) in limits.iter_mut().zip(shared) {
        if shared {
            limit.key = limit.fallback_key();
        }
    }
}

/// Whether each limit's key is another limit's too: pair by pair for the
/// few limits a named limiter returns (cheaper than hashing each key), by
/// a count of each key for more.
fn shared_keys(limits: &[Limit]) -> Vec<bool> {
    const PAIRWISE_UP_TO: usize = 16;
    if limits.len() <= PAIRWISE_UP_TO {
        return limits
            .iter()
            .enumerate()
            .map(|(i, a)| {
                limits
                    .iter()
                    .enumerate()
                    .any(|(j, b)| i != j && a.key == b.key)
            })
            .collect();
    }
    let mut seen: HashMap<&str, usize> = HashMap::new();
    for limit in limits {
        *seen.entry(limit.key.as_str()).or_default() += 1;
    }
    limits.iter().map(|l| seen[l.key.as_str()] > 1).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> Request {
        Request::new(http::Request::get("/").body(String::new()).unwrap())
    }

    fn keys(result: &LimitResult) -> Vec<&str> {
        result.limits().iter().map(|l| l.key.as_str()).collect()
    }

    #[test]
    fn limits_for_gives_what_the_wrapped_limiter_gives() {
        let limiters = NamedLimiters::new();
        limiters.define("api", |_req| {
            vec![
                Limit::per_minute(60).by("a"),
                Limit::per_day(1_000).by("a"),
                Limit::per_minute(5).by("b"),
            ]
            .into()
        });
        let req = request();
        let lent = limiters.limits_for("api", &req).unwrap();
        let wrapped = limiters.limiter("api").unwrap()(&req);
        assert_eq!(
            keys(&lent),
            ["a:attempts:60:decay:60", "a:attempts:1000:decay:86400", "b"]
        );
        assert_eq!(keys(&lent), keys(&wrapped));
    }

    #[test]
    fn fallback_keys_for_every_shared_key_in_short_and_long_lists() {
        // 3 limits compare pair by pair, 40 through a count of each key:
        // the same rule either way. Every third key appears twice.
        for count in [1, 2, 3, 16, 17, 40] {
            let mut limits: Vec<Limit> = (0..count)
                .map(|i| {
                    let key = if i % 3 == 1 { i - 1 } else { i };
                    Limit::per_second(i64::from(i + 1), 60).by(format!("k{key}"))
                })
                .collect();
            apply_fallback_keys(&mut limits);
            for (i, limit) in (0..count).zip(&limits) {
                let shared = i % 3 == 1 || (i % 3 == 0 && i + 1 < count);
                let expected = if shared {
                    let key = if i % 3 == 1 { i - 1 } else { i };
                    format!("k{key}:attempts:{}:decay:60", i + 1)
                } else {
                    format!("k{i}")
                };
                assert_eq!(limit.key, expected, "{count} limits, limit {i}");
            }
        }
    }

    #[test]
    fn a_later_definition_replaces_and_keeps_the_others() {
        let limiters = NamedLimiters::new();
        limiters.define("a", |_req| Limit::per_minute(1).by("x").into());
        limiters.define("b", |_req| Limit::per_minute(2).by("x").into());
        limiters.define("a", |_req| Limit::per_minute(3).by("x").into());
        let req = request();
        let max = |name| limiters.limits_for(name, &req).unwrap().limits()[0].max_attempts;
        assert_eq!((max("a"), max("b")), (3, 2));
        assert_eq!(limiters.names(), ["a", "b"]);
    }
}
