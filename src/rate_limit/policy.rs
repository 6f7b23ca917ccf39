//! What a request gets when the limiter's backend cannot decide.

/// What the middleware does when the limiter backend errors (Redis
/// unreachable, a timeout, no limiter installed), as distinct from a request
/// that is over its quota. Over-quota is always 429, whatever the policy.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum BackendErrorPolicy {
    /// Let the request through, and log the error at `warn`. Availability
    /// over the limit's guarantee. The default.
    #[default]
    FailOpen,
    /// Answer `503 Service Unavailable` with `Retry-After: 1`, and log the
    /// error at `error`. The limit's guarantee over availability: use it for
    /// limits that protect money or people (logins, password resets, SMS).
    FailClosed,
}
