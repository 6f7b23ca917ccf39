//! `Limit`, `GlobalLimit` and `Unlimited`: what a named limiter returns.

use std::fmt;
use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

use crate::http::{HttpResponse, Request};

/// Builds the response of a request that a [`Limit`] refused.
pub type ResponseCallback = Arc<dyn Fn(&Request) -> HttpResponse + Send + Sync>;

/// Decides from the response whether a request counts against a [`Limit`].
pub type AfterCallback = Arc<dyn Fn(&HttpResponse) -> bool + Send + Sync>;

/// A rate limit: at most `max_attempts` in a window of `decay_seconds`,
/// counted under `key`. The shape of Laravel's
/// `Illuminate\Cache\RateLimiting\Limit`.
///
/// The constructors read as Laravel's `Limit::per*`:
///
/// ```
/// use std::time::Duration;
/// use suprnova::{HttpResponse, Limit};
///
/// assert_eq!(Limit::per_second(10, 1).decay_seconds, 1);
/// assert_eq!(Limit::per_minute(60).decay_seconds, 60);
/// let l = Limit::per_minutes(5, 100); // decay first, as in Laravel
/// assert_eq!((l.max_attempts, l.decay_seconds), (100, 300));
/// assert_eq!(Limit::per_hours(6, 5_000).decay_seconds, 21_600);
/// assert_eq!(Limit::per_days(7, 50_000).decay_seconds, 604_800);
/// assert_eq!(Limit::new(123, Duration::from_secs(45)).decay_seconds, 45);
///
/// let l = Limit::per_minute(5)
///     .by("user:42")
///     .response(|_req| HttpResponse::text("blocked").status(429))
///     .after(|response| response.status_code() >= 400);
/// assert_eq!(l.key, "user:42");
/// assert_eq!(l.fallback_key(), "user:42:attempts:5:decay:60");
/// ```
///
/// Numbers are `i64`, as Laravel's integers; the constructors saturate
/// instead of overflowing.
#[derive(Clone)]
pub struct Limit {
    /// The bucket key. Empty means one bucket for every caller.
    pub key: String,
    /// The most attempts the window admits.
    pub max_attempts: i64,
    /// The length of the window, in seconds.
    pub decay_seconds: i64,
    /// Builds the response when the limit refuses a request; `None` gives
    /// the default 429 `Too Many Attempts.`.
    pub response_callback: Option<ResponseCallback>,
    /// When set, a request counts only if this returns `true` for its
    /// response.
    pub after_callback: Option<AfterCallback>,
}

impl Limit {
    /// `max_attempts` per `decay`, counted in whole seconds (Laravel keeps
    /// integer seconds) rounded up, so that the limit is never looser than
    /// asked (half a second is one, where a window of no time would never
    /// limit), with an empty key.
    pub fn new(max_attempts: i64, decay: Duration) -> Self {
        let seconds = decay
            .as_secs()
            .saturating_add(u64::from(decay.subsec_nanos() > 0));
        Self::with_decay(max_attempts, i64::try_from(seconds).unwrap_or(i64::MAX))
    }

    fn with_decay(max_attempts: i64, decay_seconds: i64) -> Self {
        Self {
            key: String::new(),
            max_attempts,
            decay_seconds,
            response_callback: None,
            after_callback: None,
        }
    }

    /// `max_attempts` per `decay_seconds` seconds (Laravel's
    /// `perSecond($max, $decaySeconds)`).
    pub fn per_second(max_attempts: i64, decay_seconds: i64) -> Self {
        Self::with_decay(max_attempts, decay_seconds)
    }

    /// `max_attempts` per minute.
    pub fn per_minute(max_attempts: i64) -> Self {
        Self::with_decay(max_attempts, 60)
    }

    /// `max_attempts` per `decay_minutes` minutes. The window comes first,
    /// as in Laravel's `perMinutes($decayMinutes, $maxAttempts)`.
    pub fn per_minutes(decay_minutes: i64, max_attempts: i64) -> Self {
        Self::with_decay(max_attempts, decay_minutes.saturating_mul(60))
    }

    /// `max_attempts` per hour.
    pub fn per_hour(max_attempts: i64) -> Self {
        Self::with_decay(max_attempts, 3_600)
    }

    /// `max_attempts` per `hours` hours. The window comes first, as in
    /// [`Limit::per_minutes`].
    pub fn per_hours(hours: i64, max_attempts: i64) -> Self {
        Self::with_decay(max_attempts, hours.saturating_mul(3_600))
    }

    /// `max_attempts` per day.
    pub fn per_day(max_attempts: i64) -> Self {
        Self::with_decay(max_attempts, 86_400)
    }

    /// `max_attempts` per `days` days. The window comes first, as in
    /// [`Limit::per_minutes`].
    pub fn per_days(days: i64, max_attempts: i64) -> Self {
        Self::with_decay(max_attempts, days.saturating_mul(86_400))
    }

    /// No limit: Laravel's `Limit::none()`. A named limiter that returns it
    /// lets the request through uncounted.
    pub fn none() -> Unlimited {
        Unlimited::new()
    }

    /// Sets the bucket key. An empty key is one bucket for every caller.
    pub fn by(mut self, key: impl Into<String>) -> Self {
        self.key = key.into();
        self
    }

    /// Sets the response a refused request gets, instead of the default 429
    /// `Too Many Attempts.`.
    pub fn response(
        mut self,
        callback: impl Fn(&Request) -> HttpResponse + Send + Sync + 'static,
    ) -> Self {
        self.response_callback = Some(Arc::new(callback));
        self
    }

    /// Counts a request only when `callback` returns `true` for its
    /// response, for example only failed logins:
    /// `.after(|r| r.status_code() >= 400)`. The response of a handler that
    /// panicked, or answered with a `1xx` that is no WebSocket upgrade, is
    /// the `500` the client gets.
    pub fn after(
        mut self,
        callback: impl Fn(&HttpResponse) -> bool + Send + Sync + 'static,
    ) -> Self {
        self.after_callback = Some(Arc::new(callback));
        self
    }

    /// The key this limit counts under when another limit of the same
    /// named-limiter result has the same key:
    /// `<key>:attempts:<max>:decay:<seconds>`.
    ///
    /// As in Laravel, where the key is tested for PHP truthiness, an empty
    /// key and the key `"0"` give no `<key>:` part.
    ///
    /// ```
    /// use suprnova::Limit;
    ///
    /// assert_eq!(Limit::per_second(3, 1).fallback_key(), "attempts:3:decay:1");
    /// assert_eq!(Limit::per_minute(5).by("u1").fallback_key(), "u1:attempts:5:decay:60");
    /// assert_eq!(Limit::per_second(3, 1).by("0").fallback_key(), "attempts:3:decay:1");
    /// ```
    pub fn fallback_key(&self) -> String {
        let prefix = if self.key.is_empty() || self.key == "0" {
            String::new()
        } else {
            format!("{}:", self.key)
        };
        format!(
            "{prefix}attempts:{}:decay:{}",
            self.max_attempts, self.decay_seconds
        )
    }

    /// Whether the limit counts every request (it has no
    /// [`after`](Limit::after) callback).
    pub fn counts_before_response(&self) -> bool {
        self.after_callback.is_none()
    }

    /// Whether `response` counts against the limit: always without an
    /// [`after`](Limit::after) callback, else what the callback says.
    pub fn counts(&self, response: &HttpResponse) -> bool {
        self.after_callback
            .as_ref()
            .is_none_or(|after| after(response))
    }

    /// The response of the [`response`](Limit::response) callback for a
    /// refused `request`; `None` when the limit has none.
    pub fn custom_response(&self, request: &Request) -> Option<HttpResponse> {
        self.response_callback
            .as_ref()
            .map(|respond| respond(request))
    }

    /// Whether the limit never refuses: `max_attempts` is `i64::MAX`.
    pub fn is_unlimited(&self) -> bool {
        self.max_attempts == i64::MAX
    }
}

impl fmt::Debug for Limit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Limit")
            .field("key", &self.key)
            .field("max_attempts", &self.max_attempts)
            .field("decay_seconds", &self.decay_seconds)
            .field("response_callback", &self.response_callback.is_some())
            .field("after_callback", &self.after_callback.is_some())
            .finish()
    }
}

/// A limit with an empty key: one bucket for every caller. Laravel's
/// `GlobalLimit`.
///
/// ```
/// use suprnova::{GlobalLimit, Limit};
///
/// let global = GlobalLimit::new(1_000, 60);
/// assert_eq!(global.key, "");
/// let limit: Limit = global.into();
/// assert_eq!(limit.max_attempts, 1_000);
/// ```
#[derive(Clone, Debug)]
pub struct GlobalLimit(Limit);

impl GlobalLimit {
    /// `max_attempts` per `decay_seconds`, for every caller together.
    pub fn new(max_attempts: i64, decay_seconds: i64) -> Self {
        Self(Limit::per_second(max_attempts, decay_seconds))
    }

    /// See [`Limit::response`].
    pub fn response(
        self,
        callback: impl Fn(&Request) -> HttpResponse + Send + Sync + 'static,
    ) -> Self {
        Self(self.0.response(callback))
    }

    /// See [`Limit::after`].
    pub fn after(self, callback: impl Fn(&HttpResponse) -> bool + Send + Sync + 'static) -> Self {
        Self(self.0.after(callback))
    }

    /// The limit.
    pub fn into_limit(self) -> Limit {
        self.0
    }
}

impl Deref for GlobalLimit {
    type Target = Limit;

    fn deref(&self) -> &Limit {
        &self.0
    }
}

impl From<GlobalLimit> for Limit {
    fn from(global: GlobalLimit) -> Self {
        global.0
    }
}

/// No limit: a [`GlobalLimit`] of `i64::MAX` attempts a minute, which
/// [`Limit::none`] returns. A named limiter that returns it lets the request
/// through, uncounted and without rate-limit headers, as in Laravel.
///
/// ```
/// use suprnova::{Limit, LimitResult};
///
/// let result: LimitResult = Limit::none().into();
/// assert!(matches!(result, LimitResult::Unlimited(_)));
/// assert_eq!(Limit::none().max_attempts, i64::MAX);
/// ```
#[derive(Clone, Debug)]
pub struct Unlimited(GlobalLimit);

impl Unlimited {
    /// The unlimited limit.
    pub fn new() -> Self {
        Self(GlobalLimit::new(i64::MAX, 60))
    }
}

impl Default for Unlimited {
    fn default() -> Self {
        Self::new()
    }
}

impl Deref for Unlimited {
    type Target = Limit;

    fn deref(&self) -> &Limit {
        &self.0
    }
}

impl From<Unlimited> for Limit {
    /// The limit itself, for a list of limits; inside a list it is counted
    /// like any other limit (and never refuses), as in Laravel.
    fn from(unlimited: Unlimited) -> Self {
        unlimited.0.into_limit()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn laravel_limit_test_values() {
        assert_eq!(Limit::per_second(3, 1).decay_seconds, 1);
        assert_eq!(Limit::per_second(3, 5).decay_seconds, 5);
        assert_eq!(Limit::per_minute(3).decay_seconds, 60);
        let l = Limit::per_minutes(2, 3);
        assert_eq!((l.max_attempts, l.decay_seconds), (3, 120));
        assert_eq!(Limit::per_hour(3).decay_seconds, 3_600);
        assert_eq!(Limit::per_hours(2, 3).decay_seconds, 7_200);
        assert_eq!(Limit::per_day(3).decay_seconds, 86_400);
        assert_eq!(Limit::per_days(5, 3).decay_seconds, 432_000);
        assert_eq!(GlobalLimit::new(3, 60).decay_seconds, 60);
        // Rounded up: never looser than asked.
        assert_eq!(
            Limit::new(1, Duration::from_millis(45_900)).decay_seconds,
            46
        );
        assert_eq!(Limit::new(1, Duration::from_millis(500)).decay_seconds, 1);
        assert_eq!(Limit::new(1, Duration::from_secs(45)).decay_seconds, 45);
        assert_eq!(Limit::per_days(i64::MAX, 1).decay_seconds, i64::MAX);
    }

    #[test]
    fn callbacks_decide_counting_and_responses() {
        let req = Request::new(http::Request::get("/").body(String::new()).unwrap());
        let plain = Limit::per_minute(1);
        assert!(plain.counts_before_response());
        assert!(plain.counts(&HttpResponse::new()));
        assert!(plain.custom_response(&req).is_none());

        let failed_only = Limit::per_minute(1)
            .after(|r| r.status_code() >= 400)
            .response(|r| HttpResponse::text(format!("slow down on {}", r.path())).status(429));
        assert!(!failed_only.counts_before_response());
        assert!(!failed_only.counts(&HttpResponse::new()));
        assert!(failed_only.counts(&HttpResponse::new().status(404)));
        let custom = failed_only.custom_response(&req).unwrap();
        assert_eq!(
            (custom.status_code(), custom.body_text()),
            (429, "slow down on /".to_owned())
        );

        let copy = failed_only.clone();
        assert!(copy.counts(&HttpResponse::new().status(500)));
        let debug = format!("{copy:?}");
        assert!(debug.contains("after_callback: true"), "{debug}");
    }

    #[test]
    fn unlimited_is_a_global_limit_of_i64_max() {
        let none: Limit = Limit::none().into();
        assert!(none.is_unlimited());
        assert_eq!((none.key.as_str(), none.decay_seconds), ("", 60));
    }
}
