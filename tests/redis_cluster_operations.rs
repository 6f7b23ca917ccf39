//! The sliding-window driver and the cache store on a Redis Cluster that an
//! operator changes while calls are decided: a slot moved from one master
//! to another (`ASK` while it moves, `MOVED` after), a master replaced by
//! its replica, a node added and given a slot, a client whose slot map is
//! out of date, and seeds that do not all answer.
//!
//! Each test decides for a few seconds on keys of one slot, a new key every
//! 150 ms, each with a limit of 5 in a window far longer than the test, so
//! that every key must admit exactly 5 whatever the cluster does meanwhile.
#![cfg(feature = "redis")]

mod support;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http_body_util::Full;
use std::net::SocketAddr;
use support::redis::{RedisCluster, free_port, raw_command};
use support::unique_prefix;
use suprnova::cache::RedisStore;
use suprnova::clock;
use suprnova::limiter::CacheRateLimiter;
use suprnova::rate_limit::redis::RedisRateLimiter;
use suprnova::rate_limit::{RateLimitMiddleware, RateLimiterDriver, SlidingWindowConfig};
use suprnova::redis_client::{RedisConfig, RedisConnection};
use suprnova::server::handle_request_with_peer;
use suprnova::{HttpResponse, Request, Router};

const LIMIT: u32 = 5;
const WINDOW_SECS: u64 = 20;
/// A new key every `PERIOD`.
const PERIOD: Duration = Duration::from_millis(150);
const CONNECT_TIMEOUT: Duration = Duration::from_millis(500);
const RESPONSE_TIMEOUT: Duration = Duration::from_millis(500);

/// One test of this file at a time: each starts its own cluster and times
/// its steps against a machine that is not otherwise loaded.
async fn one_at_a_time() -> tokio::sync::MutexGuard<'static, ()> {
    static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    SERIAL.lock().await
}

// ---------------------------------------------------------------- slots --

fn crc16(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &byte in bytes {
        crc ^= u16::from(byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The cluster slot of `key`, hash tags included.
fn slot_of(key: &str) -> u16 {
    let bytes = key.as_bytes();
    let hashed = bytes
        .iter()
        .position(|&c| c == b'{')
        .and_then(|open| {
            let rest = &bytes[open + 1..];
            let len = rest.iter().position(|&c| c == b'}')?;
            (len > 0).then(|| &rest[..len])
        })
        .unwrap_or(bytes);
    crc16(hashed) % 16384
}

/// `count` names `<stem><n>` whose full key, `prefix + name + suffix`, is in
/// `slot`.
fn names_in_slot(prefix: &str, stem: &str, suffix: &str, slot: u16, count: usize) -> Vec<String> {
    (0_u64..)
        .map(|n| format!("{stem}{n}"))
        .filter(|name| slot_of(&format!("{prefix}{name}{suffix}")) == slot)
        .take(count)
        .collect()
}

// ------------------------------------------------------------- operator --

fn ask(port: u16, command: &str) -> String {
    raw_command(port, command).unwrap_or_else(|| panic!("node {port} did not answer {command}"))
}

fn ok(port: u16, command: &str) {
    let reply = ask(port, command);
    assert!(reply.starts_with("+OK"), "{command} on {port}: {reply}");
}

fn node_id(port: u16) -> String {
    ask(port, "CLUSTER MYID").lines().nth(1).unwrap().to_owned()
}

fn keyslot(port: u16, key: &str) -> u16 {
    ask(port, &format!("CLUSTER KEYSLOT {key}"))
        .trim()
        .trim_start_matches(':')
        .parse()
        .unwrap()
}

fn keys_in_slot(port: u16, slot: u16) -> Vec<String> {
    ask(port, &format!("CLUSTER GETKEYSINSLOT {slot} 1000"))
        .split("\r\n")
        .filter(|line| !line.is_empty() && !line.starts_with('*') && !line.starts_with('$'))
        .map(str::to_owned)
        .collect()
}

/// The master that `port` says holds `slot`.
fn owner_says(port: u16, slot: u16) -> Option<String> {
    let nodes = ask(port, "CLUSTER NODES");
    nodes
        .lines()
        .find(|line| {
            line.contains("master")
                && line.split_whitespace().skip(8).any(|range| {
                    if range.starts_with('[') {
                        return false;
                    }
                    let (low, high) = range.split_once('-').unwrap_or((range, range));
                    let (low, high): (u16, u16) = (low.parse().unwrap(), high.parse().unwrap());
                    (low..=high).contains(&slot)
                })
        })
        .map(|line| line.split_whitespace().next().unwrap().to_owned())
}

/// Moves `slot` from the master on `from` to the one on `to` as
/// `redis-cli --cluster reshard` does, one key at a time, with `step`
/// between the stages so that calls meet each of them: `IMPORTING` and
/// `MIGRATING`, `MIGRATE` of each key, `SETSLOT NODE` on the new owner,
/// the old one, then every other master.
fn move_slot(slot: u16, from: u16, to: u16, masters: &[u16], step: Duration) {
    let (from_id, to_id) = (node_id(from), node_id(to));
    ok(to, &format!("CLUSTER SETSLOT {slot} IMPORTING {from_id}"));
    ok(from, &format!("CLUSTER SETSLOT {slot} MIGRATING {to_id}"));
    std::thread::sleep(step);
    loop {
        let keys = keys_in_slot(from, slot);
        if keys.is_empty() {
            break;
        }
        for key in keys {
            let moved = ask(from, &format!("MIGRATE 127.0.0.1 {to} {key} 0 5000"));
            assert!(
                moved.starts_with("+OK") || moved.starts_with("+NOKEY"),
                "MIGRATE {key}: {moved}"
            );
            std::thread::sleep(step / 10);
        }
    }
    std::thread::sleep(step);
    ok(to, &format!("CLUSTER SETSLOT {slot} NODE {to_id}"));
    std::thread::sleep(step / 2);
    ok(from, &format!("CLUSTER SETSLOT {slot} NODE {to_id}"));
    std::thread::sleep(step / 2);
    for &other in masters {
        if other != from && other != to {
            ok(other, &format!("CLUSTER SETSLOT {slot} NODE {to_id}"));
        }
    }
    wait_until("every master to agree on the slot's owner", || {
        masters
            .iter()
            .chain([&to])
            .all(|&m| owner_says(m, slot).as_deref() == Some(to_id.as_str()))
    });
}

fn wait_until(what: &str, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(
            start.elapsed() < Duration::from_secs(20),
            "timed out waiting for {what}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// One more cluster-enabled `redis-server`, not yet part of any cluster.
struct ExtraNode {
    child: Child,
    port: u16,
    dir: PathBuf,
}

impl ExtraNode {
    fn start() -> Self {
        for attempt in 0..10 {
            let port = free_port();
            let dir = std::env::temp_dir().join(format!(
                "suprnova-redis-extra-{}-{port}-{attempt}",
                std::process::id()
            ));
            std::fs::create_dir_all(&dir).unwrap();
            let mut child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
                .args(["--save", "", "--appendonly", "no", "--protected-mode", "no"])
                .args(["--dir", dir.to_str().unwrap(), "--logfile", "redis.log"])
                .args(["--cluster-enabled", "yes", "--cluster-node-timeout", "2000"])
                .args(["--cluster-config-file", "nodes.conf"])
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            let pid = child.id();
            let start = Instant::now();
            loop {
                if child.try_wait().ok().flatten().is_some() {
                    break;
                }
                if raw_command(port, "INFO server")
                    .is_some_and(|r| r.contains(&format!("process_id:{pid}\r\n")))
                {
                    return Self { child, port, dir };
                }
                assert!(
                    start.elapsed() < Duration::from_secs(10),
                    "redis-server did not answer"
                );
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        panic!("no free port for one more node");
    }

    /// Joins the cluster that `seed` belongs to and waits until every node
    /// of `nodes` knows it.
    fn join(&self, seed: u16, nodes: &[u16]) {
        ok(self.port, &format!("CLUSTER MEET 127.0.0.1 {seed}"));
        let id = node_id(self.port);
        wait_until("the new node to be known", || {
            nodes.iter().chain([&self.port]).all(|&n| {
                let all = ask(n, "CLUSTER NODES");
                all.contains(&id)
                    && all.lines().filter(|l| l.contains("127.0.0.1:")).count() == nodes.len() + 1
                    && !all.contains("handshake")
                    && !all.contains("noaddr")
            }) && ask(self.port, "CLUSTER INFO").contains("cluster_state:ok")
        });
    }
}

impl Drop for ExtraNode {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn role(port: u16) -> String {
    let info = ask(port, "INFO replication");
    info.lines()
        .find_map(|l| l.strip_prefix("role:"))
        .unwrap_or("")
        .trim()
        .to_owned()
}

/// Whether the replica on `replica` has every write of the master on
/// `master`.
fn caught_up(master: u16, replica: u16) -> bool {
    let offset = |port: u16, field: &str| {
        ask(port, "INFO replication")
            .lines()
            .find_map(|l| l.strip_prefix(field).map(|v| v.trim().to_owned()))
    };
    let written = offset(master, "master_repl_offset:");
    written.is_some() && written == offset(replica, "slave_repl_offset:")
}

// ------------------------------------------------------------ deciders --

fn connection(url: &str) -> RedisConnection {
    let config = RedisConfig::from_url(url)
        .unwrap()
        .with_timeouts(CONNECT_TIMEOUT, RESPONSE_TIMEOUT);
    assert!(config.is_cluster(), "{url}");
    RedisConnection::new(config).unwrap()
}

fn driver(url: &str, prefix: &str) -> RedisRateLimiter {
    RedisRateLimiter::new(connection(url)).with_prefix(prefix)
}

fn facade(url: &str, prefix: &str) -> CacheRateLimiter {
    let store = RedisStore::new(connection(url)).with_prefix(prefix);
    CacheRateLimiter::new(Arc::new(store), clock::system())
}

fn window() -> SlidingWindowConfig {
    SlidingWindowConfig::new(LIMIT, Duration::from_secs(WINDOW_SECS))
}

/// One way to decide on a key.
enum Side {
    Driver(RedisRateLimiter),
    /// `throttle`'s count: one attempt under the limit, opening the window.
    Facade(CacheRateLimiter),
    /// A request to a route behind `RateLimitMiddleware` with the driver and
    /// the default backend-error policy, keyed by its path: 200 admitted,
    /// 429 refused.
    Http(Router),
}

impl Side {
    /// Whether the call was admitted; a refusal by the facade that found a
    /// count other than the limit is reported as an error.
    async fn decide(&self, key: &str) -> Result<bool, String> {
        match self {
            Side::Driver(driver) => driver
                .acquire(key, &window())
                .await
                .map(|d| d.allowed)
                .map_err(|e| e.to_string()),
            Side::Facade(facade) => count_once(facade, key).await,
            Side::Http(router) => {
                let request = http::Request::get(format!("/{key}"))
                    .body(Full::<Bytes>::default())
                    .unwrap();
                let peer: SocketAddr = "203.0.113.5:40000".parse().unwrap();
                let response = handle_request_with_peer(router, request, peer).await;
                match response.status_code() {
                    200 => Ok(true),
                    429 => Ok(false),
                    other => Err(format!("{other}: {}", response.body_text())),
                }
            }
        }
    }
}

/// One attempt counted by the facade under [`LIMIT`]; a refusal that found
/// a count other than the limit is an error.
async fn count_once(facade: &CacheRateLimiter, key: &str) -> Result<bool, String> {
    let max = i64::from(LIMIT);
    let outcome = facade
        .increment_if_below(key, WINDOW_SECS as i64, 1, max)
        .await
        .map_err(|e| e.to_string())?;
    if !outcome.counted && outcome.count != max {
        return Err(format!(
            "refused at a count of {} (limit {max})",
            outcome.count
        ));
    }
    Ok(outcome.counted)
}

#[derive(Debug, Default, Clone, Copy)]
struct Counts {
    admitted: u32,
    refused: u32,
}

#[derive(Debug, Default)]
struct Tally {
    keys: BTreeMap<String, Counts>,
    errors: Vec<(Duration, String, String)>,
    slowest: Duration,
    calls: u32,
}

impl Tally {
    /// Every key admitted exactly `min(LIMIT, attempts)`, no call failed,
    /// and none took longer than a call's deadline.
    fn assert_exact(&self, what: &str) {
        for (key, counts) in &self.keys {
            let attempts = counts.admitted + counts.refused;
            let failed: Vec<_> = self.errors.iter().filter(|e| &e.1 == key).collect();
            assert_eq!(
                counts.admitted,
                LIMIT.min(attempts),
                "{what}: {key}: {counts:?}; its failed calls: {failed:?}"
            );
        }
        let first = self.errors.first();
        let last = self.errors.last();
        assert!(
            self.errors.is_empty(),
            "{what}: {} of {} calls failed, from {:?} to {:?} after the start; the first: {first:?}",
            self.errors.len(),
            self.calls,
            first.map(|e| e.0),
            last.map(|e| e.0),
        );
        assert!(
            self.slowest <= CONNECT_TIMEOUT + RESPONSE_TIMEOUT,
            "{what}: a call took {:?}",
            self.slowest
        );
    }
}

/// Decides with each of `sides` (three tasks each, a call every 3 ms, a new
/// key of `names` every [`PERIOD`]) until `operator`, run on a thread of
/// its own, returns; then the tallies, one per side.
async fn decide_while(
    sides: Vec<(Side, Vec<String>)>,
    operator: impl FnOnce() + Send + 'static,
) -> Vec<Tally> {
    let stop = Arc::new(AtomicBool::new(false));
    let start = Instant::now();
    let mut tallies = Vec::new();
    let mut tasks = Vec::new();
    for (side, names) in sides {
        let side = Arc::new(side);
        let names = Arc::new(names);
        let tally = Arc::new(Mutex::new(Tally::default()));
        for _ in 0..3 {
            let (side, names, tally, stop) =
                (side.clone(), names.clone(), tally.clone(), stop.clone());
            tasks.push(tokio::spawn(async move {
                while !stop.load(Ordering::Acquire) {
                    let at = start.elapsed();
                    let index = (at.as_millis() / PERIOD.as_millis()) as usize;
                    let key = &names[index.min(names.len() - 1)];
                    let began = Instant::now();
                    let decided = side.decide(key).await;
                    let took = began.elapsed();
                    {
                        let mut tally = tally.lock().unwrap();
                        tally.calls += 1;
                        tally.slowest = tally.slowest.max(took);
                        match decided {
                            Ok(admitted) => {
                                let counts = tally.keys.entry(key.clone()).or_default();
                                if admitted {
                                    counts.admitted += 1;
                                } else {
                                    counts.refused += 1;
                                }
                            }
                            Err(error) => tally.errors.push((at, key.clone(), error)),
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(3)).await;
                }
            }));
        }
        tallies.push(tally);
    }
    let operated = tokio::task::spawn_blocking(operator).await;
    stop.store(true, Ordering::Release);
    for task in tasks {
        task.await.unwrap();
    }
    if let Err(panic) = operated {
        std::panic::resume_unwind(panic.into_panic());
    }
    tallies
        .into_iter()
        .map(|t| Arc::try_unwrap(t).unwrap().into_inner().unwrap())
        .collect()
}

/// The driver on keys `{hot}:d0`.. and the cache store on `{hot}:f0`..,
/// under `prefix`.
fn both_sides(url: &str, prefix: &str) -> Vec<(Side, Vec<String>)> {
    vec![
        (Side::Driver(driver(url, prefix)), rotating("d")),
        (Side::Facade(facade(url, prefix)), rotating("f")),
    ]
}

fn rotating(stem: &str) -> Vec<String> {
    (0..60).map(|i| format!("{{hot}}:{stem}{i}")).collect()
}

fn unix_now() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs() as i64
}

/// The other masters than `port`, in order.
fn others(cluster: &RedisCluster, port: u16) -> Vec<u16> {
    cluster.ports().into_iter().filter(|&p| p != port).collect()
}

/// The count a key holds on the master `port` itself (no redirect).
fn zcard_on(port: u16, key: &str) -> String {
    ask(port, &format!("ZCARD {key}")).trim().to_owned()
}

// -------------------------------------------------------------- scenarios --

// A slot moved from one master to another while three tasks decide on its
// keys with the sliding-window driver: every key admits exactly its limit
// before, during and after the move, and its hits are on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_while_deciding_keeps_every_limit_exact() {
    let _serial = one_at_a_time().await;
    let cluster = RedisCluster::start(3);
    let prefix = unique_prefix("move-driver");
    let slot = slot_of("hot");
    assert_eq!(
        keyslot(cluster.ports()[0], &format!("{prefix}{{hot}}:x")),
        slot
    );
    let from = cluster.node_of("{hot}");
    let rest = others(&cluster, from);
    let to = rest[0];
    let masters = cluster.ports();
    let names = rotating("d");
    let tallies = decide_while(
        vec![(Side::Driver(driver(&cluster.url(), &prefix)), names)],
        move || {
            std::thread::sleep(Duration::from_millis(600));
            move_slot(slot, from, to, &masters, Duration::from_millis(250));
            std::thread::sleep(Duration::from_millis(600));
        },
    )
    .await;
    let tally = &tallies[0];
    tally.assert_exact("driver");
    assert!(tally.keys.len() >= 10, "{tally:?}");
    for (key, counts) in &tally.keys {
        assert_eq!(
            zcard_on(to, &format!("{prefix}{key}")),
            format!(":{}", counts.admitted),
            "{key}"
        );
        assert_eq!(
            zcard_on(from, &format!("{prefix}{key}")).chars().next(),
            Some('-'),
            "{key} still answered by the old master"
        );
    }
}

// The facade's count (`increment_if_below`, the throttle's step) while the
// slot of the counter `K` moves, and then while the slot of `K:timer`
// moves: one window per key, opened once, counted to its limit exactly,
// refusals finding the limit, and both keys still there afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facade_keeps_one_window_while_the_counter_moves() {
    facade_while_a_slot_moves(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_facade_keeps_one_window_while_the_timer_moves() {
    facade_while_a_slot_moves(true).await;
}

async fn facade_while_a_slot_moves(timer_moves: bool) {
    let _serial = one_at_a_time().await;
    let cluster = RedisCluster::start(3);
    {
        let prefix = unique_prefix("move-facade");
        // A slot of the first master, which the keys' counters (or timers)
        // share, while their partners spread over the cluster.
        let slot = slot_of("hot");
        let from = cluster.node_of("{hot}");
        let suffix = if timer_moves { ":timer" } else { "" };
        let names = names_in_slot(&prefix, "r", suffix, slot, 40);
        assert_eq!(
            keyslot(from, &format!("{prefix}{}{suffix}", names[0])),
            slot
        );
        let limiter = facade(&cluster.url(), &prefix);
        let started = unix_now();
        let to = others(&cluster, from)[1];
        let masters = cluster.ports();
        let tallies = decide_while(vec![(Side::Facade(limiter), names.clone())], move || {
            std::thread::sleep(Duration::from_millis(600));
            move_slot(slot, from, to, &masters, Duration::from_millis(250));
            std::thread::sleep(Duration::from_millis(600));
        })
        .await;
        let ended = unix_now();
        let what = if timer_moves {
            "timer moved"
        } else {
            "counter moved"
        };
        let tally = &tallies[0];
        tally.assert_exact(what);
        assert!(tally.keys.len() >= 10, "{tally:?}");
        let check = facade(&cluster.url(), &prefix);
        for (key, counts) in &tally.keys {
            assert_eq!(
                check.attempts(key).await.unwrap(),
                i64::from(counts.admitted),
                "{what}: {key}"
            );
            // One window, opened by the key's first count.
            let ends_at = timer_of(&cluster.url(), &prefix, key).await;
            assert!(
                ends_at >= started + WINDOW_SECS as i64 && ends_at <= ended + WINDOW_SECS as i64,
                "{what}: {key}: the window ends at {ends_at}, the test ran {started}..={ended}"
            );
        }
    }
}

/// The end of `key`'s window, as its timer holds it.
async fn timer_of(url: &str, prefix: &str, key: &str) -> i64 {
    use suprnova::cache::Store;
    let timer = format!("{key}:timer");
    RedisStore::new(connection(url))
        .with_prefix(prefix)
        .get(&timer)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no timer {timer}"))
        .parse()
        .unwrap()
}

/// Fills `{hot}:before` (the driver) and `{hot}:fbefore` (the cache
/// store) to their limit, under `prefix`; the two that filled them.
async fn fill_before(url: &str, prefix: &str) -> (RedisRateLimiter, CacheRateLimiter) {
    let before_driver = driver(url, prefix);
    let before_facade = facade(url, prefix);
    for _ in 0..LIMIT {
        assert!(
            before_driver
                .acquire("{hot}:before", &window())
                .await
                .unwrap()
                .allowed
        );
        assert!(count_once(&before_facade, "{hot}:fbefore").await.unwrap());
    }
    (before_driver, before_facade)
}

/// The keys `fill_before` filled are still full, with their window open.
async fn still_full(before_driver: &RedisRateLimiter, before_facade: &CacheRateLimiter) {
    assert!(
        !before_driver
            .acquire("{hot}:before", &window())
            .await
            .unwrap()
            .allowed
    );
    assert!(!count_once(before_facade, "{hot}:fbefore").await.unwrap());
    assert_eq!(
        before_facade.attempts("{hot}:fbefore").await.unwrap(),
        i64::from(LIMIT)
    );
    assert!(before_facade.available_in("{hot}:fbefore").await.unwrap() > 0);
}

/// A 3-master cluster and a replica, in sync, of the master holding the
/// slot of `{hot}`; that master's port.
fn cluster_with_a_replica_of_hot() -> (RedisCluster, u16, ExtraNode) {
    let cluster = RedisCluster::start(3);
    let master = cluster.node_of("{hot}");
    let replica = ExtraNode::start();
    replica.join(master, &cluster.ports());
    ok(
        replica.port,
        &format!("CLUSTER REPLICATE {}", node_id(master)),
    );
    wait_until("the replica to be in sync", || {
        ask(replica.port, "INFO replication").contains("master_link_status:up")
    });
    (cluster, master, replica)
}

// The master of a hot slot replaced by its replica (`CLUSTER FAILOVER` on
// the replica) while both sides decide on its keys: decisions go on within
// the call's deadline, no call fails, every key admits exactly its limit,
// and the counts made before the failover are on the new master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failover_to_the_replica_keeps_counts_and_decisions() {
    let _serial = one_at_a_time().await;
    let (cluster, master, replica) = cluster_with_a_replica_of_hot();
    let prefix = unique_prefix("failover");
    let url = cluster.url();
    // Full before the failover, on both sides.
    let (before_driver, before_facade) = fill_before(&url, &prefix).await;
    let replica_port = replica.port;
    wait_until("the replica to hold the counts", || {
        caught_up(master, replica_port)
    });
    let tallies = decide_while(both_sides(&url, &prefix), move || {
        std::thread::sleep(Duration::from_millis(600));
        ok(replica_port, "CLUSTER FAILOVER");
        wait_until("the replica to be the master", || {
            role(replica_port) == "master" && role(master) == "slave"
        });
        std::thread::sleep(Duration::from_millis(900));
    })
    .await;
    tallies[0].assert_exact("driver");
    tallies[1].assert_exact("facade");
    still_full(&before_driver, &before_facade).await;
    for (key, counts) in &tallies[0].keys {
        assert_eq!(
            zcard_on(replica_port, &format!("{prefix}{key}")),
            format!(":{}", counts.admitted),
            "{key}"
        );
    }
}

// A node added to the cluster (`CLUSTER MEET`), then given a hot slot while
// both sides decide on its keys: the keys moved there keep their counts
// and limits, and the new master, which has never run the scripts, runs
// them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slot_moved_to_a_new_node_keeps_counts_and_limits() {
    let _serial = one_at_a_time().await;
    let cluster = RedisCluster::start(3);
    let from = cluster.node_of("{hot}");
    let added = ExtraNode::start();
    added.join(from, &cluster.ports());
    let prefix = unique_prefix("added");
    let url = cluster.url();
    let (before_driver, before_facade) = fill_before(&url, &prefix).await;
    let slot = slot_of("hot");
    let to = added.port;
    let masters = cluster.ports();
    let tallies = decide_while(both_sides(&url, &prefix), move || {
        std::thread::sleep(Duration::from_millis(600));
        move_slot(slot, from, to, &masters, Duration::from_millis(250));
        std::thread::sleep(Duration::from_millis(600));
    })
    .await;
    tallies[0].assert_exact("driver");
    tallies[1].assert_exact("facade");
    assert_eq!(
        zcard_on(to, &format!("{prefix}{{hot}}:before")),
        format!(":{LIMIT}")
    );
    still_full(&before_driver, &before_facade).await;
}

// A client whose slot map is out of date: the slot moved from A to B while
// the client made no call on it, and B is now moving it on to C. The call
// is sent to A (`MOVED` to B), then B sends it on (`ASK` to C): the
// cluster answers, so the call is decided.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_slot_map_meeting_a_slot_on_the_move_is_still_decided() {
    let _serial = one_at_a_time().await;
    let cluster = RedisCluster::start(3);
    let prefix = unique_prefix("stale");
    let url = cluster.url();
    let a = cluster.node_of("{hot}");
    let rest = others(&cluster, a);
    let (b, c) = (rest[0], rest[1]);
    let slot = slot_of("hot");
    let masters = cluster.ports();
    let limiter = driver(&url, &prefix);
    let counter = facade(&url, &prefix);
    // The clients learn the slot map: the slot is on A.
    assert!(limiter.acquire("{hot}:k", &window()).await.unwrap().allowed);
    assert_eq!(count_once(&counter, "{hot}:f").await, Ok(true));
    // Behind its back: A to B, then B starts moving it to C.
    move_slot(slot, a, b, &masters, Duration::ZERO);
    ok(
        c,
        &format!("CLUSTER SETSLOT {slot} IMPORTING {}", node_id(b)),
    );
    ok(
        b,
        &format!("CLUSTER SETSLOT {slot} MIGRATING {}", node_id(c)),
    );
    ok(
        b,
        &format!("MIGRATE 127.0.0.1 {c} {prefix}{{hot}}:k 0 5000"),
    );
    let driver_call = limiter.acquire("{hot}:k", &window()).await;
    let facade_call = count_once(&counter, "{hot}:new").await;
    let driver_decided =
        matches!(&driver_call, Ok(d) if d.allowed && d.remaining == u64::from(LIMIT) - 2);
    assert!(
        driver_decided && facade_call == Ok(true),
        "the driver: {driver_call:?}; the facade: {facade_call:?}"
    );
}

// Seeds that do not all answer: a cluster URL whose first node is down at
// start, and `redis+cluster://` with one seed, decide on keys of every
// master.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_seed_down_at_start_or_one_seed_reaches_every_master() {
    let _serial = one_at_a_time().await;
    let cluster = RedisCluster::start(3);
    let dead = free_port();
    let with_dead_seed = format!("redis://127.0.0.1:{dead},{}", cluster.url());
    let one_seed = format!("redis+cluster://127.0.0.1:{}", cluster.ports()[1]);
    for url in [with_dead_seed, one_seed] {
        let prefix = unique_prefix("seeds");
        let limiter = driver(&url, &prefix);
        let counter = facade(&url, &format!("{prefix}cache:"));
        let keys: Vec<String> = (0..12).map(|i| format!("user:{i}")).collect();
        for key in &keys {
            for left in (0..u64::from(LIMIT)).rev() {
                let d = limiter.acquire(key, &window()).await.unwrap();
                assert_eq!((d.allowed, d.remaining), (true, left), "{url}: {key}");
                let o = counter
                    .increment_if_below(key, WINDOW_SECS as i64, 1, i64::from(LIMIT))
                    .await
                    .unwrap();
                assert!(o.counted, "{url}: {key}");
            }
            assert!(!limiter.acquire(key, &window()).await.unwrap().allowed);
        }
        let holding: std::collections::BTreeSet<u16> = keys
            .iter()
            .map(|k| cluster.node_of(&format!("{prefix}{k}")))
            .collect();
        assert_eq!(holding.len(), 3, "{url}");
    }
}

// A master that crashes, replaced by its replica when the cluster promotes
// it (after `cluster-node-timeout`): calls on its slot fail while no master
// holds it, and once the replica is master they are decided again, within
// a call's deadline, on the counts the replica holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_master_replaced_by_its_replica_decides_again() {
    let _serial = one_at_a_time().await;
    let (cluster, master, replica) = cluster_with_a_replica_of_hot();
    let prefix = unique_prefix("crash");
    let url = cluster.url();
    let limiter = driver(&url, &prefix);
    let counter = facade(&url, &prefix);
    for _ in 0..3 {
        assert!(limiter.acquire("{hot}:k", &window()).await.unwrap().allowed);
        assert_eq!(count_once(&counter, "{hot}:f").await, Ok(true));
    }
    let replica_port = replica.port;
    wait_until("the replica to hold the counts", || {
        caught_up(master, replica_port)
    });
    assert!(support::signal(cluster.pid_of(master), "KILL"));
    let killed = Instant::now();
    let mut promoted: Option<Instant> = None;
    let mut after_promotion = Vec::new();
    let mut decided_after = 0;
    while killed.elapsed() < Duration::from_secs(20) && decided_after < 10 {
        if promoted.is_none() && role(replica_port) == "master" {
            promoted = Some(Instant::now());
        }
        let began = Instant::now();
        let driver_call = limiter.acquire("{hot}:k", &window()).await;
        let facade_call = count_once(&counter, "{hot}:f").await;
        let took = began.elapsed();
        if let Some(at) = promoted {
            let since = at.elapsed();
            match (&driver_call, &facade_call) {
                (Ok(_), Ok(_)) => decided_after += 1,
                _ => after_promotion.push((since, format!("{driver_call:?} / {facade_call:?}"))),
            }
            assert!(took <= 2 * (CONNECT_TIMEOUT + RESPONSE_TIMEOUT), "{took:?}");
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let promoted = promoted.expect("the replica was promoted");
    assert_eq!(
        decided_after, 10,
        "errors after the promotion: {after_promotion:?}"
    );
    // Failures once the replica is master: none past one call's deadline.
    let late: Vec<_> = after_promotion
        .iter()
        .filter(|(since, _)| *since > CONNECT_TIMEOUT + RESPONSE_TIMEOUT)
        .collect();
    assert!(
        late.is_empty(),
        "promoted {:?} after the kill; failures after: {after_promotion:?}",
        promoted - killed
    );
    // The counts made before the crash, and the ones after, all admitted
    // on the new master: 3 + 2 of 5, then refusals.
    assert_eq!(
        zcard_on(replica_port, &format!("{prefix}{{hot}}:k")),
        format!(":{LIMIT}")
    );
    assert_eq!(counter.attempts("{hot}:f").await.unwrap(), i64::from(LIMIT));
}

/// A router whose routes `/<name>` for each of `names` answer "ok" behind
/// `RateLimitMiddleware` on `driver`, one bucket per path (`{hot}:<name>`,
/// all in one slot), with the
/// default backend-error policy.
fn routes(driver: RedisRateLimiter, names: &[String]) -> Router {
    let driver: Arc<dyn RateLimiterDriver> = Arc::new(driver);
    names
        .iter()
        .fold(Router::new(), |router, name| {
            router.get(&format!("/{name}"), |_req: Request| async {
                HttpResponse::text("ok")
            })
        })
        .middleware(RateLimitMiddleware::new(
            driver,
            window(),
            |req: &Request| format!("{{hot}}:{}", req.path().trim_start_matches('/')),
        ))
}

// The same move, seen by requests to a route limited by the driver with the
// default policy: each path's limit of 5 lets exactly 5 through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_lets_exactly_its_limit_through_while_its_slot_moves() {
    let _serial = one_at_a_time().await;
    let cluster = RedisCluster::start(3);
    let prefix = unique_prefix("move-http");
    let slot = slot_of("hot");
    let from = cluster.node_of("{hot}");
    let to = others(&cluster, from)[0];
    let masters = cluster.ports();
    let names: Vec<String> = (0..60).map(|i| format!("h{i}")).collect();
    let router = routes(driver(&cluster.url(), &prefix), &names);
    let tallies = decide_while(vec![(Side::Http(router), names)], move || {
        std::thread::sleep(Duration::from_millis(600));
        move_slot(slot, from, to, &masters, Duration::from_millis(250));
        std::thread::sleep(Duration::from_millis(600));
    })
    .await;
    tallies[0].assert_exact("route");
}

/// One node of a Redis Cluster given as a single URL answers `MOVED` for a
/// key of another node's slot, and keeps answering it: the call fails at
/// once with Redis's answer, as it did, and is not sent again until its
/// deadline to fail as a timeout.
#[cfg(feature = "redis")]
#[tokio::test]
async fn a_single_node_that_answers_moved_fails_at_once_with_its_answer() {
    use std::time::{Duration, Instant};
    use suprnova::redis_client::{RedisBackendError, RedisConfig, RedisConnection};

    let cluster = support::redis::RedisCluster::start(3);
    let ports = cluster.ports();
    let key = (0..1000)
        .map(|i| format!("k{i}"))
        .find(|key| cluster.node_of(key) != ports[0])
        .unwrap();
    let mut config = RedisConfig::from_url(&format!("redis://127.0.0.1:{}", ports[0])).unwrap();
    config.connect_timeout = Duration::from_millis(500);
    config.response_timeout = Duration::from_millis(500);
    let conn = RedisConnection::new(config).unwrap();
    let started = Instant::now();
    let answer = conn
        .query::<Option<String>>(redis::cmd("GET").arg(&key))
        .await;
    let took = started.elapsed();
    let error = answer.unwrap_err();
    assert!(
        !matches!(error, RedisBackendError::Timeout(_)),
        "MOVED reported as {error}"
    );
    assert!(
        matches!(&error, RedisBackendError::Redis(e)
            if e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::Moved)),
        "{error}"
    );
    assert!(took < Duration::from_millis(300), "took {took:?}");
}
