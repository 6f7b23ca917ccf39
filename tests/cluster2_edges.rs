//! The sliding-window driver and the cache store's rate limiter on a Redis
//! Cluster: RESP3 URLs, exact limits under concurrency on both sides, a
//! master that restarts under the client, a script cache flushed on one
//! master while a burst races, hash tags in keys, and the waits a refusal
//! reports on a cluster against one node.
#![cfg(feature = "redis")]

mod support;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use support::redis::{RedisCluster, RedisServer, free_port, raw_command};
use support::unique_prefix;
use suprnova::cache::RedisStore;
use suprnova::clock;
use suprnova::limiter::CacheRateLimiter;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::{RedisConfig, RedisConnection};

const CONNECT: Duration = Duration::from_millis(400);
const RESPONSE: Duration = Duration::from_millis(400);

fn connection(url: &str) -> RedisConnection {
    RedisConnection::new(
        RedisConfig::from_url(url)
            .unwrap()
            .with_timeouts(CONNECT, RESPONSE),
    )
    .unwrap()
}

fn driver(url: &str, prefix: &str) -> RedisRateLimiter {
    RedisRateLimiter::new(connection(url)).with_prefix(prefix)
}

/// The cache store's limiter on `url`, its keys under `<prefix>cache:` (so
/// that they never meet the driver's under `prefix`).
fn facade(url: &str, prefix: &str) -> CacheRateLimiter {
    let store = RedisStore::new(connection(url)).with_prefix(format!("{prefix}cache:"));
    CacheRateLimiter::new(Arc::new(store), clock::system())
}

/// `url` (a comma-separated list of node URLs) with `?protocol=resp3` on
/// every node.
fn resp3(url: &str) -> String {
    url.split(',')
        .map(|node| format!("{node}/?protocol=resp3"))
        .collect::<Vec<_>>()
        .join(",")
}

/// `tasks` tasks, each with a limiter `make` builds on a connection of its
/// own, making `each` calls of `call` at once: how many returned `true`.
async fn burst<L, Fut>(
    tasks: usize,
    each: usize,
    make: impl Fn() -> L,
    call: impl Fn(Arc<L>) -> Fut + Clone + Send + 'static,
) -> usize
where
    L: Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let start = Arc::new(tokio::sync::Barrier::new(tasks));
    let passed = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    for _ in 0..tasks {
        let limiter = Arc::new(make());
        let (start, passed, call) = (start.clone(), passed.clone(), call.clone());
        handles.push(tokio::spawn(async move {
            start.wait().await;
            for _ in 0..each {
                if call(limiter.clone()).await {
                    passed.fetch_add(1, Ordering::SeqCst);
                }
            }
        }));
    }
    for handle in handles {
        handle.await.unwrap();
    }
    passed.load(Ordering::SeqCst)
}

/// `tasks` drivers making `each` calls on `key` at once: how many were
/// admitted.
async fn driver_burst(
    url: &str,
    prefix: &str,
    key: &str,
    tasks: usize,
    each: usize,
    limit: u32,
) -> usize {
    let cfg = SlidingWindowConfig::new(limit, Duration::from_secs(60));
    let key = key.to_owned();
    burst(
        tasks,
        each,
        || driver(url, prefix),
        move |limiter| {
            let key = key.clone();
            async move { limiter.acquire(&key, &cfg).await.unwrap().allowed }
        },
    )
    .await
}

/// `tasks` facades making `each` `attempt`s on `key` at once: how many
/// callbacks ran.
async fn attempt_burst(
    url: &str,
    prefix: &str,
    key: &str,
    tasks: usize,
    each: usize,
    limit: i64,
) -> usize {
    let key = key.to_owned();
    burst(
        tasks,
        each,
        || facade(url, prefix),
        move |limiter| {
            let key = key.clone();
            async move {
                let ran = limiter.attempt(&key, limit, || async {}, 60).await;
                ran.unwrap().is_some()
            }
        },
    )
    .await
}

/// `tasks` facades making `each` `increment_if_below` of 1 up to `limit`
/// at once: how many counted.
async fn increment_burst(
    url: &str,
    prefix: &str,
    key: &str,
    tasks: usize,
    each: usize,
    limit: i64,
) -> usize {
    let key = key.to_owned();
    burst(
        tasks,
        each,
        || facade(url, prefix),
        move |limiter| {
            let key = key.clone();
            async move {
                let outcome = limiter.increment_if_below(&key, 60, 1, limit).await;
                outcome.unwrap().counted
            }
        },
    )
    .await
}

/// The driver and the facade each count once on `{k}`.
async fn counted_once(
    limiter: &RedisRateLimiter,
    counter: &CacheRateLimiter,
    cfg: &SlidingWindowConfig,
) {
    assert!(limiter.acquire("{k}", cfg).await.unwrap().allowed);
    let outcome = counter.increment_if_below("{k}", 60, 1, 5).await;
    assert!(outcome.unwrap().counted);
}

/// Calls the driver and the facade on `{k}` every 50 ms from `since` until
/// both decide (admitted or refused), failing after `give_up`, and asserts
/// that they did within four deadlines; `after` names what `since` is.
async fn decided_again(
    limiter: &RedisRateLimiter,
    counter: &CacheRateLimiter,
    since: Instant,
    give_up: Duration,
    after: &str,
) {
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(60));
    let mut errors = Vec::new();
    loop {
        let d = limiter.acquire("{k}", &cfg).await;
        let f = counter.increment_if_below("{k}", 60, 1, 5).await;
        if d.is_ok() && f.is_ok() {
            break;
        }
        errors.push(format!(
            "{:?} {:?} / {:?}",
            since.elapsed(),
            d.err(),
            f.err()
        ));
        assert!(
            since.elapsed() < give_up,
            "not decided {:?} after {after}: {:?}",
            since.elapsed(),
            &errors[errors.len().saturating_sub(3)..]
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        since.elapsed() < 4 * (CONNECT + RESPONSE),
        "decided only {:?} after {after}: {errors:?}",
        since.elapsed()
    );
}

// ----------------------------------------------------------------- RESP3 --

// A cluster URL whose every node asks for RESP3 (`?protocol=resp3`, which
// the URL rules allow when every node gives it), and `redis+cluster://`
// with one seed asking for it: the driver, `attempt` and
// `increment_if_below` admit exactly their limit of 20 tasks of 50 calls.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_resp3_a_cluster_admits_exactly_the_limit_on_both_sides() {
    let cluster = RedisCluster::start(3);
    let seed = format!(
        "redis+cluster://127.0.0.1:{}/?protocol=resp3",
        cluster.ports()[1]
    );
    for url in [resp3(&cluster.url()), seed] {
        assert!(RedisConfig::from_url(&url).unwrap().is_cluster());
        let prefix = unique_prefix("resp3");
        assert_eq!(
            driver_burst(&url, &prefix, "d", 20, 50, 100).await,
            100,
            "{url}"
        );
        assert_eq!(
            attempt_burst(&url, &prefix, "a", 20, 50, 100).await,
            100,
            "{url}"
        );
        assert_eq!(
            increment_burst(&url, &prefix, "i", 20, 50, 100).await,
            100,
            "{url}"
        );
    }
}

// The same over RESP2, with the keys' slots on every master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn over_resp2_a_cluster_admits_exactly_the_limit_on_both_sides() {
    let cluster = RedisCluster::start(3);
    let url = cluster.url();
    let prefix = unique_prefix("resp2");
    for key in ["x", "y", "z"] {
        assert_eq!(
            driver_burst(&url, &prefix, key, 20, 50, 100).await,
            100,
            "{key}"
        );
        assert_eq!(
            attempt_burst(&url, &prefix, &format!("a{key}"), 20, 50, 100).await,
            100,
            "{key}"
        );
        assert_eq!(
            increment_burst(&url, &prefix, &format!("i{key}"), 20, 50, 100).await,
            100,
            "{key}"
        );
    }
}

// ------------------------------------------------ a restartable cluster --

/// A cluster whose nodes can be killed and started again on their ports,
/// with their `nodes.conf` (so a restarted master takes back its slots,
/// empty: nothing persists).
struct Restartable {
    nodes: Vec<(Option<Child>, u16)>,
    dir: PathBuf,
}

fn spawn_node(port: u16, dir: &std::path::Path) -> Child {
    spawn_node_with(port, dir, port)
}

/// A node on `port` that reads and writes the cluster configuration of the
/// node first started on `conf_of`.
fn spawn_node_with(port: u16, dir: &std::path::Path, conf_of: u16) -> Child {
    Command::new("redis-server")
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
        .args(["--dir", dir.to_str().unwrap()])
        .args(["--logfile", &format!("redis-{port}.log")])
        .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
        .args(["--cluster-config-file", &format!("nodes-{conf_of}.conf")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start redis-server")
}

fn wait_for(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

impl Restartable {
    fn start() -> Self {
        let cluster = Self::nodes_alone();
        cluster.create();
        cluster
    }

    /// Three cluster-enabled nodes, answering, not yet joined in a cluster.
    fn nodes_alone() -> Self {
        let mut ports: Vec<u16> = Vec::new();
        while ports.len() < 3 {
            let port = free_port();
            if !ports
                .iter()
                .any(|&p| p == port || p + 10000 == port || port + 10000 == p)
            {
                ports.push(port);
            }
        }
        let dir = std::env::temp_dir().join(format!(
            "suprnova-restartable-{}-{}",
            std::process::id(),
            ports[0]
        ));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = Self {
            nodes: Vec::new(),
            dir,
        };
        for &port in &ports {
            let child = spawn_node(port, &cluster.dir);
            cluster.nodes.push((Some(child), port));
        }
        for &port in &ports {
            wait_for("a node to answer", Duration::from_secs(10), || {
                raw_command(port, "PING").is_some_and(|r| r.contains("PONG"))
            });
        }
        cluster
    }

    /// Joins the nodes in a cluster, and waits until it is ok.
    fn create(&self) {
        support::redis::create_cluster(&self.ports());
        self.wait_ok();
    }

    fn wait_ok(&self) {
        for &(_, port) in &self.nodes {
            wait_for("the cluster to be ok", Duration::from_secs(20), || {
                raw_command(port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"))
            });
        }
    }

    fn url(&self) -> String {
        self.nodes
            .iter()
            .map(|(_, p)| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }

    fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|(_, p)| *p).collect()
    }

    /// The master that holds `key`.
    fn node_of(&self, key: &str) -> u16 {
        support::redis::master_of(&self.ports(), key)
    }

    fn kill(&mut self, port: u16) {
        let node = self.nodes.iter_mut().find(|(_, p)| *p == port).unwrap();
        if let Some(mut child) = node.0.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        wait_for("the node to stop", Duration::from_secs(5), || {
            std::net::TcpStream::connect(("127.0.0.1", port)).is_err()
        });
    }

    fn start_again(&mut self, port: u16) {
        let child = spawn_node(port, &self.dir);
        let node = self.nodes.iter_mut().find(|(_, p)| *p == port).unwrap();
        node.0 = Some(child);
        wait_for("the node to answer again", Duration::from_secs(10), || {
            raw_command(port, "PING").is_some_and(|r| r.contains("PONG"))
        });
    }
}

impl Restartable {
    /// Kills the node on `port` and starts it again, the same node of the
    /// cluster with the same slots, on a new port (as a container moved to
    /// another address); the new port.
    fn move_node(&mut self, port: u16) -> u16 {
        self.kill(port);
        let taken = self.ports();
        let new_port = loop {
            let candidate = free_port();
            if !taken
                .iter()
                .any(|&p| p == candidate || p + 10000 == candidate || candidate + 10000 == p)
            {
                break candidate;
            }
        };
        let child = spawn_node_with(new_port, &self.dir, port);
        let node = self.nodes.iter_mut().find(|(_, p)| *p == port).unwrap();
        *node = (Some(child), new_port);
        wait_for("the moved node to answer", Duration::from_secs(10), || {
            raw_command(new_port, "PING").is_some_and(|r| r.contains("PONG"))
        });
        let ports = self.ports();
        wait_for(
            "every node to know the new address",
            Duration::from_secs(20),
            || {
                ports.iter().all(|&p| {
                    raw_command(p, "CLUSTER NODES").is_some_and(|r| {
                        r.contains(&format!("127.0.0.1:{new_port}@"))
                            && !r.contains(&format!("127.0.0.1:{port}@"))
                    })
                })
            },
        );
        self.wait_ok();
        new_port
    }
}

impl Drop for Restartable {
    fn drop(&mut self) {
        for (child, _) in &mut self.nodes {
            if let Some(mut child) = child.take() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

// A master killed and started again on its port at once (within the
// cluster's node timeout, so the cluster never fails): the driver and the
// facade, kept from before, decide on that master's keys again within a
// few deadlines of its return, and a burst on a new key there admits
// exactly its limit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_restarted_on_its_port_is_decided_on_again_and_exactly() {
    let mut cluster = Restartable::start();
    let url = cluster.url();
    let prefix = unique_prefix("restart");
    let limiter = driver(&url, &prefix);
    let counter = facade(&url, &prefix);
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(60));
    // A key of each master, used before the restart.
    // Tagged keys: the driver's bucket, the counter and its timer all on
    // one master.
    let master = cluster.node_of("{k}");
    counted_once(&limiter, &counter, &cfg).await;
    cluster.kill(master);
    cluster.start_again(master);
    let back = Instant::now();
    let deadline = CONNECT + RESPONSE;
    decided_again(
        &limiter,
        &counter,
        back,
        10 * deadline,
        "the master answered again",
    )
    .await;
    // Exact again on that master.
    let fresh = (0..200)
        .map(|n| format!("{{f{n}}}"))
        .find(|name| cluster.node_of(name) == master)
        .unwrap();
    assert_eq!(driver_burst(&url, &prefix, &fresh, 10, 10, 20).await, 20);
    assert_eq!(attempt_burst(&url, &prefix, &fresh, 10, 10, 20).await, 20);
}

// A master killed and started again only after the cluster marked it
// failed (no replica: the cluster stops answering every slot until the
// master is back and the failure cleared): once every node says
// `cluster_state:ok`, the driver and the facade kept from before decide
// again within a few deadlines, and exactly.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_back_after_the_cluster_failed_is_decided_on_again_and_exactly() {
    let mut cluster = Restartable::start();
    let url = cluster.url();
    let prefix = unique_prefix("cluster-fail");
    let limiter = driver(&url, &prefix);
    let counter = facade(&url, &prefix);
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(60));
    // Tagged keys: the driver's bucket, the counter and its timer all on
    // one master.
    let master = cluster.node_of("{k}");
    counted_once(&limiter, &counter, &cfg).await;
    cluster.kill(master);
    let other = cluster.ports().into_iter().find(|&p| p != master).unwrap();
    wait_for("the cluster to fail", Duration::from_secs(15), || {
        raw_command(other, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:fail"))
    });
    // Calls meanwhile fail, within their deadline.
    let began = Instant::now();
    assert!(limiter.acquire("{k}", &cfg).await.is_err());
    assert!(
        began.elapsed() <= 2 * (CONNECT + RESPONSE),
        "{:?}",
        began.elapsed()
    );
    cluster.start_again(master);
    cluster.wait_ok();
    let back = Instant::now();
    let give_up = 10 * (CONNECT + RESPONSE);
    decided_again(
        &limiter,
        &counter,
        back,
        give_up,
        "the cluster was ok again",
    )
    .await;
    let fresh = (0..200)
        .map(|n| format!("{{f{n}}}"))
        .find(|name| cluster.node_of(name) == master)
        .unwrap();
    assert_eq!(driver_burst(&url, &prefix, &fresh, 10, 10, 20).await, 20);
    assert_eq!(attempt_burst(&url, &prefix, &fresh, 10, 10, 20).await, 20);
}

// ------------------------------------------------------- a hung master --

// A connection first used while one master hangs (stopped, and the cluster
// still counts it healthy): the keys of the other masters are decided
// within a few deadlines, and from then on each call answers within one
// deadline, as on a connection made before the master hung.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_first_used_while_a_master_hangs_decides_the_others_keys() {
    let cluster = RedisCluster::start(3);
    for port in cluster.ports() {
        assert!(
            raw_command(port, "CONFIG SET cluster-node-timeout 60000")
                .unwrap()
                .starts_with("+OK")
        );
    }
    let prefix = unique_prefix("hung-at-start");
    let mut key_of_node = std::collections::BTreeMap::new();
    for i in 0..200 {
        let key = format!("k{i}");
        key_of_node
            .entry(cluster.node_of(&format!("{prefix}{key}")))
            .or_insert(key);
    }
    let hung = cluster.ports()[0];
    let healthy: Vec<String> = key_of_node
        .iter()
        .filter(|(port, _)| **port != hung)
        .map(|(_, key)| key.clone())
        .collect();
    assert_eq!(healthy.len(), 2);
    let pid = cluster.pid_of(hung);
    assert!(support::signal(pid, "STOP"));
    let _resume = support::Resume(pid);
    let limiter = driver(&cluster.url(), &prefix);
    let cfg = SlidingWindowConfig::new(100, Duration::from_secs(60));
    let deadline = CONNECT + RESPONSE;
    let began = Instant::now();
    let mut errors = Vec::new();
    loop {
        match limiter.acquire(&healthy[0], &cfg).await {
            Ok(decision) => {
                assert!(decision.allowed);
                break;
            }
            Err(error) => errors.push(format!("{:?}: {error}", began.elapsed())),
        }
        assert!(
            began.elapsed() < 8 * deadline,
            "not decided {:?} after the first call: {errors:?}",
            began.elapsed()
        );
    }
    for round in 0..5 {
        for key in &healthy {
            let call = Instant::now();
            let decided = limiter.acquire(key, &cfg).await;
            assert!(
                matches!(decided, Ok(ref d) if d.allowed),
                "round {round}, {key}: {decided:?}"
            );
            assert!(
                call.elapsed() <= deadline,
                "round {round}: {:?}",
                call.elapsed()
            );
        }
    }
}

// ------------------------------------------- a flush on one master only --

// `SCRIPT FLUSH` on the master of a hot key while twenty connections race
// on it: every `NOSCRIPT` is answered by the script's `EVAL`, and exactly
// the limit is admitted, by the driver and by `attempt`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_script_flush_on_one_master_during_a_burst_keeps_the_limit_exact() {
    let cluster = RedisCluster::start(3);
    let url = cluster.url();
    let prefix = unique_prefix("flush-one");
    let master = cluster.node_of("{hot}");
    let flushing = std::thread::spawn(move || {
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(15));
            let _ = raw_command(master, "SCRIPT FLUSH");
        }
    });
    let (admitted, ran) = tokio::join!(
        driver_burst(&url, &prefix, "{hot}", 20, 50, 100),
        attempt_burst(&url, &prefix, "{hot}", 20, 50, 100),
    );
    flushing.join().unwrap();
    assert_eq!((admitted, ran), (100, 100));
}

// ---------------------------------------------------------- hash tags --

// A user key holding a hash tag puts the driver's bucket on the master of
// the tag's slot; two keys of one tag share that master, and each is its
// own bucket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hash_tags_in_keys_choose_the_master_and_keep_buckets_apart() {
    let cluster = RedisCluster::start(3);
    let url = cluster.url();
    let prefix = unique_prefix("tags");
    let limiter = driver(&url, &prefix);
    let counter = facade(&url, &prefix);
    let cfg = SlidingWindowConfig::new(2, Duration::from_secs(60));
    for key in ["{user:1}:login", "{user:1}:api", "a{}b", "{}{x}", "x{y}{z}"] {
        assert!(limiter.acquire(key, &cfg).await.unwrap().allowed, "{key}");
        assert!(limiter.acquire(key, &cfg).await.unwrap().allowed, "{key}");
        assert!(!limiter.acquire(key, &cfg).await.unwrap().allowed, "{key}");
        let on = cluster.node_of(&format!("{prefix}{key}"));
        let card = raw_command(on, &format!("ZCARD {prefix}{key}")).unwrap();
        assert_eq!(card.trim(), ":2", "{key}");
        for _ in 0..2 {
            assert!(
                counter
                    .increment_if_below(key, 60, 1, 2)
                    .await
                    .unwrap()
                    .counted
            );
        }
        let refused = counter.increment_if_below(key, 60, 1, 2).await.unwrap();
        assert!(!refused.counted && refused.count == 2, "{key}: {refused:?}");
        assert!(counter.available_in(key).await.unwrap() >= 59, "{key}");
    }
}

// -------------------------------------------------- waits on a refusal --

// The wait a refusal reports on a cluster is the one it reports on one
// node: the driver's `retry_after` (Redis time to the oldest hit leaving)
// and the facade's `available_in` (the timer), for the same calls spaced
// the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_reports_the_same_wait_on_a_cluster_as_on_one_node() {
    let cluster = RedisCluster::start(3);
    let server = RedisServer::start();
    let mut waits = Vec::new();
    for url in [server.url(), cluster.url(), resp3(&cluster.url())] {
        let prefix = unique_prefix("waits");
        let limiter = driver(&url, &prefix);
        let counter = facade(&url, &prefix);
        let cfg = SlidingWindowConfig::new(2, Duration::from_secs(10));
        assert!(limiter.acquire("w", &cfg).await.unwrap().allowed);
        assert!(
            counter
                .increment_if_below("w", 10, 1, 2)
                .await
                .unwrap()
                .counted
        );
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(limiter.acquire("w", &cfg).await.unwrap().allowed);
        assert!(
            counter
                .increment_if_below("w", 10, 1, 2)
                .await
                .unwrap()
                .counted
        );
        let refused = limiter.acquire("w", &cfg).await.unwrap();
        assert!(!refused.allowed);
        let wait = refused.retry_after.unwrap();
        let read = limiter.retry_after("w", &cfg).await.unwrap().unwrap();
        assert!(
            wait > Duration::from_millis(9_300) && wait <= Duration::from_millis(9_500),
            "{url}: {wait:?}"
        );
        assert!(
            read <= wait && wait - read < Duration::from_millis(100),
            "{url}: {read:?}"
        );
        let available = counter.available_in("w").await.unwrap();
        assert!((9..=10).contains(&available), "{url}: {available}");
        waits.push((url, wait, available));
    }
}

// A master that comes back on another address (its container moved): the
// same node, with the same slots, which every node of the cluster then
// names at its new port. A connection made before the move reaches it
// there, without a restart of the application, within a few deadlines.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_master_back_on_another_port_is_reached_there_without_a_restart() {
    let mut cluster = Restartable::start();
    let url = cluster.url();
    let prefix = unique_prefix("moved");
    let limiter = driver(&url, &prefix);
    let counter = facade(&url, &prefix);
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(60));
    // A seed that is not the node moved: the URL still names its old port.
    let master = cluster.node_of("{k}");
    counted_once(&limiter, &counter, &cfg).await;
    let new_port = cluster.move_node(master);
    assert_eq!(cluster.node_of("{k}"), new_port);
    let back = Instant::now();
    let give_up = Duration::from_secs(8);
    decided_again(
        &limiter,
        &counter,
        back,
        give_up,
        "the node answered at its new port",
    )
    .await;
    assert_eq!(
        driver_burst(&url, &prefix, "{k}fresh", 10, 10, 20).await,
        20
    );
}

// ------------------------------------------------ a refused cluster URL --

// `RedisUrlError::url` is "the URL (or the part of a list) that was
// refused, its credentials hidden", and its message quotes it. A
// `redis+cluster://` URL whose password holds a comma is cut into seeds at
// that comma; the refused piece is the username and the password's head,
// which no `@` follows: it is shown as its scheme alone (it showed
// "redis://app:pa", the username and the password's head).
#[test]
fn a_refused_cluster_seed_never_shows_part_of_a_password() {
    for raw in [
        "redis+cluster://app:pa,s3cret@a:7000",
        "redis+cluster://app:pa,s3cret@a:7000,b:7001",
        "rediss+cluster://:pa,s3cret@a:7000",
    ] {
        let error = RedisConfig::from_url(raw).unwrap_err();
        let shown = format!("{error} / {error:?}");
        assert!(
            !shown.contains(":pa") && !shown.contains("s3cret"),
            "{raw}: {shown}"
        );
    }
}

// ------------------------------------------- a cluster formed after boot --

// The application starts before its cluster is formed (the nodes answer,
// but hold no slots yet: a deployment that starts everything at once).
// Calls fail meanwhile, within their deadline; once every node says
// `cluster_state:ok`, the driver and the facade made before decide within
// a few deadlines, as the guide says of a Redis that starts after boot
// ("the first one after Redis answers is decided").
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_formed_after_the_first_calls_is_decided_on_once_it_is_ok() {
    let cluster = Restartable::nodes_alone();
    let url = cluster.url();
    let prefix = unique_prefix("formed-late");
    let limiter = driver(&url, &prefix);
    let counter = facade(&url, &prefix);
    let cfg = SlidingWindowConfig::new(5, Duration::from_secs(60));
    let deadline = CONNECT + RESPONSE;
    for _ in 0..3 {
        let began = Instant::now();
        assert!(limiter.acquire("{k}", &cfg).await.is_err());
        assert!(counter.increment_if_below("{k}", 60, 1, 5).await.is_err());
        assert!(began.elapsed() <= 2 * deadline, "{:?}", began.elapsed());
    }
    cluster.create();
    let ok = Instant::now();
    let give_up = Duration::from_secs(10);
    decided_again(&limiter, &counter, ok, give_up, "the cluster was ok").await;
    for key in ["a", "b", "c", "d", "e", "f"] {
        assert!(limiter.acquire(key, &cfg).await.unwrap().allowed, "{key}");
        assert!(
            counter
                .increment_if_below(key, 60, 1, 5)
                .await
                .unwrap()
                .counted,
            "{key}"
        );
    }
}

// One node of a cluster given as one URL that asks for RESP3 is refused at
// boot as over RESP2: its `INFO cluster` answer comes in RESP3's form.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_node_of_a_cluster_over_resp3_refuses_boot() {
    let cluster = RedisCluster::start(3);
    let one = format!("redis://127.0.0.1:{}/?protocol=resp3", cluster.ports()[0]);
    let env = suprnova::config::Env::from_pairs([
        ("APP_ENV", "production"),
        ("RATE_LIMIT_DRIVER", "redis"),
        ("RATE_LIMIT_REDIS_URL", one.as_str()),
    ]);
    let app = suprnova::container::App::new();
    let refused = app
        .scope(suprnova::bootstrap::bootstrap(&env))
        .await
        .map_err(|e| e.to_string());
    let error = refused.expect_err("one node of a cluster");
    assert!(error.contains("is one node of a Redis Cluster"), "{error}");
}
