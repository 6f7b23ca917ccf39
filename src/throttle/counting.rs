//! The request path of the throttle: check, count, and count again after
//! the response.

use std::borrow::Cow;

use futures_util::future::{join, join_all, try_join_all};

use super::headers::refusal;
use super::one_or_more::OneOrMore;
use crate::cache::CacheError;
use crate::http::{HttpResponse, Request};
use crate::limiter::{CacheRateLimiter, Limit, cleaned, seconds_until};

/// What the limits said before the handler ran.
pub(super) enum Admission {
    /// Go on. Each limit's count, in the order of the limits: the count
    /// this request's increment returned, or, for a limit that counts after
    /// the response, the count read before the handler (which
    /// [`count_after`] replaces after it).
    Admitted(OneOrMore<i64>),
    /// Answer with this refusal.
    Refused(HttpResponse),
}

/// Checks and counts `request` against `limits`, before the handler runs.
///
/// 1. With several limits, or a limit that counts after the response,
///    every limit is checked first (the reads run concurrently, so a
///    multiplexed Redis connection sends them in one round trip). The first
///    full one, in list order, refuses the request, and nothing is counted:
///    the rule of Laravel's `tooManyAttempts`.
/// 2. Each limit without an [`after`](Limit::after) callback is counted by
///    one atomic [`increment_if_below`](CacheRateLimiter::increment_if_below),
///    the one with the fewest places left first (ties keep list order).
///    One that refuses (the request lost a race to a full bucket) refuses
///    the request and leaves its own count alone. Counts made before it
///    stay: a decrement could land in the next window and let it admit one
///    request too many.
///
/// With a single limit the check is the increment itself: it refuses
/// without counting, so a separate read would only cost a round trip.
///
/// A limit whose count cannot be read does not stop the check of the
/// others: a request over another limit's quota is refused (429 under every
/// backend-error policy); when none refuses, the error is returned and
/// nothing is counted.
pub(super) async fn admit(
    limiter: &CacheRateLimiter,
    limits: &[Limit],
    request: &Request,
) -> Result<Admission, CacheError> {
    if let [limit] = limits
        && limit.counts_before_response()
    {
        // One limit: nothing to check first and nothing to order.
        return Ok(match count(limiter, limits, &[0], request).await? {
            Ok(count) => Admission::Admitted(OneOrMore::one(count)),
            Err(refused) => Admission::Refused(refused),
        });
    }
    let mut counts = vec![0; limits.len()];
    let check_first = limits.len() > 1 || limits.iter().any(|l| !l.counts_before_response());
    if check_first {
        // The first store error, returned only when no limit refuses.
        let mut failed = None;
        let found = join_all(limits.iter().map(|l| limiter.attempts(&l.key))).await;
        for (i, (limit, found)) in limits.iter().zip(found).enumerate() {
            if limit.max_attempts < 1 {
                // Counted before or after its response, it admits nothing.
                return Ok(Admission::Refused(admits_nothing(limiter, limit, request)));
            }
            match found {
                Ok(found) if found < limit.max_attempts => counts[i] = found,
                Ok(_) => match refusal_if_full(limiter, limit, request).await {
                    Ok(Some(refused)) => return Ok(Admission::Refused(refused)),
                    // The count outlived its window and was reset: 0 it is.
                    Ok(None) => {}
                    Err(error) => failed = failed.or(Some(error)),
                },
                Err(error) => failed = failed.or(Some(error)),
            }
        }
        // No limit refused; one could not be read, so none is counted.
        if let Some(error) = failed {
            return Err(error);
        }
    }
    let mut order: Vec<usize> = (0..limits.len())
        .filter(|&i| limits[i].counts_before_response())
        .collect();
    // A stable sort: ties keep list order.
    order.sort_by_key(|&i| limits[i].max_attempts.saturating_sub(counts[i]));
    for group in by_bucket(limits, order) {
        match count(limiter, limits, &group, request).await? {
            Ok(count) => group.iter().for_each(|&i| counts[i] = count),
            Err(refused) => return Ok(Admission::Refused(refused)),
        }
    }
    Ok(Admission::Admitted(counts.into()))
}

/// A bucket a limit counts in: its cleaned key, and its window in seconds.
type Bucket<'a> = (Cow<'a, str>, i64);

/// `order`'s limits gathered by the bucket their keys clean to and their
/// window, each group where its first limit stands in `order`, and in list
/// order within it. A bucket that several limits of one window count in is
/// counted once for all of them: the request passed each one's check, and
/// Laravel hits the key once for each, so the count adds one for each
/// limit while the bucket is below the smallest of their maximums.
/// Counted one limit at a time, the request's own first count would refuse
/// it at its second (two limits of 3 in one bucket would admit one request
/// a minute, where Laravel admits two). Limits of one bucket with other
/// windows (keys that clean alike) count apart, each in its own window, as
/// Laravel's hits do.
fn by_bucket(limits: &[Limit], order: Vec<usize>) -> Vec<Vec<usize>> {
    if order.len() < 2 {
        return order.into_iter().map(|i| vec![i]).collect();
    }
    let mut groups: Vec<(Bucket<'_>, Vec<usize>)> = Vec::with_capacity(order.len());
    for i in order {
        let bucket = (cleaned(&limits[i].key), limits[i].decay_seconds);
        match groups.iter_mut().find(|(other, _)| *other == bucket) {
            Some((_, group)) => group.push(i),
            None => groups.push((bucket, vec![i])),
        }
    }
    groups
        .into_iter()
        .map(|(_, mut group)| {
            group.sort_unstable();
            group
        })
        .collect()
}

/// Counts the request against each limit with an [`after`](Limit::after)
/// callback that accepts `response`, and records the counts left in the
/// store (0 for a window of no time that keeps no count, as Laravel's
/// `retriesLeft` reads it). With `read_uncounted`, each `after` limit whose
/// callback turns the response down is read again, as Laravel's
/// `retriesLeft` reads it after the response: requests counted in its
/// bucket while the handler ran count in what it reports. (The caller
/// passes `false` when it reads every bucket again anyway.) The increments
/// and reads run concurrently. A bucket that filled up meanwhile is not
/// pushed past its maximum; the response is already made. A throttle with
/// no `after` limit asks the store nothing here.
pub(super) async fn count_after(
    limiter: &CacheRateLimiter,
    limits: &[Limit],
    counts: &mut [i64],
    response: &HttpResponse,
    read_uncounted: bool,
) -> Result<(), CacheError> {
    // Each `after` limit to ask the store about, and whether it counts.
    let after: Vec<(usize, bool)> = (0..limits.len())
        .filter(|&i| !limits[i].counts_before_response())
        .map(|i| (i, limits[i].counts(response)))
        .filter(|&(_, counted)| counted || read_uncounted)
        .collect();
    if after.is_empty() {
        return Ok(());
    }
    let found = try_join_all(after.iter().map(|&(i, counted)| {
        let limit = &limits[i];
        async move {
            if !counted {
                return limiter.attempts(&limit.key).await;
            }
            // Counted as a request is before its response: the count left
            // in the store, which a window of no time keeps none of.
            let (outcome, _) = limiter
                .take_or_window_end(&limit.key, limit.decay_seconds, 1, limit.max_attempts)
                .await?;
            Ok(outcome.count)
        }
    }))
    .await?;
    for ((i, _), count) in after.into_iter().zip(found) {
        counts[i] = count;
    }
    Ok(())
}

/// Gives every limit whose key cleans to the same bucket as another's the
/// bucket's latest count: the highest its limits saw, since the request's
/// increments in one bucket come one after the other. Laravel reads each
/// bucket after the request has counted in all of them, so two limits
/// that count in one bucket (`café` and `cafe`) both report it after both
/// counts.
pub(super) fn share_bucket_counts(limits: &[Limit], counts: &mut [i64]) {
    if limits.len() < 2 {
        return;
    }
    let buckets: Vec<Cow<'_, str>> = limits.iter().map(|limit| cleaned(&limit.key)).collect();
    let latest: Vec<i64> = buckets
        .iter()
        .map(|bucket| {
            buckets
                .iter()
                .zip(counts.iter())
                .filter(|(other, _)| *other == bucket)
                .map(|(_, &count)| count)
                .max()
                .unwrap_or(0)
        })
        .collect();
    counts.copy_from_slice(&latest);
}

/// Reads every limit's bucket again, after the handler wrote through the
/// rate limiter (counted more, or cleared a bucket) or a limit nested
/// inside this throttle reported its own headers (it may have counted in
/// one of these buckets after this throttle did: two throttles on one
/// route without a prefix share a bucket). Each count becomes the bucket's
/// as found, as Laravel's headers read every bucket after the response.
pub(super) async fn read_again(
    limiter: &CacheRateLimiter,
    limits: &[Limit],
    counts: &mut [i64],
) -> Result<(), CacheError> {
    let found = try_join_all(limits.iter().map(|limit| limiter.attempts(&limit.key))).await?;
    counts.copy_from_slice(&found);
    Ok(())
}

/// Counts one request against the limits `group` of `limits` names, which
/// count in one bucket and one window (in list order; most often one
/// limit): one place for each, while the bucket holds fewer than the
/// smallest of their maximums. `Ok(count)` when it counted, else the
/// refusal of the limit with the smallest maximum.
async fn count(
    limiter: &CacheRateLimiter,
    limits: &[Limit],
    group: &[usize],
    request: &Request,
) -> Result<Result<i64, HttpResponse>, CacheError> {
    let limit = group
        .iter()
        .map(|&i| &limits[i])
        .min_by_key(|limit| limit.max_attempts)
        .expect("a group holds a limit");
    if limit.max_attempts < 1 {
        return Ok(Err(admits_nothing(limiter, limit, request)));
    }
    let places = i64::try_from(group.len()).unwrap_or(i64::MAX);
    let (key, decay, max) = (&limit.key, limit.decay_seconds, limit.max_attempts);
    let (outcome, window_end) = limiter.take_or_window_end(key, decay, places, max).await?;
    if outcome.counted {
        return Ok(Ok(outcome.count));
    }
    if let Some(ends_at) = window_end {
        // Full, with its window open (Laravel's tooManyAttempts), read in
        // the count's own step: the refusal needs nothing more.
        let now = limiter.clock().unix_seconds();
        return Ok(Err(refusal(
            limit,
            seconds_until(ends_at, now),
            now,
            request,
        )));
    }
    // No window end came with the count (a timer that holds no integer):
    // Laravel's tooManyAttempts tells; a count whose timer is gone is reset
    // by the count below, in its own step.
    if let Some(refused) = refusal_if_full(limiter, limit, request).await? {
        return Ok(Err(refused));
    }
    let ceiling = max.saturating_add(places - 1);
    let outcome = limiter
        .increment_if_below(key, decay, places, ceiling)
        .await?;
    if outcome.counted {
        return Ok(Ok(outcome.count));
    }
    // Filled meanwhile by concurrent requests: refused until its window
    // ends, the wait and the reset told from one reading of the clock.
    let ends_at = limiter.window_ends_at(key).await?;
    let now = limiter.clock().unix_seconds();
    let available_in = ends_at.map_or(0, |ends_at| seconds_until(ends_at, now));
    Ok(Err(refusal(limit, available_in, now, request)))
}

/// The refusal of a limit that admits nothing (a maximum below 1): every
/// request, asked to wait a whole window, since no window's end frees a
/// place. Nothing is read or counted.
fn admits_nothing(limiter: &CacheRateLimiter, limit: &Limit, request: &Request) -> HttpResponse {
    let now = limiter.clock().unix_seconds();
    refusal(limit, limit.decay_seconds.max(1), now, request)
}

/// The refusal of `limit` when its window is full (Laravel's
/// `tooManyAttempts`, without its removal of a count whose timer is gone,
/// which the count that follows makes atomically), with the seconds until
/// the window ends: the whole decay when the timer holds no integer (one a
/// Laravel application wrote in another serializer's form), as Laravel
/// refuses on the timer's presence alone.
async fn refusal_if_full(
    limiter: &CacheRateLimiter,
    limit: &Limit,
    request: &Request,
) -> Result<Option<HttpResponse>, CacheError> {
    let (full, ends_at) = join(
        limiter.window_is_full(&limit.key, limit.max_attempts),
        limiter.window_ends_at(&limit.key),
    )
    .await;
    if !full? {
        return Ok(None);
    }
    // The wait and the reset from one reading of the clock, so that every
    // refusal of a window reports the timer's second as its reset.
    let now = limiter.clock().unix_seconds();
    let available_in = match ends_at {
        Ok(ends_at) => ends_at.map_or(0, |ends_at| seconds_until(ends_at, now)),
        Err(error) if error.is_backend() => return Err(error),
        Err(_) => limit.decay_seconds.max(0),
    };
    Ok(Some(refusal(limit, available_in, now, request)))
}
