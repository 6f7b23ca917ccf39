//! The Redis sliding-window driver on a 3-master Redis Cluster: every call
//! touches one key, so the same script is exact on whichever master holds
//! the key's slot.
#![cfg(feature = "redis")]

mod conformance;
mod support;

use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use support::redis::{RedisCluster, raw_command};
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::{RedisConfig, RedisConnection};

/// One cluster for the tests of this file that run at the same time: it
/// takes seconds to form, and each test keeps to keys of its own prefix. It
/// is stopped when the last test holding it ends.
fn shared_cluster() -> Arc<RedisCluster> {
    static SHARED: Mutex<Weak<RedisCluster>> = Mutex::new(Weak::new());
    let mut shared = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(cluster) = shared.upgrade() {
        return cluster;
    }
    let cluster = Arc::new(RedisCluster::start(3));
    *shared = Arc::downgrade(&cluster);
    cluster
}

async fn cluster() -> conformance::RealTime<Arc<RedisCluster>> {
    let cluster = shared_cluster();
    let driver = limiter(&cluster, &support::unique_prefix("conformance"));
    conformance::RealTime::new(cluster, driver)
}

conformance::driver_tests!(cluster);

fn limiter(cluster: &RedisCluster, prefix: &str) -> Arc<dyn RateLimiterDriver> {
    let config = RedisConfig::from_url(&cluster.url()).unwrap();
    assert!(config.is_cluster());
    let conn = RedisConnection::new(config).unwrap();
    Arc::new(RedisRateLimiter::new(conn).with_prefix(prefix))
}

/// The masters that hold at least one key under `prefix`.
fn masters_holding(cluster: &RedisCluster, prefix: &str) -> usize {
    cluster
        .ports()
        .into_iter()
        .filter(|&p| {
            raw_command(p, &format!("KEYS {prefix}*")).is_some_and(|r| !r.starts_with("*0"))
        })
        .count()
}

// 20 tasks on 20 separate cluster connections, 50 attempts each on one key
// with a limit of 100: exactly 100 admitted, three runs (on three keys, so
// on whichever masters their slots fall).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn twenty_cluster_connections_of_fifty_admit_exactly_100() {
    let cluster = shared_cluster();
    let cfg = SlidingWindowConfig::new(100, Duration::from_secs(60));
    for run in 0..3 {
        let prefix = support::unique_prefix("cluster-exact");
        let drivers = (0..20).map(|_| limiter(&cluster, &prefix)).collect();
        let key = format!("hot-{run}");
        let admitted = conformance::admitted_by_contenders(drivers, 50, &key, cfg).await;
        assert_eq!(admitted, 100, "run {run}");
    }
}

// Keys spread over every master each get their own exact limit and wait,
// and a SCRIPT FLUSH on every node between calls does not break the driver.
#[tokio::test]
async fn keys_on_every_master_keep_their_limits_across_a_script_flush() {
    let cluster = shared_cluster();
    let prefix = support::unique_prefix("spread");
    let driver = limiter(&cluster, &prefix);
    let cfg = SlidingWindowConfig::new(3, Duration::from_secs(2));
    let keys: Vec<String> = (0..30).map(|i| format!("user:{i}")).collect();
    for key in &keys {
        for remaining in [2, 1, 0] {
            assert_eq!(
                driver.acquire(key, &cfg).await.unwrap().remaining,
                remaining
            );
        }
    }
    assert_eq!(masters_holding(&cluster, &prefix), 3);
    for port in cluster.ports() {
        assert!(
            raw_command(port, "SCRIPT FLUSH")
                .unwrap()
                .starts_with("+OK")
        );
    }
    for key in &keys {
        let refused = driver.acquire(key, &cfg).await.unwrap();
        assert!(!refused.allowed, "{key}");
        let wait = refused.retry_after.unwrap();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(2),
            "{key}: {wait:?}"
        );
        let read = driver.retry_after(key, &cfg).await.unwrap().unwrap();
        assert!(read <= wait, "{key}: {read:?} after {wait:?}");
    }
}
