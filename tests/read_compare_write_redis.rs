//! Why the limiters decide with one atomic step: twenty clients, each on its
//! own connection to a real Redis, fifty attempts each on one key with a
//! limit of 100, counting with the cache store's own primitives.
//!
//! The clients are held in step (every client reads before any client
//! writes, round after round) so that the schedule, and the count, are the
//! same on every run. That is the schedule a burst of concurrent requests
//! comes close to; docs/algorithms.md quotes both counts.
#![cfg(feature = "redis")]

mod support;

use std::sync::Arc;
use std::time::Duration;

use support::redis::RedisServer;
use support::unique_prefix;
use suprnova::cache::{RedisStore, Store};
use suprnova::redis_client::{RedisConfig, RedisConnection};
use tokio::sync::Barrier;

const CLIENTS: usize = 20;
const ATTEMPTS: usize = 50;
const LIMIT: i64 = 100;

/// How a client counts one attempt; `true` when it admits the attempt.
#[derive(Clone, Copy, Debug)]
enum Count {
    /// `get`, compare with the limit, then `put` the count plus one.
    ReadCompareWrite,
    /// `increment_if_below`: the comparison and the count in one step.
    IncrementIfBelow,
}

/// Runs the twenty clients in step and returns (admitted, stored count).
async fn run(server: &RedisServer, how: Count) -> (usize, i64) {
    let key = format!("{}hot", unique_prefix("rcw"));
    let step = Arc::new(Barrier::new(CLIENTS));
    let clients: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let config = RedisConfig::from_url(&server.url()).unwrap();
            let store = RedisStore::new(RedisConnection::new(config).unwrap());
            let (key, step) = (key.clone(), step.clone());
            tokio::spawn(async move {
                let mut admitted = 0;
                for _ in 0..ATTEMPTS {
                    admitted += usize::from(attempt(&store, &key, &step, how).await);
                }
                admitted
            })
        })
        .collect();
    let mut admitted = 0;
    for client in clients {
        // A client that fails leaves the others waiting at the barrier: the
        // limit turns that into a failure.
        admitted += support::within("a client's rounds", Duration::from_secs(60), client)
            .await
            .unwrap();
    }
    let config = RedisConfig::from_url(&server.url()).unwrap();
    let store = RedisStore::new(RedisConnection::new(config).unwrap());
    let stored = store.get(&key).await.unwrap().unwrap().parse().unwrap();
    (admitted, stored)
}

async fn attempt(store: &RedisStore, key: &str, step: &Barrier, how: Count) -> bool {
    let admitted = match how {
        Count::ReadCompareWrite => {
            let count: i64 = match store.get(key).await.unwrap() {
                Some(value) => value.parse().unwrap(),
                None => 0,
            };
            // Every client has read before any client writes.
            step.wait().await;
            let admit = count < LIMIT;
            if admit {
                let next = (count + 1).to_string();
                store
                    .put(key, &next, Duration::from_secs(60))
                    .await
                    .unwrap();
            }
            admit
        }
        Count::IncrementIfBelow => {
            step.wait().await;
            store
                .increment_if_below(key, 60, 1, LIMIT)
                .await
                .unwrap()
                .counted
        }
    };
    // Every client has written before the next round reads.
    step.wait().await;
    admitted
}

// Read, compare, write: every client of a round reads the same count, so
// all twenty admit and all twenty write the same next value. 1,000 of 1,000
// attempts are admitted against a limit of 100, and the store ends at 50.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_compare_write_admits_all_1000_and_stores_50() {
    let server = RedisServer::start();
    assert_eq!(run(&server, Count::ReadCompareWrite).await, (1_000, 50));
}

// The same schedule with the comparison and the count in one step: exactly
// 100 admitted, and the store holds 100.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn increment_if_below_admits_exactly_100_on_the_same_schedule() {
    let server = RedisServer::start();
    assert_eq!(run(&server, Count::IncrementIfBelow).await, (100, 100));
}
