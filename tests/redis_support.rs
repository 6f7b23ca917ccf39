//! The test support starts real Redis processes, one node and a cluster.
#![cfg(feature = "redis")]

mod support;

use support::redis::{RedisCluster, RedisServer, raw_command};
use suprnova::redis_client::{RedisConfig, RedisConnection};

#[tokio::test]
async fn single_node_starts_answers_and_stops() {
    let mut server = RedisServer::start();
    assert_ne!(server.port(), 6379);
    assert!(server.command("PING").starts_with("+PONG"));
    let conn = RedisConnection::new(RedisConfig::from_url(&server.url()).unwrap()).unwrap();
    conn.ping().await.unwrap();
    let port = server.port();
    server.stop();
    assert!(raw_command(port, "PING").is_none());
}

#[tokio::test]
async fn three_node_cluster_pings_and_writes_through_the_cluster() {
    let cluster = RedisCluster::start(3);
    for port in cluster.ports() {
        assert!(
            raw_command(port, "PING").unwrap().starts_with("+PONG"),
            "node {port}"
        );
        assert!(
            raw_command(port, "CLUSTER INFO")
                .unwrap()
                .contains("cluster_known_nodes:3")
        );
    }
    let config = RedisConfig::from_url(&cluster.url()).unwrap();
    assert!(config.is_cluster());
    let conn = RedisConnection::new(config).unwrap();
    // Keys chosen to land on different slots, so different masters.
    for key in ["alpha", "beta", "gamma", "delta", "epsilon"] {
        let () = conn
            .query(redis::cmd("SET").arg(key).arg(format!("v-{key}")))
            .await
            .unwrap();
        let got: String = conn.query(redis::cmd("GET").arg(key)).await.unwrap();
        assert_eq!(got, format!("v-{key}"));
    }
    // Each key is on the master of its slot, and on no other.
    let keys = ["alpha", "beta", "gamma", "delta", "epsilon"];
    for port in cluster.ports() {
        let held = keys.iter().filter(|k| cluster.node_of(k) == port).count();
        let size = raw_command(port, "DBSIZE").unwrap();
        assert_eq!(size.trim(), format!(":{held}"), "node {port}");
    }
    let masters: std::collections::BTreeSet<u16> =
        keys.iter().map(|k| cluster.node_of(k)).collect();
    assert!(
        masters.len() > 1,
        "the keys were chosen to spread: {masters:?}"
    );
}
