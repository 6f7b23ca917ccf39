//! `LimitResult`: what a named-limiter callback returns.

use super::limit::{GlobalLimit, Limit, Unlimited};
use crate::http::HttpResponse;

/// What a named-limiter callback returns, as Laravel's `RateLimiter::for`
/// callbacks return a `Limit`, an array of them, `Limit::none()` or a
/// response.
///
/// ```
/// use suprnova::{HttpResponse, Limit, LimitResult};
///
/// let one: LimitResult = Limit::per_minute(60).by("ip:203.0.113.5").into();
/// let two: LimitResult = vec![Limit::per_minute(60), Limit::per_day(10_000)].into();
/// let refuse: LimitResult = HttpResponse::text("closed").status(403).into();
/// let bypass: LimitResult = Limit::none().into();
/// assert_eq!(one.limits().len(), 1);
/// assert_eq!(two.limits().len(), 2);
/// assert!(refuse.limits().is_empty() && bypass.limits().is_empty());
/// ```
#[derive(Debug, Clone)]
pub enum LimitResult {
    /// Apply every limit; the first one that is full refuses the request.
    Limits(Vec<Limit>),
    /// Answer with this response at once: nothing is counted and no
    /// rate-limit header is added.
    Response(HttpResponse),
    /// Let the request through, uncounted and without rate-limit headers
    /// ([`Limit::none`]).
    Unlimited(Unlimited),
}

impl LimitResult {
    /// The limits to apply; empty for a response or [`Unlimited`].
    pub fn limits(&self) -> &[Limit] {
        match self {
            LimitResult::Limits(limits) => limits,
            _ => &[],
        }
    }
}

impl From<Limit> for LimitResult {
    fn from(limit: Limit) -> Self {
        LimitResult::Limits(vec![limit])
    }
}

impl From<Vec<Limit>> for LimitResult {
    fn from(limits: Vec<Limit>) -> Self {
        LimitResult::Limits(limits)
    }
}

impl From<GlobalLimit> for LimitResult {
    fn from(limit: GlobalLimit) -> Self {
        LimitResult::Limits(vec![limit.into()])
    }
}

impl From<Unlimited> for LimitResult {
    fn from(unlimited: Unlimited) -> Self {
        LimitResult::Unlimited(unlimited)
    }
}

impl From<HttpResponse> for LimitResult {
    fn from(response: HttpResponse) -> Self {
        LimitResult::Response(response)
    }
}
