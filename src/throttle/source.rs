//! Where a throttle's limits come from, and the keys they count under.

use super::keys::{caller_key, caller_on_path_key, named_key, naming_no_timer, prefixed};
use super::middleware::{DEFAULT_DECAY_SECONDS, DEFAULT_MAX_ATTEMPTS};
use super::one_or_more::OneOrMore;
use crate::container::App;
use crate::http::{HttpResponse, Request};
use crate::limiter::{Limit, LimitResult, NamedLimiters};

/// The limits a [`ThrottleRequestsMiddleware`](super::ThrottleRequestsMiddleware)
/// applies, before they meet a request.
#[derive(Debug, Clone)]
pub(super) enum LimitSource {
    /// 60 a minute per user or address, across routes.
    Default,
    /// `with(...)` and the numeric aliases: per user or address, per path.
    PerPath {
        guest_max: i64,
        user_max: i64,
        decay_seconds: i64,
    },
    /// A named limiter, looked up when a request arrives.
    Named(String),
    /// A fixed list, fallback keys already applied.
    Limits(Vec<Limit>),
}

/// What a request meets.
pub(super) enum Resolved {
    /// Apply these limits, keys final.
    Limits(OneOrMore<Limit>),
    /// Answer with this response: nothing is counted, no header is added.
    Respond(HttpResponse),
    /// Let the request through, uncounted and without headers.
    Pass,
}

impl LimitSource {
    /// The limits for `request`, each key prefixed with `prefix`.
    pub(super) fn resolve(&self, request: &Request, prefix: &str) -> Resolved {
        let mut limits = match self {
            LimitSource::Default => OneOrMore::one(
                Limit::per_second(DEFAULT_MAX_ATTEMPTS, DEFAULT_DECAY_SECONDS)
                    .by(caller_key(request)),
            ),
            LimitSource::PerPath {
                guest_max,
                user_max,
                decay_seconds,
            } => {
                let max = if request.user_id().is_some() {
                    *user_max
                } else {
                    *guest_max
                };
                OneOrMore::one(
                    Limit::per_second(max, *decay_seconds).by(caller_on_path_key(request)),
                )
            }
            LimitSource::Named(name) => match named_limits(name, request) {
                Ok(limits) => limits.into(),
                Err(resolved) => return resolved,
            },
            LimitSource::Limits(limits) => limits.clone().into(),
        };
        if limits.is_empty() {
            return Resolved::Pass;
        }
        for limit in limits.iter_mut() {
            limit.key = naming_no_timer(prefixed(prefix, std::mem::take(&mut limit.key)));
        }
        Resolved::Limits(limits)
    }
}

/// The limits of the named limiter `name`, keyed `<name>:<key>`, or what to
/// answer instead.
fn named_limits(name: &str, request: &Request) -> Result<Vec<Limit>, Resolved> {
    // The registry is lent and the callback called where it is registered
    // (`limits_for` applies the fallback keys to limits that share a key),
    // so a request writes no reference count to reach it.
    let found = App::resolve_with::<NamedLimiters, _>(|limiters| {
        limiters.and_then(|limiters| limiters.limits_for(name, request))
    });
    let Some(result) = found else {
        tracing::error!(
            limiter = name,
            path = request.path(),
            "a route names a rate limiter that is not defined; answering 503"
        );
        return Err(Resolved::Respond(
            HttpResponse::text(format!("Rate limiter [{name}] is not defined.")).status(503),
        ));
    };
    match result {
        LimitResult::Limits(limits) => Ok(limits
            .into_iter()
            .map(|limit| {
                let key = named_key(name, &limit.key);
                limit.by(key)
            })
            .collect()),
        LimitResult::Response(response) => Err(Resolved::Respond(response)),
        LimitResult::Unlimited(_) => Err(Resolved::Pass),
    }
}
