//! What a process meets when its Redis connection, rather than Redis, goes
//! wrong, and how it comes back by itself, without a restart:
//!
//! - a connection whose peer falls silent (the Redis host vanished, a NAT or
//!   a load balancer dropped the flow): the call that finds no answer in
//!   time fails, and the next one runs on a new connection;
//! - a failover behind one address (a DNS name now leading to the new
//!   primary, while the open connection reaches the demoted one, which
//!   answers `READONLY`): the next call runs on a new connection;
//! - a refused password (a rotation done in the wrong order): once Redis
//!   takes it, the next call connects with it;
//! - a Redis restart: the first call after it, which finds its connection
//!   dropped, is sent again on a new one and decided.
//!
//! And a request counted against several buckets that one of them refuses
//! is 429 under either backend-error policy, even when another bucket's
//! call failed.
//!
//! Every Redis here is a `redis-server` the test starts; the silent
//! connection is made by a relay on 127.0.0.1 in front of it.
#![cfg(feature = "redis")]

mod support;
mod throttle_support;

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http_body_util::Full;
use support::proxy::Relay;
use support::redis::{RedisServer, free_port, raw_command};
use support::unique_prefix;
use suprnova::HttpResponse;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{
    BackendErrorPolicy, RateLimitError, RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig,
};
use suprnova::redis_client::{RedisConfig, RedisConnection};
use suprnova::server::handle_request_with_peer;
use throttle_support::ok_routes;

/// 200 ms to connect and 200 ms to answer: a deadline of 400 ms.
fn short(url: &str) -> RedisConfig {
    RedisConfig::from_url(url)
        .unwrap()
        .with_timeouts(Duration::from_millis(200), Duration::from_millis(200))
}

fn limiter_on(url: &str, name: &str) -> RedisRateLimiter {
    RedisRateLimiter::new(RedisConnection::new(short(url)).unwrap())
        .with_prefix(unique_prefix(name))
}

/// A cache store on `url` under `prefix`, with short timeouts.
fn store_on(url: &str, prefix: &str) -> suprnova::cache::RedisStore {
    suprnova::cache::RedisStore::new(RedisConnection::new(short(url)).unwrap())
        .with_prefix(prefix.to_owned())
}

/// A container whose throttles count in a cache store on `url`.
fn throttle_app_on(url: &str, prefix: &str) -> suprnova::container::App {
    throttle_support::limiter_app(Arc::new(store_on(url, prefix)), suprnova::clock::system())
}

/// Two routers counting `limits`: `/open` fails open, `/closed` closed.
fn open_and_closed(
    limits: impl Fn() -> Vec<suprnova::Limit>,
) -> (suprnova::Router, suprnova::Router) {
    use suprnova::ThrottleRequestsMiddleware;
    let open = ok_routes(&["/open"]).middleware(ThrottleRequestsMiddleware::with_limits(limits()));
    let closed = ok_routes(&["/closed"]).middleware(
        ThrottleRequestsMiddleware::with_limits(limits())
            .on_backend_error(BackendErrorPolicy::FailClosed),
    );
    (open, closed)
}

/// A response's `Retry-After`, in seconds.
fn retry_after(response: &HttpResponse) -> u64 {
    response
        .header_str("retry-after")
        .expect("a Retry-After")
        .parse()
        .unwrap()
}

/// A three-master cluster whose nodes count a stopped master as healthy
/// for a minute.
fn patient_cluster() -> support::redis::RedisCluster {
    let cluster = support::redis::RedisCluster::start(3);
    for port in cluster.ports() {
        let set = raw_command(port, "CONFIG SET cluster-node-timeout 60000").unwrap();
        assert!(set.starts_with("+OK"), "{set}");
    }
    cluster
}

fn per_minute(n: u32) -> SlidingWindowConfig {
    SlidingWindowConfig::new(n, Duration::from_secs(60))
}

/// Whether `limiter` admits a call on `key` (100 a minute); a failed call
/// fails the test.
async fn admits(limiter: &RedisRateLimiter, key: &str) -> bool {
    limiter
        .acquire(key, &per_minute(100))
        .await
        .unwrap()
        .allowed
}

/// The outcomes of `limiter`'s calls, one every 50 ms, until one is decided
/// or `limit` has passed: the errors, then the decision.
async fn until_decided(
    limiter: &RedisRateLimiter,
    limit: Duration,
) -> (Vec<RateLimitError>, Option<bool>) {
    let started = Instant::now();
    let mut errors = Vec::new();
    while started.elapsed() < limit {
        match limiter.acquire("k", &per_minute(100)).await {
            Ok(decision) => return (errors, Some(decision.allowed)),
            Err(error) => errors.push(error),
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    (errors, None)
}

#[tokio::test]
async fn a_connection_that_falls_silent_is_replaced_after_the_call_that_timed_out() {
    let server = RedisServer::start();
    let relay = Relay::start(server.port()).await;
    let limiter = limiter_on(&relay.url(), "silent");
    assert!(admits(&limiter, "k").await);

    relay.fall_silent();
    let (errors, decided) = until_decided(&limiter, Duration::from_secs(10)).await;
    // One call waits out its deadline on the silent connection; the next
    // connects anew through the relay and is decided.
    assert_eq!(decided, Some(true), "{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    assert!(
        matches!(errors[0], RateLimitError::Timeout(_)),
        "{errors:?}"
    );
    // Both hits are in the one bucket on Redis.
    let count = server.command(&format!("ZCARD {}k", limiter.prefix()));
    assert_eq!(count.trim(), ":2");
}

#[tokio::test]
async fn after_a_failover_behind_one_address_the_next_call_reaches_the_new_primary() {
    let old_primary = RedisServer::start();
    let new_primary = RedisServer::start();
    let endpoint = Relay::start(old_primary.port()).await;
    let limiter = limiter_on(&endpoint.url(), "failover");
    assert!(admits(&limiter, "k").await);

    // The old primary becomes a replica of the new one, and the address
    // leads to the new primary from now on.
    let demoted = old_primary.command(&format!("REPLICAOF 127.0.0.1 {}", new_primary.port()));
    assert!(demoted.starts_with("+OK"), "{demoted}");
    endpoint.retarget(new_primary.port());

    let (errors, decided) = until_decided(&limiter, Duration::from_secs(10)).await;
    assert_eq!(decided, Some(true), "{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
    let refusal = errors[0].to_string();
    assert!(refusal.contains("ReadOnly"), "{refusal}");
    // The hit was counted on the new primary (the first stayed with the old
    // one, which now copies the new one's data).
    let count = new_primary.command(&format!("ZCARD {}k", limiter.prefix()));
    assert_eq!(count.trim(), ":1");
}

#[tokio::test]
async fn a_refused_password_is_tried_again_once_redis_takes_it() {
    let server = RedisServer::start();
    // A rotation in the wrong order: the application has the new password
    // before Redis does.
    let user = server.command("ACL SETUSER app on >old-secret ~* +@all");
    assert!(user.starts_with("+OK"), "{user}");
    let url = format!("redis://app:new-secret@127.0.0.1:{}", server.port());
    let limiter = limiter_on(&url, "acl");
    let refused = limiter.acquire("k", &per_minute(100)).await.unwrap_err();
    assert!(
        refused.to_string().contains("AuthenticationFailed"),
        "{refused}"
    );

    let rotated = server.command("ACL SETUSER app >new-secret");
    assert!(rotated.starts_with("+OK"), "{rotated}");
    // The refusal is answered for 250 ms after it came, then tried again.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (errors, decided) = until_decided(&limiter, Duration::from_secs(10)).await;
    assert_eq!(decided, Some(true), "{errors:?}");
    assert!(errors.is_empty(), "{errors:?}");
}

#[tokio::test]
async fn the_first_request_after_a_restart_is_decided() {
    let mut server = RedisServer::start();
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(limiter_on(&server.url(), "restart"));
    let router = ok_routes(&["/login"]).middleware(
        RateLimitMiddleware::new(driver, per_minute(5), |_req| "login".to_owned())
            .on_backend_error(BackendErrorPolicy::FailClosed),
    );
    let get = || async {
        let request = http::Request::get("/login")
            .body(Full::<Bytes>::default())
            .unwrap();
        let peer: SocketAddr = "203.0.113.5:40000".parse().unwrap();
        handle_request_with_peer(&router, request, peer).await
    };
    assert_eq!(get().await.status_code(), 200);

    server.restart();
    assert!(server.command("PING").starts_with("+PONG"));
    let first: HttpResponse = get().await;
    assert_eq!(
        (
            first.status_code(),
            first.header_str("x-ratelimit-remaining")
        ),
        (200, Some("4")),
        "{}",
        first.body_text()
    );
}

/// A decision whose reply is lost with its connection is sent again, and
/// may count twice; a decrement is not sent again, so it never takes back
/// more than it was asked to (which would admit more than the limit).
#[tokio::test]
async fn a_lost_reply_is_sent_again_for_a_decision_and_never_for_a_decrement() {
    use suprnova::limiter::CacheRateLimiter;
    let server = RedisServer::start();
    let relay = Relay::start(server.port()).await;
    let store = store_on(&relay.url(), &unique_prefix("lost"));
    let limiter = CacheRateLimiter::new(Arc::new(store), suprnova::clock::system());
    for _ in 0..3 {
        limiter.hit("k", 60).await.unwrap();
    }
    relay.lose_next_reply();
    let decremented = limiter.decrement("k", 60, 1).await;
    assert!(decremented.is_err(), "{decremented:?}");
    // Redis ran it once: one attempt taken back, not two.
    assert_eq!(limiter.attempts("k").await.unwrap(), 2);

    let driver = limiter_on(&relay.url(), "lost-decision");
    assert!(admits(&driver, "k").await);
    relay.lose_next_reply();
    // Sent again on a new connection and decided; the lost run counted too.
    assert!(admits(&driver, "k").await);
    let count = server.command(&format!("ZCARD {}k", driver.prefix()));
    assert_eq!(count.trim(), ":3");
}

/// The nodes of a cluster reached only through relays: each node announces
/// its relay's port, so that the client never connects to it directly.
struct RelayedCluster {
    nodes: Vec<std::process::Child>,
    relays: Vec<Relay>,
    /// The nodes' own ports, each behind the relay of the same index.
    ports: Vec<u16>,
    dir: std::path::PathBuf,
}

impl RelayedCluster {
    async fn start() -> Self {
        let dir = std::env::temp_dir().join(format!("suprnova-relayed-{}", unique_prefix("c")));
        std::fs::create_dir_all(&dir).unwrap();
        let mut cluster = Self {
            nodes: Vec::new(),
            relays: Vec::new(),
            ports: Vec::new(),
            dir,
        };
        let mut ports = Vec::new();
        while ports.len() < 3 {
            let port = free_port();
            if !ports
                .iter()
                .any(|&p: &u16| p.abs_diff(port) == 10000 || p == port)
            {
                ports.push(port);
            }
        }
        for &port in &ports {
            let relay = Relay::start(port).await;
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "5000"])
                .args(["--cluster-config-file", &format!("nodes-{port}.conf")])
                .args(["--cluster-announce-ip", "127.0.0.1"])
                .args(["--cluster-announce-port", &relay_port(&relay).to_string()])
                .args(["--cluster-announce-bus-port", &(port + 10000).to_string()])
                .args(["--dir", cluster.dir.to_str().unwrap()])
                .args(["--logfile", &format!("redis-{port}.log")])
                .stdout(Stdio::null())
                .spawn()
                .expect("start redis-server");
            cluster.nodes.push(child);
            cluster.relays.push(relay);
        }
        for &port in &ports {
            wait_for(|| raw_command(port, "PING").is_some_and(|r| r.starts_with("+PONG"))).await;
        }
        let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
        let created = tokio::task::spawn_blocking(move || {
            Command::new("redis-cli")
                .args(["--cluster", "create"])
                .args(&addresses)
                .args(["--cluster-replicas", "0", "--cluster-yes"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .status()
                .expect("run redis-cli --cluster create")
                .success()
        })
        .await
        .unwrap();
        assert!(created, "redis-cli --cluster create failed");
        cluster.ports = ports.clone();
        for &port in &ports {
            wait_for(|| {
                raw_command(port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"))
            })
            .await;
        }
        cluster
    }

    /// A key, under `prefix`, that the node behind relay `index` holds.
    fn key_held_by(&self, index: usize, prefix: &str) -> String {
        (0..1_000)
            .map(|i| format!("k{i}"))
            .find(|key| {
                raw_command(self.ports[index], &format!("GET {prefix}{key}"))
                    .is_some_and(|reply| !reply.starts_with("-MOVED"))
            })
            .expect("a key in 1,000 on every master")
    }

    fn url(&self) -> String {
        self.relays
            .iter()
            .map(Relay::url)
            .collect::<Vec<_>>()
            .join(",")
    }
}

fn relay_port(relay: &Relay) -> u16 {
    relay.url().rsplit(':').next().unwrap().parse().unwrap()
}

async fn wait_for(mut ready: impl FnMut() -> bool) {
    support::within("a cluster node", Duration::from_secs(20), async {
        while !ready() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await;
}

impl Drop for RelayedCluster {
    fn drop(&mut self) {
        for node in &mut self.nodes {
            let _ = node.kill();
            let _ = node.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_whose_connections_fall_silent_connects_again() {
    let cluster = RelayedCluster::start().await;
    let limiter = limiter_on(&cluster.url(), "cluster-silent");
    for key in ["a", "b", "c", "d", "e"] {
        assert!(admits(&limiter, key).await);
    }
    for relay in &cluster.relays {
        relay.fall_silent();
    }
    let (errors, decided) = until_decided(&limiter, Duration::from_secs(10)).await;
    assert_eq!(decided, Some(true), "{errors:?}");
    assert_eq!(errors.len(), 1, "{errors:?}");
}

// One node's connection falls silent (a NAT dropped its flow) while the
// others answer: the silent node's key times out until a new connection,
// made in the background, is in place; the other node's key is decided
// throughout.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_silent_node_among_answering_ones_is_connected_again() {
    let cluster = RelayedCluster::start().await;
    let prefix = unique_prefix("one-silent");
    let limiter = RedisRateLimiter::new(RedisConnection::new(short(&cluster.url())).unwrap())
        .with_prefix(&prefix);
    let (silent_key, other_key) = (
        cluster.key_held_by(0, &prefix),
        cluster.key_held_by(1, &prefix),
    );
    assert!(admits(&limiter, &silent_key).await);
    assert!(admits(&limiter, &other_key).await);
    cluster.relays[0].fall_silent();
    let started = Instant::now();
    let mut timeouts = 0;
    loop {
        assert!(
            admits(&limiter, &other_key).await,
            "after {timeouts} timeouts"
        );
        match limiter.acquire(&silent_key, &per_minute(100)).await {
            Ok(decision) => {
                assert!(decision.allowed);
                break;
            }
            Err(error) => {
                assert!(matches!(error, RateLimitError::Timeout(_)), "{error:?}");
                timeouts += 1;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "{timeouts} timeouts"
        );
    }
    // The first timeout starts the new connection, which is in place a
    // few milliseconds later, before or just after the next call.
    assert!((1..=2).contains(&timeouts), "{timeouts} timeouts");
}

// One master hangs (stopped) while the cluster still counts it healthy:
// calls on its keys time out, two at once, and calls on the other masters'
// keys go on being decided (a new connection that waited on the hung
// master used to be put in place at once, and every key waited on it).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_master_does_not_stop_decisions_on_the_others() {
    let cluster = patient_cluster();
    let prefix = unique_prefix("hung-master");
    let limiter = RedisRateLimiter::new(RedisConnection::new(short(&cluster.url())).unwrap())
        .with_prefix(&prefix);
    let mut key_of_node = std::collections::BTreeMap::new();
    for i in 0..100 {
        let key = format!("k{i}");
        key_of_node
            .entry(cluster.node_of(&format!("{prefix}{key}")))
            .or_insert(key);
    }
    let mut nodes = key_of_node.into_iter();
    let (_, healthy_key) = nodes.next().unwrap();
    let (hung, hung_key) = nodes.next().unwrap();
    assert!(admits(&limiter, &healthy_key).await);
    assert!(admits(&limiter, &hung_key).await);
    let pid = cluster.pid_of(hung);
    assert!(support::signal(pid, "STOP"));
    let _resume = support::Resume(pid);
    let limit = per_minute(100);
    let on_hung = tokio::join!(
        limiter.acquire(&hung_key, &limit),
        limiter.acquire(&hung_key, &limit),
    );
    for call in [on_hung.0, on_hung.1] {
        assert!(matches!(call, Err(RateLimitError::Timeout(_))), "{call:?}");
    }
    for call in 0..4 {
        let decided = limiter.acquire(&healthy_key, &per_minute(100)).await;
        assert!(
            matches!(decided, Ok(ref d) if d.allowed),
            "call {call}: {decided:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

// A throttle's full bucket on a cluster whose timer key lives on another
// master than its counter: when the timer's master fails (stopped, or
// killed), the counter's master still says the bucket is full, and the
// answer is 429 under either policy (the timer's error hid it: the policy
// admitted the client, or answered 503), with a whole window to wait.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_bucket_is_429_while_its_timer_master_fails() {
    use suprnova::Limit;
    for signal in ["STOP", "KILL"] {
        let cluster = patient_cluster();
        let prefix = unique_prefix("timer-master");
        let (key, timer_master) = (0..200)
            .map(|i| format!("k{i}"))
            .find_map(|key| {
                let counter = cluster.node_of(&format!("{prefix}{key}"));
                let timer = cluster.node_of(&format!("{prefix}{key}:timer"));
                (counter != timer).then_some((key, timer))
            })
            .expect("a key whose timer lives on another master");
        throttle_app_on(&cluster.url(), &prefix)
            .scope(async {
                let (open, closed) = open_and_closed(|| vec![Limit::per_minute(2).by(key.clone())]);
                let statuses = [
                    get_from(&open, "/open").await.status_code(),
                    get_from(&open, "/open").await.status_code(),
                    get_from(&open, "/open").await.status_code(),
                ];
                assert_eq!(statuses, [200, 200, 429], "{signal}");
                let pid = cluster.pid_of(timer_master);
                assert!(support::signal(pid, signal));
                let _resume = support::Resume(pid);
                for (router, path) in [(&open, "/open"), (&closed, "/closed")] {
                    let refused = get_from(router, path).await;
                    assert_eq!(
                        refused.status_code(),
                        429,
                        "{signal} {path}: {}",
                        refused.body_text()
                    );
                    assert_eq!(refused.header_str("x-ratelimit-remaining"), Some("0"));
                    // A whole window from the count's start, in whole seconds
                    // of a clock that may have passed a second since.
                    let wait = retry_after(&refused);
                    assert!((59..=60).contains(&wait), "{signal} {path}: {wait}");
                }
            })
            .await;
    }
}

// ---- over quota is 429 whatever another bucket's call did -------------------

/// Makes `key` a hash, so that every string or sorted-set command on it
/// fails (`WRONGTYPE`): a call that fails while Redis answers the others.
fn break_key(server: &RedisServer, key: &str) {
    server.command(&format!("DEL {key}"));
    let broken = server.command(&format!("HSET {key} x 1"));
    assert!(broken.starts_with(':'), "{broken}");
}

async fn get_from(router: &suprnova::Router, path: &str) -> HttpResponse {
    let request = http::Request::get(path)
        .body(Full::<Bytes>::default())
        .unwrap();
    let peer: SocketAddr = "203.0.113.5:40000".parse().unwrap();
    handle_request_with_peer(router, request, peer).await
}

#[tokio::test]
async fn a_throttle_over_one_limit_refuses_when_another_limits_count_cannot_be_read() {
    use suprnova::Limit;
    let server = RedisServer::start();
    let prefix = unique_prefix("wrongtype");
    throttle_app_on(&server.url(), &prefix)
        .scope(async {
            let (open, closed) = open_and_closed(|| {
                vec![Limit::per_minute(1).by("a"), Limit::per_minute(100).by("b")]
            });
            assert_eq!(get_from(&open, "/open").await.status_code(), 200);
            break_key(&server, &format!("{prefix}b"));
            for (router, path) in [(&open, "/open"), (&closed, "/closed")] {
                let refused = get_from(router, path).await;
                assert_eq!(
                    refused.status_code(),
                    429,
                    "{path}: {}",
                    refused.body_text()
                );
                assert_eq!(refused.header_str("x-ratelimit-limit"), Some("1"), "{path}");
                // The full bucket's own wait: its minute, less the moment since
                // its hit (whole seconds, as Laravel counts them).
                let wait = retry_after(&refused);
                assert!((59..=60).contains(&wait), "{path}: Retry-After {wait}");
            }
            // With no limit full, the failure goes to the policy.
            let (open, closed) = open_and_closed(|| {
                vec![Limit::per_minute(5).by("c"), Limit::per_minute(100).by("b")]
            });
            assert_eq!(get_from(&open, "/open").await.status_code(), 200);
            assert_eq!(get_from(&closed, "/closed").await.status_code(), 503);
        })
        .await;
}

#[tokio::test]
async fn a_driver_bucket_that_refuses_decides_when_another_buckets_call_fails() {
    use suprnova::rate_limit::identity_key;
    let server = RedisServer::start();
    let limiter = limiter_on(&server.url(), "ambiguous");
    let prefix = limiter.prefix().to_owned();
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(limiter);
    let route = |policy| {
        ok_routes(&["/reset"]).middleware(
            RateLimitMiddleware::new(driver.clone(), per_minute(1), |req| {
                identity_key(req, "email", "reset")
            })
            .on_backend_error(policy),
        )
    };
    let (open, closed) = (
        route(BackendErrorPolicy::FailOpen),
        route(BackendErrorPolicy::FailClosed),
    );
    // a@x's bucket is full; b@x's cannot be counted.
    assert_eq!(get_from(&open, "/reset?email=a@x").await.status_code(), 200);
    let bucket_b = identity_key(
        &suprnova::Request::new(
            http::Request::get("/reset?email=b@x")
                .body(String::new())
                .unwrap(),
        ),
        "email",
        "reset",
    );
    break_key(&server, &format!("{prefix}{bucket_b}"));
    // A request naming both is counted against each one's bucket.
    for router in [&open, &closed] {
        let refused = get_from(router, "/reset?email=a@x&email=b@x").await;
        assert_eq!(refused.status_code(), 429, "{}", refused.body_text());
    }
    // Naming only b@x, the failure goes to the policy.
    assert_eq!(get_from(&open, "/reset?email=b@x").await.status_code(), 200);
    assert_eq!(
        get_from(&closed, "/reset?email=b@x").await.status_code(),
        503
    );
}
