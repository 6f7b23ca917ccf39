//! `ThrottleRequestsMiddleware`: Laravel's `ThrottleRequests` over the
//! cache-backed [`RateLimiter`].

use std::borrow::Cow;
use std::sync::{Arc, OnceLock};

use super::counting::{Admission, admit, count_after, read_again, share_bucket_counts};
use super::headers::{report, tightest};
use super::source::{LimitSource, Resolved};
use crate::container::App;
use crate::decision::{RETRY_AFTER_HEADER, reported_remaining};
use crate::http::{HttpResponse, Request, Response};
use crate::limiter::{CacheRateLimiter, Limit, RateLimiter, apply_fallback_keys, watching_writes};
use crate::middleware::{Middleware, Next};
use crate::rate_limit::BackendErrorPolicy;

/// The requests [`ThrottleRequestsMiddleware::default()`] admits in a
/// window: 60.
pub const DEFAULT_MAX_ATTEMPTS: i64 = 60;
/// The window of [`ThrottleRequestsMiddleware::default()`], in seconds: 60.
pub const DEFAULT_DECAY_SECONDS: i64 = 60;

/// Laravel's `ThrottleRequests` middleware: fixed-window limits counted in
/// the cache through the [`RateLimiter`] facade, with Laravel's keys,
/// headers and refusals.
///
/// # Constructors and keys
///
/// | constructor | limit | key |
/// | --- | --- | --- |
/// | [`default()`](Self::default) | 60 a minute | `user:<id>` for a signed-in user, else `ip:<address>`, shared by every route |
/// | [`with(max, decay_minutes, prefix)`](Self::with) (`throttle:60,1`) | `max` per `decay_minutes` | `user:<id>:path:<path>` or `ip:<address>:path:<path>` |
/// | [`by_name(name)`](Self::by_name) (`throttle:api`) | what the named limiter returns | `<name>:<limit key>` |
/// | [`with_limits(limits)`](Self::with_limits) | every limit | each limit's key |
///
/// Limits of one list (or of one named limiter's result) that share a key
/// count under their [fallback keys](Limit::fallback_key),
/// `<key>:attempts:<max>:decay:<seconds>`, so a per-second and a
/// per-minute limit on one address keep two counters.
///
/// [`prefix(p)`](Self::prefix) puts `p:` before every key, so that a group
/// of routes counts apart from the same limit elsewhere (Laravel
/// concatenates the prefix with no separator); it does not join the routes
/// of [`with`](Self::with), each of which counts in its own bucket. The user is [`Request::user_id`]: run the middleware that
/// signs the user in before this one. The address is [`Request::ip`], so
/// the trusted proxies apply, an IPv6 address counted with its /64
/// ([`bucket_address`](crate::keys::bucket_address)); the path is the
/// request path as the router matches it ([`Request::route_path`]), so each
/// spelling of a path (`/login/`, `//login`) counts in its bucket, and each
/// value of a route's parameters (`/items/1`, `/items/2`) in a bucket of
/// its own: for one budget across a route's values, key a named limiter
/// on [`Request::matched_route`]. A request with no address (one made in
/// process, with no peer) gets a bucket of its own. The facade cleans every
/// key once, as Laravel's does.
///
/// # The request path
///
/// Every limit is checked before any is counted, and a refused request
/// leaves every count where it was: after `throttle:2,1` refuses a third
/// request the count is still 2. Each bucket is then counted with one
/// atomic [`increment_if_below`](RateLimiter::increment_if_below), the
/// fullest first, so a concurrent burst admits at most the limit; a request
/// that loses that race to a full bucket is refused and leaves that count
/// alone. Counts are never taken back. A limit with an
/// [`after`](Limit::after) callback is checked before the handler and
/// counted after it, only when the callback accepts the response.
///
/// A named limiter that returns an [`HttpResponse`] answers with it;
/// [`Limit::none()`] lets the request through uncounted; both without
/// rate-limit headers. A named limiter that is not defined answers `503`
/// with the body `Rate limiter [<name>] is not defined.`.
///
/// # Headers
///
/// Every response (a handler's `Err` response included) carries
/// `X-RateLimit-Limit` and `X-RateLimit-Remaining` of the limit with the
/// fewest retries left. A response that already reports as many retries
/// or fewer in `X-RateLimit-Remaining` keeps its own pair. Limits that
/// count in one bucket report it after all their counts: two keys that
/// clean to one bucket, and a throttle stacked around another on the same
/// bucket (it reads its buckets again when an inner limit has reported),
/// as Laravel reads every bucket after the response; so are the counts of
/// a handler that counted or cleared through [`RateLimiter`] on its own
/// task (the buckets are read again after it), and the bucket of an
/// [`after`](Limit::after) limit whose callback turns the response down
/// (read again after the response, with the requests counted in it while
/// the handler ran). A refusal is a
/// `429 Too Many Attempts.` with `X-RateLimit-Limit`,
/// `X-RateLimit-Remaining: 0`, `Retry-After` (whole seconds until the
/// second the window's timer holds, at least 1, as Laravel counts them: up
/// to a second before the window's count ends) and `X-RateLimit-Reset`
/// (now plus `Retry-After`, in Unix seconds, as Laravel sets it: the
/// timer's second, or the second after it in the window's last second).
/// A [`Limit::response`] callback's response replaces the 429 and gets
/// those of the four headers it did not set itself.
///
/// # When the cache fails
///
/// A store that fails or times out before the handler runs gets the
/// [`BackendErrorPolicy`]: [`FailOpen`](BackendErrorPolicy::FailOpen) (the
/// default) lets the request through without rate-limit headers,
/// [`FailClosed`](BackendErrorPolicy::FailClosed) answers `503` with
/// `Retry-After: 1`. A failure after the handler ran (counting or reading
/// for an `after` limit) is logged, and the response goes out without
/// rate-limit headers.
///
/// # Example
///
/// ```
/// use std::sync::Arc;
/// use suprnova::cache::MemoryStore;
/// use suprnova::clock::FakeClock;
/// use suprnova::container::App;
/// use suprnova::limiter::CacheRateLimiter;
/// use suprnova::server::handle_request_with_peer;
/// use suprnova::{HttpResponse, RateLimiter, Router, ThrottleRequestsMiddleware};
///
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let clock = FakeClock::at_unix(1_767_268_800);
/// let store = Arc::new(MemoryStore::with_clock(clock.shared()));
/// let app = App::new();
/// app.install(Arc::new(CacheRateLimiter::new(store, clock.shared())));
/// app.scope(async {
///     let router = Router::new()
///         .post("/login", |_req| async { HttpResponse::text("welcome") })
///         .middleware(ThrottleRequestsMiddleware::with(2, 1, ""));
///     let peer = "203.0.113.5:4000".parse().unwrap();
///     let login = || http::Request::post("/login").body(String::new()).unwrap();
///
///     let first = handle_request_with_peer(&router, login(), peer).await;
///     assert_eq!(first.header_str("x-ratelimit-remaining"), Some("1"));
///     handle_request_with_peer(&router, login(), peer).await;
///     let third = handle_request_with_peer(&router, login(), peer).await;
///     assert_eq!(third.status_code(), 429);
///     assert_eq!(third.body_text(), "Too Many Attempts.");
///     assert_eq!(third.header_str("retry-after"), Some("60"));
///     // The refusal was not counted.
///     assert_eq!(RateLimiter::attempts("ip:203.0.113.5:path:/login").await.unwrap(), 2);
/// })
/// .await;
/// # });
/// ```
#[derive(Debug, Clone)]
pub struct ThrottleRequestsMiddleware {
    source: LimitSource,
    prefix: String,
    policy: BackendErrorPolicy,
    /// The first limiter this throttle counted with, kept so that the
    /// requests of the container it came from borrow it for the length of
    /// the request, where a clone would write a reference count that every
    /// request on every core writes.
    kept_limiter: OnceLock<Arc<CacheRateLimiter>>,
}

impl Default for ThrottleRequestsMiddleware {
    /// 60 requests a minute, for each signed-in user (`user:<id>`) or else
    /// each client address (`ip:<address>`), one bucket across routes: the
    /// shape of Laravel's default `api` limiter,
    /// `Limit::perMinute(60)->by($request->user()?->id ?: $request->ip())`:
    /// a user signed in with an empty id counts by address, as `?:` makes
    /// it. Unlike PHP's `?:`, an id `0` is a user's (`user:0`): ids are
    /// text here, and `0` is one.
    fn default() -> Self {
        Self::from_source(LimitSource::Default)
    }
}

impl ThrottleRequestsMiddleware {
    /// See the module constant [`DEFAULT_MAX_ATTEMPTS`].
    pub const DEFAULT_MAX_ATTEMPTS: i64 = DEFAULT_MAX_ATTEMPTS;
    /// See the module constant [`DEFAULT_DECAY_SECONDS`].
    pub const DEFAULT_DECAY_SECONDS: i64 = DEFAULT_DECAY_SECONDS;

    fn from_source(source: LimitSource) -> Self {
        Self {
            source,
            prefix: String::new(),
            policy: BackendErrorPolicy::default(),
            kept_limiter: OnceLock::new(),
        }
    }

    /// The limits of the named limiter `name`
    /// ([`RateLimiter::define`]), looked up when each request arrives, so
    /// the limiter may be defined after the routes. Each limit counts under
    /// `<name>:<limit key>`.
    pub fn by_name(name: impl Into<String>) -> Self {
        Self::from_source(LimitSource::Named(name.into()))
    }

    /// `max_attempts` per `decay_minutes` minutes, for each signed-in user
    /// or each address, on each path (`user:<id>:path:<path>`,
    /// `ip:<address>:path:<path>`), with the key prefix `prefix` (empty for
    /// none): Laravel's `throttle:60,1,prefix`.
    ///
    /// A maximum below 1 refuses every request; a window below 1 minute
    /// opens none, as in Laravel: it stores no count of its own, and counts
    /// and limits only in a window another limit opened on its key.
    pub fn with(max_attempts: i64, decay_minutes: i64, prefix: impl Into<String>) -> Self {
        Self::with_guest_and_user(max_attempts, max_attempts, decay_minutes, prefix)
    }

    /// [`with`](Self::with), with one maximum for guests and another for
    /// signed-in users (`throttle:10|60,1`).
    pub(super) fn with_guest_and_user(
        guest_max: i64,
        user_max: i64,
        decay_minutes: i64,
        prefix: impl Into<String>,
    ) -> Self {
        Self::from_source(LimitSource::PerPath {
            guest_max,
            user_max,
            decay_seconds: decay_minutes.saturating_mul(60),
        })
        .prefix(prefix)
    }

    /// Every limit of `limits`, the first full one refusing. Limits that
    /// share a key count under their [fallback keys](Limit::fallback_key).
    pub fn with_limits(limits: Vec<Limit>) -> Self {
        let mut limits = limits;
        apply_fallback_keys(&mut limits);
        Self::from_source(LimitSource::Limits(limits))
    }

    /// Puts `prefix:` before every key; an empty prefix puts nothing.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// What a request gets when the cache store fails; see the
    /// [type docs](Self#when-the-cache-fails).
    pub fn on_backend_error(mut self, policy: BackendErrorPolicy) -> Self {
        self.policy = policy;
        self
    }

    /// The backend-error policy.
    pub fn backend_error_policy(&self) -> BackendErrorPolicy {
        self.policy
    }

    /// The limiter of the current container: the kept one, borrowed, when
    /// it is the one installed there; else the installed one, cloned (and
    /// kept, when none is yet).
    fn limiter(&self) -> Cow<'_, Arc<CacheRateLimiter>> {
        if let Some(kept) = self.kept_limiter.get()
            && App::resolve_with::<CacheRateLimiter, _>(|installed| {
                installed.is_some_and(|installed| Arc::ptr_eq(installed, kept))
            })
        {
            return Cow::Borrowed(kept);
        }
        let installed = RateLimiter::instance();
        let _ = self.kept_limiter.set(installed.clone());
        Cow::Owned(installed)
    }

    async fn backend_failed(
        &self,
        error: crate::cache::CacheError,
        request: Request,
        next: Next,
    ) -> Response {
        let path = request.path().to_owned();
        match self.policy {
            BackendErrorPolicy::FailOpen => {
                tracing::warn!(%error, path, "throttle cache failed; letting the request through (FailOpen)");
                next(request).await
            }
            BackendErrorPolicy::FailClosed => {
                tracing::error!(%error, path, "throttle cache failed; answering 503 (FailClosed)");
                Err(HttpResponse::text("503 Service Unavailable")
                    .status(503)
                    .header(RETRY_AFTER_HEADER, "1"))
            }
        }
    }
}

#[async_trait::async_trait]
impl Middleware for ThrottleRequestsMiddleware {
    async fn handle(&self, request: Request, next: Next) -> Response {
        let limits = match self.source.resolve(&request, &self.prefix) {
            Resolved::Limits(limits) => limits,
            Resolved::Respond(response) => return Err(response),
            Resolved::Pass => return next(request).await,
        };
        // Resolved per request, so that the limiter installed in the
        // container the server runs in is the one that counts.
        let limiter = self.limiter();
        let mut counts = match admit(&limiter, &limits, &request).await {
            Ok(Admission::Admitted(counts)) => counts,
            Ok(Admission::Refused(refusal)) => return Err(refusal),
            Err(error) => return self.backend_failed(error, request, next).await,
        };
        // A handler that counts or clears through the rate limiter (a
        // request that costs more, a login that clears its attempts) may
        // have changed these buckets: they are read again then.
        let (mut response, handler_wrote) = watching_writes(next(request)).await;
        let (Ok(reply) | Err(reply)) = &mut response;
        let reported = reported_remaining(reply);
        // Every bucket is read again below when the handler wrote or an
        // inner limit reported; else only the `after` limits that did not
        // count are, which `count_after` reads with its counts.
        let read_all = handler_wrote || reported.is_some();
        if let Err(error) = count_after(&limiter, &limits, &mut counts, reply, !read_all).await {
            tracing::warn!(%error, "throttle cache failed after the handler ran; no rate-limit headers");
            return response;
        }
        share_bucket_counts(&limits, &mut counts);
        if read_all && let Err(error) = read_again(&limiter, &limits, &mut counts).await {
            tracing::warn!(%error, "throttle cache failed after the handler ran; headers from the counts before it");
        }
        if let Some((max_attempts, remaining)) = tightest(&limits, &counts) {
            report(reply, reported, max_attempts, remaining);
        }
        response
    }
}
