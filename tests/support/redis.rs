//! Real `redis-server` processes for tests: one node, or a cluster of nodes,
//! on free loopback ports, with no persistence, stopped on drop.
//!
//! These never touch the machine's own Redis on 6379. A missing
//! `redis-server` binary fails the test with a message; it never skips.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

static SEQ: AtomicU32 = AtomicU32::new(0);

fn scratch_dir(port: u16) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "suprnova-redis-{}-{}-{}",
        std::process::id(),
        port,
        SEQ.fetch_add(1, Ordering::SeqCst)
    ));
    std::fs::create_dir_all(&dir).expect("create a scratch directory for redis-server");
    dir
}

/// A port that is free now on 127.0.0.1, and whose cluster bus port
/// (port + 10000) is free too.
pub fn free_port() -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind an ephemeral port");
        let port = listener.local_addr().unwrap().port();
        if port < 55000 && TcpListener::bind(("127.0.0.1", port + 10000)).is_ok() {
            return port;
        }
    }
}

/// `count` distinct free ports for the nodes of a cluster, none of them
/// another's bus port (port + 10000).
fn cluster_ports(count: usize) -> Vec<u16> {
    let mut ports: Vec<u16> = Vec::with_capacity(count);
    while ports.len() < count {
        let port = free_port();
        let clashes = ports
            .iter()
            .any(|&p| p == port || p + 10000 == port || port + 10000 == p);
        if !clashes {
            ports.push(port);
        }
    }
    ports
}

/// Sends one inline command and returns the raw reply (first read).
pub fn raw_command(port: u16, command: &str) -> Option<String> {
    let mut stream =
        TcpStream::connect_timeout(&([127, 0, 0, 1], port).into(), Duration::from_millis(200))
            .ok()?;
    stream
        .set_read_timeout(Some(Duration::from_millis(500)))
        .ok()?;
    stream.write_all(format!("{command}\r\n").as_bytes()).ok()?;
    let mut buf = vec![0_u8; 64 * 1024];
    let n = stream.read(&mut buf).ok()?;
    Some(String::from_utf8_lossy(&buf[..n]).into_owned())
}

/// Whether the server that answers on `port` is the process `pid`, and not
/// another test's server that took the port between `free_port` and the
/// spawn.
fn answers_as(port: u16, pid: u32) -> bool {
    raw_command(port, "INFO server")
        .is_some_and(|reply| reply.contains(&format!("process_id:{pid}\r\n")))
}

fn wait_until(what: &str, limit: Duration, mut ready: impl FnMut() -> bool) {
    let start = Instant::now();
    while !ready() {
        assert!(start.elapsed() < limit, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn spawn_redis(port: u16, dir: &std::path::Path, extra: &[&str]) -> Child {
    let mut cmd = Command::new("redis-server");
    cmd.args([
        "--port",
        &port.to_string(),
        "--bind",
        // And ::1 where the machine has it (the `-`: skipped where not).
        "127.0.0.1",
        "-::1",
        "--save",
        "",
        "--appendonly",
        "no",
        "--protected-mode",
        "no",
        "--dir",
        dir.to_str().unwrap(),
        "--logfile",
        "redis.log",
    ])
    .args(extra)
    .stdout(Stdio::null())
    .stderr(Stdio::null());
    cmd.spawn().unwrap_or_else(|e| {
        panic!(
            "could not start redis-server ({e}); install it (apt-get install redis-server) — Redis tests never skip"
        )
    })
}

/// The file name of a server's Unix socket in its scratch directory.
const SOCKET: &str = "redis.sock";

/// One `redis-server` on a free loopback port and on a Unix socket.
pub struct RedisServer {
    child: Option<Child>,
    port: u16,
    dir: PathBuf,
}

impl RedisServer {
    /// Starts a server and waits until it answers. A port that another
    /// process takes between [`free_port`] and the spawn makes the server
    /// exit at once; the next free port is tried then.
    pub fn start() -> Self {
        for _ in 0..10 {
            let port = free_port();
            let dir = scratch_dir(port);
            let mut server = Self {
                child: None,
                port,
                dir,
            };
            if server.launch() {
                return server;
            }
        }
        panic!("redis-server found no free loopback port in 10 tries");
    }

    /// The port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `redis://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// `unix://<scratch directory>/redis.sock`: the same server over its
    /// Unix socket.
    pub fn socket_url(&self) -> String {
        format!("unix://{}", self.dir.join(SOCKET).display())
    }

    /// Kills the server (as a crash would) and waits until the port is closed.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        wait_until("redis-server to stop", Duration::from_secs(5), || {
            TcpStream::connect(("127.0.0.1", self.port)).is_err()
        });
    }

    /// Starts the server again on the same port (empty: nothing persists).
    pub fn restart(&mut self) {
        self.stop();
        assert!(
            self.launch(),
            "redis-server did not start again on port {}: the port was taken",
            self.port
        );
    }

    /// Spawns the server on its port and waits until it answers as itself;
    /// `false` if it exited first, as it does when the port is taken.
    fn launch(&mut self) -> bool {
        let socket = self.dir.join(SOCKET);
        let socket = socket.to_str().unwrap();
        let child = spawn_redis(
            self.port,
            &self.dir,
            &["--unixsocket", socket, "--unixsocketperm", "700"],
        );
        let (pid, port) = (child.id(), self.port);
        let child = self.child.insert(child);
        let mut exited = false;
        wait_until("redis-server to answer", Duration::from_secs(10), || {
            exited = child.try_wait().ok().flatten().is_some();
            exited || answers_as(port, pid)
        });
        if exited {
            self.child = None;
        }
        !exited
    }

    /// Runs an inline command and returns the raw reply.
    pub fn command(&self, command: &str) -> String {
        raw_command(self.port, command).unwrap_or_default()
    }

    /// The commands that clients (not scripts) sent while `run` ran, as
    /// `MONITOR` shows them: lower-case names, in order. Each is one
    /// request a client made of Redis.
    pub async fn commands_sent_during<F: std::future::Future<Output = ()>>(
        &self,
        run: F,
    ) -> Vec<String> {
        self.monitor_during(run, false).await
    }

    /// The commands that scripts ran while `run` ran, as `MONITOR` shows
    /// them: lower-case names, in order.
    pub async fn script_commands_during<F: std::future::Future<Output = ()>>(
        &self,
        run: F,
    ) -> Vec<String> {
        self.monitor_during(run, true).await
    }

    /// The commands `MONITOR` shows while `run` runs: those of scripts when
    /// `scripts`, else those of clients.
    async fn monitor_during<F: std::future::Future<Output = ()>>(
        &self,
        run: F,
        scripts: bool,
    ) -> Vec<String> {
        use std::io::{BufRead, BufReader};
        let mut monitor = TcpStream::connect(("127.0.0.1", self.port)).unwrap();
        monitor
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        monitor.write_all(b"MONITOR\r\n").unwrap();
        let mut lines = BufReader::new(monitor);
        let mut ok = String::new();
        lines.read_line(&mut ok).unwrap();
        assert_eq!(ok, "+OK\r\n");
        run.await;
        self.command("ECHO end-of-run");
        let mut sent = Vec::new();
        loop {
            let mut line = String::new();
            lines
                .read_line(&mut line)
                .expect("MONITOR shows the end marker");
            // +1764720000.123456 [0 127.0.0.1:50000] "EVALSHA" "…" …, where
            // a script's own calls show `[0 lua]`.
            let Some((_, after)) = line.split_once(" [") else {
                continue;
            };
            let (client, command) = after.split_once("] ").unwrap();
            let name = command.split('"').nth(1).unwrap().to_lowercase();
            if name == "echo" && command.contains("end-of-run") {
                return sent;
            }
            if client.ends_with(" lua") == scripts {
                sent.push(name);
            }
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A Redis Cluster of `masters` nodes (no replicas) on free loopback ports.
pub struct RedisCluster {
    nodes: Vec<(Child, u16)>,
    dir: PathBuf,
}

impl RedisCluster {
    /// Starts the nodes, joins them with `redis-cli --cluster create`, and
    /// waits until every node reports `cluster_state:ok`. A port (or bus
    /// port) that another process takes between [`free_port`] and the spawn
    /// makes its node exit at once; the whole cluster is then started again
    /// on other ports. Nodes already started are stopped on any failure.
    pub fn start(masters: usize) -> Self {
        assert!(masters >= 3, "a Redis Cluster needs at least 3 masters");
        for _ in 0..5 {
            if let Some(cluster) = Self::try_start(masters) {
                return cluster;
            }
        }
        panic!("a Redis Cluster of {masters} nodes found no free loopback ports in 5 tries");
    }

    /// One attempt; `None` when a node exited before it answered.
    fn try_start(masters: usize) -> Option<Self> {
        let ports = cluster_ports(masters);
        // Holds every node from its spawn, so that a panic below stops them.
        let mut cluster = Self {
            nodes: Vec::new(),
            dir: scratch_dir(ports[0]),
        };
        for &port in &ports {
            let conf = format!("nodes-{port}.conf");
            let child = spawn_redis(
                port,
                &cluster.dir,
                &[
                    "--cluster-enabled",
                    "yes",
                    "--cluster-config-file",
                    &conf,
                    "--cluster-node-timeout",
                    "2000",
                    "--logfile",
                    &format!("redis-{port}.log"),
                ],
            );
            cluster.nodes.push((child, port));
        }
        for (child, port) in &mut cluster.nodes {
            let (pid, port) = (child.id(), *port);
            let mut exited = false;
            wait_until("a cluster node to answer", Duration::from_secs(10), || {
                exited = child.try_wait().ok().flatten().is_some();
                exited || answers_as(port, pid)
            });
            if exited {
                return None;
            }
        }
        create_cluster(&ports);
        for &port in &ports {
            wait_until("the cluster to be ok", Duration::from_secs(20), || {
                raw_command(port, "CLUSTER INFO").is_some_and(|r| r.contains("cluster_state:ok"))
            });
        }
        Some(cluster)
    }

    /// The port of the master that holds `key`'s slot.
    pub fn node_of(&self, key: &str) -> u16 {
        master_of(&self.ports(), key)
    }

    /// The process id of the node on `port`.
    pub fn pid_of(&self, port: u16) -> u32 {
        self.nodes
            .iter()
            .find(|(_, p)| *p == port)
            .map(|(child, _)| child.id())
            .expect("a node of this cluster")
    }

    /// The node ports.
    pub fn ports(&self) -> Vec<u16> {
        self.nodes.iter().map(|(_, p)| *p).collect()
    }

    /// The nodes as a comma-separated list of `redis://` URLs, the crate's
    /// cluster URL form.
    pub fn url(&self) -> String {
        self.ports()
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect::<Vec<_>>()
            .join(",")
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        for (child, _) in &mut self.nodes {
            let _ = child.kill();
            let _ = child.wait();
        }
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// A connection to the Redis at `url` (one node or a cluster), with the
/// default timeouts.
#[cfg(feature = "redis")]
pub fn connect(url: &str) -> suprnova::redis_client::RedisConnection {
    use suprnova::redis_client::{RedisConfig, RedisConnection};
    RedisConnection::new(RedisConfig::from_url(url).unwrap()).unwrap()
}

/// `SET key value EX 60` through a plain client, as another application
/// writes a value.
pub async fn set_for_a_minute(
    conn: &mut redis::aio::MultiplexedConnection,
    key: &str,
    value: impl redis::ToRedisArgs,
) {
    let () = redis::cmd("SET")
        .arg(key)
        .arg(value)
        .arg("EX")
        .arg(60)
        .query_async(conn)
        .await
        .unwrap();
}

/// The port, among the nodes on `ports`, of the master that holds `key`'s
/// slot, by `CLUSTER KEYSLOT` and each node's own slot ranges (`CLUSTER
/// NODES`, the `myself` line).
pub fn master_of(ports: &[u16], key: &str) -> u16 {
    let reply = raw_command(ports[0], &format!("CLUSTER KEYSLOT {key}")).unwrap();
    let slot: u16 = reply.trim().trim_start_matches(':').parse().unwrap();
    ports
        .iter()
        .copied()
        .find(|&node| {
            let nodes = raw_command(node, "CLUSTER NODES").unwrap();
            let own = nodes
                .lines()
                .find(|l| l.contains("myself"))
                .unwrap()
                .to_owned();
            own.split_whitespace().skip(8).any(|range| {
                let (low, high) = range.split_once('-').unwrap_or((range, range));
                let (low, high): (u16, u16) = (low.parse().unwrap(), high.parse().unwrap());
                (low..=high).contains(&slot)
            })
        })
        .unwrap_or_else(|| panic!("no node holds slot {slot}"))
}

/// Joins the nodes on `ports` into a cluster of masters only, the slots
/// shared between them (`redis-cli --cluster create`).
pub fn create_cluster(ports: &[u16]) {
    let addresses: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let status = Command::new("redis-cli")
        .arg("--cluster")
        .arg("create")
        .args(&addresses)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run redis-cli --cluster create (install redis-tools)");
    assert!(status.success(), "redis-cli --cluster create failed");
}
