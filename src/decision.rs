//! The value both sides of the crate end in, and the one place that turns it
//! into response headers and a 429.
//!
//! The sliding-window driver and the Laravel-shape throttle decide
//! differently, but each ends with a [`Decision`]: admitted or not, the
//! limit, the places left, when to retry. [`Decision::apply_headers`] writes
//! `X-RateLimit-Limit` and `X-RateLimit-Remaining` on every response, and on
//! a refusal `Retry-After` and `X-RateLimit-Reset` too.

use std::cell::RefCell;
use std::time::Duration;

use bytes::Bytes;
use http::header::{HeaderName, HeaderValue, RETRY_AFTER};

use crate::http::HttpResponse;

/// `X-RateLimit-Limit`.
pub const LIMIT_HEADER: &str = "X-RateLimit-Limit";
/// `X-RateLimit-Remaining`.
pub const REMAINING_HEADER: &str = "X-RateLimit-Remaining";
/// `X-RateLimit-Reset`.
pub const RESET_HEADER: &str = "X-RateLimit-Reset";
/// `Retry-After`.
pub const RETRY_AFTER_HEADER: &str = "Retry-After";

static LIMIT: HeaderName = HeaderName::from_static("x-ratelimit-limit");
static REMAINING: HeaderName = HeaderName::from_static("x-ratelimit-remaining");
static RESET: HeaderName = HeaderName::from_static("x-ratelimit-reset");

/// The outcome of one rate-limit check.
///
/// Being limited is an outcome, not an error: `allowed == false` with a
/// `retry_after`. Errors are for a backend that could not decide.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    /// Whether the request was admitted (and counted).
    pub allowed: bool,
    /// The most requests the bucket admits in its window.
    pub limit: u64,
    /// How many more requests the bucket admits now.
    pub remaining: u64,
    /// When a refused caller may try again; `None` while the bucket has room.
    pub retry_after: Option<Duration>,
    /// When the bucket reopens, in Unix seconds, if the limiter knows.
    pub reset_at: Option<i64>,
}

impl Decision {
    /// An admitted request with `remaining` places left.
    pub fn allowed(limit: u64, remaining: u64) -> Self {
        Self {
            allowed: true,
            limit,
            remaining,
            retry_after: None,
            reset_at: None,
        }
    }

    /// A refused request that may retry after `retry_after`.
    pub fn refused(limit: u64, retry_after: Duration) -> Self {
        Self {
            allowed: false,
            limit,
            remaining: 0,
            retry_after: Some(retry_after),
            reset_at: None,
        }
    }

    /// A refusal under a limit of zero at `now_unix_nanos`: nothing will
    /// ever free a place, so the caller is told to come back after a whole
    /// `window`, the longest any hit could hold a place, and the reset is
    /// the end of that wait, in whole Unix seconds rounded up.
    ///
    /// ```
    /// use std::time::Duration;
    /// use suprnova::decision::Decision;
    ///
    /// let refused = Decision::refused_under_zero(Duration::from_secs(60), 1_000_500_000_000);
    /// assert_eq!(refused.retry_after_secs(), Some(60));
    /// assert_eq!(refused.reset_at, Some(1_061));
    /// ```
    pub fn refused_under_zero(window: Duration, now_unix_nanos: u64) -> Self {
        Self::refused_for_a_window(0, window, now_unix_nanos)
    }

    /// A refusal under `limit` that no bucket's count decided, and that a
    /// whole `window` from `now_unix_nanos` is as good a time to come back
    /// after as any: `Retry-After` the window, `X-RateLimit-Reset` its end.
    pub(crate) fn refused_for_a_window(limit: u64, window: Duration, now_unix_nanos: u64) -> Self {
        let reset = secs_rounded_up(Duration::from_nanos(now_unix_nanos).saturating_add(window));
        Self::refused(limit, window).with_reset_at(i64::try_from(reset).unwrap_or(i64::MAX))
    }

    /// Sets when the bucket reopens, in Unix seconds.
    pub fn with_reset_at(mut self, unix_seconds: i64) -> Self {
        self.reset_at = Some(unix_seconds);
        self
    }

    /// `Retry-After` in whole seconds: rounded up, and at least 1, so that a
    /// client that obeys it never comes back while the bucket is still
    /// closed.
    ///
    /// ```
    /// use std::time::Duration;
    /// use suprnova::decision::Decision;
    ///
    /// assert_eq!(Decision::refused(10, Duration::from_millis(1200)).retry_after_secs(), Some(2));
    /// assert_eq!(Decision::refused(10, Duration::ZERO).retry_after_secs(), Some(1));
    /// assert_eq!(Decision::allowed(10, 3).retry_after_secs(), None);
    /// assert_eq!(Decision::refused(0, Duration::MAX).retry_after_secs(), Some(u64::MAX));
    /// ```
    pub fn retry_after_secs(&self) -> Option<u64> {
        self.retry_after.map(|d| secs_rounded_up(d).max(1))
    }

    /// Writes the headers of this decision on `response`: the limit and the
    /// places left always; `Retry-After` and `X-RateLimit-Reset` (when
    /// known) on a refusal.
    pub fn apply_headers(&self, response: &mut HttpResponse) {
        // Every response of a limited route carries these: names parsed
        // once, values written without `core::fmt`, and the limit, which is
        // the same on every response of a route, shared rather than written.
        let headers = response.headers_mut();
        headers.insert(LIMIT.clone(), limit_value(self.limit));
        headers.insert(REMAINING.clone(), number_value(self.remaining));
        if !self.allowed {
            if let Some(secs) = self.retry_after_secs() {
                headers.insert(RETRY_AFTER, number_value(secs));
            }
            if let Some(reset) = self.reset_at {
                headers.insert(RESET.clone(), HeaderValue::from(reset));
            }
        }
    }

    /// Writes this decision's headers on a response that passed, unless
    /// the response already reports as few retries or fewer: a handler, or
    /// a limit nested inside this one, that knows of a tighter limit keeps
    /// its pair. A reported value that is not a whole number is replaced; a
    /// negative one (a handler's own count run past its limit) is kept.
    ///
    /// ```
    /// use suprnova::HttpResponse;
    /// use suprnova::decision::Decision;
    ///
    /// let mut tighter = HttpResponse::new().header("X-RateLimit-Limit", "5").header("X-RateLimit-Remaining", "1");
    /// Decision::allowed(60, 59).apply_headers_unless_tighter(&mut tighter);
    /// assert_eq!(tighter.header_str("x-ratelimit-limit"), Some("5"));
    ///
    /// let mut looser = HttpResponse::new().header("X-RateLimit-Remaining", "99");
    /// Decision::allowed(60, 59).apply_headers_unless_tighter(&mut looser);
    /// assert_eq!(looser.header_str("x-ratelimit-remaining"), Some("59"));
    /// ```
    pub fn apply_headers_unless_tighter(&self, response: &mut HttpResponse) {
        self.apply_headers_unless_reported(reported_remaining(response), response);
    }

    /// [`apply_headers_unless_tighter`](Self::apply_headers_unless_tighter)
    /// with the response's [`reported_remaining`] already read.
    pub(crate) fn apply_headers_unless_reported(
        &self,
        reported: Option<i128>,
        response: &mut HttpResponse,
    ) {
        if reported.is_none_or(|reported| reported > i128::from(self.remaining)) {
            self.apply_headers(response);
        }
    }

    /// A `429 Too Many Requests` with `body` and this decision's headers.
    pub fn too_many_requests(&self, body: &str) -> HttpResponse {
        let mut response = HttpResponse::text(body).status(429);
        self.apply_headers(&mut response);
        response
    }
}

/// `d` in whole seconds, rounded up.
fn secs_rounded_up(d: Duration) -> u64 {
    d.as_secs().saturating_add(u64::from(d.subsec_nanos() > 0))
}

/// The `X-RateLimit-Remaining` a response already carries, when it is a
/// whole number (negative included).
pub(crate) fn reported_remaining(response: &HttpResponse) -> Option<i128> {
    response
        .headers()
        .get(&REMAINING)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<i128>().ok())
}

/// How many numbers [`STATIC_DIGITS`] holds: the places left, and the
/// limit, of most limits (60 a minute, 1,000 an hour) are below it.
const STATIC_NUMBERS: usize = 10_000;

/// Every number below [`STATIC_NUMBERS`] in four bytes, right-aligned
/// behind spaces: `   0   1 ...9999`, written when the crate is compiled.
static STATIC_DIGITS: [u8; 4 * STATIC_NUMBERS] = padded_numbers();

const fn padded_numbers() -> [u8; 4 * STATIC_NUMBERS] {
    let mut out = [b' '; 4 * STATIC_NUMBERS];
    let mut n = 0;
    while n < STATIC_NUMBERS {
        let mut rest = n;
        let mut at = 4 * n + 3;
        loop {
            out[at] = b'0' + (rest % 10) as u8;
            rest /= 10;
            if rest == 0 {
                break;
            }
            at -= 1;
        }
        n += 1;
    }
    out
}

/// `n` as a header value. Below [`STATIC_NUMBERS`] it points into
/// [`STATIC_DIGITS`]: no allocation to make, and none to free when the
/// response is dropped. Above, one allocation.
fn number_value(n: u64) -> HeaderValue {
    if let Ok(small) = usize::try_from(n)
        && small < STATIC_NUMBERS
    {
        let digits =
            1 + usize::from(small >= 10) + usize::from(small >= 100) + usize::from(small >= 1000);
        let end = 4 * small + 4;
        let text = std::str::from_utf8(&STATIC_DIGITS[end - digits..end]).expect("ASCII digits");
        return HeaderValue::from_static(text);
    }
    let mut buf = [0_u8; 20];
    HeaderValue::from_maybe_shared(Bytes::copy_from_slice(decimal(n, &mut buf)))
        .expect("digits are a header value")
}

/// `n` as a header value, shared with the last call on this thread when it
/// asked for the same number: a route's limit is the same on every
/// response, and a clone of the shared value is a reference count, where a
/// new value is an allocation.
fn limit_value(n: u64) -> HeaderValue {
    thread_local! {
        static LAST: RefCell<Option<(u64, HeaderValue)>> = const { RefCell::new(None) };
    }
    LAST.with_borrow_mut(|last| match last {
        Some((cached, value)) if *cached == n => value.clone(),
        _ => last.insert((n, number_value(n))).1.clone(),
    })
}

/// The decimal digits of `n`, written at the end of `buf`.
fn decimal(mut n: u64, buf: &mut [u8; 20]) -> &[u8] {
    // Twenty digits hold any u64.
    let mut start = buf.len();
    loop {
        start -= 1;
        buf[start] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            return &buf[start..];
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_keep_their_digits() {
        // Every number of the static table, its edges, and past it.
        for n in (0..=10_001).chain([59, 60, 99_999, 1_000_000, u64::MAX]) {
            assert_eq!(number_value(n), n.to_string().as_str(), "{n}");
        }
        // The cached limit follows the number asked for.
        for n in [60, 60, 5, 60, u64::MAX, 0] {
            assert_eq!(limit_value(n), n.to_string().as_str(), "{n}");
        }
    }

    #[test]
    fn refused_headers() {
        let r = Decision::refused(60, Duration::from_secs(50))
            .with_reset_at(946_728_060)
            .too_many_requests("Too Many Attempts.");
        assert_eq!(r.status_code(), 429);
        assert_eq!(r.header_str("x-ratelimit-limit"), Some("60"));
        assert_eq!(r.header_str("x-ratelimit-remaining"), Some("0"));
        assert_eq!(r.header_str("retry-after"), Some("50"));
        assert_eq!(r.header_str("x-ratelimit-reset"), Some("946728060"));
    }

    #[test]
    fn allowed_headers_carry_no_retry() {
        let mut r = HttpResponse::text("ok");
        Decision::allowed(60, 59).apply_headers(&mut r);
        assert_eq!(r.header_str("x-ratelimit-remaining"), Some("59"));
        assert_eq!(r.header_str("retry-after"), None);
        assert_eq!(r.header_str("x-ratelimit-reset"), None);
    }

    #[test]
    fn a_reported_count_is_kept_at_or_below_and_replaced_above() {
        let kept_at = |reported: &str, remaining: u64| {
            let mut r = HttpResponse::text("ok")
                .header("X-RateLimit-Limit", "5")
                .header("X-RateLimit-Remaining", reported);
            Decision::allowed(60, remaining).apply_headers_unless_tighter(&mut r);
            (
                r.header_str("x-ratelimit-limit").map(str::to_owned),
                r.header_str("x-ratelimit-remaining").map(str::to_owned),
            )
        };
        let ours = |remaining: &str| (Some("60".to_owned()), Some(remaining.to_owned()));
        let theirs = |remaining: &str| (Some("5".to_owned()), Some(remaining.to_owned()));
        assert_eq!(kept_at("3", 3), theirs("3"));
        assert_eq!(kept_at(" 2 ", 3), theirs(" 2 "));
        // A handler's own count run past its limit is at or below any count.
        assert_eq!(kept_at("-1", 0), theirs("-1"));
        assert_eq!(kept_at("4", 3), ours("3"));
        // Past u64: above every count, so replaced rather than misread.
        assert_eq!(kept_at("99999999999999999999", 3), ours("3"));
        for garbled in ["soon", "3.5", ""] {
            assert_eq!(kept_at(garbled, 3), ours("3"), "{garbled:?}");
        }
    }
}
