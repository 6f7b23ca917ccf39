//! The responses and headers of the throttle, in the shape of Laravel's
//! `ThrottleRequests::getHeaders` and `buildException`.

use std::time::Duration;

use crate::decision::Decision;
use crate::http::{HttpResponse, Request};
use crate::limiter::Limit;

/// The body of the default 429, as Laravel words it.
pub(super) const TOO_MANY_ATTEMPTS: &str = "Too Many Attempts.";

/// The answer to a request that `limit` refused: the limit's
/// [`response`](Limit::response) callback's response, or a 429
/// `Too Many Attempts.`, with `X-RateLimit-Limit`, `X-RateLimit-Remaining:
/// 0`, `Retry-After` and `X-RateLimit-Reset`.
///
/// `available_in` is the facade's whole seconds until the window ends.
/// `Retry-After` is at least 1, where Laravel can send 0 for a window that
/// opened at a fraction of a second and ends within the second: a client
/// that obeys 0 comes back while the window is still closed.
/// `X-RateLimit-Reset` is `now + Retry-After`, so the two agree.
///
/// A callback's response keeps its own status, body and headers; of the
/// four headers, only those it did not set are added. (Laravel adds none
/// and hands them to the callback instead; ours receives only the request.)
pub(super) fn refusal(
    limit: &Limit,
    available_in: i64,
    now_unix: i64,
    request: &Request,
) -> HttpResponse {
    let wait = Duration::from_secs(available_in.max(0).unsigned_abs());
    let mut decision = Decision::refused(count_header(limit.max_attempts), wait);
    let retry_after = decision.retry_after_secs().unwrap_or(1);
    decision = decision
        .with_reset_at(now_unix.saturating_add(i64::try_from(retry_after).unwrap_or(i64::MAX)));
    let Some(mut custom) = limit.custom_response(request) else {
        return decision.too_many_requests(TOO_MANY_ATTEMPTS);
    };
    let mut ours = HttpResponse::new();
    decision.apply_headers(&mut ours);
    for (name, value) in ours.headers() {
        if !custom.headers().contains_key(name) {
            custom.headers_mut().insert(name.clone(), value.clone());
        }
    }
    custom
}

/// The `(max_attempts, remaining)` pair the response reports: the one of
/// the limit with the fewest retries left, the earlier limit on a tie.
/// `counts` holds each limit's count, in the order of `limits`.
pub(super) fn tightest(limits: &[Limit], counts: &[i64]) -> Option<(i64, i64)> {
    let mut best: Option<(i64, i64)> = None;
    for (limit, &count) in limits.iter().zip(counts) {
        let remaining = limit.max_attempts.saturating_sub(count).max(0);
        if best.is_none_or(|(_, fewest)| remaining < fewest) {
            best = Some((limit.max_attempts, remaining));
        }
    }
    best
}

/// Sets `X-RateLimit-Limit` and `X-RateLimit-Remaining`, unless the
/// response already reports (`reported`, its
/// [`reported_remaining`](crate::decision::reported_remaining)) `remaining`
/// or fewer retries (see [`Decision::apply_headers_unless_tighter`]).
pub(super) fn report(
    response: &mut HttpResponse,
    reported: Option<i128>,
    max_attempts: i64,
    remaining: i64,
) {
    Decision::allowed(count_header(max_attempts), count_header(remaining))
        .apply_headers_unless_reported(reported, response);
}

/// A count as a header number: never below 0.
fn count_header(n: i64) -> u64 {
    n.max(0).unsigned_abs()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decision::reported_remaining;

    fn request() -> Request {
        Request::new(http::Request::get("/").body(String::new()).unwrap())
    }

    #[test]
    fn the_default_refusal_carries_the_four_headers() {
        let r = refusal(&Limit::per_minute(60), 50, 1_000, &request());
        assert_eq!(r.status_code(), 429);
        assert_eq!(r.body_text(), TOO_MANY_ATTEMPTS);
        assert_eq!(r.header_str("x-ratelimit-limit"), Some("60"));
        assert_eq!(r.header_str("x-ratelimit-remaining"), Some("0"));
        assert_eq!(r.header_str("retry-after"), Some("50"));
        assert_eq!(r.header_str("x-ratelimit-reset"), Some("1050"));
    }

    #[test]
    fn retry_after_is_at_least_one_second() {
        let r = refusal(&Limit::per_minute(60), 0, 1_000, &request());
        assert_eq!(r.header_str("retry-after"), Some("1"));
        assert_eq!(r.header_str("x-ratelimit-reset"), Some("1001"));
    }

    #[test]
    fn a_callback_keeps_the_headers_it_set() {
        let limit = Limit::per_minute(5).response(|_req| {
            HttpResponse::text("slow down")
                .status(503)
                .header("Retry-After", "120")
        });
        let r = refusal(&limit, 30, 1_000, &request());
        assert_eq!((r.status_code(), r.body_text()), (503, "slow down".into()));
        assert_eq!(r.header_str("retry-after"), Some("120"));
        assert_eq!(r.header_str("x-ratelimit-limit"), Some("5"));
        assert_eq!(r.header_str("x-ratelimit-remaining"), Some("0"));
        assert_eq!(r.header_str("x-ratelimit-reset"), Some("1030"));
    }

    #[test]
    fn the_fewest_retries_win_and_ties_keep_the_earlier() {
        let limits = [
            Limit::per_minute(5),
            Limit::per_second(3, 1),
            Limit::per_minute(4),
        ];
        assert_eq!(tightest(&limits, &[1, 1, 0]), Some((3, 2)));
        assert_eq!(tightest(&limits, &[2, 0, 1]), Some((5, 3)));
        assert_eq!(tightest(&limits, &[9, 9, 9]), Some((5, 0)));
        assert_eq!(tightest(&[], &[]), None);
    }

    #[test]
    fn a_lower_reported_count_is_kept_a_higher_one_replaced() {
        let mut kept = HttpResponse::new()
            .header("X-RateLimit-Limit", "10")
            .header("X-RateLimit-Remaining", "3");
        let reported = reported_remaining(&kept);
        report(&mut kept, reported, 60, 3);
        assert_eq!(kept.header_str("x-ratelimit-limit"), Some("10"));
        assert_eq!(kept.header_str("x-ratelimit-remaining"), Some("3"));

        let mut replaced = HttpResponse::new()
            .header("X-RateLimit-Limit", "100")
            .header("X-RateLimit-Remaining", "80");
        let reported = reported_remaining(&replaced);
        report(&mut replaced, reported, 60, 59);
        assert_eq!(replaced.header_str("x-ratelimit-limit"), Some("60"));
        assert_eq!(replaced.header_str("x-ratelimit-remaining"), Some("59"));

        let mut garbled = HttpResponse::new().header("X-RateLimit-Remaining", "soon");
        let reported = reported_remaining(&garbled);
        report(&mut garbled, reported, 60, 59);
        assert_eq!(garbled.header_str("x-ratelimit-remaining"), Some("59"));
    }
}
