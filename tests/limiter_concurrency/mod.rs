//! Twenty concurrent clients making fifty attempts each on one key with a
//! limit of 100, deciding from the limiter's answer: a correct limiter
//! admits exactly 100.

#![allow(dead_code)]

use std::sync::Arc;

use suprnova::limiter::CacheRateLimiter;

pub const CLIENTS: usize = 20;
pub const ATTEMPTS: usize = 50;
pub const LIMIT: i64 = 100;

/// How a client decides from the limiter.
#[derive(Clone, Copy, Debug)]
pub enum Decide {
    /// `increment`, then compare the count it returned.
    IncrementThenCompare,
    /// `hit_and_check`.
    HitAndCheck,
    /// `increment_if_below`, which counts only while there is room.
    IncrementIfBelow,
    /// `attempt`, with a callback that lets the other clients run before
    /// it returns: admitted when the callback ran.
    Attempt,
}

pub const EVERY_WAY: [Decide; 4] = [
    Decide::IncrementThenCompare,
    Decide::HitAndCheck,
    Decide::IncrementIfBelow,
    Decide::Attempt,
];

async fn admits(limiter: &CacheRateLimiter, key: &str, decide: Decide) -> bool {
    match decide {
        Decide::IncrementThenCompare => limiter.increment(key, 60, 1).await.unwrap() <= LIMIT,
        Decide::HitAndCheck => !limiter.hit_and_check(key, LIMIT, 60).await.unwrap(),
        Decide::IncrementIfBelow => {
            limiter
                .increment_if_below(key, 60, 1, LIMIT)
                .await
                .unwrap()
                .counted
        }
        Decide::Attempt => limiter
            .attempt(key, LIMIT, tokio::task::yield_now, 60)
            .await
            .unwrap()
            .is_some(),
    }
}

/// How many attempts the clients got admitted; `client` gives each client
/// its limiter (one shared, or one connection each).
pub async fn admitted(
    client: impl Fn() -> Arc<CacheRateLimiter>,
    key: &str,
    decide: Decide,
) -> usize {
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let limiter = client();
            let key = key.to_owned();
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..ATTEMPTS {
                    admitted += usize::from(admits(&limiter, &key, decide).await);
                    // Let the other clients interleave on every attempt.
                    tokio::task::yield_now().await;
                }
                admitted
            })
        })
        .collect();
    let mut total = 0;
    for task in tasks {
        total += task.await.unwrap();
    }
    total
}
