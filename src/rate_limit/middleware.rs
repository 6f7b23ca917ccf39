//! `RateLimitMiddleware`: the HTTP side of the sliding-window driver.

use std::fmt;
use std::sync::Arc;

use async_trait::async_trait;
use futures_util::future::join_all;

use super::identity::with_named_buckets;
use super::{
    BackendErrorPolicy, ConnectionsPerIp, RateLimitError, RateLimiterDriver, SlidingWindowConfig,
};
use crate::clock::{Clock, SystemClock};
use crate::container::App;
use crate::decision::{Decision, RETRY_AFTER_HEADER};
use crate::http::HttpResponse;
use crate::middleware::{Middleware, Next};
use crate::{Request, Response};

/// The body of a request refused for being over quota.
pub const TOO_MANY_REQUESTS_BODY: &str = "429 Too Many Requests";

type KeyFn = dyn Fn(&Request) -> String + Send + Sync;
type Predicate = dyn Fn(&Request) -> bool + Send + Sync;

/// Where the middleware gets its driver.
#[derive(Clone)]
pub(super) enum LimiterSource {
    /// The driver given to [`RateLimitMiddleware::new`].
    Given(Arc<dyn RateLimiterDriver>),
    /// The driver installed in [`App::current`] when a request arrives.
    Installed,
}

/// Limits requests with a [`RateLimiterDriver`]: at most
/// `cfg.max_requests` in any span of `cfg.window` for each key the key
/// function returns.
///
/// Every request makes one call to [`RateLimiterDriver::acquire`] (one round
/// trip on Redis; a request with several buckets, an ambiguous
/// [`identity_key`](super::identity_key)'s, one for each, at once), and
/// every header comes from that one [`Decision`]:
///
/// - Over quota: `429` with the body `429 Too Many Requests`, `Retry-After`
///   in whole seconds (rounded up, at least 1), `X-RateLimit-Limit` and
///   `X-RateLimit-Remaining: 0`. The handler does not run. This holds
///   whatever the backend-error policy.
/// - Admitted: the handler's response, `Ok` or `Err`, with
///   `X-RateLimit-Limit` and `X-RateLimit-Remaining`. When a response already
///   carries an `X-RateLimit-Remaining` at or below this limit's (an inner
///   limit with fewer retries left), it is left alone, so behind several
///   limits the pair is the one with the fewest retries left.
/// - The backend failed (Redis unreachable or too slow, no driver installed):
///   the [`BackendErrorPolicy`] decides. [`FailOpen`](BackendErrorPolicy::FailOpen)
///   (the default) runs the handler and logs at `warn`;
///   [`FailClosed`](BackendErrorPolicy::FailClosed) answers `503` with
///   `Retry-After: 1` and logs at `error`.
/// - The limit is invalid ([`RateLimitError::Config`], a zero window): that
///   is a bug in the code that built the middleware, not an outage, so no
///   policy applies: the answer is `500` and an `error` log line.
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use suprnova::container::App;
/// use suprnova::rate_limit::{
///     BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig,
/// };
///
/// # fn build() -> RateLimitMiddleware {
/// let limiter: Arc<dyn RateLimiterDriver> =
///     App::resolve_make::<dyn RateLimiterDriver>().unwrap();
///
/// let mw = RateLimitMiddleware::new(
///     limiter,
///     SlidingWindowConfig {
///         max_requests: 100,
///         window: Duration::from_secs(60),
///     },
///     |req| format!("route:{}", req.matched_route().unwrap_or_default()),
/// )
/// .on_backend_error(BackendErrorPolicy::FailClosed);
/// # mw
/// # }
/// ```
///
/// # Keys
///
/// The key function picks the bucket. Key on [`Request::ip`] (which only a
/// trusted proxy can change), never on a raw `X-Forwarded-For` header: a
/// caller that writes its own header would pick a fresh bucket for every
/// request. [`RateLimitMiddleware::ip_based`] builds the per-address key for
/// you, and [`identity_key`](super::identity_key) keys on the account a
/// request acts on.
///
/// One key, one limit: a bucket is trimmed to the window of each call on
/// it, so two limits whose key functions return the same key (10 a second
/// and 30 a minute, say) do not add up; the shorter window drops hits the
/// longer one still counts. Put the limit's numbers, or a name, in each
/// key.
///
/// # Per recipient, stacked on per address
///
/// A per-address limit cannot see many hosts flooding one mailbox; a
/// per-recipient one cannot see one host walking through many mailboxes.
/// Stack the two:
///
/// ```
/// use std::sync::Arc;
/// use std::time::Duration;
/// use suprnova::rate_limit::{
///     identity_key, names_identity, BackendErrorPolicy, RateLimitMiddleware, RateLimiterDriver,
///     SlidingWindowConfig,
/// };
/// use suprnova::{HttpResponse, Router};
///
/// fn password_reset(limiter: Arc<dyn RateLimiterDriver>) -> Router {
///     let per_recipient = RateLimitMiddleware::new(
///         limiter.clone(),
///         SlidingWindowConfig { max_requests: 3, window: Duration::from_secs(900) },
///         |req| identity_key(req, "email", "auth-issuance"),
///     )
///     .key_reads_body(4096)
///     .only_when(|req| names_identity(req, "email"))
///     .on_backend_error(BackendErrorPolicy::FailClosed);
///
///     Router::new()
///         .post("/password/reset", |_req| async { HttpResponse::text("sent") })
///         .middleware(RateLimitMiddleware::ip_based(20, Duration::from_secs(60)))
///         .middleware(per_recipient)
/// }
/// ```
#[derive(Clone)]
pub struct RateLimitMiddleware {
    pub(super) limiter: LimiterSource,
    pub(super) config: SlidingWindowConfig,
    pub(super) key_fn: Arc<KeyFn>,
    policy: BackendErrorPolicy,
    only_when: Option<Arc<Predicate>>,
    body_cap: Option<usize>,
}

impl RateLimitMiddleware {
    /// Limits each key that `key_fn` returns to `cfg` on `limiter`.
    pub fn new(
        limiter: Arc<dyn RateLimiterDriver>,
        cfg: SlidingWindowConfig,
        key_fn: impl Fn(&Request) -> String + Send + Sync + 'static,
    ) -> Self {
        Self::with_source(LimiterSource::Given(limiter), cfg, key_fn)
    }

    pub(super) fn with_source(
        limiter: LimiterSource,
        config: SlidingWindowConfig,
        key_fn: impl Fn(&Request) -> String + Send + Sync + 'static,
    ) -> Self {
        Self {
            limiter,
            config,
            key_fn: Arc::new(key_fn),
            policy: BackendErrorPolicy::default(),
            only_when: None,
            body_cap: None,
        }
    }

    /// What a request gets when the backend cannot decide; see
    /// [`BackendErrorPolicy`]. The default is
    /// [`FailOpen`](BackendErrorPolicy::FailOpen).
    pub fn on_backend_error(mut self, policy: BackendErrorPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// Limits only the requests for which `predicate` is true. The others
    /// skip the limiter entirely: nothing is counted and no header is added.
    ///
    /// It runs after [`key_reads_body`](Self::key_reads_body) has buffered
    /// the body, so it can look into the body too.
    pub fn only_when(
        mut self,
        predicate: impl Fn(&Request) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.only_when = Some(Arc::new(predicate));
        self
    }

    /// Buffers the body, up to `max_bytes`, before the key is computed, so
    /// the key function (and [`only_when`](Self::only_when)) can read a
    /// form-encoded or JSON body through [`Request::buffered_body`].
    ///
    /// A body over the cap, by its `Content-Length` or by what arrives, gets
    /// `413` and the handler does not run: passing it through unkeyed would
    /// make padding the body a way out of the limit. The handler still
    /// receives the exact bytes. Buffering is work any caller can make the
    /// server do, which is why it is opt-in and capped.
    pub fn key_reads_body(mut self, max_bytes: usize) -> Self {
        self.body_cap = Some(max_bytes);
        self
    }

    /// A cap of `max` open connections for each client address; see
    /// [`ConnectionsPerIp`].
    ///
    /// ```
    /// use suprnova::rate_limit::RateLimitMiddleware;
    /// use suprnova::ws;
    /// # use suprnova::{async_trait, ws::{WebSocket, WebSocketHandler}};
    /// # struct Broadcast;
    /// # #[async_trait]
    /// # impl WebSocketHandler for Broadcast {
    /// #     async fn on_socket(&self, _socket: WebSocket) {}
    /// # }
    ///
    /// ws!("/ws/broadcast", Broadcast).middleware(RateLimitMiddleware::connections_per_ip(100));
    /// ```
    pub fn connections_per_ip(max: u32) -> ConnectionsPerIp {
        ConnectionsPerIp::new(max)
    }

    /// The limit each key gets.
    pub fn config(&self) -> &SlidingWindowConfig {
        &self.config
    }

    /// The backend-error policy.
    pub fn backend_error_policy(&self) -> BackendErrorPolicy {
        self.policy
    }

    /// Every bucket the request is counted in: the key function's key, and
    /// the other buckets of each identity an ambiguous request names
    /// (usually none, and then nothing is allocated for them). `None` when
    /// the request names more identities than
    /// [`identity_key`](super::identity_key) admits: it is refused and
    /// counted nowhere.
    fn keys_for(&self, request: &Request) -> Option<(String, Vec<String>)> {
        let (key, named) = with_named_buckets(|| (self.key_fn)(request));
        if named.too_many {
            return None;
        }
        let mut others: Vec<String> = Vec::new();
        for extra in named.buckets {
            if extra != key && !others.contains(&extra) {
                others.push(extra);
            }
        }
        Some((key, others))
    }

    /// One decision for `key` and `others`: each bucket is asked (and
    /// counts the request if it admits it); the request passes only if all
    /// admit.
    async fn decide(&self, key: &str, others: &[String]) -> Result<Decision, RateLimitError> {
        let config = &self.config;
        // The common case is one bucket: one call, nothing to combine; and in
        // memory, no future either, and the driver is only borrowed. An
        // installed driver is lent by the container for that call, so no
        // request writes its reference count (which every core's requests
        // would write); one that must wait (Redis) is cloned out to be held
        // across the wait.
        let installed;
        let limiter = match &self.limiter {
            LimiterSource::Given(limiter) => {
                if let Some(outcome) = decided_now(&**limiter, key, others, config) {
                    return outcome;
                }
                limiter
            }
            LimiterSource::Installed => {
                let lent = App::resolve_with::<dyn RateLimiterDriver, _>(|limiter| {
                    let limiter = limiter?;
                    Some(match decided_now(&**limiter, key, others, config) {
                        Some(outcome) => Lent::Decided(outcome),
                        None => Lent::MustWait(limiter.clone()),
                    })
                });
                match lent.ok_or(RateLimitError::NotInstalled)? {
                    Lent::Decided(outcome) => return outcome,
                    Lent::MustWait(limiter) => {
                        installed = limiter;
                        &installed
                    }
                }
            }
        };
        if others.is_empty() {
            return limiter.acquire(key, config).await;
        }
        let keys = std::iter::once(key).chain(others.iter().map(String::as_str));
        let outcomes = join_all(keys.map(|key| limiter.acquire(key, config))).await;
        let mut decisions = Vec::with_capacity(outcomes.len());
        let mut backend_error = None;
        for outcome in outcomes {
            match outcome {
                Ok(decision) => decisions.push(decision),
                Err(error @ RateLimitError::Config(_)) => return Err(error),
                Err(error) => backend_error = backend_error.or(Some(error)),
            }
        }
        // A bucket that refused decides the request whatever became of the
        // others: over quota is 429 under every backend-error policy.
        match backend_error {
            Some(error) if decisions.iter().all(|d| d.allowed) => Err(error),
            _ => Ok(combine(decisions)),
        }
    }

    /// The driver's check of this middleware's limit
    /// ([`RateLimiterDriver::check_config`]); the limit's own rules when no
    /// driver is installed.
    fn check_config(&self) -> Result<(), RateLimitError> {
        match &self.limiter {
            LimiterSource::Given(limiter) => limiter.check_config(&self.config),
            LimiterSource::Installed => {
                App::resolve_with::<dyn RateLimiterDriver, _>(|limiter| match limiter {
                    Some(limiter) => limiter.check_config(&self.config),
                    None => self.config.validate(),
                })
            }
        }
    }

    /// The driver's time where it keeps its own (the memory driver's
    /// clock), else the system's: for a refusal no bucket was asked about.
    fn now_unix_nanos(&self) -> u64 {
        let driver_time = match &self.limiter {
            LimiterSource::Given(limiter) => limiter.unix_nanos_now(),
            LimiterSource::Installed => {
                App::resolve_with::<dyn RateLimiterDriver, _>(|limiter| limiter?.unix_nanos_now())
            }
        };
        driver_time.unwrap_or_else(|| SystemClock.unix_nanos())
    }

    fn backend_failed(&self, error: &RateLimitError, request: &Request) -> Option<HttpResponse> {
        let path = request.path();
        if !error.is_backend() {
            tracing::error!(%error, path, "invalid rate limit; answering 500");
            return Some(HttpResponse::internal_server_error());
        }
        match self.policy {
            BackendErrorPolicy::FailOpen => {
                tracing::warn!(%error, path, "rate limiter failed; letting the request through (FailOpen)");
                None
            }
            BackendErrorPolicy::FailClosed => {
                tracing::error!(%error, path, "rate limiter failed; answering 503 (FailClosed)");
                Some(
                    HttpResponse::text("503 Service Unavailable")
                        .status(503)
                        .header(RETRY_AFTER_HEADER, "1"),
                )
            }
        }
    }
}

/// The decision of a request with one bucket, when `limiter` gives it
/// without waiting (memory); `None` when it must wait (Redis) or the request
/// has several buckets.
fn decided_now(
    limiter: &dyn RateLimiterDriver,
    key: &str,
    others: &[String],
    config: &SlidingWindowConfig,
) -> Option<Result<Decision, RateLimitError>> {
    if others.is_empty() {
        limiter.acquire_without_waiting(key, config)
    } else {
        None
    }
}

/// What the installed driver gave while the container lent it.
enum Lent {
    /// It decided without waiting.
    Decided(Result<Decision, RateLimitError>),
    /// It must wait (or the request has several buckets): the driver,
    /// cloned out to be held across the wait.
    MustWait(Arc<dyn RateLimiterDriver>),
}

/// The one decision of several buckets: a refusal if any refuses (the one
/// that reopens last, since the request needs them all), else the admission
/// with the fewest places left.
fn combine(decisions: Vec<Decision>) -> Decision {
    let refused = decisions
        .iter()
        .filter(|d| !d.allowed)
        .max_by_key(|d| d.retry_after);
    if let Some(refused) = refused {
        return *refused;
    }
    decisions
        .into_iter()
        .min_by_key(|d| d.remaining)
        .unwrap_or_else(|| Decision::allowed(0, 0))
}

#[async_trait]
impl Middleware for RateLimitMiddleware {
    async fn handle(&self, mut request: Request, next: Next) -> Response {
        if let Some(cap) = self.body_cap
            && let Err(error) = request.body_bytes(cap).await
        {
            return Err(error.to_response());
        }
        if let Some(only_when) = &self.only_when
            && !only_when(&request)
        {
            return next(request).await;
        }
        let Some((key, others)) = self.keys_for(&request) else {
            // No backend is asked, so an invalid limit (for the backend
            // too) must be caught here to answer as it does for every other
            // request.
            if let Err(error) = self.check_config()
                && let Some(answer) = self.backend_failed(&error, &request)
            {
                return Err(answer);
            }
            // It will never be admitted: the whole window is as good a time
            // to come back as any.
            let refused = Decision::refused_for_a_window(
                self.config.max_requests.into(),
                self.config.window,
                self.now_unix_nanos(),
            );
            return Err(refused.too_many_requests(TOO_MANY_REQUESTS_BODY));
        };
        match self.decide(&key, &others).await {
            Ok(decision) if !decision.allowed => {
                Err(decision.too_many_requests(TOO_MANY_REQUESTS_BODY))
            }
            Ok(decision) => {
                let mut outcome = next(request).await;
                let (Ok(response) | Err(response)) = &mut outcome;
                decision.apply_headers_unless_tighter(response);
                outcome
            }
            Err(error) => match self.backend_failed(&error, &request) {
                Some(refusal) => Err(refusal),
                None => next(request).await,
            },
        }
    }
}

impl fmt::Debug for RateLimitMiddleware {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let limiter = match &self.limiter {
            LimiterSource::Given(limiter) => limiter.name(),
            LimiterSource::Installed => "installed",
        };
        f.debug_struct("RateLimitMiddleware")
            .field("limiter", &limiter)
            .field("config", &self.config)
            .field("policy", &self.policy)
            .field("only_when", &self.only_when.is_some())
            .field("key_reads_body", &self.body_cap)
            .finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn several_buckets_refuse_with_the_latest_reopening() {
        let d = combine(vec![
            Decision::allowed(3, 2),
            Decision::refused(3, Duration::from_secs(5)),
            Decision::refused(3, Duration::from_secs(9)),
        ]);
        assert!(!d.allowed);
        assert_eq!(d.retry_after_secs(), Some(9));
        let d = combine(vec![Decision::allowed(3, 2), Decision::allowed(3, 0)]);
        assert!(d.allowed);
        assert_eq!(d.remaining, 0);
    }

    #[test]
    fn a_refusal_no_bucket_was_asked_about_reads_the_drivers_clock() {
        use crate::clock::FakeClock;
        use crate::rate_limit::memory::InMemoryRateLimiter;

        let clock = FakeClock::at_unix(1_000_000);
        let memory: Arc<dyn RateLimiterDriver> =
            Arc::new(InMemoryRateLimiter::with_clock(clock.shared()));
        let config = SlidingWindowConfig::new(5, Duration::from_secs(60));
        let given = RateLimitMiddleware::new(memory.clone(), config, |_| String::new());
        assert_eq!(given.now_unix_nanos(), 1_000_000_000_000_000);

        let installed =
            RateLimitMiddleware::with_source(LimiterSource::Installed, config, |_| String::new());
        let app = App::new();
        app.install::<dyn RateLimiterDriver>(memory);
        let entered = app.enter();
        clock.advance(Duration::from_secs(7));
        assert_eq!(installed.now_unix_nanos(), 1_000_007_000_000_000);
        drop(entered);
        // No driver installed: the system clock, decades past the fake one.
        let empty = App::new();
        let _current = empty.enter();
        assert!(installed.now_unix_nanos() > 1_700_000_000_000_000_000);
    }
}
