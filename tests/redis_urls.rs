//! The forms of a Redis URL the docs give, against redis-servers the tests
//! start: an IPv6 host in brackets, trailing slashes, query parameters,
//! percent-encoded credentials, and a cluster's credentials written once.

#![cfg(feature = "redis")]

mod support;

use std::time::Duration;

use support::redis::{RedisCluster, RedisServer};
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::{RedisConfig, RedisConnection};

/// Exactly 3 of 8 calls admitted on each of 30 keys (so on every master of
/// a cluster), through a driver on `url`.
async fn limits_hold(url: &str) {
    let connection = RedisConnection::new(RedisConfig::from_url(url).unwrap()).unwrap();
    let limiter = RedisRateLimiter::new(connection).with_prefix(support::unique_prefix("urls"));
    let cfg = SlidingWindowConfig::new(3, Duration::from_secs(60));
    for key in 0..30 {
        let mut admitted = 0;
        for _ in 0..8 {
            if limiter
                .try_acquire(&format!("key{key}"), &cfg)
                .await
                .unwrap_or_else(|e| panic!("{url}: {e}"))
            {
                admitted += 1;
            }
        }
        assert_eq!(admitted, 3, "{url} key{key}");
    }
}

/// The number of keys in database `db` of `server`.
async fn dbsize(server: &RedisServer, db: u32) -> i64 {
    let connection = support::redis::connect(&format!("{}/{db}", server.url()));
    connection.query(&redis::cmd("DBSIZE")).await.unwrap()
}

#[tokio::test]
async fn an_ipv6_host_in_brackets_reaches_its_server() {
    let server = RedisServer::start();
    let port = server.port();
    limits_hold(&format!("redis://[::1]:{port}")).await;
    assert_eq!(dbsize(&server, 0).await, 30);
    limits_hold(&format!("redis://[::1]:{port}/2")).await;
    assert_eq!(dbsize(&server, 2).await, 30);
}

#[tokio::test]
async fn trailing_slashes_query_parameters_and_percent_encoded_credentials() {
    let server = RedisServer::start();
    let url = server.url();
    limits_hold(&format!("{url}/")).await;
    assert_eq!(dbsize(&server, 0).await, 30);
    limits_hold(&format!("{url}/2/")).await;
    assert_eq!(dbsize(&server, 2).await, 30);
    limits_hold(&format!("{url}/3?protocol=resp3")).await;
    assert_eq!(dbsize(&server, 3).await, 30);
    limits_hold(&format!("{url}/?protocol=resp3")).await;
    assert_eq!(dbsize(&server, 0).await, 60);

    // A user and password holding every character a URL reserves.
    let reply = server.command("ACL SETUSER app on >p@ss,w/rd#?% ~* +@all");
    assert!(reply.contains("OK"), "{reply}");
    let port = server.port();
    limits_hold(&format!(
        "redis://app:p%40ss%2Cw%2Frd%23%3F%25@127.0.0.1:{port}/4"
    ))
    .await;
    assert_eq!(dbsize(&server, 4).await, 30);
    limits_hold(&format!(
        "{}?db=5&user=app&pass=p%40ss%2Cw%2Frd%23%3F%25",
        server.socket_url()
    ))
    .await;
    assert_eq!(dbsize(&server, 5).await, 30);
}

#[tokio::test]
async fn a_clusters_percent_encoded_credentials_are_given_once_or_on_every_node() {
    let cluster = RedisCluster::start(3);
    for port in cluster.ports() {
        let reply = support::redis::raw_command(port, "CONFIG SET requirepass p@ss,w/rd").unwrap();
        assert!(reply.contains("OK"), "{reply}");
    }
    let ports = cluster.ports();
    limits_hold(&format!(
        "redis+cluster://:p%40ss%2Cw%2Frd@127.0.0.1:{},127.0.0.1:{}",
        ports[0], ports[1]
    ))
    .await;
    let list: Vec<String> = ports
        .iter()
        .map(|p| format!("redis://:p%40ss%2Cw%2Frd@127.0.0.1:{p}"))
        .collect();
    limits_hold(&list.join(",")).await;
}
